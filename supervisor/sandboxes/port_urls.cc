#include "supervisor/sandboxes/port_urls.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "common/base64.h"
#include "supervisor/loopback_ports.h"

namespace corral::supervisor {

std::string SignPortGrant(std::string_view key, const PortGrant& grant) {
  // Every field on its own line, prefixed by a version: no field can run into the next one
  // (ids and issuers hold no newline; sub is last).
  const std::string data = "corral-port-v1\n" + grant.sandbox_id + "\n" + std::to_string(grant.port) + "\n" +
                           std::to_string(grant.exp) + "\n" + grant.iss + "\n" + grant.sub;
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  static const unsigned char kNoKey = 0;  // never NULL: to OpenSSL a NULL key means "the previous one"
  const unsigned char* key_bytes = key.empty() ? &kNoKey : reinterpret_cast<const unsigned char*>(key.data());
  if (HMAC(EVP_sha256(), key_bytes, static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
           data.size(), mac, &length) == nullptr) {
    return "";
  }
  return Base64UrlEncode(std::string_view(reinterpret_cast<const char*>(mac), length));
}

bool VerifyPortGrant(std::string_view key, const PortGrant& grant, std::string_view signature, int64_t now) {
  if (key.empty() || now > grant.exp) return false;
  const std::string expected = SignPortGrant(key, grant);
  return !expected.empty() && signature.size() == expected.size() &&
         CRYPTO_memcmp(signature.data(), expected.data(), expected.size()) == 0;
}

bool IsShowablePort(int64_t port, uint64_t relay_port, uint64_t egress_port) {
  if (port < 1 || port > 65535) return false;
  const auto p = static_cast<uint64_t>(port);
  return p != relay_port && p != egress_port && p != kToolBridgePort;
}

}  // namespace corral::supervisor
