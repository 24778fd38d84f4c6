// exp_approx / log1p_unit_approx against double precision over their whole input ranges.
#include <catch2/catch.hpp>
#include <cmath>

#include "ops/fast_math.h"

using namespace xmc;

TEST_CASE("exp_approx is within 3e-7 relative of exp over [-87 88]") {
  double worst = 0.0;
  for (int i = 0; i <= 2000000; ++i) {
    const float x = -87.0f + 175.0f * static_cast<float>(i) / 2000000.0f;
    const double ref = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(exp_approx(x) - ref) / ref);
  }
  CHECK(worst < 3e-7);
  CHECK(exp_approx(0.0f) == 1.0f);
  // Underflow is exactly 0 (as std::exp in float), overflow is clamped, never inf/NaN.
  CHECK(exp_approx(-INFINITY) == 0.0f);
  CHECK(exp_approx(-200.0f) == 0.0f);
  CHECK(exp_approx(-87.0f) > 0.0f);
  CHECK(std::isfinite(exp_approx(1000.0f)));
  CHECK(exp_approx(1000.0f) == exp_approx(88.0f));
}

TEST_CASE("log1p_unit_approx is within 3e-7 relative of log1p on [0 1]") {
  double worst = 0.0;
  for (int i = 1; i <= 2000000; ++i) {
    const float e = static_cast<float>(i) / 2000000.0f;
    const double ref = std::log1p(static_cast<double>(e));
    worst = std::max(worst, std::fabs(log1p_unit_approx(e) - ref) / ref);
  }
  CHECK(worst < 3e-7);
  // Tiny arguments keep full relative precision (log1p(e) ~ e).
  for (float e : {1e-30f, 1e-12f, 1e-8f, 3e-7f}) {
    CHECK(std::fabs(log1p_unit_approx(e) - e) <= 1e-6 * e);
  }
  CHECK(log1p_unit_approx(0.0f) == 0.0f);
}
