#include "api/jwt.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <set>
#include <string>

#include "api/jwt_internal.h"
#include "tests/unit/jwt_test_util.h"

namespace corral::api {
namespace {

using ::testing::HasSubstr;
using namespace jwt_test;  // NOLINT: the shared tokens and helpers

// ---- Round trip and minting ----

TEST(JwtTest, RoundTripCarriesEveryClaim) {
  json payload = ValidPayload();
  payload["nbf"] = kNow - 10;
  payload["jti"] = "token-42";
  payload["scope"] = "exec files";
  payload["limits"] = {{"sandboxes", 3},     {"memory_bytes", 1073741824}, {"cpus", 1.5},
                       {"pids", 256},        {"disk_bytes", 5368709120},   {"idle_timeout_s", 600},
                       {"commands", 4}};
  payload["budget"] = {
      {"ai_usd", 2.5}, {"compute_s", 3600}, {"window", "day"}, {"window_start", kNow - 100}};
  payload["unknown_claim"] = {{"ignored", true}};

  StatusOr<Claims> claims = VerifyToken(Mint(payload), Lookup, Policy());
  ASSERT_TRUE(claims.ok()) << claims.status().ToString();
  EXPECT_EQ(claims->iss, "acme");
  EXPECT_EQ(claims->sub, "user-1");
  EXPECT_EQ(claims->exp, kNow + 3600);
  EXPECT_EQ(claims->iat, kNow);
  EXPECT_EQ(claims->nbf, kNow - 10);
  EXPECT_EQ(claims->jti, "token-42");
  EXPECT_EQ(claims->scopes, (std::vector<std::string>{"exec", "files"}));
  EXPECT_TRUE(claims->HasScope(kScopeExec));
  EXPECT_FALSE(claims->HasScope(kScopeTerminal));
  EXPECT_EQ(claims->limits.sandboxes, 3u);
  EXPECT_EQ(claims->limits.resources.memory_bytes, 1073741824u);
  EXPECT_EQ(claims->limits.resources.cpu_millicores, 1500u);
  EXPECT_EQ(claims->limits.resources.pids, 256u);
  EXPECT_EQ(claims->limits.resources.disk_bytes, 5368709120u);
  EXPECT_EQ(claims->limits.idle_timeout_s, 600u);
  EXPECT_EQ(claims->limits.commands, 4u);
  EXPECT_EQ(claims->budget.ai_micro_usd, 2500000);  // USD 2.5
  EXPECT_EQ(claims->budget.compute_ms, 3600000);    // 3600 s
  EXPECT_EQ(claims->budget.window, supervisor::BudgetWindow::kDay);
  EXPECT_EQ(claims->budget.window_start, kNow - 100);
}

TEST(JwtTest, MinimalTokenHasDefaultsAndNoOptionalClaims) {
  StatusOr<Claims> claims = VerifyToken(Mint(Without("iat")), Lookup, Policy());
  ASSERT_TRUE(claims.ok()) << claims.status().ToString();
  EXPECT_FALSE(claims->iat);
  EXPECT_FALSE(claims->nbf);
  EXPECT_EQ(claims->jti, "");
  EXPECT_FALSE(claims->limits.sandboxes);
  EXPECT_FALSE(claims->limits.resources.cpu_millicores);
  EXPECT_FALSE(claims->budget.ai_micro_usd);
  EXPECT_EQ(claims->budget, supervisor::Budget{});  // no budget claim: no amounts, a day's window
  EXPECT_FALSE(claims->budget.window_start);
}

TEST(JwtTest, MintedHeaderIsExactlyHs256Jwt) {
  std::string token = Mint(ValidPayload());
  EXPECT_EQ(Base64UrlDecode(Part(token, 0)), kHs256Header);
  EXPECT_EQ(json::parse(*Base64UrlDecode(Part(token, 1))), ValidPayload());
}

// Expected token computed once, outside this test, with Python's hmac, hashlib and base64 over
// the compact, key-sorted payload (nlohmann::json sorts object keys too).
TEST(JwtTest, MintMatchesAnIndependentImplementation) {
  json payload = {{"sub", "user-1"}, {"iss", "acme"}, {"exp", 2000000000}};
  EXPECT_EQ(Mint(payload, "0123456789abcdef0123456789abcdef"),
            "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
            "eyJleHAiOjIwMDAwMDAwMDAsImlzcyI6ImFjbWUiLCJzdWIiOiJ1c2VyLTEifQ."
            "tooRDWcsNBQX2jXucwIUfS2jCmne3ACN7Tak_dQFPnA");
}

TEST(JwtTest, MintSignsHeaderDotPayloadWithHmacSha256) {
  std::string token = Mint(ValidPayload());
  std::string input = Part(token, 0) + "." + Part(token, 1);
  EXPECT_EQ(Base64UrlDecode(Part(token, 2)), internal::HmacSha256(kSecret, input));
  EXPECT_NE(Base64UrlDecode(Part(token, 2)), internal::HmacSha256(kOtherSecret, input));
}

TEST(JwtTest, MintRejectsNonObjectPayloadsAndShortSecrets) {
  EXPECT_TRUE(MintToken(json::object(), kSecret).ok());
  EXPECT_FALSE(MintToken(json::array({1, 2}), kSecret).ok());
  EXPECT_FALSE(MintToken("a string", kSecret).ok());
  EXPECT_FALSE(MintToken(json(), kSecret).ok());

  std::string secret(32, 's');
  EXPECT_TRUE(MintToken(ValidPayload(), secret).ok());
  StatusOr<std::string> short_secret = MintToken(ValidPayload(), secret.substr(0, 31));
  ASSERT_FALSE(short_secret.ok());
  EXPECT_THAT(short_secret.status().message(), HasSubstr("32 bytes"));
  EXPECT_FALSE(MintToken(ValidPayload(), "").ok());
}

TEST(JwtTest, MintReportsInvalidUtf8InsteadOfThrowing) {
  EXPECT_TRUE(MintToken(With("sub", "caf\xc3\xa9"), kSecret).ok());
  StatusOr<std::string> token = MintToken(With("sub", "caf\xe9"), kSecret);
  ASSERT_FALSE(token.ok());
  EXPECT_THAT(token.status().message(), HasSubstr("UTF-8"));
}

TEST(JwtTest, MintRefusesTokensTooLargeToVerify) {
  EXPECT_TRUE(MintToken(With("pad", std::string(5000, 'x')), kSecret).ok());
  EXPECT_EQ(MintToken(With("pad", std::string(7000, 'x')), kSecret).status().message(),
            "token too large");
}

// ---- Header ----

TEST(JwtTest, HeaderAlgIsPinnedToHs256) {
  std::string payload = ValidPayload().dump();
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"HS256"})", payload)), "OK");
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"none"})", payload)), "alg not HS256");
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"HS512"})", payload)), "alg not HS256");
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"RS256"})", payload)), "alg not HS256");
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"hs256"})", payload)), "alg not HS256");
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":["HS256"]})", payload)), "alg not HS256");
  EXPECT_EQ(Outcome(SignRaw(R"({"typ":"JWT"})", payload)), "missing alg");
}

