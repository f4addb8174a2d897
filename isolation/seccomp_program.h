// The sandbox's seccomp program, compiled from the policy (seccomp_policy.h) with libseccomp at
// build time and embedded in the binary.
//
// libseccomp needs about 100 ms of CPU to compile the ~350-rule policy for three architectures;
// paying that on every `corral run` would dominate a sandbox's cold start. The policy is a
// constant, so the build compiles it once (tool seccomp_program_gen) and the launcher copies the
// embedded instructions. A unit test checks that the embedded program is exactly what
// CompileSeccompPolicy() produces now.
#pragma once

#include "isolation/seccomp_policy.h"

namespace corral::isolation {

// The embedded program (a copy the caller owns).
SeccompProgram PrecompiledSeccompPolicy();

}  // namespace corral::isolation
