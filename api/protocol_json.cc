#include "api/protocol_json.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <utility>
#include <vector>

#include "api/auth_mapping.h"
#include "api/error_codes.h"
#include "common/base64.h"
#include "common/log.h"
#include "supervisor/relay/budget.h"
#include "supervisor/sandboxes/full_network.h"

namespace corral::api {

using nlohmann::json;

namespace {

constexpr size_t kMaxRevisionBytes = 256;
constexpr int64_t kMaxExportRows = 100000;

// Stored JSON text as a value; `fallback` for text that does not parse.
json ParsedOr(const std::string& text, json fallback) {
  json value = json::parse(text, nullptr, false);
  return value.is_discarded() ? fallback : value;
}

// A list of strings, when present.
Status OptionalStrings(const json& body, const char* key, std::vector<std::string>& into) {
  if (!body.contains(key)) return Status();
  if (!body[key].is_array()) return Status::Error(std::string(key) + ": expected a list of strings", EINVAL);
  for (const auto& item : body[key]) {
    if (!item.is_string()) return Status::Error(std::string(key) + ": expected a list of strings", EINVAL);
    into.push_back(item.get<std::string>());
  }
  return Status();
}

// A boolean, when present.
Status OptionalBool(const json& body, const char* key, bool& out) {
  if (!body.contains(key)) return Status();
  if (!body[key].is_boolean()) return Status::Error(std::string(key) + ": expected true or false", EINVAL);
  out = body[key].get<bool>();
  return Status();
}

// A string, when present (null is a wrong type here, unlike OptionalString).
Status PresentString(const json& body, const char* key, std::string& out) {
  if (!body.contains(key)) return Status();
  if (!body[key].is_string()) return Status::Error(std::string(key) + ": expected a string", EINVAL);
  out = body[key].get<std::string>();
  return Status();
}

// "network" and "unsafe" of a create: dangerous options are named twice, the option itself and
// an "unsafe" entry that says the caller means it (and the token needs the matching scope).
Status ParseNetwork(const json& body, supervisor::CreateRequest& request) {
  if (body.contains("network")) {
    if (!body["network"].is_string()) return Status::Error("network: expected \"loopback\" or \"full\"", EINVAL);
    request.network = body["network"].get<std::string>();
  }
  bool unsafe_full_network = false;
  if (body.contains("unsafe")) {
    const json& unsafe = body["unsafe"];
    if (!unsafe.is_array()) return Status::Error("unsafe: expected an array like [\"full_network\"]", EINVAL);
    for (const json& entry : unsafe) {
      if (!entry.is_string() || entry.get<std::string>() != supervisor::kFullNetworkUnsafe) {
        return Status::Error("unsafe: " + entry.dump() + " is not an unsafe option (\"full_network\")", EINVAL);
      }
      unsafe_full_network = true;
    }
  }
  if (request.network == supervisor::kNetworkFull && !unsafe_full_network) {
    return Status::Error("network \"full\" gives the sandbox a real network interface: say so with \"unsafe\": [\"full_network\"]",
                         EINVAL);
  }
  if (unsafe_full_network && request.network != supervisor::kNetworkFull) {
    return Status::Error("unsafe: \"full_network\" without \"network\": \"full\"", EINVAL);
  }
  return Status();
}

Status ParseLimits(const json& body, supervisor::CreateRequest& request) {
  if (!body.contains("limits")) return Status();
  const json& limits = body["limits"];
  if (!limits.is_object()) return Status::Error("limits: expected an object", EINVAL);
  for (const auto& [key, value] : limits.items()) {
    if (key != "memory_bytes" && key != "cpus" && key != "pids" && key != "disk_bytes") {
      return Status::Error("limits: unknown limit \"" + key + "\"", EINVAL);
    }
  }
  RETURN_IF_ERROR(OptionalUint(limits, "memory_bytes", request.limits.memory_bytes));
  RETURN_IF_ERROR(OptionalUint(limits, "pids", request.limits.pids));
  RETURN_IF_ERROR(OptionalUint(limits, "disk_bytes", request.limits.disk_bytes));
  if (limits.contains("cpus")) {
    if (!limits["cpus"].is_number() || limits["cpus"].get<double>() <= 0) {
      return Status::Error("limits.cpus: expected a positive number", EINVAL);
    }
    request.limits.cpu_millicores = static_cast<uint64_t>(limits["cpus"].get<double>() * 1000 + 0.5);
  }
  return Status();
}

// "tools" of a new session: [{"name", "description"?, "input_schema"?}].
Status ParseClientTools(const json& body, std::vector<supervisor::ClientTool>& into) {
  if (!body.contains("tools")) return Status();
  if (!body["tools"].is_array()) return Status::Error("tools: expected a list of tools", EINVAL);
  for (const auto& item : body["tools"]) {
    if (!item.is_object() || !item.contains("name") || !item["name"].is_string()) {
      return Status::Error("tools: each is {\"name\", \"description\"?, \"input_schema\"?}", EINVAL);
    }
    RETURN_IF_ERROR(RefuseUnknownFields(item, {"name", "description", "input_schema"}, "tools"));
    supervisor::ClientTool tool;
    tool.name = item["name"].get<std::string>();
    if (item.contains("description")) {
      if (!item["description"].is_string()) return Status::Error("tools: description: expected a string", EINVAL);
      tool.description = item["description"].get<std::string>();
    }
    if (item.contains("input_schema")) tool.input_schema = item["input_schema"];
    into.push_back(std::move(tool));
  }
  return Status();
}

// A bundle's base64: line breaks and spaces are skipped (`base64` wraps its output).
std::optional<std::string> DecodeBundle(std::string_view text) {
  std::string packed(text);
  packed.erase(std::remove_if(packed.begin(), packed.end(),
                              [](char c) { return c == '\n' || c == '\r' || c == ' ' || c == '\t'; }),
               packed.end());
  return Base64DecodeEither(packed);
}

// "repo" of an execute: {"bundle": BASE64} or {"path": DIR}.
Status ParseRepo(const json& value, supervisor::ExecuteRequest& request) {
  const bool bundle = value.is_object() && value.size() == 1 && value.contains("bundle");
  const bool path = value.is_object() && value.size() == 1 && value.contains("path");
  if (!bundle && !path) return Status::Error("repo: either {\"bundle\": BASE64} or {\"path\": DIR}", EINVAL);
  const json& field = bundle ? value["bundle"] : value["path"];
  if (!field.is_string() || field.get_ref<const std::string&>().empty()) {
    return Status::Error(std::string("repo.") + (bundle ? "bundle" : "path") + ": expected a non-empty string",
                         EINVAL);
  }
  if (path) {
    request.host_path = field.get<std::string>();
    return Status();
  }
  auto decoded = DecodeBundle(field.get_ref<const std::string&>());
  if (!decoded || decoded->empty()) return Status::Error("repo.bundle: not base64 (a git bundle's bytes)", EINVAL);
  request.bundle = std::move(*decoded);
  return Status();
}

}  // namespace

// ---- Replies ----

HttpResponse JsonResponse(int status, const json& body, InvalidUtf8 invalid) {
  HttpResponse response;
  response.status = status;
  response.body = invalid == InvalidUtf8::kReplace ? body.dump(-1, ' ', false, json::error_handler_t::replace)
                                                   : body.dump();
  return response;
}

HttpResponse ErrorResponse(const Status& status) {
  ErrorCode code = ErrorCodeFor(status);
  HttpResponse response;
  response.status = HttpStatusFor(code);
  // Internal errors keep their details in the log; the client gets the request id to quote.
  response.body = ErrorBody(ErrorCodeName(code), code == ErrorCode::kInternal ? "internal error" : status.message());
  if (code == ErrorCode::kInternal) LogError("api", "internal error", {{"error", status.ToString()}});
  // Unavailable now, not for good: when to ask again (the store tries its database again every
  // second).
  if (code == ErrorCode::kUnavailable) response.headers.push_back({"Retry-After", "1"});
  return response;
}

HttpResponse BytesResponse(std::string bytes, std::string content_type) {
  HttpResponse response;
  response.content_type = std::move(content_type);
  response.body = std::move(bytes);
  return response;
}

Status ScopeError(const char* scope) {
  return Status::Error(std::string("this token lacks the \"") + scope + "\" scope", EPERM);
}

bool RequireScope(const HttpRequest& request, const char* scope, const Responder& respond) {
  if (TokenHasScope(request.auth, scope)) return true;
  respond(ErrorResponse(ScopeError(scope)));
  return false;
}

Status RateLimitedError(supervisor::RateLimiter& limiter, const AuthContext& auth) {
  return Status::Error("rate limit: at most " + std::to_string(limiter.per_minute()) +
                           " requests a minute per user; retry in " +
                           std::to_string(limiter.RetryAfterSeconds(auth.UserKey())) + " s",
                       EUSERS);
}

// ---- Bodies and their fields ----

StatusOr<json> ParseBody(const std::string& body) {
  if (body.empty()) return json::object();
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::Error("the body must be a JSON object", EINVAL);
  return j;
}

Status RefuseUnknownFields(const json& body, std::initializer_list<std::string_view> known, const char* where) {
  for (const auto& [key, value] : body.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      return Status::Error((where != nullptr ? std::string(where) + ": " : std::string()) + "unknown field \"" + key + "\"",
                           EINVAL);
    }
  }
  return Status();
}

