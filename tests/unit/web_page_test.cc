// The web page's files as corrald loads them (api/web_page.h): index.html and assets/ read once;
// dot files, symlinks, subdirectories other than assets/ and non-regular files are left out; no
// index.html is an error.
#include "api/web_page.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "tests/testing/temp_dir.h"

namespace corral::api {
namespace {

class WebPageTest : public ::testing::Test {
 protected:
  void Write(const std::string& name, const std::string& content) {
    std::ofstream(dir_ + "/" + name) << content;
  }

  test::TempDir tmp_{"web-page-test"};
  const std::string dir_ = tmp_.path();
};

TEST_F(WebPageTest, LoadsIndexAndAssetsWithTheirTypes) {
  Write("index.html", "<!doctype html>");
  ASSERT_EQ(mkdir((dir_ + "/assets").c_str(), 0755), 0);
  Write("assets/main.js", "console.log(1)");
  Write("assets/main.css", "body{}");
  Write("assets/main.js.map", "{}");
  auto files = LoadWebPage(dir_);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  ASSERT_EQ(files->size(), 4u);
  EXPECT_EQ(files->at("index.html").body, "<!doctype html>");
  EXPECT_EQ(files->at("index.html").content_type, "text/html; charset=utf-8");
  EXPECT_EQ(files->at("assets/main.js").content_type, "text/javascript; charset=utf-8");
  EXPECT_EQ(files->at("assets/main.css").content_type, "text/css; charset=utf-8");
  EXPECT_EQ(files->at("assets/main.js.map").content_type, "application/json");
}

TEST_F(WebPageTest, LeavesOutDotFilesSymlinksAndOtherDirectories) {
  Write("index.html", "page");
  Write(".env", "SECRET=1");
  Write("secret.txt", "outside the page");
  ASSERT_EQ(symlink("/etc/passwd", (dir_ + "/passwd.html").c_str()), 0);
  ASSERT_EQ(mkdir((dir_ + "/private").c_str(), 0755), 0);
  Write("private/key.js", "k");
  ASSERT_EQ(mkdir((dir_ + "/assets").c_str(), 0755), 0);
  ASSERT_EQ(symlink((dir_ + "/secret.txt").c_str(), (dir_ + "/assets/link.js").c_str()), 0);
  ASSERT_EQ(mkfifo((dir_ + "/assets/fifo.js").c_str(), 0644), 0);
  Write("assets/ok.js", "ok");
  auto files = LoadWebPage(dir_);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ(files->count(".env"), 0u);
  EXPECT_EQ(files->count("passwd.html"), 0u);
  EXPECT_EQ(files->count("private/key.js"), 0u);
  EXPECT_EQ(files->count("assets/link.js"), 0u);
  EXPECT_EQ(files->count("assets/fifo.js"), 0u);
  // Positive controls: regular files beside them are there.
  EXPECT_EQ(files->count("assets/ok.js"), 1u);
  EXPECT_EQ(files->count("secret.txt"), 1u);  // directly in the page's directory: part of it
}

TEST_F(WebPageTest, AnAssetsSymlinkIsNotFollowed) {
  Write("index.html", "page");
  ASSERT_EQ(symlink("/etc", (dir_ + "/assets").c_str()), 0);
  auto files = LoadWebPage(dir_);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ(files->size(), 1u);
}

TEST_F(WebPageTest, NoIndexIsAnError) {
  Write("main.js", "x");
  auto files = LoadWebPage(dir_);
  ASSERT_FALSE(files.ok());
  EXPECT_NE(files.status().message().find("no index.html"), std::string::npos);
  EXPECT_FALSE(LoadWebPage(dir_ + "/missing").ok());
}

TEST(WebContentTypeTest, UnknownIsOctetStream) {
  EXPECT_EQ(WebContentType("x.wasm"), "application/octet-stream");
  EXPECT_EQ(WebContentType("noext"), "application/octet-stream");
  EXPECT_EQ(WebContentType("a.svg"), "image/svg+xml");
}

}  // namespace
}  // namespace corral::api
