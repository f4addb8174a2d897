#include "api/jwt.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/random.h>

#include <algorithm>
#include <set>
#include <vector>
#include <array>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "api/jwt_internal.h"
#include "supervisor/egress/egress_policy.h"

namespace corral::api {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxTokenBytes = 8192;
constexpr size_t kMacBytes = 32;  // SHA-256 output
constexpr size_t kMinSecretBytes = 32;
constexpr size_t kSecretRandomBytes = 32;
constexpr size_t kMaxIssBytes = 128;
constexpr size_t kMaxSubBytes = 256;
constexpr double kMaxCpus = 1e6;  // keeps llround(cpus * 1000) far inside int64
constexpr std::string_view kMintHeader = R"({"alg":"HS256","typ":"JWT"})";

Status FieldError(std::string_view what, std::string_view why) {
  return Status::Error(std::string(what) + " " + std::string(why));
}

// ---- Shape, header, signature ----

struct TokenParts {
  std::string_view header;
  std::string_view payload;
  std::string_view signature;
  std::string_view signing_input;  // "header.payload", the bytes the MAC covers
};

StatusOr<TokenParts> SplitToken(std::string_view token) {
  if (token.size() > kMaxTokenBytes) return Status::Error("token too large");
  size_t first = token.find('.');
  size_t second = first == std::string_view::npos ? first : token.find('.', first + 1);
  if (second == std::string_view::npos || token.find('.', second + 1) != std::string_view::npos) {
    return Status::Error("token not three dot-separated parts");
  }
  TokenParts parts{token.substr(0, first), token.substr(first + 1, second - first - 1),
                   token.substr(second + 1), token.substr(0, second)};
  if (parts.header.empty() || parts.payload.empty() || parts.signature.empty()) {
    return Status::Error("token has an empty part");
  }
  return parts;
}

StatusOr<json> DecodeJsonObject(std::string_view part, std::string_view what) {
  std::optional<std::string> text = Base64UrlDecode(part);
  if (!text) return FieldError(what, "not base64url");
  // The non-throwing parse: malformed JSON (including invalid UTF-8) yields a "discarded" value,
  // which is not an object. A name twice in one object is refused (RFC 7515 §5.2 allows either
  // that or "the last one wins"; a verifier and the issuer's library that read different values
  // of "alg" or "sub" is how confusion attacks start).
  std::vector<std::set<std::string>> names;  // one per open object
  bool duplicate = false;
  json::parser_callback_t check = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      names.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      if (!names.empty()) names.pop_back();
    } else if (event == json::parse_event_t::key && !names.empty() && parsed.is_string()) {
      if (!names.back().insert(parsed.get<std::string>()).second) duplicate = true;
    }
    return true;
  };
  json value = json::parse(*text, check, /*allow_exceptions=*/false);
  if (!value.is_object()) return FieldError(what, "not a JSON object");
  if (duplicate) return FieldError(what, "has a name twice");
  return value;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    return (x >= 'a' && x <= 'z' ? x - 32 : x) == (y >= 'a' && y <= 'z' ? y - 32 : y);
  });
}

// The algorithm is pinned: the header may only confirm HS256, never choose. "crit" names
// extensions the verifier must understand (RFC 7515 §4.1.11), such as "b64":false; we know none.
Status CheckHeader(const json& header) {
  auto alg = header.find("alg");
  if (alg == header.end()) return Status::Error("missing alg");
  if (!alg->is_string() || alg->get_ref<const std::string&>() != "HS256") {
    return Status::Error("alg not HS256");
  }
  if (header.contains("crit")) return Status::Error("crit header not supported");
  // Headers that carry or point at a key: the issuer's secret is the only key, so a token that
  // offers another is refused, not ignored. "kid" is harmless (it is never used to find a file,
  // a row or a URL) but must look like an identifier.
  for (const char* key_header : {"jku", "jwk", "x5u", "x5c", "x5t", "x5t#S256"}) {
    if (header.contains(key_header)) return Status::Error(std::string(key_header) + " header not supported");
  }
  if (auto kid = header.find("kid"); kid != header.end()) {
    static constexpr std::string_view kKidChars =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-";
    if (!kid->is_string() || kid->get_ref<const std::string&>().empty() ||
        kid->get_ref<const std::string&>().size() > 128 ||
        kid->get_ref<const std::string&>().find_first_not_of(kKidChars) != std::string::npos) {
      return Status::Error("kid not an identifier");
    }
  }
  auto typ = header.find("typ");
  if (typ != header.end() &&
      !(typ->is_string() && EqualsIgnoreCase(typ->get_ref<const std::string&>(), "JWT"))) {
    return Status::Error("typ not JWT");
  }
  return Status();
}

