// A sandbox's trust bundle (supervisor/sandboxes/trust_bundle.h): its image's bundle from the
// top-most layer that has one, read inside the layer's directory (a link in it could name a host
// file: it resolves inside the layer, or not at all), a whiteout ending the search; the CA
// appended; the binds.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/file_util.h"
#include "supervisor/sandboxes/trust_bundle.h"
#include "tests/testing/temp_dir.h"

namespace corral::supervisor {
namespace {

constexpr char kCa[] = "-----BEGIN CERTIFICATE-----\nCORRAL\n-----END CERTIFICATE-----\n";

TEST(TrustBundleTest, TheTopMostLayerWithABundleGivesIt) {
  test::TempDir dir("trust");
  dir.Put("top/etc/hostname", "x\n");
  dir.Put("middle/etc/ssl/certs/ca-certificates.crt", "MIDDLE\n");
  dir.Put("bottom/etc/ssl/certs/ca-certificates.crt", "BOTTOM\n");
  auto bundle = ImageTrustBundle({dir.Join("top"), dir.Join("middle"), dir.Join("bottom")});
  ASSERT_TRUE(bundle.ok()) << bundle.status().ToString();
  EXPECT_EQ(*bundle, "MIDDLE\n");
  EXPECT_EQ(*ImageTrustBundle({dir.Join("top")}), "");
}

TEST(TrustBundleTest, LinksInALayerAreNeverFollowed) {
  test::TempDir dir("trust");
  dir.Put("secret/shadow", "root:HASH\n");
  // A final symlink to a host file, and a directory symlink on the way.
  ASSERT_EQ(mkdir(dir.Join("final").c_str(), 0755), 0);
  dir.Put("final/etc/ssl/certs/placeholder", "");
  ASSERT_EQ(symlink(dir.Join("secret/shadow").c_str(), dir.Join("final/etc/ssl/certs/ca-certificates.crt").c_str()), 0);
  dir.Put("middle/etc/placeholder", "");
  ASSERT_EQ(symlink(dir.Join("secret").c_str(), dir.Join("middle/etc/ssl").c_str()), 0);
  dir.Put("secret/certs/ca-certificates.crt", "HOST FILE\n");
  auto final_link = ImageTrustBundle({dir.Join("final")});
  ASSERT_TRUE(final_link.ok());
  EXPECT_EQ(*final_link, "");
  auto middle_link = ImageTrustBundle({dir.Join("middle")});
  EXPECT_TRUE(!middle_link.ok() || middle_link->find("HOST FILE") == std::string::npos);
}

TEST(TrustBundleTest, AWhiteoutEndsTheSearch) {
  if (geteuid() != 0) GTEST_SKIP() << "a whiteout is a 0/0 character device: mknod needs root";
  test::TempDir dir("trust");
  dir.Put("top/etc/ssl/certs/placeholder", "");
  ASSERT_EQ(mknod(dir.Join("top/etc/ssl/certs/ca-certificates.crt").c_str(), S_IFCHR | 0000, makedev(0, 0)), 0);
  dir.Put("bottom/etc/ssl/certs/ca-certificates.crt", "BOTTOM\n");
  EXPECT_EQ(*ImageTrustBundle({dir.Join("top"), dir.Join("bottom")}), "");
  EXPECT_EQ(*ImageTrustBundle({dir.Join("bottom")}), "BOTTOM\n");  // the control
}

TEST(TrustBundleTest, PrepareWritesTheImagesBundleAndTheCaAndNamesTheBinds) {
  test::TempDir dir("trust");
  dir.Put("layer/etc/ssl/certs/ca-certificates.crt", "IMAGE CAS");  // no final newline
  TrustBundles bundles(dir.Join("run"), kCa);
  auto binds = bundles.Prepare("sb_x", {dir.Join("layer")});
  ASSERT_TRUE(binds.ok()) << binds.status().ToString();
  EXPECT_EQ(*ReadFileToString(dir.Join("run/trust/sb_x.pem")), std::string("IMAGE CAS\n") + kCa);
  struct stat st;
  ASSERT_EQ(stat(dir.Join("run/trust/sb_x.pem").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0444, 0444u);  // the sandbox's uids read it
  ASSERT_EQ(binds->size(), 2u);
  EXPECT_EQ((*binds)[0].target, kSystemTrustBundle);
  EXPECT_TRUE((*binds)[0].if_exists);  // never made where the image has none
  EXPECT_TRUE((*binds)[0].read_only);
  EXPECT_EQ((*binds)[1].target, kTrustBundleInSandbox);
  EXPECT_FALSE((*binds)[1].if_exists);
  EXPECT_TRUE(bundles.Bound("sb_x"));
  bundles.Remove("sb_x");
  EXPECT_FALSE(bundles.Bound("sb_x"));
  // An image without a bundle: the CA alone.
  dir.Put("bare/etc/hostname", "x\n");
  ASSERT_TRUE(bundles.Prepare("sb_y", {dir.Join("bare")}).ok());
  EXPECT_EQ(*ReadFileToString(dir.Join("run/trust/sb_y.pem")), kCa);
}

TEST(TrustBundleTest, TheEnvironmentNamesTheBundleInTheSandbox) {
  for (const std::string& var : TrustBundles::Environment()) {
    EXPECT_NE(var.find(std::string("=") + kTrustBundleInSandbox), std::string::npos) << var;
  }
  EXPECT_GE(TrustBundles::Environment().size(), 5u);
}

}  // namespace
}  // namespace corral::supervisor
