#include "supervisor/sessions/tool_bridge.h"

#include <openssl/rand.h>
#include <openssl/sha.h>

#include <chrono>
#include <cstdlib>
#include <deque>
#include <map>
#include <set>
#include <utility>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include "common/base64.h"
#include "common/log.h"
#include "supervisor/ids.h"
#include "supervisor/loopback_acceptor.h"

namespace corral::supervisor {

namespace asio = boost::asio;
using nlohmann::json;
using tcp = asio::ip::tcp;

namespace {

// Reading stops while this much is waiting to be written (the agent sends faster than it reads
// the answers), and the connection is dropped when answers the agent does not read pile up
// beyond the second bound: a slow reader is paused, then dropped, never buffered without limit.
constexpr size_t kPauseReadingBytes = kToolBridgeMaxLine;
constexpr size_t kMaxQueuedBytes = 8 * kToolBridgeMaxLine;

// Tool output is whatever the client sent; invalid UTF-8 becomes U+FFFD rather than an exception.
std::string Line(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"; }

json ErrorResult(const std::string& text) {
  return {{"content", json::array({{{"type", "text"}, {"text", text}}})}, {"isError", true}};
}

// The session's answer as the protocol carries it: {content: [...], isError: bool}.
json NormalizedResult(json result) {
  if (!result.is_object() || !result.contains("content") || !result["content"].is_array()) {
    return ErrorResult("corral: the tool's answer was malformed (no content array)");
  }
  json out = {{"content", std::move(result["content"])}, {"isError", false}};
  if (auto it = result.find("isError"); it != result.end() && it->is_boolean()) out["isError"] = *it;
  return out;
}

bool DeclaresTool(const json& tools, const std::string& name) {
  if (!tools.is_array()) return false;
  for (const json& tool : tools) {
    if (tool.is_object() && tool.contains("name") && tool["name"] == name) return true;
  }
  return false;
}

}  // namespace

std::string NewToolKey() {
  unsigned char random[32];
  if (RAND_bytes(random, sizeof(random)) != 1) abort();  // no entropy: nothing safe to hand out
  return "ctk-" + Base64UrlEncode({reinterpret_cast<const char*>(random), sizeof(random)});
}

std::string ToolKeyDigest(std::string_view key) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), digest);
  return std::string(reinterpret_cast<const char*>(digest), sizeof(digest));
}

// ---------------------------------------------------------------------------------------------

namespace {
class ToolConnection;
}  // namespace

struct ToolBridge::Impl : std::enable_shared_from_this<Impl> {
  Impl(asio::io_context& io_context, ToolAuthority& the_authority) : io(io_context), authority(the_authority) {}

  struct Sandbox {
    std::set<std::shared_ptr<ToolConnection>> connections;
  };

  void OnAccept(const std::string& sandbox_id, tcp::socket socket);
  void Remove(const std::string& sandbox_id, const std::shared_ptr<ToolConnection>& connection);
  void Close(const std::string& sandbox_id);

  asio::io_context& io;
  ToolAuthority& authority;
  std::map<std::string, Sandbox> sandboxes;
  LoopbackAcceptor acceptor{io, "tools",
                            [this](const std::string& id, tcp::socket socket) { OnAccept(id, std::move(socket)); }};
  uint64_t calls = 0;
};

namespace {

// One corral-mcp: a hello, then calls. Reads are paired ReadLine/OnRead; answers go through a
// write queue. Lives while an operation or the sandbox's set holds it.
class ToolConnection : public std::enable_shared_from_this<ToolConnection> {
 public:
  ToolConnection(std::shared_ptr<ToolBridge::Impl> bridge, std::string sandbox_id, tcp::socket socket)
      : bridge_(std::move(bridge)),
        sandbox_id_(std::move(sandbox_id)),
        socket_(std::move(socket)),
        hello_timer_(bridge_->io) {}

  const std::string& session_id() const { return session_id_; }

  void Start() {
    auto self = shared_from_this();
    hello_timer_.expires_after(std::chrono::seconds(kToolBridgeHelloTimeoutSeconds));
    hello_timer_.async_wait([self](boost::system::error_code ec) {
      if (ec || self->closed_ || self->state_ != State::kHello) return;
      LogWarn("tools", "no hello in time", {{"sandbox", self->sandbox_id_}});
      self->Close();
    });
    ReadLine();
  }

  // Stops everything; later answers from the session are dropped. Idempotent.
  void Close() {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ec;
    socket_.close(ec);
    hello_timer_.cancel();
    pending_.clear();
    // queue_ stays: a write in progress may still refer to its front until its handler runs.
    bridge_->Remove(sandbox_id_, shared_from_this());
  }

  // The session's answer to call `call_id` (or nullopt: it abandoned the call).
  void Deliver(const std::string& call_id, std::optional<json> result) {
    if (closed_) return;
    auto it = pending_.find(call_id);
    if (it == pending_.end()) return;  // answered already
    const json id = std::move(it->second);
    pending_.erase(it);
    Answer(id, result ? NormalizedResult(std::move(*result)) : ErrorResult("corral: the tool call was abandoned"));
  }

