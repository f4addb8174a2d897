// Secrets sealed at rest (supervisor/secrets/secret_box.h): what is sealed opens with the same key
// and context only; every changed byte, another key, another context or version is refused.
#include "supervisor/secrets/secret_box.h"

#include <gtest/gtest.h>

#include <string>

#include "common/base64.h"

namespace corral::supervisor {
namespace {

const std::string kKey(32, 'k');

TEST(SecretBoxTest, WhatIsSealedOpensWithTheSameKeyAndContext) {
  auto box = SecretBox::FromKey(kKey);
  ASSERT_TRUE(box.ok()) << box.status().ToString();
  for (const std::string& value : {std::string("ghp_0123456789abcdef"), std::string(), std::string(5000, 'v')}) {
    auto sealed = box->Seal(value, "sec_1 acme/alice");
    ASSERT_TRUE(sealed.ok()) << sealed.status().ToString();
    EXPECT_EQ(sealed->size(), 1 + 12 + value.size() + 16);
    if (!value.empty()) {
      EXPECT_EQ(sealed->find(value), std::string::npos);  // not in clear
    }
    auto opened = box->Open(*sealed, "sec_1 acme/alice");
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    EXPECT_EQ(*opened, value);
  }
  // Sealed twice: two nonces, two different forms, both open.
  auto a = box->Seal("same", "c"), b = box->Seal("same", "c");
  EXPECT_NE(*a, *b);
  EXPECT_EQ(*box->Open(*b, "c"), "same");
}

TEST(SecretBoxTest, AnythingChangedDoesNotOpen) {
  auto box = SecretBox::FromKey(kKey);
  auto sealed = box->Seal("the value", "sec_1 acme/alice");
  ASSERT_TRUE(sealed.ok());
  ASSERT_TRUE(box->Open(*sealed, "sec_1 acme/alice").ok());  // control
  for (size_t i = 0; i < sealed->size(); ++i) {
    std::string changed = *sealed;
    changed[i] = static_cast<char>(changed[i] ^ 0x01);
    EXPECT_EQ(box->Open(changed, "sec_1 acme/alice").status().error_number(), EBADMSG) << "byte " << i;
  }
  EXPECT_EQ(box->Open(*sealed, "sec_1 acme/mallory").status().error_number(), EBADMSG);
  EXPECT_EQ(box->Open(*sealed, "sec_2 acme/alice").status().error_number(), EBADMSG);
  EXPECT_EQ(box->Open(sealed->substr(0, sealed->size() - 1), "sec_1 acme/alice").status().error_number(), EBADMSG);
  EXPECT_EQ(box->Open("", "sec_1 acme/alice").status().error_number(), EBADMSG);
  auto other = SecretBox::FromKey(std::string(32, 'o'));
  EXPECT_EQ(other->Open(*sealed, "sec_1 acme/alice").status().error_number(), EBADMSG);
}

TEST(SecretBoxTest, TheKeyIsThirtyTwoBytesInBase64) {
  EXPECT_EQ(SecretBox::FromKey(std::string(31, 'k')).status().error_number(), EINVAL);
  EXPECT_EQ(SecretBox::FromKey(std::string(33, 'k')).status().error_number(), EINVAL);
  EXPECT_EQ(SecretBox::FromBase64("not base64 !!").status().error_number(), EINVAL);
  EXPECT_EQ(SecretBox::FromBase64(Base64Encode(std::string(16, 'k'))).status().error_number(), EINVAL);
  auto from_file = SecretBox::FromBase64(Base64Encode(kKey) + "\n");
  ASSERT_TRUE(from_file.ok()) << from_file.status().ToString();
  auto sealed = from_file->Seal("v", "c");
  EXPECT_EQ(*SecretBox::FromKey(kKey)->Open(*sealed, "c"), "v");  // the same key either way
}

}  // namespace
}  // namespace corral::supervisor
