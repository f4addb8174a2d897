// corral-mcp end to end: the real static binary, spoken to over pipes as Claude Code speaks MCP,
// against the real tool bridge (on a listener on the host's loopback, with a fake session
// authority). What the agent would see, what the session receives, and the failure paths.
#include <elf.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "supervisor/sessions/tool_bridge.h"

namespace corral::supervisor {
namespace {

namespace asio = boost::asio;
using nlohmann::json;

constexpr const char* kKey = "ctk-mcp-test-session-key";
constexpr int kTimeoutMs = 10000;

json Tools() {
  return json::array({{{"name", "read_ticket"},
                       {"description", "Reads a ticket from the tracker"},
                       {"inputSchema",
                        {{"type", "object"},
                         {"properties", {{"ticket", {{"type", "string"}}}, {"verbose", {{"type", "boolean"}}}}},
                         {"required", {"ticket"}}}}},
                      {{"name", "no_schema"}, {"description", "Declared without a schema"}}});
}

json TextResult(const std::string& text, bool is_error = false) {
  return {{"content", json::array({{{"type", "text"}, {"text", text}}})}, {"isError", is_error}};
}

class FakeAuthority : public ToolAuthority {
 public:
  struct Call {
    std::string session_id;
    std::string name;
    json arguments;
  };

  std::optional<ToolSessionInfo> FindToolKey(std::string_view sandbox_id, std::string_view key) override {
    if (sandbox_id != "sb_test" || ToolKeyDigest(key) != ToolKeyDigest(kKey)) return std::nullopt;
    return ToolSessionInfo{"ses_1", Tools()};
  }

  void OnToolCall(const std::string& session_id, const std::string&, const std::string& name, json arguments,
                  std::function<void(json)> reply) override {
    std::lock_guard lock(mutex_);
    calls_.push_back({session_id, name, std::move(arguments)});
    replies_.push_back(std::move(reply));
    changed_.notify_all();
  }

