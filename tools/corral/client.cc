#include "tools/corral/client.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <deque>
#include <limits>
#include <map>

#include "api/ws_frames.h"

namespace corral::cli {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using unix_stream = net::local::stream_protocol;

constexpr char kUserAgent[] = "corral/0.1.0";
constexpr char kSubprotocol[] = "corral.v1";
// An error reply's body is a small JSON object; more than this is not worth keeping.
constexpr size_t kMaxErrorBody = 64 * 1024;
// Output frames are at most what the daemon reads from a pipe at once; this only stops a
// broken peer from making us allocate without bound.
constexpr size_t kMaxMessageBytes = 64 * 1024 * 1024;
constexpr size_t kStdinChunkBytes = 64 * 1024;
// Stdin is read only while fewer bytes than this wait to be written to the socket.
constexpr size_t kStdinQueueBytes = 1024 * 1024;
constexpr int kInterruptsBeforeGivingUp = 3;

bool IsErrno(const beast::error_code& ec) {
  return ec.category() == boost::system::system_category() ||
         ec.category() == boost::system::generic_category();
}

Status UnreachableError(const Endpoint& endpoint, const beast::error_code& ec) {
  std::string what = endpoint.url ? "cannot reach corrald at " + endpoint.Describe()
                                  : "cannot reach corrald's admin socket " + endpoint.Describe();
  if (!endpoint.url && ec.value() == EACCES && IsErrno(ec)) {
    what += " (for root and the members of daemon.admin_group)";
  }
  if (IsErrno(ec)) return Status::Error(what, ec.value());
  return Status::Error(what + ": " + ec.message());
}

Status StepError(const std::string& step, const Endpoint& endpoint, const beast::error_code& ec) {
  return Status::Error(step + " corrald at " + endpoint.Describe() + ": " + ec.message());
}

// The string at `key`, or "" when absent or not a string (never throws).
std::string StringAt(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) return "";
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

Status ErrorFromObject(const nlohmann::json& error) {
  std::string code = StringAt(error, "code");
  std::string message = StringAt(error, "message");
  if (code.empty()) code = "unknown";
  if (message.empty()) message = code;
  return Status::Error(message + " (" + code + ")");
}

StatusOr<tcp::socket> ConnectTcp(net::io_context& io, const Endpoint& endpoint) {
  beast::error_code ec;
  tcp::resolver resolver(io);
  auto results = resolver.resolve(endpoint.url->host, endpoint.url->port, ec);
  if (ec) return UnreachableError(endpoint, ec);
  tcp::socket socket(io);
  net::connect(socket, results, ec);
  if (ec) return UnreachableError(endpoint, ec);
  socket.set_option(tcp::no_delay(true), ec);
  return socket;
}

StatusOr<unix_stream::socket> ConnectUnix(net::io_context& io, const Endpoint& endpoint) {
  beast::error_code ec;
  unix_stream::socket socket(io);
  socket.connect(unix_stream::endpoint(endpoint.unix_socket), ec);
  if (ec) return UnreachableError(endpoint, ec);
  return socket;
}

template <typename Socket>
StatusOr<HttpReply> Exchange(Socket& socket, const Endpoint& endpoint,
                             const http::request<http::string_body>& request, const BodySink& sink) {
  beast::error_code ec;
  http::write(socket, request, ec);
  if (ec) return StepError("send a request to", endpoint, ec);

  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  http::read_header(socket, buffer, parser, ec);
  if (ec) return StepError("read the reply of", endpoint, ec);
  HttpReply reply;
  reply.status = static_cast<int>(parser.get().result_int());
  reply.content_type = std::string(parser.get()[http::field::content_type]);
  const bool success = reply.status / 100 == 2;
  std::vector<char> chunk(64 * 1024);
  while (!parser.is_done()) {
    parser.get().body().data = chunk.data();
    parser.get().body().size = chunk.size();
    http::read(socket, buffer, parser, ec);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) return StepError("read the reply of", endpoint, ec);
    std::string_view data(chunk.data(), chunk.size() - parser.get().body().size);
    if (success && sink) {
      RETURN_IF_ERROR(sink(data));
    } else if (success || reply.body.size() < kMaxErrorBody) {
      reply.body.append(data);
    }
  }
  if (!success) return DaemonError(reply.status, reply.body);
  return reply;
}

