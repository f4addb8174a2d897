#include "supervisor/relay/price_config.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <utility>

namespace corral::supervisor {
namespace {

// A price in USD per million tokens: a number (3.75) or a string ("3.75"), at most 6 decimals.
std::optional<int64_t> MicroUsdPerMtok(const toml::node& node) {
  if (const auto* text = node.as_string()) {
    auto parsed = ParseMicroUsd(text->get());
    if (!parsed.ok()) return std::nullopt;
    return *parsed;
  }
  if (const auto* integer = node.as_integer()) {
    if (integer->get() < 0 || integer->get() > 1000000) return std::nullopt;
    return integer->get() * 1000000;
  }
  if (const auto* floating = node.as_floating_point()) {
    const double usd = floating->get();
    if (!(usd >= 0) || usd > 1000000) return std::nullopt;
    return static_cast<int64_t>(std::llround(usd * 1e6));
  }
  return std::nullopt;
}

}  // namespace

std::string ParsePrices(const toml::node& node, PriceTable& prices) {
  const auto* models = node.as_table();
  if (models == nullptr) return "expected tables like [relay.prices.\"claude-sonnet-4-5\"]";
  for (const auto& [model, entry] : *models) {
    const std::string name(model.str());
    const auto* fields = entry.as_table();
    if (fields == nullptr) return name + ": expected a table with input, output, cache_write, cache_read";
    ModelPrice price;
    std::pair<const char*, int64_t*> parts[] = {{"input", &price.input},
                                                {"output", &price.output},
                                                {"cache_write", &price.cache_write},
                                                {"cache_read", &price.cache_read}};
    for (const auto& [key, value] : *fields) {
      bool known = false;
      for (auto& [part, into] : parts) {
        if (key.str() != part) continue;
        auto micro = MicroUsdPerMtok(value);
        if (!micro) return name + "." + part + ": expected USD per million tokens, like 3.75";
        *into = *micro;
        known = true;
      }
      if (!known) return name + "." + std::string(key.str()) + ": unknown key (input, output, cache_write, cache_read)";
    }
    for (auto& [part, into] : parts) {
      if (!fields->contains(part)) return name + ": " + part + " is missing (every part of a price is needed)";
    }
    prices.Set(name, price);
  }
  return "";
}

}  // namespace corral::supervisor
