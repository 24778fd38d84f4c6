#pragma once
// Helpers for the model tests: CSR construction, random fills and central finite
// differences in double.
#include <cstdint>
#include <functional>
#include <vector>

#include "core/matrix.h"
#include "core/rng.h"

namespace xmc::test {

// Pattern-only (values empty) or valued CSR from per-row sorted ids.
inline CsrMatrix make_csr(const std::vector<std::vector<uint32_t>>& rows, int64_t cols,
                          const std::vector<std::vector<float>>* values = nullptr) {
  CsrMatrix m = CsrMatrix::from_rows(rows, cols);
  if (values)
    for (const auto& v : *values) m.values.insert(m.values.end(), v.begin(), v.end());
  return m;
}

inline std::vector<double> random_vector(Rng& rng, size_t n, double lo, double hi) {
  std::vector<double> v(n);
  for (auto& x : v) x = lo + (hi - lo) * rng.uniform();
  return v;
}

inline std::vector<float> to_float(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

// Central difference of f with respect to every entry of x (x restored afterwards).
inline std::vector<double> numerical_gradient(const std::function<double()>& f,
                                              std::vector<double>& x, double eps = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double orig = x[i];
    x[i] = orig + eps;
    const double fp = f();
    x[i] = orig - eps;
    const double fm = f();
    x[i] = orig;
    g[i] = (fp - fm) / (2 * eps);
  }
  return g;
}

// |a - n| <= abs + rel·|n| : analytical (float) vs numerical (double).
inline bool close(double a, double n, double rel = 1e-4, double abs = 1e-6) {
  return std::abs(a - n) <= abs + rel * std::abs(n);
}

}  // namespace xmc::test
