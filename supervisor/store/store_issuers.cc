// The store's issuers and revoked token ids.
#include "supervisor/store/store.h"

#include <mutex>

#include "supervisor/store/store_sql.h"

namespace corral::supervisor {

using namespace store_internal;  // the store's own SQL helpers

Status Store::AddIssuer(const IssuerRow& issuer) {
  std::lock_guard lock(mu_);
  return Run(db_, InsertSql("issuers", kIssuerColumns),
             Values(issuer), "add issuer " + issuer.name);
}

StatusOr<std::optional<IssuerRow>> Store::GetIssuer(const std::string& name) {
  std::lock_guard lock(mu_);
  return QueryOne<IssuerRow>(db_, GetSql("issuers", kIssuerColumns),
                             {name}, "get issuer " + name);
}

StatusOr<std::vector<IssuerRow>> Store::ListIssuers() {
  std::lock_guard lock(mu_);
  return Query<IssuerRow>(db_, Sql({"SELECT ", kIssuerColumns, " FROM issuers ORDER BY name"}), {},
                          "list issuers");
}

Status Store::RemoveIssuer(const std::string& name) {
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(RunOnExistingRow(db_, "DELETE FROM issuers WHERE name = ?1", {name}, "remove issuer " + name));
  // Its users' secrets and its own go with it: an issuer added later under the name gets none.
  return Run(db_, "DELETE FROM secrets WHERE iss = ?1", {name}, "remove the secrets of issuer " + name);
}

Status Store::SetIssuerSecret(const std::string& name, const std::string& secret) {
  std::lock_guard lock(mu_);
  return RunOnExistingRow(db_, "UPDATE issuers SET secret = ?2 WHERE name = ?1", {name, secret},
                          "replace the secret of issuer " + name);
}

Status Store::AddRevocation(const RevocationRow& revocation) {
  std::lock_guard lock(mu_);
  return Run(db_, InsertSql("revocations", kRevocationColumns),
             Values(revocation), "revoke token " + revocation.jti);
}

StatusOr<std::vector<RevocationRow>> Store::ListRevocations() {
  std::lock_guard lock(mu_);
  return Query<RevocationRow>(db_, Sql({"SELECT ", kRevocationColumns, " FROM revocations ORDER BY revoked_at, jti"}),
                              {}, "list revocations");
}

}  // namespace corral::supervisor