  std::vector<Call> WaitForCalls(size_t n) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, std::chrono::milliseconds(kTimeoutMs), [&] { return calls_.size() >= n; });
    return calls_;
  }
  std::function<void(json)> TakeReply(size_t i) {
    std::lock_guard lock(mutex_);
    return std::move(replies_.at(i));
  }
  void Clear() {
    std::lock_guard lock(mutex_);
    replies_.clear();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Call> calls_;
  std::vector<std::function<void(json)>> replies_;
};

// corral-mcp as a child process with its stdin, stdout and stderr on pipes.
class McpProcess {
 public:
  explicit McpProcess(const std::vector<std::string>& env) {
    int in[2], out[2], err[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) return;
    std::vector<char*> envp;
    for (const std::string& entry : env) envp.push_back(const_cast<char*>(entry.c_str()));
    envp.push_back(nullptr);
    char* argv[] = {const_cast<char*>(CORRAL_MCP_PATH), nullptr};
    pid_ = fork();
    if (pid_ == 0) {  // only async-signal-safe calls until exec
      dup2(in[0], 0);
      dup2(out[1], 1);
      dup2(err[1], 2);
      execve(CORRAL_MCP_PATH, argv, envp.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    close(err[1]);
    stdin_ = in[1];
    stdout_ = out[0];
    stderr_ = err[0];
  }
  ~McpProcess() {
    CloseStdin();
    if (pid_ > 0 && !waited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (stdout_ >= 0) close(stdout_);
    if (stderr_ >= 0) close(stderr_);
  }

  bool SendRaw(const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = write(stdin_, bytes.data() + done, bytes.size() - done);
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }
  bool Send(const json& message) { return SendRaw(message.dump() + "\n"); }
  json Request(const json& id, const std::string& method, const json& params = json::object()) {
    EXPECT_TRUE(Send({{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}}));
    return Read().value_or(json());
  }

  // The next line on stdout as JSON; nullopt at EOF (or after kTimeoutMs, a failure).
  std::optional<json> Read() {
    for (;;) {
      size_t newline = buffer_.find('\n');
      if (newline != std::string::npos) {
        std::string line = buffer_.substr(0, newline);
        buffer_.erase(0, newline + 1);
        json message = json::parse(line, nullptr, false);
        EXPECT_FALSE(message.is_discarded()) << "stdout carried something other than JSON: " << line;
        return message;
      }
      struct pollfd p = {stdout_, POLLIN, 0};
      if (poll(&p, 1, kTimeoutMs) != 1) {
        ADD_FAILURE() << "no message from corral-mcp within " << kTimeoutMs << " ms";
        return std::nullopt;
      }
      char chunk[4096];
      ssize_t n = read(stdout_, chunk, sizeof(chunk));
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  void CloseStdin() {
    if (stdin_ >= 0) close(stdin_);
    stdin_ = -1;
  }

  // Its exit status (-1 if it did not exit within kTimeoutMs, when it is killed).
  int Wait() {
    for (int waited_ms = 0; waited_ms < kTimeoutMs; waited_ms += 5) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        waited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return -1;
  }

  // What it wrote on stderr (after it exited).
  std::string Stderr() {
    std::string text;
    char chunk[4096];
    ssize_t n;
    while ((n = read(stderr_, chunk, sizeof(chunk))) > 0) text.append(chunk, static_cast<size_t>(n));
    return text;
  }

  bool started() const { return pid_ > 0 && stdout_ >= 0; }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  int stdout_ = -1;
  int stderr_ = -1;
  bool waited_ = false;
  std::string buffer_;
};

class CorralMcpTest : public ::testing::Test {
 protected:
  // Runs `fn` on the io thread and waits for it.
  template <typename Fn>
  auto OnIo(Fn fn) {
    std::packaged_task<decltype(fn())()> task(std::move(fn));
    auto result = task.get_future();
    asio::post(io_, [&task] { task(); });
    return result.get();
  }

  void SetUp() override {
    bridge_ = std::make_unique<ToolBridge>(io_, authority_);
    UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    struct sockaddr_in address = {};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    ASSERT_EQ(listen(fd.get(), 16), 0);
    socklen_t length = sizeof(address);
    ASSERT_EQ(getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length), 0);
    port_ = ntohs(address.sin_port);
    std::vector<UniqueFd> listeners;
    listeners.push_back(std::move(fd));
    bridge_->Serve("sb_test", std::move(listeners));
    loop_ = std::thread([this] { io_.run(); });
  }

  void TearDown() override {
    mcp_.reset();
    auto stop = [this] {
      bridge_.reset();
      authority_.Clear();
    };
    if (loop_.joinable()) {
      OnIo(stop);
    } else {
      stop();  // SetUp failed before the loop started
    }
    work_.reset();
    if (loop_.joinable()) loop_.join();
  }

  std::string BridgeAddress() const { return "127.0.0.1:" + std::to_string(port_); }

  // corral-mcp for the session's key (or `key`), initialized as Claude Code does it.
  McpProcess& Start(const std::string& key = kKey) {
    mcp_ = std::make_unique<McpProcess>(
        std::vector<std::string>{"CORRAL_TOOL_BRIDGE=" + BridgeAddress(), "CORRAL_TOOL_KEY=" + key});
    EXPECT_TRUE(mcp_->started());
    json init = mcp_->Request(0, "initialize",
                              {{"protocolVersion", "2025-06-18"},
                               {"capabilities", json::object()},
                               {"clientInfo", {{"name", "claude-code"}, {"version", "2"}}}});
    EXPECT_EQ(init["result"]["protocolVersion"], "2025-06-18") << init.dump();
    EXPECT_TRUE(mcp_->Send({{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}}));
    return *mcp_;
  }

  FakeAuthority authority_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_ = asio::make_work_guard(io_);
  std::thread loop_;
  std::unique_ptr<ToolBridge> bridge_;
  std::unique_ptr<McpProcess> mcp_;
  uint16_t port_ = 0;
};

TEST_F(CorralMcpTest, TheBinaryIsStatic) {
  std::ifstream file(CORRAL_MCP_PATH, std::ios::binary);
  Elf64_Ehdr header;
  ASSERT_TRUE(file.read(reinterpret_cast<char*>(&header), sizeof(header)));
  ASSERT_EQ(std::string(reinterpret_cast<char*>(header.e_ident), 4), std::string(ELFMAG, 4));
  int loads = 0;
  for (int i = 0; i < header.e_phnum; ++i) {
    Elf64_Phdr program;
    file.seekg(static_cast<std::streamoff>(header.e_phoff + i * header.e_phentsize));
    ASSERT_TRUE(file.read(reinterpret_cast<char*>(&program), sizeof(program)));
    EXPECT_NE(program.p_type, static_cast<uint32_t>(PT_INTERP)) << "corral-mcp asks for a dynamic linker";
    EXPECT_NE(program.p_type, static_cast<uint32_t>(PT_DYNAMIC)) << "corral-mcp has a dynamic section";
    loads += program.p_type == PT_LOAD;
  }
  EXPECT_GT(loads, 0);  // control: the program headers were read
}

TEST_F(CorralMcpTest, InitializeEchoesAKnownProtocolVersionAndAnswersWithItsOwnOtherwise) {
  McpProcess& mcp = Start();
  json older = mcp.Request(1, "initialize", {{"protocolVersion", "2024-11-05"}});
  EXPECT_EQ(older["jsonrpc"], "2.0");
  EXPECT_EQ(older["id"], 1);
  EXPECT_EQ(older["result"]["protocolVersion"], "2024-11-05");
  EXPECT_TRUE(older["result"]["capabilities"]["tools"].is_object());
  EXPECT_EQ(older["result"]["serverInfo"]["name"], "corral");
  EXPECT_TRUE(older["result"]["serverInfo"]["version"].is_string());
  json unknown = mcp.Request(2, "initialize", {{"protocolVersion", "1999-01-01"}});
  EXPECT_EQ(unknown["result"]["protocolVersion"], "2025-06-18");
  // The notification sent by Start() got no answer: the next line answers this ping.
  json pong = mcp.Request("p", "ping");
  EXPECT_EQ(pong["id"], "p");
  EXPECT_EQ(pong["result"], json::object());
}

TEST_F(CorralMcpTest, ToolsListIsTheSessionsDeclaredTools) {
  McpProcess& mcp = Start();
  json listed = mcp.Request(1, "tools/list");
  const json& tools = listed["result"]["tools"];
  ASSERT_EQ(tools.size(), 2u) << listed.dump();
  EXPECT_EQ(tools[0], Tools()[0]);
  EXPECT_EQ(tools[1]["name"], "no_schema");
  EXPECT_EQ(tools[1]["inputSchema"], json({{"type", "object"}}));  // clients need one
}

TEST_F(CorralMcpTest, ACallReachesTheSessionAndItsAnswerTheAgent) {
  McpProcess& mcp = Start();
  const json arguments = {{"ticket", "OPS-7"}, {"verbose", true}};
  ASSERT_TRUE(mcp.Send({{"jsonrpc", "2.0"},
                        {"id", "call-A"},
                        {"method", "tools/call"},
                        {"params", {{"name", "read_ticket"}, {"arguments", arguments}}}}));
  auto calls = authority_.WaitForCalls(1);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].session_id, "ses_1");
  EXPECT_EQ(calls[0].name, "read_ticket");
  EXPECT_EQ(calls[0].arguments, arguments);
  auto reply = authority_.TakeReply(0);
  OnIo([&] { reply(TextResult("OPS-7: the disk is full\nline two \"quoted\"")); });
  json answer = mcp.Read().value_or(json());
  EXPECT_EQ(answer["id"], "call-A");
  EXPECT_EQ(answer["result"]["isError"], false);
  EXPECT_EQ(answer["result"]["content"], TextResult("OPS-7: the disk is full\nline two \"quoted\"")["content"]);
}

TEST_F(CorralMcpTest, ConcurrentCallsAreAnsweredAsTheSessionAnswersThem) {
  McpProcess& mcp = Start();
  for (int id : {10, 11}) {
    ASSERT_TRUE(mcp.Send({{"jsonrpc", "2.0"},
                          {"id", id},
                          {"method", "tools/call"},
                          {"params", {{"name", "read_ticket"}, {"arguments", {{"ticket", std::to_string(id)}}}}}}));
  }
  auto calls = authority_.WaitForCalls(2);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].arguments["ticket"], "10");
  EXPECT_EQ(calls[1].arguments["ticket"], "11");
  auto first = authority_.TakeReply(0);
  auto second = authority_.TakeReply(1);
  OnIo([&] { second(TextResult("eleven", true)); });
  json answer = mcp.Read().value_or(json());
  EXPECT_EQ(answer["id"], 11);
  EXPECT_EQ(answer["result"]["isError"], true);
  EXPECT_EQ(answer["result"]["content"][0]["text"], "eleven");
  OnIo([&] { first(TextResult("ten")); });
  answer = mcp.Read().value_or(json());
  EXPECT_EQ(answer["id"], 10);
  EXPECT_EQ(answer["result"]["content"][0]["text"], "ten");
}

TEST_F(CorralMcpTest, AnUndeclaredToolIsAnErrorResultFromTheBridge) {
  McpProcess& mcp = Start();
  json answer = mcp.Request(1, "tools/call", {{"name", "rm_rf"}, {"arguments", json::object()}});
  EXPECT_EQ(answer["result"]["isError"], true);
  EXPECT_NE(answer["result"]["content"][0]["text"].get<std::string>().find("rm_rf"), std::string::npos);
  EXPECT_TRUE(authority_.WaitForCalls(0).empty());
}

TEST_F(CorralMcpTest, WhenTheBridgeGoesCallsBecomeErrorResults) {
  McpProcess& mcp = Start();
  ASSERT_TRUE(mcp.Send({{"jsonrpc", "2.0"},
                        {"id", 1},
                        {"method", "tools/call"},
                        {"params", {{"name", "read_ticket"}, {"arguments", {{"ticket", "A"}}}}}}));
  ASSERT_EQ(authority_.WaitForCalls(1).size(), 1u);
  OnIo([this] { bridge_->Forget("sb_test"); });  // the sandbox stops: connection and listener go
  // The call that was under way is answered by corral-mcp itself.
  json lost = mcp.Read().value_or(json());
  EXPECT_EQ(lost["id"], 1);
  EXPECT_EQ(lost["result"]["isError"], true);
  EXPECT_NE(lost["result"]["content"][0]["text"].get<std::string>().find("lost"), std::string::npos) << lost.dump();
  // A new call finds no bridge to reconnect to.
  json refused = mcp.Request(2, "tools/call", {{"name", "read_ticket"}, {"arguments", {{"ticket", "B"}}}});
  EXPECT_EQ(refused["result"]["isError"], true);
  EXPECT_NE(refused["result"]["content"][0]["text"].get<std::string>().find("unavailable"), std::string::npos)
      << refused.dump();
  EXPECT_EQ(authority_.WaitForCalls(1).size(), 1u);  // nothing more reached the session
  // The server itself lives on.
  EXPECT_EQ(mcp.Request(3, "ping")["result"], json::object());
}

TEST_F(CorralMcpTest, ADroppedConnectionIsReopenedForTheNextCall) {
  McpProcess& mcp = Start();
  ASSERT_EQ(mcp.Request(1, "tools/list")["result"]["tools"].size(), 2u);
  OnIo([this] { bridge_->DropSession("ses_1"); });  // the listener stays
  json answer;
  // corral-mcp learns of the drop when it polls; the call after that reconnects (with a new hello).
  ASSERT_TRUE(mcp.Send({{"jsonrpc", "2.0"},
                        {"id", 2},
                        {"method", "tools/call"},
                        {"params", {{"name", "read_ticket"}, {"arguments", {{"ticket", "again"}}}}}}));
  auto calls = authority_.WaitForCalls(1);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].arguments["ticket"], "again");
  auto reply = authority_.TakeReply(0);
  OnIo([&] { reply(TextResult("back")); });
  answer = mcp.Read().value_or(json());
  EXPECT_EQ(answer["id"], 2);
  EXPECT_EQ(answer["result"]["content"][0]["text"], "back");
}

