#include "kernels/fixed_fanin_ops.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace xmc::kernels {

namespace {
// Batch rows per block: the accumulators of one label stay in registers / L1.
constexpr int64_t kBatchBlock = 64;
}  // namespace

void fixed_fanin_forward(const uint32_t* idx, const float* w, const float* bias, int64_t n,
                         int64_t fan_in, ConstMatrix ut, Matrix z) {
  XMC_CHECK(z.cols == n && z.rows == ut.cols, "fixed fan-in forward: z [{}×{}], n={}, ut [{}×{}]",
            z.rows, z.cols, n, ut.rows, ut.cols);
  const int64_t batch = ut.cols;
#pragma omp parallel for schedule(static)
  for (int64_t l = 0; l < n; ++l) {
    const uint32_t* il = idx + l * fan_in;
    const float* wl = w + l * fan_in;
    const float b0 = bias ? bias[l] : 0.0f;
    float acc[kBatchBlock];
    for (int64_t r0 = 0; r0 < batch; r0 += kBatchBlock) {
      const int64_t rb = std::min(kBatchBlock, batch - r0);
      for (int64_t r = 0; r < rb; ++r) acc[r] = b0;
      for (int64_t j = 0; j < fan_in; ++j) {
        const float wj = wl[j];
        const float* col = ut.row(il[j]) + r0;
#pragma omp simd
        for (int64_t r = 0; r < rb; ++r) acc[r] += wj * col[r];
      }
      for (int64_t r = 0; r < rb; ++r) z(r0 + r, l) = acc[r];
    }
  }
}

int64_t fixed_fanin_weight_grad(const uint32_t* idx, int64_t n, int64_t fan_in, ConstMatrix g,
                                ConstMatrix ut, float* dw, float* db) {
  XMC_CHECK(g.cols == n && g.rows == ut.cols,
            "fixed fan-in weight gradient: g [{}×{}], n={}, ut [{}×{}]", g.rows, g.cols, n,
            ut.rows, ut.cols);
  const int64_t batch = g.rows;
  int64_t skipped = 0;
#pragma omp parallel reduction(+ : skipped)
  {
    // The label's nonzero gradients: rows and values.
    std::vector<int64_t> rows(static_cast<size_t>(batch));
    std::vector<float> vals(static_cast<size_t>(batch));
#pragma omp for schedule(static)
    for (int64_t l = 0; l < n; ++l) {
      int64_t nz = 0;
      float sum = 0.0f;
      for (int64_t r = 0; r < batch; ++r) {
        const float v = g(r, l);
        if (v != 0.0f) {
          rows[static_cast<size_t>(nz)] = r;
          vals[static_cast<size_t>(nz)] = v;
          ++nz;
          sum += v;
        }
      }
      if (db) db[l] = sum;
      float* dwl = dw + l * fan_in;
      if (nz == 0) {
        std::memset(dwl, 0, static_cast<size_t>(fan_in) * sizeof(float));
        ++skipped;
        continue;
      }
      const uint32_t* il = idx + l * fan_in;
      for (int64_t j = 0; j < fan_in; ++j) {
        const float* col = ut.row(il[j]);
        float s = 0.0f;
        for (int64_t t = 0; t < nz; ++t) s += vals[static_cast<size_t>(t)] * col[rows[static_cast<size_t>(t)]];
        dwl[j] = s;
      }
    }
  }
  return skipped;
}

void fixed_fanin_input_grad(const uint32_t* idx, const float* w, int64_t n, int64_t fan_in,
                            ConstMatrix g, Matrix du) {
  XMC_CHECK(g.cols == n && g.rows == du.rows, "fixed fan-in input gradient: g [{}×{}], n={}, du [{}×{}]",
            g.rows, g.cols, n, du.rows, du.cols);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t r = 0; r < g.rows; ++r) {
    const float* gr = g.row(r);
    float* dur = du.row(r);
    for (int64_t l = 0; l < n; ++l) {
      const float v = gr[l];
      if (v == 0.0f) continue;
      const uint32_t* il = idx + l * fan_in;
      const float* wl = w + l * fan_in;
      for (int64_t j = 0; j < fan_in; ++j) dur[il[j]] += v * wl[j];
    }
  }
}

void transpose(ConstMatrix u, Matrix ut) {
  XMC_CHECK(ut.rows == u.cols && ut.cols == u.rows, "transpose: u [{}×{}] into [{}×{}]", u.rows,
            u.cols, ut.rows, ut.cols);
  constexpr int64_t kTile = 32;
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < u.cols; c0 += kTile) {
    const int64_t c1 = std::min(u.cols, c0 + kTile);
    for (int64_t r0 = 0; r0 < u.rows; r0 += kTile) {
      const int64_t r1 = std::min(u.rows, r0 + kTile);
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t r = r0; r < r1; ++r) ut(c, r) = u(r, c);
    }
  }
}

}  // namespace xmc::kernels
