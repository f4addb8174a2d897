// The model relay between a sandbox's loopback and the upstream, driven as the agent would:
// HTTP requests on a listener handed to the relay (here one on the host's loopback, in place of
// a sandbox's), against the scripted Messages API server (tests/fixtures/scripted_model.py) as
// the upstream, with a real store for the ledger.
#include "supervisor/relay/model_relay.h"

#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <utility>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/testing/temp_dir.h"
#include "tests/unit/store_test_util.h"

namespace corral::supervisor {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using nlohmann::json;

constexpr const char* kRealKey = "sk-ant-operator-REAL-key-0123456789";
constexpr const char* kKey = "corral-session-placeholder-1";
constexpr const char* kOtherSandboxKey = "corral-session-placeholder-2";
constexpr const char* kModel = "claude-test-1";

class FakeAuthority : public RelayAuthority {
 public:
  std::optional<RelayClient> FindKey(std::string_view key) override {
    RelayClient client;
    client.iss = "corp";
    client.sub = "alice";
    client.budget = budget;
    if (key == kKey) {
      client.session_id = "ses_1";
      client.sandbox_id = "sb_test";
      return client;
    }
    if (key == kOtherSandboxKey) {
      client.session_id = "ses_2";
      client.sandbox_id = "sb_other";
      return client;
    }
    return std::nullopt;
  }
  void OnUsage(const RelayClient&, const ModelUsage& usage, int64_t cost) override {
    usages.push_back(usage);
    costs.push_back(cost);
  }
  void OnBudgetExhausted(const RelayClient& client) override { exhausted.push_back(client.session_id); }

  Budget budget;
  std::vector<ModelUsage> usages;
  std::vector<int64_t> costs;
  std::vector<std::string> exhausted;
};

// What the relay reports for metrics. Called on the relay's thread, read on the test's: a
// request's result is reported once its answer is written, which may be just after the agent
// has read it, so tests wait for it (Eventually).
class FakeObserver : public RelayObserver {
 public:
  void OnModelRequest(RelayResult result) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++results_[result];
  }
  void OnModelUsage(const std::string& price_key, const ModelUsage& usage, int64_t cost) override {
    std::lock_guard<std::mutex> lock(mu_);
    usages_.push_back({price_key, usage, cost});
  }
  void OnUpstreamLatency(double seconds) override {
    std::lock_guard<std::mutex> lock(mu_);
    latencies_.push_back(seconds);
  }
  void OnBudgetRefusal(BudgetRefusal kind) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++refusals_[kind];
  }

  int Results(RelayResult result) {
    std::lock_guard<std::mutex> lock(mu_);
    return results_[result];
  }
  int TotalResults() {
    std::lock_guard<std::mutex> lock(mu_);
    int n = 0;
    for (const auto& [result, count] : results_) n += count;
    return n;
  }
  int Refusals(BudgetRefusal kind) {
    std::lock_guard<std::mutex> lock(mu_);
    return refusals_[kind];
  }
  struct Usage {
    std::string price_key;
    ModelUsage usage;
    int64_t cost = 0;
  };
  std::vector<Usage> Usages() {
    std::lock_guard<std::mutex> lock(mu_);
    return usages_;
  }
  std::vector<double> Latencies() {
    std::lock_guard<std::mutex> lock(mu_);
    return latencies_;
  }

 private:
  std::mutex mu_;
  std::map<RelayResult, int> results_;
  std::map<BudgetRefusal, int> refusals_;
  std::vector<Usage> usages_;
  std::vector<double> latencies_;
};

// True once `condition` holds (within 5 s).
template <typename F>
bool Eventually(F condition) {
  for (int i = 0; i < 500; ++i) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return condition();
}