TEST(JwtTest, UnsignedAlgNoneTokenIsRejected) {
  // The classic forgery: alg none and an empty signature.
  std::string input = Base64UrlEncode(R"({"alg":"none","typ":"JWT"})") + "." +
                      Base64UrlEncode(ValidPayload().dump());
  EXPECT_EQ(Outcome(input + "."), "token has an empty part");
  EXPECT_EQ(Outcome(input + ".AAAA"), "alg not HS256");
}

TEST(JwtTest, HeaderWithCritIsRejected) {
  std::string payload = ValidPayload().dump();
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"HS256","kid":"k1"})", payload)), "OK");
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"HS256","crit":["exp"],"exp":1})", payload)),
            "crit header not supported");
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"HS256","b64":false,"crit":["b64"]})", payload)),
            "crit header not supported");
}

TEST(JwtTest, HeadersThatCarryOrPointAtAKeyAreRejected) {
  std::string payload = ValidPayload().dump();
  // Positive control: a plain kid is fine (and never used).
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"HS256","kid":"2026-11.key_1"})", payload)), "OK");
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"HS256","kid":"../../dev/null"})", payload)), "kid not an identifier");
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"HS256","kid":"x' OR '1'='1"})", payload)), "kid not an identifier");
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"HS256","kid":7})", payload)), "kid not an identifier");
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"HS256","kid":""})", payload)), "kid not an identifier");
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"HS256","jku":"https://attacker.example/keys"})", payload)),
            "jku header not supported");
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"HS256","x5u":"https://attacker.example/cert"})", payload)),
            "x5u header not supported");
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"HS256","jwk":{"kty":"oct","k":"AAAA"}})", payload)),
            "jwk header not supported");
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"HS256","x5c":["MIIB"]})", payload)), "x5c header not supported");
}

