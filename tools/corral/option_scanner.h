// The small option scanner every `corral` command parses its arguments with, and the checks
// they share (sizes, users, issuer names), and where a command finds the daemon: the API (URL and
// token) or the admin socket.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "tools/corral/remote_options.h"

namespace corral::cli {

struct OptionSpec {
  std::string_view name;  // "--memory"
  char short_name;        // 'i', or 0
  bool takes_value;
};

inline constexpr OptionSpec kUrl{"--url", 0, true};
inline constexpr OptionSpec kToken{"--token", 0, true};
inline constexpr OptionSpec kAdminSocket{"--admin-socket", 0, true};
inline constexpr OptionSpec kJson{"--json", 0, false};

struct Scanned {
  bool help = false;
  std::vector<std::pair<std::string, std::string>> options;  // in order; "" for flags
  std::vector<std::string> positionals;
  std::vector<std::string> command;  // what follows "--" or SANDBOX (exec, shell)

  bool Has(std::string_view name) const {
    for (const auto& [option, value] : options) {
      if (option == name) return true;
    }
    return false;
  }
  // The last value given (an option given twice keeps the later one).
  std::optional<std::string> Value(std::string_view name) const {
    std::optional<std::string> found;
    for (const auto& [option, value] : options) {
      if (option == name) found = value;
    }
    return found;
  }
};

bool LooksLikeOption(const std::string& arg);

// Scans args[begin..]. With `positionals_before_command` (exec, shell: 1), the command starts at
// "--" or at the first non-option after that many positionals; without it, what follows "--"
// is positional. `see` names the help to read in errors ("corral sandbox --help").
StatusOr<Scanned> Scan(const std::vector<std::string>& args, size_t begin, const std::vector<OptionSpec>& specs,
                       std::optional<size_t> positionals_before_command, std::string_view see);

std::vector<OptionSpec> With(std::vector<OptionSpec> specs, std::initializer_list<OptionSpec> more);

// --url or CORRAL_URL, --token or CORRAL_TOKEN.
StatusOr<ServerConfig> ResolveServer(const Scanned& scanned, const EnvLookup& env);
// --admin-socket or CORRAL_ADMIN_SOCKET, else the default.
AdminConfig ResolveAdmin(const Scanned& scanned, const EnvLookup& env);

// "--help", "-h" or "help": a verb command's first word asking for its help.
inline bool IsHelpWord(std::string_view arg) { return arg == "--help" || arg == "-h" || arg == "help"; }

// `out`, marked as only asking for the help text: what a parser returns when asked for help.
template <typename Options>
Options HelpOnly(Options& out) {
  out.help = true;
  return out;
}

// A positive size/count: "--memory: not a size: 'lots'", "--pids: must be above 0".
template <typename Parser>
StatusOr<uint64_t> Positive(const Scanned& scanned, const char* option, Parser parse) {
  auto value = parse(*scanned.Value(option));
  if (!value.ok()) return Status::Error(std::string(option) + ": " + value.status().message());
  if (*value == 0) return Status::Error(std::string(option) + ": must be above 0");
  return *value;
}

// agent or root.
Status CheckUser(const std::optional<std::string>& user);
// 1-64 characters of A-Z a-z 0-9 . _ -; `what` names the argument in the error.
Status CheckIssuerName(const std::string& name, std::string_view what);

}  // namespace corral::cli
