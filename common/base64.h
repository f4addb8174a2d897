// Base64 (RFC 4648) over OpenSSL's EVP_EncodeBlock/EVP_DecodeBlock, in the two alphabets corral
// meets: standard (§4: "+/", padded with "=") for bytes in JSON, and URL-safe (§5: "-_", no
// padding) for JWTs and the keys handed to sandboxes.
//
// Decoding is strict: every character in the alphabet, padding exactly as the encoder writes it
// (or none, where none is written), no length a 6-bit character cannot end (4n + 1), and the
// unused bits of the last character zero, so that one text decodes to one byte string and every
// byte string has one text (RFC 4648 §3.5). No whitespace, no line breaks: a caller that takes
// wrapped text (`base64` wraps at 76 columns) removes them first.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace corral {

// Standard alphabet, padded: "foob" -> "Zm9vYg==".
std::string Base64Encode(std::string_view bytes);
// URL-safe alphabet, no padding: "foob" -> "Zm9vYg", "\xfb\xff" -> "-_8".
std::string Base64UrlEncode(std::string_view bytes);

// The bytes of a standard, padded text; nullopt for anything else.
std::optional<std::string> Base64Decode(std::string_view text);
// The bytes of a URL-safe, unpadded text (as JWTs carry them); nullopt for anything else,
// padding included.
std::optional<std::string> Base64UrlDecode(std::string_view text);
// What clients write in JSON: either alphabet (one per text, not mixed), padded or not. Strict
// otherwise, as above.
std::optional<std::string> Base64DecodeEither(std::string_view text);

}  // namespace corral
