#include "supervisor/issuers.h"

#include <cerrno>

namespace corral::supervisor {

StatusOr<std::unique_ptr<Issuers>> Issuers::Load(Store& store) {
  std::unique_ptr<Issuers> issuers(new Issuers(store));
  ASSIGN_OR_RETURN(std::vector<IssuerRow> rows, store.ListIssuers());
  for (auto& row : rows) issuers->secrets_.emplace(row.name, std::move(row.secret));
  ASSIGN_OR_RETURN(issuers->revocations_, store.ListRevocations());
  for (const auto& r : issuers->revocations_) issuers->revoked_.emplace(r.iss, r.jti);
  return issuers;
}

std::optional<std::string> Issuers::Secret(std::string_view issuer) const {
  std::lock_guard lock(mu_);
  auto it = secrets_.find(issuer);
  if (it == secrets_.end()) return std::nullopt;
  return it->second;
}

bool Issuers::Revoked(std::string_view issuer, std::string_view jti) const {
  if (jti.empty()) return false;
  std::lock_guard lock(mu_);
  return revoked_.count(std::pair<std::string, std::string>(std::string(issuer), std::string(jti))) != 0 ||
         revoked_.count(std::pair<std::string, std::string>(std::string(), std::string(jti))) != 0;
}

Status Issuers::Add(const IssuerRow& issuer) {
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(store_.AddIssuer(issuer));
  secrets_[issuer.name] = issuer.secret;
  return Status();
}

Status Issuers::Remove(const std::string& name) {
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(store_.RemoveIssuer(name));
  secrets_.erase(name);
  return Status();
}

Status Issuers::ReplaceSecret(const std::string& name, const std::string& secret) {
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(store_.SetIssuerSecret(name, secret));
  secrets_[name] = secret;
  return Status();
}

StatusOr<std::vector<IssuerRow>> Issuers::List() const { return store_.ListIssuers(); }

Status Issuers::Revoke(const RevocationRow& revocation) {
  if (revocation.jti.empty()) return Status::Error("jti: required", EINVAL);
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(store_.AddRevocation(revocation));
  revoked_.emplace(revocation.iss, revocation.jti);
  revocations_.push_back(revocation);
  return Status();
}

std::vector<RevocationRow> Issuers::Revocations() const {
  std::lock_guard lock(mu_);
  return revocations_;
}

}  // namespace corral::supervisor
