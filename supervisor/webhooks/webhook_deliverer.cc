#include "supervisor/webhooks/webhook_deliverer.h"

#include <openssl/ssl.h>

#include <chrono>
#include <ctime>
#include <string>
#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "common/log.h"
#include "supervisor/proxy_names.h"
#include "supervisor/webhooks/webhook_body.h"

namespace corral::supervisor {

namespace {

constexpr int64_t kMaxInFlight = 16;                    // attempts at once
constexpr auto kPoll = std::chrono::seconds(1);         // other nodes' rows, and retries coming due
constexpr int64_t kPruneEveryS = 600;
constexpr uint64_t kMaxAnswerBytes = 64 * 1024;         // a receiver's answer is read, then dropped

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
int64_t NowS() { return static_cast<int64_t>(time(nullptr)); }

// What one attempt came to: the answer's status (0: none), or why there was none.
struct Answer {
  unsigned status = 0;
  std::string error;
};

}  // namespace

class WebhookDeliverer::Loop {
 public:
  Loop(Store& store, const WebhooksConfig& config, WebhookObserver* observer)
      : store_(store), config_(config), observer_(observer), tls_(asio::ssl::context::tls_client), timer_(io_) {}

  Status LoadTrust() {
    tls_.set_verify_mode(asio::ssl::verify_peer);
    boost::system::error_code ec;
    tls_.set_default_verify_paths(ec);
    if (ec) LogWarn("webhooks", "the system's trust store does not load", {{"error", ec.message()}});
    if (!config_.ca_file.empty()) {
      tls_.load_verify_file(config_.ca_file, ec);
      if (ec) return Status::Error("webhooks.ca_file: " + config_.ca_file + ": " + ec.message(), EINVAL);
    }
    return Status();
  }

  void Run() {
    asio::co_spawn(io_, Poll(), asio::detached);
    io_.run();
  }
  void Wake() {
    asio::post(io_, [this] { timer_.cancel(); });
  }
  void Stop() {
    asio::post(io_, [this] {
      stopping_ = true;
      io_.stop();
    });
  }

 private:
  awaitable<void> Poll() {
    while (!stopping_) {
      ClaimAndSend();
      if (NowS() - pruned_at_ >= kPruneEveryS) Prune();
      timer_.expires_after(kPoll);
      boost::system::error_code ec;
      co_await timer_.async_wait(asio::redirect_error(use_awaitable, ec));
    }
  }

  void ClaimAndSend() {
    if (in_flight_ >= kMaxInFlight) return;
    // An attempt takes at most the timeout; the lease outlasts it, so no other node sends the
    // row meanwhile, and ends soon after, so a node that died leaves it to the others.
    const int64_t lease_ms = static_cast<int64_t>(config_.timeout_s) * 2000 + 30000;
    auto rows = store_.ClaimOutbox(NowMs(), lease_ms, kMaxInFlight - in_flight_);
    if (!rows.ok()) {
      LogWarn("webhooks", "cannot read the outbox", {{"error", rows.status().ToString()}});
      return;
    }
    for (OutboxRow& row : *rows) {
      ++in_flight_;
      asio::co_spawn(io_, Attempt(std::move(row)), asio::detached);
    }
  }

  void Prune() {
    pruned_at_ = NowS();
    auto pruned = store_.PruneOutbox(pruned_at_ - static_cast<int64_t>(config_.keep_s));
    if (!pruned.ok()) LogWarn("webhooks", "cannot prune the outbox", {{"error", pruned.status().ToString()}});
  }

  awaitable<void> Attempt(OutboxRow row) {
    const int64_t t = NowS();
    Answer answer = co_await Post(row, t);
    --in_flight_;
    if (stopping_) co_return;  // abandoned: the lease goes at Stop, the row is due again
    OutboxAttempt attempt;
    attempt.id = row.id;
    attempt.url = row.url;
    attempt.at = NowS();
    attempt.delivered = answer.status >= 200 && answer.status < 300;
    if (!attempt.delivered) {
      attempt.error = answer.error.empty() ? "HTTP " + std::to_string(answer.status) : answer.error;
      const int64_t delay = WebhookRetryDelay(row.attempts + 1, static_cast<int64_t>(config_.retry_min_s),
                                              static_cast<int64_t>(config_.retry_max_s));
      attempt.next_attempt_ms = NowMs() + delay * 1000;
      attempt.give_up = attempt.at + delay > row.created_at + static_cast<int64_t>(config_.max_age_s);
    }
    auto finished = store_.FinishOutboxAttempt(attempt);
    if (!finished.ok()) {
      LogWarn("webhooks", "cannot record an attempt", {{"id", row.id}, {"error", finished.status().ToString()}});
    }
    const std::string attempts = std::to_string(row.attempts + 1);
    if (attempt.delivered) {
      if (observer_) observer_->OnWebhookDelivered();
      LogInfo("webhooks", "delivered", {{"id", row.id}, {"type", row.type}, {"url", row.url}, {"attempts", attempts}});
    } else {
      if (observer_) observer_->OnWebhookAttemptFailed();
      if (attempt.give_up) {
        if (observer_) observer_->OnWebhookGivenUp();
        LogError("webhooks", "given up: older than webhooks.max_age",
                 {{"id", row.id},
                  {"type", row.type},
                  {"url", row.url},
                  {"attempts", attempts},
                  {"error", attempt.error}});
      } else {
        LogInfo("webhooks", "attempt failed; will retry",
                {{"id", row.id}, {"url", row.url}, {"attempts", attempts}, {"error", attempt.error}});
      }
    }
    if (!stopping_) ClaimAndSend();
  }

