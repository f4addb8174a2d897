#include "tools/corral/outcome.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

namespace corral::cli {
namespace {

constexpr int Exited(int code) { return code << 8; }
constexpr int Killed(int sig) { return sig; }

TEST(OutcomeTest, ExitedWithCode) {
  OutcomeEvidence e;
  e.command_status = Exited(3);
  e.init_status = Exited(3);
  e.stats.cpu_user_usec = 1500000;
  e.stats.cpu_system_usec = 250000;
  e.stats.memory_peak_bytes = 1234;
  e.wall_us = 2000000;
  Outcome o = ClassifyOutcome(e);
  EXPECT_EQ(o.kind, OutcomeKind::kExited);
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_FALSE(o.signal);
  EXPECT_EQ(ExitCodeFor(o), 3);
  nlohmann::json j = OutcomeToJson(o);
  EXPECT_EQ(j["outcome"], "exited");
  EXPECT_EQ(j["exit_code"], 3);
  EXPECT_FALSE(j.contains("signal"));
  EXPECT_FALSE(j.contains("setup_step"));
  EXPECT_DOUBLE_EQ(j["cpu_user_s"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(j["cpu_sys_s"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(j["wall_s"].get<double>(), 2.0);
  EXPECT_EQ(j["peak_memory_bytes"], 1234);
}

TEST(OutcomeTest, SignalReportedByInitIsTheSignalNotTheExitCode) {
  OutcomeEvidence e;
  e.command_status = Killed(SIGTERM);
  e.init_status = Exited(128 + SIGTERM);
  Outcome o = ClassifyOutcome(e);
  EXPECT_EQ(o.kind, OutcomeKind::kSignaled);
  EXPECT_EQ(o.signal, SIGTERM);
  EXPECT_FALSE(o.exit_code);
  EXPECT_EQ(ExitCodeFor(o), 128 + SIGTERM);
}

TEST(OutcomeTest, CommandExiting137IsNotASignal) {
  // An exit code of 137 is only an exit code: nothing guesses a SIGKILL from it.
  OutcomeEvidence e;
  e.command_status = Exited(137);
  e.init_status = Exited(137);
  Outcome o = ClassifyOutcome(e);
  EXPECT_EQ(o.kind, OutcomeKind::kExited);
  EXPECT_EQ(o.exit_code, 137);
}

TEST(OutcomeTest, OomKillComesFromTheCgroupCounter) {
  OutcomeEvidence e;
  e.command_status = Killed(SIGKILL);
  e.stats.oom_kill_count = 1;
  EXPECT_EQ(ClassifyOutcome(e).kind, OutcomeKind::kOomKilled);
  // Positive control: the same SIGKILL without the counter is just a signal.
  e.stats.oom_kill_count = 0;
  EXPECT_EQ(ClassifyOutcome(e).kind, OutcomeKind::kSignaled);
}

TEST(OutcomeTest, SuccessIsSuccessEvenAfterAnOomKillInside) {
  OutcomeEvidence e;
  e.command_status = Exited(0);
  e.stats.oom_kill_count = 2;
  e.stats.pids_max_events = 5;
  EXPECT_EQ(ClassifyOutcome(e).kind, OutcomeKind::kExited);
}

TEST(OutcomeTest, PidsLimit) {
  OutcomeEvidence e;
  e.command_status = Exited(1);
  e.stats.pids_max_events = 7;
  EXPECT_EQ(ClassifyOutcome(e).kind, OutcomeKind::kPidsLimit);
  // A fork bomb stopped by the wall clock is still reported as what contained it.
  e.command_status.reset();
  e.init_status = Killed(SIGKILL);
  e.killed_at_wall_limit = true;
  EXPECT_EQ(ClassifyOutcome(e).kind, OutcomeKind::kPidsLimit);
}

TEST(OutcomeTest, LimitsTheLauncherEnforced) {
  OutcomeEvidence e;
  e.init_status = Killed(SIGKILL);
  e.killed_at_wall_limit = true;
  Outcome wall = ClassifyOutcome(e);
  EXPECT_EQ(wall.kind, OutcomeKind::kWallTimeout);
  EXPECT_EQ(wall.signal, SIGKILL);
  EXPECT_EQ(ExitCodeFor(wall), 137);
  e.killed_at_wall_limit = false;
  e.killed_at_cpu_limit = true;
  EXPECT_EQ(ClassifyOutcome(e).kind, OutcomeKind::kCpuTimeLimit);
}

TEST(OutcomeTest, KilledBecauseTheComputeBudgetRanOut) {
  OutcomeEvidence e;
  e.command_status = Killed(SIGKILL);
  e.killed_for_budget = true;
  Outcome out = ClassifyOutcome(e);
  EXPECT_EQ(out.kind, OutcomeKind::kBudgetExhausted);
  EXPECT_STREQ(OutcomeName(out.kind), "budget_exhausted");
  // Control: a command that exited on its own before the kill is just exited.
  e.command_status = 0;
  EXPECT_EQ(ClassifyOutcome(e).kind, OutcomeKind::kExited);
}

TEST(OutcomeTest, SetupFailure) {
  OutcomeEvidence e;
  e.setup_failed = true;
  e.setup_step = "mount proc on /proc";
  e.setup_errno = EPERM;
  Outcome o = ClassifyOutcome(e);
  EXPECT_EQ(o.kind, OutcomeKind::kSetupFailed);
  EXPECT_EQ(ExitCodeFor(o), 125);
  nlohmann::json j = OutcomeToJson(o);
  EXPECT_EQ(j["outcome"], "setup_failed");
  EXPECT_EQ(j["setup_step"], "mount proc on /proc");
  EXPECT_EQ(j["errno"], "EPERM");
  EXPECT_FALSE(j.contains("exit_code"));
  EXPECT_FALSE(j.contains("cpu_user_s"));
}

TEST(OutcomeTest, LostCarriesTheFiguresOnlyWhenTheCgroupCouldBeRead) {
  OutcomeEvidence e;
  e.lost = true;
  e.stats.cpu_user_usec = 2000000;
  e.stats.memory_peak_bytes = 4096;
  nlohmann::json j = OutcomeToJson(ClassifyOutcome(e));
  EXPECT_EQ(j["outcome"], "lost");
  EXPECT_FALSE(j.contains("cpu_user_s"));  // nothing was read: no figures, not zeros
  EXPECT_FALSE(j.contains("exit_code"));
  e.lost_with_stats = true;
  Outcome read = ClassifyOutcome(e);
  EXPECT_EQ(read.kind, OutcomeKind::kLost);
  EXPECT_EQ(ExitCodeFor(read), 125);
  j = OutcomeToJson(read);
  EXPECT_EQ(j["outcome"], "lost");
  EXPECT_DOUBLE_EQ(j["cpu_user_s"].get<double>(), 2.0);
  EXPECT_EQ(j["peak_memory_bytes"], 4096);
  EXPECT_FALSE(j.contains("exit_code"));
  EXPECT_FALSE(j.contains("signal"));
}

}  // namespace
}  // namespace corral::cli
