#pragma once
// What a config field allows: numeric ranges, fixed string choices, optional paths. The
// struct visit() methods pass these to every visitor (reader, writer, reference).
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "core/enum_names.h"

namespace xmc {

// A config struct that a visitor V (NodeReader, NodeWriter, ReferenceCollector) can walk:
// s.visit(v) calls v.field(key, member, doc[, constraint]) for every field.
template <class S, class V>
concept VisitableBy = requires(S& s, V& v) {
  s.visit(v);
};

// A numeric interval; infinite ends are unbounded. Range{1, 100000} is [1, 100000].
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false;  // true: lo itself is excluded
  bool hi_open = false;

  static Range at_least(double lo) { return {lo, std::numeric_limits<double>::infinity()}; }
  static Range greater_than(double lo) {
    return {lo, std::numeric_limits<double>::infinity(), true, false};
  }
  static Range half_open(double lo, double hi) { return {lo, hi, false, true}; }  // [lo, hi)

  bool contains(double x) const;
  // "[1, 100000]", "[0, 1)", ">= 0", "> 0", "" when unbounded. integer: no decimals.
  std::string str(bool integer) const;
};

// A field restricted to a fixed list, in the order the reference and the messages give it:
// strings, or values of an enum field (core/enum_names.h) by their names; of() lists every
// value of the enum (what an enum field without Choices allows).
struct Choices {
  std::vector<std::string> values;
  Choices(std::initializer_list<std::string_view> v) : values(v.begin(), v.end()) {}
  template <NamedEnum E>
  Choices(std::initializer_list<E> v) {
    for (E e : v) values.emplace_back(to_string(e));
  }
  template <NamedEnum E>
  static Choices of() {
    Choices c({});
    for (size_t i = 0; !nth_enum_name(enum_name_list(E{}), i).empty(); ++i)
      c.values.emplace_back(nth_enum_name(enum_name_list(E{}), i));
    return c;
  }
  bool contains(std::string_view s) const;
  std::string str() const;  // "cpu, cuda, auto"
};

// An optional file or directory path: empty string = unset.
struct PathField {};

// The candidate closest to `key` by edit distance (adjacent transpositions count 1), or
// "" when none is close enough to be a plausible typo.
std::string closest_key(std::string_view key, const std::vector<std::string>& candidates);

}  // namespace xmc
