// corral prompt: one turn of an agent session, streamed to the terminal.
#include "tools/corral/prompt_command.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <nlohmann/json.hpp>

#include "tools/corral/client.h"
#include "tools/corral/host_tools.h"

namespace corral::cli {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using nlohmann::json;
using tcp = net::ip::tcp;

std::string OneLine(std::string text, size_t max) {
  for (char& c : text) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  if (text.size() > max) text = text.substr(0, max) + "...";
  return text;
}

// What a tool call is about, in a few words: the command, the file, or the input itself.
std::string ToolSummary(const json& input) {
  for (const char* key : {"command", "file_path", "path", "pattern", "url", "description"}) {
    if (input.contains(key) && input[key].is_string()) return OneLine(input[key].get<std::string>(), 120);
  }
  return OneLine(input.dump(), 120);
}

std::string ToolResultText(const json& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string text;
  if (content.is_array()) {
    for (const auto& part : content) {
      if (part.is_object() && part.value("type", "") == "text") text += part.value("text", "") + " ";
    }
  }
  return text;
}

// Prints one of the agent's stream-json messages for a person.
void Render(const json& data) {
  const std::string type = data.value("type", "");
  const json& message = data.contains("message") ? data["message"] : json();
  if (type == "assistant" && message.contains("content") && message["content"].is_array()) {
    for (const auto& block : message["content"]) {
      const std::string kind = block.value("type", "");
      if (kind == "text") {
        printf("%s\n", block.value("text", "").c_str());
      } else if (kind == "tool_use") {
        printf("* %s(%s)\n", block.value("name", "?").c_str(),
               ToolSummary(block.contains("input") ? block["input"] : json::object()).c_str());
      }
    }
  } else if (type == "user" && message.contains("content") && message["content"].is_array()) {
    for (const auto& block : message["content"]) {
      if (block.value("type", "") != "tool_result") continue;
      const bool error = block.value("is_error", false);
      printf("  -> %s%s\n", error ? "error: " : "",
             OneLine(ToolResultText(block.contains("content") ? block["content"] : json()), 200).c_str());
    }
  }
  fflush(stdout);
}

// Asks the person at the terminal (not stdin, which may be a pipe). No terminal: no.
bool AskConsent(const std::string& question) {
  FILE* tty = fopen("/dev/tty", "r+");
  if (tty == nullptr) {
    fprintf(stderr, "corral: %s: no terminal to ask (use --yes to allow)\n", question.c_str());
    return false;
  }
  fprintf(tty, "corral: %s: allow? [y/N] ", question.c_str());
  fflush(tty);
  char answer[64] = {};
  const bool yes = fgets(answer, sizeof(answer), tty) != nullptr && (answer[0] == 'y' || answer[0] == 'Y');
  fclose(tty);
  return yes;
}

class PromptRun {
 public:
  explicit PromptRun(const PromptOptions& options) : options_(options), endpoint_(Endpoint::Server(options.server)) {}

  int Run() {
    std::string sandbox = options_.sandbox;
    if (!options_.resume.empty()) {
      // A session still running takes the message as its next turn; an ended one runs again.
      auto row = CallJson(endpoint_, "GET", "/v1/sessions/" + options_.resume);
      if (!row.ok()) return Refused(row.status());
      const std::string state = row->value("state", "");
      live_ = state == "ready" || state == "processing" || state == "initializing";
      if (sandbox.empty()) sandbox = row->value("sandbox", "");
    }
    if (sandbox.empty()) {
      auto list = CallJson(endpoint_, "GET", "/v1/sandboxes");
      if (!list.ok()) return Refused(list.status());
      for (const auto& row : (*list)["sandboxes"]) {
        if (row.value("state", "") == "running") sandbox = row.value("id", "");
      }
      if (sandbox.empty()) {
        fprintf(stderr, "corral: you have no running sandbox (corral sandbox create; or --sandbox ID)\n");
        return 2;
      }
    }
    if (live_) {
      session_ = options_.resume;
    } else {
      json body = {{"prompt", options_.text}};
      if (!options_.model.empty()) body["model"] = options_.model;
      if (!options_.permission_mode.empty()) body["permission_mode"] = options_.permission_mode;
      if (options_.host_tools) body["tools"] = HostToolDeclarations();
      if (!options_.resume.empty()) body["resume"] = options_.resume;
      auto created = CallJson(endpoint_, "POST", "/v1/sandboxes/" + sandbox + "/sessions", body);
      if (!created.ok()) return Refused(created.status());
      session_ = created->value("id", "");
    }
    fprintf(stderr, "corral: session %s in %s\n", session_.c_str(), sandbox.c_str());
    try {
      return Stream();
    } catch (const std::exception& e) {
      fprintf(stderr, "corral: connection to corrald: %s (session %s may still run)\n", e.what(), session_.c_str());
      return 2;
    }
  }

 private:
  static int Refused(const Status& status) {
    fprintf(stderr, "corral: %s\n", status.message().c_str());
    return 2;
  }

  void Send(websocket::stream<tcp::socket>& ws, json op) {
    op["id"] = next_id_++;
    ws.text(true);
    ws.write(net::buffer(op.dump()));
  }

