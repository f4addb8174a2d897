// Status and StatusOr: how every parent-side function in corral reports failure.
//
// A Status is either OK or an error with a message and, when the error came from the kernel, the
// errno. Errors name the step that failed ("mount /proc: EPERM"), so the message alone tells an
// operator what happened. Exceptions never cross a folder's public interface; Status does.
#pragma once

#include <cerrno>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace corral {

class Status {
 public:
  Status() = default;  // OK.

  // An error with a human message and an optional errno (0: not from the kernel).
  static Status Error(std::string message, int error_number = 0) {
    Status s;
    s.ok_ = false;
    s.message_ = std::move(message);
    s.errno_ = error_number;
    return s;
  }

  bool ok() const { return ok_; }
  const std::string& message() const { return message_; }
  int error_number() const { return errno_; }

  // "message: ENAME" for kernel errors, "message" otherwise, "OK" when ok.
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context: `.
  Status WithContext(std::string_view context) const;

 private:
  bool ok_ = true;
  int errno_ = 0;
  std::string message_;
};

// An error for a failed system call: ErrnoError("mount /proc") -> "mount /proc: EPERM".
Status ErrnoError(std::string_view what, int error_number = errno);

// The symbolic name of an errno value ("EPERM"), or its number as text.
std::string ErrnoName(int error_number);

template <typename T>
class StatusOr {
 public:
  StatusOr(Status status) : value_(std::move(status)) {}  // NOLINT: implicit by design.
  StatusOr(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design.

  bool ok() const { return std::holds_alternative<T>(value_); }
  Status status() const { return ok() ? Status() : std::get<Status>(value_); }

  T& value() & { return std::get<T>(value_); }
  const T& value() const& { return std::get<T>(value_); }
  T&& value() && { return std::get<T>(std::move(value_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<Status, T> value_;
};

}  // namespace corral

#define CORRAL_CONCAT_INNER(a, b) a##b
#define CORRAL_CONCAT(a, b) CORRAL_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::corral::Status corral_status_ = (expr);        \
    if (!corral_status_.ok()) return corral_status_; \
  } while (0)

#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(CORRAL_CONCAT(corral_statusor_, __LINE__), lhs, expr)