TEST_F(CorralMcpTest, AWrongKeyLeavesTheAgentWithErrors) {
  McpProcess& mcp = Start("ctk-not-a-session");
  json listed = mcp.Request(1, "tools/list");
  EXPECT_EQ(listed["error"]["code"], -32603);
  EXPECT_NE(listed["error"]["message"].get<std::string>().find("unknown key"), std::string::npos) << listed.dump();
  json call = mcp.Request(2, "tools/call", {{"name", "read_ticket"}, {"arguments", json::object()}});
  EXPECT_EQ(call["result"]["isError"], true);
  EXPECT_NE(call["result"]["content"][0]["text"].get<std::string>().find("unknown key"), std::string::npos);
  EXPECT_TRUE(authority_.WaitForCalls(0).empty());
}

TEST_F(CorralMcpTest, ProtocolErrorsAreAnsweredAndNotificationsNever) {
  McpProcess& mcp = Start();
  json unknown = mcp.Request(1, "resources/list");
  EXPECT_EQ(unknown["id"], 1);
  EXPECT_EQ(unknown["error"]["code"], -32601);
  ASSERT_TRUE(mcp.SendRaw("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\n"));
  json malformed = mcp.Read().value_or(json());
  EXPECT_EQ(malformed["error"]["code"], -32700);
  EXPECT_TRUE(malformed["id"].is_null());
  ASSERT_TRUE(mcp.SendRaw("[{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}]\n"));
  EXPECT_EQ(mcp.Read().value_or(json())["error"]["code"], -32600);
  json bad_params = mcp.Request(4, "tools/call", {{"arguments", json::object()}});
  EXPECT_EQ(bad_params["error"]["code"], -32602);
  // Notifications, known or not, and client responses get nothing: the next line is the ping's.
  ASSERT_TRUE(mcp.Send({{"jsonrpc", "2.0"}, {"method", "notifications/whatever"}}));
  ASSERT_TRUE(mcp.Send({{"jsonrpc", "2.0"}, {"method", "notifications/cancelled"}, {"params", {{"requestId", 9}}}}));
  ASSERT_TRUE(mcp.Send({{"jsonrpc", "2.0"}, {"id", 5}, {"result", json::object()}}));
  EXPECT_EQ(mcp.Request(6, "ping")["id"], 6);
}

