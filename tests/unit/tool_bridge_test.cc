// The tool bridge driven as corral-mcp drives it: newline-delimited JSON over real TCP
// connections to listeners on the host's loopback (in place of a sandbox's), handed to the
// bridge like a sandbox's, with a fake session authority on the bridge's io_context.
#include "supervisor/sessions/tool_bridge.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

namespace corral::supervisor {
namespace {

namespace asio = boost::asio;
using nlohmann::json;

constexpr const char* kKey = "ctk-session-one-key";
constexpr const char* kOtherSandboxKey = "ctk-session-two-key";
constexpr int kTimeoutMs = 10000;

json Tools() {
  return json::array({{{"name", "lookup"},
                       {"description", "Looks a word up"},
                       {"inputSchema", {{"type", "object"}, {"properties", {{"word", {{"type", "string"}}}}}}}},
                      {{"name", "deploy"}, {"description", "Deploys"}, {"inputSchema", {{"type", "object"}}}}});
}

json TextResult(const std::string& text, bool is_error = false) {
  return {{"content", json::array({{{"type", "text"}, {"text", text}}})}, {"isError", is_error}};
}

// Sessions by key digest, as a real authority keeps them. Called on the io thread; the test
// thread reads what it recorded under the mutex.
class FakeAuthority : public ToolAuthority {
 public:
  struct Call {
    std::string session_id;
    std::string call_id;
    std::string name;
    json arguments;
    std::function<void(json)> reply;
  };

  FakeAuthority() {
    sessions_[ToolKeyDigest(kKey)] = {"sb_test", {"ses_1", Tools()}};
    sessions_[ToolKeyDigest(kOtherSandboxKey)] = {"sb_other", {"ses_2", json::array({{{"name", "other"}}})}};
  }

  std::optional<ToolSessionInfo> FindToolKey(std::string_view sandbox_id, std::string_view key) override {
    std::lock_guard lock(mutex_);
    ++lookups_;
    auto it = sessions_.find(ToolKeyDigest(key));
    if (it == sessions_.end() || it->second.first != sandbox_id) return std::nullopt;
    return it->second.second;
  }

  void OnToolCall(const std::string& session_id, const std::string& call_id, const std::string& name, json arguments,
                  std::function<void(json)> reply) override {
    std::lock_guard lock(mutex_);
    calls_.push_back({session_id, call_id, name, std::move(arguments), std::move(reply)});
    changed_.notify_all();
  }

  // Waits until `n` calls have come; a copy of what they carried (replies excluded).
  std::vector<Call> WaitForCalls(size_t n) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, std::chrono::milliseconds(kTimeoutMs), [&] { return calls_.size() >= n; });
    std::vector<Call> out;
    for (const Call& call : calls_) out.push_back({call.session_id, call.call_id, call.name, call.arguments, nullptr});
    return out;
  }

  // Takes call i's reply (the test calls or drops it on the io thread).
  std::function<void(json)> TakeReply(size_t i) {
    std::lock_guard lock(mutex_);
    return std::move(calls_.at(i).reply);
  }

  size_t calls() {
    std::lock_guard lock(mutex_);
    return calls_.size();
  }
  int lookups() {
    std::lock_guard lock(mutex_);
    return lookups_;
  }
  void Clear() {
    std::lock_guard lock(mutex_);
    calls_.clear();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::pair<std::string, ToolSessionInfo>> sessions_;  // digest -> sandbox, session
  std::vector<Call> calls_;
  int lookups_ = 0;
};

// A listening socket on 127.0.0.1 (an ephemeral port), as a sandbox's init would hold it.
UniqueFd Listen(uint16_t* port) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  struct sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (!fd || bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 || listen(fd.get(), 64) != 0) {
    return UniqueFd();
  }
  socklen_t length = sizeof(address);
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length);
  *port = ntohs(address.sin_port);
  return fd;
}

