#include "tools/corral/usage_command.h"

#include <time.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "tools/corral/client.h"

namespace corral::cli {
namespace {

using nlohmann::json;

constexpr int kPageRows = 10000;

// A table cell: the string at `key`, a number with three decimals, "-" when missing or null.
std::string Cell(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return "-";
  if (j[key].is_null()) return "-";
  if (j[key].is_string()) return j[key].get<std::string>();
  char number[64];
  snprintf(number, sizeof(number), "%.3f", j[key].get<double>());
  return number;
}

std::string IsoTime(int64_t seconds) {
  time_t t = static_cast<time_t>(seconds);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char text[32];
  strftime(text, sizeof(text), "%Y-%m-%d %H:%M UTC", &tm);
  return text;
}

}  // namespace

int RunUsageCommand(const UsageOptions& options) {
  auto usage = CallJson(Endpoint::Server(options.server), "GET", "/v1/usage");
  if (!usage.ok()) {
    fprintf(stderr, "corral: %s\n", usage.status().message().c_str());
    return 2;
  }
  if (options.json) {
    printf("%s\n", usage->dump(2).c_str());
    return 0;
  }
  const json& window = (*usage)["window"];
  const json& ai = (*usage)["ai"];
  const json& compute = (*usage)["compute"];
  printf("window   %s, %s to %s\n", window.value("name", "?").c_str(), IsoTime(window.value("start", 0)).c_str(),
         IsoTime(window.value("end", 0)).c_str());
  if (ai.contains("budget_usd") && !ai["budget_usd"].is_null()) {
    printf("AI       USD %s spent of %s, %s left (%lld model calls)\n", Cell(ai, "spent_usd").c_str(),
           Cell(ai, "budget_usd").c_str(), Cell(ai, "remaining_usd").c_str(),
           static_cast<long long>(ai.value("calls", 0)));
  } else {
    printf("AI       USD %s spent (your token has no AI budget: no model calls)\n", Cell(ai, "spent_usd").c_str());
  }
  // Running sandboxes are metered every few seconds: a figure may lag that much.
  if (compute.contains("budget_s") && !compute["budget_s"].is_null()) {
    printf("compute  %s CPU-s spent of %s, %s left\n", Cell(compute, "spent_s").c_str(),
           Cell(compute, "budget_s").c_str(), Cell(compute, "remaining_s").c_str());
  } else {
    printf("compute  %s CPU-s spent (not limited)\n", Cell(compute, "spent_s").c_str());
  }
  for (const auto& session : (*usage)["sessions"]) {
    printf("  %s  %s  USD %s  %lld calls\n", session.value("session", "?").c_str(), session.value("sandbox", "?").c_str(),
           session.value("cost_usd", "?").c_str(), static_cast<long long>(session.value("calls", 0)));
  }
  for (const auto& sandbox : (*usage)["sandboxes"]) {
    printf("  %s  %.3f CPU-s\n", sandbox.value("sandbox", "?").c_str(), sandbox.value("compute_s", 0.0));
  }
  return 0;
}

int RunLedgerExportCommand(const LedgerExportOptions& options) {
  FILE* out = stdout;
  if (!options.out.empty()) {
    out = fopen(options.out.c_str(), "w");
    if (out == nullptr) {
      fprintf(stderr, "corral: %s: %s\n", options.out.c_str(), strerror(errno));
      return 2;
    }
  }
  std::string query = "format=" + options.format + "&limit=" + std::to_string(kPageRows);
  if (!options.issuer.empty()) query += "&issuer=" + PercentEncode(options.issuer);
  if (!options.user.empty()) query += "&user=" + PercentEncode(options.user);
  if (!options.window.empty()) query += "&window=" + options.window;
  if (options.from) query += "&from=" + std::to_string(*options.from);
  if (options.to) query += "&to=" + std::to_string(*options.to);
  const Endpoint endpoint = Endpoint::Admin(options.admin);
  // Page by the last row's id: the first field of a CSV line, "id" of a JSON line.
  int64_t after = 0;
  bool first = true;
  long long rows = 0;
  for (;;) {
    auto reply = SendRequest(endpoint, "GET", "/v1/admin/usage?" + query + "&after_id=" + std::to_string(after));
    if (!reply.ok()) {
      fprintf(stderr, "corral: %s\n", reply.status().message().c_str());
      if (out != stdout) fclose(out);
      return 2;
    }
    std::string body = std::move(reply->body);
    size_t start = 0;
    if (options.format == "csv") {
      const size_t header_end = body.find('\n');
      start = header_end == std::string::npos ? body.size() : header_end + 1;
      if (first) fwrite(body.data(), 1, start, out);
    }
    int page_rows = 0;
    std::string last;
    for (size_t at = start; at < body.size();) {
      size_t end = body.find('\n', at);
      if (end == std::string::npos) end = body.size();
      last = body.substr(at, end - at);
      ++page_rows;
      at = end + 1;
    }
    fwrite(body.data() + start, 1, body.size() - start, out);
    rows += page_rows;
    first = false;
    if (page_rows < kPageRows || last.empty()) break;
    if (options.format == "csv") {
      after = std::stoll(last.substr(0, last.find(',')));
    } else {
      after = json::parse(last, nullptr, false).value("id", int64_t{0});
    }
    if (after <= 0) break;
  }
  if (out != stdout) {
    fclose(out);
    fprintf(stderr, "corral: %lld ledger rows written to %s\n", rows, options.out.c_str());
  }
  return 0;
}

}  // namespace corral::cli