// The scripted upstream, as a child process.
class ScriptedUpstream {
 public:
  ScriptedUpstream(const std::string& dir, const json& scenario, const std::string& tls_cert = "",
                   const std::string& tls_key = "", int port = 0)
      : log_(dir + "/upstream.jsonl") {
    const std::string port_text = std::to_string(port);
    const std::string scenario_path = dir + "/scenario.json";
    std::ofstream(scenario_path) << scenario.dump();
    int out[2];
    if (pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      close(out[0]);
      const std::string script = std::string(CORRAL_SOURCE_DIR) + "/tests/fixtures/scripted_model.py";
      if (tls_cert.empty()) {
        execl("/usr/bin/python3", "python3", script.c_str(), "--port", port_text.c_str(), "--scenario",
              scenario_path.c_str(), "--log", log_.c_str(), static_cast<char*>(nullptr));
      } else {
        execl("/usr/bin/python3", "python3", script.c_str(), "--port", port_text.c_str(), "--scenario",
              scenario_path.c_str(), "--log", log_.c_str(), "--tls", tls_cert.c_str(), tls_key.c_str(),
              static_cast<char*>(nullptr));
      }
      _exit(127);
    }
    close(out[1]);
    FILE* f = fdopen(out[0], "r");
    char line[128] = {};
    if (f != nullptr && fgets(line, sizeof(line), f) != nullptr) sscanf(line, "LISTENING %d", &port_);
    if (f != nullptr) fclose(f);
  }
  ~ScriptedUpstream() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }
  int port() const { return port_; }
  std::vector<json> Requests() const {
    std::vector<json> out;
    std::ifstream in(log_);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) out.push_back(json::parse(line));
    }
    return out;
  }
  std::string RawLog() const {
    std::ifstream in(log_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  std::string log_;
  pid_t pid_ = -1;
  int port_ = 0;
};

json Turn(const std::string& text, int input, int output, int cache_write = 0, int cache_read = 0) {
  return {{"text", text},
          {"usage",
           {{"input_tokens", input},
            {"output_tokens", output},
            {"cache_creation_input_tokens", cache_write},
            {"cache_read_input_tokens", cache_read}}}};
}

json MessagesBody(bool stream, const std::string& model = kModel) {
  return {{"model", model},
          {"max_tokens", 1000},
          {"stream", stream},
          {"messages", {{{"role", "user"}, {"content", "hello"}}}},
          {"tools", {{{"name", "Bash"}, {"description", "run"}, {"input_schema", {{"type", "object"}}}}}}};
}

class ModelRelayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = Store::Open(dir_ + "/state.db");
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    authority_.budget.ai_micro_usd = 1000000;  // USD 1 a day
    authority_.budget.window = BudgetWindow::kDay;
  }

  void TearDown() override {
    if (relay_) {
      asio::post(io_, [this] { relay_.reset(); });
    }
    work_.reset();
    if (loop_.joinable()) loop_.join();
    store_.reset();
  }

  // A self-signed certificate for `name` (openssl): its files are dir_/<file>.pem, key.pem.
  std::string Certificate(const std::string& file, const std::string& name) {
    const std::string cert = dir_ + "/" + file + ".pem";
    const std::string key = dir_ + "/" + file + "-key.pem";
    const std::string command = "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=" +
                                name + " -addext subjectAltName=DNS:" + name + " -keyout " + key + " -out " + cert +
                                " >/dev/null 2>&1";
    EXPECT_EQ(system(command.c_str()), 0) << command;
    return cert;
  }

  // The relay with the scripted upstream (scenario), served on a host loopback listener. With
  // `tls_name`, the upstream speaks HTTPS with a certificate for that name, and the relay calls
  // https://localhost:PORT trusting `ca_file`.
  void Start(const json& scenario, const std::string& tls_name = "", const std::string& ca_file = "") {
    std::string cert;
    if (!tls_name.empty()) cert = Certificate("upstream", tls_name);
    upstream_ = std::make_unique<ScriptedUpstream>(dir_, scenario, cert, tls_name.empty() ? "" : dir_ + "/upstream-key.pem");
    ASSERT_GT(upstream_->port(), 0) << "the scripted upstream did not start";
    RelayConfig config;
    config.upstream = tls_name.empty() ? "http://127.0.0.1:" + std::to_string(upstream_->port())
                                       : "https://localhost:" + std::to_string(upstream_->port());
    config.ca_file = ca_file == "self" ? cert : ca_file;
    config.api_key = kRealKey;
    config.prices.Set(kModel, {3000000, 15000000, 3750000, 300000});
    config.timeout_s = 30;
    config.requests_per_minute = requests_per_minute_;
    config.max_call_s = max_call_s_;
    relay_ = std::make_unique<ModelRelay>(io_, config, *store_, authority_);
    relay_->SetObserver(&observer_);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in address = {};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    ASSERT_EQ(listen(fd, 16), 0);
    socklen_t length = sizeof(address);
    ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
    port_ = ntohs(address.sin_port);
    std::vector<UniqueFd> listeners;
    listeners.emplace_back(fd);
    relay_->Serve("sb_test", std::move(listeners));
    loop_ = std::thread([this] { io_.run(); });
  }

  struct Answer {
    int status = 0;
    std::string body;
    std::string content_type;
  };

  // One request as the agent sends it; `key` goes in x-api-key.
  Answer Post(const std::string& target, const json& body, const std::string& key = kKey,
              http::verb verb = http::verb::post) {
    asio::io_context io;
    beast::tcp_stream stream(io);
    stream.connect(asio::ip::tcp::endpoint(asio::ip::address_v4::loopback(), port_));
    http::request<http::string_body> request{verb, target, 11};
    request.set(http::field::host, "127.0.0.1");
    request.set(http::field::content_type, "application/json");
    request.set("anthropic-version", "2023-06-01");
    if (!key.empty()) request.set("x-api-key", key);
    request.body() = body.dump();
    request.prepare_payload();
    http::write(stream, request);
    beast::flat_buffer buffer;
    http::response<http::string_body> response;
    http::read(stream, buffer, response);
    return {static_cast<int>(response.result_int()), response.body(), std::string(response[http::field::content_type])};
  }

  int64_t Spent() { return *store_->LedgerSum("corp", "alice", "ai", 0, INT64_MAX); }

  // The budget holds in the store (every node's: here, this relay's and the test's own).
  int64_t Holds() {
    RawDb raw(dir_ + "/state.db");
    return std::stoll(raw.Exec("SELECT COUNT(*) FROM budget_holds"));
  }

  // A hold of alice's as another node's relay takes it for a call in flight there.
  int64_t HoldElsewhere(int64_t micro_usd, int64_t created_at) {
    BudgetHoldRequest request;
    request.iss = "corp";
    request.sub = "alice";
    request.limit_micro_usd = INT64_MAX;
    request.window = {0, INT64_MAX};
    request.micro_usd = micro_usd;
    request.now = created_at;
    request.stale_before = 0;
    auto hold = store_->AdmitBudgetHold(request);
    EXPECT_TRUE(hold.ok() && hold->verdict == HoldVerdict::kAdmit);
    return hold.ok() ? hold->hold_id : 0;
  }

  test::TempDir tmp_{"relay-test"};
  const std::string dir_ = tmp_.path();
  std::unique_ptr<Store> store_;
  FakeAuthority authority_;
  FakeObserver observer_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_ = asio::make_work_guard(io_);
  std::thread loop_;
  std::unique_ptr<ScriptedUpstream> upstream_;
  std::unique_ptr<ModelRelay> relay_;
  uint16_t port_ = 0;
  uint64_t requests_per_minute_ = 0;
  uint64_t max_call_s_ = 3600;
};