 private:
  enum class State { kHello, kReady };

  void ReadLine() {
    // After a refused hello nothing more is read: one key guess per connection.
    if (closed_ || reading_ || close_after_write_) return;
    if (queued_bytes_ >= kPauseReadingBytes) return;  // OnWrite resumes
    reading_ = true;
    auto self = shared_from_this();
    asio::async_read_until(socket_, asio::dynamic_buffer(input_, kToolBridgeMaxLine + 1), '\n',
                           [self](boost::system::error_code ec, size_t n) { self->OnRead(ec, n); });
  }

  void OnRead(boost::system::error_code ec, size_t n) {
    reading_ = false;
    if (closed_) return;
    if (ec == asio::error::not_found) {  // the buffer's limit came before a newline
      LogWarn("tools", "line too long; closing", {{"sandbox", sandbox_id_}});
      Close();
      return;
    }
    if (ec) {
      Close();  // EOF or reset: corral-mcp is gone
      return;
    }
    std::string line = input_.substr(0, n - 1);
    input_.erase(0, n);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) HandleLine(line);
    ReadLine();
  }

  void HandleLine(const std::string& line) {
    json message = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (state_ == State::kHello) {
      HandleHello(message);
      return;
    }
    if (!message.is_object()) {
      Send({{"ok", false}, {"error", "expected a JSON object"}});
      return;
    }
    const json op = message.value("op", json());
    if (op == "call") {
      HandleCall(message);
    } else {
      Send({{"ok", false}, {"error", "unknown op"}});
    }
  }

  void HandleHello(const json& message) {
    std::optional<ToolSessionInfo> session;
    if (message.is_object() && message.value("op", json()) == "hello" && message.contains("key") &&
        message["key"].is_string()) {
      const std::string& key = message["key"].get_ref<const std::string&>();
      if (!key.empty()) session = bridge_->authority.FindToolKey(sandbox_id_, key);
      if (closed_) return;  // the authority forgot the sandbox meanwhile
      if (!session) LogWarn("tools", "unknown key", {{"sandbox", sandbox_id_}});
    }
    if (!session) {
      close_after_write_ = true;
      Send({{"ok", false},
            {"error",
             message.is_object() && message.value("op", json()) == "hello" ? "unknown key" : "expected a hello"}});
      return;
    }
    state_ = State::kReady;
    hello_timer_.cancel();
    session_id_ = session->session_id;
    tools_ = session->tools.is_array() ? std::move(session->tools) : json::array();
    Send({{"ok", true}, {"tools", tools_}});
  }

  void HandleCall(json& message) {
    json id = message.value("id", json());
    if (!id.is_number_integer() && !id.is_string()) {
      Send({{"ok", false}, {"error", "a call needs an id (a number or a string)"}});
      return;
    }
    const json name = message.value("name", json());
    json arguments = message.contains("arguments") ? std::move(message["arguments"]) : json::object();
    if (arguments.is_null()) arguments = json::object();
    if (!name.is_string()) {
      Answer(id, ErrorResult("corral: the call has no tool name"));
      return;
    }
    if (!arguments.is_object()) {
      Answer(id, ErrorResult("corral: the arguments must be a JSON object"));
      return;
    }
    const std::string& tool = name.get_ref<const std::string&>();
    if (!DeclaresTool(tools_, tool)) {
      Answer(id, ErrorResult("corral: no tool \"" + tool + "\" was declared for this session"));
      return;
    }
    if (pending_.size() >= kMaxOutstandingToolCalls) {
      Answer(id, ErrorResult("corral: too many concurrent tool calls (at most " +
                             std::to_string(kMaxOutstandingToolCalls) + ")"));
      return;
    }
    ++bridge_->calls;
    const std::string call_id = NewId("tc");
    pending_.emplace(call_id, std::move(id));
    bridge_->authority.OnToolCall(session_id_, call_id, tool, std::move(arguments), ReplyFor(call_id));
  }

  // Answers at most once: the first call of any copy wins; when the last copy goes without a
  // call, the call is answered as abandoned. Holds the connection weakly: a reply kept by a
  // session does not keep a closed connection alive.
  std::function<void(json)> ReplyFor(const std::string& call_id) {
    struct Once {
      std::weak_ptr<ToolConnection> connection;
      std::string call_id;
      bool done = false;
      ~Once() {
        if (done) return;
        if (auto live = connection.lock()) live->Deliver(call_id, std::nullopt);
      }
    };
    auto once = std::make_shared<Once>();
    once->connection = weak_from_this();
    once->call_id = call_id;
    return [once](json result) {
      if (once->done) return;
      once->done = true;
      if (auto live = once->connection.lock()) live->Deliver(once->call_id, std::move(result));
    };
  }

