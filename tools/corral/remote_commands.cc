#include "tools/corral/remote_commands.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <ctime>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "tools/corral/client.h"
#include "tools/corral/json_text.h"

namespace corral::cli {
namespace {

constexpr int kExitError = 1;
// `corral admin stop-all`: sandboxes stopped at once.
constexpr size_t kStopAllConcurrency = 8;

// The value at `key` as text: a string as it is, another value as JSON; "" when missing or null.
std::string FieldText(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) return "";
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  return it->dump();
}

int64_t Integer(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) return 0;
  auto it = object.find(key);
  return it != object.end() && it->is_number() ? it->get<int64_t>() : 0;
}

void PrintError(const Status& status) { fprintf(stderr, "corral: %s\n", status.ToString().c_str()); }

// Prints what a request returned: the object with --json, else its `field`.
int PrintResult(const StatusOr<nlohmann::json>& result, bool json, const char* field) {
  if (!result.ok()) {
    PrintError(result.status());
    return kExitError;
  }
  if (json) fputs(Pretty(*result).c_str(), stdout);
  else printf("%s\n", FieldText(*result, field).c_str());
  return 0;
}

std::string SandboxPath(const std::string& id, const char* action = nullptr) {
  std::string path = "/v1/sandboxes/" + PercentEncode(id);
  if (action != nullptr) path += std::string("/") + action;
  return path;
}

// DELETE each of `ids` under `collection` ("/v1/sandboxes/", "/v1/snapshots/"); prints the ids
// removed, an error line for each that was not.
int RemoveEach(const Endpoint& endpoint, const std::string& collection, const std::vector<std::string>& ids) {
  int exit_code = 0;
  for (const auto& id : ids) {
    auto removed = CallJson(endpoint, "DELETE", collection + PercentEncode(id));
    if (removed.ok()) {
      printf("%s\n", id.c_str());
    } else {
      PrintError(removed.status().WithContext(id));
      exit_code = kExitError;
    }
  }
  return exit_code;
}

// Every running sandbox of every user, stopped (their workspaces stay). The package's prerm runs
// it before stopping corrald on remove. Each stop waits up to sandbox.stop_grace for the
// sandbox's commands to end after SIGTERM, so they go kStopAllConcurrency at a time, each on its
// own connection: the whole takes about one grace period, not one per sandbox. corrald waits
// out the graces on its event loop and kills on its worker pool, so the bound is only there to
// keep the connections (and the kills at once) few.
int RunStopAll(const Endpoint& endpoint, bool json) {
  auto listed = CallJson(endpoint, "GET", "/v1/admin/sandboxes");
  if (!listed.ok()) {
    PrintError(listed.status());
    return kExitError;
  }
  std::vector<std::string> running;
  for (const auto& sandbox : listed->value("sandboxes", nlohmann::json::array())) {
    if (FieldText(sandbox, "state") == "running") running.push_back(FieldText(sandbox, "id"));
  }
  std::vector<char> done(running.size(), 0);
  std::atomic<size_t> next{0};
  std::mutex output;
  auto worker = [&]() {
    for (size_t i = next++; i < running.size(); i = next++) {
      const std::string& id = running[i];
      auto stopped = CallJson(endpoint, "POST", "/v1/sandboxes/" + PercentEncode(id) + "/stop");
      std::lock_guard lock(output);
      if (!stopped.ok()) {
        PrintError(Status::Error("stop " + id + ": " + stopped.status().ToString()));
        continue;
      }
      done[i] = 1;
      if (!json) {
        printf("%s stopped\n", id.c_str());
        fflush(stdout);
      }
    }
  };
  std::vector<std::thread> workers;
  const size_t count = std::min(kStopAllConcurrency, running.size());
  for (size_t i = 1; i < count; ++i) workers.emplace_back(worker);
  if (count > 0) worker();
  for (std::thread& thread : workers) thread.join();
  nlohmann::json stopped = nlohmann::json::array();
  size_t failures = 0;
  for (size_t i = 0; i < running.size(); ++i) {
    if (done[i]) stopped.push_back(running[i]);
    else ++failures;
  }
  if (json) fputs(Pretty({{"stopped", stopped}}).c_str(), stdout);
  return failures == 0 ? 0 : kExitError;
}

// GET `path` and print the answer: as JSON, or as `print` shows it.
int PrintList(const Endpoint& endpoint, const std::string& path, bool json,
              const std::function<void(const nlohmann::json&)>& print) {
  auto listed = CallJson(endpoint, "GET", path);
  if (!listed.ok()) {
    PrintError(listed.status());
    return kExitError;
  }
  if (json) fputs(Pretty(*listed).c_str(), stdout);
  else print(*listed);
  return 0;
}