StatusOr<TokenParts> ParseShapeAndHeader(std::string_view token) {
  ASSIGN_OR_RETURN(TokenParts parts, SplitToken(token));
  ASSIGN_OR_RETURN(json header, DecodeJsonObject(parts.header, "header"));
  RETURN_IF_ERROR(CheckHeader(header));
  return parts;
}

Status CheckSignature(const TokenParts& parts, std::string_view secret) {
  if (secret.size() < kMinSecretBytes) return Status::Error("issuer secret shorter than 32 bytes");
  std::optional<std::string> given = Base64UrlDecode(parts.signature);
  if (!given) return Status::Error("signature not base64url");
  if (given->size() != kMacBytes) return Status::Error("bad signature");
  std::optional<std::string> expected = internal::HmacSha256(secret, parts.signing_input);
  if (!expected) return Status::Error("HMAC-SHA256 failed");
  // Constant time: a byte-by-byte early exit would let a caller find the MAC one byte at a time.
  if (CRYPTO_memcmp(given->data(), expected->data(), kMacBytes) != 0) {
    return Status::Error("bad signature");
  }
  return Status();
}

// ---- Claims ----

StatusOr<std::string> IdentityString(const json& payload, const char* name, size_t max_bytes) {
  auto it = payload.find(name);
  if (it == payload.end()) return FieldError("missing", name);
  if (!it->is_string()) return FieldError(name, "not a string");
  const std::string& value = it->get_ref<const std::string&>();
  if (value.empty()) return FieldError("empty", name);
  if (value.size() > max_bytes) return FieldError(name, "too long");
  // JSON's \u0000 decodes to a real NUL, which AuthContext::UserKey uses as its separator.
  if (value.find('\0') != std::string::npos) return FieldError(name, "contains NUL");
  return value;
}

// JSON integers only: 5.0, 5e0 and "5" are rejected. nlohmann keeps non-negative literals as
// uint64, so the range is checked before converting.
StatusOr<int64_t> IntegerValue(const json& value, std::string_view name) {
  if (!value.is_number_integer()) return FieldError(name, "not an integer");
  if (value.is_number_unsigned() && value.get<uint64_t>() > uint64_t{INT64_MAX}) {
    return FieldError(name, "out of range");
  }
  return value.get<int64_t>();
}

StatusOr<std::optional<int64_t>> OptionalInteger(const json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end()) return std::optional<int64_t>();
  ASSIGN_OR_RETURN(int64_t value, IntegerValue(*it, name));
  return std::optional<int64_t>(value);
}

// Claims and policy are untrusted int64s; comparing in 128 bits means no sum can overflow.
Status CheckTimes(const Claims& claims, const VerifyPolicy& policy) {
  using Wide = __int128;
  const Wide now = policy.now;
  const Wide skew = policy.max_clock_skew_s;
  if (now > Wide{claims.exp} + skew) return Status::Error("expired");
  if (claims.nbf && Wide{*claims.nbf} > now + skew) return Status::Error("not yet valid (nbf)");
  if (claims.iat && Wide{*claims.iat} > now + skew) return Status::Error("issued in the future");
  Wide lifetime = Wide{claims.exp} - (claims.iat ? Wide{*claims.iat} : now);
  if (lifetime > policy.max_lifetime_s) return Status::Error("lifetime too long");
  return Status();
}

