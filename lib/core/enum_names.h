#pragma once
// The names of an enum's values in one table per enum, for parsing config strings and for
// printing: parse_enum and enum_name replace a parse function and a to_string switch each.
#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "core/error.h"

namespace xmc {

template <class E>
using EnumName = std::pair<E, std::string_view>;

// The value called `name`; InputError "unknown <what> '<name>': expected one of a, b, c".
template <class E, size_t N>
E parse_enum(const std::array<EnumName<E>, N>& names, std::string_view name, std::string_view what) {
  for (const auto& [value, n] : names)
    if (n == name) return value;
  std::string known;
  for (const auto& entry : names) known += (known.empty() ? "" : ", ") + std::string(entry.second);
  throw_input("unknown {} '{}': expected one of {}", what, name, known);
}

// The name of `value` ("?" for a value outside the table).
template <class E, size_t N>
std::string_view enum_name(const std::array<EnumName<E>, N>& names, E value) {
  for (const auto& [v, n] : names)
    if (v == value) return n;
  return "?";
}

}  // namespace xmc
