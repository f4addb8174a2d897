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

StatusOr<Issuers::Changes> Issuers::Refresh() {
  ASSIGN_OR_RETURN(std::vector<IssuerRow> rows, store_.ListIssuers());
  ASSIGN_OR_RETURN(std::vector<RevocationRow> revocations, store_.ListRevocations());
  std::map<std::string, std::string, std::less<>> secrets;
  for (auto& row : rows) secrets.emplace(std::move(row.name), std::move(row.secret));
  Changes changes;
  std::lock_guard lock(mu_);
  for (const auto& [name, secret] : secrets_) {
    auto now = secrets.find(name);
    if (now == secrets.end() || now->second != secret) changes.issuers.insert(name);
  }
  for (const auto& [name, secret] : secrets) changes.added += secrets_.count(name) == 0 ? 1 : 0;
  std::set<std::pair<std::string, std::string>, std::less<>> revoked;
  for (const RevocationRow& r : revocations) {
    revoked.emplace(r.iss, r.jti);
    if (revoked_.count(std::make_pair(r.iss, r.jti)) == 0) changes.revocations.push_back(r);
  }
  secrets_ = std::move(secrets);
  revoked_ = std::move(revoked);
  revocations_ = std::move(revocations);
  return changes;
}

std::vector<RevocationRow> Issuers::Revocations() const {
  std::lock_guard lock(mu_);
  return revocations_;
}

}  // namespace corral::supervisor