Status OptionalUint(const json& body, const char* key, std::optional<uint64_t>& out) {
  if (!body.contains(key) || body[key].is_null()) return Status();
  if (!body[key].is_number_unsigned() && !(body[key].is_number_integer() && body[key].get<int64_t>() >= 0)) {
    return Status::Error(std::string(key) + ": expected a non-negative integer", EINVAL);
  }
  out = body[key].get<uint64_t>();
  return Status();
}

Status OptionalString(const json& body, const char* key, std::string& out) {
  if (!body.contains(key) || body[key].is_null()) return Status();
  if (!body[key].is_string()) return Status::Error(std::string(key) + ": expected a string", EINVAL);
  out = body[key].get<std::string>();
  return Status();
}

// ---- Query parameters ----

StatusOr<int64_t> QueryInt(const std::map<std::string, std::string>& query, const char* key, int64_t fallback) {
  auto it = query.find(key);
  if (it == query.end() || it->second.empty()) return fallback;
  static const std::regex kDigits("[0-9]{1,18}");
  if (!std::regex_match(it->second, kDigits)) {
    return Status::Error(std::string(key) + ": expected a non-negative integer", EINVAL);
  }
  return static_cast<int64_t>(std::stoll(it->second));
}

StatusOr<bool> QueryBool(const HttpRequest& request, const char* key, bool fallback) {
  auto it = request.query.find(key);
  if (it == request.query.end()) return fallback;
  if (it->second == "true" || it->second == "1") return true;
  if (it->second == "false" || it->second == "0") return false;
  return Status::Error(std::string(key) + ": expected true or false", EINVAL);
}