http::request<http::string_body> NewRequest(const Endpoint& endpoint, std::string_view method,
                                            std::string_view target) {
  http::request<http::string_body> request;
  request.method_string(beast::string_view(method.data(), method.size()));
  request.target((endpoint.url ? endpoint.url->base_path : std::string()) + std::string(target));
  request.version(11);
  request.set(http::field::host, endpoint.url ? endpoint.url->HostHeader() : std::string("localhost"));
  request.set(http::field::user_agent, kUserAgent);
  request.keep_alive(false);
  if (!endpoint.token.empty()) request.set(http::field::authorization, "Bearer " + endpoint.token);
  return request;
}

// Connects, sends `request` and reads the reply (see SendRequest). Can throw (allocation).
StatusOr<HttpReply> Send(const Endpoint& endpoint, const http::request<http::string_body>& request,
                         const BodySink& sink) {
  net::io_context io;
  if (endpoint.url) {
    ASSIGN_OR_RETURN(tcp::socket socket, ConnectTcp(io, endpoint));
    return Exchange(socket, endpoint, request, sink);
  }
  ASSIGN_OR_RETURN(unix_stream::socket socket, ConnectUnix(io, endpoint));
  return Exchange(socket, endpoint, request, sink);
}

// Why corrald refused a WebSocket upgrade. Beast 1.74 does not hand back the refusal (the
// response stays empty on upgrade_declined), so the same upgrade request is sent again by hand
// and its reply read as any other: a bad token gets its 401 and error object there.
Status WebSocketRefusal(const Endpoint& endpoint) {
  http::request<http::string_body> request = NewRequest(endpoint, "GET", "/v1/ws");
  request.set(http::field::upgrade, "websocket");
  request.set(http::field::connection, "upgrade");
  request.set(http::field::sec_websocket_key, "Y29ycmFsIHByb2JlIGtleQ==");
  request.set(http::field::sec_websocket_version, "13");
  request.set(http::field::sec_websocket_protocol, kSubprotocol);
  auto reply = Send(endpoint, request, nullptr);
  if (!reply.ok() && reply.status().error_number() == 0) return reply.status();
  return Status::Error("corrald refused the WebSocket upgrade of " + endpoint.url->WebSocketUrl());
}

// The protocol's name for a signal we forward ("INT"), or its number.
nlohmann::json SignalForProtocol(int signo) {
  switch (signo) {
    case SIGINT: return "INT";
    case SIGTERM: return "TERM";
    case SIGHUP: return "HUP";
    case SIGQUIT: return "QUIT";
    case SIGPIPE: return "PIPE";
    case SIGKILL: return "KILL";
    default: return signo;
  }
}

// Writes all of `data`; `fd` may have been made non-blocking by our reading of stdin (a
// terminal's stdin and stdout share one open file description, and with it O_NONBLOCK).
int WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno == EAGAIN) {
      struct pollfd pfd = {fd, POLLOUT, 0};
      poll(&pfd, 1, -1);
    } else if (n < 0 && errno != EINTR) {
      return errno;
    }
  }
  return 0;
}

// One exec: a WebSocket connection, the local stdin and signals, multiplexed on one io_context.
class ExecSession {
 public:
  ExecSession(const ServerConfig& server, const ExecIo& io)
      : endpoint_(Endpoint::Server(server)), io_(io), ws_(context_), stdin_(context_), signals_(context_) {}

  ~ExecSession() {
    // Never close the caller's fd; give it back with the flags it had.
    if (stdin_.is_open()) stdin_.release();
    if (stdin_flags_ >= 0) fcntl(io_.stdin_fd, F_SETFL, stdin_flags_);
  }

