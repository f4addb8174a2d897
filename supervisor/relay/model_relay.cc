#include "supervisor/relay/model_relay.h"

#include <openssl/ssl.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <functional>
#include <iterator>
#include <limits>
#include <optional>

#include <boost/asio/ssl.hpp>
#include <boost/beast/ssl.hpp>
#include <nlohmann/json.hpp>

#include "common/enum_names.h"
#include "common/log.h"
#include "supervisor/loopback_acceptor.h"
#include "supervisor/proxy_names.h"
#include "supervisor/relay/rate_limiter.h"

namespace corral::supervisor {

namespace {

constexpr size_t kMaxHeaderBytes = 64 * 1024;
constexpr size_t kChunkBytes = 64 * 1024;
constexpr size_t kMaxWholeBody = 8 << 20;  // a non-streamed answer kept for its usage

// Hop-by-hop headers and those the relay sets itself: never copied across.
bool IsRelayOwnedHeader(beast::string_view name) {
  static constexpr const char* kOwned[] = {
      "host", "x-api-key", "authorization", "connection", "keep-alive", "proxy-authorization",
      "proxy-authenticate", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
      "content-length", "accept-encoding", "cookie", "set-cookie"};
  for (const char* owned : kOwned) {
    if (beast::iequals(name, owned)) return true;
  }
  return false;
}

std::string ErrorBody(std::string_view type, std::string_view message) {
  return nlohmann::json{{"type", "error"}, {"error", {{"type", type}, {"message", message}}}}.dump();
}

std::string IsoTime(int64_t t) {
  char text[32];
  struct tm tm = {};
  const time_t tt = static_cast<time_t>(t);
  gmtime_r(&tt, &tm);
  strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

struct ModelRelay::Impl : std::enable_shared_from_this<Impl> {
  Impl(asio::io_context& io_context, RelayConfig relay_config, Store& the_store, RelayAuthority& the_authority,
       uint64_t& request_count)
      : io(io_context), config(std::move(relay_config)), store(the_store), authority(the_authority),
        requests(request_count), tls(asio::ssl::context::tls_client) {
    auto parsed = ParseUpstream(this->config.upstream);
    if (parsed.ok()) {
      upstream = *parsed;
    } else {
      upstream_error = parsed.status();
    }
    tls.set_verify_mode(asio::ssl::verify_peer);
    boost::system::error_code ec;
    tls.set_default_verify_paths(ec);
    if (!this->config.ca_file.empty()) tls.load_verify_file(this->config.ca_file, ec);
    if (ec) upstream_error = Status::Error("relay: cannot load the CA certificates: " + ec.message(), EINVAL);
    SSL_CTX_set_min_proto_version(tls.native_handle(), TLS1_2_VERSION);
  }

  struct Sandbox {
    std::set<std::shared_ptr<beast::tcp_stream>> clients;
  };

  asio::io_context& io;
  RelayConfig config;  // prices and requests_per_minute change with a reload
  Store& store;
  RelayAuthority& authority;
  uint64_t& requests;
  asio::ssl::context tls;
  std::optional<UpstreamUrl> upstream;
  Status upstream_error;
  std::map<std::string, Sandbox> sandboxes;
  LoopbackAcceptor acceptor{io, "relay",
                            [this](const std::string& id, tcp::socket socket) { OnAccept(id, std::move(socket)); }};
  RateLimiter limiter{config.requests_per_minute};
  bool stopped = false;
  RelayObserver* observer = nullptr;
  WebhookOutbox* webhooks = nullptr;

  void Count(RelayResult result) {
    if (observer != nullptr && !stopped) observer->OnModelRequest(result);
  }
  void Refused(BudgetRefusal kind) {
    if (observer != nullptr && !stopped) observer->OnBudgetRefusal(kind);
  }
  // Idle upstream connections, kept for the next call: no connect or TLS handshake per call.
  static constexpr size_t kMaxIdle = 16;
  std::vector<std::unique_ptr<beast::tcp_stream>> idle_plain;
  std::vector<std::unique_ptr<beast::ssl_stream<beast::tcp_stream>>> idle_tls;

  // An admitted call's hold on its user's budget, in the store, where every node counts it:
  // settled (deleted as the call's ledger row is written, in one transaction) once the call is
  // priced, else released when the call ends, however it ends. After a shutdown nothing is
  // written (the store may be gone): the node's next start releases what is left (Recover).
  class Reservation {
   public:
    Reservation(std::shared_ptr<Impl> impl, int64_t hold_id) : impl_(std::move(impl)), hold_id_(hold_id) {}
    ~Reservation() {
      if (settled_ || impl_->stopped) return;
      Status released = impl_->store.ReleaseBudgetHold(hold_id_);
      if (!released.ok()) {
        LogError("relay", "cannot release a budget hold (it lapses on its own)",
                 {{"hold", std::to_string(hold_id_)}, {"error", released.ToString()}});
      }
    }
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;

    // The priced call's ledger row, written as the hold goes. A settle that lost to concurrent
    // transactions at every attempt (EBUSY) writes the row alone (an insert cannot lose) and
    // leaves the hold to the destructor: for that moment the call counts twice, never not at all.
    StatusOr<int64_t> Settle(const LedgerRow& row) {
      StatusOr<int64_t> id = impl_->store.SettleBudgetHold(hold_id_, row);
      if (id.ok()) {
        settled_ = true;
        return id;
      }
      if (id.status().error_number() != EBUSY) return id;
      return impl_->store.AddLedger(row);
    }

   private:
    std::shared_ptr<Impl> impl_;
    int64_t hold_id_;
    bool settled_ = false;
  };

  // The most a call may cost: every byte of the request an input token (a JSON body holds fewer
  // tokens than that), at the dearer of the input and cache-write prices, and max_tokens of
  // output (4096 when the body names none).
  static int64_t MaxCost(const std::string& raw_body, const nlohmann::json& body, const ModelPrice& price) {
    const int64_t input_tokens = static_cast<int64_t>(raw_body.size());
    int64_t output_tokens = 4096;
    if (body.is_object() && body.contains("max_tokens") && body["max_tokens"].is_number_integer()) {
      // The sandbox's number: bounded, so that the product below cannot overflow.
      output_tokens = std::clamp<int64_t>(body["max_tokens"].get<int64_t>(), 0, int64_t{1} << 22);
    }
    ModelUsage usage;
    usage.input_tokens = input_tokens;
    usage.output_tokens = output_tokens;
    ModelPrice dearer = price;
    dearer.input = std::max(price.input, price.cache_write);
    return CostMicroUsd(dearer, usage);
  }

  // A connection to a served sandbox (the acceptor calls this between Serve and Forget only).
  void OnAccept(const std::string& sandbox_id, tcp::socket socket) {
    auto client = std::make_shared<beast::tcp_stream>(std::move(socket));
    sandboxes[sandbox_id].clients.insert(client);
    asio::co_spawn(io, shared_from_this()->ServeConnection(sandbox_id, client), asio::detached);
  }

  awaitable<void> ServeConnection(std::string sandbox_id, std::shared_ptr<beast::tcp_stream> client) {
    auto self = shared_from_this();  // alive until the coroutine ends
    beast::flat_buffer buffer;
    boost::system::error_code ec;
    while (!stopped) {
      http::request_parser<http::string_body> parser;
      parser.header_limit(kMaxHeaderBytes);
      parser.body_limit(config.max_request_bytes);
      client->expires_after(std::chrono::seconds(config.timeout_s));
      co_await http::async_read(*client, buffer, parser, asio::redirect_error(use_awaitable, ec));
      if (ec == http::error::body_limit) {
        Count(RelayResult::kRefusedInvalid);
        co_await Reply(*client, http::status::payload_too_large, "request_too_large",
                       "corral: the request is larger than relay.max_request", false);
        break;
      }
      if (ec) break;
      http::request<http::string_body> request = parser.release();
      const bool keep_alive = request.keep_alive();
      const bool clean = co_await Relay(sandbox_id, *client, request);
      if (!clean || !keep_alive) break;
    }
    client->socket().shutdown(tcp::socket::shutdown_both, ec);
    client->close();
    if (auto it = sandboxes.find(sandbox_id); it != sandboxes.end()) it->second.clients.erase(client);
  }

  awaitable<bool> Reply(beast::tcp_stream& client, http::status status, std::string_view type,
                        std::string_view message, bool keep_alive, uint64_t retry_after_s = 0) {
    http::response<http::string_body> response{status, 11};
    response.set(http::field::content_type, "application/json");
    response.set("request-id", "corral-relay");
    if (retry_after_s > 0) response.set(http::field::retry_after, std::to_string(retry_after_s));
    response.keep_alive(keep_alive);
    response.body() = ErrorBody(type, message);
    response.prepare_payload();
    boost::system::error_code ec;
    client.expires_after(std::chrono::seconds(config.timeout_s));
    co_await http::async_write(client, response, asio::redirect_error(use_awaitable, ec));
    co_return !ec;
  }

  // One request: false when the connection is no longer usable.
  awaitable<bool> Relay(const std::string& sandbox_id, beast::tcp_stream& client,
                        http::request<http::string_body>& request) {
    ++requests;
    const bool keep = request.keep_alive();
    std::string_view target(request.target().data(), request.target().size());
    std::string_view path = target.substr(0, target.find('?'));
    const bool messages = path == "/v1/messages";
    const bool count_tokens = path == "/v1/messages/count_tokens";
    if (request.method() != http::verb::post || (!messages && !count_tokens)) {
      Count(RelayResult::kRefusedInvalid);
      co_return co_await Reply(client, http::status::not_found, "not_found_error",
                               "corral: the relay serves POST /v1/messages and /v1/messages/count_tokens only", keep);
    }
    // Whose session: the placeholder key, which must belong to this sandbox.
    std::string key(request[http::field::authorization]);
    if (key.rfind("Bearer ", 0) == 0) {
      key.erase(0, 7);
    } else {
      key = std::string(request["x-api-key"]);
    }
    std::optional<RelayClient> found = key.empty() ? std::nullopt : authority.FindKey(key);
    if (!found || found->sandbox_id != sandbox_id) {
      LogWarn("relay", "unknown key", {{"sandbox", sandbox_id}});
      Count(RelayResult::kRefusedKey);
      co_return co_await Reply(client, http::status::unauthorized, "authentication_error",
                               "corral: this key belongs to no session of this sandbox", keep);
    }
    const RelayClient who = *found;
    // The body is the sandbox's to make: nothing in it may be taken for granted.
    nlohmann::json body = nlohmann::json::parse(request.body(), nullptr, /*allow_exceptions=*/false);
    const bool has_model = body.is_object() && body.contains("model") && body["model"].is_string();
    const std::string model = has_model ? body["model"].get<std::string>() : "";
    std::optional<ModelPrice> price = config.prices.Find(model);
    if (messages && !has_model) {
      Count(RelayResult::kRefusedInvalid);
      co_return co_await Reply(client, http::status::bad_request, "invalid_request_error",
                               "corral: the body must be a JSON object with a \"model\" string", keep);
    }
    std::optional<Reservation> reservation;  // held until this call is priced and done
    // The call ends by then at the latest (relay.max_call_s from its admission): never after its
    // hold lapses (HoldLifetimeSeconds), however slowly either side reads.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(config.max_call_s);
    if (messages) {
      if (std::optional<Refusal> refused = Admit(who, model, price, request.body(), body, reservation)) {
        co_return co_await Reply(client, refused->status, refused->type, refused->message, keep, refused->retry_after_s);
      }
    }
    if (!upstream || config.api_key.empty()) {
      Count(RelayResult::kError);
      co_return co_await Reply(client, http::status::internal_server_error, "api_error",
                               !upstream ? "corral: " + upstream_error.message()
                                         : std::string("corral: the operator has not configured a model API key "
                                                       "(relay.api_key_file)"),
                               keep);
    }
    http::request<http::string_body> forward = UpstreamRequest(request);
    Metered metered;
    // Written once the answer is complete and before its last bytes reach the agent, so that
    // its next request is checked against it; or, for an answer cut short, once it ends. (After
    // a shutdown the store and the sessions may be gone: nothing more is written.)
    bool debited = !messages;
    std::function<void()> debit = [&] {
      if (debited || stopped) return;
      debited = true;
      Debit(who, model, *price, metered, reservation ? &*reservation : nullptr);
    };
    std::string unreachable;
    const Outcome outcome = co_await Forward(client, forward, metered, debit, unreachable, deadline);
    if (outcome != Outcome::kNoAnswer) debit();  // (a no-op when Exchange did it)
    reservation.reset();  // priced or not, the call holds nothing from here on
    if (!unreachable.empty()) {
      LogWarn("relay", "upstream unreachable", {{"error", unreachable}});
      Count(RelayResult::kUpstreamError);
      co_return co_await Reply(client, http::status::bad_gateway, "api_error", "corral: " + unreachable, keep);
    }
    Count(outcome == Outcome::kDone          ? RelayResult::kForwarded
          : outcome == Outcome::kClientGone ? RelayResult::kClientGone
                                            : RelayResult::kUpstreamError);
    if (outcome == Outcome::kNoAnswer) {
      co_return co_await Reply(client, http::status::bad_gateway, "api_error", "corral: " + metered.error, false);
    }
    co_return outcome == Outcome::kDone && keep;
  }

  // Why a call is refused before it goes upstream: the answer the agent gets.
  struct Refusal {
    http::status status;
    std::string_view type;
    std::string message;
    uint64_t retry_after_s = 0;
  };

  // A model call's admission: the user's rate (relay.requests_per_minute), the model's price,
  // the AI budget and the calls in flight. Admitted, `reservation` holds its most possible cost.
  std::optional<Refusal> Admit(const RelayClient& who, const std::string& model, const std::optional<ModelPrice>& price,
                               const std::string& raw_body, const nlohmann::json& body,
                               std::optional<Reservation>& reservation) {
    // The user's rate, over all their sessions: the API's own 429, which the CLI answers by
    // waiting Retry-After and trying again.
    const std::string user = who.iss + std::string(1, '\0') + who.sub;
    if (!limiter.Allow(user)) {
      const uint64_t retry = limiter.RetryAfterSeconds(user);
      LogInfo("relay", "rate limited", {{"session", who.session_id}, {"retry_after_s", std::to_string(retry)}});
      Count(RelayResult::kRefusedRate);
      Refused(BudgetRefusal::kRate);
      return Refusal{http::status::too_many_requests, "rate_limit_error",
                     "corral: at most " + std::to_string(limiter.per_minute()) +
                         " model calls a minute per user (relay.requests_per_minute)",
                     retry};
    }
    if (!price) {
      Count(RelayResult::kRefusedUnpriced);
      return Refusal{http::status::bad_request, "invalid_request_error",
                     "corral: the model \"" + model + "\" has no price in the relay's table (relay.prices)"};
    }
    if (!who.budget.ai_micro_usd) {
      Count(RelayResult::kRefusedBudget);
      Refused(BudgetRefusal::kAi);
      authority.OnBudgetExhausted(who);
      return Refusal{http::status::forbidden, "permission_error",
                     "corral: this session's token carries no AI budget (budget.ai_usd)"};
    }
    return AdmitOnBudget(who, MaxCost(raw_body, body, *price), reservation);
  }

  // The AI budget's part of an admission, in one store transaction with every node's calls in
  // flight (Store::AdmitBudgetHold): refused when the window's budget is spent; told to wait
  // (the API's own 429, which the CLI answers by retrying) when what is left might not cover
  // the calls in flight and this one at their most, until they are priced: at the edge of a
  // budget a user overspends by one call, not by every call in flight. One call always goes
  // ahead. Admitted, the call holds `estimate` until it is priced.
  std::optional<Refusal> AdmitOnBudget(const RelayClient& who, int64_t estimate,
                                       std::optional<Reservation>& reservation) {
    const int64_t now = static_cast<int64_t>(time(nullptr));
    BudgetHoldRequest request;
    request.iss = who.iss;
    request.sub = who.sub;
    request.limit_micro_usd = *who.budget.ai_micro_usd;
    request.window = CurrentWindow(who.budget, now);
    request.micro_usd = estimate;
    request.now = now;
    request.stale_before = now - HoldLifetimeSeconds(config);
    StatusOr<BudgetHoldAnswer> answer = store.AdmitBudgetHold(request);
    if (!answer.ok() && answer.status().error_number() == EBUSY) {
      // Another node held the user's turn (in the middle of an admission) for a second.
      Count(RelayResult::kRefusedInFlight);
      Refused(BudgetRefusal::kAiInFlight);
      return Refusal{http::status::too_many_requests, "rate_limit_error",
                     "corral: the AI budget is busy with concurrent calls; retry shortly", 1};
    }
    if (!answer.ok()) {
      LogError("relay", "cannot read the ledger", {{"error", answer.status().ToString()}});
      Count(RelayResult::kError);
      return Refusal{http::status::internal_server_error, "api_error", "corral: the ledger cannot be read"};
    }
    const BudgetState& state = answer->state;
    switch (answer->verdict) {
      case HoldVerdict::kSpent:
        Count(RelayResult::kRefusedBudget);
        Refused(BudgetRefusal::kAi);
        authority.OnBudgetExhausted(who);
        (void)RecordWebhook(store, webhooks, BudgetExhaustedEvent(who.iss, who.sub, who.sandbox_id, "ai", who.budget,
                                                                  request.limit_micro_usd, state.spent, now));
        return Refusal{http::status::forbidden, "permission_error",
                       "corral: the AI budget of this " + std::string(WindowName(who.budget.window)) +
                           " is spent (USD " + FormatMicroUsd(state.spent) + " of " +
                           FormatMicroUsd(request.limit_micro_usd) + "; the window ends " +
                           IsoTime(request.window.end) + ")"};
      case HoldVerdict::kInFlight:
        LogInfo("relay", "near the budget's end: waiting for calls in flight",
                {{"session", who.session_id}, {"in_flight", std::to_string(state.held_calls)}});
        Count(RelayResult::kRefusedInFlight);
        Refused(BudgetRefusal::kAiInFlight);
        return Refusal{http::status::too_many_requests, "rate_limit_error",
                       "corral: the AI budget is nearly spent and " + std::to_string(state.held_calls) +
                           " call(s) are still being priced; retry shortly",
                       2};
      case HoldVerdict::kAdmit:
        break;
    }
    reservation.emplace(shared_from_this(), answer->hold_id);
    return std::nullopt;
  }

  // The request as the upstream gets it: the operator's key, no hop-by-hop or relay-owned headers.
  http::request<http::string_body> UpstreamRequest(http::request<http::string_body>& request) {
    http::request<http::string_body> forward{request.method(), request.target(), 11};
    for (const auto& field : request) {
      if (!IsRelayOwnedHeader(field.name_string())) forward.insert(field.name_string(), field.value());
    }
    forward.set(http::field::host, upstream->host);
    forward.set("x-api-key", config.api_key);
    forward.set(http::field::accept_encoding, "identity");  // the relay reads the usage
    forward.keep_alive(true);  // the connection is kept for the next call
    forward.body() = std::move(request.body());
    forward.prepare_payload();
    return forward;
  }

  // How long one read or write on either side may wait: relay.timeout, and never past the
  // call's deadline.
  std::chrono::steady_clock::duration Patience(std::chrono::steady_clock::time_point deadline) const {
    const std::chrono::steady_clock::duration left = deadline - std::chrono::steady_clock::now();
    return std::min<std::chrono::steady_clock::duration>(std::max(left, std::chrono::steady_clock::duration::zero()),
                                                         std::chrono::seconds(config.timeout_s));
  }

  awaitable<std::string> OpenTls(beast::ssl_stream<beast::tcp_stream>& stream,
                                 std::chrono::steady_clock::time_point deadline) {
    if (!SSL_set_tlsext_host_name(stream.native_handle(), upstream->host.c_str())) co_return "TLS set-up failed";
    stream.set_verify_callback(asio::ssl::host_name_verification(upstream->host));
    std::string failed = co_await Connect(beast::get_lowest_layer(stream), deadline);
    if (!failed.empty()) co_return failed;
    boost::system::error_code ec;
    beast::get_lowest_layer(stream).expires_after(Patience(deadline));
    co_await stream.async_handshake(asio::ssl::stream_base::client, asio::redirect_error(use_awaitable, ec));
    if (ec) co_return "TLS handshake with " + upstream->host + ": " + ec.message();
    co_return "";
  }

  awaitable<std::string> Connect(beast::tcp_stream& stream, std::chrono::steady_clock::time_point deadline) {
    boost::system::error_code ec;
    tcp::resolver resolver(io);
    auto endpoints = co_await resolver.async_resolve(upstream->host, upstream->port, asio::redirect_error(use_awaitable, ec));
    if (ec) co_return "resolve " + upstream->host + ": " + ec.message();
    stream.expires_after(std::min<std::chrono::steady_clock::duration>(std::chrono::seconds(30), Patience(deadline)));
    co_await stream.async_connect(endpoints, asio::redirect_error(use_awaitable, ec));
    if (ec) co_return "connect to " + upstream->host + ":" + upstream->port + ": " + ec.message();
    stream.socket().set_option(tcp::no_delay(true), ec);
    co_return "";
  }

  enum class Outcome {
    kDone,           // the whole answer reached the agent
    kNoAnswer,       // the upstream took no request or gave no answer: nothing reached the agent
    kUpstreamBroke,  // the answer ended short
    kClientGone,     // the agent hung up
  };

  struct Metered {
    bool streamed = false;
    int status = 0;
    bool upstream_keep_alive = false;
    std::string error;  // kNoAnswer: why
    SseUsageReader sse;
    std::string whole;
  };

  // Sends the request upstream and streams the answer to the client as it comes, metering it.
  // False when either side failed part way (the client connection is then closed).
  template <typename Stream>
  awaitable<Outcome> Exchange(Stream& upstream_stream, beast::tcp_stream& upstream_layer, beast::tcp_stream& client,
                           http::request<http::string_body>& forward, Metered& metered,
                           const std::function<void()>& on_complete, std::chrono::steady_clock::time_point deadline) {
    boost::system::error_code ec;
    upstream_layer.expires_after(Patience(deadline));
    co_await http::async_write(upstream_stream, forward, asio::redirect_error(use_awaitable, ec));
    if (ec) {
      metered.error = "sending to the upstream failed: " + ec.message();
      co_return Outcome::kNoAnswer;
    }
    const auto sent = std::chrono::steady_clock::now();
    beast::flat_buffer upstream_buffer;
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());  // streamed through, not kept
    parser.header_limit(kMaxHeaderBytes);
    upstream_layer.expires_after(Patience(deadline));
    co_await http::async_read_header(upstream_stream, upstream_buffer, parser, asio::redirect_error(use_awaitable, ec));
    if (ec) {
      metered.error = "no answer from the upstream: " + ec.message();
      co_return Outcome::kNoAnswer;
    }
    if (observer != nullptr && !stopped) {
      observer->OnUpstreamLatency(std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count());
    }
    const auto& head = parser.get();
    metered.upstream_keep_alive = head.keep_alive();
    metered.status = head.result_int();
    metered.streamed = beast::iequals(head[http::field::content_type].substr(0, 17), "text/event-stream");
    http::response<http::buffer_body> response;
    response.version(11);
    response.result(head.result_int());  // as a number: result() is `unknown` for 529 and others
    for (const auto& field : head) {
      if (!IsRelayOwnedHeader(field.name_string())) response.insert(field.name_string(), field.value());
    }
    response.chunked(true);
    response.keep_alive(true);
    http::response_serializer<http::buffer_body> serializer{response};
    client.expires_after(Patience(deadline));
    co_await http::async_write_header(client, serializer, asio::redirect_error(use_awaitable, ec));
    if (ec) co_return Outcome::kClientGone;
    char chunk[kChunkBytes];
    for (;;) {
      size_t got = 0;
      if (!parser.is_done()) {
        parser.get().body().data = chunk;
        parser.get().body().size = sizeof(chunk);
        upstream_layer.expires_after(Patience(deadline));
        // read_some: whatever has come (one event of a slow stream), not a full buffer.
        co_await http::async_read_some(upstream_stream, upstream_buffer, parser,
                                       asio::redirect_error(use_awaitable, ec));
        if (ec == http::error::need_buffer) ec = {};
        if (ec) co_return Outcome::kUpstreamBroke;  // the client sees its answer end short
        got = sizeof(chunk) - parser.get().body().size;
        if (metered.streamed) {
          metered.sse.Feed(std::string_view(chunk, got));
        } else if (metered.whole.size() + got <= kMaxWholeBody) {
          metered.whole.append(chunk, got);
        }
      }
      if (parser.is_done()) on_complete();
      response.body().data = got > 0 ? chunk : nullptr;
      response.body().size = got;
      response.body().more = !parser.is_done();
      client.expires_after(Patience(deadline));
      co_await http::async_write(client, serializer, asio::redirect_error(use_awaitable, ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) co_return Outcome::kClientGone;  // what was used so far is still paid for
      if (serializer.is_done()) co_return Outcome::kDone;
    }
  }

  // Sends `forward` upstream (on an idle kept connection when there is one) and streams the
  // answer to the agent. A kept connection the upstream has closed meanwhile fails before any
  // answer: once, the call is made again on a new one. When no connection can be made,
  // `unreachable` says why.
  awaitable<Outcome> Forward(beast::tcp_stream& client, http::request<http::string_body>& forward, Metered& metered,
                             const std::function<void()>& debit, std::string& unreachable,
                             std::chrono::steady_clock::time_point deadline) {
    Outcome outcome = Outcome::kNoAnswer;
    for (int attempt = 0; attempt < 2; ++attempt) {
      bool reused = false;
      metered = Metered{};
      if (upstream->tls) {
        std::unique_ptr<beast::ssl_stream<beast::tcp_stream>> stream;
        if (!idle_tls.empty() && attempt == 0) {
          stream = std::move(idle_tls.back());
          idle_tls.pop_back();
          reused = true;
        } else {
          stream = std::make_unique<beast::ssl_stream<beast::tcp_stream>>(io, tls);
          unreachable = co_await OpenTls(*stream, deadline);
          if (!unreachable.empty()) co_return Outcome::kNoAnswer;
        }
        outcome = co_await Exchange(*stream, beast::get_lowest_layer(*stream), client, forward, metered, debit, deadline);
        if (outcome == Outcome::kDone && metered.upstream_keep_alive && idle_tls.size() < kMaxIdle && !stopped) {
          idle_tls.push_back(std::move(stream));
        }
      } else {
        std::unique_ptr<beast::tcp_stream> stream;
        if (!idle_plain.empty() && attempt == 0) {
          stream = std::move(idle_plain.back());
          idle_plain.pop_back();
          reused = true;
        } else {
          stream = std::make_unique<beast::tcp_stream>(io);
          unreachable = co_await Connect(*stream, deadline);
          if (!unreachable.empty()) co_return Outcome::kNoAnswer;
        }
        outcome = co_await Exchange(*stream, *stream, client, forward, metered, debit, deadline);
        if (outcome == Outcome::kDone && metered.upstream_keep_alive && idle_plain.size() < kMaxIdle && !stopped) {
          idle_plain.push_back(std::move(stream));
        }
      }
      if (outcome != Outcome::kNoAnswer || !reused) break;
    }
    co_return outcome;
  }

  // Prices the call and writes its ledger row, as its hold goes (`hold`: none for a call that
  // holds nothing).
  void Debit(const RelayClient& who, const std::string& requested_model, const ModelPrice& requested_price,
             const Metered& metered, Reservation* hold) {
    ModelUsage usage = metered.streamed ? metered.sse.usage() : UsageFromMessage(metered.whole);
    if (usage.empty()) return;
    if (usage.model.empty()) usage.model = requested_model;
    const std::optional<std::string> price_key = config.prices.KeyFor(usage.model);
    const ModelPrice price = config.prices.Find(usage.model).value_or(requested_price);
    const int64_t cost = CostMicroUsd(price, usage);
    LedgerRow row;
    row.iss = who.iss;
    row.sub = who.sub;
    row.kind = "ai";
    row.amount = cost;
    row.at = static_cast<int64_t>(time(nullptr));
    row.sandbox_id = who.sandbox_id;
    row.session_id = who.session_id;
    row.model = usage.model;
    row.input_tokens = usage.input_tokens;
    row.output_tokens = usage.output_tokens;
    row.cache_write_tokens = usage.cache_creation_input_tokens;
    row.cache_read_tokens = usage.cache_read_input_tokens;
    StatusOr<int64_t> added = hold != nullptr ? hold->Settle(row) : store.AddLedger(row);
    if (!added.ok()) {
      LogError("relay", "cannot write the ledger", {{"session", who.session_id}, {"error", added.status().ToString()}});
    }
    if (observer != nullptr) observer->OnModelUsage(price_key.value_or(""), usage, cost);
    authority.OnUsage(who, usage, cost);
  }
};

ModelRelay::ModelRelay(asio::io_context& io, RelayConfig config, Store& store, RelayAuthority& authority)
    : config_(config),
      impl_(std::make_shared<Impl>(io, std::move(config), store, authority, requests_)) {}

void ModelRelay::Reload(PriceTable prices, uint64_t requests_per_minute) {
  config_.prices = prices;
  config_.requests_per_minute = requests_per_minute;
  impl_->config.prices = std::move(prices);
  if (impl_->config.requests_per_minute != requests_per_minute) {
    impl_->config.requests_per_minute = requests_per_minute;
    impl_->limiter.SetPerMinute(requests_per_minute);
  }
}

void ModelRelay::SetObserver(RelayObserver* observer) { impl_->observer = observer; }

void ModelRelay::SetWebhooks(WebhookOutbox* webhooks) { impl_->webhooks = webhooks; }

Status ModelRelay::Recover() {
  StatusOr<int64_t> released = impl_->store.ReleaseNodeBudgetHolds();
  if (!released.ok()) return released.status();
  if (*released > 0) {
    LogInfo("relay", "released the budget holds of calls that died with the last run",
            {{"holds", std::to_string(*released)}});
  }
  return Status();
}

std::string_view RelayResultName(RelayResult result) {
  static constexpr std::string_view kNames[] = {
      "forwarded",         "upstream_error", "client_gone",     "refused_budget", "refused_in_flight",
      "refused_rate",      "refused_unpriced", "refused_invalid", "refused_key",  "error"};
  static_assert(std::size(kNames) == static_cast<size_t>(RelayResult::kError) + 1);
  return EnumName(result, kNames);
}

ModelRelay::~ModelRelay() {
  impl_->stopped = true;
  impl_->observer = nullptr;
  impl_->acceptor.Close();
  for (auto& [id, sandbox] : impl_->sandboxes) {
    boost::system::error_code ec;
    for (const auto& client : sandbox.clients) client->socket().close(ec);
  }
  impl_->sandboxes.clear();
  impl_->idle_plain.clear();
  impl_->idle_tls.clear();
}

void ModelRelay::Serve(const std::string& sandbox_id, std::vector<UniqueFd> listeners) {
  Forget(sandbox_id);
  if (listeners.empty()) return;
  // The first listener is the relay's port (Ports()); a sandbox started with other ports by an
  // earlier configuration is served on what it has.
  if (impl_->acceptor.Serve(sandbox_id, std::move(listeners[0]))) impl_->sandboxes[sandbox_id] = Impl::Sandbox{};
}

void ModelRelay::Forget(const std::string& sandbox_id) {
  auto it = impl_->sandboxes.find(sandbox_id);
  if (it == impl_->sandboxes.end()) return;
  impl_->acceptor.Forget(sandbox_id);
  boost::system::error_code ec;
  for (const auto& client : it->second.clients) client->socket().close(ec);
  impl_->sandboxes.erase(it);
}

size_t ModelRelay::open_connections() const {
  size_t n = 0;
  for (const auto& [id, sandbox] : impl_->sandboxes) n += sandbox.clients.size();
  return n;
}

}  // namespace corral::supervisor
