// Secrets at rest (issue 21): a secret's value is kept in the store sealed with AES-256-GCM
// under the operator's key ([secrets] key_file: 32 random bytes, base64, a file root alone may
// read), never in clear, and opened only in the daemon when the egress proxy injects it.
//
// Sealed form (bytes): version 0x01, a random 96-bit nonce (one per seal: the same value sealed
// twice differs), the ciphertext, the 128-bit tag. The additional data is the caller's
// `context` (the secret's row: its id and owner), so a sealed value copied into another row does
// not open there. A key that is not the one it was sealed with, or any changed byte, fails to
// open (EBADMSG) rather than giving something else.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace corral::supervisor {

class SecretBox {
 public:
  static constexpr size_t kKeyBytes = 32;
  static constexpr size_t kNonceBytes = 12;
  static constexpr size_t kTagBytes = 16;

  // `key`: exactly kKeyBytes (EINVAL otherwise).
  static StatusOr<SecretBox> FromKey(std::string key);
  // The key from its file's text: base64 of kKeyBytes (whitespace around it ignored).
  static StatusOr<SecretBox> FromBase64(std::string_view text);

  StatusOr<std::string> Seal(std::string_view plaintext, std::string_view context) const;
  StatusOr<std::string> Open(std::string_view sealed, std::string_view context) const;
  // HMAC-SHA256 of `data` under a key derived from this one for `purpose` (never the sealing
  // key itself): 32 bytes, the same for the same key, purpose and data.
  std::string Tag(std::string_view purpose, std::string_view data) const;

 private:
  explicit SecretBox(std::string key) : key_(std::move(key)) {}
  std::string key_;
};

}  // namespace corral::supervisor