// GET `path` and print its `key` array: as JSON, or a table of `header` and what `row` makes of
// each element (given the time now, for ages).
int RunAdminList(const Endpoint& endpoint, bool json, const std::string& path, const char* key,
                 std::vector<std::string> header,
                 const std::function<std::vector<std::string>(const nlohmann::json&, int64_t)>& row) {
  return PrintList(endpoint, path, json, [&](const nlohmann::json& listed) {
    std::vector<std::vector<std::string>> rows = {header};
    const int64_t now = time(nullptr);
    for (const auto& element : listed.value(key, nlohmann::json::array())) rows.push_back(row(element, now));
    fputs(FormatTable(rows).c_str(), stdout);
  });
}

int RunIssuerList(const Endpoint& endpoint, bool json) {
  return RunAdminList(endpoint, json, "/v1/admin/issuers", "issuers", {"NAME", "CREATED"},
                      [](const nlohmann::json& issuer, int64_t now) -> std::vector<std::string> {
                        return {FieldText(issuer, "name"), FormatAge(now - Integer(issuer, "created_at"))};
                      });
}

int RunNodeList(const Endpoint& endpoint, bool json) {
  return RunAdminList(endpoint, json, "/v1/admin/nodes", "nodes",
                      {"NODE", "ADDRESS", "STATE", "SANDBOXES", "MEMORY FREE", "HEARTBEAT", "VERSION"},
                      [](const nlohmann::json& node, int64_t) -> std::vector<std::string> {
                        std::string state = node.value("alive", false) ? "alive" : "down";
                        if (node.value("moving_out", false)) state += ", drained, moving out";
                        else if (node.value("drained", false)) state += ", drained";
                        if (node.value("this", false)) state += " (this)";
                        const int64_t total = Integer(node, "memory_total");
                        const std::string free =
                            total > 0 ? std::to_string(Integer(node, "memory_available") * 100 / total) + "%" : "-";
                        const int64_t silent = Integer(node, "silent_ms") / 1000;  // heartbeats: seconds matter
                        return {FieldText(node, "id"), FieldText(node, "address").empty() ? "-" : FieldText(node, "address"),
                                state,
                                std::to_string(Integer(node, "sandboxes")) + "/" +
                                    std::to_string(Integer(node, "max_sandboxes")),
                                free, silent < 60 ? std::to_string(silent) + "s ago" : FormatAge(silent),
                                FieldText(node, "version")};
                      });
}

int RunRevocationList(const Endpoint& endpoint, bool json) {
  return RunAdminList(endpoint, json, "/v1/admin/revocations", "revocations", {"JTI", "ISSUER", "REVOKED"},
                      [](const nlohmann::json& row, int64_t now) -> std::vector<std::string> {
                        const std::string issuer = FieldText(row, "issuer");
                        return {FieldText(row, "jti"), issuer.empty() ? "(all)" : issuer,
                                FormatAge(now - Integer(row, "revoked_at"))};
                      });
}

}  // namespace

nlohmann::json BuildCreateSandboxRequest(const SandboxOptions& options) {
  nlohmann::json request = nlohmann::json::object();
  if (options.name) request["name"] = *options.name;
  nlohmann::json limits = nlohmann::json::object();
  if (options.memory_bytes) limits["memory_bytes"] = *options.memory_bytes;
  if (options.cpu_millis) limits["cpus"] = static_cast<double>(*options.cpu_millis) / 1000.0;
  if (options.pids) limits["pids"] = *options.pids;
  if (options.disk_bytes) limits["disk_bytes"] = *options.disk_bytes;
  if (!limits.empty()) request["limits"] = limits;
  if (options.idle_timeout_s) request["idle_timeout_s"] = *options.idle_timeout_s;
  if (options.snapshot) request["snapshot"] = *options.snapshot;
  if (options.image) request["image"] = *options.image;
  if (!options.start) request["start"] = false;
  if (options.full_network) {
    request["network"] = "full";
    request["unsafe"] = nlohmann::json::array({"full_network"});
  }
  nlohmann::json egress = BuildEgressRules(options);
  if (!egress.empty()) request["egress"] = egress;
  if (!options.secrets.empty()) request["secrets"] = options.secrets;
  return request;
}

nlohmann::json BuildEgressRules(const SandboxOptions& options) {
  nlohmann::json rules = nlohmann::json::object();
  if (options.allow_domains) rules["domains"] = *options.allow_domains;
  if (options.allow_ports) rules["ports"] = *options.allow_ports;
  if (options.allow_cidrs) rules["cidrs"] = *options.allow_cidrs;
  return rules;
}

