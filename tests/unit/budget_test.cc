// Budget windows, money parsing, prices and the usage read from the Messages API's answers.
#include "supervisor/relay/budget.h"

#include <gtest/gtest.h>

#include <string>

namespace corral::supervisor {
namespace {

// 2026-11-23 17:38:02 UTC, a Monday.
constexpr int64_t kMonday = 1795455482;

int64_t Utc(int year, int month, int day, int hour = 0, int minute = 0, int second = 0) {
  struct tm tm = {};
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  return static_cast<int64_t>(timegm(&tm));
}

Budget Window(BudgetWindow window, std::optional<int64_t> start = std::nullopt) {
  Budget budget;
  budget.window = window;
  budget.window_start = start;
  return budget;
}

TEST(BudgetWindowTest, CalendarWindowsInUtc) {
  ASSERT_EQ(kMonday, Utc(2026, 11, 23, 17, 38, 2));
  WindowRange hour = CurrentWindow(Window(BudgetWindow::kHour), kMonday);
  EXPECT_EQ(hour.start, Utc(2026, 11, 23, 17));
  EXPECT_EQ(hour.end, Utc(2026, 11, 23, 18));
  WindowRange day = CurrentWindow(Window(BudgetWindow::kDay), kMonday);
  EXPECT_EQ(day.start, Utc(2026, 11, 23));
  EXPECT_EQ(day.end, Utc(2026, 11, 24));
  // Weeks start on Monday: a Sunday evening belongs to the week that began six days before.
  WindowRange week = CurrentWindow(Window(BudgetWindow::kWeek), Utc(2026, 11, 29, 23, 59, 59));
  EXPECT_EQ(week.start, Utc(2026, 11, 23));
  EXPECT_EQ(week.end, Utc(2026, 11, 30));
  WindowRange monday = CurrentWindow(Window(BudgetWindow::kWeek), Utc(2026, 11, 30));
  EXPECT_EQ(monday.start, Utc(2026, 11, 30));
  WindowRange month = CurrentWindow(Window(BudgetWindow::kMonth), kMonday);
  EXPECT_EQ(month.start, Utc(2026, 11, 1));
  EXPECT_EQ(month.end, Utc(2026, 12, 1));
  WindowRange december = CurrentWindow(Window(BudgetWindow::kMonth), Utc(2026, 12, 31, 23, 59, 59));
  EXPECT_EQ(december.start, Utc(2026, 12, 1));
  EXPECT_EQ(december.end, Utc(2027, 1, 1));
}

TEST(BudgetWindowTest, AnchoredWindowsFollowTheirStart) {
  // Days that start at 06:30.
  const int64_t anchor = Utc(2026, 1, 10, 6, 30);
  WindowRange before = CurrentWindow(Window(BudgetWindow::kDay, anchor), Utc(2026, 11, 23, 6, 29, 59));
  EXPECT_EQ(before.start, Utc(2026, 11, 22, 6, 30));
  WindowRange after = CurrentWindow(Window(BudgetWindow::kDay, anchor), Utc(2026, 11, 23, 6, 30));
  EXPECT_EQ(after.start, Utc(2026, 11, 23, 6, 30));
  EXPECT_EQ(after.end, Utc(2026, 11, 24, 6, 30));
  // Before the anchor: the window that ends where the anchor's begins.
  WindowRange early = CurrentWindow(Window(BudgetWindow::kHour, anchor), anchor - 1);
  EXPECT_EQ(early.start, anchor - 3600);
  EXPECT_EQ(early.end, anchor);
}

TEST(BudgetWindowTest, AnchoredMonthsKeepTheirDayClampedToShortMonths) {
  const int64_t anchor = Utc(2026, 1, 31, 12);
  WindowRange feb = CurrentWindow(Window(BudgetWindow::kMonth, anchor), Utc(2026, 3, 1));
  EXPECT_EQ(feb.start, Utc(2026, 2, 28, 12));
  EXPECT_EQ(feb.end, Utc(2026, 3, 31, 12));
  WindowRange leap = CurrentWindow(Window(BudgetWindow::kMonth, anchor), Utc(2028, 2, 29, 13));
  EXPECT_EQ(leap.start, Utc(2028, 2, 29, 12));
  // Still January's window until the 31st, 12:00 of the month's anchor day comes round.
  WindowRange jan = CurrentWindow(Window(BudgetWindow::kMonth, anchor), Utc(2026, 2, 28, 11));
  EXPECT_EQ(jan.start, anchor);
  EXPECT_EQ(jan.end, Utc(2026, 2, 28, 12));
}

TEST(BudgetWindowTest, WindowNamesRoundTripAndUnknownOnesAreRefused) {
  for (BudgetWindow w : {BudgetWindow::kHour, BudgetWindow::kDay, BudgetWindow::kWeek, BudgetWindow::kMonth}) {
    auto parsed = ParseWindow(WindowName(w));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, w);
  }
  EXPECT_FALSE(ParseWindow("year").ok());
  EXPECT_FALSE(ParseWindow("").ok());
}

TEST(MicroUsdTest, ParsesUpToSixDecimalsExactly) {
  EXPECT_EQ(*ParseMicroUsd("3.75"), 3750000);
  EXPECT_EQ(*ParseMicroUsd("0.000001"), 1);
  EXPECT_EQ(*ParseMicroUsd("15"), 15000000);
  EXPECT_EQ(*ParseMicroUsd("0.3"), 300000);
  for (const char* bad : {"", "-1", "1.2345678", "1e3", ".5", "3.", "1.2.3", "abc", "99999999999999999999"}) {
    EXPECT_FALSE(ParseMicroUsd(bad).ok()) << bad;
  }
  EXPECT_EQ(FormatMicroUsd(3750000), "3.750000");
  EXPECT_EQ(FormatMicroUsd(1), "0.000001");
  EXPECT_EQ(FormatMicroUsd(-2500000), "-2.500000");
}

TEST(PriceTableTest, DatedIdsTakeTheLongestPrefixThenTheDefault) {
  PriceTable table;
  table.Set("claude-sonnet-4", {1, 1, 1, 1});
  table.Set("claude-sonnet-4-5", {3000000, 15000000, 3750000, 300000});
  EXPECT_EQ(table.Find("claude-sonnet-4-5-20250929")->input, 3000000);
  EXPECT_EQ(table.Find("claude-sonnet-4-5")->input, 3000000);
  EXPECT_EQ(table.Find("claude-sonnet-4-20250514")->input, 1);
  // Only at a '-': "claude-sonnet-45" is not a claude-sonnet-4.
  EXPECT_FALSE(table.Find("claude-sonnet-45").has_value());
  EXPECT_FALSE(table.Find("claude-opus-4-1").has_value());
  table.Set("default", {7, 7, 7, 7});
  EXPECT_EQ(table.Find("claude-opus-4-1")->input, 7);
}

// Metrics label a model with the key that priced it: the operator's keys, never the sandbox's
// own string.
TEST(PriceTableTest, KeyForNamesTheEntryFindTakes) {
  PriceTable table;
  table.Set("claude-sonnet-4", {1, 1, 1, 1});
  table.Set("claude-sonnet-4-5", {2, 2, 2, 2});
  EXPECT_EQ(table.KeyFor("claude-sonnet-4-5-20250929"), "claude-sonnet-4-5");
  EXPECT_EQ(table.KeyFor("claude-sonnet-4-5"), "claude-sonnet-4-5");
  EXPECT_EQ(table.KeyFor("claude-sonnet-4-anything-a-sandbox-says"), "claude-sonnet-4");
  EXPECT_EQ(table.KeyFor("claude-sonnet-45"), std::nullopt);
  EXPECT_EQ(table.KeyFor(""), std::nullopt);
  table.Set("default", {7, 7, 7, 7});
  EXPECT_EQ(table.KeyFor("claude-opus-4-1"), "default");
  EXPECT_EQ(table.KeyFor("claude-sonnet-4-5-x"), "claude-sonnet-4-5");
}

TEST(BudgetRefusalTest, EveryKindHasItsName) {
  EXPECT_EQ(BudgetRefusalName(BudgetRefusal::kAi), "ai");
  EXPECT_EQ(BudgetRefusalName(BudgetRefusal::kAiInFlight), "ai_in_flight");
  EXPECT_EQ(BudgetRefusalName(BudgetRefusal::kRate), "rate");
  EXPECT_EQ(BudgetRefusalName(BudgetRefusal::kCompute), "compute");
  EXPECT_EQ(BudgetRefusalName(BudgetRefusal::kComputeStop), "compute_stop");
}

BudgetState State(int64_t spent, int64_t held_calls = 0, int64_t held_micro_usd = 0) {
  BudgetState state;
  state.spent = spent;
  state.held_calls = held_calls;
  state.held_micro_usd = held_micro_usd;
  return state;
}

// The model relay's admission (Store::AdmitBudgetHold decides with it, on every node's holds).
TEST(DecideHoldTest, SpentRefusesNearlySpentWaitsForCallsInFlightOneCallAlwaysGoesAhead) {
  // Spent: refused, with or without calls in flight; a micro-dollar left is not spent.
  EXPECT_EQ(DecideHold(State(1000), 1, 1000), HoldVerdict::kSpent);
  EXPECT_EQ(DecideHold(State(1200, 3, 500), 1, 1000), HoldVerdict::kSpent);
  EXPECT_EQ(DecideHold(State(999), 1, 1000), HoldVerdict::kAdmit);
  // With nothing in flight, one call goes ahead however much it may cost.
  EXPECT_EQ(DecideHold(State(999), 1000000, 1000), HoldVerdict::kAdmit);
  // Beside calls in flight, a call goes ahead only if all of them fit at their most: the edge.
  EXPECT_EQ(DecideHold(State(500, 2, 300), 200, 1000), HoldVerdict::kAdmit);     // 500 + 300 + 200 = 1000
  EXPECT_EQ(DecideHold(State(500, 2, 300), 201, 1000), HoldVerdict::kInFlight);  // one micro-dollar over
  EXPECT_EQ(DecideHold(State(0, 1, 1000), 1, 1000), HoldVerdict::kInFlight);
}

TEST(PriceTableTest, CostIsExactAndRoundedHalfUpOncePerRequest) {
  ModelPrice sonnet = {3000000, 15000000, 3750000, 300000};  // USD 3 / 15 / 3.75 / 0.30 per MTok
  ModelUsage usage;
  usage.input_tokens = 1000;
  usage.output_tokens = 500;
  usage.cache_creation_input_tokens = 2000;
  usage.cache_read_input_tokens = 10000;
  // 1000*3 + 500*15 + 2000*3.75 + 10000*0.3 = 3000 + 7500 + 7500 + 3000 micro-dollars
  EXPECT_EQ(CostMicroUsd(sonnet, usage), 21000);
  ModelUsage one;
  one.output_tokens = 1;  // 15 micro-dollars exactly
  EXPECT_EQ(CostMicroUsd(sonnet, one), 15);
  ModelUsage cheap;
  cheap.cache_read_input_tokens = 1;  // 0.3 micro-dollars: rounds to 0
  EXPECT_EQ(CostMicroUsd(sonnet, cheap), 0);
  cheap.cache_read_input_tokens = 2;  // 0.6: rounds to 1
  EXPECT_EQ(CostMicroUsd(sonnet, cheap), 1);
  cheap.cache_read_input_tokens = 5;  // 1.5: half up, 2
  EXPECT_EQ(CostMicroUsd(sonnet, cheap), 2);
}

constexpr const char* kStream =
    "event: message_start\n"
    "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"claude-sonnet-4-5-20250929\","
    "\"usage\":{\"input_tokens\":120,\"cache_creation_input_tokens\":3000,\"cache_read_input_tokens\":40,"
    "\"output_tokens\":1}}}\n"
    "\n"
    "event: content_block_start\n"
    "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n"
    "\n"
    "event: ping\n"
    "data: {\"type\": \"ping\"}\n"
    "\n"
    "event: content_block_delta\n"
    "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n"
    "\n"
    "event: message_delta\n"
    "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":57}}\n"
    "\n"
    "event: message_stop\n"
    "data: {\"type\":\"message_stop\"}\n"
    "\n";

