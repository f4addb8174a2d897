// System calls without libc: no errno (a thread-local the caller may share), no cancellation
// points, no setxid broadcast to other threads. For code that runs in a child sharing its
// parent's memory (clone with CLONE_VM), where writing anything of the parent's is a race.
//
// Returns the kernel's result: >= 0 on success, -errno on failure.
#pragma once

#include <sys/syscall.h>

namespace corral::init {

inline long RawSyscall6(long number, long a, long b, long c, long d, long e, long f) {
  long result;
#if defined(__x86_64__)
  register long r10 __asm__("r10") = d;
  register long r8 __asm__("r8") = e;
  register long r9 __asm__("r9") = f;
  __asm__ volatile("syscall"
                   : "=a"(result)
                   : "a"(number), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
#elif defined(__aarch64__)
  register long x8 __asm__("x8") = number;
  register long x0 __asm__("x0") = a;
  register long x1 __asm__("x1") = b;
  register long x2 __asm__("x2") = c;
  register long x3 __asm__("x3") = d;
  register long x4 __asm__("x4") = e;
  register long x5 __asm__("x5") = f;
  __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory");
  result = x0;
#else
#error "corral-init: RawSyscall6 has no implementation for this architecture"
#endif
  return result;
}

template <typename... Args>
inline long RawSyscall(long number, Args... args) {
  static_assert(sizeof...(Args) <= 6, "at most six arguments");
  long a[6] = {(long)args...};  // NOLINT: pointers and integers alike become registers
  return RawSyscall6(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}

// A call interrupted by a signal is retried.
template <typename... Args>
inline long RawSyscallRetry(long number, Args... args) {
  long result;
  do {
    result = RawSyscall(number, args...);
  } while (result == -4 /* EINTR */);
  return result;
}

}  // namespace corral::init