std::string FormatEvent(const nlohmann::json& event) {
  const nlohmann::json data = event.value("data", nlohmann::json::object());
  std::string line = std::to_string(Integer(event, "seq")) + " " + FieldText(event, "type");
  if (FieldText(event, "type") == "egress" && data.is_object()) {
    line += " " + FieldText(data, "decision") + " " + FieldText(data, "method") + " " + FieldText(data, "host") + ":" +
            std::to_string(Integer(data, "port"));
    if (data.contains("address")) line += " (" + FieldText(data, "address") + ")";
    if (data.contains("rule")) line += " rule=" + FieldText(data, "rule");
    if (data.contains("reason")) line += " reason=" + FieldText(data, "reason");
    if (FieldText(data, "decision") == "allowed") {
      line += " up=" + std::to_string(Integer(data, "bytes_up")) + " down=" + std::to_string(Integer(data, "bytes_down")) +
              " " + std::to_string(Integer(data, "duration_ms")) + "ms";
    }
    if (data.contains("message")) line += ": " + FieldText(data, "message");
  } else if (FieldText(event, "type") == "network" && data.is_object()) {
    line += " " + FieldText(data, "mode") + " " + FieldText(data, "address") + " via " + FieldText(data, "gateway") +
            " (" + FieldText(data, "interface") + ")";
  } else if (!data.empty()) {
    line += " " + data.dump();
  }
  return line + "\n";
}

nlohmann::json BuildMintTokenRequest(const AdminOptions& options) {
  nlohmann::json request = {{"issuer", options.issuer}, {"sub", options.user}, {"ttl_s", options.ttl_s}};
  if (options.scope) request["scope"] = *options.scope;
  if (options.budget_usd) {
    request["budget"] = {{"ai_usd", std::stod(*options.budget_usd)}, {"window", options.budget_window.value_or("day")}};
  }
  if (options.images) request["limits"] = {{"images", *options.images}};
  return request;
}

std::string FormatAge(int64_t seconds) {
  if (seconds < 60) return "just now";
  auto ago = [](int64_t n, const char* unit) {
    return std::to_string(n) + " " + unit + (n == 1 ? "" : "s") + " ago";
  };
  if (seconds < 3600) return ago(seconds / 60, "minute");
  if (seconds < 86400) return ago(seconds / 3600, "hour");
  return ago(seconds / 86400, "day");
}

std::string FormatSandboxTable(const nlohmann::json& sandboxes, int64_t now) {
  std::vector<std::vector<std::string>> rows = {{"ID", "NAME", "STATE", "IMAGE", "CREATED"}};
  if (sandboxes.is_array()) {
    for (const auto& sandbox : sandboxes) {
      std::string name = FieldText(sandbox, "name");
      rows.push_back({FieldText(sandbox, "id"), name.empty() ? "-" : name, FieldText(sandbox, "state"),
                      FieldText(sandbox, "image"), FormatAge(now - Integer(sandbox, "created_at"))});
    }
  }
  return FormatTable(rows);
}

