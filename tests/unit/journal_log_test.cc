// common/journal_log: the fields of a journal entry, and how corrald tells that its stderr is the
// journal. (The entries themselves reach a real journald in tests/package/, under systemd.)
#include "common/journal_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

#include "common/unique_fd.h"

namespace corral {
namespace {

TEST(JournalLogTest, FieldsCarryTheMessageTheLevelTheComponentAndEveryKey) {
  auto fields = JournalFields(LogLevel::kError, "sandbox", "start failed",
                              {{"sandbox", "sb_1"}, {"request_id", "r-7"}, {"error", "open /dev/x: ENOENT"}});
  std::vector<std::string> expected = {
      "MESSAGE=start failed sandbox=sb_1 request_id=r-7 error=\"open /dev/x: ENOENT\"",
      "PRIORITY=3",
      "SYSLOG_IDENTIFIER=corrald",
      "COMPONENT=sandbox",
      "SANDBOX=sb_1",
      "REQUEST_ID=r-7",
      "ERROR=open /dev/x: ENOENT",
  };
  EXPECT_EQ(fields, expected);
  EXPECT_EQ(JournalFields(LogLevel::kDebug, "a", "m", {})[1], "PRIORITY=7");
  EXPECT_EQ(JournalFields(LogLevel::kInfo, "a", "m", {})[1], "PRIORITY=6");
  EXPECT_EQ(JournalFields(LogLevel::kWarn, "a", "m", {})[1], "PRIORITY=4");
}

TEST(JournalLogTest, KeysThatWouldBeTheJournalsOwnFieldsArePrefixed) {
  auto fields = JournalFields(LogLevel::kInfo, "api", "m",
                              {{"errno", "2"}, {"message", "x"}, {"priority", "0"}, {"code_line", "1"},
                               {"syslog_identifier", "sshd"}, {"component", "c"}, {"_pid", "1"},
                               {"9lives", "y"}, {"a.b-c", "z"}});
  std::vector<std::string> names;
  for (size_t i = 4; i < fields.size(); ++i) names.push_back(fields[i].substr(0, fields[i].find('=')));
  std::vector<std::string> expected = {"CORRAL_ERRNO",        "CORRAL_MESSAGE",
                                       "CORRAL_PRIORITY",     "CORRAL_CODE_LINE",
                                       "CORRAL_SYSLOG_IDENTIFIER", "CORRAL_COMPONENT",
                                       "CORRAL__PID",         "CORRAL_9LIVES",
                                       "A_B_C"};
  EXPECT_EQ(names, expected);
  // The entry's own fields are still the real ones, once each.
  EXPECT_EQ(fields[0], "MESSAGE=m errno=2 message=x priority=0 code_line=1 syslog_identifier=sshd component=c "
                       "_pid=1 9lives=y a.b-c=z");
  EXPECT_EQ(fields[2], "SYSLOG_IDENTIFIER=corrald");
}

TEST(JournalLogTest, MessageValuesAreQuotedWhenTheyNeedIt) {
  auto fields = JournalFields(LogLevel::kInfo, "c", "m",
                              {{"a", ""}, {"b", "x=y"}, {"c", "line\nbreak"}, {"d", "say \"hi\""}});
  EXPECT_EQ(fields[0], "MESSAGE=m a=\"\" b=\"x=y\" c=\"line\\nbreak\" d=\"say \\\"hi\\\"\"");
  // The field keeps the value as it is (the journal takes any bytes).
  EXPECT_EQ(fields[6], "C=line\nbreak");
}

TEST(JournalLogTest, StderrIsTheJournalOnlyWhenJournalStreamNamesIt) {
  struct stat st;
  ASSERT_EQ(fstat(2, &st), 0);
  const std::string mine = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  EXPECT_TRUE(StderrIsJournal(mine.c_str()));
  // Controls: unset, malformed, another inode, another device.
  EXPECT_FALSE(StderrIsJournal(nullptr));
  EXPECT_FALSE(StderrIsJournal(""));
  EXPECT_FALSE(StderrIsJournal("garbage"));
  EXPECT_FALSE(StderrIsJournal((std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino + 1)).c_str()));
  EXPECT_FALSE(StderrIsJournal((std::to_string(st.st_dev + 1) + ":" + std::to_string(st.st_ino)).c_str()));
  // A variable inherited from a parent whose stderr was the journal, while ours is now a file.
  char path[] = "/tmp/corral-journal-test-XXXXXX";
  UniqueFd file(mkstemp(path));
  ASSERT_TRUE(file);
  unlink(path);
  UniqueFd saved(dup(2));
  ASSERT_EQ(dup2(file.get(), 2), 2);
  const bool after = StderrIsJournal(mine.c_str());
  dup2(saved.get(), 2);
  EXPECT_FALSE(after);
}

TEST(JournalLogTest, ASinkTakesLinesAndOneThatFailsLeavesThemToTheFd) {
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK), 0);
  UniqueFd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
  SetLogFd(write_end.get());
  static int taken = 0;
  SetLogSink([](LogLevel, std::string_view, std::string_view, LogFields) { return ++taken > 0; });
  LogInfo("test", "to the sink");
  char buffer[512];
  EXPECT_EQ(read(read_end.get(), buffer, sizeof(buffer)), -1);  // nothing on the fd
  EXPECT_EQ(taken, 1);
  SetLogSink([](LogLevel, std::string_view, std::string_view, LogFields) { return false; });
  LogInfo("test", "to the fd");
  ssize_t n = read(read_end.get(), buffer, sizeof(buffer));
  ASSERT_GT(n, 0);
  EXPECT_NE(std::string(buffer, static_cast<size_t>(n)).find("\"msg\":\"to the fd\""), std::string::npos);
  SetLogSink(nullptr);
  SetLogFd(2);
}

}  // namespace
}  // namespace corral