void ExpectStreamUsage(const SseUsageReader& reader) {
  EXPECT_TRUE(reader.saw_message_start());
  EXPECT_TRUE(reader.saw_message_stop());
  EXPECT_EQ(reader.usage().model, "claude-sonnet-4-5-20250929");
  EXPECT_EQ(reader.usage().input_tokens, 120);
  EXPECT_EQ(reader.usage().cache_creation_input_tokens, 3000);
  EXPECT_EQ(reader.usage().cache_read_input_tokens, 40);
  EXPECT_EQ(reader.usage().output_tokens, 57);  // the delta's count replaces the start's
  EXPECT_EQ(reader.error_type(), "");
}

TEST(SseUsageReaderTest, ReadsUsageWhateverTheSplit) {
  const std::string stream = kStream;
  SseUsageReader whole;
  whole.Feed(stream);
  ExpectStreamUsage(whole);
  // Byte by byte, and with CRLF line ends.
  SseUsageReader bytewise;
  for (char c : stream) bytewise.Feed(std::string_view(&c, 1));
  ExpectStreamUsage(bytewise);
  std::string crlf;
  for (char c : stream) {
    if (c == '\n') crlf += "\r\n";
    else crlf += c;
  }
  for (size_t step : {2u, 7u, 64u}) {
    SseUsageReader split;
    for (size_t i = 0; i < crlf.size(); i += step) split.Feed(std::string_view(crlf).substr(i, step));
    ExpectStreamUsage(split);
  }
}