TEST_F(CorralMcpTest, ALineOver8MiBIsRefusedAndTheServerGoesOn) {
  McpProcess& mcp = Start();
  const std::string huge =
      json{{"jsonrpc", "2.0"},
           {"id", 1},
           {"method", "tools/call"},
           {"params", {{"name", "read_ticket"}, {"arguments", {{"ticket", std::string(9 << 20, 'x')}}}}}}
          .dump() +
      "\n";
  ASSERT_TRUE(mcp.SendRaw(huge));
  json refused = mcp.Read().value_or(json());
  EXPECT_EQ(refused["error"]["code"], -32700);
  EXPECT_NE(refused["error"]["message"].get<std::string>().find("8 MiB"), std::string::npos);
  EXPECT_EQ(mcp.Request(2, "ping")["id"], 2);
  EXPECT_TRUE(authority_.WaitForCalls(0).empty());
}

TEST_F(CorralMcpTest, ACancelledCallsLateAnswerIsDropped) {
  McpProcess& mcp = Start();
  ASSERT_TRUE(mcp.Send({{"jsonrpc", "2.0"},
                        {"id", 1},
                        {"method", "tools/call"},
                        {"params", {{"name", "read_ticket"}, {"arguments", {{"ticket", "slow"}}}}}}));
  ASSERT_EQ(authority_.WaitForCalls(1).size(), 1u);
  ASSERT_TRUE(mcp.Send({{"jsonrpc", "2.0"}, {"method", "notifications/cancelled"}, {"params", {{"requestId", 1}}}}));
  // Ordering: once the ping is answered, the cancellation has been read.
  EXPECT_EQ(mcp.Request(2, "ping")["id"], 2);
  auto reply = authority_.TakeReply(0);
  OnIo([&] { reply(TextResult("too late")); });
  // The next line is this ping's answer, not the cancelled call's.
  EXPECT_EQ(mcp.Request(3, "ping")["id"], 3);
}

