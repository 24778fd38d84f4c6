#pragma once
// The names of an enum's values, in one place per enum: its YAML values (the config
// visitors of lib/config read and write them), its printed form and the messages.
// XMC_NAMED_ENUM(LossType, bce, squared_hinge, softmax) declares the enum and its names,
// the identifiers themselves; an enum whose names are not identifiers declares
// `constexpr std::string_view enum_name_list(E) { return "auto, xc"; }` beside itself.
// Either way the values are 0, 1, ... in the order of the names.
// No fmt here (the ops headers that nvcc compiles include this one): the message of an
// unknown name is built in enum_names.cpp.
#include <cstddef>
#include <string_view>
#include <type_traits>

#define XMC_NAMED_ENUM(Name, ...)  \
  enum class Name { __VA_ARGS__ }; \
  constexpr std::string_view enum_name_list(Name) { return #__VA_ARGS__; }

namespace xmc {

template <class E>
concept NamedEnum = std::is_enum_v<E> && requires(E e) {
  { enum_name_list(e) } -> std::convertible_to<std::string_view>;
};

// The i-th name of a list "a, b, c" ("" past its end).
constexpr std::string_view nth_enum_name(std::string_view list, size_t i) {
  for (; i > 0 && list.find(',') != std::string_view::npos; --i) list.remove_prefix(list.find(',') + 1);
  if (i > 0) return {};
  list = list.substr(0, list.find(','));
  while (!list.empty() && list.front() == ' ') list.remove_prefix(1);
  while (!list.empty() && list.back() == ' ') list.remove_suffix(1);
  return list;
}

// The name of `value` ("?" for a value outside the list).
template <NamedEnum E>
constexpr std::string_view to_string(E value) {
  const std::string_view n = nth_enum_name(enum_name_list(value), static_cast<size_t>(value));
  return n.empty() ? "?" : n;
}

// Throws InputError "unknown <what> '<name>': expected one of a, b, c" (the names of `list`).
[[noreturn]] void throw_unknown_enum_name(std::string_view list, std::string_view what,
                                          std::string_view name);

// The value called `name`; InputError "unknown <what> '<name>': expected one of a, b, c".
template <NamedEnum E>
E parse_enum(std::string_view name, std::string_view what) {
  for (size_t i = 0; !nth_enum_name(enum_name_list(E{}), i).empty(); ++i)
    if (nth_enum_name(enum_name_list(E{}), i) == name) return static_cast<E>(i);
  throw_unknown_enum_name(enum_name_list(E{}), what, name);
}

}  // namespace xmc