TEST(SseUsageReaderTest, AStreamCutShortHasTheUsageSoFarAndNoStop) {
  std::string stream = kStream;
  SseUsageReader cut;
  cut.Feed(stream.substr(0, stream.find("event: message_delta")));
  EXPECT_TRUE(cut.saw_message_start());
  EXPECT_FALSE(cut.saw_message_stop());
  EXPECT_EQ(cut.usage().input_tokens, 120);
  EXPECT_EQ(cut.usage().output_tokens, 1);
}

TEST(SseUsageReaderTest, KeepsErrorsAndSkipsOversizedOrBrokenEvents) {
  SseUsageReader reader;
  reader.Feed("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"x\"}}\n\n");
  EXPECT_EQ(reader.error_type(), "overloaded_error");
  // An event over the limit is skipped whole, and the reader goes on after it.
  std::string huge = "data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":999},\"pad\":\"" +
                     std::string(SseUsageReader::kMaxEventBytes, 'x') + "\"}\n\n";
  reader.Feed(huge);
  EXPECT_EQ(reader.usage().output_tokens, 0);
  reader.Feed("data: not json\n\n");
  reader.Feed("data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":-5}}\n\n");  // negative: ignored
  EXPECT_EQ(reader.usage().output_tokens, 0);
  reader.Feed("data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9}}\n\n");
  EXPECT_EQ(reader.usage().output_tokens, 9);
}

