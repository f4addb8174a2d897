// The workspace scans behind a session's file_change events: what a scan sees, that nothing in
// the tree leads it out (symlinks, a symlinked top, pseudo file systems), its bounds, and the
// diff between two scans. A temp directory stands for the sandbox's root.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "supervisor/sessions/workspace_scan.h"
#include "supervisor/sessions/workspace_watch.h"
#include "tests/testing/temp_dir.h"

namespace corral::supervisor {
namespace {

using test::TempDir;

std::vector<std::string> Paths(const WorkspaceScan& scan) {
  std::vector<std::string> paths;
  for (const auto& [path, entry] : scan.entries) paths.push_back(path);
  return paths;
}

std::vector<std::string> Described(const std::vector<FileChange>& changes) {
  std::vector<std::string> out;
  for (const FileChange& c : changes) {
    out.push_back(std::string(ChangeKindName(c.kind)) + " " + EntryTypeName(c.type) + " " + c.path);
  }
  return out;
}

class WorkspaceScanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_.reset(open(dir_.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(root_);
    outside_.Put("secret/host.txt", "host file\n");
  }
  WorkspaceScan Scan(const std::string& dir = "/ws", ScanLimits limits = {}) {
    auto scan = ScanWorkspace(root_.get(), dir, limits);
    EXPECT_TRUE(scan.ok()) << scan.status().message();
    return scan.ok() ? *scan : WorkspaceScan{};
  }
  void Link(const std::string& target, const std::string& at) {
    ASSERT_EQ(symlink(target.c_str(), dir_.Join(at).c_str()), 0) << at;
  }

  TempDir dir_{"wsscan"};
  TempDir outside_{"wsscan-host"};
  UniqueFd root_;
};

TEST_F(WorkspaceScanTest, SeesTheTreeInTheWalksOrderWithTypes) {
  dir_.Put("ws/b.txt", "b");
  dir_.Put("ws/a/x.py", "x");
  dir_.Put("ws/a-c", "y");
  Link("b.txt", "ws/link");
  WorkspaceScan scan = Scan();
  EXPECT_TRUE(scan.complete());
  EXPECT_EQ(Paths(scan), (std::vector<std::string>{"a", "a/x.py", "a-c", "b.txt", "link"}));
  EXPECT_EQ(scan.entries[0].second.type, EntryType::kDir);
  EXPECT_EQ(scan.entries[1].second.type, EntryType::kFile);
  EXPECT_EQ(scan.entries[4].second.type, EntryType::kSymlink);
  EXPECT_EQ(scan.entries[3].second.size, 1u);
}

TEST_F(WorkspaceScanTest, DiffReportsCreateModifyDeleteButNotADirectorysOwnChanges) {
  dir_.Put("ws/keep.txt", "same");
  dir_.Put("ws/edit.txt", "old");
  dir_.Put("ws/gone.txt", "bye");
  dir_.Put("ws/src/old.c", "c");
  WorkspaceScan before = Scan();
  dir_.Put("ws/edit.txt", "newer content");
  ASSERT_EQ(unlink(dir_.Join("ws/gone.txt").c_str()), 0);
  dir_.Put("ws/src/new.c", "n");  // src/ changes (its mtime): not a change of its own
  dir_.Put("ws/pkg/mod.py", "m");
  WorkspaceScan after = Scan();
  EXPECT_EQ(Described(DiffScans(before, after)),
            (std::vector<std::string>{"modify file edit.txt", "delete file gone.txt", "create dir pkg",
                                      "create file pkg/mod.py", "create file src/new.c"}));
  EXPECT_TRUE(DiffScans(after, after).empty());  // control: nothing changed, nothing reported
}

TEST_F(WorkspaceScanTest, SymlinksAreEntriesAndNeverFollowed) {
  dir_.Put("ws/real/inside.txt", "in");
  Link(outside_.Join("secret"), "ws/to-host-dir");       // absolute: a host path
  Link("../../../../../" + outside_.Join("secret"), "ws/climb");  // relative, climbing out
  Link(outside_.Join("secret/host.txt"), "ws/to-host-file");
  WorkspaceScan scan = Scan();
  // The links are there as links; nothing of what they point at (the control: a real directory's
  // file is listed).
  EXPECT_EQ(Paths(scan), (std::vector<std::string>{"climb", "real", "real/inside.txt", "to-host-dir", "to-host-file"}));
  for (const auto& [path, entry] : scan.entries) {
    if (path.rfind("real", 0) != 0) {
      EXPECT_EQ(entry.type, EntryType::kSymlink) << path;
    }
  }
  // A link replacing a file the host has is a modify of the link, sized as the link.
  WorkspaceScan before = scan;
  ASSERT_EQ(unlink(dir_.Join("ws/real/inside.txt").c_str()), 0);
  Link(outside_.Join("secret/host.txt"), "ws/real/inside.txt");
  std::vector<FileChange> changes = DiffScans(before, Scan());
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].type, EntryType::kSymlink);
  EXPECT_EQ(changes[0].size, outside_.Join("secret/host.txt").size());
}

