#include "rootfs/image_ref.h"

#include <vector>

namespace corral::rootfs {
namespace {

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool IsAlnum(char c) { return IsLowerAlnum(c) || (c >= 'A' && c <= 'Z'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsLowerHex(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f'); }

std::string Quoted(std::string_view text) { return "\"" + std::string(text) + "\""; }

// Characters no part of a reference may hold, whatever the part.
Status CheckCharacters(std::string_view text) {
  for (char c : text) {
    if (c == '\0') return Status::Error("contains a NUL byte");
    if (c == ' ' || c == '\t') return Status::Error("contains a space");
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return Status::Error("contains a control character");
    }
    if (static_cast<unsigned char>(c) >= 0x80) return Status::Error("contains a non-ASCII character");
  }
  return Status();
}

std::vector<std::string_view> Split(std::string_view text, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (;;) {
    size_t at = text.find(sep, start);
    parts.push_back(text.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) return parts;
    start = at + 1;
  }
}

// path-component := [a-z0-9]+ ( ( "." | "_" | "__" | "-"+ ) [a-z0-9]+ )*
Status CheckPathComponent(std::string_view c) {
  if (c.empty()) return Status::Error("empty path component");
  if (c == "." || c == "..") return Status::Error("path component " + Quoted(c) + " is not allowed");
  for (char ch : c) {
    if (ch >= 'A' && ch <= 'Z') return Status::Error("path component " + Quoted(c) + " has uppercase letters (names are lowercase)");
  }
  size_t i = 0;
  while (i < c.size()) {
    if (!IsLowerAlnum(c[i])) {
      return Status::Error("path component " + Quoted(c) + " must start and end with [a-z0-9]");
    }
    while (i < c.size() && IsLowerAlnum(c[i])) ++i;
    if (i == c.size()) break;
    size_t sep_start = i;
    if (c[i] == '.') {
      ++i;
    } else if (c[i] == '_') {
      ++i;
      if (i < c.size() && c[i] == '_') ++i;
    } else if (c[i] == '-') {
      while (i < c.size() && c[i] == '-') ++i;
    } else {
      return Status::Error("path component " + Quoted(c) + " has " + Quoted(c.substr(i, 1)) +
                           " (allowed: a-z 0-9 and the separators . _ __ -)");
    }
    if (i == c.size() || !IsLowerAlnum(c[i])) {
      return Status::Error("path component " + Quoted(c) + " has a misplaced separator " +
                           Quoted(c.substr(sep_start, i - sep_start)));
    }
  }
  return Status();
}

// registry := host-component ( "." host-component )* [ ":" port ]
Status CheckRegistry(std::string_view registry) {
  std::string_view host = registry;
  size_t colon = registry.find(':');
  if (colon != std::string_view::npos) {
    host = registry.substr(0, colon);
    std::string_view port = registry.substr(colon + 1);
    if (port.empty() || port.size() > 5) return Status::Error("registry " + Quoted(registry) + ": bad port");
    for (char c : port) {
      if (!IsDigit(c)) return Status::Error("registry " + Quoted(registry) + ": bad port");
    }
  }
  for (std::string_view part : Split(host, '.')) {
    if (part.empty()) return Status::Error("registry " + Quoted(registry) + ": empty host component");
    if (part.front() == '-' || part.back() == '-') {
      return Status::Error("registry " + Quoted(registry) + ": host component starts or ends with '-'");
    }
    for (char c : part) {
      if (!IsAlnum(c) && c != '-') return Status::Error("registry " + Quoted(registry) + ": bad character " + Quoted(std::string(1, c)));
    }
  }
  return Status();
}

bool LooksLikeRegistry(std::string_view first) {
  return first.find('.') != std::string_view::npos || first.find(':') != std::string_view::npos ||
         first == "localhost";
}

// Splits "name[:tag][@digest]" into its parts and checks the tag and digest.
Status SplitTagAndDigest(std::string_view text, std::string_view* name, ImageRef* ref) {
  size_t at = text.find('@');
  if (at != std::string_view::npos) {
    std::string_view digest = text.substr(at + 1);
    if (!IsDigest(digest)) return Status::Error("digest " + Quoted(digest) + " is not sha256:<64 lowercase hex>");
    ref->digest = std::string(digest);
    text = text.substr(0, at);
  }
  size_t colon = text.rfind(':');
  size_t slash = text.rfind('/');
  if (colon != std::string_view::npos && (slash == std::string_view::npos || colon > slash)) {
    std::string_view tag = text.substr(colon + 1);
    if (!IsValidTag(tag)) {
      return Status::Error("tag " + Quoted(tag) + " is not [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}");
    }
    ref->tag = std::string(tag);
    text = text.substr(0, colon);
  }
  *name = text;
  return Status();
}

Status ParseInto(std::string_view text, ImageRef* ref) {
  if (text.empty()) return Status::Error("empty");
  RETURN_IF_ERROR(CheckCharacters(text));
  std::string_view name;
  RETURN_IF_ERROR(SplitTagAndDigest(text, &name, ref));
  if (name.empty()) return Status::Error("no name");
  if (name.size() > kMaxImageNameLength) {
    return Status::Error("name is longer than " + std::to_string(kMaxImageNameLength) + " characters");
  }
  if (name.front() == '/') return Status::Error("name starts with '/'");
  if (name.back() == '/') return Status::Error("name ends with '/'");
  std::vector<std::string_view> parts = Split(name, '/');
  for (std::string_view part : parts) {
    if (part == "." || part == "..") return Status::Error("path component " + Quoted(part) + " is not allowed");
  }
  size_t first_path = 0;
  if (parts.size() > 1 && LooksLikeRegistry(parts[0])) {
    RETURN_IF_ERROR(CheckRegistry(parts[0]));
    ref->registry = std::string(parts[0]);
    first_path = 1;
  }
  for (size_t i = first_path; i < parts.size(); ++i) RETURN_IF_ERROR(CheckPathComponent(parts[i]));
  ref->name = std::string(name.substr(ref->registry.empty() ? 0 : ref->registry.size() + 1));
  if (ref->tag.empty() && ref->digest.empty()) ref->tag = std::string(kDefaultImageTag);
  return Status();
}

}  // namespace

std::string ImageRef::Repository() const { return registry.empty() ? name : registry + "/" + name; }

std::string ImageRef::Name() const {
  return tag.empty() ? Repository() + "@" + digest : Repository() + ":" + tag;
}

std::string ImageRef::ToString() const {
  std::string out = Repository();
  if (!tag.empty()) out += ":" + tag;
  if (!digest.empty()) out += "@" + digest;
  return out;
}

StatusOr<ImageRef> ParseImageRef(std::string_view text) {
  ImageRef ref;
  Status status = ParseInto(text, &ref);
  if (!status.ok()) {
    // The text itself may hold NULs or control characters: quoted only when printable.
    Status printable = CheckCharacters(text);
    return Status::Error("image reference " + (printable.ok() ? Quoted(text) : std::string("(unprintable)")) +
                         ": " + status.message());
  }
  return ref;
}

bool IsDigest(std::string_view text) {
  constexpr std::string_view kPrefix = "sha256:";
  if (text.size() != kPrefix.size() + 64 || text.substr(0, kPrefix.size()) != kPrefix) return false;
  for (char c : text.substr(kPrefix.size())) {
    if (!IsLowerHex(c)) return false;
  }
  return true;
}

bool IsValidTag(std::string_view text) {
  if (text.empty() || text.size() > kMaxImageTagLength) return false;
  auto word = [](char c) { return IsAlnum(c) || c == '_'; };
  if (!word(text[0])) return false;
  for (char c : text.substr(1)) {
    if (!word(c) && c != '.' && c != '-') return false;
  }
  return true;
}

}  // namespace corral::rootfs