TEST_F(ModelRelayTest, AStreamedAnswerPassesThroughAndItsUsageIsDebitedExactly) {
  Start({{"turns", {Turn("hi there", 1000, 500, 2000, 10000)}}});
  Answer answer = Post("/v1/messages?beta=true", MessagesBody(true));
  ASSERT_EQ(answer.status, 200) << answer.body;
  EXPECT_EQ(answer.content_type.substr(0, 17), "text/event-stream");
  EXPECT_NE(answer.body.find("event: message_start"), std::string::npos);
  EXPECT_NE(answer.body.find("hi there"), std::string::npos);
  EXPECT_NE(answer.body.find("event: message_stop"), std::string::npos);
  // 1000*3 + 500*15 + 2000*3.75 + 10000*0.3 micro-dollars.
  EXPECT_EQ(Spent(), 21000);
  ASSERT_EQ(authority_.costs.size(), 1u);
  EXPECT_EQ(authority_.costs[0], 21000);
  EXPECT_EQ(authority_.usages[0].model, kModel);
  auto rows = store_->ListLedger("corp", "alice", 0, INT64_MAX);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].session_id, "ses_1");
  EXPECT_EQ((*rows)[0].sandbox_id, "sb_test");
  EXPECT_EQ((*rows)[0].cache_read_tokens, 10000);
  // The upstream saw the operator's key, never the placeholder.
  auto requests = upstream_->Requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0]["headers"]["x-api-key"], kRealKey);
  EXPECT_EQ(requests[0]["path"], "/v1/messages?beta=true");
  EXPECT_EQ(upstream_->RawLog().find(kKey), std::string::npos);
  // Metrics: one request forwarded, its usage under the price table's key, its latency.
  EXPECT_TRUE(Eventually([&] { return observer_.Results(RelayResult::kForwarded) == 1; }));
  EXPECT_EQ(observer_.TotalResults(), 1);
  auto usages = observer_.Usages();
  ASSERT_EQ(usages.size(), 1u);
  EXPECT_EQ(usages[0].price_key, kModel);
  EXPECT_EQ(usages[0].cost, 21000);
  EXPECT_EQ(usages[0].usage.input_tokens, 1000);
  EXPECT_EQ(usages[0].usage.output_tokens, 500);
  EXPECT_EQ(usages[0].usage.cache_creation_input_tokens, 2000);
  EXPECT_EQ(usages[0].usage.cache_read_input_tokens, 10000);
  auto latencies = observer_.Latencies();
  ASSERT_EQ(latencies.size(), 1u);
  EXPECT_GE(latencies[0], 0.0);
  EXPECT_LT(latencies[0], 30.0);
  EXPECT_EQ(observer_.Refusals(BudgetRefusal::kAi), 0);
}