StatusOr<uint32_t> QueryMode(const HttpRequest& request, uint32_t fallback) {
  auto it = request.query.find("mode");
  if (it == request.query.end()) return fallback;
  char* end = nullptr;
  unsigned long mode = strtoul(it->second.c_str(), &end, 8);
  if (it->second.empty() || *end != '\0' || mode > 07777) return Status::Error("mode: expected octal like 0644", EINVAL);
  return static_cast<uint32_t>(mode);
}

StatusOr<std::string> QueryPath(const HttpRequest& request, const char* key) {
  auto it = request.query.find(key);
  if (it == request.query.end() || it->second.empty()) {
    return Status::Error(std::string(key) + ": required (an absolute path inside the sandbox)", EINVAL);
  }
  return it->second;
}

// ---- Requests ----

StatusOr<std::vector<std::string>> ParseSecretNames(const json& names) {
  if (!names.is_array()) return Status::Error("secrets: expected a list of secret names, like [\"GITHUB_TOKEN\"]", EINVAL);
  std::vector<std::string> out;
  for (const json& name : names) {
    if (!name.is_string()) return Status::Error("secrets: expected a list of secret names, like [\"GITHUB_TOKEN\"]", EINVAL);
    out.push_back(name.get<std::string>());
  }
  return out;
}

