// Packet filters with libnftables, in the calling thread's network namespace (each call makes its
// own nftables context, which talks netlink from where it is made; isolation/netns.h enters
// namespaces). Rulesets are nft's text. Every call blocks on netlink.
//
// Errors: EIO "nftables: <what nft complained of>", ENOMEM.
#pragma once

#include <set>
#include <string>
#include <string_view>

#include "common/status.h"

namespace corral::isolation::net {

// Runs nft commands, all in one transaction; returns what they print.
StatusOr<std::string> RunNft(const std::string& commands);

// The tables of `family` ("inet", "ip", ...) whose names start with `prefix`, each name without
// the prefix.
StatusOr<std::set<std::string>> ListTables(std::string_view family, std::string_view prefix);

// Makes the table `family name` from `ruleset` (nft text that defines it), replacing one of that
// name, in one transaction: the old rules hold until the new ones do. An empty ruleset removes
// the table, whether it was there or not.
Status ReplaceTable(std::string_view family, std::string_view name, const std::string& ruleset);

// Deletes the table `family name` (an error when there is none).
Status DeleteTable(std::string_view family, std::string_view name);

}  // namespace corral::isolation::net
