// Images of several layers (`corral run --layer`): the layers stack as overlayfs lowers with their
// whiteouts, and are shown through idmapped binds, so the ids stored on disk (the image's own:
// root-owned files owned by host uid 0) are the sandbox's inside and its own range on the host.
// The layers themselves never change, and nothing in them grants more than the sandbox's user.
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <string>

#include "common/file_util.h"
#include "tests/root/root_test_util.h"

namespace corral::test {
namespace {

using ::testing::HasSubstr;

class ImageLayersTest : public SandboxTest {
 protected:
  void SetUp() override {
    SandboxTest::SetUp();
    if (IsSkipped()) return;
    dir_ = TestStateDir() + "/layers-" + std::to_string(getpid());
    base_ = dir_ + "/base";
    top_ = dir_ + "/top";
    // base: busybox (root's), a file of the agent's, a file the top layer deletes, a directory
    // the top layer makes opaque, a setuid-root copy of busybox.
    ASSERT_TRUE(MakeDirs(base_ + "/bin").ok());
    ASSERT_TRUE(MakeDirs(base_ + "/etc/opaque").ok());
    ASSERT_EQ(system(("cp /bin/busybox " + base_ + "/bin/busybox").c_str()), 0);
    // Named for the applet it runs.
    ASSERT_EQ(system(("cp /bin/busybox " + base_ + "/bin/id").c_str()), 0);
    ASSERT_EQ(chmod((base_ + "/bin/id").c_str(), 04755), 0);
    ASSERT_TRUE(WriteNewFile(base_ + "/etc/roots", "root's\n", 0644).ok());
    ASSERT_TRUE(WriteNewFile(base_ + "/etc/agents", "agent's\n", 0644).ok());
    ASSERT_EQ(chown((base_ + "/etc/agents").c_str(), 1000, 1000), 0);
    ASSERT_TRUE(WriteNewFile(base_ + "/etc/gone", "deleted above\n", 0644).ok());
    ASSERT_TRUE(WriteNewFile(base_ + "/etc/opaque/old", "hidden\n", 0644).ok());
    // top: a whiteout (char 0:0) for etc/gone, etc/opaque made opaque with a new file.
    ASSERT_TRUE(MakeDirs(top_ + "/etc/opaque").ok());
    ASSERT_EQ(mknod((top_ + "/etc/gone").c_str(), S_IFCHR | 0000, makedev(0, 0)), 0);
    ASSERT_EQ(setxattr((top_ + "/etc/opaque").c_str(), "trusted.overlay.opaque", "y", 1, 0), 0);
    ASSERT_TRUE(WriteNewFile(top_ + "/etc/opaque/new", "shown\n", 0644).ok());
  }
  void TearDown() override {
    if (!dir_.empty()) (void)RemoveTree(dir_);
    SandboxTest::TearDown();
  }

  CorralResult Run(const std::vector<std::string>& before, const std::string& script) {
    std::vector<std::string> args = {"run", "--layer", top_, "--layer", base_};
    args.insert(args.end(), before.begin(), before.end());
    for (const char* word : {"--", "/bin/busybox", "sh", "-c"}) args.push_back(word);
    args.push_back(script);
    return RunCorral(args);
  }

  std::string dir_, base_, top_;
};

TEST_F(ImageLayersTest, TheImagesIdsAreTheSandboxsInside) {
  CorralResult r = Run({"--user", "root"}, "/bin/busybox stat -c '%u:%g %n' /bin/busybox /etc/roots /etc/agents");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.outcome.dump();
  EXPECT_EQ(r.out, "0:0 /bin/busybox\n0:0 /etc/roots\n1000:1000 /etc/agents\n");
}

TEST_F(ImageLayersTest, WhiteoutsAndOpaqueDirectoriesOfUpperLayersHideLowerFiles) {
  CorralResult r = Run({}, "/bin/busybox ls /etc/opaque; /bin/busybox cat /etc/gone 2>&1; /bin/busybox cat /etc/roots");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.outcome.dump();
  EXPECT_THAT(r.out, HasSubstr("new\n"));  // control: the top layer's own file
  EXPECT_THAT(r.out, Not(HasSubstr("old")));
  EXPECT_THAT(r.out, HasSubstr("No such file"));
  EXPECT_THAT(r.out, HasSubstr("root's\n"));  // control: the base layer shows through
}

// Root inside owns root's files of the image (it may change them: copy-up to its own layer);
// the agent may not. The copies are owned by the sandbox's own range on the host, and the layers
// on disk stay as they were.
TEST_F(ImageLayersTest, WritesCopyUpAsTheSandboxsOwnIdsAndLeaveTheLayers) {
  const std::string ws = dir_ + "/ws";
  CorralResult denied = Run({"--workspace", ws}, "echo agent >> /etc/roots");
  EXPECT_NE(denied.exit_code, 0) << "the agent wrote root's file";
  CorralResult agent = Run({"--workspace", ws}, "echo agent >> /etc/agents && /bin/busybox cat /etc/agents");
  ASSERT_EQ(agent.exit_code, 0) << agent.err << agent.outcome.dump();
  EXPECT_EQ(agent.out, "agent's\nagent\n");
  CorralResult root = Run({"--workspace", ws, "--user", "root"}, "echo root >> /etc/roots && /bin/busybox cat /etc/roots");
  ASSERT_EQ(root.exit_code, 0) << root.err << root.outcome.dump();
  EXPECT_EQ(root.out, "root's\nroot\n");
  struct stat copied;
  ASSERT_EQ(stat((ws + "/upper/etc/roots").c_str(), &copied), 0);
  EXPECT_GE(copied.st_uid, 65536u) << "the copy-up is owned by a host uid outside the sandbox range";
  EXPECT_EQ(copied.st_uid % 65536, 0u) << "root inside is the first id of the sandbox's range";
  struct stat agents;
  ASSERT_EQ(stat((ws + "/upper/etc/agents").c_str(), &agents), 0);
  EXPECT_EQ(agents.st_uid, copied.st_uid + 1000);
  EXPECT_EQ(*ReadFileToString(base_ + "/etc/roots"), "root's\n");
  EXPECT_EQ(*ReadFileToString(base_ + "/etc/agents"), "agent's\n");
  struct stat layer_file;
  ASSERT_EQ(stat((base_ + "/etc/roots").c_str(), &layer_file), 0);
  EXPECT_EQ(layer_file.st_uid, 0u);
}

// A setuid-root program of the image runs with the caller's ids: the layers are nosuid.
TEST_F(ImageLayersTest, ASetuidRootFileOfTheImageGrantsNothing) {
  CorralResult r = Run({}, "/bin/busybox stat -c '%a %u' /bin/id; /bin/id -u");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.outcome.dump();
  EXPECT_EQ(r.out, "4755 0\n1000\n") << "control: the bit is there; the program still runs as the agent";
}

TEST_F(ImageLayersTest, ALayerThatIsNotADirectoryIsRefusedBeforeAnyMount) {
  CorralResult r = RunCorral({"run", "--layer", base_ + "/etc/roots", "--", "/bin/busybox", "true"}, 60, false);
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_THAT(r.err, HasSubstr("is not a directory"));
  CorralResult control = RunCorral({"run", "--layer", base_, "--", "/bin/busybox", "true"}, 60, false);
  EXPECT_EQ(control.exit_code, 0) << control.err;
}

}  // namespace
}  // namespace corral::test
