// relay_bench: what the model relay adds to a model call.
//
//   relay_bench [RUNS] [OUT_JSON]        (RUNS: 300)
//
// Starts the scripted Messages API server (tests/fixtures/scripted_model.py) on the host's
// loopback and, in this process, the relay as corrald runs it (ModelRelay with a real store for
// the ledger and a placeholder key), on a loopback listener of its own. Then, alternating, a
// streamed Messages request straight to the server and the same through the relay, each on a
// kept-alive connection (as Claude Code keeps its connection to ANTHROPIC_BASE_URL), timed from
// the request to the answer's last byte. The relay's cost per call (key lookup, budget check,
// a new upstream connection, streaming the events through while reading the usage, the ledger
// write) is the difference of the medians. Prints a summary and writes the per-run times.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>
#include <utility>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "supervisor/relay/model_relay.h"

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using nlohmann::json;
using namespace corral::supervisor;

namespace {

constexpr const char* kKey = "bench-placeholder-key";

class Authority : public RelayAuthority {
 public:
  std::optional<RelayClient> FindKey(std::string_view key) override {
    if (key != kKey) return std::nullopt;
    RelayClient client;
    client.session_id = "ses_bench";
    client.sandbox_id = "sb_bench";
    client.iss = "bench";
    client.sub = "bench";
    client.budget.ai_micro_usd = INT64_MAX / 2;
    return client;
  }
  void OnUsage(const RelayClient&, const ModelUsage&, int64_t) override {}
  void OnBudgetExhausted(const RelayClient&) override {}
};

struct Client {
  asio::io_context io;
  beast::tcp_stream stream{io};
  beast::flat_buffer buffer;
  explicit Client(uint16_t port) { stream.connect({asio::ip::address_v4::loopback(), port}); }
  // One streamed request on the kept-alive connection; seconds to the last byte.
  double Call(const std::string& body) {
    http::request<http::string_body> request{http::verb::post, "/v1/messages", 11};
    request.set(http::field::host, "127.0.0.1");
    request.set(http::field::content_type, "application/json");
    request.set("x-api-key", kKey);
    request.keep_alive(true);
    request.body() = body;
    request.prepare_payload();
    auto t0 = std::chrono::steady_clock::now();
    http::write(stream, request);
    http::response<http::string_body> response;
    http::read(stream, buffer, response);
    auto t1 = std::chrono::steady_clock::now();
    if (response.result_int() != 200 || response.body().find("message_stop") == std::string::npos) {
      std::fprintf(stderr, "relay_bench: bad answer %u: %s\n", response.result_int(), response.body().c_str());
      std::exit(1);
    }
    return std::chrono::duration<double>(t1 - t0).count();
  }
};

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 300;
  const std::string out_path = argc > 2 ? argv[2] : "";
  char dir[] = "/tmp/corral-relay-bench-XXXXXX";
  if (mkdtemp(dir) == nullptr) return 1;
  const std::string scenario = std::string(dir) + "/scenario.json";
  std::ofstream(scenario) << json{{"turns", {{{"text", "a short answer of a few words"},
                                                {"usage", {{"input_tokens", 1000}, {"output_tokens", 20}}},
                                                {"repeat", 1000000}}}}}
                                     .dump();
  int out[2];
  if (pipe(out) != 0) return 1;
  pid_t server = fork();
  if (server == 0) {
    dup2(out[1], 1);
    const std::string script = std::string(CORRAL_SOURCE_DIR) + "/tests/fixtures/scripted_model.py";
    execl("/usr/bin/python3", "python3", script.c_str(), "--port", "0", "--scenario", scenario.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  FILE* f = fdopen(out[0], "r");
  int upstream_port = 0;
  char line[64] = {};
  if (f == nullptr || fgets(line, sizeof(line), f) == nullptr || sscanf(line, "LISTENING %d", &upstream_port) != 1) {
    std::fprintf(stderr, "relay_bench: the scripted server did not start\n");
    return 1;
  }

  auto store = Store::Open(std::string(dir) + "/state.db");
  if (!store.ok()) return 1;
  Authority authority;
  asio::io_context io;
  auto work = asio::make_work_guard(io);
  RelayConfig config;
  config.upstream = "http://127.0.0.1:" + std::to_string(upstream_port);
  config.api_key = "bench-upstream-key";
  config.prices.Set("default", {3000000, 15000000, 3750000, 300000});
  auto relay = std::make_unique<ModelRelay>(io, config, **store, authority);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 || listen(fd, 16) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    return 1;
  }
  std::vector<corral::UniqueFd> listeners;
  listeners.emplace_back(fd);
  relay->Serve("sb_bench", std::move(listeners));
  std::thread loop([&] { io.run(); });

  const std::string body = json{{"model", "claude-bench"},
                                {"max_tokens", 100},
                                {"stream", true},
                                {"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                {"tools", {{{"name", "Bash"}, {"input_schema", {{"type", "object"}}}}}}}
                               .dump();
  Client direct(static_cast<uint16_t>(upstream_port));
  Client relayed(ntohs(address.sin_port));
  for (int i = 0; i < 20; ++i) {  // warm-up
    direct.Call(body);
    relayed.Call(body);
  }
  std::vector<double> direct_times, relay_times;
  for (int i = 0; i < runs; ++i) {
    direct_times.push_back(direct.Call(body));
    relay_times.push_back(relayed.Call(body));
  }
  const double d50 = Percentile(direct_times, 0.5) * 1e3, r50 = Percentile(relay_times, 0.5) * 1e3;
  const double d95 = Percentile(direct_times, 0.95) * 1e3, r95 = Percentile(relay_times, 0.95) * 1e3;
  std::printf("streamed Messages call, %d runs each, alternating:\n", runs);
  std::printf("  direct to the scripted server: p50 %.3f ms  p95 %.3f ms\n", d50, d95);
  std::printf("  through the relay:             p50 %.3f ms  p95 %.3f ms\n", r50, r95);
  std::printf("  relay overhead (p50 difference): %.3f ms  (target: under 1 ms)\n", r50 - d50);
  auto spent = (*store)->LedgerSum("bench", "bench", "ai", 0, INT64_MAX);
  std::printf("  ledger rows written: one per relayed call (sum %lld micro-dollars)\n",
              spent.ok() ? static_cast<long long>(*spent) : -1LL);
  if (!out_path.empty()) {
    std::ofstream(out_path) << json{{"runs", runs}, {"direct", direct_times}, {"relay", relay_times},
                                    {"direct_p50_ms", d50}, {"relay_p50_ms", r50}, {"overhead_p50_ms", r50 - d50}}
                                   .dump()
                            << "\n";
  }
  asio::post(io, [&] { relay.reset(); });
  work.reset();
  loop.join();
  kill(server, SIGTERM);
  waitpid(server, nullptr, 0);
  store->reset();
  (void)!system(("rm -rf " + std::string(dir)).c_str());
  return 0;
}
