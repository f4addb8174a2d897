// The vault (supervisor/secrets/secret_vault.h) over a real store: values sealed and opened for a
// sandbox, a user's secret shadowing its issuer's, names checked, placeholders stable per
// (sandbox, name) and different across either; values never listed.
#include <gtest/gtest.h>

#include <cerrno>
#include <string>

#include "supervisor/secrets/secret_vault.h"
#include "tests/unit/store_test_util.h"

namespace corral::supervisor {
namespace {

std::vector<SecretBinding> GithubBinding() {
  SecretBinding binding;
  binding.hosts = {"github.test"};
  return {binding};
}

class SecretVaultTest : public StoreFixtureOf<::testing::Test> {
 protected:
  StoreBackend backend() const override { return StoreBackend::kSqlite; }
  void SetUp() override {
    StoreFixtureOf::SetUp();
    vault_ = std::make_unique<SecretVault>(*store_, *SecretBox::FromKey(std::string(32, 'k')));
  }
  std::unique_ptr<SecretVault> vault_;
};

TEST_F(SecretVaultTest, AValueIsSealedInTheStoreAndOpensForTheSandbox) {
  ASSERT_TRUE(vault_->Put("corp", "alice", "GITHUB_TOKEN", "ghp_value_1", GithubBinding()).ok());
  auto row = store_->GetSecret("corp", "alice", "GITHUB_TOKEN");
  ASSERT_TRUE(row.ok() && row->has_value());
  EXPECT_EQ((*row)->sealed.find("ghp_value_1"), std::string::npos);  // never in clear
  auto opened = vault_->Open("corp", "alice", "sb_1", {"GITHUB_TOKEN"});
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  ASSERT_EQ(opened->size(), 1u);
  EXPECT_EQ((*opened)[0].value, "ghp_value_1");
  EXPECT_EQ((*opened)[0].placeholder, vault_->Placeholder("sb_1", "GITHUB_TOKEN"));
  EXPECT_EQ((*opened)[0].bindings, GithubBinding());
  // Listed without the value.
  auto listed = vault_->List("corp", "alice");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_TRUE((*listed)[0].sealed.empty());
}

TEST_F(SecretVaultTest, ASealedValueCopiedToAnotherRowDoesNotOpen) {
  ASSERT_TRUE(vault_->Put("corp", "alice", "GITHUB_TOKEN", "alice's", GithubBinding()).ok());
  ASSERT_TRUE(vault_->Put("corp", "bob", "GITHUB_TOKEN", "bob's", GithubBinding()).ok());
  SecretRow stolen = **store_->GetSecret("corp", "alice", "GITHUB_TOKEN");
  stolen.sub = "bob";
  ASSERT_TRUE(store_->PutSecret(stolen).ok());
  auto opened = vault_->Open("corp", "bob", "sb_1", {"GITHUB_TOKEN"});
  EXPECT_EQ(opened.status().error_number(), EBADMSG);
  // The control: alice's own still opens.
  EXPECT_EQ((*vault_->Open("corp", "alice", "sb_1", {"GITHUB_TOKEN"}))[0].value, "alice's");
}

TEST_F(SecretVaultTest, AUsersSecretShadowsItsIssuersAndOthersSeeTheIssuers) {
  ASSERT_TRUE(vault_->Put("corp", "", "NPM_TOKEN", "issuer's", GithubBinding()).ok());
  ASSERT_TRUE(vault_->Put("corp", "alice", "NPM_TOKEN", "alice's", GithubBinding()).ok());
  EXPECT_EQ((*vault_->Open("corp", "alice", "sb_a", {"NPM_TOKEN"}))[0].value, "alice's");
  EXPECT_EQ((*vault_->Open("corp", "bob", "sb_b", {"NPM_TOKEN"}))[0].value, "issuer's");
  // Another issuer's users see neither.
  EXPECT_TRUE(vault_->Open("other", "bob", "sb_c", {"NPM_TOKEN"})->empty());
  EXPECT_EQ(vault_->CheckNames("other", "bob", {"NPM_TOKEN"}).status().error_number(), ENOENT);
}

TEST_F(SecretVaultTest, NamesAreCheckedSortedAndKnown) {
  ASSERT_TRUE(vault_->Put("corp", "alice", "B_TOKEN", "b", GithubBinding()).ok());
  ASSERT_TRUE(vault_->Put("corp", "alice", "A_TOKEN", "a", GithubBinding()).ok());
  auto names = vault_->CheckNames("corp", "alice", {"B_TOKEN", "A_TOKEN"});
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, (std::vector<std::string>{"A_TOKEN", "B_TOKEN"}));
  EXPECT_EQ(vault_->CheckNames("corp", "alice", {"A_TOKEN", "A_TOKEN"}).status().error_number(), EINVAL);
  EXPECT_EQ(vault_->CheckNames("corp", "alice", {"C_TOKEN"}).status().error_number(), ENOENT);
  EXPECT_EQ(vault_->CheckNames("corp", "alice", {"bad-name"}).status().error_number(), EINVAL);
  std::vector<std::string> many(kMaxSecretsPerSandbox + 1, "A_TOKEN");
  EXPECT_EQ(vault_->CheckNames("corp", "alice", many).status().error_number(), EINVAL);
}

TEST_F(SecretVaultTest, BadNamesValuesAndBindingsAreRefused) {
  for (const char* name : {"", "1ABC", "A-B", "A B", "PATH", "HTTPS_PROXY", "SSL_CERT_FILE", "ANTHROPIC_API_KEY",
                           "CORRAL_X", "LD_PRELOAD"}) {
    EXPECT_EQ(vault_->Put("corp", "alice", name, "v", GithubBinding()).error_number(), EINVAL) << name;
  }
  EXPECT_EQ(vault_->Put("corp", "alice", "T", "line\r\nX-Evil: 1", GithubBinding()).error_number(), EINVAL);
  EXPECT_EQ(vault_->Put("corp", "alice", "T", "", GithubBinding()).error_number(), EINVAL);
  EXPECT_EQ(vault_->Put("corp", "alice", "T", "v", {}).error_number(), EINVAL);
  // The control: the same, well formed.
  EXPECT_TRUE(vault_->Put("corp", "alice", "T", "v", GithubBinding()).ok());
  EXPECT_TRUE(vault_->Put("corp", "alice", "_lower_ok2", "v", GithubBinding()).ok());
}

TEST_F(SecretVaultTest, PlaceholdersAreStablePerSandboxAndNameAndPerKey) {
  const std::string a = vault_->Placeholder("sb_1", "GITHUB_TOKEN");
  EXPECT_EQ(a, vault_->Placeholder("sb_1", "GITHUB_TOKEN"));
  EXPECT_NE(a, vault_->Placeholder("sb_2", "GITHUB_TOKEN"));
  EXPECT_NE(a, vault_->Placeholder("sb_1", "NPM_TOKEN"));
  EXPECT_EQ(a.rfind("corral-placeholder-", 0), 0u);
  EXPECT_EQ(a.size(), std::string("corral-placeholder-").size() + 32);
  SecretVault other(*store_, *SecretBox::FromKey(std::string(32, 'o')));
  EXPECT_NE(a, other.Placeholder("sb_1", "GITHUB_TOKEN"));
}

TEST_F(SecretVaultTest, AnOwnerKeepsAtMostAHundred) {
  for (size_t i = 0; i < kMaxSecretsPerOwner; ++i) {
    ASSERT_TRUE(vault_->Put("corp", "alice", "T" + std::to_string(i), "v", GithubBinding()).ok());
  }
  EXPECT_EQ(vault_->Put("corp", "alice", "ONE_MORE", "v", GithubBinding()).error_number(), EDQUOT);
  EXPECT_TRUE(vault_->Put("corp", "alice", "T7", "replaced", GithubBinding()).ok());  // a replacement is no more
  EXPECT_TRUE(vault_->Put("corp", "bob", "ONE_MORE", "v", GithubBinding()).ok());
}

TEST_F(SecretVaultTest, ADeletedSecretIsLeftOutOfASandboxThatNamesIt) {
  ASSERT_TRUE(vault_->Put("corp", "alice", "GITHUB_TOKEN", "v", GithubBinding()).ok());
  ASSERT_TRUE(vault_->Delete("corp", "alice", "GITHUB_TOKEN").ok());
  auto opened = vault_->Open("corp", "alice", "sb_1", {"GITHUB_TOKEN"});
  ASSERT_TRUE(opened.ok());
  EXPECT_TRUE(opened->empty());
  EXPECT_EQ(vault_->Delete("corp", "alice", "GITHUB_TOKEN").error_number(), ENOENT);
}

}  // namespace
}  // namespace corral::supervisor
