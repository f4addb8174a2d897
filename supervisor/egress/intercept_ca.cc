#include "supervisor/egress/intercept_ca.h"

#include <arpa/inet.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <cerrno>

#include "common/file_util.h"

namespace corral::supervisor {
namespace {

struct KeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
struct CertFree {
  void operator()(X509* cert) const { X509_free(cert); }
};
struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;
using Cert = std::unique_ptr<X509, CertFree>;
using Bio = std::unique_ptr<BIO, BioFree>;

constexpr long kCaDays = 3650;
constexpr long kLeafDays = 7;
constexpr auto kLeafRenewAfter = std::chrono::hours(24 * 3);

Status OpenSslError(const std::string& what) {
  return Status::Error("egress CA: " + what + " failed", EIO);
}

Key NewKey() { return Key(EVP_EC_gen("P-256")); }

std::string Pem(X509* cert) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return "";
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

std::string KeyPem(EVP_PKEY* key) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) return "";
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

bool AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) return false;
  const bool added = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return added;
}

bool RandomSerial(X509* cert) {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) return false;
  bytes[0] &= 0x7f;  // positive
  BIGNUM* bn = BN_bin2bn(bytes, sizeof(bytes), nullptr);
  if (bn == nullptr) return false;
  const bool set = BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert)) != nullptr;
  BN_free(bn);
  return set;
}

// A certificate for `subject_key`, signed by `issuer_key` (`issuer` nullptr: self-signed).
Cert MakeCertificate(const std::string& common_name, EVP_PKEY* subject_key, X509* issuer, EVP_PKEY* issuer_key,
                     long days, bool ca, const std::string& alt_name) {
  Cert cert(X509_new());
  if (!cert || X509_set_version(cert.get(), 2) != 1 || !RandomSerial(cert.get())) return nullptr;
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), days * 24 * 3600);
  if (X509_set_pubkey(cert.get(), subject_key) != 1) return nullptr;
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>("corral"), -1, -1, 0);
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(common_name.c_str()),
                                 -1, -1, 0) != 1) {
    return nullptr;
  }
  X509* signer = issuer != nullptr ? issuer : cert.get();
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(signer)) != 1) return nullptr;
  bool ok = AddExtension(cert.get(), signer, NID_subject_key_identifier, "hash");
  if (ca) {
    ok = ok && AddExtension(cert.get(), signer, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") &&
         AddExtension(cert.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    ok = ok && AddExtension(cert.get(), signer, NID_basic_constraints, "critical,CA:FALSE") &&
         AddExtension(cert.get(), signer, NID_key_usage, "critical,digitalSignature") &&
         AddExtension(cert.get(), signer, NID_ext_key_usage, "serverAuth") &&
         AddExtension(cert.get(), signer, NID_authority_key_identifier, "keyid:always") &&
         AddExtension(cert.get(), signer, NID_subject_alt_name, alt_name.c_str());
  }
  if (!ok || X509_sign(cert.get(), issuer_key, EVP_sha256()) == 0) return nullptr;
  return cert;
}

bool IsIpLiteral(const std::string& host) {
  unsigned char buffer[16];
  return inet_pton(AF_INET, host.c_str(), buffer) == 1 || inet_pton(AF_INET6, host.c_str(), buffer) == 1;
}

}  // namespace

struct InterceptCa::Keys {
  Key ca_key;
  Cert ca_cert;
  Key leaf_key;
};

InterceptCa::InterceptCa(std::unique_ptr<Keys> keys, std::string certificate_pem)
    : keys_(std::move(keys)), certificate_pem_(std::move(certificate_pem)) {}

InterceptCa::~InterceptCa() = default;

