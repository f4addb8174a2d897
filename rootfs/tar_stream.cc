#include "rootfs/tar_stream.h"

#include <fcntl.h>

namespace corral::rootfs {
namespace {

// libarchive's message for its last error; NULL when it set none.
std::string ErrorOf(struct archive* a) {
  const char* why = archive_error_string(a);
  return why != nullptr ? why : "unreadable";
}

}  // namespace

StatusOr<std::unique_ptr<TarStream>> TarStream::Open(const std::string& path, uint64_t max_stream_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd) return ErrnoError("open " + path);
  return Open(std::move(fd), path, max_stream_bytes);
}

StatusOr<std::unique_ptr<TarStream>> TarStream::Open(UniqueFd fd, const std::string& path, uint64_t max_stream_bytes) {
  std::unique_ptr<TarStream> s(new TarStream());
  s->max_stream_bytes_ = max_stream_bytes;
  s->fd_ = std::move(fd);
  s->outer_.reset(archive_read_new());
  s->inner_.reset(archive_read_new());
  if (s->outer_ == nullptr || s->inner_ == nullptr) return Status::Error("archive_read_new: out of memory");
  // Only the compressions OCI layers use; "none" is always on. archive_read_support_filter_all
  // would also enable filters that run external programs (lrzip, lzop, grzip) on the input.
  archive_read_support_filter_gzip(s->outer_.get());
  archive_read_support_filter_zstd(s->outer_.get());
  archive_read_support_format_raw(s->outer_.get());
  if (archive_read_open_fd(s->outer_.get(), s->fd_.get(), 1 << 16) != ARCHIVE_OK) {
    return Status::Error("read " + path + ": " + ErrorOf(s->outer_.get()));
  }
  struct archive_entry* raw = nullptr;
  int r = archive_read_next_header(s->outer_.get(), &raw);
  if (r == ARCHIVE_EOF) return Status::Error("empty file");
  if (r < ARCHIVE_WARN) return Status::Error("decompress: " + ErrorOf(s->outer_.get()));
  archive_read_support_format_tar(s->inner_.get());
  if (archive_read_open(s->inner_.get(), s.get(), nullptr, &TarStream::ReadCallback, nullptr) != ARCHIVE_OK) {
    return s->InnerError("tar");
  }
  return s;
}

TarStream::~TarStream() = default;

la_ssize_t TarStream::ReadCallback(struct archive*, void* self, const void** buf) {
  return static_cast<TarStream*>(self)->Pull(buf);
}

la_ssize_t TarStream::Pull(const void** buf) {
  if (!stream_error_.empty()) return ARCHIVE_FATAL;
  if (outer_done_) return 0;
  la_ssize_t n = archive_read_data(outer_.get(), buffer_.data(), buffer_.size());
  if (n < 0) {
    stream_error_ = "decompress: " + ErrorOf(outer_.get());
    return ARCHIVE_FATAL;
  }
  if (n == 0) {
    outer_done_ = true;
    return 0;
  }
  stream_bytes_ += static_cast<uint64_t>(n);
  if (stream_bytes_ > max_stream_bytes_) {
    stream_error_ = "uncompressed size exceeds " + std::to_string(max_stream_bytes_) + " bytes";
    return ARCHIVE_FATAL;
  }
  hash_.Update(std::span<const uint8_t>(buffer_.data(), static_cast<size_t>(n)));
  *buf = buffer_.data();
  return n;
}

Status TarStream::InnerError(const char* what) {
  if (!stream_error_.empty()) return Status::Error(stream_error_, EFBIG);  // only the size cap sets it
  return Status::Error(std::string(what) + ": " + ErrorOf(inner_.get()));
}

StatusOr<archive_entry*> TarStream::Next() {
  struct archive_entry* entry = nullptr;
  int r = archive_read_next_header(inner_.get(), &entry);
  if (r == ARCHIVE_EOF) {
    if (!stream_error_.empty()) return Status::Error(stream_error_, EFBIG);  // only the size cap sets it
    return static_cast<archive_entry*>(nullptr);
  }
  // ARCHIVE_WARN: a lossy conversion (a UTF-8 name in the C locale); the entry is still whole.
  if (r < ARCHIVE_WARN) return InnerError("tar header");
  return entry;
}

Status TarStream::ReadBlock(const void** buf, size_t* size, int64_t* offset, bool* done) {
  la_int64_t off = 0;
  int r = archive_read_data_block(inner_.get(), buf, size, &off);
  *offset = off;
  *done = r == ARCHIVE_EOF;
  if (r == ARCHIVE_EOF) *size = 0;
  if (r < ARCHIVE_WARN) return InnerError("tar data");
  return Status();
}

StatusOr<std::string> TarStream::Finish() {
  const void* ignored = nullptr;
  while (!outer_done_) {
    if (Pull(&ignored) < 0) return Status::Error(stream_error_);
  }
  // libarchive may have hit the end of the raw stream itself while reading ahead; an error
  // it met there (a truncated gzip trailer) must not pass.
  if (!stream_error_.empty()) return Status::Error(stream_error_, EFBIG);  // only the size cap sets it
  return hash_.HexDigest();
}

}  // namespace corral::rootfs