Status ParseTimes(const json& payload, const VerifyPolicy& policy, Claims& claims) {
  auto exp = payload.find("exp");
  if (exp == payload.end()) return Status::Error("missing exp");
  ASSIGN_OR_RETURN(claims.exp, IntegerValue(*exp, "exp"));
  ASSIGN_OR_RETURN(claims.iat, OptionalInteger(payload, "iat"));
  ASSIGN_OR_RETURN(claims.nbf, OptionalInteger(payload, "nbf"));
  return CheckTimes(claims, policy);
}

StatusOr<std::vector<std::string>> ParseScopes(const json& payload) {
  auto it = payload.find("scope");
  if (it == payload.end()) {
    return std::vector<std::string>{kScopeSandboxes, kScopeExec, kScopeTerminal, kScopeFiles, kScopeSessions,
                                    kScopeSecrets};
  }
  std::vector<std::string> scopes;
  if (it->is_string()) {
    std::string_view text = it->get_ref<const std::string&>();
    while (!text.empty()) {
      size_t space = std::min(text.find(' '), text.size());
      if (space > 0) scopes.emplace_back(text.substr(0, space));
      text.remove_prefix(std::min(space + 1, text.size()));
    }
  } else if (it->is_array()) {
    for (const json& entry : *it) {
      if (!entry.is_string() || entry.get_ref<const std::string&>().empty()) {
        return Status::Error("scope entry not a non-empty string");
      }
      scopes.push_back(entry.get<std::string>());
    }
  } else {
    return Status::Error("scope not a string or array");
  }
  return scopes;
}

// An integer limit: a per-user quota of UserCaps, or (quota null) a per-sandbox resource limit.
struct LimitField {
  const char* name;
  std::optional<uint64_t> supervisor::UserCaps::*quota;
  std::optional<uint64_t> isolation::ResourceLimits::*resource;
};

constexpr LimitField kLimitFields[] = {
    {"sandboxes", &supervisor::UserCaps::sandboxes, nullptr},
    {"memory_bytes", nullptr, &isolation::ResourceLimits::memory_bytes},
    {"pids", nullptr, &isolation::ResourceLimits::pids},
    {"disk_bytes", nullptr, &isolation::ResourceLimits::disk_bytes},
    {"idle_timeout_s", &supervisor::UserCaps::idle_timeout_s, nullptr},
    {"commands", &supervisor::UserCaps::commands, nullptr},
    {"sessions", &supervisor::UserCaps::sessions, nullptr},
};

constexpr size_t kMaxImageLimits = 64;        // limits.images entries
constexpr size_t kMaxImageLimitChars = 255;   // characters in one of them

StatusOr<uint64_t> CpusToMillicores(const json& value) {
  double cpus = value.is_number() ? value.get<double>() : 0;
  // NaN fails every comparison, so !(cpus > 0) also catches it; 1e400 parses as inf.
  if (!(cpus > 0) || !std::isfinite(cpus) || cpus > kMaxCpus) {
    return Status::Error("limits.cpus not a positive number");
  }
  long long millicores = std::llround(cpus * 1000);
  if (millicores == 0) return Status::Error("limits.cpus below one millicore");
  return static_cast<uint64_t>(millicores);
}

// limits.images: the image names a user may pick ("python:3.12", "acme/*", "host"); the sandbox
// manager matches them. An empty array allows no image at all.
StatusOr<std::vector<std::string>> ParseImageLimits(const json& value) {
  if (!value.is_array()) return Status::Error("limits.images not an array of strings");
  if (value.size() > kMaxImageLimits) {
    return Status::Error("limits.images has more than " + std::to_string(kMaxImageLimits) + " entries");
  }
  std::vector<std::string> images;
  for (const json& entry : value) {
    if (!entry.is_string() || entry.get_ref<const std::string&>().empty()) {
      return Status::Error("limits.images entry not a non-empty string");
    }
    const std::string& name = entry.get_ref<const std::string&>();
    if (name.size() > kMaxImageLimitChars) {
      return Status::Error("limits.images entry longer than " + std::to_string(kMaxImageLimitChars) + " characters");
    }
    images.push_back(name);
  }
  return images;
}