  int Stream() {
    const ServerUrl& url = options_.server.url;
    net::io_context io;
    tcp::resolver resolver(io);
    websocket::stream<tcp::socket> ws(io);
    net::connect(ws.next_layer(), resolver.resolve(url.host, url.port));
    const std::string token = options_.server.token;
    ws.set_option(websocket::stream_base::decorator([token](websocket::request_type& request) {
      request.set(beast::http::field::sec_websocket_protocol, "corral.v1");
      if (!token.empty()) request.set(beast::http::field::authorization, "Bearer " + token);
    }));
    ws.handshake(url.HostHeader(), url.base_path + "/v1/ws");
    if (live_) {
      // Only what comes from now on (an after_seq past the last), then the message.
      Send(ws, {{"op", "session.attach"}, {"session", session_}, {"after_seq", uint64_t{1} << 53}});
      Send(ws, {{"op", "session.send"}, {"session", session_}, {"text", options_.text}});
    } else {
      Send(ws, {{"op", "session.attach"}, {"session", session_}});
    }
    beast::flat_buffer buffer;
    json result;
    bool closing = false;
    for (;;) {
      buffer.clear();
      ws.read(buffer);
      if (!ws.got_text()) continue;
      json message = json::parse(beast::buffers_to_string(buffer.data()), nullptr, false);
      if (!message.is_object()) continue;
      if (message.contains("ok") && !message.value("ok", false)) {
        const json& error = message["error"];
        if (error.value("code", "") == "not_found" && error.value("message", "").find("is not waiting") != std::string::npos) {
          // An answer that came too late (the call timed out): the agent has moved on.
          fprintf(stderr, "corral: %s\n", error.value("message", "?").c_str());
          continue;
        }
        fprintf(stderr, "corral: %s (%s)\n", error.value("message", "?").c_str(), error.value("code", "?").c_str());
        return 2;
      }
      const std::string event = message.value("event", "");
      if (options_.json && (event == "session" || event == "session_end")) {
        printf("%s\n", message.dump().c_str());
        fflush(stdout);
      }
      if (event == "session") {
        const std::string kind = message.value("kind", "");
        if (kind == "agent" && message.contains("data")) {
          if (!options_.json) Render(message["data"]);
          if (message["data"].value("type", "") == "result") result = message["data"];
        } else if (kind == "stderr" && !options_.json) {
          fprintf(stderr, "[agent] %s\n", message.value("text", "").c_str());
        } else if (kind == "tool_call") {
          AnswerToolCall(ws, message);
        } else if (kind == "permission_request") {
          const std::string call = message.value("call", "");
          const std::string question = "the agent wants to use " + message.value("tool_name", "?") + " in the sandbox (" +
                                       ToolSummary(message.contains("input") ? message["input"] : json::object()) + ")";
          const bool allow = options_.yes || AskConsent(question);
          json answer = {{"op", "session.permission"}, {"session", session_}, {"call", call}, {"allow", allow}};
          if (allow && message.contains("input")) answer["updated_input"] = message["input"];
          if (!allow) answer["message"] = "the user said no";
          Send(ws, answer);
        } else if (kind == "budget_exhausted") {
          fprintf(stderr, "corral: the AI budget of your token is spent; the agent was stopped\n");
        } else if (kind == "state" && message.value("state", "") == "ready" && !result.is_null() && !closing) {
          if (options_.keep) break;
          Send(ws, {{"op", "session.close"}, {"session", session_}});
          closing = true;
        }
      } else if (event == "session_end") {
        const json& outcome = message["outcome"];
        if (!options_.json) {
          fprintf(stderr, "corral: session %s %s (%s), %lld turn(s), USD %s\n", session_.c_str(),
                  message.value("state", "?").c_str(), outcome.value("outcome", "?").c_str(),
                  static_cast<long long>(outcome.value("turns", 0)), outcome.value("cost_usd", "?").c_str());
        }
        ws.close(websocket::close_code::normal);
        return !result.is_null() && !result.value("is_error", false) ? 0 : 1;
      }
    }
    // --keep: the session stays ready for `corral prompt --resume`.
    auto row = CallJson(endpoint_, "GET", "/v1/sessions/" + session_);
    if (!options_.json) {
      fprintf(stderr, "corral: session %s is ready (corral prompt --resume %s \"...\"), USD %s so far\n",
              session_.c_str(), session_.c_str(), row.ok() ? row->value("cost_usd", "?").c_str() : "?");
    }
    ws.close(websocket::close_code::normal);
    return result.value("is_error", false) ? 1 : 0;
  }

  // A host tool call: asked about, run here, answered. Calls for tools this client does not
  // have are answered with an error at once (the agent would otherwise wait for the timeout).
  void AnswerToolCall(websocket::stream<tcp::socket>& ws, const json& message) {
    const std::string call = message.value("call", "");
    const std::string name = message.value("name", "");
    const json input = message.contains("input") ? message["input"] : json::object();
    HostToolResult result;
    if (!options_.host_tools || !IsHostTool(name)) {
      result = {"corral prompt has no tool " + name, true};
    } else if (!options_.yes && !AskConsent("the agent wants to run " + DescribeHostCall(name, input) + " on this machine")) {
      result = {"the user did not allow this " + name + " call", true};
    } else {
      if (!options_.json) fprintf(stderr, "corral: running %s here\n", DescribeHostCall(name, input).c_str());
      result = RunHostTool(name, input, WorkingDirectory());
    }
    Send(ws, {{"op", "session.tool_result"},
              {"session", session_},
              {"call", call},
              {"text", result.text},
              {"is_error", result.is_error}});
  }

  static std::string WorkingDirectory() {
    char path[PATH_MAX];
    if (getcwd(path, sizeof(path)) == nullptr) return "/";
    char real[PATH_MAX];
    return realpath(path, real) != nullptr ? std::string(real) : std::string(path);
  }

  const PromptOptions& options_;
  Endpoint endpoint_;
  std::string session_;
  bool live_ = false;  // --resume of a session that is still running
  uint64_t next_id_ = 1;
};

}  // namespace

int RunPromptCommand(const PromptOptions& options) { return PromptRun(options).Run(); }

}  // namespace corral::cli
