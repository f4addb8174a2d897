// SHA-256 over OpenSSL's EVP interface, streaming, with lowercase hex output: the digests of
// content-addressed image blobs and layers ("sha256:" + HexDigest()).
#pragma once

#include <openssl/evp.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"

namespace corral {

// A running SHA-256. Feed it with Update, then read HexDigest once (the object is finished
// after it; further Updates are ignored and HexDigest returns the same digest again).
//
//   Sha256 h;
//   h.Update("abc");
//   h.HexDigest();  // "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
class Sha256 {
 public:
  Sha256();
  Sha256(Sha256&&) noexcept = default;
  Sha256& operator=(Sha256&&) noexcept = default;

  void Update(std::span<const uint8_t> bytes);
  void Update(std::string_view bytes);
  // 64 lowercase hex digits.
  std::string HexDigest();

 private:
  struct Free {
    void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
  };
  std::unique_ptr<EVP_MD_CTX, Free> ctx_;
  std::string digest_;  // set by the first HexDigest
};

// The hex SHA-256 of `bytes` in one call.
std::string Sha256Hex(std::string_view bytes);

// The hex SHA-256 of a file's content, read in pieces (never whole into memory). Errors carry
// the path and errno.
StatusOr<std::string> Sha256File(const std::string& path);

// The hex SHA-256 of what is left to read in the open file `fd` (read to its end); `label` names
// it in errors.
StatusOr<std::string> Sha256Fd(int fd, const std::string& label);

}  // namespace corral
