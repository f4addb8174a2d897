#include "supervisor/secrets/secret_box.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cerrno>
#include <memory>
#include <optional>

#include "common/base64.h"

namespace corral::supervisor {
namespace {

constexpr unsigned char kVersion = 0x01;

struct CipherFree {
  void operator()(EVP_CIPHER_CTX* ctx) const { EVP_CIPHER_CTX_free(ctx); }
};
using Cipher = std::unique_ptr<EVP_CIPHER_CTX, CipherFree>;

const unsigned char* Bytes(std::string_view s) { return reinterpret_cast<const unsigned char*>(s.data()); }
unsigned char* Bytes(std::string& s) { return reinterpret_cast<unsigned char*>(s.data()); }

Status Failed() { return Status::Error("secret box: the value does not open (another key, or changed)", EBADMSG); }

}  // namespace

StatusOr<SecretBox> SecretBox::FromKey(std::string key) {
  if (key.size() != kKeyBytes) {
    return Status::Error("a secrets key is " + std::to_string(kKeyBytes) + " bytes, not " + std::to_string(key.size()),
                         EINVAL);
  }
  return SecretBox(std::move(key));
}

StatusOr<SecretBox> SecretBox::FromBase64(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.remove_suffix(1);
  while (!text.empty() && (text.front() == ' ' || text.front() == '\n')) text.remove_prefix(1);
  std::optional<std::string> key = Base64Decode(text);
  if (!key) return Status::Error("a secrets key is base64 (head -c 32 /dev/urandom | base64)", EINVAL);
  return FromKey(std::move(*key));
}

StatusOr<std::string> SecretBox::Seal(std::string_view plaintext, std::string_view context) const {
  std::string sealed(1 + kNonceBytes + plaintext.size() + kTagBytes, '\0');
  sealed[0] = static_cast<char>(kVersion);
  unsigned char* nonce = Bytes(sealed) + 1;
  unsigned char* out = nonce + kNonceBytes;
  if (RAND_bytes(nonce, kNonceBytes) != 1) return Status::Error("secret box: no random nonce", EIO);
  Cipher ctx(EVP_CIPHER_CTX_new());
  int n = 0, tail = 0;
  if (!ctx || EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, nullptr, nullptr) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_IVLEN, kNonceBytes, nullptr) != 1 ||
      EVP_EncryptInit_ex(ctx.get(), nullptr, nullptr, Bytes(key_), nonce) != 1 ||
      EVP_EncryptUpdate(ctx.get(), nullptr, &n, Bytes(context), static_cast<int>(context.size())) != 1 ||
      EVP_EncryptUpdate(ctx.get(), out, &n, Bytes(plaintext), static_cast<int>(plaintext.size())) != 1 ||
      EVP_EncryptFinal_ex(ctx.get(), out + n, &tail) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kTagBytes, out + plaintext.size()) != 1) {
    return Status::Error("secret box: sealing failed", EIO);
  }
  return sealed;
}

StatusOr<std::string> SecretBox::Open(std::string_view sealed, std::string_view context) const {
  if (sealed.size() < 1 + kNonceBytes + kTagBytes || static_cast<unsigned char>(sealed[0]) != kVersion) return Failed();
  const unsigned char* nonce = Bytes(sealed) + 1;
  const unsigned char* in = nonce + kNonceBytes;
  const size_t length = sealed.size() - 1 - kNonceBytes - kTagBytes;
  std::string tag(sealed.substr(sealed.size() - kTagBytes));
  std::string plaintext(length, '\0');
  Cipher ctx(EVP_CIPHER_CTX_new());
  int n = 0, tail = 0;
  if (!ctx || EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, nullptr, nullptr) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_IVLEN, kNonceBytes, nullptr) != 1 ||
      EVP_DecryptInit_ex(ctx.get(), nullptr, nullptr, Bytes(key_), nonce) != 1 ||
      EVP_DecryptUpdate(ctx.get(), nullptr, &n, Bytes(context), static_cast<int>(context.size())) != 1 ||
      EVP_DecryptUpdate(ctx.get(), Bytes(plaintext), &n, in, static_cast<int>(length)) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kTagBytes, Bytes(tag)) != 1 ||
      EVP_DecryptFinal_ex(ctx.get(), Bytes(plaintext) + n, &tail) != 1) {
    OPENSSL_cleanse(plaintext.data(), plaintext.size());
    return Failed();
  }
  return plaintext;
}

std::string SecretBox::Tag(std::string_view purpose, std::string_view data) const {
  unsigned char derived[EVP_MAX_MD_SIZE];
  unsigned int derived_length = 0;
  const std::string label = "corral secret box: " + std::string(purpose);
  HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()), Bytes(label), label.size(), derived, &derived_length);
  unsigned char tag[EVP_MAX_MD_SIZE];
  unsigned int tag_length = 0;
  HMAC(EVP_sha256(), derived, static_cast<int>(derived_length), Bytes(data), data.size(), tag, &tag_length);
  OPENSSL_cleanse(derived, sizeof(derived));
  return std::string(reinterpret_cast<const char*>(tag), tag_length);
}

}  // namespace corral::supervisor
