// What the JWT tests share: the issuers and their secrets, a verify policy at a fixed now, and
// tokens made, signed, cut and tampered with (jwt_test.cc: the token; jwt_claims_test.cc: its
// scope, limits and budget claims).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "api/jwt.h"
#include "api/jwt_internal.h"

namespace corral::api::jwt_test {

using json = nlohmann::json;

inline constexpr char kIssuer[] = "acme";
inline constexpr char kSecret[] = "0123456789abcdef0123456789abcdef";  // 32 bytes
inline constexpr char kOtherIssuer[] = "globex";
inline constexpr char kOtherSecret[] = "fedcba9876543210fedcba9876543210";
inline constexpr int64_t kNow = 1700000000;
inline constexpr char kHs256Header[] = R"({"alg":"HS256","typ":"JWT"})";

inline std::optional<std::string> Lookup(std::string_view issuer) {
  if (issuer == kIssuer) return kSecret;
  if (issuer == kOtherIssuer) return kOtherSecret;
  return std::nullopt;
}

inline VerifyPolicy Policy() {
  VerifyPolicy policy;
  policy.now = kNow;
  policy.max_clock_skew_s = 60;
  policy.max_lifetime_s = 24 * 3600;
  return policy;
}

inline json ValidPayload() {
  return {{"iss", kIssuer}, {"sub", "user-1"}, {"iat", kNow}, {"exp", kNow + 3600}};
}

inline std::string Mint(const json& payload, std::string_view secret = kSecret) {
  StatusOr<std::string> token = MintToken(payload, secret);
  EXPECT_TRUE(token.ok()) << token.status().ToString();
  return token.ok() ? *token : std::string();
}

inline std::string Hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

// Signs arbitrary header and payload text, for tokens MintToken would never produce.
inline std::string SignRaw(std::string_view header, std::string_view payload,
                    std::string_view secret = kSecret) {
  std::string input = Base64UrlEncode(header) + "." + Base64UrlEncode(payload);
  return input + "." + Base64UrlEncode(internal::HmacSha256(secret, input).value());
}

inline std::string SignJson(const json& payload) { return SignRaw(kHs256Header, payload.dump()); }

// "OK" or the error message: the tests compare against the exact reason.
inline std::string Outcome(std::string_view token, const VerifyPolicy& policy = Policy()) {
  StatusOr<Claims> claims = VerifyToken(token, Lookup, policy);
  return claims.ok() ? "OK" : claims.status().message();
}

inline std::string OutcomeOf(const json& payload, const VerifyPolicy& policy = Policy()) {
  return Outcome(Mint(payload), policy);
}

inline json With(std::string_view key, json value) {
  json payload = ValidPayload();
  payload[std::string(key)] = std::move(value);
  return payload;
}

inline json Without(std::string_view key) {
  json payload = ValidPayload();
  payload.erase(std::string(key));
  return payload;
}

inline std::string ReplacePart(std::string_view token, int index, std::string_view part) {
  std::string parts[3];
  size_t first = token.find('.'), second = token.find('.', first + 1);
  parts[0] = token.substr(0, first);
  parts[1] = token.substr(first + 1, second - first - 1);
  parts[2] = token.substr(second + 1);
  parts[index] = part;
  return parts[0] + "." + parts[1] + "." + parts[2];
}

inline std::string Part(std::string_view token, int index) {
  size_t first = token.find('.'), second = token.find('.', first + 1);
  if (index == 0) return std::string(token.substr(0, first));
  if (index == 1) return std::string(token.substr(first + 1, second - first - 1));
  return std::string(token.substr(second + 1));
}

}  // namespace corral::api::jwt_test
