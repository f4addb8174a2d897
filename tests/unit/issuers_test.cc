// The issuers and revoked token ids the daemon verifies tokens with (supervisor/issuers.h), on a
// real SQLite store: each change is in the store before it is in memory, and survives a reload
// (a restart).
#include "supervisor/issuers.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>

#include "common/file_util.h"
#include "tests/testing/temp_dir.h"

namespace corral::supervisor {
namespace {

class IssuersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Reopen();
  }
  void TearDown() override {
    issuers_.reset();
    store_.reset();
  }
  void Reopen() {
    issuers_.reset();
    store_.reset();
    auto store = Store::Open(dir_ + "/corrald.db");
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    auto issuers = Issuers::Load(*store_);
    ASSERT_TRUE(issuers.ok()) << issuers.status().ToString();
    issuers_ = std::move(*issuers);
  }

  test::TempDir tmp_{"issuers"};
  const std::string dir_ = tmp_.path();
  std::unique_ptr<Store> store_;
  std::unique_ptr<Issuers> issuers_;
};

TEST_F(IssuersTest, SecretsAreServedFromMemoryAndSurviveAReload) {
  ASSERT_TRUE(issuers_->Add({"acme", "secret-one", 1}).ok());
  EXPECT_EQ(issuers_->Secret("acme"), "secret-one");
  EXPECT_EQ(issuers_->Secret("other"), std::nullopt);
  EXPECT_EQ(issuers_->Add({"acme", "secret-two", 2}).error_number(), EEXIST);
  EXPECT_EQ(issuers_->Secret("acme"), "secret-one") << "a refused add changes nothing";
  Reopen();
  EXPECT_EQ(issuers_->Secret("acme"), "secret-one");
}

TEST_F(IssuersTest, ReplacingASecretAndRemovingAnIssuerAreKept) {
  ASSERT_TRUE(issuers_->Add({"acme", "old", 1}).ok());
  ASSERT_TRUE(issuers_->Add({"beta", "beta-secret", 1}).ok());
  ASSERT_TRUE(issuers_->ReplaceSecret("acme", "new").ok());
  EXPECT_EQ(issuers_->Secret("acme"), "new");
  EXPECT_EQ(issuers_->ReplaceSecret("nobody", "x").error_number(), ENOENT);
  EXPECT_EQ(issuers_->Secret("nobody"), std::nullopt) << "no issuer is made by a replace";
  ASSERT_TRUE(issuers_->Remove("beta").ok());
  EXPECT_EQ(issuers_->Remove("beta").error_number(), ENOENT);
  Reopen();
  EXPECT_EQ(issuers_->Secret("acme"), "new");
  EXPECT_EQ(issuers_->Secret("beta"), std::nullopt);
}

TEST_F(IssuersTest, RevocationsNameATokenIdForOneIssuerOrForAll) {
  ASSERT_TRUE(issuers_->Revoke({"acme", "t-1", 100}).ok());
  ASSERT_TRUE(issuers_->Revoke({"", "t-2", 101}).ok());
  EXPECT_TRUE(issuers_->Revoked("acme", "t-1"));
  EXPECT_FALSE(issuers_->Revoked("beta", "t-1")) << "revoked for acme only";
  EXPECT_TRUE(issuers_->Revoked("acme", "t-2"));
  EXPECT_TRUE(issuers_->Revoked("beta", "t-2")) << "revoked for every issuer";
  EXPECT_FALSE(issuers_->Revoked("acme", "t-3"));
  EXPECT_FALSE(issuers_->Revoked("acme", "")) << "a token without an id cannot be revoked by id";
  EXPECT_EQ(issuers_->Revoke({"acme", "t-1", 102}).error_number(), EEXIST);
  EXPECT_EQ(issuers_->Revoke({"acme", "", 102}).error_number(), EINVAL);
  Reopen();
  EXPECT_TRUE(issuers_->Revoked("acme", "t-1"));
  EXPECT_TRUE(issuers_->Revoked("beta", "t-2"));
  EXPECT_FALSE(issuers_->Revoked("beta", "t-1"));
  auto listed = issuers_->Revocations();
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0].jti, "t-1");
  EXPECT_EQ(listed[0].revoked_at, 100);
  EXPECT_EQ(listed[1].iss, "");
}

// Another node's changes (a second connection to the same store): Refresh takes them and says
// which tokens they end.
TEST_F(IssuersTest, RefreshTakesWhatAnotherNodeChangedAndSaysWhatEnds) {
  ASSERT_TRUE(issuers_->Add({"acme", std::string(32, 'a'), 1}).ok());
  ASSERT_TRUE(issuers_->Add({"beta", std::string(32, 'b'), 1}).ok());
  ASSERT_TRUE(issuers_->Add({"gamma", std::string(32, 'g'), 1}).ok());
  auto other_store = Store::Open(dir_ + "/corrald.db");
  ASSERT_TRUE(other_store.ok()) << other_store.status().ToString();
  auto other = Issuers::Load(**other_store);
  ASSERT_TRUE(other.ok());
  auto unchanged = issuers_->Refresh();
  ASSERT_TRUE(unchanged.ok()) << unchanged.status().ToString();
  EXPECT_TRUE(unchanged->empty());  // control: nothing changed anywhere

  ASSERT_TRUE((*other)->Add({"delta", std::string(32, 'd'), 2}).ok());
  ASSERT_TRUE((*other)->Remove("beta").ok());
  ASSERT_TRUE((*other)->ReplaceSecret("gamma", std::string(32, 'G')).ok());
  ASSERT_TRUE((*other)->Revoke({"acme", "t-9", 3}).ok());
  EXPECT_EQ(issuers_->Secret("delta"), std::nullopt);  // not seen before the refresh
  EXPECT_FALSE(issuers_->Revoked("acme", "t-9"));

  auto changes = issuers_->Refresh();
  ASSERT_TRUE(changes.ok()) << changes.status().ToString();
  EXPECT_EQ(changes->issuers, (std::set<std::string>{"beta", "gamma"}));
  EXPECT_EQ(changes->added, 1u);
  ASSERT_EQ(changes->revocations.size(), 1u);
  EXPECT_EQ(changes->revocations[0].jti, "t-9");
  EXPECT_EQ(issuers_->Secret("delta"), std::string(32, 'd'));
  EXPECT_EQ(issuers_->Secret("beta"), std::nullopt);
  EXPECT_EQ(issuers_->Secret("gamma"), std::string(32, 'G'));
  EXPECT_EQ(issuers_->Secret("acme"), std::string(32, 'a'));
  EXPECT_TRUE(issuers_->Revoked("acme", "t-9"));
  EXPECT_EQ(issuers_->Revocations().size(), 1u);
  auto again = issuers_->Refresh();
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->empty());
}

}  // namespace
}  // namespace corral::supervisor
