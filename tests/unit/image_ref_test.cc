// Image references by the docker/distribution grammar: names that parse to the expected parts,
// and bad ones refused with an error that names the cause.
#include "rootfs/image_ref.h"

#include <gtest/gtest.h>

#include <string>

#include "common/sha256.h"

namespace corral::rootfs {
namespace {

const std::string kHex = Sha256Hex("layer");
const std::string kDigest = "sha256:" + kHex;

struct Good {
  std::string text;
  std::string registry, name, tag, digest;
};

TEST(ImageRefTest, GoodReferencesParseToTheirParts) {
  const Good cases[] = {
      {"python", "", "python", "latest", ""},
      {"python:3.12", "", "python", "3.12", ""},
      {"acme/agent:2026-11", "", "acme/agent", "2026-11", ""},
      {"a/b/c/d", "", "a/b/c/d", "latest", ""},
      {"localhost/x", "localhost", "x", "latest", ""},
      {"localhost:5000/acme/agent:v1", "localhost:5000", "acme/agent", "v1", ""},
      {"registry.example.com/team/img", "registry.example.com", "team/img", "latest", ""},
      {"Registry.Example.com:443/img:T_1", "Registry.Example.com:443", "img", "T_1", ""},
      {"my-reg.io/a.b/c_d/e__f/g--h:_x", "my-reg.io", "a.b/c_d/e__f/g--h", "_x", ""},
      {"python@" + kDigest, "", "python", "", kDigest},
      {"python:3.12@" + kDigest, "", "python", "3.12", kDigest},
      {"127.0.0.1:5000/busybox", "127.0.0.1:5000", "busybox", "latest", ""},
      {"a0-b1", "", "a0-b1", "latest", ""},
      {"x:" + std::string(128, 't'), "", "x", std::string(128, 't'), ""},
      {"localhost", "", "localhost", "latest", ""},       // alone it is a name
      {"localhost:5000", "", "localhost", "5000", ""},    // ... with a tag, as docker reads it
  };
  for (const Good& c : cases) {
    StatusOr<ImageRef> ref = ParseImageRef(c.text);
    ASSERT_TRUE(ref.ok()) << c.text << ": " << ref.status().ToString();
    EXPECT_EQ(ref->registry, c.registry) << c.text;
    EXPECT_EQ(ref->name, c.name) << c.text;
    EXPECT_EQ(ref->tag, c.tag) << c.text;
    EXPECT_EQ(ref->digest, c.digest) << c.text;
    // The canonical text parses back to the same reference.
    StatusOr<ImageRef> again = ParseImageRef(ref->ToString());
    ASSERT_TRUE(again.ok()) << ref->ToString();
    EXPECT_EQ(*again, *ref) << c.text;
  }
}

TEST(ImageRefTest, NameAndToString) {
  ImageRef plain = *ParseImageRef("python");
  EXPECT_EQ(plain.Name(), "python:latest");
  EXPECT_EQ(plain.ToString(), "python:latest");
  ImageRef full = *ParseImageRef("localhost:5000/acme/agent:v1@" + kDigest);
  EXPECT_EQ(full.Repository(), "localhost:5000/acme/agent");
  EXPECT_EQ(full.Name(), "localhost:5000/acme/agent:v1");
  EXPECT_EQ(full.ToString(), "localhost:5000/acme/agent:v1@" + kDigest);
  ImageRef by_digest = *ParseImageRef("acme/agent@" + kDigest);
  EXPECT_EQ(by_digest.Name(), "acme/agent@" + kDigest);
}

struct Bad {
  std::string text;
  std::string cause;  // a piece of the error message
};

TEST(ImageRefTest, BadReferencesAreRefusedWithTheirCause) {
  const Bad cases[] = {
      {"", "empty"},
      {"a/../b", "\"..\" is not allowed"},
      {"../b", "\"..\" is not allowed"},
      {"a/..", "\"..\" is not allowed"},
      {"a/./b", "\".\" is not allowed"},
      {"localhost:5000/../etc", "\"..\" is not allowed"},
      {"Python", "uppercase"},
      {"acme/Agent", "uppercase"},
      {"a//b", "empty path component"},
      {"/a", "starts with '/'"},
      {"a/", "ends with '/'"},
      {"a b", "space"},
      {"a\tb", "space"},
      {std::string("a\0b", 3), "NUL"},
      {"a\nb", "control character"},
      {"caf\xc3\xa9", "non-ASCII"},
      {"-a", "must start and end"},
      {"a-", "misplaced separator"},
      {"a.", "misplaced separator"},
      {"a..b", "misplaced separator"},
      {"a___b", "misplaced separator"},
      {"a.-b", "misplaced separator"},
      {"a$b", "\"$\""},
      {"a:", "tag \"\""},
      {"a:.x", "tag \".x\""},
      {"a:-x", "tag"},
      {"a:x/y", "bad port"},  // the last ':' is before the '/': "a:x" is read as a registry
      {"a:" + std::string(129, 't'), "tag"},
      {"a@sha256:abc", "digest"},
      {"a@sha256:" + std::string(64, 'A'), "digest"},
      {"a@md5:" + std::string(64, 'a'), "digest"},
      {"a@", "digest"},
      {"@" + kDigest, "no name"},
      {":tag", "no name"},
      {"reg.io:x/a", "bad port"},
      {"reg.io:/a", "bad port"},
      {"-reg.io/a", "host component starts or ends"},
      {"reg..io/a", "empty host component"},
      {"reg_x.io/a", "bad character"},
      {std::string(256, 'a'), "longer than 255"},
  };
  for (const Bad& c : cases) {
    StatusOr<ImageRef> ref = ParseImageRef(c.text);
    ASSERT_FALSE(ref.ok()) << "accepted: " << c.text;
    EXPECT_NE(ref.status().message().find(c.cause), std::string::npos)
        << c.text << " -> " << ref.status().message() << " (wanted: " << c.cause << ")";
  }
}

TEST(ImageRefTest, LengthLimitIsOnTheWholeName) {
  const std::string at_limit = "reg.io/" + std::string(255 - 7, 'a');
  EXPECT_TRUE(ParseImageRef(at_limit).ok());
  EXPECT_FALSE(ParseImageRef(at_limit + "a").ok());
}

TEST(ImageRefTest, IsDigest) {
  EXPECT_TRUE(IsDigest(kDigest));
  EXPECT_TRUE(IsDigest("sha256:" + std::string(64, '0')));
  EXPECT_FALSE(IsDigest(kHex));
  EXPECT_FALSE(IsDigest("sha256:" + kHex.substr(1)));
  EXPECT_FALSE(IsDigest(kDigest + "0"));
  EXPECT_FALSE(IsDigest("sha256:" + std::string(63, '0') + "g"));
  EXPECT_FALSE(IsDigest("sha256:" + std::string(63, '0') + "A"));
  EXPECT_FALSE(IsDigest("sha512:" + std::string(64, '0')));
  EXPECT_FALSE(IsDigest("sha256:../" + std::string(61, '0')));
}

TEST(Sha256Test, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Sha256 pieces;
  pieces.Update("a");
  pieces.Update("");
  pieces.Update("bc");
  EXPECT_EQ(pieces.HexDigest(), Sha256Hex("abc"));
  EXPECT_EQ(pieces.HexDigest(), Sha256Hex("abc"));  // read twice: the same
  EXPECT_FALSE(Sha256File("/nonexistent/corral-sha").ok());
  StatusOr<std::string> self = Sha256File("/proc/self/cmdline");
  EXPECT_TRUE(self.ok()) << self.status().ToString();
}

}  // namespace
}  // namespace corral::rootfs