StatusOr<supervisor::UserCaps> ParseLimits(const json& payload) {
  supervisor::UserCaps limits;
  auto it = payload.find("limits");
  if (it == payload.end()) return limits;
  if (!it->is_object()) return Status::Error("limits not an object");
  for (const LimitField& f : kLimitFields) {
    auto value = it->find(f.name);
    if (value == it->end()) continue;
    // A negative literal is number_integer, never number_unsigned.
    if (!value->is_number_unsigned()) {
      return FieldError(std::string("limits.") + f.name, "not a non-negative integer");
    }
    (f.quota != nullptr ? limits.*f.quota : limits.resources.*f.resource) = value->get<uint64_t>();
  }
  if (auto cpus = it->find("cpus"); cpus != it->end()) {
    ASSIGN_OR_RETURN(limits.resources.cpu_millicores, CpusToMillicores(*cpus));
  }
  if (auto egress = it->find("egress"); egress != it->end()) {
    auto rules = supervisor::ParseEgressRulesChange(*egress, "limits.egress");
    if (!rules.ok()) return Status::Error(std::string(rules.status().message()));
    limits.egress = std::move(*rules);
  }
  if (auto images = it->find("images"); images != it->end()) {
    ASSIGN_OR_RETURN(limits.images, ParseImageLimits(*images));
  }
  return limits;
}

// budget.<name>, a non-negative number of units, in 1/`scale` of them (USD as micro-dollars).
StatusOr<std::optional<int64_t>> OptionalAmount(const json& budget, const char* name, double scale) {
  auto it = budget.find(name);
  if (it == budget.end()) return std::optional<int64_t>();
  double amount = it->is_number() ? it->get<double>() : -1;
  if (!(amount >= 0) || !std::isfinite(amount)) {
    return FieldError(std::string("budget.") + name, "not a non-negative number");
  }
  return std::optional<int64_t>(static_cast<int64_t>(std::llround(amount * scale)));
}

StatusOr<supervisor::Budget> ParseBudget(const json& payload) {
  supervisor::Budget budget;
  auto it = payload.find("budget");
  if (it == payload.end()) return budget;
  if (!it->is_object()) return Status::Error("budget not an object");
  ASSIGN_OR_RETURN(budget.ai_micro_usd, OptionalAmount(*it, "ai_usd", 1e6));
  ASSIGN_OR_RETURN(budget.compute_ms, OptionalAmount(*it, "compute_s", 1e3));
  if (auto window = it->find("window"); window != it->end()) {
    auto known = window->is_string() ? supervisor::ParseWindow(window->get_ref<const std::string&>())
                                     : StatusOr<supervisor::BudgetWindow>(Status::Error("not a string"));
    if (!known.ok()) return Status::Error("budget.window not hour, day, week or month");
    budget.window = *known;
  }
  if (auto start = it->find("window_start"); start != it->end()) {
    ASSIGN_OR_RETURN(budget.window_start, IntegerValue(*start, "budget.window_start"));
  }
  return budget;
}

// Runs only once the signature has been checked: everything here is the issuer's word.
StatusOr<Claims> ParseClaims(const json& payload, const VerifyPolicy& policy) {
  Claims claims;
  ASSIGN_OR_RETURN(claims.sub, IdentityString(payload, "sub", kMaxSubBytes));
  RETURN_IF_ERROR(ParseTimes(payload, policy, claims));
  if (auto jti = payload.find("jti"); jti != payload.end()) {
    if (!jti->is_string()) return Status::Error("jti not a string");
    claims.jti = jti->get<std::string>();
  }
  ASSIGN_OR_RETURN(claims.scopes, ParseScopes(payload));
  ASSIGN_OR_RETURN(claims.limits, ParseLimits(payload));
  ASSIGN_OR_RETURN(claims.budget, ParseBudget(payload));
  return claims;
}

