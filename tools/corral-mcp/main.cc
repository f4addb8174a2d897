// corral-mcp: the MCP server (stdio) through which an agent in a sandbox calls the tools that
// the session's client declared.
//
//   CORRAL_TOOL_BRIDGE=127.0.0.1:7881 CORRAL_TOOL_KEY=ctk-... corral-mcp
//
// Claude Code starts it (--mcp-config) and speaks MCP on its stdin and stdout; corral-mcp passes
// each tool call to the daemon's tool bridge on the sandbox's loopback (supervisor/sessions/tool_bridge.h)
// and the answer back. Diagnostics go to stderr only: stdout carries nothing but MCP messages.
// Exit status: 0 when stdin ends, 2 when the environment is missing or malformed, 1 when stdout
// is gone.
//
// Linked statically: it runs inside sandboxes built from arbitrary images.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/corral-mcp/bridge_client.h"
#include "tools/corral-mcp/line_reader.h"
#include "tools/corral-mcp/mcp_server.h"

namespace {

using corral::mcp::BridgeClient;
using corral::mcp::LineReader;
using corral::mcp::McpServer;
using nlohmann::json;

// One message, one line, written whole (the client reads lines; a short write is continued).
void WriteMessage(const json& message) {
  const std::string line = message.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = write(STDOUT_FILENO, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      fprintf(stderr, "corral-mcp: stdout is gone; exiting\n");
      exit(1);
    }
    done += static_cast<size_t>(n);
  }
}

// What the bridge sent: answers to the server, and the server told if the connection is lost.
void ServeBridge(BridgeClient& bridge, McpServer& server, short revents) {
  if ((revents & POLLOUT) != 0) {
    corral::Status flushed = bridge.Flush();
    if (!flushed.ok()) {
      server.OnBridgeLost(flushed.ToString());
      return;
    }
  }
  if ((revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
    std::vector<json> messages;
    corral::Status received = bridge.Receive(&messages);
    for (const json& message : messages) server.OnBridgeMessage(message);
    if (!received.ok()) server.OnBridgeLost(received.ToString());
  }
}

}  // namespace

int main() {
  signal(SIGPIPE, SIG_IGN);  // a closed stdout or socket is an error to handle, not a death
  const char* bridge_env = getenv("CORRAL_TOOL_BRIDGE");
  const char* key_env = getenv("CORRAL_TOOL_KEY");
  if (bridge_env == nullptr || *bridge_env == '\0' || key_env == nullptr || *key_env == '\0') {
    fprintf(stderr, "corral-mcp: CORRAL_TOOL_BRIDGE (127.0.0.1:PORT) and CORRAL_TOOL_KEY must be set\n");
    return 2;
  }
  auto address = corral::mcp::ParseBridgeAddress(bridge_env);
  if (!address.ok()) {
    fprintf(stderr, "corral-mcp: CORRAL_TOOL_BRIDGE: %s\n", address.status().ToString().c_str());
    return 2;
  }

  BridgeClient bridge(*address, key_env);
  // Opened now, so that tools/list has the list at once; a failure is not fatal: the server
  // still answers, and each call tries again.
  corral::Status opened = bridge.Open(corral::mcp::kBridgeOpenTimeoutMs);
  if (!opened.ok()) fprintf(stderr, "corral-mcp: %s\n", opened.ToString().c_str());
  McpServer server(bridge, WriteMessage, CORRAL_MCP_VERSION);
  LineReader input(corral::mcp::kMaxLine);

  for (;;) {
    struct pollfd fds[2] = {};
    fds[0].fd = STDIN_FILENO;
    fds[0].events = POLLIN;
    fds[1].fd = bridge.connected() ? bridge.fd() : -1;  // poll skips a negative fd
    fds[1].events = static_cast<short>(POLLIN | (bridge.wants_write() ? POLLOUT : 0));
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      perror("corral-mcp: poll");
      return 1;
    }
    // The bridge first: a connection that dropped is then known before the next call needs it.
    if (fds[1].fd >= 0 && fds[1].revents != 0) ServeBridge(bridge, server, fds[1].revents);
    if (fds[0].revents == 0) continue;
    char buffer[64 * 1024];
    const ssize_t n = read(STDIN_FILENO, buffer, sizeof(buffer));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) {
      perror("corral-mcp: read stdin");
      return 1;
    }
    if (n == 0) return 0;  // the client is done
    input.Feed(std::string_view(buffer, static_cast<size_t>(n)));
    std::string line;
    for (LineReader::Next next; (next = input.Take(&line)) != LineReader::Next::kNone;) {
      if (next == LineReader::Next::kTooLong) {
        server.OnOverlongLine();
      } else {
        server.OnLine(line);
      }
    }
  }
}