TEST_F(ModelRelayTest, AWholeAnswerIsDebitedFromItsBody) {
  Start({{"turns", {Turn("whole", 40, 2)}}});
  Answer answer = Post("/v1/messages", MessagesBody(false));
  ASSERT_EQ(answer.status, 200) << answer.body;
  json message = json::parse(answer.body);
  EXPECT_EQ(message["usage"]["input_tokens"], 40);
  EXPECT_EQ(Spent(), 40 * 3 + 2 * 15);
}

TEST_F(ModelRelayTest, UnknownKeysAndOtherSandboxesKeysAreRefusedBeforeTheUpstream) {
  Start({{"turns", {Turn("a", 10, 1), Turn("b", 10, 1)}}});
  Answer unknown = Post("/v1/messages", MessagesBody(true), "sk-guess");
  EXPECT_EQ(unknown.status, 401);
  EXPECT_EQ(json::parse(unknown.body)["error"]["type"], "authentication_error");
  Answer missing = Post("/v1/messages", MessagesBody(true), "");
  EXPECT_EQ(missing.status, 401);
  // A real session's key, but of another sandbox: refused here.
  Answer other = Post("/v1/messages", MessagesBody(true), kOtherSandboxKey);
  EXPECT_EQ(other.status, 401);
  EXPECT_TRUE(upstream_->Requests().empty());
  EXPECT_EQ(Spent(), 0);
  // Positive control: the session's own key goes through.
  EXPECT_EQ(Post("/v1/messages", MessagesBody(true)).status, 200);
  EXPECT_EQ(upstream_->Requests().size(), 1u);
  EXPECT_TRUE(Eventually([&] { return observer_.Results(RelayResult::kForwarded) == 1; }));
  EXPECT_EQ(observer_.Results(RelayResult::kRefusedKey), 3);
  EXPECT_EQ(observer_.TotalResults(), 4);
}

TEST_F(ModelRelayTest, ASpentBudgetIsRefusedInTheApisFormat) {
  Start({{"turns", {Turn("a", 100000, 10000)}}});  // 0.3 + 0.15 = USD 0.45
  authority_.budget.ai_micro_usd = 400000;          // USD 0.40
  // Positive control: the first call is admitted (nothing spent yet), and overspends.
  ASSERT_EQ(Post("/v1/messages", MessagesBody(true)).status, 200);
  EXPECT_EQ(Spent(), 450000);
  EXPECT_TRUE(authority_.exhausted.empty());
  EXPECT_TRUE(Eventually([&] { return observer_.Results(RelayResult::kForwarded) == 1; }));
  EXPECT_EQ(observer_.Refusals(BudgetRefusal::kAi), 0);
  Answer refused = Post("/v1/messages", MessagesBody(true));
  EXPECT_EQ(refused.status, 403);
  json error = json::parse(refused.body);
  EXPECT_EQ(error["type"], "error");
  EXPECT_EQ(error["error"]["type"], "permission_error");
  EXPECT_NE(error["error"]["message"].get<std::string>().find("budget"), std::string::npos);
  EXPECT_EQ(upstream_->Requests().size(), 1u);  // the refused call never left
  ASSERT_EQ(authority_.exhausted.size(), 1u);
  EXPECT_EQ(authority_.exhausted[0], "ses_1");
  // A token without an AI budget gets nothing at all.
  authority_.budget.ai_micro_usd.reset();
  EXPECT_EQ(Post("/v1/messages", MessagesBody(true)).status, 403);
  EXPECT_EQ(observer_.Results(RelayResult::kRefusedBudget), 2);
  EXPECT_EQ(observer_.Refusals(BudgetRefusal::kAi), 2);
  EXPECT_EQ(observer_.Refusals(BudgetRefusal::kRate), 0);
  EXPECT_EQ(observer_.TotalResults(), 3);
}

TEST_F(ModelRelayTest, AUserAboveTheRateGetsTheApisOwn429BeforeTheUpstream) {
  requests_per_minute_ = 2;
  Start({{"turns", {Turn("a", 10, 1), Turn("b", 10, 1), Turn("c", 10, 1)}}});
  // Positive control: a minute's worth goes through.
  ASSERT_EQ(Post("/v1/messages", MessagesBody(true)).status, 200);
  ASSERT_EQ(Post("/v1/messages", MessagesBody(true)).status, 200);
  Answer limited = Post("/v1/messages", MessagesBody(true));
  EXPECT_EQ(limited.status, 429);
  json error = json::parse(limited.body);
  EXPECT_EQ(error["type"], "error");
  EXPECT_EQ(error["error"]["type"], "rate_limit_error");
  EXPECT_NE(error["error"]["message"].get<std::string>().find("relay.requests_per_minute"), std::string::npos);
  // The refused call never left and cost nothing.
  EXPECT_EQ(upstream_->Requests().size(), 2u);
  EXPECT_EQ(Spent(), 2 * (10 * 3 + 1 * 15));
  EXPECT_TRUE(Eventually([&] { return observer_.Results(RelayResult::kForwarded) == 2; }));
  EXPECT_EQ(observer_.Results(RelayResult::kRefusedRate), 1);
  EXPECT_EQ(observer_.Refusals(BudgetRefusal::kRate), 1);
  EXPECT_EQ(observer_.Refusals(BudgetRefusal::kAi), 0);
}

