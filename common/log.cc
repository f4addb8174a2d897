#include "common/log.h"

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace corral {
namespace {

LogLevel LevelFromEnv() {
  const char* level = getenv("CORRAL_LOG_LEVEL");
  if (level == nullptr) return LogLevel::kInfo;
  if (strcmp(level, "debug") == 0) return LogLevel::kDebug;
  if (strcmp(level, "warn") == 0) return LogLevel::kWarn;
  if (strcmp(level, "error") == 0) return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<int> g_level{static_cast<int>(LevelFromEnv())};
std::atomic<int> g_fd{2};
std::atomic<LogSink> g_sink{nullptr};

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kError: return "error";
  }
  return "info";
}

}  // namespace

std::string JsonEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 8);
  for (unsigned char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

void SetLogLevel(LogLevel level) { g_level = static_cast<int>(level); }
void SetLogFd(int fd) { g_fd = fd; }
void SetLogSink(LogSink sink) { g_sink = sink; }

void Log(LogLevel level, std::string_view component, std::string_view message, LogFields fields) {
  if (static_cast<int>(level) < g_level.load()) return;
  if (LogSink sink = g_sink.load(); sink != nullptr && sink(level, component, message, fields)) return;
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  struct tm tm;
  gmtime_r(&now.tv_sec, &tm);
  char stamp[64];
  snprintf(stamp, sizeof(stamp), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
           tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (now.tv_nsec / 1000000) % 1000);
  std::string line = "{\"time\":\"";
  line += stamp;
  line += "\",\"level\":\"";
  line += LevelName(level);
  line += "\",\"component\":\"";
  line += JsonEscape(component);
  line += "\",\"msg\":\"";
  line += JsonEscape(message);
  line += '"';
  for (const auto& [key, value] : fields) {
    line += ",\"";
    line += JsonEscape(key);
    line += "\":\"";
    line += JsonEscape(value);
    line += '"';
  }
  line += "}\n";
  const char* data = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = write(g_fd.load(), data, left);
    if (n <= 0) return;
    data += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace corral