TEST(JwtTest, ANameTwiceInTheHeaderOrPayloadIsRejected) {
  // Positive control: the same names once each.
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"HS256","typ":"JWT"})", ValidPayload().dump())), "OK");
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"none","alg":"HS256"})", ValidPayload().dump())), "header has a name twice");
  std::string payload = ValidPayload().dump();
  ASSERT_EQ(payload.back(), '}');
  payload.pop_back();
  const std::string twice_iss = payload + R"(,"iss":"other"})";
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"HS256"})", twice_iss)), "payload has a name twice");
  // Nested objects have names of their own: the same name in two objects is fine.
  const std::string nested = payload + R"(,"limits":{"pids":8},"budget":{"window":"day"}})";
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"HS256"})", nested)), "OK");
  const std::string nested_twice = payload + R"(,"limits":{"pids":8,"pids":9}})";
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"HS256"})", nested_twice)), "payload has a name twice");
}

TEST(JwtTest, HeaderTypMustBeJwtInAnyCase) {
  std::string payload = ValidPayload().dump();
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"HS256","typ":"JWT"})", payload)), "OK");
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"HS256","typ":"jwt"})", payload)), "OK");
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"HS256","typ":"Jwt"})", payload)), "OK");
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"HS256","typ":"JWS"})", payload)), "typ not JWT");
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"HS256","typ":"JWTX"})", payload)), "typ not JWT");
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"HS256","typ":1})", payload)), "typ not JWT");
}

TEST(JwtTest, HeaderMustBeAJsonObject) {
  std::string payload = ValidPayload().dump();
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"HS256"})", payload)), "OK");
  EXPECT_EQ(Outcome(SignRaw(R"(["alg","HS256"])", payload)), "header not a JSON object");
  EXPECT_EQ(Outcome(SignRaw(R"("HS256")", payload)), "header not a JSON object");
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"HS256")", payload)), "header not a JSON object");
  EXPECT_EQ(Outcome(SignRaw(R"({"alg":"HS256"} x)", payload)), "header not a JSON object");
}

// ---- Signature ----

TEST(JwtTest, TamperedPayloadFailsTheSignature) {
  std::string token = Mint(ValidPayload());
  ASSERT_EQ(Outcome(token), "OK");
  std::string payload = *Base64UrlDecode(Part(token, 1));
  size_t at = payload.find("user-1");
  ASSERT_NE(at, std::string::npos);
  payload[at + 5] = '2';  // "user-2": one byte, still a perfectly valid claim set
  EXPECT_EQ(Outcome(ReplacePart(token, 1, Base64UrlEncode(payload))), "bad signature");
}

TEST(JwtTest, TamperedSignatureIsRejected) {
  std::string token = Mint(ValidPayload());
  ASSERT_EQ(Outcome(token), "OK");
  std::string signature = Part(token, 2);
  signature[0] = signature[0] == 'A' ? 'B' : 'A';  // first character: all 6 bits are used
  EXPECT_EQ(Outcome(ReplacePart(token, 2, signature)), "bad signature");
  std::string mac = *Base64UrlDecode(Part(token, 2));
  mac[31] ^= 1;
  EXPECT_EQ(Outcome(ReplacePart(token, 2, Base64UrlEncode(mac))), "bad signature");
}

TEST(JwtTest, SignatureOfTheWrongLengthIsRejected) {
  std::string token = Mint(ValidPayload());
  ASSERT_EQ(Outcome(token), "OK");
  std::string mac = *Base64UrlDecode(Part(token, 2));
  // A prefix of the right MAC: a length-blind compare of the shorter buffer would accept it.
  EXPECT_EQ(Outcome(ReplacePart(token, 2, Base64UrlEncode(mac.substr(0, 30)))), "bad signature");
  EXPECT_EQ(Outcome(ReplacePart(token, 2, Base64UrlEncode(mac.substr(0, 1)))), "bad signature");
  EXPECT_EQ(Outcome(ReplacePart(token, 2, Base64UrlEncode(mac + mac))), "bad signature");
  EXPECT_NE(Outcome(ReplacePart(token, 2, Part(token, 2).substr(0, 42))), "OK");
}

TEST(JwtTest, SignatureFromAnotherSecretIsRejected) {
  EXPECT_EQ(Outcome(Mint(ValidPayload(), kSecret)), "OK");
  EXPECT_EQ(Outcome(Mint(ValidPayload(), kOtherSecret)), "bad signature");
  EXPECT_EQ(Outcome(Mint(ValidPayload(), std::string(kSecret) + "x")), "bad signature");
}

TEST(JwtTest, IssuerMustMatchTheSigningSecret) {
  // Signed with acme's secret but claiming to be globex: checked against globex's secret.
  EXPECT_EQ(Outcome(Mint(With("iss", kOtherIssuer), kOtherSecret)), "OK");
  EXPECT_EQ(Outcome(Mint(With("iss", kOtherIssuer), kSecret)), "bad signature");
  EXPECT_EQ(Outcome(Mint(With("iss", "initech"), kSecret)), "unknown issuer");
}