StatusOr<supervisor::CreateRequest> ParseCreate(const json& body) {
  supervisor::CreateRequest request;
  RETURN_IF_ERROR(RefuseUnknownFields(
      body, {"name", "image", "start", "snapshot", "idle_timeout_s", "limits", "egress", "network", "unsafe", "secrets"}));
  if (body.contains("secrets")) {
    ASSIGN_OR_RETURN(request.secrets, ParseSecretNames(body["secrets"]));
  }
  RETURN_IF_ERROR(ParseNetwork(body, request));
  if (body.contains("egress")) {
    if (!body["egress"].is_object()) return Status::Error("egress: expected an object {\"domains\", \"ports\", \"cidrs\"}", EINVAL);
    ASSIGN_OR_RETURN(request.egress, supervisor::ParseEgressRulesChange(body["egress"], "egress"));
  }
  RETURN_IF_ERROR(PresentString(body, "name", request.name));
  RETURN_IF_ERROR(PresentString(body, "image", request.image));
  RETURN_IF_ERROR(OptionalBool(body, "start", request.start));
  RETURN_IF_ERROR(PresentString(body, "snapshot", request.snapshot));
  RETURN_IF_ERROR(OptionalUint(body, "idle_timeout_s", request.idle_timeout_s));
  RETURN_IF_ERROR(ParseLimits(body, request));
  return request;
}

StatusOr<supervisor::ForkRequest> ParseFork(const json& body) {
  supervisor::ForkRequest fork;
  for (const auto& [key, value] : body.items()) {
    if (key == "name" && value.is_string()) {
      fork.name = value.get<std::string>();
    } else if (key == "start" && value.is_boolean()) {
      fork.start = value.get<bool>();
    } else if (key == "name" || key == "start") {
      return Status::Error(key + ": expected a " + (key == "name" ? "string" : "boolean"), EINVAL);
    } else {
      return Status::Error("unknown field \"" + key + "\"", EINVAL);
    }
  }
  return fork;
}

StatusOr<supervisor::NewSession> ParseNewSession(const json& body) {
  supervisor::NewSession request;
  RETURN_IF_ERROR(RefuseUnknownFields(body, {"prompt", "model", "permission_mode", "cwd", "resume", "fork", "checkpoint",
                                             "allowed_tools", "disallowed_tools", "partial", "tools"}));
  RETURN_IF_ERROR(PresentString(body, "prompt", request.prompt));
  RETURN_IF_ERROR(PresentString(body, "model", request.options.model));
  RETURN_IF_ERROR(PresentString(body, "permission_mode", request.options.permission_mode));
  RETURN_IF_ERROR(PresentString(body, "cwd", request.options.cwd));
  RETURN_IF_ERROR(PresentString(body, "resume", request.resume));
  RETURN_IF_ERROR(PresentString(body, "fork", request.fork));
  RETURN_IF_ERROR(PresentString(body, "checkpoint", request.checkpoint));
  RETURN_IF_ERROR(OptionalStrings(body, "allowed_tools", request.options.allowed_tools));
  RETURN_IF_ERROR(OptionalStrings(body, "disallowed_tools", request.options.disallowed_tools));
  RETURN_IF_ERROR(OptionalBool(body, "partial", request.options.partial));
  RETURN_IF_ERROR(ParseClientTools(body, request.tools));
  return request;
}

