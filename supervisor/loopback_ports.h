// The ports the daemon's services listen on in every sandbox's own 127.0.0.1 (DESIGN.md §3
// Network). The sandbox's init makes the listening sockets before the sandbox starts
// (LoopbackServices); the configuration may move the relay and the egress proxy, not the bridge.
#pragma once

#include <cstdint>

namespace corral::supervisor {

inline constexpr uint16_t kModelRelayPort = 7880;   // relay.port's default: ANTHROPIC_BASE_URL
inline constexpr uint16_t kToolBridgePort = 7881;   // fixed: corral-mcp's CORRAL_TOOL_BRIDGE
inline constexpr uint16_t kEgressProxyPort = 7882;  // egress.port's default: HTTP(S)_PROXY

}  // namespace corral::supervisor
