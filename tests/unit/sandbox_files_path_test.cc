// The file API's path, tar-name and mode checks: pure, no kernel.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <linux/limits.h>

#include <string>

#include "supervisor/sandboxes/sandbox_files.h"

namespace corral::supervisor {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(ValidateSandboxPathTest, AcceptsAbsolutePaths) {
  for (const char* path : {"/", "/home/agent", "/a//b/./c/", "/../../etc/passwd", "/a b/\xc3\xa9"}) {
    EXPECT_TRUE(ValidateSandboxPath(path).ok()) << path;
  }
  EXPECT_TRUE(ValidateSandboxPath("/" + std::string(NAME_MAX, 'x')).ok());
  EXPECT_TRUE(ValidateSandboxPath(std::string(PATH_MAX - 1, '/')).ok());
}

TEST(ValidateSandboxPathTest, RefusesRelativeEmptyNulAndLongPathsWithEinval) {
  const std::string with_nul("/home/agent\0/x", 14);
  for (const std::string& path : {std::string(), std::string("home/agent"), std::string("./x"), with_nul,
                                   std::string(PATH_MAX, '/'), "/" + std::string(NAME_MAX + 1, 'x')}) {
    Status status = ValidateSandboxPath(path);
    EXPECT_FALSE(status.ok()) << path.size();
    EXPECT_EQ(status.error_number(), EINVAL);
  }
}

TEST(ValidateSandboxPathTest, MessagesShowControlBytesEscaped) {
  Status status = ValidateSandboxPath(std::string("rel\0\n", 5));
  EXPECT_THAT(status.message(), HasSubstr("rel\\x00\\x0a"));
}

TEST(SplitSandboxPathTest, SplitsParentAndName) {
  auto parts = SplitSandboxPath("/home/agent/f.txt");
  ASSERT_TRUE(parts.ok());
  EXPECT_EQ(parts->parent, "/home/agent");
  EXPECT_EQ(parts->name, "f.txt");
  parts = SplitSandboxPath("/top/");
  ASSERT_TRUE(parts.ok());
  EXPECT_EQ(parts->parent, "/");
  EXPECT_EQ(parts->name, "top");
  parts = SplitSandboxPath("/a/../b//");
  ASSERT_TRUE(parts.ok());
  EXPECT_EQ(parts->parent, "/a/..");
  EXPECT_EQ(parts->name, "b");
}

TEST(SplitSandboxPathTest, RefusesPathsThatNameNoEntry) {
  for (const char* path : {"/", "//", "/a/.", "/a/..", "/..", "/a/./", "relative"}) {
    auto parts = SplitSandboxPath(path);
    EXPECT_FALSE(parts.ok()) << path;
    EXPECT_EQ(parts.status().error_number(), EINVAL) << path;
  }
}

TEST(TarEntryComponentsTest, NormalizesRelativeNames) {
  auto components = TarEntryComponents("./a//b/./c/");
  ASSERT_TRUE(components.ok());
  EXPECT_THAT(*components, ElementsAre("a", "b", "c"));
  components = TarEntryComponents("./");
  ASSERT_TRUE(components.ok());
  EXPECT_THAT(*components, IsEmpty());
  components = TarEntryComponents("..a/b..");  // dots inside a name are just a name
  ASSERT_TRUE(components.ok());
  EXPECT_THAT(*components, ElementsAre("..a", "b.."));
}

TEST(TarEntryComponentsTest, RefusesAbsoluteNamesAndDotDot) {
  for (const std::string& name : {std::string(), std::string("/etc/evil"), std::string("../x"),
                                  std::string("a/../../x"), std::string("a/.."), std::string("a/\0b", 3),
                                  std::string(PATH_MAX, 'a')}) {
    auto components = TarEntryComponents(name);
    EXPECT_FALSE(components.ok()) << name;
    EXPECT_EQ(components.status().error_number(), EINVAL);
  }
}

TEST(ValidateCreateModeTest, AllowsPermissionAndStickyBitsOnly) {
  for (uint32_t mode : {0u, 0644u, 0777u, 01777u, 0600u}) EXPECT_TRUE(ValidateCreateMode(mode).ok()) << mode;
  for (uint32_t mode : {04755u, 02755u, 06777u, 010644u, 0100644u}) {
    Status status = ValidateCreateMode(mode);
    EXPECT_FALSE(status.ok()) << mode;
    EXPECT_EQ(status.error_number(), EINVAL);
  }
}

}  // namespace
}  // namespace corral::supervisor
