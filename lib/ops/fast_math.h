#pragma once
// Branch-free float exp and log1p that the compiler vectorises inside `#pragma omp simd`
// loops (glibc's expf/log1pf are calls that keep a loop scalar: in the dense softmax
// and bce losses they were a third of a training step). Cephes-style range reduction and
// minimax polynomials; relative error below 3e-7 on the ranges used (checked against
// double precision in tests/model/test_fast_math.cpp).
#include <algorithm>
#include <bit>
#include <cstdint>

namespace xmc {

// exp(x) for x in [-87.3, 88]; below -87.3 (and -inf) exactly 0 — a well-classified
// label's gradient must underflow to 0 as with std::exp —, above 88 clamped to e^88.
//
// Every branch below is a select between values computed unconditionally: GCC does not
// if-convert a conditional arithmetic expression (it might trap), which would keep the
// calling loop scalar.
inline float exp_approx(float x) {
  const bool underflow = x < -87.3f;
  x = std::max(x, -87.3f);
  x = std::min(x, 88.0f);
  // n = round(x / ln 2) through the 1.5·2^23 trick (exact for |x/ln2| < 2^22).
  constexpr float kRound = 12582912.0f;
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  // r = x - n·ln2 in two parts (Cody–Waite), |r| <= ln2/2.
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const auto bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  const float v = p * std::bit_cast<float>(bits);
  return underflow ? 0.0f : v;
}

// log(1 + e) for e in [0, 1] (the softplus of a non-positive argument). e is used
// directly (never 1 + e - 1), so tiny e keeps full relative precision.
inline float log1p_unit_approx(float e) {
  // 1 + e in [1, 2]: below sqrt(2) take x = e, k = 0; above, (1+e)/2 = 1 + x with
  // x = (e - 1)/2 in [-0.29, 0], k = 1.
  const bool high = e > 0.41421356f;
  const float x_high = (e - 1.0f) * 0.5f;
  const float x = high ? x_high : e;
  const float k = high ? 1.0f : 0.0f;
  const float z = x * x;
  float y = 7.0376836292e-2f;
  y = y * x - 1.1514610310e-1f;
  y = y * x + 1.1676998740e-1f;
  y = y * x - 1.2420140846e-1f;
  y = y * x + 1.4249322787e-1f;
  y = y * x - 1.6668057665e-1f;
  y = y * x + 2.0000714765e-1f;
  y = y * x - 2.4999993993e-1f;
  y = y * x + 3.3333331174e-1f;
  y = y * x * z;
  y += -2.12194440e-4f * k;
  y += -0.5f * z;
  return x + y + 0.693359375f * k;
}

}  // namespace xmc