TEST(UsageFromMessageTest, ReadsAWholeAnswer) {
  ModelUsage usage = UsageFromMessage(
      R"({"id":"msg_2","type":"message","model":"claude-haiku-4-5","content":[{"type":"text","text":"ok"}],)"
      R"("usage":{"input_tokens":11,"output_tokens":22,"cache_creation_input_tokens":0,"cache_read_input_tokens":33}})");
  EXPECT_EQ(usage.model, "claude-haiku-4-5");
  EXPECT_EQ(usage.input_tokens, 11);
  EXPECT_EQ(usage.output_tokens, 22);
  EXPECT_EQ(usage.cache_read_input_tokens, 33);
  EXPECT_TRUE(UsageFromMessage("{\"type\":\"error\"}").empty());
  EXPECT_TRUE(UsageFromMessage("not json").empty());
}

TEST(BudgetJsonTest, RoundTripsAndTreatsBadTextAsNoAmounts) {
  Budget budget;
  budget.ai_micro_usd = 2500000;
  budget.compute_ms = 60000;
  budget.window = BudgetWindow::kWeek;
  budget.window_start = 1790000000;
  Budget back = BudgetFromJson(BudgetToJson(budget));
  EXPECT_EQ(back.ai_micro_usd, budget.ai_micro_usd);
  EXPECT_EQ(back.compute_ms, budget.compute_ms);
  EXPECT_EQ(back.window, BudgetWindow::kWeek);
  EXPECT_EQ(back.window_start, budget.window_start);
  // Absent amounts stay absent (no model use; compute not limited).
  Budget empty = BudgetFromJson("{}");
  EXPECT_FALSE(empty.ai_micro_usd.has_value());
  EXPECT_FALSE(empty.compute_ms.has_value());
  EXPECT_EQ(empty.window, BudgetWindow::kDay);
  Budget broken = BudgetFromJson("not json");
  EXPECT_FALSE(broken.ai_micro_usd.has_value());
  // A mistyped amount is not taken as a limit of 0.
  EXPECT_FALSE(BudgetFromJson(R"({"compute_ms":"5"})").compute_ms.has_value());
}

}  // namespace
}  // namespace corral::supervisor