TEST(JwtTest, IssClaimIsValidatedBeforeTheLookup) {
  EXPECT_EQ(OutcomeOf(ValidPayload()), "OK");
  EXPECT_EQ(OutcomeOf(Without("iss")), "missing iss");
  EXPECT_EQ(OutcomeOf(With("iss", "")), "empty iss");
  EXPECT_EQ(OutcomeOf(With("iss", 7)), "iss not a string");
  EXPECT_EQ(OutcomeOf(With("iss", std::string("acme\0x", 6))), "iss contains NUL");
  std::string longest(128, 'i');
  auto lookup = [&](std::string_view issuer) -> std::optional<std::string> {
    return issuer.size() >= 128 ? std::optional<std::string>(kSecret) : std::nullopt;
  };
  EXPECT_TRUE(VerifyToken(Mint(With("iss", longest)), lookup, Policy()).ok());
  EXPECT_EQ(VerifyToken(Mint(With("iss", longest + "i")), lookup, Policy()).status().message(),
            "iss too long");
}

TEST(JwtTest, ClaimsAreNotJudgedBeforeTheSignature) {
  json expired_without_sub = Without("sub");
  expired_without_sub["exp"] = kNow - 1000;
  EXPECT_EQ(Outcome(Mint(expired_without_sub, kSecret)), "missing sub");
  EXPECT_EQ(Outcome(Mint(expired_without_sub, kOtherSecret)), "bad signature");
}

TEST(JwtTest, IssuerSecretsShorterThan32BytesAreRefused) {
  std::string secret(32, 'k');
  auto lookup = [&](std::string_view) -> std::optional<std::string> { return secret; };
  std::string token = Mint(ValidPayload(), secret);
  EXPECT_TRUE(VerifyToken(token, lookup, Policy()).ok());
  secret.pop_back();  // a misconfigured issuer: even a correct MAC under it is not accepted
  EXPECT_EQ(VerifyToken(SignRaw(kHs256Header, ValidPayload().dump(), secret), lookup, Policy())
                .status()
                .message(),
            "issuer secret shorter than 32 bytes");
}

TEST(JwtTest, EmptyLookupIsAnErrorNotAnException) {
  EXPECT_FALSE(VerifyToken(Mint(ValidPayload()), SecretLookup(), Policy()).ok());
}

// ---- Time claims ----

TEST(JwtTest, ExpIsRequiredAndMustBeAnInteger) {
  EXPECT_EQ(OutcomeOf(With("exp", kNow + 60)), "OK");
  EXPECT_EQ(OutcomeOf(Without("exp")), "missing exp");
  EXPECT_EQ(OutcomeOf(With("exp", std::to_string(kNow + 60))), "exp not an integer");
  EXPECT_EQ(OutcomeOf(With("exp", static_cast<double>(kNow + 60))), "exp not an integer");
  EXPECT_EQ(OutcomeOf(With("exp", true)), "exp not an integer");
  EXPECT_EQ(OutcomeOf(With("exp", nullptr)), "exp not an integer");
  std::string float_exp = R"({"iss":"acme","sub":"u","exp":1700000060.0})";
  EXPECT_EQ(Outcome(SignRaw(kHs256Header, float_exp)), "exp not an integer");
  std::string exponent_exp = R"({"iss":"acme","sub":"u","exp":17e8})";
  EXPECT_EQ(Outcome(SignRaw(kHs256Header, exponent_exp)), "exp not an integer");
  EXPECT_EQ(OutcomeOf(With("exp", UINT64_MAX)), "exp out of range");
}

TEST(JwtTest, ExpiryAllowsTheClockSkewAndNoMore) {
  EXPECT_EQ(OutcomeOf(With("exp", kNow)), "OK");
  EXPECT_EQ(OutcomeOf(With("exp", kNow - 30)), "OK");
  EXPECT_EQ(OutcomeOf(With("exp", kNow - 60)), "OK");
  EXPECT_EQ(OutcomeOf(With("exp", kNow - 61)), "expired");
  EXPECT_EQ(OutcomeOf(With("exp", -1)), "expired");
  VerifyPolicy strict = Policy();
  strict.max_clock_skew_s = 0;
  EXPECT_EQ(OutcomeOf(With("exp", kNow), strict), "OK");
  EXPECT_EQ(OutcomeOf(With("exp", kNow - 1), strict), "expired");
}

