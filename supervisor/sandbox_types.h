// The values the sandbox manager takes and gives: who asks (Caller), what their token allows
// (UserCaps), what they ask for (a new sandbox, a fork, a command), and the limits a sandbox gets
// (SandboxLimits). Plain values; admission.h holds requests against the daemon's configuration.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "supervisor/budget.h"

namespace corral::supervisor {

struct Caller {
  std::string iss;
  std::string sub;
  bool admin = false;  // the admin socket: every sandbox
  Budget budget;       // the token's (no amounts: compute not limited, no model use)
};

// What the issuer allows this user (from the token); unset: the daemon's maxima.
struct UserCaps {
  std::optional<uint64_t> sandboxes;
  std::optional<uint64_t> memory_bytes;
  std::optional<uint64_t> cpu_millicores;
  std::optional<uint64_t> pids;
  std::optional<uint64_t> disk_bytes;
  std::optional<uint64_t> idle_timeout_s;
  std::optional<uint64_t> commands;
  std::optional<uint64_t> sessions;
  std::string egress_json;  // the token's limits.egress ({"domains", "ports", "cidrs"}); "" = none
  bool full_network = false;  // the scope unsafe:full_network: it may create "network": "full" sandboxes
};

struct CreateRequest {
  std::string name;
  std::string image = "host";
  std::optional<uint64_t> memory_bytes;
  std::optional<uint64_t> cpu_millicores;
  std::optional<uint64_t> pids;
  std::optional<uint64_t> disk_bytes;
  std::optional<uint64_t> idle_timeout_s;
  bool start = true;
  std::string snapshot;  // "snap_...": start from a copy of it
  std::string egress_json;  // its egress rules ({"domains", "ports", "cidrs"}); "" = the config's defaults
  std::string network = "loopback";  // "loopback" | "full" (supervisor/full_network.h; needs caps.full_network)
};

struct ForkRequest {
  std::string name;  // "": the source's
  bool start = true;
};

struct ExecSpec {
  std::string sandbox;
  std::vector<std::string> argv;
  std::vector<std::string> env;  // KEY=VALUE
  std::string cwd;               // "" = the user's home
  std::string user = "agent";    // agent | root
  bool stdin_open = false;
  bool pty = false;
  uint16_t rows = 24;
  uint16_t cols = 80;
  // The command's stdio pipes stay the daemon's: nothing inside, the command included, can
  // open them by path. For a stream the daemon trusts, an agent session's events: its tool
  // calls run as the same user, and could otherwise write into it through /proc/<pid>/fd/1.
  // Otherwise the pipes belong to the command's user, who may reopen them (/dev/stdout).
  bool private_stdio = false;
};

// The effective limits of a sandbox, as stored (limits_json) and shown by the API.
struct SandboxLimits {
  uint64_t memory_bytes = 0;
  uint64_t cpu_millicores = 0;
  uint64_t pids = 0;
  uint64_t disk_bytes = 0;
};

}  // namespace corral::supervisor
