// The values the sandbox manager takes and gives: who asks (Caller), what their token allows
// (UserCaps), what they ask for (a new sandbox, a fork, a command). Plain values: resource limits
// are isolation::ResourceLimits, egress rules EgressRules (egress_policy.h), budgets Budget
// (budget.h), as everywhere between the API's edge and the store; admission.h holds requests
// against the daemon's configuration.
#pragma once

#include <cerrno>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "isolation/resource_limits.h"
#include "supervisor/relay/budget.h"
#include "supervisor/egress/egress_policy.h"
#include "supervisor/sandboxes/layer_kind.h"

namespace corral::supervisor {

struct Caller {
  std::string iss;
  std::string sub;
  bool admin = false;  // the admin socket: every sandbox
  Budget budget;       // the token's (no amounts: compute not limited, no model use)
};

// What the issuer allows this user: the token's `limits` claim (api/jwt.h parses it into this)
// and its scopes. Unset: the daemon's maxima.
struct UserCaps {
  isolation::ResourceLimits resources;      // per sandbox: memory, cpus, pids, disk
  std::optional<uint64_t> sandboxes;        // how many sandboxes the user may own
  std::optional<uint64_t> idle_timeout_s;   // the longest idle timeout the user may set
  std::optional<uint64_t> commands;         // concurrent commands per sandbox
  std::optional<uint64_t> sessions;         // agent sessions running at once
  // limits.egress: caps on egress rules, laid over the daemon's egress.allowed_*; unset: those.
  std::optional<EgressRulesChange> egress;
  bool full_network = false;  // the scope unsafe:full_network: it may create "network": "full" sandboxes
  // limits.images: the images the user may create sandboxes of, by name ("python:3.12", "host"),
  // a trailing "*" matching any rest ("python:*", "acme/*"); unset: any image.
  std::optional<std::vector<std::string>> images;

  bool operator==(const UserCaps&) const = default;
};

struct CreateRequest {
  std::string name;
  std::string image = "host";  // "host", an image's name ("python:3.12") or its digest
  isolation::ResourceLimits limits;  // memory, cpus, pids, disk; unset: the config's defaults
  std::optional<uint64_t> idle_timeout_s;
  bool start = true;
  std::string snapshot;  // "snap_...": start from a copy of it
  std::optional<EgressRulesChange> egress;  // laid over the config's defaults; unset: those (within the caps)
  std::string network = "loopback";  // "loopback" | "full" (supervisor/sandboxes/full_network.h; needs caps.full_network)
  std::vector<std::string> secrets;  // the secrets it may use, by name (sandbox_secrets.cc)
};

// A stopped sandbox's layer, or a snapshot's, packed to move to another node
// (SandboxManager::PackForMove).
struct MovePack {
  std::string id;          // "sb_..." or "snap_..."
  std::string path;        // the tar, in <state_dir>/moves/
  uint64_t bytes = 0;
  std::string sha256;      // hex, of the whole tar
  LayerKind kind = LayerKind::kImage;
  int64_t uid_base = 0;    // the range its files belong to on the node it leaves
};

// What the node a sandbox moves to is told of it (SandboxManager::AdoptMove).
struct MoveManifest {
  std::string from_node;
  uint64_t bytes = 0;
  std::string sha256;
  LayerKind kind = LayerKind::kImage;
  int64_t uid_base = 0;
};

// Where it went (SandboxManager::AdoptMove).
struct Moved {
  std::string id;
  std::string node_id;
  int64_t uid_base = 0;    // of its files now
};

// A layer kind's name between nodes: "image", "quota_dir".
const char* LayerKindName(LayerKind kind);
StatusOr<LayerKind> LayerKindNamed(const std::string& name);

struct ForkRequest {
  std::string name;  // "": the source's
  bool start = true;
};

// A sandbox's name (CreateRequest, ForkRequest): a label of at most 128 bytes, without control
// characters (a NUL could not be stored in every engine, and none belongs in a label).
inline Status CheckSandboxName(const std::string& name) {
  if (name.size() > 128) return Status::Error("name: at most 128 characters", EINVAL);
  for (unsigned char c : name) {
    if (c < 0x20 || c == 0x7f) return Status::Error("name: control characters are not allowed", EINVAL);
  }
  return Status();
}

struct ExecSpec {
  std::string sandbox;
  std::vector<std::string> argv;
  std::vector<std::string> env;  // KEY=VALUE
  std::string cwd;               // "" = the user's home
  std::string user = "agent";    // agent | root | "": root if the image's USER is root, else agent
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

}  // namespace corral::supervisor