  StatusOr<ExecResult> Run(nlohmann::json exec_request) {
    RETURN_IF_ERROR(Connect());
    exec_request["op"] = "exec";
    exec_request["output"] = "binary";
    exec_id_ = SendOp(std::move(exec_request));
    StartSignals();
    DoRead();
    context_.run();
    if (!error_.ok()) return error_;
    if (!result_) return Status::Error("the session with corrald ended without the command's exit");
    return *result_;
  }

 private:
  Status Connect() {
    const ServerUrl& url = *endpoint_.url;
    beast::error_code ec;
    tcp::resolver resolver(context_);
    auto results = resolver.resolve(url.host, url.port, ec);
    if (ec) return UnreachableError(endpoint_, ec);
    beast::get_lowest_layer(ws_).connect(results, ec);
    if (ec) return UnreachableError(endpoint_, ec);
    beast::get_lowest_layer(ws_).socket().set_option(tcp::no_delay(true), ec);
    const std::string token = endpoint_.token;
    ws_.set_option(websocket::stream_base::decorator([token](websocket::request_type& request) {
      request.set(http::field::user_agent, kUserAgent);
      request.set(http::field::sec_websocket_protocol, kSubprotocol);
      if (!token.empty()) request.set(http::field::authorization, "Bearer " + token);
    }));
    ws_.read_message_max(kMaxMessageBytes);
    ws_.auto_fragment(false);  // Our messages are small (stdin chunks, ops): one frame each.
    ws_.handshake(url.HostHeader(), url.base_path + "/v1/ws", ec);
    if (ec == websocket::error::upgrade_declined) return WebSocketRefusal(endpoint_);
    if (ec) return StepError("open a WebSocket to", endpoint_, ec);
    // The WebSocket's own timer covers the closing handshake; the daemon pings an idle client.
    beast::get_lowest_layer(ws_).expires_never();
    auto timeout = websocket::stream_base::timeout::suggested(beast::role_type::client);
    timeout.handshake_timeout = std::chrono::seconds(10);
    ws_.set_option(timeout);
    return Status();
  }

  // ---- the socket ----

  uint64_t SendOp(nlohmann::json op) {
    const uint64_t id = next_id_++;
    op["id"] = id;
    op_names_[id] = StringAt(op, "op");
    Send(false, op.dump());
    return id;
  }

  void Send(bool binary, std::string message) {
    if (finished_) return;
    queued_bytes_ += message.size();
    queue_.emplace_back(binary, std::move(message));
    if (!writing_) DoWrite();
  }

  void DoWrite() {
    writing_ = true;
    ws_.binary(queue_.front().first);
    ws_.async_write(net::buffer(queue_.front().second),
                    [this](beast::error_code ec, size_t) { OnWrite(ec); });
  }

  void OnWrite(beast::error_code ec) {
    writing_ = false;
    queued_bytes_ -= queue_.front().second.size();
    queue_.pop_front();
    if (ec) {
      if (!finished_) Fail(StepError("write to", endpoint_, ec));
      return;
    }
    if (closing_) {
      StartClose();
      return;
    }
    if (!queue_.empty()) DoWrite();
    MaybeReadStdin();
  }

  void DoRead() {
    ws_.async_read(read_buffer_, [this](beast::error_code ec, size_t) { OnRead(ec); });
  }

  void OnRead(beast::error_code ec) {
    if (finished_) return;
    if (ec) {
      std::string why = ec.message();
      if (ec == net::error::eof) why = "corrald closed the connection";
      if (ec == websocket::error::closed) {
        why = "closed by corrald (" + std::to_string(ws_.reason().code) +
              (ws_.reason().reason.empty() ? "" : " " + std::string(ws_.reason().reason.c_str())) + ")";
      }
      Fail(Status::Error("connection to corrald lost before the command ended: " + why +
                         (command_.empty() ? "" : "; " + command_ + " may still be running")));
      return;
    }
    std::string message = beast::buffers_to_string(read_buffer_.data());
    read_buffer_.consume(read_buffer_.size());
    try {
      if (ws_.got_text()) OnText(message);
      else OnBinary(message);
    } catch (const nlohmann::json::exception& e) {
      Fail(Status::Error(std::string("unexpected message from corrald: ") + e.what()));
    }
    if (!finished_) DoRead();
  }