  http::request<http::string_body> RequestOf(const OutboxRow& row, const WebhookUrl& url, int64_t t) const {
    http::request<http::string_body> request{http::verb::post, url.target, 11};
    const bool default_port = url.port == (url.tls ? "443" : "80");
    const std::string host = url.host.find(':') != std::string::npos ? "[" + url.host + "]" : url.host;
    request.set(http::field::host, default_port ? host : host + ":" + url.port);
    request.set(http::field::user_agent, "corrald-webhooks/1");
    request.set(http::field::content_type, "application/json");
    request.set("Corral-Webhook-Id", row.id);
    request.set("Corral-Webhook-Timestamp", std::to_string(t));
    request.set("Corral-Webhook-Attempt", std::to_string(row.attempts + 1));
    request.set("Corral-Signature", WebhookSignature(config_.secret, t, row.body));
    request.keep_alive(false);
    request.body() = row.body;
    request.prepare_payload();
    return request;
  }

  awaitable<Answer> Post(const OutboxRow& row, int64_t t) {
    auto url = ParseWebhookUrl(row.url);
    if (!url.ok()) co_return Answer{0, "bad URL: " + url.status().message()};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(config_.timeout_s);
    boost::system::error_code ec;
    tcp::resolver resolver(io_);
    auto endpoints = co_await resolver.async_resolve(url->host, url->port, asio::redirect_error(use_awaitable, ec));
    if (ec) co_return Answer{0, "resolve " + url->host + ": " + ec.message()};
    http::request<http::string_body> request = RequestOf(row, *url, t);
    if (!url->tls) {
      beast::tcp_stream stream(io_);
      stream.expires_at(deadline);
      co_await stream.async_connect(endpoints, asio::redirect_error(use_awaitable, ec));
      if (ec) co_return Answer{0, "connect: " + ec.message()};
      co_return co_await Exchange(stream, request);
    }
    beast::ssl_stream<beast::tcp_stream> stream(io_, tls_);
    if (!SSL_set_tlsext_host_name(stream.native_handle(), url->host.c_str())) co_return Answer{0, "TLS set-up failed"};
    stream.set_verify_callback(asio::ssl::host_name_verification(url->host));
    beast::get_lowest_layer(stream).expires_at(deadline);
    co_await beast::get_lowest_layer(stream).async_connect(endpoints, asio::redirect_error(use_awaitable, ec));
    if (ec) co_return Answer{0, "connect: " + ec.message()};
    co_await stream.async_handshake(asio::ssl::stream_base::client, asio::redirect_error(use_awaitable, ec));
    if (ec) co_return Answer{0, "TLS handshake: " + ec.message()};
    co_return co_await Exchange(stream, request);
  }

  template <typename Stream>
  awaitable<Answer> Exchange(Stream& stream, http::request<http::string_body>& request) {
    boost::system::error_code ec;
    co_await http::async_write(stream, request, asio::redirect_error(use_awaitable, ec));
    if (ec) co_return Answer{0, "send: " + ec.message()};
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(kMaxAnswerBytes);
    co_await http::async_read(stream, buffer, parser, asio::redirect_error(use_awaitable, ec));
    // The status line came: that is the answer, whatever followed it (a body over the limit).
    if (ec && !parser.is_header_done()) co_return Answer{0, "answer: " + ec.message()};
    co_return Answer{parser.get().result_int(), ""};
  }

  Store& store_;
  const WebhooksConfig& config_;
  WebhookObserver* observer_;
  asio::io_context io_{1};
  asio::ssl::context tls_;
  asio::steady_timer timer_;
  int64_t in_flight_ = 0;
  int64_t pruned_at_ = 0;
  std::atomic<bool> stopping_{false};
};

WebhookDeliverer::WebhookDeliverer(Store& store, WebhooksConfig config, WebhookObserver* observer)
    : store_(store), config_(std::move(config)), observer_(observer) {}

WebhookDeliverer::~WebhookDeliverer() { Stop(); }

Status WebhookDeliverer::Start() {
  if (loop_) return Status();
  auto loop = std::make_unique<Loop>(store_, config_, observer_);
  RETURN_IF_ERROR(loop->LoadTrust());
  auto released = store_.ReleaseOutboxLeases();
  if (!released.ok()) return released.status();
  loop_ = std::move(loop);
  thread_ = std::thread([loop = loop_.get()] { loop->Run(); });
  return Status();
}

void WebhookDeliverer::Wake() {
  if (loop_) loop_->Wake();
}

void WebhookDeliverer::Stop() {
  if (!loop_) return;
  loop_->Stop();
  if (thread_.joinable()) thread_.join();
  loop_.reset();
  auto released = store_.ReleaseOutboxLeases();
  if (!released.ok()) LogWarn("webhooks", "cannot release the leases", {{"error", released.status().ToString()}});
}

}  // namespace corral::supervisor
