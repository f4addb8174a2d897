#include "common/status.h"

#include <cstring>

namespace corral {

std::string ErrnoName(int error_number) {
  const char* name = strerrorname_np(error_number);
  return name != nullptr ? std::string(name) : std::to_string(error_number);
}

std::string Status::ToString() const {
  if (ok_) return "OK";
  if (errno_ == 0) return message_;
  return message_ + ": " + ErrnoName(errno_);
}

Status Status::WithContext(std::string_view context) const {
  if (ok_) return *this;
  return Error(std::string(context) + ": " + message_, errno_);
}

Status ErrnoError(std::string_view what, int error_number) {
  return Status::Error(std::string(what), error_number);
}

}  // namespace corral
