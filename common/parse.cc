#include "common/parse.h"

#include <limits>
#include <string>

namespace corral {
namespace {

bool MulOverflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }

}  // namespace

StatusOr<uint64_t> ParseUint(std::string_view text) {
  if (text.empty()) return Status::Error("empty number");
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return Status::Error("not a number: '" + std::string(text) + "'");
    if (MulOverflows(value, 10, &value) || __builtin_add_overflow(value, c - '0', &value)) {
      return Status::Error("number too large: '" + std::string(text) + "'");
    }
  }
  return value;
}

StatusOr<uint64_t> ParseFixedPoint(std::string_view text, uint64_t scale) {
  std::string original(text);
  size_t dot = text.find('.');
  std::string_view whole = text.substr(0, dot);
  std::string_view frac = dot == std::string_view::npos ? std::string_view() : text.substr(dot + 1);
  if (whole.empty() && frac.empty()) return Status::Error("not a number: '" + original + "'");
  if (dot != std::string_view::npos && frac.empty()) {
    return Status::Error("not a number: '" + original + "'");
  }
  uint64_t whole_value = 0;
  if (!whole.empty()) {
    auto parsed = ParseUint(whole);
    if (!parsed.ok()) return Status::Error("not a number: '" + original + "'");
    whole_value = *parsed;
  }
  uint64_t result = 0;
  if (MulOverflows(whole_value, scale, &result)) {
    return Status::Error("number too large: '" + original + "'");
  }
  // The fraction is scaled exactly: digits * scale / 10^n (digits past 18 places are dropped).
  unsigned __int128 digits = 0, denominator = 1;
  for (char c : frac) {
    if (c < '0' || c > '9') return Status::Error("not a number: '" + original + "'");
    if (denominator >= 1000000000000000000ull) continue;
    digits = digits * 10 + static_cast<unsigned>(c - '0');
    denominator *= 10;
  }
  unsigned __int128 fraction = digits * scale / denominator;
  if (fraction > UINT64_MAX - result) return Status::Error("number too large: '" + original + "'");
  result += static_cast<uint64_t>(fraction);
  return result;
}

StatusOr<uint64_t> ParseSecondsToMicros(std::string_view text) { return ParseFixedPoint(text, 1000000); }

StatusOr<uint64_t> ParseSize(std::string_view text) {
  std::string original(text);
  std::string_view digits = text;
  uint64_t multiplier = 1;
  // Strip an optional "B" or "iB" after the unit letter.
  if (digits.size() >= 2 && digits.substr(digits.size() - 2) == "iB") {
    digits.remove_suffix(2);
    if (digits.empty()) return Status::Error("not a size: '" + original + "'");
  } else if (digits.size() >= 2 && (digits.back() == 'B' || digits.back() == 'b') &&
             (digits[digits.size() - 2] < '0' || digits[digits.size() - 2] > '9')) {
    digits.remove_suffix(1);
  }
  if (!digits.empty()) {
    switch (digits.back()) {
      case 'k': case 'K': multiplier = 1ull << 10; break;
      case 'm': case 'M': multiplier = 1ull << 20; break;
      case 'g': case 'G': multiplier = 1ull << 30; break;
      case 't': case 'T': multiplier = 1ull << 40; break;
      default: break;
    }
    if (multiplier != 1) digits.remove_suffix(1);
  }
  auto value = ParseFixedPoint(digits, multiplier);
  if (!value.ok()) return Status::Error("not a size: '" + original + "'");
  return *value;
}

}  // namespace corral
