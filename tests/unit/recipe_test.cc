// The recipe parser: every instruction of the subset parsed to its step, and every refusal with
// the line it names, each beside a recipe that differs only in what is refused and parses.
#include "supervisor/images/recipe.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace corral::supervisor {
namespace {

const std::map<std::string, std::string> kNoArgs;

Recipe Parse(const std::string& text, const std::map<std::string, std::string>& args = kNoArgs) {
  auto recipe = ParseRecipe(text, args);
  EXPECT_TRUE(recipe.ok()) << recipe.status().ToString() << "\n" << text;
  return recipe.ok() ? *recipe : Recipe();
}

// The error of a refused recipe (which must be refused with EINVAL).
std::string Refusal(const std::string& text, const std::map<std::string, std::string>& args = kNoArgs) {
  auto recipe = ParseRecipe(text, args);
  EXPECT_FALSE(recipe.ok()) << text;
  if (recipe.ok()) return "";
  EXPECT_EQ(recipe.status().error_number(), EINVAL);
  return recipe.status().message();
}

TEST(RecipeTest, TheWholeSubsetParsesToItsSteps) {
  const Recipe recipe = Parse(
      "# a comment\n"
      "FROM busybox:test\n"
      "\n"
      "RUN echo hi > /greeting && \\\n"
      "    # a comment inside a continuation\n"
      "    rm /etc/passwd\n"
      "RUN [\"/bin/echo\", \"a b\"]\n"
      "COPY --chown=1000:100 file.txt ./dir/../other /app/\n"
      "env X=1 Y=\"two words\"\n"
      "ENV OLD the rest of it\n"
      "WORKDIR /app\n"
      "WORKDIR sub/../lib\n"
      "COPY f rel\n"
      "USER 1000:100\n");
  EXPECT_EQ(recipe.from, "busybox:test");
  EXPECT_EQ(recipe.from_line, 2);
  ASSERT_EQ(recipe.steps.size(), 10u);
  EXPECT_EQ(recipe.steps[0].kind, StepKind::kRun);
  EXPECT_EQ(recipe.steps[0].line, 4);
  EXPECT_EQ(recipe.steps[0].argv, (std::vector<std::string>{"/bin/sh", "-c", "echo hi > /greeting &&  rm /etc/passwd"}));
  EXPECT_EQ(recipe.steps[1].argv, (std::vector<std::string>{"/bin/echo", "a b"}));
  EXPECT_EQ(recipe.steps[1].line, 7);
  const RecipeStep& copy = recipe.steps[2];
  EXPECT_EQ(copy.kind, StepKind::kCopy);
  EXPECT_EQ(copy.sources, (std::vector<std::string>{"file.txt", "other"}));
  EXPECT_EQ(copy.dest, "/app/");
  EXPECT_EQ(copy.uid, 1000u);
  EXPECT_EQ(copy.gid, 100u);
  EXPECT_EQ(recipe.steps[3].key, "X");
  EXPECT_EQ(recipe.steps[3].value, "1");
  EXPECT_EQ(recipe.steps[4].value, "two words");
  EXPECT_EQ(recipe.steps[5].key, "OLD");
  EXPECT_EQ(recipe.steps[5].value, "the rest of it");
  EXPECT_EQ(recipe.steps[6].path, "/app");
  EXPECT_EQ(recipe.steps[7].path, "/app/lib");
  EXPECT_EQ(recipe.steps[8].dest, "/app/lib/rel");
  EXPECT_EQ(recipe.steps[8].uid, 0u);
  EXPECT_EQ(recipe.steps[9].user, "1000:100");
}

TEST(RecipeTest, ScratchWithARootfsArchive) {
  const Recipe recipe = Parse("FROM scratch\nADD rootfs.tar.gz /\n");
  EXPECT_EQ(recipe.from, "scratch");
  ASSERT_EQ(recipe.steps.size(), 1u);
  EXPECT_EQ(recipe.steps[0].kind, StepKind::kAdd);
  EXPECT_EQ(recipe.steps[0].sources, (std::vector<std::string>{"rootfs.tar.gz"}));
  EXPECT_EQ(recipe.steps[0].dest, "/");
  EXPECT_NE(Refusal("FROM scratch\nADD rootfs.tar.gz /opt\n").find("line 2: ADD unpacks one local archive at /"),
            std::string::npos);
  EXPECT_NE(Refusal("FROM scratch\nADD http://example.com/r.tar /\n").find("line 2: ADD: URLs are not fetched"),
            std::string::npos);
  EXPECT_NE(Refusal("FROM scratch\nADD --chown=1 r.tar /\n").find("line 2: ADD: unsupported flag --chown=1"),
            std::string::npos);
}

TEST(RecipeTest, ArgsSubstituteLaterLinesAndRunSeesThemAsEnvironment) {
  const std::string text =
      "ARG BASE=busybox\n"
      "FROM ${BASE}:test\n"
      "ARG DIR=/opt\n"
      "ARG UNSET\n"
      "ENV HOME_DIR=$DIR/home LIT=\\$DIR Q='$DIR' F=${UNSET:-fallback}\n"
      "WORKDIR ${HOME_DIR}\n"
      "RUN echo $DIR\n";
  Recipe recipe = Parse(text);
  EXPECT_EQ(recipe.from, "busybox:test");
  ASSERT_EQ(recipe.steps.size(), 6u);
  EXPECT_EQ(recipe.steps[0].value, "/opt/home");
  EXPECT_EQ(recipe.steps[1].value, "$DIR");
  EXPECT_EQ(recipe.steps[2].value, "$DIR");
  EXPECT_EQ(recipe.steps[3].value, "fallback");
  EXPECT_EQ(recipe.steps[4].path, "/opt/home");
  EXPECT_EQ(recipe.steps[5].argv[2], "echo $DIR");  // the shell expands it
  EXPECT_EQ(recipe.steps[5].env, (std::vector<std::string>{"BASE=busybox", "DIR=/opt"}));

  recipe = Parse(text, {{"DIR", "/srv"}, {"BASE", "alpine"}});
  EXPECT_EQ(recipe.from, "alpine:test");
  EXPECT_EQ(recipe.steps[0].value, "/srv/home");
  EXPECT_EQ(recipe.steps[5].env, (std::vector<std::string>{"BASE=alpine", "DIR=/srv"}));
  // A different build arg is a different RUN step for the cache.
  EXPECT_NE(recipe.steps[5].CanonicalText(), Parse(text).steps[5].CanonicalText());

  EXPECT_NE(Refusal(text, {{"DIRR", "/srv"}}).find("--build-arg DIRR is not declared by an ARG"), std::string::npos);
}

struct BadCase {
  std::string text;
  std::string error;  // a part of the message, the line number included
  std::string fixed;  // the same recipe with the fault corrected, which parses
};

TEST(RecipeTest, EachFaultIsRefusedWithItsLineBesideItsCorrection) {
  const BadCase cases[] = {
      {"FROM b\nCMD [\"sh\"]\n", "recipe line 2: unknown instruction CMD", "FROM b\nRUN [\"sh\"]\n"},
      {"FROM b\n\nENTRYPOINT x\n", "recipe line 3: unknown instruction ENTRYPOINT", "FROM b\n\nRUN x\n"},
      {"RUN x\nFROM b\n", "recipe line 1: RUN before FROM", "FROM b\nRUN x\n"},
      {"FROM a\nFROM b\n", "recipe line 2: a second FROM", "FROM a\nRUN b\n"},
      {"FROM a AS x\n", "recipe line 1: FROM takes one image", "FROM a\n"},
      {"FROM a\nRUN\n", "recipe line 2: RUN needs an argument", "FROM a\nRUN true\n"},
      {"FROM a\nRUN --mount=type=cache x\n", "recipe line 2: RUN takes no flags", "FROM a\nRUN x\n"},
      {"FROM a\nRUN [\"a\", 1]\n", "recipe line 2: RUN [...] must be a non-empty JSON array",
       "FROM a\nRUN [\"a\", \"1\"]\n"},
      {"FROM a\nRUN [\"a\"\n", "recipe line 2: RUN [...] must be", "FROM a\nRUN [\"a\"]\n"},
      {"FROM a\nCOPY ../secret /x\n", "recipe line 2: COPY: source ../secret leaves the build context",
       "FROM a\nCOPY secret /x\n"},
      {"FROM a\nCOPY d/../../secret /x\n", "recipe line 2: COPY: source d/../../secret leaves",
       "FROM a\nCOPY d/../secret /x\n"},
      {"FROM a\nCOPY /etc/shadow /x\n", "recipe line 2: COPY: source /etc/shadow is absolute",
       "FROM a\nCOPY etc/shadow /x\n"},
      {"FROM a\nCOPY only\n", "recipe line 2: COPY needs a source and a destination", "FROM a\nCOPY only /\n"},
      {"FROM a\nCOPY a b /x\n", "recipe line 2: COPY: several sources need a destination ending in /",
       "FROM a\nCOPY a b /x/\n"},
      {"FROM a\nCOPY --from=b a /x\n", "recipe line 2: COPY: unsupported flag --from=b", "FROM a\nCOPY a /x\n"},
      {"FROM a\nCOPY --chown=root a /x\n", "recipe line 2: COPY: --chown takes numeric uid[:gid]",
       "FROM a\nCOPY --chown=0 a /x\n"},
      {"FROM a\nCOPY --chown=70000:1 a /x\n", "recipe line 2: COPY: --chown takes numeric",
       "FROM a\nCOPY --chown=7000:1 a /x\n"},
      {"FROM a\nENV 1X=2\n", "recipe line 2: ENV: bad variable name '1X'", "FROM a\nENV X1=2\n"},
      {"FROM a\nENV X=1 Y\n", "recipe line 2: ENV: 'Y' is not KEY=VALUE", "FROM a\nENV X=1 Y=\n"},
      {"FROM a\nENV X=\"1\n", "recipe line 2: unterminated \" quote", "FROM a\nENV X=\"1\"\n"},
      {"FROM a\nENV X=${Y\n", "recipe line 2: unterminated ${", "FROM a\nENV X=${Y}\n"},
      {"FROM a\nWORKDIR a b\n", "recipe line 2: WORKDIR takes one path", "FROM a\nWORKDIR a_b\n"},
      {"FROM a\nUSER a b\n", "recipe line 2: USER takes name|uid", "FROM a\nUSER a:b\n"},
      {"FROM a\nUSER a;b\n", "recipe line 2: USER takes name|uid", "FROM a\nUSER ab\n"},
      {"ARG 9=x\nFROM a\n", "recipe line 1: ARG: bad name '9'", "ARG N9=x\nFROM a\n"},
      {std::string("FROM a\nRUN a\0b\n", 15), "recipe line 2: a NUL character", "FROM a\nRUN ab\n"},
      {"# only a comment\n", "recipe: no FROM", "# only a comment\nFROM a\n"},
  };
  for (const BadCase& bad : cases) {
    const std::string error = Refusal(bad.text);
    EXPECT_NE(error.find(bad.error), std::string::npos) << "got: " << error << "\nwanted: " << bad.error;
    auto fixed = ParseRecipe(bad.fixed, kNoArgs);
    EXPECT_TRUE(fixed.ok()) << bad.fixed << ": " << fixed.status().ToString();
  }
}

TEST(RecipeTest, CapsOnSizeAndSteps) {
  std::string steps = "FROM a\n";
  for (size_t i = 0; i < kMaxRecipeSteps; ++i) steps += "RUN true\n";
  EXPECT_TRUE(ParseRecipe(steps, kNoArgs).ok());
  EXPECT_NE(Refusal(steps + "RUN true\n").find("recipe line 102: more than 100 steps"), std::string::npos);

  std::string big = "FROM a\nRUN " + std::string(kMaxRecipeBytes - 20, 'x') + "\n";
  EXPECT_TRUE(ParseRecipe(big, kNoArgs).ok());
  EXPECT_NE(Refusal(big + std::string(40, '#')).find("bytes, more than"), std::string::npos);
}

TEST(RecipeTest, ContextPathsNormalizeOrAreRefused) {
  EXPECT_EQ(*NormalizeContextPath("./a//b/../c"), "a/c");
  EXPECT_EQ(*NormalizeContextPath("."), ".");
  EXPECT_EQ(*NormalizeContextPath("a/.."), ".");
  EXPECT_FALSE(NormalizeContextPath("a/../..").ok());
  EXPECT_FALSE(NormalizeContextPath("/a").ok());
  EXPECT_FALSE(NormalizeContextPath("").ok());
}

TEST(RecipeTest, CanonicalTextsDifferWithTheStep) {
  const Recipe a = Parse("FROM x\nCOPY a /b\nCOPY --chown=1 a /b\nRUN a\nRUN [\"/bin/sh\",\"-c\",\"a\"]\n");
  EXPECT_NE(a.steps[0].CanonicalText(), a.steps[1].CanonicalText());
  // The shell form is the exec form of /bin/sh -c: one step.
  EXPECT_EQ(a.steps[2].CanonicalText(), a.steps[3].CanonicalText());
}

}  // namespace
}  // namespace corral::supervisor