TEST_F(ModelRelayTest, ABodyOfTheWrongShapeIsRefusedNotFatal) {
  Start({{"turns", {Turn("a", 10, 1)}}});
  // The agent's body is the sandbox's to make: a model that is not a string, a body that is not
  // an object, or not JSON at all.
  for (const json& body : {json{{"model", 5}, {"stream", true}}, json::array({1, 2}), json("x")}) {
    Answer answer = Post("/v1/messages", body);
    EXPECT_EQ(answer.status, 400) << body.dump() << " " << answer.body;
  }
  // Control: the relay still serves a good request afterwards.
  EXPECT_EQ(Post("/v1/messages", MessagesBody(true)).status, 200);
}

TEST_F(ModelRelayTest, AModelWithoutAPriceAndOtherRoutesAreRefused) {
  Start({{"turns", {Turn("a", 10, 1)}}});
  Answer unpriced = Post("/v1/messages", MessagesBody(true, "claude-unpriced-9"));
  EXPECT_EQ(unpriced.status, 400);
  EXPECT_NE(json::parse(unpriced.body)["error"]["message"].get<std::string>().find("no price"), std::string::npos);
  EXPECT_EQ(Post("/v1/models", json::object(), kKey, http::verb::get).status, 404);
  EXPECT_EQ(Post("/v1/complete", MessagesBody(true)).status, 404);
  EXPECT_TRUE(upstream_->Requests().empty());
  // count_tokens passes (free), the priced model too.
  EXPECT_EQ(Post("/v1/messages/count_tokens", MessagesBody(false)).status, 200);
  EXPECT_EQ(Post("/v1/messages", MessagesBody(true)).status, 200);
  EXPECT_EQ(Spent(), 10 * 3 + 1 * 15);
  EXPECT_TRUE(Eventually([&] { return observer_.Results(RelayResult::kForwarded) == 2; }));
  EXPECT_EQ(observer_.Results(RelayResult::kRefusedUnpriced), 1);
  EXPECT_EQ(observer_.Results(RelayResult::kRefusedInvalid), 2);
  EXPECT_EQ(observer_.Usages().size(), 1u);  // count_tokens is free: no usage
}

TEST_F(ModelRelayTest, AnUpstreamErrorReachesTheAgentAndCostsNothing) {
  Start({{"turns", {{{"error", {{"status", 529}, {"type", "overloaded_error"}, {"message", "Overloaded"}}}},
                    Turn("after", 10, 1)}}});
  Answer overloaded = Post("/v1/messages", MessagesBody(true));
  EXPECT_EQ(overloaded.status, 529);
  EXPECT_EQ(json::parse(overloaded.body)["error"]["type"], "overloaded_error");
  EXPECT_EQ(Spent(), 0);
  EXPECT_EQ(Post("/v1/messages", MessagesBody(true)).status, 200);
  EXPECT_EQ(Spent(), 45);
  // The upstream's own error is an answer passed on whole: forwarded, with no usage.
  EXPECT_TRUE(Eventually([&] { return observer_.Results(RelayResult::kForwarded) == 2; }));
  EXPECT_EQ(observer_.Usages().size(), 1u);
  // Neither holds anything once over: the error's hold released, the answer's settled.
  EXPECT_TRUE(Eventually([&] { return Holds() == 0; }));
}

