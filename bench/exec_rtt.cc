// exec_rtt: the exec round trip of corrald's WebSocket API, measured by a lean client.
//
//   exec_rtt URL TOKEN SANDBOX RUNS WARMUP OUT_JSON [ARGV...]   (ARGV defaults to `true`)
//
// One connection (Boost.Beast, synchronous, no compression), then WARMUP + RUNS times: send an
// `exec` op, read until its reply and then the command's `exit` event, check that it exited 0.
// Writes the per-run times (seconds) to OUT_JSON: {"times": [...], "reply": [...]}. The Python
// client in daemon_bench.py measures the same thing with its asyncio library's overhead on top;
// this one shows what the daemon and the kernel take. Used by bench/daemon.sh.
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using nlohmann::json;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

[[noreturn]] void Die(const std::string& message) {
  std::cerr << "exec_rtt: " << message << "\n";
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) Die("usage: exec_rtt URL TOKEN SANDBOX RUNS WARMUP OUT_JSON [ARGV...]");
  std::string url = argv[1];
  const std::string token = argv[2];
  const std::string sandbox = argv[3];
  const int runs = std::stoi(argv[4]);
  const int warmup = std::stoi(argv[5]);
  const std::string out_path = argv[6];
  std::vector<std::string> command(argv + 7, argv + argc);
  if (command.empty()) command = {"true"};

  // http://HOST:PORT[/]
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) Die("URL must start with http://");
  std::string host_port = url.substr(scheme.size());
  if (!host_port.empty() && host_port.back() == '/') host_port.pop_back();
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) Die("URL must name a port");
  const std::string host = host_port.substr(0, colon);
  const std::string port = host_port.substr(colon + 1);

  try {
    asio::io_context io;
    asio::ip::tcp::resolver resolver(io);
    websocket::stream<beast::tcp_stream> ws(io);
    asio::connect(beast::get_lowest_layer(ws).socket(), resolver.resolve(host, port));
    beast::get_lowest_layer(ws).socket().set_option(asio::ip::tcp::no_delay(true));
    ws.set_option(websocket::stream_base::decorator([&](websocket::request_type& request) {
      request.set(beast::http::field::authorization, "Bearer " + token);
      request.set(beast::http::field::sec_websocket_protocol, "corral.v1");
    }));
    ws.handshake(host_port, "/v1/ws");

    beast::flat_buffer buffer;
    std::vector<double> times, replies;
    for (int i = 0; i < warmup + runs; ++i) {
      const int id = i + 1;
      const std::string request =
          json{{"id", id}, {"op", "exec"}, {"sandbox", sandbox}, {"argv", command}}.dump();
      const double t0 = Now();
      ws.text(true);
      ws.write(asio::buffer(request));
      std::string command_id;
      double t_reply = 0;
      for (;;) {
        buffer.clear();
        ws.read(buffer);
        if (!ws.got_text()) continue;  // output: the command's bytes
        json message = json::parse(beast::buffers_to_string(buffer.data()));
        if (message.value("id", 0) == id) {
          if (!message.value("ok", false)) Die("exec refused: " + message.dump());
          t_reply = Now();
          command_id = message["result"]["command"].get<std::string>();
        } else if (message.value("event", "") == "exit" && !command_id.empty() &&
                   message.value("command", "") == command_id) {
          const double t1 = Now();
          const json& outcome = message["outcome"];
          if (outcome.value("outcome", "") != "exited" || outcome.value("exit_code", -1) != 0) {
            Die("the command did not exit 0: " + outcome.dump());
          }
          if (i >= warmup) {
            times.push_back(t1 - t0);
            replies.push_back(t_reply - t0);
          }
          break;
        }
      }
    }
    ws.close(websocket::close_code::normal);
    std::ofstream out(out_path);
    out << json{{"runs", runs}, {"warmup", warmup}, {"times", times}, {"reply", replies}}.dump() << "\n";
    if (!out) Die("cannot write " + out_path);
  } catch (const std::exception& e) {
    Die(e.what());
  }
  return 0;
}
