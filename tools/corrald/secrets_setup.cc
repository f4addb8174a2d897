#include "tools/corrald/secrets_setup.h"

#include "common/log.h"
#include "supervisor/egress/secret_tls.h"
#include "tools/corrald/root_files.h"

namespace corral {

StatusOr<SecretsSetup> SetUpSecrets(const supervisor::DaemonConfig& config, supervisor::Store& store,
                                    const std::string& label, supervisor::EgressProxy* egress,
                                    supervisor::SandboxManager& manager) {
  SecretsSetup setup;
  if (config.secrets_key_file.empty()) return setup;
  ASSIGN_OR_RETURN(std::string text, ReadRootSecretFile("secrets.key_file", config.secrets_key_file));
  auto box = supervisor::SecretBox::FromBase64(text);
  std::fill(text.begin(), text.end(), '\0');
  if (!box.ok()) return Status::Error("secrets.key_file: " + config.secrets_key_file + ": " + box.status().message());
  setup.vault = std::make_unique<supervisor::SecretVault>(store, std::move(*box));
  if (egress == nullptr) {
    LogWarn("corrald", "secrets are kept but egress.enabled is off: no sandbox can use them");
  } else {
    auto ca = supervisor::InterceptCa::LoadOrCreate(config.state_dir + "/egress-ca", label);
    if (!ca.ok()) return Status::Error("secrets: " + ca.status().ToString());
    setup.ca = std::move(*ca);
    auto upstream = supervisor::UpstreamTlsContext(config.secrets_ca_file);
    if (!upstream.ok()) return upstream.status();
    egress->EnableSecrets(*setup.vault, *setup.ca, std::move(*upstream));
    setup.trust = std::make_unique<supervisor::TrustBundles>(config.run_dir, setup.ca->certificate_pem());
  }
  manager.SetSecrets(setup.vault.get(), setup.trust.get());
  LogInfo("corrald", "secrets", {{"key_file", config.secrets_key_file}, {"proxy", egress ? "yes" : "no"}});
  return setup;
}

}  // namespace corral