StatusOr<std::unique_ptr<InterceptCa>> InterceptCa::LoadOrCreate(const std::string& dir, const std::string& label) {
  auto keys = std::make_unique<Keys>();
  const std::string key_path = dir + "/ca.key";
  const std::string cert_path = dir + "/ca.crt";
  struct stat st;
  if (lstat(key_path.c_str(), &st) == 0 || lstat(cert_path.c_str(), &st) == 0) {
    ASSIGN_OR_RETURN(std::string key_pem, ReadFileToString(key_path));
    ASSIGN_OR_RETURN(std::string cert_pem, ReadFileToString(cert_path));
    Bio key_bio(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
    Bio cert_bio(BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())));
    keys->ca_key.reset(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
    keys->ca_cert.reset(PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
    if (!keys->ca_key || !keys->ca_cert || X509_check_private_key(keys->ca_cert.get(), keys->ca_key.get()) != 1) {
      return Status::Error("egress CA: " + key_path + " and " + cert_path +
                               " do not load as a key and its certificate (move them away to make a new CA; "
                               "running sandboxes that trust the old one then need a restart)",
                           EINVAL);
    }
  } else {
    keys->ca_key = NewKey();
    if (!keys->ca_key) return OpenSslError("making the CA key");
    keys->ca_cert = MakeCertificate("corral egress CA (" + label + ")", keys->ca_key.get(), nullptr,
                                    keys->ca_key.get(), kCaDays, /*ca=*/true, "");
    if (!keys->ca_cert) return OpenSslError("making the CA certificate");
    RETURN_IF_ERROR(MakeDirs(dir, 0700));
    const std::string key_pem = KeyPem(keys->ca_key.get());
    if (key_pem.empty()) return OpenSslError("writing the CA key");
    // The key first: a certificate without its key is never left behind alone.
    RETURN_IF_ERROR(WriteNewFile(key_path + ".new", key_pem, 0600));
    RETURN_IF_ERROR(WriteNewFile(cert_path + ".new", Pem(keys->ca_cert.get()), 0644));
    if (rename((key_path + ".new").c_str(), key_path.c_str()) != 0) return ErrnoError("rename " + key_path);
    if (rename((cert_path + ".new").c_str(), cert_path.c_str()) != 0) return ErrnoError("rename " + cert_path);
  }
  keys->leaf_key = NewKey();
  if (!keys->leaf_key) return OpenSslError("making the leaf key");
  std::string pem = Pem(keys->ca_cert.get());
  if (pem.empty()) return OpenSslError("reading the CA certificate");
  return std::unique_ptr<InterceptCa>(new InterceptCa(std::move(keys), std::move(pem)));
}

StatusOr<std::shared_ptr<boost::asio::ssl::context>> InterceptCa::ServerContext(const std::string& host) {
  const bool name = !host.empty() && host.size() <= 253 &&
                    host.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") ==
                        std::string::npos;
  if (!name && !IsIpLiteral(host)) {
    return Status::Error("egress CA: no certificate for \"" + host.substr(0, 64) + "\" (not a DNS name or an address)",
                         EINVAL);
  }
  const auto now = std::chrono::system_clock::now();
  std::lock_guard lock(mu_);
  if (auto it = cache_.find(host); it != cache_.end() && now - it->second.made < kLeafRenewAfter) {
    return it->second.context;
  }
  const std::string alt = (IsIpLiteral(host) ? "IP:" : "DNS:") + host;
  Cert leaf = MakeCertificate(host.substr(0, 64), keys_->leaf_key.get(), keys_->ca_cert.get(), keys_->ca_key.get(),
                              kLeafDays, /*ca=*/false, alt);
  if (!leaf) return OpenSslError("making a certificate for " + host);
  auto context = std::make_shared<boost::asio::ssl::context>(boost::asio::ssl::context::tls_server);
  SSL_CTX* ctx = context->native_handle();
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  if (SSL_CTX_use_certificate(ctx, leaf.get()) != 1 || SSL_CTX_use_PrivateKey(ctx, keys_->leaf_key.get()) != 1) {
    return OpenSslError("a server context for " + host);
  }
  if (cache_.size() >= kMaxCachedHosts) cache_.clear();
  cache_[host] = Cached{context, now};
  return context;
}

}  // namespace corral::supervisor
