// The egress proxy's CA (supervisor/egress/intercept_ca.h): made once and read again, a leaf for
// a host that verifies under the CA for that host alone (checked with OpenSSL's own verifier, as
// a client in a sandbox would), an address as an IP subjectAltName, and names that are not hosts
// refused; a CA's files that do not load are an error, never replaced.
#include <gtest/gtest.h>

#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <cerrno>
#include <fstream>

#include "common/file_util.h"
#include "supervisor/egress/intercept_ca.h"
#include "tests/testing/temp_dir.h"

namespace corral::supervisor {
namespace {

X509* ReadPem(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  return cert;
}

// Whether `leaf` verifies under `ca_pem` for `host` (a name, or an address when `ip`).
bool Verifies(X509* leaf, const std::string& ca_pem, const std::string& host, bool ip = false) {
  X509* ca = ReadPem(ca_pem);
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, ca);
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(ctx, store, leaf, nullptr);
  X509_VERIFY_PARAM* param = X509_STORE_CTX_get0_param(ctx);
  X509_VERIFY_PARAM_set_purpose(param, X509_PURPOSE_SSL_SERVER);
  if (ip) X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());
  else X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size());
  const bool ok = X509_verify_cert(ctx) == 1;
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  X509_free(ca);
  return ok;
}

X509* LeafOf(boost::asio::ssl::context& context) { return SSL_CTX_get0_certificate(context.native_handle()); }

TEST(InterceptCaTest, ALeafVerifiesForItsHostAlone) {
  test::TempDir dir("intercept-ca");
  auto ca = InterceptCa::LoadOrCreate(dir.Join("ca"), "node-a");
  ASSERT_TRUE(ca.ok()) << ca.status().ToString();
  auto context = (*ca)->ServerContext("api.github.test");
  ASSERT_TRUE(context.ok()) << context.status().ToString();
  X509* leaf = LeafOf(**context);
  ASSERT_NE(leaf, nullptr);
  EXPECT_TRUE(Verifies(leaf, (*ca)->certificate_pem(), "api.github.test"));
  EXPECT_FALSE(Verifies(leaf, (*ca)->certificate_pem(), "evil.test"));
  EXPECT_FALSE(Verifies(leaf, (*ca)->certificate_pem(), "x.api.github.test"));
  // Under another CA it verifies for nothing.
  test::TempDir other_dir("intercept-ca-2");
  auto other = InterceptCa::LoadOrCreate(other_dir.Join("ca"), "node-b");
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(Verifies(leaf, (*other)->certificate_pem(), "api.github.test"));
  // The same host again: the same context (kept), so one certificate per host.
  EXPECT_EQ(context->get(), (*ca)->ServerContext("api.github.test")->get());
}

TEST(InterceptCaTest, AnAddressGetsAnIpName) {
  test::TempDir dir("intercept-ca");
  auto ca = InterceptCa::LoadOrCreate(dir.Join("ca"), "node-a");
  ASSERT_TRUE(ca.ok());
  auto context = (*ca)->ServerContext("203.0.113.10");
  ASSERT_TRUE(context.ok());
  EXPECT_TRUE(Verifies(LeafOf(**context), (*ca)->certificate_pem(), "203.0.113.10", /*ip=*/true));
  EXPECT_FALSE(Verifies(LeafOf(**context), (*ca)->certificate_pem(), "203.0.113.11", /*ip=*/true));
}

TEST(InterceptCaTest, NamesThatAreNotHostsAreRefused) {
  test::TempDir dir("intercept-ca");
  auto ca = InterceptCa::LoadOrCreate(dir.Join("ca"), "node-a");
  ASSERT_TRUE(ca.ok());
  for (const std::string& host : std::vector<std::string>{"", "a,DNS:evil.test", "a b", "*.test", std::string(254, 'a'), "a\nb"}) {
    EXPECT_EQ((*ca)->ServerContext(host).status().error_number(), EINVAL) << host;
  }
}

TEST(InterceptCaTest, TheCaIsKeptAndReadAgainWithItsKeyPrivate) {
  test::TempDir dir("intercept-ca");
  std::string first;
  {
    auto ca = InterceptCa::LoadOrCreate(dir.Join("ca"), "node-a");
    ASSERT_TRUE(ca.ok());
    first = (*ca)->certificate_pem();
  }
  struct stat st;
  ASSERT_EQ(stat(dir.Join("ca/ca.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(dir.Join("ca").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0077, 0u);
  auto again = InterceptCa::LoadOrCreate(dir.Join("ca"), "node-a");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->certificate_pem(), first);
  // A leaf of the CA read again verifies under the first one's certificate.
  EXPECT_TRUE(Verifies(LeafOf(**(*again)->ServerContext("git.test")), first, "git.test"));
  // Its CA certificate is a CA that signs certificates only.
  X509* cert = ReadPem(first);
  ASSERT_NE(cert, nullptr);
  EXPECT_EQ(X509_check_ca(cert), 1);
  EXPECT_EQ(X509_get_key_usage(cert), static_cast<uint32_t>(KU_KEY_CERT_SIGN | KU_CRL_SIGN));
  X509_free(cert);
}

TEST(InterceptCaTest, FilesThatDoNotLoadAreAnErrorNotReplaced) {
  test::TempDir dir("intercept-ca");
  dir.Put("ca/ca.key", "not a key\n");
  dir.Put("ca/ca.crt", "not a certificate\n");
  auto ca = InterceptCa::LoadOrCreate(dir.Join("ca"), "node-a");
  EXPECT_EQ(ca.status().error_number(), EINVAL);
  EXPECT_EQ(*ReadFileToString(dir.Join("ca/ca.key")), "not a key\n");
}

}  // namespace
}  // namespace corral::supervisor
