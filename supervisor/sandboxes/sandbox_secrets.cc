// SandboxManager: the secrets a sandbox may use (sandbox_manager.h; issue 21): which it names,
// their placeholders in its commands' environment, and its trust store.
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "supervisor/egress/egress_proxy.h"
#include "supervisor/sandboxes/sandbox_manager.h"
#include "supervisor/sandboxes/trust_bundle.h"
#include "supervisor/secrets/secret_vault.h"

namespace corral::supervisor {

StatusOr<std::vector<std::string>> SandboxManager::CheckSecretNames(const std::string& iss, const std::string& sub,
                                                                    std::vector<std::string> names) const {
  if (names.empty()) return names;
  if (vault_ == nullptr) {
    return Status::Error("secrets: this daemon keeps no secrets (secrets.key_file is not set)", ENOTSUP);
  }
  if (egress_ == nullptr) {
    return Status::Error("secrets: a secret goes out through the egress proxy, which is off on this daemon "
                         "(egress.enabled)",
                         EINVAL);
  }
  return vault_->CheckNames(iss, sub, std::move(names));
}

std::vector<std::string> SandboxManager::SecretEnvironment(const SandboxRow& row) const {
  std::vector<std::string> env;
  if (vault_ == nullptr || row.secrets.empty()) return env;
  for (const std::string& name : row.secrets) env.push_back(name + "=" + vault_->Placeholder(row.id, name));
  if (trust_ != nullptr && trust_->Bound(row.id)) {
    for (std::string& var : TrustBundles::Environment()) env.push_back(std::move(var));
  }
  return env;
}

StatusOr<SandboxRow> SandboxManager::SetSecretNames(const Caller& caller, const std::string& id,
                                                    std::vector<std::string> names, bool& ca_trusted) {
  ASSIGN_OR_RETURN(SandboxRow row, Owned(caller, id));
  ASSIGN_OR_RETURN(names, CheckSecretNames(row.iss, row.sub, std::move(names)));
  RETURN_IF_ERROR(store_.SetSandboxSecrets(id, names));
  row.secrets = names;
  const bool running = live_.count(id) > 0;
  if (egress_ != nullptr && running) egress_->SetSecrets(id, row.iss, row.sub, names);
  ca_trusted = !running || (trust_ != nullptr && trust_->Bound(id));
  (void)store_.AppendEvent(id, "sandbox.secrets", nlohmann::json{{"secrets", names}}.dump());
  LogInfo("sandbox", "secrets changed", {{"sandbox", id}, {"secrets", nlohmann::json(names).dump()}});
  return row;
}

}  // namespace corral::supervisor