TEST(JwtTest, NotBeforeAllowsTheClockSkewAndNoMore) {
  EXPECT_EQ(OutcomeOf(With("nbf", kNow + 60)), "OK");
  EXPECT_EQ(OutcomeOf(With("nbf", kNow + 61)), "not yet valid (nbf)");
  EXPECT_EQ(OutcomeOf(With("nbf", "soon")), "nbf not an integer");
  EXPECT_EQ(OutcomeOf(With("nbf", 1.5)), "nbf not an integer");
}

TEST(JwtTest, IssuedInTheFutureBeyondSkewIsRejected) {
  json payload = With("exp", kNow + 600);
  payload["iat"] = kNow + 60;
  EXPECT_EQ(OutcomeOf(payload), "OK");
  payload["iat"] = kNow + 61;
  EXPECT_EQ(OutcomeOf(payload), "issued in the future");
  EXPECT_EQ(OutcomeOf(With("iat", "now")), "iat not an integer");
}

TEST(JwtTest, LifetimeIsMeasuredFromIat) {
  json payload = ValidPayload();
  payload["exp"] = kNow + 24 * 3600;
  EXPECT_EQ(OutcomeOf(payload), "OK");
  payload["exp"] = kNow + 24 * 3600 + 1;
  EXPECT_EQ(OutcomeOf(payload), "lifetime too long");
  // Issued long ago, expiring soon: the token's lifetime, not its remaining time, is capped.
  payload["iat"] = kNow - 24 * 3600;
  payload["exp"] = kNow + 1;
  EXPECT_EQ(OutcomeOf(payload), "lifetime too long");
}

TEST(JwtTest, LifetimeWithoutIatIsMeasuredFromNow) {
  json payload = Without("iat");
  payload["exp"] = kNow + 24 * 3600;
  EXPECT_EQ(OutcomeOf(payload), "OK");
  payload["exp"] = kNow + 24 * 3600 + 1;
  EXPECT_EQ(OutcomeOf(payload), "lifetime too long");
}

TEST(JwtTest, ExtremeTimesDoNotOverflow) {
  // Under UBSan, an int64 sum here would abort the test.
  EXPECT_EQ(OutcomeOf(With("exp", INT64_MAX)), "lifetime too long");
  EXPECT_EQ(OutcomeOf(With("exp", INT64_MIN)), "expired");
  json payload = With("exp", kNow + 10);
  payload["iat"] = INT64_MIN;
  EXPECT_EQ(OutcomeOf(payload), "lifetime too long");
  payload["iat"] = INT64_MAX;
  EXPECT_EQ(OutcomeOf(payload), "issued in the future");
  VerifyPolicy policy = Policy();
  policy.max_clock_skew_s = INT64_MAX;
  policy.max_lifetime_s = INT64_MAX;
  // exp + skew is past INT64_MAX: wrapping around would make this token "expired".
  EXPECT_EQ(OutcomeOf(With("exp", kNow - 1000000000), policy), "OK");
  policy.now = INT64_MIN;
  EXPECT_EQ(OutcomeOf(Without("iat"), policy), "lifetime too long");
}

TEST(JwtTest, EverySingleCharacterChangeIsRejected) {
  // Decoding is canonical, so any change alters the signed bytes or fails to decode.
  std::string token = Mint(ValidPayload());
  ASSERT_EQ(Outcome(token), "OK");
  for (size_t i = 0; i < token.size(); ++i) {
    for (char c : std::string("Aaz09-_.= \0", 12)) {
      if (token[i] == c) continue;
      std::string mutated = token;
      mutated[i] = c;
      EXPECT_NE(Outcome(mutated), "OK") << "position " << i << " -> " << c;
    }
    EXPECT_NE(Outcome(token.substr(0, i) + token.substr(i + 1)), "OK") << "dropped " << i;
  }
}

// ---- sub and jti ----

TEST(JwtTest, SubIsRequiredNonEmptyBoundedAndNulFree) {
  EXPECT_EQ(OutcomeOf(With("sub", std::string(256, 's'))), "OK");
  EXPECT_EQ(OutcomeOf(With("sub", std::string(257, 's'))), "sub too long");
  EXPECT_EQ(OutcomeOf(Without("sub")), "missing sub");
  EXPECT_EQ(OutcomeOf(With("sub", "")), "empty sub");
  EXPECT_EQ(OutcomeOf(With("sub", 42)), "sub not a string");
  EXPECT_EQ(OutcomeOf(With("sub", std::string("user\0admin", 10))), "sub contains NUL");
  // The same NUL written as a JSON escape by the issuer.
  std::string escaped = R"({"iss":"acme","sub":"user\u0000admin","exp":1700000060})";
  EXPECT_EQ(Outcome(SignRaw(kHs256Header, escaped)), "sub contains NUL");
}

