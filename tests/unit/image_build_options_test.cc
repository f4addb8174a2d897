// corral image build's options: the recipe and context made absolute, the default recipe, the
// build args, and each bad option refused naming it beside a good one.
#include "tools/corral/image_build_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "tests/testing/temp_dir.h"

namespace corral::cli {
namespace {

using ::testing::HasSubstr;

EnvLookup NoEnv() {
  return [](const char*) -> std::optional<std::string> { return std::nullopt; };
}

std::string ErrorOf(const std::vector<std::string>& args) {
  auto parsed = ParseImageBuildOptions(args, NoEnv());
  EXPECT_FALSE(parsed.ok());
  return parsed.ok() ? "" : parsed.status().message();
}

TEST(ImageBuildOptionsTest, OptionsBecomeTheRequest) {
  auto parsed = ParseImageBuildOptions({"build", "-f", "/r/Recipe", "-t", "app:1", "--build-arg", "A=1",
                                        "--build-arg", "B=x=y", "--no-cache", "--force", "/ctx"},
                                       NoEnv());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->recipe_path, "/r/Recipe");
  EXPECT_EQ(parsed->context, "/ctx");
  const nlohmann::json body = ImageBuildBody(*parsed, "FROM x\n");
  EXPECT_EQ(body["recipe"], "FROM x\n");
  EXPECT_EQ(body["context"], "/ctx");
  EXPECT_EQ(body["name"], "app:1");
  EXPECT_EQ(body["build_args"], (nlohmann::json{{"A", "1"}, {"B", "x=y"}}));
  EXPECT_EQ(body["no_cache"], true);
  EXPECT_EQ(body["force"], true);
}

TEST(ImageBuildOptionsTest, TheContextIsTheWorkingDirectoryAndItsRecipeByDefault) {
  test::TempDir dir("build-options");
  dir.Put("Dockerfile", "FROM x\n");
  char cwd[4096];
  ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  ASSERT_EQ(chdir(dir.path().c_str()), 0);
  auto docker = ParseImageBuildOptions({"build", "-t", "a:1"}, NoEnv());
  dir.Put("Recipe", "FROM x\n");
  auto recipe = ParseImageBuildOptions({"build", "-t", "a:1", "."}, NoEnv());
  auto relative = ParseImageBuildOptions({"build", "-t", "a:1", "-f", "other", "sub"}, NoEnv());
  ASSERT_EQ(chdir(cwd), 0);
  ASSERT_TRUE(docker.ok() && recipe.ok() && relative.ok());
  EXPECT_EQ(docker->context, dir.path());
  EXPECT_EQ(docker->recipe_path, dir.path() + "/Dockerfile");  // no Recipe yet
  EXPECT_EQ(recipe->recipe_path, dir.path() + "/Recipe");
  EXPECT_EQ(relative->context, dir.path() + "/sub");
  EXPECT_EQ(relative->recipe_path, dir.path() + "/other");
}

TEST(ImageBuildOptionsTest, BadOptionsAreRefusedNamingThem) {
  EXPECT_TRUE(ParseImageBuildOptions({"build", "-t", "a:1", "/c"}, NoEnv()).ok());
  EXPECT_THAT(ErrorOf({"build", "/c"}), HasSubstr("-t NAME:TAG is required"));
  EXPECT_THAT(ErrorOf({"build", "-t", "a:1", "/c", "/d"}), HasSubstr("at most one DIR"));
  EXPECT_THAT(ErrorOf({"build", "-t", "a:1", "--build-arg", "NOVALUE", "/c"}), HasSubstr("--build-arg: expected K=V"));
  EXPECT_THAT(ErrorOf({"build", "-t", "a:1", "--build-arg", "=v", "/c"}), HasSubstr("--build-arg: expected K=V"));
  EXPECT_THAT(ErrorOf({"build", "-t", "a:1", "--squash", "/c"}), HasSubstr("--squash"));
}

}  // namespace
}  // namespace corral::cli
