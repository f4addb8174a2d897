// corral secret: a user's secrets (docs/PROTOCOL.md, "Secrets"), or with --issuer an issuer's on
// the admin socket. A value is read from stdin or a file, never from the command line (where
// `ps` and shell history would keep it), and never printed.
//
//   corral secret put NAME --bind JSON [--bind JSON]... [--value-file FILE]   (else stdin)
//   corral secret ls [--json]
//   corral secret rm NAME
//   ... --issuer ISS [--admin-socket PATH]   an issuer's secrets, for all its users
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "tools/corral/remote_options.h"

namespace corral::cli {

struct SecretOptions {
  enum class Verb { kPut, kList, kRemove };
  bool help = false;
  Verb verb = Verb::kList;
  std::string name;                     // put, rm
  std::vector<std::string> bindings;    // put: each a binding's JSON object (or a list of them)
  std::optional<std::string> value_file;  // put: else stdin
  std::string issuer;                   // "": the token's user
  ServerConfig server;                  // without --issuer
  AdminConfig admin;                    // with --issuer
  bool json = false;
};

// `args` follow "secret".
StatusOr<SecretOptions> ParseSecretOptions(const std::vector<std::string>& args, const EnvLookup& env);
const char* SecretUsage();
int RunSecretCommand(const SecretOptions& options);

// The request body of a put: {"value", "bindings": [...]} from the --bind texts (EINVAL naming the
// one that is not JSON).
StatusOr<nlohmann::json> SecretPutBody(const std::vector<std::string>& bindings, const std::string& value);

}  // namespace corral::cli