TEST(JwtTest, JtiMustBeAString) {
  EXPECT_EQ(OutcomeOf(With("jti", "abc")), "OK");
  EXPECT_EQ(OutcomeOf(With("jti", 123)), "jti not a string");
}

// ---- Token shape ----

TEST(JwtTest, OversizedTokenIsRejected) {
  std::string largest_accepted, smallest_rejected;
  for (size_t pad = 5900; pad < 6200 && smallest_rejected.empty(); ++pad) {
    std::string token = SignJson(With("pad", std::string(pad, 'x')));
    (token.size() <= 8192 ? largest_accepted : smallest_rejected) = token;
  }
  ASSERT_GE(largest_accepted.size(), 8190u);
  ASSERT_FALSE(smallest_rejected.empty());
  EXPECT_EQ(Outcome(largest_accepted), "OK");
  EXPECT_EQ(Outcome(smallest_rejected), "token too large");
  EXPECT_EQ(Outcome(std::string(1 << 20, 'A')), "token too large");
}

TEST(JwtTest, TokenMustHaveExactlyThreeNonEmptyParts) {
  std::string token = Mint(ValidPayload());
  ASSERT_EQ(Outcome(token), "OK");
  std::string h = Part(token, 0), p = Part(token, 1), s = Part(token, 2);
  EXPECT_EQ(Outcome(h + "." + p), "token not three dot-separated parts");
  EXPECT_EQ(Outcome(h + "." + p + "." + s + "." + s), "token not three dot-separated parts");
  EXPECT_EQ(Outcome(h + "." + p + "." + s + "."), "token not three dot-separated parts");
  EXPECT_EQ(Outcome(h + p + s), "token not three dot-separated parts");
  EXPECT_EQ(Outcome(""), "token not three dot-separated parts");
  EXPECT_EQ(Outcome("." + p + "." + s), "token has an empty part");
  EXPECT_EQ(Outcome(h + ".." + s), "token has an empty part");
  EXPECT_EQ(Outcome(h + "." + p + "."), "token has an empty part");
  EXPECT_EQ(Outcome(".."), "token has an empty part");
}

TEST(JwtTest, PaddingAndWhitespaceAreRejected) {
  std::string token = Mint(ValidPayload());
  ASSERT_EQ(Outcome(token), "OK");
  ASSERT_EQ(Part(token, 2).size(), 43u);
  EXPECT_EQ(Outcome(ReplacePart(token, 2, Part(token, 2) + "=")), "signature not base64url");
  EXPECT_NE(Outcome(ReplacePart(token, 1, Part(token, 1) + "==")), "OK");
  EXPECT_NE(Outcome(ReplacePart(token, 0, Part(token, 0) + "=")), "OK");
  EXPECT_NE(Outcome(" " + token), "OK");
  EXPECT_NE(Outcome(token + "\n"), "OK");
  EXPECT_NE(Outcome("Bearer " + token), "OK");
  std::string spaced = token;
  spaced.insert(10, " ");
  EXPECT_EQ(Outcome(spaced), "header not base64url");
}

TEST(JwtTest, StandardBase64AlphabetIsRejected) {
  std::string token = Mint(ValidPayload());
  std::string signature = Part(token, 2);
  for (char& c : signature) c = c == '-' ? '+' : c == '_' ? '/' : c;
  signature[0] = '+';
  EXPECT_EQ(Outcome(ReplacePart(token, 2, signature)), "signature not base64url");
}

TEST(JwtTest, PayloadMustBeAJsonObject) {
  EXPECT_EQ(Outcome(SignRaw(kHs256Header, ValidPayload().dump())), "OK");
  for (const char* payload : {"[]", "\"acme\"", "42", "null", "true", "{", "{\"iss\":\"acme\"} {}",
                              "{\"iss\":\"acme\xff\"}"}) {
    EXPECT_EQ(Outcome(SignRaw(kHs256Header, payload)), "payload not a JSON object") << payload;
  }
}
// ---- Error messages ----

TEST(JwtTest, ErrorMessagesNeverContainTheSecretOrToken) {
  std::string secret = Mint(ValidPayload());  // any string that occurs nowhere else
  secret = "secret-" + secret.substr(secret.size() - 40);
  auto lookup = [&](std::string_view) -> std::optional<std::string> { return secret; };
  std::string good = Mint(ValidPayload(), secret);
  ASSERT_TRUE(VerifyToken(good, lookup, Policy()).ok());
  std::vector<std::string> bad = {
      Mint(ValidPayload(), kSecret), Mint(With("exp", kNow - 1000), secret),
      Mint(Without("sub"), secret), Mint(With("limits", {{"pids", "x"}}), secret),
      ReplacePart(good, 0, Base64UrlEncode(R"({"alg":"none"})")), good + "." + Part(good, 2)};
  for (const std::string& token : bad) {
    StatusOr<Claims> claims = VerifyToken(token, lookup, Policy());
    ASSERT_FALSE(claims.ok());
    std::string message = claims.status().message();
    EXPECT_LE(message.size(), 60u) << message;
    EXPECT_EQ(message.find(secret), std::string::npos) << message;
    for (int part = 0; part < 3; ++part) {
      EXPECT_EQ(message.find(Part(token, part)), std::string::npos) << message;
    }
  }
}

