// [relay.prices] of corrald.toml (supervisor/config.cc hands the table here): what each model's
// tokens cost, in USD per million, which the relay meters every call by (budget.h).
#pragma once

#include <string>

#include <toml++/toml.h>

#include "supervisor/relay/budget.h"

namespace corral::supervisor {

// [relay.prices."claude-sonnet-4-5"] input = 3, output = 15, cache_write = 3.75, cache_read = 0.3:
// each part a number or a string of at most 6 decimals, every part needed, no other key. Sets
// each model's price in `prices`; returns "" or what was expected, which the caller prefixes with
// the file, the line and the key.
std::string ParsePrices(const toml::node& node, PriceTable& prices);

}  // namespace corral::supervisor
