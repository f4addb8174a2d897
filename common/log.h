// Logging for the daemon and the CLI: one JSON object per line on stderr.
//
//   LogInfo("api", "listening", {{"address", "127.0.0.1:7878"}});
//   -> {"time":"2026-11-23T10:00:00.123Z","level":"info","component":"api","msg":"listening","address":"127.0.0.1:7878"}
//
// Fields are string key/value pairs so that nothing here depends on a JSON library. Never log a
// secret, a token or an API key: log what identifies it (issuer name, token id), not its value.
// Thread-safe: each line is written with one write(2).
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace corral {

enum class LogLevel { kDebug, kInfo, kWarn, kError };

using LogFields = std::initializer_list<std::pair<std::string_view, std::string_view>>;

void Log(LogLevel level, std::string_view component, std::string_view message, LogFields fields = {});

inline void LogDebug(std::string_view c, std::string_view m, LogFields f = {}) { Log(LogLevel::kDebug, c, m, f); }
inline void LogInfo(std::string_view c, std::string_view m, LogFields f = {}) { Log(LogLevel::kInfo, c, m, f); }
inline void LogWarn(std::string_view c, std::string_view m, LogFields f = {}) { Log(LogLevel::kWarn, c, m, f); }
inline void LogError(std::string_view c, std::string_view m, LogFields f = {}) { Log(LogLevel::kError, c, m, f); }

// Lines below this level are dropped (default kInfo; CORRAL_LOG_LEVEL=debug|info|warn|error).
void SetLogLevel(LogLevel level);
// Where lines go (default 2). Tests point it at a pipe or a file.
void SetLogFd(int fd);

// A sink that takes lines instead of the fd: corrald under systemd sends them to the journal with
// their fields (common/journal_log.h). It returns false when it could not, and the line goes to the
// fd. nullptr (the default): the fd.
using LogSink = bool (*)(LogLevel level, std::string_view component, std::string_view message, LogFields fields);
void SetLogSink(LogSink sink);

// `text` as the body of a JSON string (quotes, backslashes and control characters escaped).
std::string JsonEscape(std::string_view text);

}  // namespace corral
