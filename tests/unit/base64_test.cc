// common/base64.h: RFC 4648's test vectors in both alphabets, round trips of every byte and
// length, and the texts strict decoding refuses.
#include "common/base64.h"

#include <gtest/gtest.h>

#include <string>

namespace corral {
namespace {

struct Vector {
  const char* bytes;
  const char* standard;
  const char* url;
};

// RFC 4648 §10; the URL-safe column is the same without the padding.
constexpr Vector kRfc4648[] = {
    {"", "", ""},
    {"f", "Zg==", "Zg"},
    {"fo", "Zm8=", "Zm8"},
    {"foo", "Zm9v", "Zm9v"},
    {"foob", "Zm9vYg==", "Zm9vYg"},
    {"fooba", "Zm9vYmE=", "Zm9vYmE"},
    {"foobar", "Zm9vYmFy", "Zm9vYmFy"},
};

TEST(Base64Test, Rfc4648Vectors) {
  for (const Vector& v : kRfc4648) {
    EXPECT_EQ(Base64Encode(v.bytes), v.standard);
    EXPECT_EQ(Base64UrlEncode(v.bytes), v.url);
    EXPECT_EQ(Base64Decode(v.standard), v.bytes) << v.standard;
    EXPECT_EQ(Base64UrlDecode(v.url), v.bytes) << v.url;
    EXPECT_EQ(Base64DecodeEither(v.standard), v.bytes) << v.standard;
    EXPECT_EQ(Base64DecodeEither(v.url), v.bytes) << v.url;
  }
}

TEST(Base64Test, TheTwoAlphabets) {
  // 0xfb 0xff 0xbf is 111110 111111 111110 111111: the two characters the alphabets differ in.
  const std::string bytes = "\xfb\xff\xbf";
  EXPECT_EQ(Base64Encode(bytes), "+/+/");
  EXPECT_EQ(Base64UrlEncode(bytes), "-_-_");
  EXPECT_EQ(Base64Decode("+/+/"), bytes);
  EXPECT_EQ(Base64UrlDecode("-_-_"), bytes);
  EXPECT_EQ(Base64Decode("-_-_"), std::nullopt);
  EXPECT_EQ(Base64UrlDecode("+/+/"), std::nullopt);
  EXPECT_EQ(Base64DecodeEither("+/+/"), bytes);
  EXPECT_EQ(Base64DecodeEither("-_-_"), bytes);
  EXPECT_EQ(Base64DecodeEither("+_-/"), std::nullopt);  // one alphabet per text
  EXPECT_EQ(Base64Encode("\xfb\xff"), "+/8=");
  EXPECT_EQ(Base64UrlEncode("\xfb\xff"), "-_8");
  EXPECT_EQ(Base64UrlEncode("\xff"), "_w");
}

TEST(Base64Test, RoundTripsEveryByteAndLength) {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  for (size_t length = 0; length <= bytes.size(); ++length) {
    const std::string input = bytes.substr(bytes.size() - length);
    const std::string standard = Base64Encode(input);
    const std::string url = Base64UrlEncode(input);
    EXPECT_EQ(standard.size(), (length + 2) / 3 * 4);
    EXPECT_EQ(url.size(), (length * 4 + 2) / 3);
    EXPECT_EQ(Base64Decode(standard), input) << length;
    EXPECT_EQ(Base64UrlDecode(url), input) << length;
    EXPECT_EQ(Base64DecodeEither(standard), input) << length;
    EXPECT_EQ(Base64DecodeEither(url), input) << length;
  }
}

// Inputs past OpenSSL's pieces (3 MiB of bytes, 4 MiB of text) come back whole.
TEST(Base64Test, LongInputs) {
  std::string bytes(4 * 1024 * 1024 + 1, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 131) ^ (i >> 9));
  const std::string standard = Base64Encode(bytes);
  EXPECT_EQ(standard.size(), (bytes.size() + 2) / 3 * 4);
  EXPECT_EQ(Base64Decode(standard), bytes);
  EXPECT_EQ(Base64UrlDecode(Base64UrlEncode(bytes)), bytes);
}

TEST(Base64Test, StandardRefusesWhatAnEncoderDoesNotWrite) {
  ASSERT_EQ(Base64Decode("Zm8="), "fo");
  for (const char* bad : {"Zm8", "Zg", "Zg=", "Zg===", "=", "==", "====", "Z", "Zm9vY", "Zm9vY===", "Zm9v=",
                          "Zm=v", "Z=g=", "Zm9v====", "Zm-v", "Zm_v", "Zm v", "Zm9v\n", " Zm9v", "Zm9v.",
                          "Zm\x80v"}) {
    EXPECT_EQ(Base64Decode(bad), std::nullopt) << bad;
  }
  EXPECT_EQ(Base64Decode(std::string_view("Zm\0v", 4)), std::nullopt);
}

TEST(Base64Test, UrlRefusesPaddingAndImpossibleLengths) {
  ASSERT_EQ(Base64UrlDecode("Zm8"), "fo");
  // "A" and "Zm9vA": a lone last character of zero bits; only the length (4n + 1) refuses it.
  for (const char* bad : {"Zm8=", "Zg==", "Zg=", "=", "Z", "A", "Zm9vY", "Zm9vA", "Zm9vYmFyZ", "Zm+v", "Zm/v",
                          "Zm v", "Zm9v\n", " Zm9v", "Zm9v.", "Zm9v%3D", "Zm\x80v"}) {
    EXPECT_EQ(Base64UrlDecode(bad), std::nullopt) << bad;
  }
  EXPECT_EQ(Base64UrlDecode(std::string_view("Zm\0v", 4)), std::nullopt);
}

TEST(Base64Test, EitherTakesPaddingOrNoneButNothingElse) {
  EXPECT_EQ(Base64DecodeEither("Zm8="), "fo");
  EXPECT_EQ(Base64DecodeEither("Zm8"), "fo");
  for (const char* bad : {"Zg=", "Zg===", "Zm8==", "=", "Z", "Zm9vA", "Zm9v=", "Z=g=", "Zm9v\n", "Zm9 v", "Zm9v!"}) {
    EXPECT_EQ(Base64DecodeEither(bad), std::nullopt) << bad;
  }
  EXPECT_EQ(Base64DecodeEither("-_8"), "\xfb\xff");
  EXPECT_EQ(Base64DecodeEither("-_8="), "\xfb\xff");  // Python's urlsafe_b64encode pads
}

TEST(Base64Test, RefusesNonCanonicalTrailingBits) {
  // "f" is 011001|10: "Zg" leaves the 4 unused bits zero, "Zh".."Zv" do not.
  EXPECT_EQ(Base64UrlDecode("Zg"), "f");
  EXPECT_EQ(Base64Decode("Zg=="), "f");
  for (const char* bad : {"Zh", "Zi", "Zv", "Z_"}) {
    EXPECT_EQ(Base64UrlDecode(bad), std::nullopt) << bad;
    EXPECT_EQ(Base64DecodeEither(bad), std::nullopt) << bad;
  }
  for (const char* bad : {"Zh==", "Zv==", "Z/=="}) EXPECT_EQ(Base64Decode(bad), std::nullopt) << bad;
  // "fo" ends in 2 unused bits: "Zm8" is canonical, "Zm9" is not.
  EXPECT_EQ(Base64UrlDecode("Zm8"), "fo");
  EXPECT_EQ(Base64UrlDecode("Zm9"), std::nullopt);
  EXPECT_EQ(Base64Decode("Zm9="), std::nullopt);
}

}  // namespace
}  // namespace corral
