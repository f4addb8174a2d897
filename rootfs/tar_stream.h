// A tar archive read from a file through libarchive, plain, gzip or zstd (chosen by the content;
// no other filter, and never one that runs an external program), with the uncompressed stream
// hashed (SHA-256: a layer's diff_id) and capped as it is read.
//
// Two libarchive readers in a row: the outer one decompresses the file (format "raw"), the inner
// one reads tar headers and data from the outer one's output through a callback that hashes and
// counts it. A stream that passes `max_stream_bytes` is refused at that point ("uncompressed
// size exceeds N bytes"), a truncated or corrupt one with libarchive's cause.
#pragma once

#include <archive.h>
#include <archive_entry.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/sha256.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace corral::rootfs {

class TarStream {
 public:
  // Opens `path` and reads the start of the stream (an empty or unreadable file is an error).
  static StatusOr<std::unique_ptr<TarStream>> Open(const std::string& path, uint64_t max_stream_bytes);
  // The same over an open file, read from its current offset; `label` names it in errors.
  static StatusOr<std::unique_ptr<TarStream>> Open(UniqueFd fd, const std::string& label, uint64_t max_stream_bytes);
  ~TarStream();
  TarStream(const TarStream&) = delete;
  TarStream& operator=(const TarStream&) = delete;

  // The next entry (owned by the stream, valid until the next call), or nullptr at the end of
  // the archive.
  StatusOr<archive_entry*> Next();

  // The next block of the current entry's data: `*size` bytes at `*offset` in the file (holes
  // of sparse files skipped). `*done` is set after the last block.
  Status ReadBlock(const void** buf, size_t* size, int64_t* offset, bool* done);

  // Reads what follows the end of the archive (the padding), then returns the hex SHA-256 of the
  // whole uncompressed stream. Call once, after Next() returned nullptr.
  StatusOr<std::string> Finish();

  uint64_t stream_bytes() const { return stream_bytes_; }

 private:
  TarStream() = default;
  static la_ssize_t ReadCallback(struct archive* inner, void* self, const void** buf);
  la_ssize_t Pull(const void** buf);
  Status InnerError(const char* what);

  struct Free {
    void operator()(struct archive* a) const { archive_read_free(a); }
  };
  UniqueFd fd_;
  std::unique_ptr<struct archive, Free> outer_;
  std::unique_ptr<struct archive, Free> inner_;
  std::vector<uint8_t> buffer_ = std::vector<uint8_t>(size_t{1} << 17);
  Sha256 hash_;
  uint64_t stream_bytes_ = 0;
  uint64_t max_stream_bytes_ = 0;
  bool outer_done_ = false;
  std::string stream_error_;  // why Pull failed: set before it returns ARCHIVE_FATAL
};

}  // namespace corral::rootfs