StatusOr<supervisor::ExecuteRequest> ParseExecute(const std::string& text) {
  if (text.empty()) return Status::Error("the body must be a JSON object", EINVAL);
  ASSIGN_OR_RETURN(json body, ParseBody(text));
  supervisor::ExecuteRequest request;
  for (const auto& [key, value] : body.items()) {
    if (key == "task" || key == "model" || key == "permission_mode") {
      if (!value.is_string()) return Status::Error(key + ": expected a string", EINVAL);
      std::string& into = key == "task" ? request.task : key == "model" ? request.model : request.permission_mode;
      into = value.get<std::string>();
    } else if (key == "timeout_s") {
      if (!value.is_number_unsigned()) return Status::Error("timeout_s: expected a positive integer", EINVAL);
      request.timeout_s = value.get<uint64_t>();
    } else if (key == "keep_sandbox") {
      if (!value.is_boolean()) return Status::Error("keep_sandbox: expected true or false", EINVAL);
      request.keep_sandbox = value.get<bool>();
    } else if (key == "repo") {
      RETURN_IF_ERROR(ParseRepo(value, request));
    } else {
      return Status::Error("unknown field \"" + key + "\"", EINVAL);
    }
  }
  if (!body.contains("repo")) return Status::Error("repo: required ({\"bundle\": BASE64} or {\"path\": DIR})", EINVAL);
  return request;
}

StatusOr<supervisor::ExecSpec> ParseExecSpec(const json& request) {
  supervisor::ExecSpec spec;
  if (!request.contains("sandbox") || !request["sandbox"].is_string()) {
    return Status::Error("sandbox: expected a sandbox id", EINVAL);
  }
  spec.sandbox = request["sandbox"].get<std::string>();
  if (!request.contains("argv") || !request["argv"].is_array() || request["argv"].empty()) {
    return Status::Error("argv: expected a non-empty array of strings", EINVAL);
  }
  for (const auto& arg : request["argv"]) {
    if (!arg.is_string()) return Status::Error("argv: expected strings", EINVAL);
    spec.argv.push_back(arg.get<std::string>());
  }
  if (request.contains("env")) {
    if (!request["env"].is_object()) return Status::Error("env: expected an object of strings", EINVAL);
    for (const auto& [key, value] : request["env"].items()) {
      if (!value.is_string() || key.empty() || key.find('=') != std::string::npos) {
        return Status::Error("env: bad entry \"" + key + "\"", EINVAL);
      }
      spec.env.push_back(key + "=" + value.get<std::string>());
    }
  }
  RETURN_IF_ERROR(PresentString(request, "cwd", spec.cwd));
  if (request.contains("user") && !request["user"].is_string()) {
    return Status::Error("user: expected \"agent\" or \"root\"", EINVAL);
  }
  spec.user.clear();  // absent: the sandbox's default (its image's USER decides)
  RETURN_IF_ERROR(PresentString(request, "user", spec.user));
  RETURN_IF_ERROR(OptionalBool(request, "stdin", spec.stdin_open));
  if (request.contains("pty") && !request["pty"].is_null() && request["pty"] != false) {
    const json& pty = request["pty"];
    if (!pty.is_object()) return Status::Error("pty: expected {\"rows\", \"cols\"}", EINVAL);
    std::optional<uint64_t> rows, cols;
    RETURN_IF_ERROR(OptionalUint(pty, "rows", rows));
    RETURN_IF_ERROR(OptionalUint(pty, "cols", cols));
    spec.pty = true;
    spec.rows = static_cast<uint16_t>(std::min<uint64_t>(rows.value_or(24), 10000));
    spec.cols = static_cast<uint16_t>(std::min<uint64_t>(cols.value_or(80), 10000));
  }
  return spec;
}

int SignalNumber(const json& value) {
  if (value.is_number_integer()) {
    int n = value.get<int>();
    return n > 0 && n < 65 ? n : -1;
  }
  if (!value.is_string()) return -1;
  std::string name = value.get<std::string>();
  if (name.rfind("SIG", 0) == 0) name = name.substr(3);
  static const std::map<std::string, int> kNames = {
      {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"KILL", SIGKILL}, {"USR1", SIGUSR1},
      {"USR2", SIGUSR2}, {"TERM", SIGTERM}, {"CONT", SIGCONT}, {"STOP", SIGSTOP}, {"WINCH", SIGWINCH},
      {"ALRM", SIGALRM}, {"PIPE", SIGPIPE}};
  auto it = kNames.find(name);
  return it == kNames.end() ? -1 : it->second;
}

