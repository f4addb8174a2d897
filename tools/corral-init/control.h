// corral-init --control: PID 1 of a persistent sandbox, serving corrald on fd 3.
#pragma once

namespace corral::init {

// Never returns while the sandbox lives; its exit ends the sandbox.
int RunControl();

}  // namespace corral::init
