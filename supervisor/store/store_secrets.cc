// The store's secrets: sealed values and their bindings, by owner and name.
#include <mutex>

#include "common/log.h"
#include "supervisor/store/store.h"
#include "supervisor/store/store_sql.h"

namespace corral::supervisor {

using namespace store_internal;  // the store's own SQL helpers

namespace {

constexpr std::string_view kSecretColumns = "iss, sub, name, sealed, bindings_json, created_at, updated_at";

SecretRow ReadSecret(const SqlRow& r) {
  SecretRow row;
  row.iss = r.Text(0);
  row.sub = r.Text(1);
  row.name = r.Text(2);
  row.sealed = r.Text(3);
  auto bindings = ParseSecretBindings(nlohmann::json::parse(r.Text(4), nullptr, false), "stored bindings");
  if (bindings.ok()) {
    row.bindings = std::move(*bindings);
  } else {
    // Written by hand or by a bug: the secret goes nowhere rather than somewhere unintended.
    LogError("store", "a secret's stored bindings do not parse; it binds nowhere",
             {{"iss", row.iss}, {"sub", row.sub}, {"name", row.name}, {"error", bindings.status().ToString()}});
  }
  row.created_at = r.Int(5);
  row.updated_at = r.Int(6);
  return row;
}

}  // namespace

Status Store::PutSecret(const SecretRow& row) {
  const std::string bindings = SecretBindingsJson(row.bindings).dump();
  std::lock_guard lock(mu_);
  return Run(db_,
             Sql({"INSERT INTO secrets (", kSecretColumns,
                  ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (iss, sub, name) DO UPDATE SET "
                  "sealed = excluded.sealed, bindings_json = excluded.bindings_json, updated_at = excluded.updated_at"}),
             {row.iss, row.sub, row.name, Blob{row.sealed}, bindings, row.created_at, row.updated_at},
             "put secret " + row.name);
}

StatusOr<std::optional<SecretRow>> Store::GetSecret(const std::string& iss, const std::string& sub,
                                                    const std::string& name) {
  std::optional<SecretRow> found;
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(db_->Execute(Sql({"SELECT ", kSecretColumns, " FROM secrets WHERE iss = ?1 AND sub = ?2 AND name = ?3"}),
                               {iss, sub, name}, "get secret " + name,
                               [&found](const SqlRow& r) { found = ReadSecret(r); })
                      .status());
  return found;
}

StatusOr<std::vector<SecretRow>> Store::ListSecrets(const std::string& iss, const std::string& sub) {
  std::vector<SecretRow> rows;
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(db_->Execute(Sql({"SELECT ", kSecretColumns, " FROM secrets WHERE iss = ?1 AND sub = ?2 ORDER BY name"}),
                               {iss, sub}, "list the secrets of " + iss + " " + sub,
                               [&rows](const SqlRow& r) { rows.push_back(ReadSecret(r)); })
                      .status());
  return rows;
}

Status Store::DeleteSecret(const std::string& iss, const std::string& sub, const std::string& name) {
  std::lock_guard lock(mu_);
  return RunOnExistingRow(db_, "DELETE FROM secrets WHERE iss = ?1 AND sub = ?2 AND name = ?3", {iss, sub, name},
                          "delete secret " + name);
}

}  // namespace corral::supervisor
