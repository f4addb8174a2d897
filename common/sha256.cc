#include "common/sha256.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>

#include "common/hex.h"
#include "common/unique_fd.h"

namespace corral {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  // Allocation failure or a FIPS provider without SHA-256: the context is dropped and
  // HexDigest reports nothing sensible; OpenSSL 3's default provider always has it.
  if (ctx_ != nullptr && EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1) ctx_.reset();
}

void Sha256::Update(std::span<const uint8_t> bytes) {
  if (ctx_ == nullptr || !digest_.empty() || bytes.empty()) return;
  EVP_DigestUpdate(ctx_.get(), bytes.data(), bytes.size());
}

void Sha256::Update(std::string_view bytes) {
  Update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

std::string Sha256::HexDigest() {
  if (!digest_.empty() || ctx_ == nullptr) return digest_;
  std::array<unsigned char, EVP_MAX_MD_SIZE> raw{};
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx_.get(), raw.data(), &len) != 1) return digest_;
  digest_ = HexLower(std::span<const uint8_t>(raw.data(), len));
  return digest_;
}

std::string Sha256Hex(std::string_view bytes) {
  Sha256 h;
  h.Update(bytes);
  return h.HexDigest();
}

StatusOr<std::string> Sha256File(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd) return ErrnoError("open " + path);
  return Sha256Fd(fd.get(), path);
}

StatusOr<std::string> Sha256Fd(int fd, const std::string& path) {
  Sha256 h;
  std::array<uint8_t, 1 << 16> buf;
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("read " + path);
    if (n == 0) break;
    h.Update(std::span<const uint8_t>(buf.data(), static_cast<size_t>(n)));
  }
  std::string hex = h.HexDigest();
  if (hex.empty()) return Status::Error("sha256 " + path + ": OpenSSL digest failed");
  return hex;
}

}  // namespace corral
