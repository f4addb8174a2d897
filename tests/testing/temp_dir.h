// A directory of a test's own, removed with everything in it when the test is done.
//
//   corral::test::TempDir dir("store");          // /tmp/corral-store-XXXXXX
//   dir.Put("etc/a.toml", "[api]\n");            // parents made as needed
//   Store::Open(dir.Join("corrald.db"));
//
// Not for directories that must outlive the object (a daemon's state kept across a restart in
// one test keeps the object alive instead).
#pragma once

#include <string>
#include <string_view>

namespace corral::test {

class TempDir {
 public:
  // Makes /tmp/corral-<tag>-XXXXXX (mode 0700). A failure is a failure of the running test, and
  // path() is then empty.
  explicit TempDir(std::string_view tag);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path() + "/" + relative.
  std::string Join(std::string_view relative) const;
  // Writes `content` to Join(relative), making its parent directories (0755). Fails the running
  // test when it cannot.
  void Put(std::string_view relative, std::string_view content) const;

 private:
  std::string path_;
};

}  // namespace corral::test
