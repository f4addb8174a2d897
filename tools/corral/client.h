// The corral CLI's connection to corrald: HTTP requests (over TCP with a bearer token, or over
// the admin unix socket) and the WebSocket session of one command (exec). Boost.Beast lives in
// client.cc only; nothing here throws.
//
// Errors read the way the CLI prints them after "corral: ":
//   - the daemon refused: "<message> (<code>)", from its {"error": {"code", "message"}} reply
//   - the daemon is not there: "cannot reach corrald at http://127.0.0.1:7878: ECONNREFUSED"
//     (the errno is the Status's error_number)
//   - anything else names the step: "read reply from corrald at ...: end of stream"
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "tools/corral/remote_options.h"

namespace corral::cli {

// Where requests go.
struct Endpoint {
  std::optional<ServerUrl> url;  // TCP; else the unix socket below
  std::string unix_socket;
  std::string token;             // sent as "Authorization: Bearer"; empty: none

  static Endpoint Server(const ServerConfig& config) { return Endpoint{config.url, "", config.token}; }
  static Endpoint Admin(const AdminConfig& config) { return Endpoint{std::nullopt, config.socket_path, ""}; }
  // For messages: the URL, or the socket's path.
  std::string Describe() const { return url ? url->text : unix_socket; }
};

struct HttpReply {
  int status = 0;
  std::string content_type;
  std::string body;  // empty when a BodySink took it
};

// Receives a successful reply's body as it arrives (downloads). An error stops the transfer.
using BodySink = std::function<Status(std::string_view chunk)>;

// One request; `target` is the path and query ("/v1/sandboxes?x=y"), appended to the URL's
// base path. A 2xx reply is returned (its body given to `sink` when there is one); any other
// is an error with the daemon's code and message.
StatusOr<HttpReply> SendRequest(const Endpoint& endpoint, std::string_view method, std::string_view target,
                                std::string body = "", std::string_view content_type = "application/json",
                                const BodySink& sink = nullptr);

// A request whose reply is a JSON object. `body` is sent as JSON unless null.
StatusOr<nlohmann::json> CallJson(const Endpoint& endpoint, std::string_view method, std::string_view target,
                                  const nlohmann::json& body = nullptr);

// True when `status` is the daemon's error with this code ("not_found").
bool IsDaemonError(const Status& status, std::string_view code);

// "<message> (<code>)" from an error reply's body; a body that is not the protocol's error
// object gives "corrald answered HTTP <status>: <start of the body>".
Status DaemonError(int http_status, std::string_view body);

// ---- exec over the WebSocket (/v1/ws, subprotocol corral.v1) ----

struct ExecIo {
  // Forwarded as binary stdin frames when >= 0, and close_stdin sent at its EOF. Regular files
  // and /dev/null (which epoll cannot watch) are read with plain blocking reads.
  int stdin_fd = -1;
  int stdout_fd = 1;
  int stderr_fd = 2;
  // Signals forwarded as `signal` ops while the command runs (those that come before the exec
  // reply wait for it). The third one (the command ignores them, or corrald does not answer)
  // ends the session with an error; the command may go on running.
  std::vector<int> forwarded_signals;
  // With a PTY: SIGWINCH sends a `resize` op with this terminal's size (TIOCGWINSZ).
  int resize_tty_fd = -1;
  // Called once the command has started (the exec reply), e.g. to put the terminal in raw mode.
  std::function<void()> on_started;
};

struct ExecResult {
  std::string command_id;
  nlohmann::json outcome;  // the exit event's outcome object
  // Not empty when corrald refused some of the forwarded stdin (an `error` event): the command
  // got only part of its input (forwarding stopped there and its stdin was closed).
  std::string input_error;
};

// Sends `exec_request` (an exec op without "id"; "output" is forced to binary), streams the
// command's output to the ExecIo's fds until its exit event, and returns the outcome. Errors:
// the daemon's (bad token, no sandbox, exec refused: "<message> (<code>)"), the connection's,
// or a connection lost before the exit event.
StatusOr<ExecResult> RunExec(const ServerConfig& server, const nlohmann::json& exec_request, const ExecIo& io);

}  // namespace corral::cli
