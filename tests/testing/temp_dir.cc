#include "tests/testing/temp_dir.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>

#include <gtest/gtest.h>

#include "common/file_util.h"

namespace corral::test {

TempDir::TempDir(std::string_view tag) {
  std::string pattern = "/tmp/corral-" + std::string(tag) + "-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp " << pattern << ": " << std::strerror(errno);
    return;
  }
  path_ = pattern;
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  Status removed = RemoveTree(path_);
  if (!removed.ok()) ADD_FAILURE() << "removing " << path_ << ": " << removed.ToString();
}

std::string TempDir::Join(std::string_view relative) const { return path_ + "/" + std::string(relative); }

void TempDir::Put(std::string_view relative, std::string_view content) const {
  std::string full = Join(relative);
  std::string parent = full.substr(0, full.rfind('/'));
  Status made = MakeDirs(parent, 0755);
  if (!made.ok()) {
    ADD_FAILURE() << "making " << parent << ": " << made.ToString();
    return;
  }
  Status written = WriteNewFile(full, content);
  if (!written.ok()) ADD_FAILURE() << "writing " << full << ": " << written.ToString();
}

}  // namespace corral::test
