// Names of an enum's values from one table, written in the enum's declaration order (the enum's
// values being 0, 1, 2, ...): a value outside the table is `fallback`. For names that logs,
// metrics and the protocol show; a table cannot forget a case as silently as a switch's default.
#pragma once

#include <cstddef>
#include <string_view>

namespace corral {

template <typename Enum, size_t N>
constexpr std::string_view EnumName(Enum value, const std::string_view (&names)[N],
                                    std::string_view fallback = "unknown") {
  const auto index = static_cast<size_t>(value);
  return index < N ? names[index] : fallback;
}

}  // namespace corral
