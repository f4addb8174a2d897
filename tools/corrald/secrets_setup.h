// corrald's secrets ([secrets]; issue 21): the vault over the store, the egress proxy's CA and the
// sandboxes' trust bundles, handed to the manager and the proxy. Nothing when secrets.key_file is
// unset: a sandbox naming secrets is then refused, and the API's secret routes answer 501.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "supervisor/config.h"
#include "supervisor/egress/egress_proxy.h"
#include "supervisor/egress/intercept_ca.h"
#include "supervisor/sandboxes/sandbox_manager.h"
#include "supervisor/sandboxes/trust_bundle.h"
#include "supervisor/secrets/secret_vault.h"
#include "supervisor/store/store.h"

namespace corral {

struct SecretsSetup {
  std::unique_ptr<supervisor::SecretVault> vault;
  std::unique_ptr<supervisor::InterceptCa> ca;          // with the egress proxy only
  std::unique_ptr<supervisor::TrustBundles> trust;      // with the egress proxy only
};

// `egress` null: egress.enabled is off (secrets can be kept, not used). `label` names this node in
// the CA's subject.
StatusOr<SecretsSetup> SetUpSecrets(const supervisor::DaemonConfig& config, supervisor::Store& store,
                                    const std::string& label, supervisor::EgressProxy* egress,
                                    supervisor::SandboxManager& manager);

}  // namespace corral