// getrandom(2) without GRND_NONBLOCK blocks only until the kernel pool is first seeded; a
// request of at most 256 bytes is then never short. EINTR is possible while it blocks.
bool FillRandom(unsigned char* buffer, size_t size) {
  size_t filled = 0;
  while (filled < size) {
    ssize_t got = getrandom(buffer + filled, size - filled, 0);
    if (got > 0) {
      filled += static_cast<size_t>(got);
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    // ENOSYS (kernel < 3.17) or a seccomp filter's EPERM: OpenSSL's DRBG seeds itself from
    // /dev/urandom instead.
    return RAND_bytes(buffer, static_cast<int>(size)) == 1;
  }
  return true;
}

}  // namespace

namespace internal {

std::optional<std::string> HmacSha256(std::string_view key, std::string_view data) {
  if (key.size() > INT_MAX) return std::nullopt;  // HMAC() takes the key length as an int
  // To OpenSSL a NULL key means "keep the previous key", which a one-shot HMAC() does not have:
  // 3.0 fails when key and data are both NULL, as a default-constructed string_view's are. A
  // non-NULL pointer with length 0 is the empty key.
  const char* key_bytes = key.data() != nullptr ? key.data() : "";
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_size = 0;
  if (HMAC(EVP_sha256(), key_bytes, static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac,
           &mac_size) == nullptr ||
      mac_size != kMacBytes) {
    return std::nullopt;
  }
  return std::string(reinterpret_cast<const char*>(mac), mac_size);
}

Status VerifySignature(std::string_view token, std::string_view secret) {
  ASSIGN_OR_RETURN(TokenParts parts, ParseShapeAndHeader(token));
  return CheckSignature(parts, secret);
}

}  // namespace internal

bool Claims::HasScope(std::string_view scope) const {
  return std::find(scopes.begin(), scopes.end(), scope) != scopes.end();
}

StatusOr<Claims> VerifyToken(std::string_view token, const SecretLookup& lookup,
                             const VerifyPolicy& policy) {
  ASSIGN_OR_RETURN(TokenParts parts, ParseShapeAndHeader(token));
  ASSIGN_OR_RETURN(json payload, DecodeJsonObject(parts.payload, "payload"));
  // Not yet trusted: iss only chooses which secret checks the signature.
  ASSIGN_OR_RETURN(std::string iss, IdentityString(payload, "iss", kMaxIssBytes));
  if (!lookup) return Status::Error("no issuer lookup configured");
  std::optional<std::string> secret = lookup(iss);
  if (!secret) return Status::Error("unknown issuer");
  Status signature = CheckSignature(parts, *secret);
  OPENSSL_cleanse(secret->data(), secret->size());
  RETURN_IF_ERROR(signature);
  ASSIGN_OR_RETURN(Claims claims, ParseClaims(payload, policy));
  claims.iss = std::move(iss);
  return claims;
}

StatusOr<std::string> MintToken(const nlohmann::json& payload, std::string_view secret) {
  if (!payload.is_object()) return Status::Error("payload not a JSON object");
  if (secret.size() < kMinSecretBytes) return Status::Error("secret shorter than 32 bytes");
  std::string payload_text;
  try {
    payload_text = payload.dump();
  } catch (const json::exception&) {  // type_error 316: a string that is not valid UTF-8
    return Status::Error("payload not valid UTF-8");
  }
  std::string signing_input = Base64UrlEncode(kMintHeader) + "." + Base64UrlEncode(payload_text);
  std::optional<std::string> mac = internal::HmacSha256(secret, signing_input);
  if (!mac) return Status::Error("HMAC-SHA256 failed");
  std::string token = signing_input + "." + Base64UrlEncode(*mac);
  if (token.size() > kMaxTokenBytes) return Status::Error("token too large");
  return token;
}

std::string GenerateSecret() {
  std::array<unsigned char, kSecretRandomBytes> bytes;
  if (!FillRandom(bytes.data(), bytes.size())) {
    // No source of randomness at all; a weak secret would be worse than no daemon.
    std::fputs("corral: GenerateSecret: no kernel randomness\n", stderr);
    std::abort();
  }
  std::string secret = Base64UrlEncode({reinterpret_cast<const char*>(bytes.data()), bytes.size()});
  OPENSSL_cleanse(bytes.data(), bytes.size());
  return secret;
}

}  // namespace corral::api