  // `result` is normalized: {content, isError}.
  void Answer(const json& id, json result) {
    std::string line = Line({{"id", id}, {"content", std::move(result["content"])}, {"isError", result["isError"]}});
    if (line.size() > kToolBridgeMaxLine + 1) {  // corral-mcp would refuse the line
      Answer(id, ErrorResult("corral: the tool's answer is longer than " + std::to_string(kToolBridgeMaxLine >> 20) +
                             " MiB"));
      return;
    }
    Write(std::move(line));
  }

  void Send(const json& message) { Write(Line(message)); }

  void Write(std::string line) {
    if (closed_) return;
    queued_bytes_ += line.size();
    if (queued_bytes_ > kMaxQueuedBytes) {
      LogWarn("tools", "the agent does not read its answers; closing", {{"sandbox", sandbox_id_}});
      Close();
      return;
    }
    queue_.push_back(std::move(line));
    if (queue_.size() == 1) WriteFront();
  }

  void WriteFront() {
    auto self = shared_from_this();
    asio::async_write(socket_, asio::buffer(queue_.front()),
                      [self](boost::system::error_code ec, size_t) { self->OnWrite(ec); });
  }

  void OnWrite(boost::system::error_code ec) {
    if (closed_) return;
    if (ec) {
      Close();
      return;
    }
    queued_bytes_ -= queue_.front().size();
    queue_.pop_front();
    if (!queue_.empty()) {
      WriteFront();
    } else if (close_after_write_) {
      Close();
      return;
    }
    ReadLine();  // if reading was paused for the queue
  }

  std::shared_ptr<ToolBridge::Impl> bridge_;
  const std::string sandbox_id_;
  tcp::socket socket_;
  asio::steady_timer hello_timer_;
  State state_ = State::kHello;
  std::string session_id_;
  json tools_ = json::array();
  std::string input_;
  bool reading_ = false;
  bool closed_ = false;
  bool close_after_write_ = false;
  std::map<std::string, json> pending_;  // the bridge's call id -> corral-mcp's id
  std::deque<std::string> queue_;        // lines to write; the front one is being written
  size_t queued_bytes_ = 0;
};

}  // namespace

// The acceptor calls this between Serve and Forget only: the sandbox has its entry.
void ToolBridge::Impl::OnAccept(const std::string& sandbox_id, tcp::socket socket) {
  Sandbox& sandbox = sandboxes[sandbox_id];
  if (sandbox.connections.size() >= kMaxToolConnectionsPerSandbox) {
    LogWarn("tools", "too many connections; refusing one", {{"sandbox", sandbox_id}});
    return;  // the socket closes
  }
  auto connection = std::make_shared<ToolConnection>(shared_from_this(), sandbox_id, std::move(socket));
  sandbox.connections.insert(connection);
  connection->Start();
}

void ToolBridge::Impl::Remove(const std::string& sandbox_id, const std::shared_ptr<ToolConnection>& connection) {
  if (auto it = sandboxes.find(sandbox_id); it != sandboxes.end()) it->second.connections.erase(connection);
}

void ToolBridge::Impl::Close(const std::string& sandbox_id) {
  auto it = sandboxes.find(sandbox_id);
  if (it == sandboxes.end()) return;
  acceptor.Forget(sandbox_id);
  // Close() removes each connection from the set: iterate over a copy.
  const auto connections = it->second.connections;
  for (const auto& connection : connections) connection->Close();
  sandboxes.erase(sandbox_id);
}

ToolBridge::ToolBridge(asio::io_context& io, ToolAuthority& authority, uint16_t port)
    : port_(port), impl_(std::make_shared<Impl>(io, authority)) {}

ToolBridge::~ToolBridge() {
  std::vector<std::string> ids;
  for (const auto& [id, sandbox] : impl_->sandboxes) ids.push_back(id);
  for (const auto& id : ids) impl_->Close(id);
}

void ToolBridge::Serve(const std::string& sandbox_id, std::vector<UniqueFd> listeners) {
  Forget(sandbox_id);
  if (listeners.empty()) return;
  if (impl_->acceptor.Serve(sandbox_id, std::move(listeners[0]))) impl_->sandboxes[sandbox_id] = Impl::Sandbox{};
}

void ToolBridge::Forget(const std::string& sandbox_id) { impl_->Close(sandbox_id); }

void ToolBridge::DropSession(const std::string& session_id) {
  std::vector<std::shared_ptr<ToolConnection>> doomed;
  for (const auto& [id, sandbox] : impl_->sandboxes) {
    for (const auto& connection : sandbox.connections) {
      if (connection->session_id() == session_id) doomed.push_back(connection);
    }
  }
  for (const auto& connection : doomed) connection->Close();
}

size_t ToolBridge::open_connections() const {
  size_t n = 0;
  for (const auto& [id, sandbox] : impl_->sandboxes) n += sandbox.connections.size();
  return n;
}

uint64_t ToolBridge::calls() const { return impl_->calls; }

}  // namespace corral::supervisor