  void OnText(const std::string& text) {
    nlohmann::json message = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!message.is_object()) return;  // Not ours to judge; the protocol only adds fields.
    if (message.contains("event")) {
      const std::string event = StringAt(message, "event");
      if (event == "exit" && StringAt(message, "command") == command_) {
        result_ = ExecResult{command_, message.value("outcome", nlohmann::json::object()), input_error_};
        Complete();
      } else if (event == "error") {
        OnErrorEvent(message);
      }
      return;
    }
    auto id_it = message.find("id");
    if (id_it == message.end() || !id_it->is_number_unsigned()) return;
    const uint64_t id = id_it->get<uint64_t>();
    const bool ok = message.value("ok", false);
    if (id == exec_id_) {
      if (!ok) {
        Fail(ErrorFromObject(message.value("error", nlohmann::json::object())));
        return;
      }
      const nlohmann::json result = message.value("result", nlohmann::json::object());
      command_ = StringAt(result, "command");
      channel_ = result.value("channel", 0u);
      OnStarted();
      return;
    }
    // Replies to signal/resize/close_stdin: only a refused signal is worth a word.
    if (!ok && op_names_[id] == "signal") {
      Status refused = ErrorFromObject(message.value("error", nlohmann::json::object()));
      fprintf(stderr, "corral: signal not delivered: %s\n", refused.message().c_str());
    }
    op_names_.erase(id);
  }

  // corrald refused a binary stdin frame (its input queue for the command was full): that input
  // is lost, and what follows would reach the command with a hole in it. So stop forwarding,
  // close the command's stdin, and let the caller report the loss.
  void OnErrorEvent(const nlohmann::json& message) {
    auto channel = message.find("channel");
    const bool ours = channel == message.end() ||
                      (channel->is_number_unsigned() && channel->get<uint64_t>() == channel_);
    if (!ours) return;
    Status error = ErrorFromObject(message.value("error", nlohmann::json::object()));
    if (!input_error_.empty()) return;
    input_error_ = "corrald dropped input: " + error.message();
    if (stdin_eof_ || !started_) return;
    stdin_eof_ = true;
    beast::error_code ec;
    if (stdin_.is_open()) stdin_.cancel(ec);
    SendOp({{"op", "close_stdin"}, {"command", command_}});
  }

  void OnBinary(const std::string& message) {
    auto frame = api::DecodeFrame(message);
    if (!frame.ok()) {
      Fail(frame.status().WithContext("corrald sent a malformed frame"));
      return;
    }
    if (!started_) {
      early_frames_.push_back(message);  // Events follow replies; this is only a safety net.
      return;
    }
    const api::FrameHeader& header = frame->header;
    if (header.type != api::FrameType::kOutput || header.channel != channel_) return;
    if (header.seq != 0 && header.seq <= last_seq_) return;  // Already written.
    last_seq_ = header.seq;
    if (header.fd == 2) {
      (void)WriteAll(io_.stderr_fd, frame->data);
      return;
    }
    if (stdout_broken_) return;
    if (WriteAll(io_.stdout_fd, frame->data) == EPIPE) {
      // Our reader went away (`| head`): the command gets the SIGPIPE it would get locally.
      stdout_broken_ = true;
      SendOp({{"op", "signal"}, {"command", command_}, {"signal", SignalForProtocol(SIGPIPE)}});
    }
  }

  void OnStarted() {
    started_ = true;
    if (io_.on_started) io_.on_started();
    for (int signo : pending_signals_) ForwardSignal(signo);
    pending_signals_.clear();
    std::vector<std::string> early = std::move(early_frames_);
    for (const auto& message : early) OnBinary(message);
    if (io_.stdin_fd >= 0) {
      stdin_flags_ = fcntl(io_.stdin_fd, F_GETFL);
      beast::error_code ec;
      stdin_.assign(io_.stdin_fd, ec);
      if (ec) {
        fprintf(stderr, "corral: cannot read stdin: %s\n", ec.message().c_str());
        stdin_eof_ = true;
        SendOp({{"op", "close_stdin"}, {"command", command_}});
      }
    }
    MaybeReadStdin();
  }

  // The command ended: say goodbye and let the io_context run dry.
  void Complete() {
    finished_ = true;
    StopLocalSources();
    if (writing_) {
      // Keep the message being written; drop what would follow it.
      queue_.resize(1);
      closing_ = true;
    } else {
      StartClose();
    }
  }

  void StartClose() {
    ws_.async_close(websocket::close_code::normal, [](beast::error_code) {});
  }

  void Fail(Status status) {
    if (finished_) return;
    finished_ = true;
    error_ = std::move(status);
    StopLocalSources();
    beast::get_lowest_layer(ws_).close();
  }

  void StopLocalSources() {
    beast::error_code ec;
    signals_.cancel(ec);
    if (stdin_.is_open()) stdin_.cancel(ec);
  }

  // ---- stdin ----

  void MaybeReadStdin() {
    if (!started_ || finished_ || stdin_eof_ || stdin_reading_ || !stdin_.is_open()) return;
    if (queued_bytes_ >= kStdinQueueBytes) return;  // OnWrite calls again as the queue drains.
    stdin_reading_ = true;
    stdin_buffer_.resize(kStdinChunkBytes);
    stdin_.async_read_some(net::buffer(stdin_buffer_),
                           [this](beast::error_code ec, size_t n) { OnStdin(ec, n); });
  }

  void OnStdin(beast::error_code ec, size_t n) {
    stdin_reading_ = false;
    if (finished_ || ec == net::error::operation_aborted) return;
    if (ec) {
      // EOF, or an error such as EIO from a terminal that hung up: either way no more input.
      if (ec != net::error::eof) fprintf(stderr, "corral: reading stdin: %s\n", ec.message().c_str());
      stdin_eof_ = true;
      SendOp({{"op", "close_stdin"}, {"command", command_}});
      return;
    }
    Send(true, api::EncodeStdinFrame(channel_, std::string_view(stdin_buffer_.data(), n)));
    MaybeReadStdin();
  }

  // ---- signals ----

  void StartSignals() {
    beast::error_code ec;
    for (int signo : io_.forwarded_signals) signals_.add(signo, ec);
    if (io_.resize_tty_fd >= 0) signals_.add(SIGWINCH, ec);
    WaitSignal();
  }

  void WaitSignal() {
    signals_.async_wait([this](beast::error_code ec, int signo) {
      if (ec || finished_) return;
      OnSignal(signo);
      if (!finished_) WaitSignal();  // A third signal ends the session: nothing more to wait for.
    });
  }

  void OnSignal(int signo) {
    if (signo == SIGWINCH) {
      struct winsize size = {};
      if (started_ && ioctl(io_.resize_tty_fd, TIOCGWINSZ, &size) == 0 && size.ws_row > 0 && size.ws_col > 0) {
        SendOp({{"op", "resize"}, {"command", command_}, {"rows", size.ws_row}, {"cols", size.ws_col}});
      }
      return;
    }
    if (++interrupts_ >= kInterruptsBeforeGivingUp) {
      Fail(Status::Error("got " + std::to_string(interrupts_) + " signals; gave up waiting" +
                         (command_.empty() ? "" : " (" + command_ + " may still be running)")));
      return;
    }
    if (!started_) {
      pending_signals_.push_back(signo);
      return;
    }
    ForwardSignal(signo);
  }

  void ForwardSignal(int signo) {
    SendOp({{"op", "signal"}, {"command", command_}, {"signal", SignalForProtocol(signo)}});
  }

  Endpoint endpoint_;
  const ExecIo& io_;
  net::io_context context_;
  websocket::stream<beast::tcp_stream> ws_;
  net::posix::stream_descriptor stdin_;
  net::signal_set signals_;
  beast::flat_buffer read_buffer_;

  std::deque<std::pair<bool, std::string>> queue_;  // (binary, message)
  size_t queued_bytes_ = 0;
  bool writing_ = false;
  bool closing_ = false;
  bool finished_ = false;

  uint64_t next_id_ = 1;
  uint64_t exec_id_ = 0;
  std::map<uint64_t, std::string> op_names_;
  bool started_ = false;
  std::string command_;
  uint32_t channel_ = 0;
  uint64_t last_seq_ = 0;
  std::vector<std::string> early_frames_;
  bool stdout_broken_ = false;

  int stdin_flags_ = -1;
  std::vector<char> stdin_buffer_;
  bool stdin_reading_ = false;
  bool stdin_eof_ = false;

  std::vector<int> pending_signals_;
  int interrupts_ = 0;

  Status error_;
  std::string input_error_;
  std::optional<ExecResult> result_;
};

