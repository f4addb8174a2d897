#include "supervisor/ids.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>

namespace corral::supervisor {
namespace {

constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz234567";
constexpr size_t kRandomChars = 20;

}  // namespace

std::string NewId(std::string_view prefix) {
  uint8_t random[kRandomChars];
  size_t got = 0;
  while (got < sizeof(random)) {
    ssize_t n = getrandom(random + got, sizeof(random) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) abort();  // getrandom cannot fail on a kernel we run on; never hand out a weak id.
    got += static_cast<size_t>(n);
  }
  std::string id(prefix);
  id += '_';
  for (uint8_t byte : random) id += kAlphabet[byte & 31];
  return id;
}

bool IsWellFormedId(std::string_view id, std::string_view prefix) {
  if (id.size() != prefix.size() + 1 + kRandomChars) return false;
  if (id.substr(0, prefix.size()) != prefix || id[prefix.size()] != '_') return false;
  for (char c : id.substr(prefix.size() + 1)) {
    if (!((c >= 'a' && c <= 'z') || (c >= '2' && c <= '7'))) return false;
  }
  return true;
}

}  // namespace corral::supervisor
