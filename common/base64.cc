#include "common/base64.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstddef>

namespace corral {
namespace {

constexpr std::string_view kStandard = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr std::string_view kUrl = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

// OpenSSL takes int lengths: long inputs go through in pieces (whole groups of 3 bytes, 4 characters).
constexpr size_t kBytesPerPiece = 3 << 20;
constexpr size_t kCharsPerPiece = 4 << 20;

enum class Padding { kRequired, kForbidden, kOptional };

const unsigned char* Bytes(std::string_view text) { return reinterpret_cast<const unsigned char*>(text.data()); }

// The standard, padded text.
std::string Encode(std::string_view bytes) {
  std::string out((bytes.size() + 2) / 3 * 4 + 1, '\0');  // EVP_EncodeBlock ends with a NUL
  size_t written = 0;
  for (size_t at = 0; at < bytes.size(); at += kBytesPerPiece) {
    const size_t piece = std::min(kBytesPerPiece, bytes.size() - at);
    written += static_cast<size_t>(EVP_EncodeBlock(reinterpret_cast<unsigned char*>(&out[written]),
                                                   Bytes(bytes) + at, static_cast<int>(piece)));
  }
  out.resize(written);
  return out;
}

// `text` in `alphabet`, checked as base64.h says, then decoded by OpenSSL in the standard alphabet.
// (EVP_DecodeBlock alone would skip leading whitespace, take "=" anywhere as zero bits, keep the
// padding's zero bytes and not look at the unused bits: hence the checks before it.)
std::optional<std::string> Decode(std::string_view text, std::string_view alphabet, Padding padding) {
  size_t pad = 0;
  while (pad < 2 && pad < text.size() && text[text.size() - 1 - pad] == '=') ++pad;
  if (pad > 0 && padding == Padding::kForbidden) return std::nullopt;
  const std::string_view data = text.substr(0, text.size() - pad);
  const size_t tail = data.size() % 4;
  if (tail == 1) return std::nullopt;  // one character carries 6 bits: no byte
  if ((pad > 0 || padding == Padding::kRequired) && text.size() % 4 != 0) return std::nullopt;

  std::string standard(data);
  for (char& c : standard) {
    const size_t value = alphabet.find(c);
    if (value == std::string_view::npos) return std::nullopt;
    c = kStandard[value];
  }
  if (tail != 0) {
    // The last character of a 2- or 3-character tail has 4 or 2 bits that encode nothing.
    const size_t last = kStandard.find(standard.back());
    if ((last & (tail == 2 ? 0x0f : 0x03)) != 0) return std::nullopt;
    standard.append(4 - tail, '=');
  }

  std::string out(standard.size() / 4 * 3, '\0');
  size_t written = 0;
  for (size_t at = 0; at < standard.size(); at += kCharsPerPiece) {
    const size_t piece = std::min(kCharsPerPiece, standard.size() - at);
    const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(&out[written]), Bytes(standard) + at,
                                  static_cast<int>(piece));
    if (n < 0) return std::nullopt;
    written += static_cast<size_t>(n);
  }
  out.resize(data.size() * 3 / 4);  // without the padding's zero bytes
  return out;
}

}  // namespace

std::string Base64Encode(std::string_view bytes) { return Encode(bytes); }

std::string Base64UrlEncode(std::string_view bytes) {
  std::string out = Encode(bytes);
  while (!out.empty() && out.back() == '=') out.pop_back();
  for (char& c : out) c = kUrl[kStandard.find(c)];
  return out;
}

std::optional<std::string> Base64Decode(std::string_view text) {
  return Decode(text, kStandard, Padding::kRequired);
}

std::optional<std::string> Base64UrlDecode(std::string_view text) { return Decode(text, kUrl, Padding::kForbidden); }

std::optional<std::string> Base64DecodeEither(std::string_view text) {
  const bool url = text.find_first_of("-_") != std::string_view::npos;
  return Decode(text, url ? kUrl : kStandard, Padding::kOptional);
}

}  // namespace corral
