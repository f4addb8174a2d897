// corral-init --control: PID 1 of a persistent sandbox, serving corrald on fd 3.
#pragma once

namespace corral::init {

// Never returns while the sandbox lives; its exit ends the sandbox. fds 4 .. 3 + listeners are
// listening sockets that the daemon serves: PID 1 only holds them, and gives them to each
// daemon that says hello.
int RunControl(int listeners);

}  // namespace corral::init