// ---- base64url ----

TEST(Base64UrlTest, Rfc4648Vectors) {
  // RFC 4648 §10, without the padding.
  EXPECT_EQ(Base64UrlEncode(""), "");
  EXPECT_EQ(Base64UrlEncode("f"), "Zg");
  EXPECT_EQ(Base64UrlEncode("fo"), "Zm8");
  EXPECT_EQ(Base64UrlEncode("foo"), "Zm9v");
  EXPECT_EQ(Base64UrlEncode("foob"), "Zm9vYg");
  EXPECT_EQ(Base64UrlEncode("fooba"), "Zm9vYmE");
  EXPECT_EQ(Base64UrlEncode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(Base64UrlDecode(""), "");
  EXPECT_EQ(Base64UrlDecode("Zg"), "f");
  EXPECT_EQ(Base64UrlDecode("Zm8"), "fo");
  EXPECT_EQ(Base64UrlDecode("Zm9v"), "foo");
  EXPECT_EQ(Base64UrlDecode("Zm9vYg"), "foob");
  EXPECT_EQ(Base64UrlDecode("Zm9vYmE"), "fooba");
  EXPECT_EQ(Base64UrlDecode("Zm9vYmFy"), "foobar");
}

TEST(Base64UrlTest, UsesTheUrlAlphabet) {
  EXPECT_EQ(Base64UrlEncode("\xfb\xff"), "-_8");  // standard base64: "+/8="
  EXPECT_EQ(Base64UrlEncode("\xfb\xff\xbf"), "-_-_");
  EXPECT_EQ(Base64UrlEncode("\xff"), "_w");
  EXPECT_EQ(Base64UrlEncode(std::string("\0\0\0", 3)), "AAAA");
  EXPECT_EQ(Base64UrlDecode("-_8"), "\xfb\xff");
  EXPECT_EQ(Base64UrlDecode("-_-_"), "\xfb\xff\xbf");
  EXPECT_EQ(Base64UrlDecode("+/8"), std::nullopt);
}

TEST(Base64UrlTest, RoundTripsEveryByteAndLength) {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  for (size_t length = 0; length <= bytes.size(); ++length) {
    std::string input = bytes.substr(bytes.size() - length);
    std::string encoded = Base64UrlEncode(input);
    EXPECT_EQ(encoded.size(), (length * 4 + 2) / 3);
    EXPECT_EQ(Base64UrlDecode(encoded), input) << length;
  }
}

TEST(Base64UrlTest, RejectsPaddingInvalidCharactersAndImpossibleLengths) {
  EXPECT_TRUE(Base64UrlDecode("Zm8").has_value());
  // "A" and "Zm9vA": a lone final character of zero bits passes the trailing-bits rule; only
  // the length rule (size % 4 == 1) rejects it.
  for (const char* bad : {"Zm8=", "Zg==", "Zg=", "=", "Z", "A", "Zm9vY", "Zm9vA", "Zm9vYmFyZ",
                          "Zm+v", "Zm/v", "Zm v", "Zm9v\n", " Zm9v", "Zm9v.", "Zm9v%3D",
                          "Zm\x80v"}) {
    EXPECT_EQ(Base64UrlDecode(bad), std::nullopt) << bad;
  }
  EXPECT_EQ(Base64UrlDecode(std::string_view("Zm\0v", 4)), std::nullopt);
}

TEST(Base64UrlTest, RejectsNonCanonicalTrailingBits) {
  // "f" is 0x66 = 011001|10: "Zg" sets the 4 unused bits to zero; "Zh".."Zv" do not.
  EXPECT_EQ(Base64UrlDecode("Zg"), "f");
  for (const char* bad : {"Zh", "Zi", "Zv", "Z_"}) {
    EXPECT_EQ(Base64UrlDecode(bad), std::nullopt) << bad;
  }
  // "fo" ends in 2 unused bits: "Zm8" is canonical, "Zm9" is not.
  EXPECT_EQ(Base64UrlDecode("Zm8"), "fo");
  EXPECT_EQ(Base64UrlDecode("Zm9"), std::nullopt);
  EXPECT_EQ(Base64UrlDecode("Zm_"), std::nullopt);
}

// ---- Secrets ----

TEST(GenerateSecretTest, Is43UrlSafeCharactersOf32RandomBytes) {
  std::string a = GenerateSecret();
  std::string b = GenerateSecret();
  EXPECT_EQ(a.size(), 43u);
  EXPECT_NE(a, b);
  std::optional<std::string> bytes = Base64UrlDecode(a);
  ASSERT_TRUE(bytes.has_value());
  EXPECT_EQ(bytes->size(), 32u);
  constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  EXPECT_EQ(a.find_first_not_of(kAlphabet), std::string::npos);
  // Used as text: the secret's characters, not its decoded bytes, are the HMAC key.
  auto lookup = [&](std::string_view) -> std::optional<std::string> { return a; };
  EXPECT_TRUE(VerifyToken(Mint(ValidPayload(), a), lookup, Policy()).ok());
  EXPECT_FALSE(VerifyToken(Mint(ValidPayload(), *bytes), lookup, Policy()).ok());
}

TEST(GenerateSecretTest, ManySecretsAreDistinct) {
  std::set<std::string> seen;
  for (int i = 0; i < 64; ++i) seen.insert(GenerateSecret());
  EXPECT_EQ(seen.size(), 64u);
}

// ---- Published vectors ----

TEST(HmacSha256Test, Rfc4231Vectors) {
  // Test case 1.
  EXPECT_EQ(Hex(internal::HmacSha256(std::string(20, '\x0b'), "Hi There").value()),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Test case 2: a key shorter than the output.
  EXPECT_EQ(Hex(internal::HmacSha256("Jefe", "what do ya want for nothing?").value()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 6: a key longer than SHA-256's 64-byte block is hashed first.
  EXPECT_EQ(Hex(internal::HmacSha256(std::string(131, '\xaa'),
                                     "Test Using Larger Than Block-Size Key - Hash Key First")
                    .value()),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(HmacSha256Test, EmptyKeyAndData) {
  EXPECT_EQ(Hex(internal::HmacSha256("", "").value()),
            "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
  EXPECT_EQ(Hex(internal::HmacSha256(std::string_view(), std::string_view()).value()),
            "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
}

// RFC 7515 Appendix A.1: a JWS produced by another implementation. Its header has a CRLF and
// "typ" first; its key is the JWK's "k", base64url-decoded (64 bytes).
constexpr char kRfc7515Token[] =
    "eyJ0eXAiOiJKV1QiLA0KICJhbGciOiJIUzI1NiJ9."
    "eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb2"
    "90Ijp0cnVlfQ."
    "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
constexpr char kRfc7515Key[] =
    "AyM1SysPpbyDfgZld3umj1qzKObwVMkoqQ-EstJQLr_T-1qS0gZH75aKtMN3Yj0iPS4hcgUuTwjAzZr1Z9CAow";

TEST(Rfc7515Test, AppendixA1SignatureVerifies) {
  std::optional<std::string> key = Base64UrlDecode(kRfc7515Key);
  ASSERT_TRUE(key.has_value());
  ASSERT_EQ(key->size(), 64u);
  Status status = internal::VerifySignature(kRfc7515Token, *key);
  EXPECT_TRUE(status.ok()) << status.ToString();

  std::string token = kRfc7515Token;
  token[token.size() - 10] = token[token.size() - 10] == 'A' ? 'B' : 'A';
  EXPECT_EQ(internal::VerifySignature(token, *key).message(), "bad signature");
  EXPECT_EQ(internal::VerifySignature(kRfc7515Token, kSecret).message(), "bad signature");
}

TEST(Rfc7515Test, AppendixA1PassesTheSignatureAndStopsAtTheMissingSub) {
  std::optional<std::string> key = Base64UrlDecode(kRfc7515Key);
  ASSERT_TRUE(key.has_value());
  auto lookup = [&](std::string_view issuer) -> std::optional<std::string> {
    return issuer == "joe" ? key : std::nullopt;
  };
  VerifyPolicy policy;
  policy.now = 1300819300;
  policy.max_lifetime_s = 1000000;
  // "missing sub" is only reported once the signature has been accepted.
  EXPECT_EQ(VerifyToken(kRfc7515Token, lookup, policy).status().message(), "missing sub");
  auto wrong_key = [&](std::string_view) -> std::optional<std::string> { return kSecret; };
  EXPECT_EQ(VerifyToken(kRfc7515Token, wrong_key, policy).status().message(), "bad signature");
}

}  // namespace
}  // namespace corral::api
