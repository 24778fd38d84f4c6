#pragma once
// A helper of the CPU sparse kernels (fixed_fanin_ops.cpp, group_shared_ops.cpp).
#include <cstddef>
#include <cstdint>

#include "core/matrix.h"

namespace xmc::kernels {

// gt [n×g.rows] (row q = column c0 + q of g) from the columns [c0, c0+n) of g, read row by
// row (whole cache lines of g).
inline void columns_to_rows(ConstMatrix g, int64_t c0, int64_t n, float* gt) {
  for (int64_t r = 0; r < g.rows; ++r) {
    const float* gr = g.row(r) + c0;
    for (int64_t q = 0; q < n; ++q) gt[static_cast<size_t>(q * g.rows + r)] = gr[q];
  }
}

}  // namespace xmc::kernels