// SIGPIPE ignored for the scope (stdout's reader may go away; we want EPIPE, not death).
class IgnoreSigpipe {
 public:
  IgnoreSigpipe() {
    struct sigaction ignore = {};
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ignore, &old_);
  }
  ~IgnoreSigpipe() { sigaction(SIGPIPE, &old_, nullptr); }

 private:
  struct sigaction old_ = {};
};

}  // namespace

bool IsDaemonError(const Status& status, std::string_view code) {
  const std::string suffix = " (" + std::string(code) + ")";
  const std::string& message = status.message();
  return !status.ok() && status.error_number() == 0 && message.size() >= suffix.size() &&
         message.compare(message.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Status DaemonError(int http_status, std::string_view body) {
  nlohmann::json parsed = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object() && parsed.contains("error") && parsed["error"].is_object()) {
    return ErrorFromObject(parsed["error"]);
  }
  std::string start(body.substr(0, 200));
  while (!start.empty() && (start.back() == '\n' || start.back() == '\r')) start.pop_back();
  return Status::Error("corrald answered HTTP " + std::to_string(http_status) +
                       (start.empty() ? "" : ": " + start));
}

StatusOr<HttpReply> SendRequest(const Endpoint& endpoint, std::string_view method, std::string_view target,
                                std::string body, std::string_view content_type, const BodySink& sink) {
  try {
    http::request<http::string_body> request = NewRequest(endpoint, method, target);
    if (!body.empty()) {
      request.set(http::field::content_type, beast::string_view(content_type.data(), content_type.size()));
      request.body() = std::move(body);
    }
    request.prepare_payload();
    return Send(endpoint, request, sink);
  } catch (const std::exception& e) {
    return Status::Error(std::string("request to corrald: ") + e.what());
  }
}

StatusOr<nlohmann::json> CallJson(const Endpoint& endpoint, std::string_view method, std::string_view target,
                                  const nlohmann::json& body) {
  std::string text;
  try {
    if (!body.is_null()) text = body.dump();
  } catch (const nlohmann::json::exception& e) {
    return Status::Error(std::string("request body: ") + e.what());  // e.g. not valid UTF-8
  }
  ASSIGN_OR_RETURN(HttpReply reply, SendRequest(endpoint, method, target, std::move(text)));
  nlohmann::json parsed = nlohmann::json::parse(reply.body, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object()) {
    return Status::Error("corrald's reply to " + std::string(method) + " " + std::string(target) +
                         " is not a JSON object");
  }
  return parsed;
}

StatusOr<ExecResult> RunExec(const ServerConfig& server, const nlohmann::json& exec_request, const ExecIo& io) {
  IgnoreSigpipe ignore_sigpipe;
  try {
    ExecSession session(server, io);
    return session.Run(exec_request);
  } catch (const std::exception& e) {
    return Status::Error(std::string("exec session: ") + e.what());
  }
}

}  // namespace corral::cli
