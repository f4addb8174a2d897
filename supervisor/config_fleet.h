// [store] and [node] keys of corrald.toml that need more than a size or a count
// (supervisor/config.cc): where the store is, and this corrald as a node of a fleet. Each returns
// "" or what was expected, which the caller prefixes with the file, the line and the key.
#pragma once

#include <string>

#include <toml++/toml.h>

namespace corral::supervisor {

// store.backend: "sqlite" or "postgresql".
std::string ParseStoreBackend(const toml::node& node, bool& postgresql);

// store.url: a PostgreSQL connection string, as libpq takes it (checked when corrald connects);
// never repeated in errors, in case it holds a password despite url_file.
std::string ParseStoreUrl(const toml::node& node, std::string& out);

// node.id: what the fleet knows a node by, in its rows and in errors: letters, digits, '.', '-'
// and '_', at most 64.
std::string ParseNodeId(const toml::node& node, std::string& out);

// node.address: host:port (a name or an address, a numeric port) where the other nodes reach it.
std::string ParseNodeAddress(const toml::node& node, std::string& out);

}  // namespace corral::supervisor
