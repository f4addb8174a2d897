// The file API's tar download and upload against a real persistent sandbox: round trips as the
// agent, and archives that try to leave their directory (THREATS.md row 16).
#include "supervisor/sandboxes/sandbox_files.h"

#include <archive_entry.h>

#include <map>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/file_util.h"
#include "tests/root/sandbox_files_fixture.h"

namespace corral::supervisor {
namespace {

using ::testing::ElementsAre;


TEST_F(SandboxFilesTest, TarDownloadsADirectoryAndUploadsItBack) {
  Sh("mkdir -p t/sub/deeper && chmod 0755 t/sub t/sub/deeper && printf a > t/a.txt && chmod 0640 t/a.txt && printf b > t/sub/b.txt && "
     "ln -s ../a.txt t/sub/link && ln -s / t/root && mkfifo t/fifo && printf u > t/$(printf '\\303\\251')");
  auto tar = files_->TarDirectory("/home/agent/t");
  ASSERT_TRUE(tar.ok()) << tar.status().ToString();
  auto items = ParseTar(*tar);
  std::vector<std::string> names;
  for (const auto& [name, item] : items) names.push_back(name);
  EXPECT_THAT(names, ElementsAre("a.txt", "root", "sub", "sub/b.txt", "sub/deeper", "sub/link", "\xc3\xa9"));
  EXPECT_EQ(items["a.txt"].type, static_cast<mode_t>(AE_IFREG));
  EXPECT_EQ(items["a.txt"].data, "a");
  EXPECT_EQ(items["a.txt"].perm, 0640u);
  EXPECT_EQ(items["sub"].type, static_cast<mode_t>(AE_IFDIR));
  EXPECT_EQ(items["sub/link"].type, static_cast<mode_t>(AE_IFLNK));
  EXPECT_EQ(items["sub/link"].data, "../a.txt");
  EXPECT_EQ(items["root"].data, "/");
  EXPECT_EQ(items["\xc3\xa9"].data, "u");

  ASSERT_TRUE(files_->Mkdir("/home/agent/t2").ok());
  auto written = files_->ExtractTar("/home/agent/t2", *tar);
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  EXPECT_EQ(*written, 7u);
  EXPECT_EQ(Sh("cd t2 && cat a.txt sub/b.txt sub/link $(printf '\\303\\251'); echo; readlink root; "
               "stat -c '%u %a %F' a.txt sub sub/deeper"),
            "abau\n/\n1000 640 regular file\n1000 755 directory\n1000 755 directory\n");
}

TEST_F(SandboxFilesTest, UploadedTarsStayInsideTheirDirectory) {
  ASSERT_TRUE(files_->Mkdir("/home/agent/dest").ok());
  const std::string dest = "/home/agent/dest";
  // Control: ordinary entries, implicit parents, a read-only directory filled before its chmod.
  auto good = files_->ExtractTar(dest, MakeTar({{"./", AE_IFDIR}, {"ro", AE_IFDIR, "", "", 0555}, {"ro/f", AE_IFREG, "in ro"},
                                                {"x/y/z", AE_IFREG, "deep", "", 0600}, {"lnk", AE_IFLNK, "x/y/z"}}));
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(*good, 4u);
  EXPECT_EQ(Sh("cd dest && cat ro/f lnk && stat -c %a ro x/y/z"), "in rodeep555\n600\n");

  // Refused before anything is written.
  struct Case {
    const char* what;
    std::vector<TarSpec> entries;
    int error;
  };
  const std::vector<Case> refused = {
      {"dot-dot", {{"first"}, {"../x", AE_IFREG, "evil"}}, EINVAL},
      {"deep dot-dot", {{"first"}, {"a/../../x", AE_IFREG, "evil"}}, EINVAL},
      {"absolute", {{"first"}, {"/abs-evil", AE_IFREG, "evil"}}, EINVAL},
      {"hard link", {{"first"}, {"hl", AE_IFREG, "", "/etc/passwd"}}, EINVAL},
      {"relative hard link", {{"first"}, {"hl", AE_IFREG, "", "first"}}, EINVAL},
      {"device", {{"first"}, {"dev", AE_IFCHR}}, EINVAL},
      {"fifo", {{"first"}, {"fifo", AE_IFIFO}}, EINVAL},
      {"not a tar", {}, EINVAL},
  };
  for (const Case& c : refused) {
    std::string tar = c.entries.empty() ? std::string(1024, 'j') : MakeTar(c.entries);
    ExpectErrno(files_->ExtractTar(dest, tar).status(), c.error, c.what);
    EXPECT_FALSE(Exists(HostPath(dest + "/first"))) << c.what;
  }
  EXPECT_FALSE(Exists(HostPath("/home/agent/x")));
  EXPECT_FALSE(Exists(HostPath("/abs-evil")));
  EXPECT_FALSE(Exists(HostPath(dest + "/hl")));
  EXPECT_FALSE(Exists(HostPath(dest + "/dev")));

  // A symlink to "/" from the archive, then an entry through it: lands inside dest.
  auto through = files_->ExtractTar(dest, MakeTar({{"l", AE_IFLNK, "/"}, {"l/etc/evil", AE_IFREG, "evil"},
                                                   {"up", AE_IFLNK, "../../../../.."}, {"up/evil2", AE_IFREG, "e2"}}));
  ASSERT_TRUE(through.ok()) << through.status().ToString();
  EXPECT_EQ(*files_->Read(dest + "/etc/evil"), "evil");
  EXPECT_EQ(*files_->Read(dest + "/evil2"), "e2");
  EXPECT_FALSE(Exists(HostPath("/etc/evil")));
  EXPECT_FALSE(Exists(HostPath("/evil2")));
  EXPECT_FALSE(Exists(HostPath("/home/evil2")));
  EXPECT_FALSE(Exists("/etc/evil"));
  EXPECT_FALSE(Exists("/evil2"));
  // A symlink planted by the sandbox to outside dest: refused or contained, never followed out.
  Sh("ln -s /home/agent dest/planted && ln -s /etc dest/etclink");
  auto planted = files_->ExtractTar(dest, MakeTar({{"planted/evil3", AE_IFREG, "e3"}}));
  EXPECT_FALSE(Exists(HostPath("/home/agent/evil3")));
  if (planted.ok()) { EXPECT_EQ(*files_->Read(dest + "/home/agent/evil3"), "e3"); }
  const std::string passwd_before = *ReadFileToString(HostPath("/etc/passwd"));
  auto replace = files_->ExtractTar(dest, MakeTar({{"etclink/passwd", AE_IFREG, "evil"}}));
  EXPECT_EQ(*ReadFileToString(HostPath("/etc/passwd")), passwd_before);
  if (replace.ok()) { EXPECT_EQ(*files_->Read(dest + "/etc/passwd"), "evil"); }
  // An entry replacing a planted symlink replaces the link, not its target.
  Sh("echo keep > keepme && ln -s /home/agent/keepme dest/swap");
  ASSERT_TRUE(files_->ExtractTar(dest, MakeTar({{"swap", AE_IFREG, "new"}})).ok());
  EXPECT_EQ(*files_->Read("/home/agent/keepme"), "keep\n");
  EXPECT_EQ(*files_->Read(dest + "/swap"), "new");
  // Into a kernel file system: refused.
  ExpectErrno(files_->ExtractTar("/proc/1", MakeTar({{"x", AE_IFREG, "x"}})).status(), EACCES, "untar into /proc");
  ExpectErrno(files_->ExtractTar("/", MakeTar({{"proc/1/x", AE_IFREG, "x"}})).status(), EACCES, "untar via /proc");
}

}  // namespace
}  // namespace corral::supervisor
