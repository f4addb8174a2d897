// The sandbox's seccomp policy: a default-deny allowlist, compiled with libseccomp in the parent
// and loaded last in the child (just before execveat of corral-init).
//
// The policy is a table of documented syscall groups (AllowedSyscallGroups) plus a list of
// syscalls denied on purpose with EPERM (DeniedSyscalls), each with the reason. Anything in
// neither list fails with ENOSYS (so libc can fall back for syscalls newer than the policy).
// Argument filters (ArgumentFilteredSyscalls):
//  - clone: any namespace flag (CLONE_NEWUSER|NEWNS|NEWPID|NEWNET|NEWUTS|NEWIPC|NEWCGROUP|
//    NEWTIME) -> EPERM; plain fork/threads allowed.
//  - clone3: ENOSYS always (its flags sit in memory the filter cannot read; libc falls back to
//    clone, whose flags are checked).
//  - socket: AF_UNIX and AF_NETLINK (any type); AF_INET/AF_INET6 only as TCP (SOCK_STREAM,
//    protocol 0 or IPPROTO_TCP) or UDP/ping (SOCK_DGRAM, protocol 0, IPPROTO_UDP or ICMP/ICMPv6).
//    Every other family (AF_ALG, AF_VSOCK, AF_PACKET, ...), raw IP sockets and other IP
//    protocols (SCTP, MPTCP, L2TP, ...) -> EPERM. socketpair: AF_UNIX only.
//  - ioctl: TIOCSTI, TIOCLINUX and TIOCSETD -> EPERM (the low 32 bits of the request are
//    compared, as the kernel truncates it to an unsigned int).
//  - personality: only the values Docker's profile allows (PER_LINUX, PER_LINUX32, UNAME26,
//    UNAME26|PER_LINUX32, and the 0xffffffff query); anything else -> EPERM.
// Every architecture the CPU can run is filtered: x86_64, x86 (i386) and x32 on x86_64 hosts;
// a syscall from any other architecture kills the process. On x86 (i386) sockets cannot be
// created at all (socket, socketpair and socketcall(SYS_SOCKET/SYS_SOCKETPAIR) -> EPERM):
// libseccomp cannot check a multiplexed socketcall's arguments, which sit in memory.
//
// Loading, in the child: prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), then
// syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fprog) with flags 0 (the child is single
// threaded, so no TSYNC). The filter allows execveat, so it can be loaded before the final
// execveat of corral-init.
#pragma once

#include <linux/filter.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace corral::isolation {

struct SyscallGroup {
  std::string name;                   // e.g. "file-io"
  std::string description;            // what the group is for
  std::vector<std::string> syscalls;  // names as libseccomp knows them
};

struct DeniedSyscall {
  std::string name;
  std::string reason;  // why it is denied, e.g. "new mount API: CVE-2021-41133"
};

// A syscall whose action depends on its arguments (or, for clone3, is fixed to ENOSYS).
struct FilteredSyscall {
  std::string name;
  std::string rule;  // what is allowed and what is refused, with which errno
};

// The allowlist, grouped and documented. Names that do not exist on an architecture (e.g.
// the 32-bit "_llseek" on x86_64) are skipped for that architecture.
const std::vector<SyscallGroup>& AllowedSyscallGroups();

// Syscalls denied on purpose with EPERM.
const std::vector<DeniedSyscall>& DeniedSyscalls();

// Syscalls with argument rules. No name appears in more than one of the three tables.
const std::vector<FilteredSyscall>& ArgumentFilteredSyscalls();

// The architectures the compiled program filters, as SCMP_ARCH_* tokens: the native one first,
// then every other ABI the CPU can run (x86 and x32 on x86_64).
std::vector<uint32_t> FilteredArchitectures();

// A compiled BPF program ready for seccomp(SECCOMP_SET_MODE_FILTER).
struct SeccompProgram {
  std::vector<sock_filter> instructions;
  // A sock_fprog pointing into `instructions`; valid while this object lives and is not moved.
  sock_fprog fprog() const {
    return sock_fprog{static_cast<unsigned short>(instructions.size()),
                      const_cast<sock_filter*>(instructions.data())};
  }
};

// Compiles the policy for every architecture the host can run. The result holds at most
// BPF_MAXINSNS instructions.
StatusOr<SeccompProgram> CompileSeccompPolicy();

}  // namespace corral::isolation
