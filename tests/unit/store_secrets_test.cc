// The store's secrets (store_secrets.cc), on both engines: kept sealed by owner and name, with
// their bindings; a put of the same name replaces the value and bindings; one owner's are not
// another's (an issuer's own, with sub empty, are neither user's).
#include <gtest/gtest.h>

#include <cerrno>
#include <string>

#include "supervisor/store/store.h"
#include "tests/unit/store_test_util.h"

namespace corral::supervisor {
namespace {

SecretRow Secret(const std::string& sub, const std::string& name, const std::string& sealed, int64_t at) {
  SecretRow row;
  row.iss = "corp";
  row.sub = sub;
  row.name = name;
  row.sealed = sealed;
  SecretBinding binding;
  binding.hosts = {"github.com"};
  row.bindings = {binding};
  row.created_at = row.updated_at = at;
  return row;
}

TEST_P(StoreEngineTest, SecretsAreKeptByOwnerAndName) {
  // Any bytes: a sealed value is binary (NUL, invalid UTF-8).
  const std::string sealed("\x01\x00\xff\xfe sealed", 12);
  ASSERT_TRUE(store_->PutSecret(Secret("alice", "GITHUB_TOKEN", sealed, 10)).ok());
  ASSERT_TRUE(store_->PutSecret(Secret("alice", "NPM_TOKEN", "n", 11)).ok());
  ASSERT_TRUE(store_->PutSecret(Secret("bob", "GITHUB_TOKEN", "b", 12)).ok());
  ASSERT_TRUE(store_->PutSecret(Secret("", "GITHUB_TOKEN", "issuer's", 13)).ok());

  auto got = store_->GetSecret("corp", "alice", "GITHUB_TOKEN");
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status().ToString();
  EXPECT_EQ((*got)->sealed, sealed);
  ASSERT_EQ((*got)->bindings.size(), 1u);
  EXPECT_EQ((*got)->bindings[0].hosts, std::vector<std::string>{"github.com"});
  EXPECT_EQ(store_->GetSecret("corp", "bob", "GITHUB_TOKEN")->value().sealed, "b");
  EXPECT_EQ(store_->GetSecret("corp", "", "GITHUB_TOKEN")->value().sealed, "issuer's");
  EXPECT_FALSE(store_->GetSecret("other", "alice", "GITHUB_TOKEN")->has_value());
  EXPECT_FALSE(store_->GetSecret("corp", "carol", "GITHUB_TOKEN")->has_value());

  auto listed = store_->ListSecrets("corp", "alice");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].name, "GITHUB_TOKEN");
  EXPECT_EQ((*listed)[1].name, "NPM_TOKEN");
  EXPECT_EQ(store_->ListSecrets("corp", "")->size(), 1u);

  // The same name again: the value and bindings replaced, created_at kept.
  SecretRow again = Secret("alice", "GITHUB_TOKEN", "new", 20);
  again.bindings[0].hosts = {"*.github.com"};
  ASSERT_TRUE(store_->PutSecret(again).ok());
  auto replaced = *store_->GetSecret("corp", "alice", "GITHUB_TOKEN");
  EXPECT_EQ(replaced->sealed, "new");
  EXPECT_EQ(replaced->bindings[0].hosts, std::vector<std::string>{"*.github.com"});
  EXPECT_EQ(replaced->created_at, 10);
  EXPECT_EQ(replaced->updated_at, 20);
  EXPECT_EQ(store_->ListSecrets("corp", "alice")->size(), 2u);

  ASSERT_TRUE(store_->DeleteSecret("corp", "alice", "GITHUB_TOKEN").ok());
  EXPECT_FALSE(store_->GetSecret("corp", "alice", "GITHUB_TOKEN")->has_value());
  EXPECT_EQ(store_->DeleteSecret("corp", "alice", "GITHUB_TOKEN").error_number(), ENOENT);
  EXPECT_TRUE(store_->GetSecret("corp", "bob", "GITHUB_TOKEN")->has_value());  // not bob's
}

TEST_P(StoreEngineTest, ASandboxKeepsTheNamesOfItsSecrets) {
  SandboxRow row = NewSandbox("sb_sec", "alice");
  row.secrets = {"GITHUB_TOKEN", "NPM_TOKEN"};
  ASSERT_TRUE(store_->CreateSandbox(row, kUidFirst, kUidStep, 8).ok());
  EXPECT_EQ(store_->GetSandbox("sb_sec")->value().secrets, row.secrets);
  ASSERT_TRUE(store_->SetSandboxSecrets("sb_sec", {"NPM_TOKEN"}).ok());
  SandboxRow read = store_->GetSandbox("sb_sec")->value();
  EXPECT_EQ(read.secrets, std::vector<std::string>{"NPM_TOKEN"});
  // An update of the rest of the row (read before the change) does not undo it.
  row.state = "running";
  ASSERT_TRUE(store_->UpdateSandbox(row).ok());
  EXPECT_EQ(store_->GetSandbox("sb_sec")->value().secrets, std::vector<std::string>{"NPM_TOKEN"});
  EXPECT_EQ(store_->GetSandbox("sb_sec")->value().state, "running");
  ASSERT_TRUE(store_->SetSandboxSecrets("sb_sec", {}).ok());
  EXPECT_TRUE(store_->GetSandbox("sb_sec")->value().secrets.empty());
  EXPECT_EQ(store_->SetSandboxSecrets("sb_none", {"X"}).error_number(), ENOENT);
  // A row from before the column (''): none.
  RawExec("UPDATE sandboxes SET secrets_json = '' WHERE id = 'sb_sec'");
  EXPECT_TRUE(store_->GetSandbox("sb_sec")->value().secrets.empty());
}

TEST_P(StoreEngineTest, RemovingAnIssuerRemovesItsSecrets) {
  ASSERT_TRUE(store_->AddIssuer(IssuerRow{"corp", std::string(32, 'k'), 1}).ok());
  ASSERT_TRUE(store_->AddIssuer(IssuerRow{"other", std::string(32, 'o'), 1}).ok());
  ASSERT_TRUE(store_->PutSecret(Secret("alice", "GITHUB_TOKEN", "a", 10)).ok());
  ASSERT_TRUE(store_->PutSecret(Secret("", "GITHUB_TOKEN", "i", 10)).ok());
  SecretRow others = Secret("alice", "GITHUB_TOKEN", "o", 10);
  others.iss = "other";
  ASSERT_TRUE(store_->PutSecret(others).ok());
  ASSERT_TRUE(store_->RemoveIssuer("corp").ok());
  EXPECT_FALSE(store_->GetSecret("corp", "alice", "GITHUB_TOKEN")->has_value());
  EXPECT_FALSE(store_->GetSecret("corp", "", "GITHUB_TOKEN")->has_value());
  EXPECT_TRUE(store_->GetSecret("other", "alice", "GITHUB_TOKEN")->has_value());  // the control
}

CORRAL_STORE_ON_BOTH_ENGINES();

}  // namespace
}  // namespace corral::supervisor
