// The fake kernel of the cgroup backends' unit tests (cgroups_v1_test.cc, cgroups_v2_test.cc):
// a temporary directory laid out like a hierarchy.
//
// A temporary directory is not cgroupfs: mkdir creates no control files, and a write(2) without
// O_TRUNC overwrites a regular file from offset 0 instead of being parsed. So the fakes pre-create
// the files a test needs (empty when the backend writes them, with realistic contents when it
// reads them), and `Overwritten()` models what one write leaves in a file that already held text.
// Write order is observed with inotify, and "written exactly once" with a FIFO in place of the
// control file.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "common/file_util.h"
#include "common/unique_fd.h"

namespace corral::cgroups::fake {

// ---------------------------------------------------------------------------------------------
// Fake file system helpers

inline void Put(const std::string& path, const std::string& content) {
  ASSERT_TRUE(WriteNewFile(path, content).ok()) << path;
}

// The file's contents, or "<missing>".
inline std::string Get(const std::string& path) {
  StatusOr<std::string> content = ReadFileToString(path);
  return content.ok() ? *content : "<missing>";
}

inline bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

inline void MakeDir(const std::string& path) { ASSERT_TRUE(MakeDirs(path).ok()) << path; }

// What one write(2) of `written` at offset 0, without O_TRUNC, leaves in a regular file that
// held `before`.
inline std::string Overwritten(std::string before, const std::string& written) {
  if (before.size() < written.size()) before.resize(written.size());
  return before.replace(0, written.size(), written);
}

// Records the names of files modified in watched directories, in the order of the writes.
// inotify merges an event identical to the one queued just before it, so two consecutive writes
// to one file show as one: see FifoSpy for counting writes.
class WriteRecorder {
 public:
  WriteRecorder() : fd_(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) {}
  void Watch(const std::string& dir) {
    ASSERT_GE(::inotify_add_watch(fd_.get(), dir.c_str(), IN_MODIFY), 0) << dir;
  }
  std::vector<std::string> Names() {
    std::vector<std::string> names;
    alignas(struct inotify_event) char buf[8192];
    for (;;) {
      ssize_t n = ::read(fd_.get(), buf, sizeof(buf));
      if (n <= 0) break;
      for (char* p = buf; p < buf + n;) {
        auto* event = reinterpret_cast<struct inotify_event*>(p);
        names.emplace_back(event->len > 0 ? event->name : "");
        p += sizeof(struct inotify_event) + event->len;
      }
    }
    return names;
  }

 private:
  UniqueFd fd_;
};

// A FIFO in place of a control file shows every byte written to it, in order (inotify would
// merge two consecutive writes to one file into one event).
class FifoSpy {
 public:
  explicit FifoSpy(const std::string& path) {
    (void)::unlink(path.c_str());
    EXPECT_EQ(::mkfifo(path.c_str(), 0600), 0) << path;
    // O_RDWR: the backend's O_WRONLY open then finds a reader and does not block.
    reader_.reset(::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC));
    EXPECT_TRUE(reader_.valid()) << path;
  }
  std::string Drain() {
    std::string out;
    char buf[256];
    ssize_t n;
    while ((n = ::read(reader_.get(), buf, sizeof(buf))) > 0)
      out.append(buf, static_cast<size_t>(n));
    return out;
  }

 private:
  UniqueFd reader_;
};

}  // namespace corral::cgroups::fake
