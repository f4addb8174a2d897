#include "supervisor/secrets/secret_vault.h"


#include <algorithm>
#include <cerrno>
#include <ctime>
#include <set>

#include "common/hex.h"
#include "common/log.h"

namespace corral::supervisor {
namespace {

constexpr size_t kMaxNameBytes = 64;

// Variables the daemon sets in every command (exec.cc), or the proxy and trust store need: a
// secret named so would be overwritten, or would break the sandbox.
bool Reserved(std::string_view name) {
  static const std::set<std::string, std::less<>> kReserved = {
      "PATH", "HOME", "USER", "LANG", "TERM", "SHELL", "PWD",
      "http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "no_proxy", "NO_PROXY", "ALL_PROXY", "all_proxy",
      "SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "CURL_CA_BUNDLE",
      "REQUESTS_CA_BUNDLE", "LD_PRELOAD", "LD_LIBRARY_PATH"};
  if (kReserved.count(name)) return true;
  return name.rfind("ANTHROPIC_", 0) == 0 || name.rfind("CORRAL_", 0) == 0 || name.rfind("CLAUDE_", 0) == 0;
}

}  // namespace

Status ValidateSecretName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes) {
    return Status::Error("name: 1 to " + std::to_string(kMaxNameBytes) + " characters", EINVAL);
  }
  const auto word = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; };
  if (!word(name[0]) || !std::all_of(name.begin(), name.end(), [&](char c) { return word(c) || (c >= '0' && c <= '9'); })) {
    return Status::Error("name: a secret's name is the environment variable its placeholder is in: letters, digits "
                         "and '_', not starting with a digit (like GITHUB_TOKEN)",
                         EINVAL);
  }
  if (Reserved(name)) {
    return Status::Error("name: " + std::string(name) + " is a variable corral sets itself; choose another", EINVAL);
  }
  return Status();
}

std::string SecretVault::Context(const std::string& iss, const std::string& sub, const std::string& name) {
  std::string context = "corral secret\n";
  context += iss;
  context += '\0';
  context += sub;
  context += '\0';
  context += name;
  return context;
}

Status SecretVault::Put(const std::string& iss, const std::string& sub, const std::string& name,
                        std::string_view value, const std::vector<SecretBinding>& bindings) {
  RETURN_IF_ERROR(ValidateSecretName(name));
  RETURN_IF_ERROR(ValidateSecretValue(value));
  if (bindings.empty() || bindings.size() > kMaxBindings) {
    return Status::Error("bindings: 1 to " + std::to_string(kMaxBindings) + " bindings", EINVAL);
  }
  for (const SecretBinding& binding : bindings) RETURN_IF_ERROR(ValidateBinding(binding));
  ASSIGN_OR_RETURN(std::optional<SecretRow> existing, store_.GetSecret(iss, sub, name));
  if (!existing) {
    ASSIGN_OR_RETURN(std::vector<SecretRow> rows, store_.ListSecrets(iss, sub));
    if (rows.size() >= kMaxSecretsPerOwner) {
      return Status::Error("there are " + std::to_string(rows.size()) + " secrets here already (the most there may be)",
                           EDQUOT);
    }
  }
  SecretRow row;
  row.iss = iss;
  row.sub = sub;
  row.name = name;
  ASSIGN_OR_RETURN(row.sealed, box_.Seal(value, Context(iss, sub, name)));
  row.bindings = bindings;
  row.created_at = row.updated_at = static_cast<int64_t>(time(nullptr));
  return store_.PutSecret(row);
}

StatusOr<std::vector<SecretRow>> SecretVault::List(const std::string& iss, const std::string& sub) {
  ASSIGN_OR_RETURN(std::vector<SecretRow> rows, store_.ListSecrets(iss, sub));
  for (SecretRow& row : rows) row.sealed.clear();
  return rows;
}

Status SecretVault::IssuerKnown(const std::string& iss) {
  ASSIGN_OR_RETURN(std::optional<IssuerRow> issuer, store_.GetIssuer(iss));
  if (!issuer) return Status::Error("no issuer named " + iss, ENOENT);
  return Status();
}

Status SecretVault::Delete(const std::string& iss, const std::string& sub, const std::string& name) {
  RETURN_IF_ERROR(ValidateSecretName(name));
  Status deleted = store_.DeleteSecret(iss, sub, name);
  if (deleted.error_number() == ENOENT) return Status::Error("no secret named " + name, ENOENT);
  return deleted;
}

StatusOr<std::optional<SecretRow>> SecretVault::Find(const std::string& iss, const std::string& sub,
                                                     const std::string& name) {
  ASSIGN_OR_RETURN(std::optional<SecretRow> own, store_.GetSecret(iss, sub, name));
  if (own || sub.empty()) return own;
  return store_.GetSecret(iss, "", name);
}

StatusOr<std::vector<std::string>> SecretVault::CheckNames(const std::string& iss, const std::string& sub,
                                                           std::vector<std::string> names) {
  if (names.size() > kMaxSecretsPerSandbox) {
    return Status::Error("secrets: a sandbox names at most " + std::to_string(kMaxSecretsPerSandbox), EINVAL);
  }
  std::sort(names.begin(), names.end());
  for (size_t i = 0; i < names.size(); ++i) {
    RETURN_IF_ERROR(ValidateSecretName(names[i]).WithContext("secrets"));
    if (i > 0 && names[i] == names[i - 1]) return Status::Error("secrets: " + names[i] + " is named twice", EINVAL);
    ASSIGN_OR_RETURN(std::optional<SecretRow> row, Find(iss, sub, names[i]));
    if (!row) return Status::Error("secrets: no secret named " + names[i], ENOENT);
  }
  return names;
}

StatusOr<std::vector<SandboxSecret>> SecretVault::Open(const std::string& iss, const std::string& sub,
                                                       const std::string& sandbox_id,
                                                       const std::vector<std::string>& names) {
  std::vector<SandboxSecret> out;
  for (const std::string& name : names) {
    ASSIGN_OR_RETURN(std::optional<SecretRow> row, Find(iss, sub, name));
    if (!row) {
      LogWarn("secrets", "a sandbox names a secret that is gone; its placeholder goes out as it is",
              {{"sandbox", sandbox_id}, {"name", name}});
      continue;
    }
    SandboxSecret secret;
    secret.name = name;
    secret.placeholder = Placeholder(sandbox_id, name);
    secret.bindings = std::move(row->bindings);
    auto value = box_.Open(row->sealed, Context(row->iss, row->sub, row->name));
    if (!value.ok()) return value.status().WithContext("secret " + name);
    secret.value = std::move(*value);
    out.push_back(std::move(secret));
  }
  return out;
}

std::string SecretVault::Placeholder(const std::string& sandbox_id, const std::string& name) const {
  std::string data = sandbox_id;
  data += '\0';
  data += name;
  return "corral-placeholder-" + HexLower(box_.Tag("placeholder", data).substr(0, 16));
}

}  // namespace corral::supervisor