StatusOr<GitQuery> ParseGitQuery(const HttpRequest& request) {
  GitQuery query;
  if (auto it = request.query.find("path"); it != request.query.end()) {
    if (it->second.empty() || it->second[0] != '/' || it->second.find('\0') != std::string::npos ||
        it->second.size() > 4096) {
      return Status::Error("path: an absolute path inside the sandbox", EINVAL);
    }
    query.path = it->second;
  }
  if (auto it = request.query.find("base"); it != request.query.end()) {
    const std::string& base = it->second;
    // A revision, never an option (the scripts also pass --end-of-options).
    if (base.empty() || base[0] == '-' || base.size() > kMaxRevisionBytes || base.find('\0') != std::string::npos) {
      return Status::Error("base: a revision (a commit id, a branch, HEAD~1, ...)", EINVAL);
    }
    query.base = base;
  }
  return query;
}

StatusOr<LedgerExport> ParseLedgerExport(const std::map<std::string, std::string>& query, int64_t now) {
  auto get = [&](const char* key) {
    auto it = query.find(key);
    return it == query.end() ? std::string() : it->second;
  };
  LedgerExport out;
  out.query.iss = get("issuer");
  out.query.sub = get("user");
  if (!out.query.sub.empty() && out.query.iss.empty()) {
    return Status::Error("user: needs issuer (a user is the pair)", EINVAL);
  }
  ASSIGN_OR_RETURN(out.query.from, QueryInt(query, "from", 0));
  ASSIGN_OR_RETURN(out.query.to, QueryInt(query, "to", now + 1));
  if (!get("window").empty()) {
    if (query.count("from") || query.count("to")) return Status::Error("window: not with from or to", EINVAL);
    supervisor::Budget calendar;
    ASSIGN_OR_RETURN(calendar.window, supervisor::ParseWindow(get("window")));
    const supervisor::WindowRange range = supervisor::CurrentWindow(calendar, now);
    out.query.from = range.start;
    out.query.to = range.end;
  }
  ASSIGN_OR_RETURN(out.query.after_id, QueryInt(query, "after_id", 0));
  ASSIGN_OR_RETURN(out.query.limit, QueryInt(query, "limit", kMaxExportRows));
  if (out.query.limit == 0 || out.query.limit > kMaxExportRows) {
    return Status::Error("limit: 1 to " + std::to_string(kMaxExportRows), EINVAL);
  }
  const std::string format = get("format").empty() ? "jsonl" : get("format");
  if (format != "jsonl" && format != "csv") return Status::Error("format: jsonl or csv", EINVAL);
  out.csv = format == "csv";
  return out;
}

// ---- Replies' bodies ----

namespace {

// "image": what it was created by (a name, "host", a digest); "image_digest": the image it runs,
// whatever that name points at now (absent for host).
void SetImage(json& j, const std::string& image, const std::string& image_name) {
  j["image"] = image_name.empty() ? image : image_name;
  if (image.starts_with("sha256:")) j["image_digest"] = image;
}

}  // namespace

json SandboxJson(const supervisor::SandboxRow& row, bool with_owner) {
  const isolation::ResourceLimits& set = row.limits;
  const json limits = {{"memory_bytes", set.memory_bytes.value_or(0)},
                       {"cpus", static_cast<double>(set.cpu_millicores.value_or(0)) / 1000.0},
                       {"pids", set.pids.value_or(0)},
                       {"disk_bytes", set.disk_bytes.value_or(0)}};
  json j = {{"id", row.id},
            {"name", row.name},
            {"state", row.state},
            {"limits", limits},
            {"idle_timeout_s", row.idle_timeout_s},
            {"created_at", row.created_at},
            {"last_active_at", row.last_active_at},
            {"source", row.source},
            {"egress", EgressJson(row)},
            {"network", row.network},
            {"secrets", row.secrets}};
  SetImage(j, row.image, row.image_name);
  if (with_owner) {
    j["iss"] = row.iss;
    j["sub"] = row.sub;
    j["node"] = row.node_id;  // the admin's view: which node of the fleet holds it
  }
  return j;
}

json EgressJson(const supervisor::SandboxRow& row) {
  return supervisor::EgressRulesJson(row.egress.value_or(supervisor::EgressRules{}));
}

