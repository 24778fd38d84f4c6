#include "core/field_constraints.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace xmc {

// Every comparison with NaN is false: NaN is in no range.
bool Range::contains(double x) const {
  return (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi);
}

namespace {
std::string number(double x, bool integer) {
  if (integer) return fmt::format("{}", static_cast<long long>(x));
  return fmt::format("{}", x);
}
}  // namespace

std::string Range::str(bool integer) const {
  bool has_lo = std::isfinite(lo), has_hi = std::isfinite(hi);
  if (has_lo && has_hi)
    return fmt::format("{}{}, {}{}", lo_open ? '(' : '[', number(lo, integer), number(hi, integer),
                       hi_open ? ')' : ']');
  if (has_lo) return fmt::format("{} {}", lo_open ? ">" : ">=", number(lo, integer));
  if (has_hi) return fmt::format("{} {}", hi_open ? "<" : "<=", number(hi, integer));
  return "";
}

bool Choices::contains(std::string_view s) const {
  return std::find(values.begin(), values.end(), s) != values.end();
}

std::string Choices::str() const { return fmt::format("{}", fmt::join(values, ", ")); }

namespace {
// Optimal string alignment distance (Levenshtein plus adjacent transpositions).
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}
}  // namespace

std::string closest_key(std::string_view key, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = 0;
  for (const auto& c : candidates) {
    size_t dist = edit_distance(key, c);
    if (best.empty() || dist < best_d) {
      best = c;
      best_d = dist;
    }
  }
  if (best.empty()) return best;
  // A plausible typo: a truncation ("chunk" for "chunk_size"), or few edits for the length
  // (none for 3 letters, so "gpu" does not suggest "cpu").
  if (key.size() >= 3)
    for (const auto& c : candidates)
      if (c.starts_with(key)) return c;
  size_t n = std::max(key.size(), best.size());
  size_t limit = n <= 3 ? 0 : n <= 5 ? 1 : std::max<size_t>(2, n / 3);
  return best_d <= limit ? best : std::string{};
}

}  // namespace xmc
