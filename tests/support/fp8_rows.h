#pragma once
// fp8 (e4m3) rows in the tests: values rounded row by row as WeightArray::commit rounds
// them (a power-of-two scale from each row's largest |w|, nearest even), widened back, and
// the step between fp8 neighbours.
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/dense.h"

namespace xmc::test {

// Each row of x [rows×cols] rounded to fp8 to nearest: codes and scales.
inline void to_fp8_rows(const std::vector<float>& x, int64_t rows, int64_t cols,
                        std::vector<gpu::Fp8>& codes, std::vector<float>& scales) {
  codes.resize(x.size());
  scales.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    float top = 0.0f;
    for (int64_t j = 0; j < cols; ++j) top = std::fmax(top, std::fabs(x[r * cols + j]));
    scales[r] = gpu::fp8_row_scale(top);
    const float inv = gpu::fp8_inverse_scale(scales[r]);
    for (int64_t j = 0; j < cols; ++j)
      codes[r * cols + j].bits = gpu::fp8_code(x[r * cols + j] * inv, 0, false);
  }
}

// The values of fp8 codes with one scale per row of cols.
inline std::vector<float> widened(const std::vector<gpu::Fp8>& codes,
                                  const std::vector<float>& scales, int64_t cols) {
  std::vector<float> w(codes.size());
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = gpu::fp8_value(codes[i].bits) * scales[i / static_cast<size_t>(cols)];
  return w;
}

// x [rows×cols] rounded to fp8 row by row and widened back.
inline std::vector<float> fp8_rounded_rows(const std::vector<float>& x, int64_t rows,
                                           int64_t cols) {
  std::vector<gpu::Fp8> codes;
  std::vector<float> scales;
  to_fp8_rows(x, rows, cols, codes, scales);
  return widened(codes, scales, cols);
}

// The step between fp8 neighbours around |x| (x already divided by its row's scale).
inline double fp8_quantum(double x) {
  const double a = std::abs(x);
  if (a < 0.015625) return 1.0 / 512;
  return std::ldexp(1.0, static_cast<int>(std::floor(std::log2(a))) - 3);
}

}  // namespace xmc::test