std::string FormatSnapshotTable(const nlohmann::json& snapshots, int64_t now) {
  std::vector<std::vector<std::string>> rows = {{"ID", "SANDBOX", "SIZE", "CREATED"}};
  if (snapshots.is_array()) {
    for (const auto& snapshot : snapshots) {
      const int64_t bytes = Integer(snapshot, "bytes");
      rows.push_back({FieldText(snapshot, "id"), FieldText(snapshot, "sandbox"),
                      std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB", FormatAge(now - Integer(snapshot, "created_at"))});
    }
  }
  return FormatTable(rows);
}

int RunSandboxCommand(const SandboxOptions& options) {
  const Endpoint endpoint = Endpoint::Server(options.server);
  const std::string id = options.ids.empty() ? "" : options.ids[0];
  switch (options.verb) {
    case SandboxVerb::kCreate:
      return PrintResult(CallJson(endpoint, "POST", "/v1/sandboxes", BuildCreateSandboxRequest(options)),
                         options.json, "id");
    case SandboxVerb::kList:
      return PrintList(endpoint, "/v1/sandboxes", options.json, [](const nlohmann::json& listed) {
        fputs(FormatSandboxTable(listed.value("sandboxes", nlohmann::json::array()), time(nullptr)).c_str(), stdout);
      });
    case SandboxVerb::kGet:
      return PrintResult(CallJson(endpoint, "GET", SandboxPath(id)), /*json=*/true, "id");
    case SandboxVerb::kRemove:
      return RemoveEach(endpoint, "/v1/sandboxes/", options.ids);
    case SandboxVerb::kStart:
      return PrintResult(CallJson(endpoint, "POST", SandboxPath(id, "start")), options.json, "id");
    case SandboxVerb::kStop:
      return PrintResult(CallJson(endpoint, "POST", SandboxPath(id, "stop")), options.json, "id");
    case SandboxVerb::kSnapshot:
      return PrintResult(CallJson(endpoint, "POST", SandboxPath(id, "snapshot")), options.json, "id");
    case SandboxVerb::kFork: {
      nlohmann::json body = nlohmann::json::object();
      if (options.name) body["name"] = *options.name;
      if (!options.start) body["start"] = false;
      return PrintResult(CallJson(endpoint, "POST", SandboxPath(id, "fork"), body), options.json, "id");
    }
    case SandboxVerb::kSnapshotList:
      return PrintList(endpoint, "/v1/snapshots", options.json, [](const nlohmann::json& listed) {
        fputs(FormatSnapshotTable(listed.value("snapshots", nlohmann::json::array()), time(nullptr)).c_str(), stdout);
      });
    case SandboxVerb::kSnapshotRemove:
      return RemoveEach(endpoint, "/v1/snapshots/", options.ids);
    case SandboxVerb::kEgress: {
      const nlohmann::json rules = BuildEgressRules(options);
      auto answer = rules.empty() ? CallJson(endpoint, "GET", SandboxPath(id, "egress"))
                                  : CallJson(endpoint, "PUT", SandboxPath(id, "egress"), rules);
      return PrintResult(answer, /*json=*/true, "domains");
    }
    case SandboxVerb::kEvents: {
      std::string path = SandboxPath(id, "events") + "?after_seq=" + std::to_string(options.after_seq);
      if (options.event_type) path += "&type=" + *options.event_type;
      return PrintList(endpoint, path, options.json, [](const nlohmann::json& listed) {
        for (const auto& event : listed.value("events", nlohmann::json::array())) {
          fputs(FormatEvent(event).c_str(), stdout);
        }
      });
    }
  }
  return kExitError;
}

int RunAdminCommand(const AdminOptions& options) {
  const Endpoint endpoint = Endpoint::Admin(options.admin);
  switch (options.verb) {
    case AdminVerb::kIssuerAdd: {
      auto added = CallJson(endpoint, "POST", "/v1/admin/issuers", {{"name", options.issuer}});
      int exit_code = PrintResult(added, options.json, "secret");
      if (exit_code == 0) {
        fprintf(stderr,
                "corral: issuer '%s' added. Its secret is shown this once: your backend signs "
                "HS256 tokens with it (\"iss\": \"%s\"; see docs/PROTOCOL.md, Tokens).\n",
                options.issuer.c_str(), options.issuer.c_str());
      }
      return exit_code;
    }
    case AdminVerb::kIssuerRemove:
      return PrintResult(CallJson(endpoint, "DELETE", "/v1/admin/issuers/" + PercentEncode(options.issuer)),
                         /*json=*/false, "name");
    case AdminVerb::kIssuerList:
      return RunIssuerList(endpoint, options.json);
    case AdminVerb::kIssuerRotate: {
      auto rotated = CallJson(endpoint, "POST", "/v1/admin/issuers/" + PercentEncode(options.issuer) + "/secret",
                              nlohmann::json::object());
      int exit_code = PrintResult(rotated, options.json, "secret");
      if (exit_code == 0) {
        fprintf(stderr,
                "corral: issuer '%s' has a new secret, shown this once; tokens signed with the old one no "
                "longer work (open connections with them are closed).\n",
                options.issuer.c_str());
      }
      return exit_code;
    }
    case AdminVerb::kTokenRevoke: {
      nlohmann::json request = {{"jti", options.jti}};
      if (!options.issuer.empty()) request["issuer"] = options.issuer;
      return PrintResult(CallJson(endpoint, "POST", "/v1/admin/revocations", request), options.json, "jti");
    }
    case AdminVerb::kTokenRevocations:
      return RunRevocationList(endpoint, options.json);
    case AdminVerb::kStopAll:
      return RunStopAll(endpoint, options.json);
    case AdminVerb::kNodeList:
      return RunNodeList(endpoint, options.json);
    case AdminVerb::kNodeDrain:
    case AdminVerb::kNodeUndrain:
      return PrintResult(CallJson(endpoint, "POST",
                                  "/v1/admin/nodes/" + PercentEncode(options.node) +
                                      (options.verb == AdminVerb::kNodeDrain ? "/drain" : "/undrain") +
                                      (options.move ? "?move=true" : ""),
                                  nlohmann::json::object()),
                         options.json, "id");
    case AdminVerb::kTokenMint:
      return PrintResult(CallJson(endpoint, "POST", "/v1/admin/tokens", BuildMintTokenRequest(options)),
                         options.json, "token");
  }
  return kExitError;
}

}  // namespace corral::cli
