// The outcome taxonomy lives in supervisor/commands/outcome.h (shared by `corral run`, the daemon and its
// store); the CLI uses it under its old names.
#pragma once

#include "supervisor/commands/outcome.h"

namespace corral::cli {

using supervisor::ClassifyOutcome;
using supervisor::ExitCodeFor;
using supervisor::Outcome;
using supervisor::OutcomeEvidence;
using supervisor::OutcomeKind;
using supervisor::OutcomeName;
using supervisor::OutcomeToJson;

}  // namespace corral::cli