TEST_F(CorralMcpTest, EndOfStdinIsAQuietExit) {
  McpProcess& mcp = Start();
  mcp.CloseStdin();
  EXPECT_EQ(mcp.Wait(), 0);
  EXPECT_FALSE(mcp.Read().has_value());  // and nothing more on stdout
}

TEST_F(CorralMcpTest, AMissingOrMalformedEnvironmentIsExit2) {
  struct Case {
    std::vector<std::string> env;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{}, "CORRAL_TOOL_BRIDGE"},
      {{"CORRAL_TOOL_BRIDGE=" + BridgeAddress()}, "CORRAL_TOOL_KEY"},
      {{"CORRAL_TOOL_KEY=k"}, "CORRAL_TOOL_BRIDGE"},
      {{"CORRAL_TOOL_BRIDGE=localhost:7881", "CORRAL_TOOL_KEY=k"}, "IPv4"},
      {{"CORRAL_TOOL_BRIDGE=127.0.0.1:99999", "CORRAL_TOOL_KEY=k"}, "port"},
      {{"CORRAL_TOOL_BRIDGE=127.0.0.1", "CORRAL_TOOL_KEY=k"}, "127.0.0.1:PORT"},
  };
  for (const Case& c : cases) {
    McpProcess mcp(c.env);
    ASSERT_TRUE(mcp.started());
    EXPECT_EQ(mcp.Wait(), 2) << c.says;
    const std::string err = mcp.Stderr();
    EXPECT_NE(err.find(c.says), std::string::npos) << err;
    EXPECT_FALSE(mcp.Read().has_value());  // nothing on stdout
  }
  // Control: a good environment runs (and stays up until stdin ends).
  McpProcess good({"CORRAL_TOOL_BRIDGE=" + BridgeAddress(), std::string("CORRAL_TOOL_KEY=") + kKey});
  EXPECT_EQ(good.Request(1, "ping")["result"], json::object());
  good.CloseStdin();
  EXPECT_EQ(good.Wait(), 0);
}

}  // namespace
}  // namespace corral::supervisor