json SnapshotJson(const supervisor::SnapshotRow& row, bool with_owner) {
  json j = {{"id", row.id}, {"sandbox", row.sandbox_id}, {"created_at", row.created_at}, {"bytes", row.bytes}};
  SetImage(j, row.image, row.image_name);
  j["disk_bytes"] = row.limits.disk_bytes.value_or(0);
  if (with_owner) {
    j["iss"] = row.iss;
    j["sub"] = row.sub;
  }
  return j;
}

json CommandJson(const supervisor::CommandRow& row) {
  json j = {{"id", row.id},
            {"sandbox", row.sandbox_id},
            {"argv", json::parse(row.argv_json, nullptr, false)},
            {"pty", row.pty},
            {"state", row.state},
            {"created_at", row.created_at},
            {"ended_at", row.ended_at}};
  if (!row.outcome_json.empty()) j["outcome"] = json::parse(row.outcome_json, nullptr, false);
  return j;
}

json SessionJson(const supervisor::SessionRow& row) {
  json j = {{"id", row.id},
            {"sandbox", row.sandbox_id},
            {"state", row.state},
            {"agent_session", row.agent_session},
            {"parent", row.parent_id},
            {"options", json::parse(row.options_json, nullptr, false)},
            {"turns", row.turns},
            {"cost_usd", supervisor::FormatMicroUsd(row.cost_micro_usd)},
            {"created_at", row.created_at},
            {"updated_at", row.updated_at},
            {"ended_at", row.ended_at}};
  j["outcome"] = row.outcome_json.empty() ? json() : json::parse(row.outcome_json, nullptr, false);
  return j;
}

json FileInfoJson(const supervisor::FileInfo& info) {
  char mode[8];
  snprintf(mode, sizeof(mode), "%04o", info.mode);
  return {{"name", info.name}, {"type", info.type}, {"size", info.size}, {"mode", mode}, {"mtime", info.mtime}};
}

json EventJson(const supervisor::EventRow& event) {
  return {{"seq", event.seq}, {"type", event.type}, {"at", event.at},
          {"data", json::parse(event.data_json, nullptr, false)}};
}

json SandboxEventJson(const supervisor::EventRow& event) {
  json j = EventJson(event);
  j["event"] = "sandbox";
  j["sandbox"] = event.sandbox_id;
  return j;
}

json ExecutionJson(const supervisor::ExecutionRow& row, bool with_diff, bool with_owner) {
  json asked = ParsedOr(row.request_json, json::object());
  json j = {{"id", row.id},
            {"state", row.state},
            {"sandbox", row.sandbox_id.empty() ? json() : json(row.sandbox_id)},
            {"session", row.session_id.empty() ? json() : json(row.session_id)},
            {"task", asked.value("task", "")},
            {"repo", asked.value("repo", "")},
            {"model", asked.value("model", "")},
            {"permission_mode", asked.value("permission_mode", "")},
            {"timeout_s", asked.value("timeout_s", 0)},
            {"keep_sandbox", asked.value("keep_sandbox", false)},
            {"base", row.base_commit.empty() ? json() : json(row.base_commit)},
            {"created_at", row.created_at},
            {"updated_at", row.updated_at},
            {"ended_at", row.ended_at}};
  if (asked.contains("path")) j["path"] = asked["path"];
  if (with_owner) {
    j["iss"] = row.iss;
    j["sub"] = row.sub;
  }
  if (row.state == "running") return j;
  j["head"] = row.head_commit.empty() ? json() : json(row.head_commit);
  j["summary"] = row.summary;
  j["outcome"] = row.outcome.empty() ? json() : json(row.outcome);
  j["cost_usd"] = supervisor::FormatMicroUsd(row.cost_micro_usd);
  j["usage"] = ParsedOr(row.usage_json, json::object());
  j["files_changed"] = ParsedOr(row.files_json, json::array());
  if (with_diff) j["diff"] = row.diff;
  j["truncated"] = row.diff_truncated;
  j["bundle_bytes"] = row.bundle_bytes;
  if (!row.error.empty()) j["error"] = row.error;
  return j;
}

}  // namespace corral::api