TEST_F(ModelRelayTest, AnAgentThatHangsUpMidStreamStillPaysForWhatWasUsed) {
  json slow = Turn("a slow answer with several words in it", 700, 50);
  slow["chunk_delay"] = 0.3;
  Start({{"turns", {slow}}});
  {
    asio::io_context io;
    beast::tcp_stream stream(io);
    stream.connect(asio::ip::tcp::endpoint(asio::ip::address_v4::loopback(), port_));
    http::request<http::string_body> request{http::verb::post, "/v1/messages", 11};
    request.set("x-api-key", kKey);
    request.body() = MessagesBody(true).dump();
    request.prepare_payload();
    http::write(stream, request);
    // The header and the first events, then gone.
    char first[256];
    ASSERT_GT(stream.socket().read_some(asio::buffer(first)), 0u);
  }
  // The relay notices at its next write; message_start's usage is what it has.
  for (int i = 0; i < 100 && Spent() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_GE(Spent(), 700 * 3);
  EXPECT_LT(Spent(), 700 * 3 + 50 * 15);
  EXPECT_TRUE(Eventually([&] { return observer_.Results(RelayResult::kClientGone) == 1; }));
  EXPECT_EQ(observer_.Results(RelayResult::kForwarded), 0);
  EXPECT_TRUE(Eventually([&] { return Holds() == 0; }));
}

// Upstream connections are kept between calls; one the upstream closed meanwhile is replaced
// without the agent noticing.
TEST_F(ModelRelayTest, AKeptUpstreamConnectionThatDiedIsReplaced) {
  json many = Turn("again", 10, 1);
  many["repeat"] = 100;
  Start({{"turns", {many}}});
  ASSERT_EQ(Post("/v1/messages", MessagesBody(true)).status, 200);
  ASSERT_EQ(Post("/v1/messages", MessagesBody(true)).status, 200);
  // The upstream restarts on the same port: the kept connection is dead.
  const int port = upstream_->port();
  upstream_.reset();
  upstream_ = std::make_unique<ScriptedUpstream>(dir_, json{{"turns", {many}}}, "", "", port);
  ASSERT_EQ(upstream_->port(), port);
  Answer answer = Post("/v1/messages", MessagesBody(true));
  EXPECT_EQ(answer.status, 200) << answer.body;
  EXPECT_EQ(Spent(), 3 * 45);
}

// 50 requests at once at the edge of a budget: each is checked when it arrives and debited when
// it ends, so they overspend by at most what was in flight, and nothing is admitted after.
TEST_F(ModelRelayTest, ConcurrentRequestsAtTheEdgeOverspendByOneCallAtMost) {
  json slow = Turn("x", 10, 1);  // 45 micro-dollars each
  slow["delay"] = 0.3;           // all of them in flight together
  slow["repeat"] = 1000;
  Start({{"turns", {slow}}});
  authority_.budget.ai_micro_usd = 1000;
  LedgerRow earlier;
  earlier.iss = "corp";
  earlier.sub = "alice";
  earlier.kind = "ai";
  earlier.amount = 990;  // 10 micro-dollars left
  earlier.at = static_cast<int64_t>(time(nullptr));
  ASSERT_TRUE(store_->AddLedger(earlier).ok());
  constexpr int kRequests = 50;
  std::vector<int> statuses(kRequests);
  std::vector<std::thread> clients;
  for (int i = 0; i < kRequests; ++i) {
    clients.emplace_back([this, i, &statuses] { statuses[i] = Post("/v1/messages", MessagesBody(true)).status; });
  }
  for (auto& client : clients) client.join();
  int admitted = 0, waited = 0;
  for (int status : statuses) {
    // 200: admitted; 429: told to retry while a call was in flight; 403: the budget was spent.
    EXPECT_TRUE(status == 200 || status == 429 || status == 403) << status;
    admitted += status == 200;
    waited += status == 429;
  }
  // One call goes ahead; the others wait for it to be priced, then find the budget spent.
  EXPECT_EQ(admitted, 1);
  EXPECT_GE(waited, 1);
  EXPECT_EQ(Spent(), 990 + 45 * admitted);  // every admitted request paid, to the micro-dollar
  const int64_t overspend = Spent() - 1000;
  EXPECT_LE(overspend, 45);
  RecordProperty("admitted", admitted);
  RecordProperty("overspend_micro_usd", static_cast<int>(overspend));
  std::printf("50 concurrent requests with 10 micro-dollars left: %d admitted, overspend %lld micro-dollars\n",
              admitted, static_cast<long long>(overspend));
  // Once they are paid for, nothing more gets through.
  EXPECT_EQ(Post("/v1/messages", MessagesBody(true)).status, 403);
  // Metrics: each answer counted under its own result and refusal kind.
  const int spent = kRequests + 1 - admitted - waited;
  EXPECT_TRUE(Eventually([&] { return observer_.Results(RelayResult::kForwarded) == admitted; }));
  EXPECT_EQ(observer_.Results(RelayResult::kRefusedInFlight), waited);
  EXPECT_EQ(observer_.Refusals(BudgetRefusal::kAiInFlight), waited);
  EXPECT_EQ(observer_.Results(RelayResult::kRefusedBudget), spent);
  EXPECT_EQ(observer_.Refusals(BudgetRefusal::kAi), spent);
  EXPECT_EQ(observer_.TotalResults(), kRequests + 1);
  EXPECT_TRUE(Eventually([&] { return Holds() == 0; }));
}

// TLS to the upstream: the certificate must chain to a trusted CA and name the upstream's host.
TEST_F(ModelRelayTest, FarFromTheEdgeConcurrentCallsAreAllAdmitted) {
  json slow = Turn("x", 10, 1);
  slow["delay"] = 1.0;
  slow["repeat"] = 1000;
  Start({{"turns", {slow}}});
  authority_.budget.ai_micro_usd = 10000000;  // USD 10: room for every call at its most
  constexpr int kRequests = 10;
  std::vector<int> statuses(kRequests);
  std::vector<std::thread> clients;
  for (int i = 0; i < kRequests; ++i) {
    clients.emplace_back([this, i, &statuses] { statuses[i] = Post("/v1/messages", MessagesBody(true)).status; });
  }
  for (auto& client : clients) client.join();
  EXPECT_EQ(std::count(statuses.begin(), statuses.end(), 200), kRequests);
  EXPECT_EQ(Spent(), 45 * kRequests);
  // Near the edge (what is left covers one call at its most, not two), with one call in flight,
  // a second waits: the same calls as above, against a budget that is nearly spent.
  authority_.budget.ai_micro_usd = Spent() + 20000;
  std::thread first([this] { EXPECT_EQ(Post("/v1/messages", MessagesBody(true)).status, 200); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the first is in flight (1 s)
  EXPECT_EQ(Post("/v1/messages", MessagesBody(true)).status, 429);
  first.join();
  // Once it is priced, there is room again and the next one goes ahead.
  EXPECT_EQ(Post("/v1/messages", MessagesBody(true)).status, 200);
}

// The holds are in the store, where every node of a fleet reads them: a call in flight on
// another node makes a call near the edge wait here, until that call is priced.
TEST_F(ModelRelayTest, ACallInFlightOnAnotherNodeMakesACallNearTheEdgeWait) {
  Start({{"turns", {Turn("x", 10, 1), Turn("y", 10, 1)}}});
  // A call holds about 15,700 (MessagesBody's ~180 bytes at 3.75 and 1000 output tokens at 15):
  // alone it fits in 20,000, beside another node's call holding 5,000 it does not.
  authority_.budget.ai_micro_usd = 20000;
  const int64_t now = static_cast<int64_t>(time(nullptr));
  const int64_t elsewhere = HoldElsewhere(5000, now);
  Answer waits = Post("/v1/messages", MessagesBody(true));
  EXPECT_EQ(waits.status, 429) << waits.body;
  EXPECT_NE(json::parse(waits.body)["error"]["message"].get<std::string>().find("1 call(s) are still being priced"),
            std::string::npos)
      << waits.body;
  EXPECT_TRUE(upstream_->Requests().empty());
  // Priced there (its hold goes as its row comes): the call goes ahead here.
  LedgerRow priced;
  priced.iss = "corp";
  priced.sub = "alice";
  priced.kind = "ai";
  priced.amount = 45;
  priced.at = now;
  ASSERT_TRUE(store_->SettleBudgetHold(elsewhere, priced).ok());
  EXPECT_EQ(Post("/v1/messages", MessagesBody(true)).status, 200);
  EXPECT_EQ(Spent(), 45 + 45);
  EXPECT_TRUE(Eventually([&] { return Holds() == 0; }));
  // A hold older than the longest call (its node died mid-call and never came back) counts for
  // nothing, and goes.
  HoldElsewhere(5000, now - HoldLifetimeSeconds(RelayConfig{}) - 10);
  EXPECT_EQ(Holds(), 1);
  EXPECT_EQ(Post("/v1/messages", MessagesBody(true)).status, 200);
  EXPECT_TRUE(Eventually([&] { return Holds() == 0; }));
  EXPECT_TRUE(Eventually([&] { return observer_.Results(RelayResult::kForwarded) == 2; }));
  EXPECT_EQ(observer_.Results(RelayResult::kRefusedInFlight), 1);
}

// What this node's last run held for calls that died with it is released at its start.
TEST_F(ModelRelayTest, RecoverReleasesTheHoldsOfTheNodesLastRun) {
  Start({{"turns", {Turn("x", 10, 1)}}});
  authority_.budget.ai_micro_usd = 20000;
  HoldElsewhere(5000, static_cast<int64_t>(time(nullptr)));  // under this node's id
  EXPECT_EQ(Post("/v1/messages", MessagesBody(true)).status, 429);
  ASSERT_TRUE(relay_->Recover().ok());
  EXPECT_EQ(Holds(), 0);
  EXPECT_EQ(Post("/v1/messages", MessagesBody(true)).status, 200);
  EXPECT_EQ(Spent(), 45);
}

// No call outlives its hold: past relay.max_call_s from its admission it is cut short, and pays
// for what it used.
TEST_F(ModelRelayTest, ACallPastTheLongestACallMayLastIsCutAndPaysWhatItUsed) {
  max_call_s_ = 1;
  json slow = Turn("a slow answer with several words in it, as slow as it gets", 700, 50);
  slow["chunk_delay"] = 0.4;  // about 10 events: 4 s
  Start({{"turns", {slow, Turn("quick", 10, 1)}}});
  const auto start = std::chrono::steady_clock::now();
  std::string received;
  {
    asio::io_context io;
    beast::tcp_stream stream(io);
    stream.connect(asio::ip::tcp::endpoint(asio::ip::address_v4::loopback(), port_));
    http::request<http::string_body> request{http::verb::post, "/v1/messages", 11};
    request.set("x-api-key", kKey);
    request.body() = MessagesBody(true).dump();
    request.prepare_payload();
    http::write(stream, request);
    char chunk[4096];
    boost::system::error_code ec;
    while (!ec) received.append(chunk, stream.socket().read_some(asio::buffer(chunk), ec));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(seconds, 0.9);
  EXPECT_LT(seconds, 3.0);
  EXPECT_NE(received.find("event: message_start"), std::string::npos);
  EXPECT_EQ(received.find("event: message_stop"), std::string::npos);
  // message_start's usage is what it used; its hold is gone.
  EXPECT_TRUE(Eventually([&] { return Spent() > 0; }));
  EXPECT_GE(Spent(), 700 * 3);
  EXPECT_LT(Spent(), 700 * 3 + 50 * 15);
  EXPECT_TRUE(Eventually([&] { return Holds() == 0; }));
  EXPECT_TRUE(Eventually([&] { return observer_.Results(RelayResult::kUpstreamError) == 1; }));
  // Control: a call within the second goes through whole.
  Answer quick = Post("/v1/messages", MessagesBody(true));
  EXPECT_EQ(quick.status, 200);
  EXPECT_NE(quick.body.find("event: message_stop"), std::string::npos);
}

TEST_F(ModelRelayTest, ATrustedCertificateForTheUpstreamsNameIsAccepted) {
  Start({{"turns", {Turn("over tls", 10, 1)}}}, "localhost", "self");
  Answer answer = Post("/v1/messages", MessagesBody(true));
  ASSERT_EQ(answer.status, 200) << answer.body;
  EXPECT_NE(answer.body.find("over tls"), std::string::npos);
  EXPECT_EQ(Spent(), 10 * 3 + 1 * 15);
  ASSERT_EQ(upstream_->Requests().size(), 1u);
  EXPECT_EQ(upstream_->Requests()[0]["headers"]["x-api-key"], kRealKey);
}

TEST_F(ModelRelayTest, AnUntrustedCertificateIsRefusedAndNothingIsSent) {
  Start({{"turns", {Turn("never", 10, 1)}}}, "localhost", "");  // self-signed, not trusted
  Answer answer = Post("/v1/messages", MessagesBody(true));
  EXPECT_EQ(answer.status, 502);
  EXPECT_NE(answer.body.find("TLS handshake"), std::string::npos) << answer.body;
  EXPECT_TRUE(upstream_->Requests().empty());
  EXPECT_EQ(Spent(), 0);
}

TEST_F(ModelRelayTest, ATrustedCertificateForAnotherNameIsRefused) {
  Start({{"turns", {Turn("never", 10, 1)}}}, "api.example.com", "self");  // trusted, wrong name
  Answer answer = Post("/v1/messages", MessagesBody(true));
  EXPECT_EQ(answer.status, 502);
  EXPECT_NE(answer.body.find("TLS handshake"), std::string::npos) << answer.body;
  EXPECT_TRUE(upstream_->Requests().empty());
}

TEST(UpstreamUrlTest, HttpsAnywhereHttpOnlyToLoopback) {
  auto anthropic = ParseUpstream("https://api.anthropic.com");
  ASSERT_TRUE(anthropic.ok());
  EXPECT_TRUE(anthropic->tls);
  EXPECT_EQ(anthropic->host, "api.anthropic.com");
  EXPECT_EQ(anthropic->port, "443");
  auto local = ParseUpstream("http://127.0.0.1:8080/");
  ASSERT_TRUE(local.ok());
  EXPECT_FALSE(local->tls);
  EXPECT_EQ(local->port, "8080");
  EXPECT_TRUE(ParseUpstream("http://localhost:1").ok());
  EXPECT_FALSE(ParseUpstream("http://api.anthropic.com").ok());
  EXPECT_FALSE(ParseUpstream("http://10.0.0.1:80").ok());
  EXPECT_FALSE(ParseUpstream("ftp://x").ok());
  EXPECT_FALSE(ParseUpstream("https://host/v1").ok());
  EXPECT_FALSE(ParseUpstream("https://host:port").ok());
}

}  // namespace
}  // namespace corral::supervisor
