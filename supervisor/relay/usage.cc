#include "supervisor/relay/usage.h"

#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace corral::supervisor {
namespace {

using nlohmann::json;

double Seconds(int64_t ms) { return static_cast<double>(ms) / 1000.0; }

std::string CsvField(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

}  // namespace

StatusOr<json> UsageReport(Store& store, const std::string& iss, const std::string& sub, const Budget& budget,
                           int64_t now, const std::map<std::string, int64_t>& unmetered_ms) {
  const WindowRange window = CurrentWindow(budget, now);
  ASSIGN_OR_RETURN(std::vector<LedgerTotal> totals, store.LedgerTotals(iss, sub, window.start, window.end));
  int64_t ai = 0, calls = 0, compute = 0;
  json sessions = json::array();
  std::map<std::string, int64_t> compute_by_sandbox;
  for (const LedgerTotal& total : totals) {
    if (total.kind == "ai") {
      ai += total.amount;
      calls += total.count;
      sessions.push_back({{"session", total.session_id},
                          {"sandbox", total.sandbox_id},
                          {"cost_usd", FormatMicroUsd(total.amount)},
                          {"calls", total.count}});
    } else if (total.kind == "compute") {
      compute += total.amount;
      compute_by_sandbox[total.sandbox_id] += total.amount;
    }
  }
  for (const auto& [id, ms] : unmetered_ms) {
    compute += ms;
    compute_by_sandbox[id] += ms;
  }
  json sandboxes = json::array();
  for (const auto& [id, ms] : compute_by_sandbox) sandboxes.push_back({{"sandbox", id}, {"compute_s", Seconds(ms)}});
  json ai_json = {{"spent_usd", FormatMicroUsd(ai)}, {"budget_usd", nullptr}, {"remaining_usd", nullptr},
                  {"calls", calls}};
  if (budget.ai_micro_usd) {
    ai_json["budget_usd"] = FormatMicroUsd(*budget.ai_micro_usd);
    ai_json["remaining_usd"] = FormatMicroUsd(std::max<int64_t>(*budget.ai_micro_usd - ai, 0));
  }
  json compute_json = {{"spent_s", Seconds(compute)}, {"budget_s", nullptr}, {"remaining_s", nullptr}};
  if (budget.compute_ms) {
    compute_json["budget_s"] = Seconds(*budget.compute_ms);
    compute_json["remaining_s"] = Seconds(std::max<int64_t>(*budget.compute_ms - compute, 0));
  }
  return json{{"window", {{"name", WindowName(budget.window)}, {"start", window.start}, {"end", window.end}}},
              {"ai", ai_json},
              {"compute", compute_json},
              {"sessions", sessions},
              {"sandboxes", sandboxes}};
}

json LedgerRowJson(const LedgerRow& row) {
  return {{"id", row.id},
          {"at", row.at},
          {"iss", row.iss},
          {"sub", row.sub},
          {"kind", row.kind},
          {"amount", row.amount},
          {"unit", row.kind == "ai" ? "micro_usd" : "cpu_ms"},
          {"sandbox", row.sandbox_id},
          {"session", row.session_id},
          {"model", row.model},
          {"input_tokens", row.input_tokens},
          {"output_tokens", row.output_tokens},
          {"cache_write_tokens", row.cache_write_tokens},
          {"cache_read_tokens", row.cache_read_tokens}};
}

std::string LedgerCsvHeader() {
  return "id,at,iss,sub,kind,amount,unit,sandbox,session,model,input_tokens,output_tokens,cache_write_tokens,"
         "cache_read_tokens\r\n";
}

std::string LedgerCsvLine(const LedgerRow& row) {
  std::string line;
  auto add = [&](const std::string& field) {
    if (!line.empty()) line += ',';
    line += CsvField(field);
  };
  add(std::to_string(row.id));
  add(std::to_string(row.at));
  add(row.iss);
  add(row.sub);
  add(row.kind);
  add(std::to_string(row.amount));
  add(row.kind == "ai" ? "micro_usd" : "cpu_ms");
  add(row.sandbox_id);
  add(row.session_id);
  add(row.model);
  add(std::to_string(row.input_tokens));
  add(std::to_string(row.output_tokens));
  add(std::to_string(row.cache_write_tokens));
  add(std::to_string(row.cache_read_tokens));
  return line + "\r\n";
}

}  // namespace corral::supervisor