TEST_F(WorkspaceScanTest, ATopThatIsASymlinkResolvesInsideTheRoot) {
  dir_.Put("elsewhere/mine.txt", "mine");
  Link("/elsewhere", "ws");
  EXPECT_EQ(Paths(Scan("/ws")), (std::vector<std::string>{"mine.txt"}));  // control: inside the root
  ASSERT_EQ(unlink(dir_.Join("ws").c_str()), 0);
  Link(outside_.path(), "ws");  // a host path: taken inside the root, where it does not exist
  auto scan = ScanWorkspace(root_.get(), "/ws", {});
  ASSERT_FALSE(scan.ok());
  EXPECT_EQ(scan.status().error_number(), ENOENT);
  auto parent = ScanWorkspace(root_.get(), "/../../..", {});  // ".." stops at the root
  ASSERT_TRUE(parent.ok());
  for (const auto& [path, entry] : parent->entries) EXPECT_EQ(path.find("host.txt"), std::string::npos) << path;
}

TEST_F(WorkspaceScanTest, APseudoFileSystemIsNoWorkspace) {
  UniqueFd host_root(open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  auto proc = ScanWorkspace(host_root.get(), "/proc/self", {});
  ASSERT_FALSE(proc.ok());
  EXPECT_EQ(proc.status().error_number(), EACCES);
  EXPECT_TRUE(ScanWorkspace(host_root.get(), dir_.path(), {}).ok());  // control: an ordinary directory
}

TEST_F(WorkspaceScanTest, AScanStopsAtItsBoundAndTheDiffComparesOnlyWhatBothSaw) {
  for (char c = 'a'; c <= 'j'; ++c) dir_.Put(std::string("ws/") + c, "1");
  ScanLimits limits;
  limits.max_entries = 4;
  WorkspaceScan before = Scan("/ws", limits);
  EXPECT_EQ(Paths(before), (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_EQ(before.frontier, "e");
  dir_.Put("ws/b", "22");  // seen
  dir_.Put("ws/h", "22");  // beyond the bound
  ASSERT_EQ(unlink(dir_.Join("ws/i").c_str()), 0);
  WorkspaceScan after = Scan("/ws", limits);
  EXPECT_EQ(Described(DiffScans(before, after)), (std::vector<std::string>{"modify file b"}));
  // A scan that sees more does not take the unseen for new, nor the other way round.
  ScanLimits wide;
  EXPECT_EQ(Described(DiffScans(before, Scan("/ws", wide))), (std::vector<std::string>{"modify file b"}));
  EXPECT_EQ(Described(DiffScans(Scan("/ws", wide), after)), (std::vector<std::string>{}));
}

TEST_F(WorkspaceScanTest, ADirectoryWithMoreNamesThanLeftIsSeenInOrderUpToTheBound) {
  dir_.Put("ws/a.txt", "a");
  for (int i = 0; i < 50; ++i) dir_.Put("ws/many/f" + std::to_string(i), "x");
  dir_.Put("ws/z.txt", "z");
  ScanLimits limits;
  limits.max_entries = 10;
  WorkspaceScan scan = Scan("/ws", limits);
  EXPECT_EQ(Paths(scan), (std::vector<std::string>{"a.txt", "many", "many/f0", "many/f1", "many/f10", "many/f11",
                                                   "many/f12", "many/f13", "many/f14", "many/f15"}));
  EXPECT_EQ(scan.frontier, "many/f16");
  EXPECT_FALSE(ScanPathLess("z.txt", scan.frontier));  // after the frontier: unseen
  EXPECT_TRUE(ScanPathLess("many/f15", scan.frontier));
}

TEST_F(WorkspaceScanTest, DepthAndSkipsLeaveOutTheSamePartsEveryTime) {
  dir_.Put("ws/1/2/3/deep.txt", "d");
  dir_.Put("ws/.git/objects/ab", "o");
  dir_.Put("ws/.claude/projects/t.jsonl", "t");
  dir_.Put("ws/.claude.json", "{}");
  dir_.Put("ws/.claude.json.lock", "");
  dir_.Put("ws/.claudette", "kept");
  ScanLimits limits;
  limits.max_depth = 2;
  limits.skip_names = {".git"};
  limits.skip_paths = {".claude", ".claude.json*"};
  WorkspaceScan scan = Scan("/ws", limits);
  // Two directories entered below the top: 1/2/3 is listed, not entered.
  EXPECT_EQ(Paths(scan), (std::vector<std::string>{".claudette", "1", "1/2", "1/2/3"}));
  EXPECT_TRUE(scan.complete());
}

TEST(ScanPathLessTest, ComparesComponentByComponent) {
  EXPECT_TRUE(ScanPathLess("a", "a/b"));
  EXPECT_TRUE(ScanPathLess("a/b", "a-c"));  // bytewise "a-c" < "a/b"; the walk visits a/ first
  EXPECT_FALSE(ScanPathLess("a/b", "a/b"));
  EXPECT_TRUE(ScanPathLess("x", "/") == false);
  EXPECT_TRUE(ScanPathLess("", "a"));
}

TEST(WorkspaceWatchMergeTest, MergesATurnsChangesPerPathWithinItsBound) {
  TurnChanges turn;
  auto change = [](const std::string& path, ChangeKind kind) { return FileChange{path, kind, EntryType::kFile, 1}; };
  EXPECT_TRUE(WorkspaceWatch::Merge(turn, change("made", ChangeKind::kCreate), 3));
  EXPECT_TRUE(WorkspaceWatch::Merge(turn, change("made", ChangeKind::kModify), 3));
  EXPECT_TRUE(WorkspaceWatch::Merge(turn, change("brief", ChangeKind::kCreate), 3));
  EXPECT_TRUE(WorkspaceWatch::Merge(turn, change("brief", ChangeKind::kDelete), 3));
  EXPECT_TRUE(WorkspaceWatch::Merge(turn, change("redone", ChangeKind::kDelete), 3));
  EXPECT_TRUE(WorkspaceWatch::Merge(turn, change("redone", ChangeKind::kCreate), 3));
  EXPECT_TRUE(WorkspaceWatch::Merge(turn, change("dropped", ChangeKind::kModify), 3));
  EXPECT_FALSE(WorkspaceWatch::Merge(turn, change("one-too-many", ChangeKind::kCreate), 3));
  EXPECT_TRUE(WorkspaceWatch::Merge(turn, change("dropped", ChangeKind::kDelete), 3));  // held already
  ASSERT_EQ(turn.size(), 3u);
  EXPECT_EQ(turn["made"].kind, ChangeKind::kCreate);
  EXPECT_EQ(turn["redone"].kind, ChangeKind::kModify);
  EXPECT_EQ(turn["dropped"].kind, ChangeKind::kDelete);
  EXPECT_EQ(turn.count("brief"), 0u);
}

}  // namespace
}  // namespace corral::supervisor