// corral-mcp's side of a connection, blocking, each read bounded by kTimeoutMs.
class Client {
 public:
  explicit Client(uint16_t port) {
    fd_.reset(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    struct sockaddr_in address = {};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(port);
    connected_ = connect(fd_.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
    const int one = 1;  // as corral-mcp: each line goes out at once
    setsockopt(fd_.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  bool connected() const { return connected_; }

  bool SendRaw(const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = send(fd_.get(), bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }
  bool Send(const json& message) { return SendRaw(message.dump() + "\n"); }

  // The next line as JSON; nullopt at EOF (or after kTimeoutMs, which fails the test).
  std::optional<json> Read() {
    for (;;) {
      size_t newline = buffer_.find('\n');
      if (newline != std::string::npos) {
        std::string line = buffer_.substr(0, newline);
        buffer_.erase(0, newline + 1);
        return json::parse(line);
      }
      struct pollfd p = {fd_.get(), POLLIN, 0};
      if (poll(&p, 1, kTimeoutMs) != 1) {
        ADD_FAILURE() << "no line from the bridge within " << kTimeoutMs << " ms";
        return std::nullopt;
      }
      char chunk[4096];
      ssize_t n = recv(fd_.get(), chunk, sizeof(chunk), 0);
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  // True when the bridge closed the connection (EOF or reset) within kTimeoutMs.
  bool ClosedByPeer() {
    struct pollfd p = {fd_.get(), POLLIN, 0};
    if (poll(&p, 1, kTimeoutMs) != 1) return false;
    char byte;
    return recv(fd_.get(), &byte, 1, 0) <= 0;
  }

  void Close() { fd_.reset(); }

 private:
  UniqueFd fd_;
  bool connected_ = false;
  std::string buffer_;
};

class ToolBridgeTest : public ::testing::Test {
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
    UniqueFd listener = Listen(&port_);
    UniqueFd other = Listen(&other_port_);
    ASSERT_TRUE(listener.valid() && other.valid());
    std::vector<UniqueFd> listeners;
    listeners.push_back(std::move(listener));
    bridge_->Serve("sb_test", std::move(listeners));
    std::vector<UniqueFd> other_listeners;
    other_listeners.push_back(std::move(other));
    bridge_->Serve("sb_other", std::move(other_listeners));
    loop_ = std::thread([this] { io_.run(); });
  }

  void TearDown() override {
    // The bridge goes first; replies never called go after their connections.
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

  // A connection that said hello with `key`: the bridge's answer.
  json Hello(Client& client, const std::string& key) {
    EXPECT_TRUE(client.connected());
    EXPECT_TRUE(client.Send({{"op", "hello"}, {"key", key}}));
    return client.Read().value_or(json());
  }

  // Waits (by polling the bridge's count on its own thread) until it holds `n` connections.
  bool WaitForConnections(size_t n) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kTimeoutMs);
    while (std::chrono::steady_clock::now() < deadline) {
      if (OnIo([this] { return bridge_->open_connections(); }) == n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  FakeAuthority authority_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_ = asio::make_work_guard(io_);
  std::thread loop_;
  std::unique_ptr<ToolBridge> bridge_;
  uint16_t port_ = 0;
  uint16_t other_port_ = 0;
};

TEST_F(ToolBridgeTest, KeysAreDigestsAndFreshKeysDiffer) {
  const std::string a = NewToolKey();
  const std::string b = NewToolKey();
  EXPECT_EQ(a.substr(0, 4), "ctk-");
  EXPECT_EQ(a.size(), 4u + 43u);
  EXPECT_NE(a, b);
  EXPECT_EQ(ToolKeyDigest(a).size(), 32u);
  EXPECT_EQ(ToolKeyDigest(a), ToolKeyDigest(a));
  EXPECT_NE(ToolKeyDigest(a), ToolKeyDigest(b));
  EXPECT_EQ(OnIo([this] { return bridge_->Ports(); }), std::vector<uint16_t>{7881});
}

TEST_F(ToolBridgeTest, AHelloWithTheSessionsKeyGetsItsTools) {
  Client client(port_);
  json answer = Hello(client, kKey);
  EXPECT_EQ(answer["ok"], true);
  EXPECT_EQ(answer["tools"], Tools());
  EXPECT_EQ(OnIo([this] { return bridge_->open_connections(); }), 1u);
}

TEST_F(ToolBridgeTest, AnUnknownKeyIsRefusedAndTheConnectionClosed) {
  Client client(port_);
  json answer = Hello(client, "ctk-guessed");
  EXPECT_EQ(answer["ok"], false);
  EXPECT_EQ(answer["error"], "unknown key");
  EXPECT_FALSE(answer.contains("tools"));
  EXPECT_TRUE(client.ClosedByPeer());
  // Positive control: the same listener takes the session's key.
  Client good(port_);
  EXPECT_EQ(Hello(good, kKey)["ok"], true);
}

TEST_F(ToolBridgeTest, OneConnectionGetsOneKeyGuess) {
  Client client(port_);
  // A wrong key and the right one in one write: the second is never read.
  ASSERT_TRUE(client.SendRaw(json{{"op", "hello"}, {"key", "ctk-wrong"}}.dump() + "\n" +
                             json{{"op", "hello"}, {"key", kKey}}.dump() + "\n"));
  json answer = client.Read().value_or(json());
  EXPECT_EQ(answer["ok"], false);
  EXPECT_TRUE(client.ClosedByPeer());
  EXPECT_EQ(authority_.lookups(), 1);
}

TEST_F(ToolBridgeTest, AKeyOfAnotherSandboxsSessionIsRefused) {
  Client client(port_);
  json answer = Hello(client, kOtherSandboxKey);
  EXPECT_EQ(answer["ok"], false);
  EXPECT_EQ(answer["error"], "unknown key");
  EXPECT_TRUE(client.ClosedByPeer());
  // Positive control: on its own sandbox's listener the key is good.
  Client own(other_port_);
  json own_answer = Hello(own, kOtherSandboxKey);
  EXPECT_EQ(own_answer["ok"], true);
  EXPECT_EQ(own_answer["tools"][0]["name"], "other");
}

TEST_F(ToolBridgeTest, SomethingOtherThanAHelloFirstIsRefused) {
  Client client(port_);
  ASSERT_TRUE(client.Send({{"op", "call"}, {"id", 1}, {"name", "lookup"}, {"arguments", json::object()}}));
  json answer = client.Read().value_or(json());
  EXPECT_EQ(answer["ok"], false);
  EXPECT_EQ(answer["error"], "expected a hello");
  EXPECT_TRUE(client.ClosedByPeer());
  EXPECT_EQ(authority_.calls(), 0u);
}

TEST_F(ToolBridgeTest, CallsReachTheSessionAndAnswersComeBackInTheirOwnOrder) {
  Client client(port_);
  ASSERT_EQ(Hello(client, kKey)["ok"], true);
  ASSERT_TRUE(client.Send({{"op", "call"}, {"id", 1}, {"name", "lookup"}, {"arguments", {{"word", "first"}}}}));
  ASSERT_TRUE(client.Send({{"op", "call"}, {"id", 2}, {"name", "deploy"}}));  // no arguments: {}
  auto calls = authority_.WaitForCalls(2);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].session_id, "ses_1");
  EXPECT_EQ(calls[0].name, "lookup");
  EXPECT_EQ(calls[0].arguments, json({{"word", "first"}}));
  EXPECT_EQ(calls[1].name, "deploy");
  EXPECT_EQ(calls[1].arguments, json::object());
  // The session sees the bridge's own ids, not the agent's.
  EXPECT_EQ(calls[0].call_id.substr(0, 3), "tc_");
  EXPECT_NE(calls[0].call_id, calls[1].call_id);
  auto first = authority_.TakeReply(0);
  auto second = authority_.TakeReply(1);
  OnIo([&] { second(TextResult("deployed", true)); });
  OnIo([&] { first(TextResult("a word")); });
  json answer = client.Read().value_or(json());
  EXPECT_EQ(answer, json({{"id", 2}, {"content", TextResult("deployed")["content"]}, {"isError", true}}));
  answer = client.Read().value_or(json());
  EXPECT_EQ(answer, json({{"id", 1}, {"content", TextResult("a word")["content"]}, {"isError", false}}));
  EXPECT_EQ(OnIo([this] { return bridge_->calls(); }), 2u);
  // A second call of a reply is ignored: nothing more comes, the next answer is the next call's.
  OnIo([&] { first(TextResult("again")); });
  ASSERT_TRUE(client.Send({{"op", "call"}, {"id", "three"}, {"name", "lookup"}, {"arguments", {{"word", "x"}}}}));
  authority_.WaitForCalls(3);
  auto third = authority_.TakeReply(2);
  OnIo([&] { third(TextResult("x")); });
  EXPECT_EQ(client.Read().value_or(json())["id"], "three");
}

TEST_F(ToolBridgeTest, TheBridgeAnswersWhatNeverReachesTheSession) {
  Client client(port_);
  ASSERT_EQ(Hello(client, kKey)["ok"], true);
  // A tool the session did not declare (another session's, here).
  ASSERT_TRUE(client.Send({{"op", "call"}, {"id", 7}, {"name", "other"}, {"arguments", json::object()}}));
  json answer = client.Read().value_or(json());
  EXPECT_EQ(answer["id"], 7);
  EXPECT_EQ(answer["isError"], true);
  EXPECT_NE(answer["content"][0]["text"].get<std::string>().find("no tool \"other\""), std::string::npos);
  // Arguments that are not an object.
  ASSERT_TRUE(client.Send({{"op", "call"}, {"id", 8}, {"name", "lookup"}, {"arguments", json::array()}}));
  answer = client.Read().value_or(json());
  EXPECT_EQ(answer["id"], 8);
  EXPECT_EQ(answer["isError"], true);
  // No usable id: a protocol error, and the connection stays.
  ASSERT_TRUE(client.Send({{"op", "call"}, {"name", "lookup"}}));
  answer = client.Read().value_or(json());
  EXPECT_EQ(answer["ok"], false);
  ASSERT_TRUE(client.Send({{"op", "dance"}}));
  EXPECT_EQ(client.Read().value_or(json())["error"], "unknown op");
  ASSERT_TRUE(client.SendRaw("not json\n"));
  EXPECT_EQ(client.Read().value_or(json())["ok"], false);
  EXPECT_EQ(authority_.calls(), 0u);
  // Positive control: a good call on the same connection still reaches the session.
  ASSERT_TRUE(client.Send({{"op", "call"}, {"id", 9}, {"name", "lookup"}, {"arguments", json::object()}}));
  EXPECT_EQ(authority_.WaitForCalls(1).size(), 1u);
}

TEST_F(ToolBridgeTest, MalformedAndAbandonedAnswersBecomeErrors) {
  Client client(port_);
  ASSERT_EQ(Hello(client, kKey)["ok"], true);
  ASSERT_TRUE(client.Send({{"op", "call"}, {"id", 1}, {"name", "lookup"}, {"arguments", json::object()}}));
  ASSERT_TRUE(client.Send({{"op", "call"}, {"id", 2}, {"name", "lookup"}, {"arguments", json::object()}}));
  ASSERT_EQ(authority_.WaitForCalls(2).size(), 2u);
  auto first = authority_.TakeReply(0);
  OnIo([&] { first(json{{"text", "no content array"}}); });
  json answer = client.Read().value_or(json());
  EXPECT_EQ(answer["id"], 1);
  EXPECT_EQ(answer["isError"], true);
  EXPECT_NE(answer["content"][0]["text"].get<std::string>().find("malformed"), std::string::npos);
  // The session drops the second call's reply without calling it.
  OnIo([&] { auto dropped = authority_.TakeReply(1); });
  answer = client.Read().value_or(json());
  EXPECT_EQ(answer["id"], 2);
  EXPECT_EQ(answer["isError"], true);
  EXPECT_NE(answer["content"][0]["text"].get<std::string>().find("abandoned"), std::string::npos);
}

TEST_F(ToolBridgeTest, AtMost64CallsAreOutstandingPerConnection) {
  Client client(port_);
  ASSERT_EQ(Hello(client, kKey)["ok"], true);
  std::string burst;
  for (int i = 1; i <= 65; ++i) {
    burst += json{{"op", "call"}, {"id", i}, {"name", "lookup"}, {"arguments", json::object()}}.dump() + "\n";
  }
  ASSERT_TRUE(client.SendRaw(burst));
  json answer = client.Read().value_or(json());
  EXPECT_EQ(answer["id"], 65);
  EXPECT_EQ(answer["isError"], true);
  EXPECT_NE(answer["content"][0]["text"].get<std::string>().find("too many concurrent tool calls"), std::string::npos);
  EXPECT_EQ(authority_.calls(), 64u);
  // One answered: room for one more.
  auto reply = authority_.TakeReply(0);
  OnIo([&] { reply(TextResult("done")); });
  EXPECT_EQ(client.Read().value_or(json())["id"], 1);
  ASSERT_TRUE(client.Send({{"op", "call"}, {"id", 66}, {"name", "lookup"}, {"arguments", json::object()}}));
  EXPECT_EQ(authority_.WaitForCalls(65).size(), 65u);
}

TEST_F(ToolBridgeTest, ALineOver8MiBClosesTheConnection) {
  Client client(port_);
  ASSERT_EQ(Hello(client, kKey)["ok"], true);
  const std::string huge = json{{"op", "call"},
                                {"id", 1},
                                {"name", "lookup"},
                                {"arguments", {{"word", std::string(kToolBridgeMaxLine, 'a')}}}}
                               .dump() +
                           "\n";
  client.SendRaw(huge);  // may fail part way once the bridge closes
  EXPECT_TRUE(client.ClosedByPeer());
  EXPECT_EQ(authority_.calls(), 0u);
}

TEST_F(ToolBridgeTest, ForgetClosesTheSandboxsConnectionsAndListener) {
  Client client(port_);
  ASSERT_EQ(Hello(client, kKey)["ok"], true);
  Client other(other_port_);
  ASSERT_EQ(Hello(other, kOtherSandboxKey)["ok"], true);
  ASSERT_EQ(OnIo([this] { return bridge_->open_connections(); }), 2u);
  OnIo([this] { bridge_->Forget("sb_test"); });
  EXPECT_TRUE(client.ClosedByPeer());
  EXPECT_EQ(OnIo([this] { return bridge_->open_connections(); }), 1u);
  EXPECT_FALSE(Client(port_).connected());  // the listener is closed
  // The other sandbox is untouched.
  ASSERT_TRUE(other.Send({{"op", "call"}, {"id", 1}, {"name", "other"}, {"arguments", json::object()}}));
  EXPECT_EQ(authority_.WaitForCalls(1).size(), 1u);
}

TEST_F(ToolBridgeTest, DropSessionClosesThatSessionsConnectionsOnly) {
  Client client(port_);
  ASSERT_EQ(Hello(client, kKey)["ok"], true);
  Client other(other_port_);
  ASSERT_EQ(Hello(other, kOtherSandboxKey)["ok"], true);
  OnIo([this] { bridge_->DropSession("ses_1"); });
  EXPECT_TRUE(client.ClosedByPeer());
  EXPECT_EQ(OnIo([this] { return bridge_->open_connections(); }), 1u);
  // The listener stays: corral-mcp can come back (with a key that is still good).
  Client again(port_);
  EXPECT_EQ(Hello(again, kKey)["ok"], true);
}

TEST_F(ToolBridgeTest, ALateReplyAfterTheConnectionClosedIsDropped) {
  {
    Client client(port_);
    ASSERT_EQ(Hello(client, kKey)["ok"], true);
    ASSERT_TRUE(client.Send({{"op", "call"}, {"id", 1}, {"name", "lookup"}, {"arguments", json::object()}}));
    ASSERT_TRUE(client.Send({{"op", "call"}, {"id", 2}, {"name", "lookup"}, {"arguments", json::object()}}));
    ASSERT_EQ(authority_.WaitForCalls(2).size(), 2u);
    client.Close();
  }
  ASSERT_TRUE(WaitForConnections(0));
  auto late = authority_.TakeReply(0);
  OnIo([&] { late(TextResult("too late")); });
  OnIo([&] { auto dropped = authority_.TakeReply(1); });  // and one abandoned after the close
  // The bridge is fine: a new connection works end to end.
  Client client(port_);
  ASSERT_EQ(Hello(client, kKey)["ok"], true);
  ASSERT_TRUE(client.Send({{"op", "call"}, {"id", 1}, {"name", "lookup"}, {"arguments", json::object()}}));
  ASSERT_EQ(authority_.WaitForCalls(3).size(), 3u);
  auto reply = authority_.TakeReply(2);
  OnIo([&] { reply(TextResult("fresh")); });
  json answer = client.Read().value_or(json());
  EXPECT_EQ(answer["id"], 1);
  EXPECT_EQ(answer["content"][0]["text"], "fresh");
}

TEST_F(ToolBridgeTest, ConnectionsPerSandboxAreCapped) {
  std::vector<std::unique_ptr<Client>> clients;
  for (size_t i = 0; i < kMaxToolConnectionsPerSandbox; ++i) {
    clients.push_back(std::make_unique<Client>(port_));
    ASSERT_EQ(Hello(*clients.back(), kKey)["ok"], true);
  }
  Client one_more(port_);
  EXPECT_TRUE(one_more.ClosedByPeer());
  // The other sandbox has its own allowance.
  Client other(other_port_);
  EXPECT_EQ(Hello(other, kOtherSandboxKey)["ok"], true);
}

}  // namespace
}  // namespace corral::supervisor
