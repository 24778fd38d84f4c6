#include "ops/group_shared.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "ops/fixed_fanin.h"  // check_fanin_shapes, gradient_tile

namespace xmc::ops {

namespace {

// Batch rows per tile: a group's gathered tile [F×64] and its accumulators stay in L1/L2.
constexpr int64_t kGsBatchBlock = 64;
// Register block of the forward product: 4 labels × 8 batch rows of accumulators.
constexpr int64_t kGsLabels = 4;
constexpr int64_t kGsRows = 8;
// Batch rows per task of the input gradient (a group's weights are reused across them).
constexpr int64_t kGsRowBlock = 4;

// tile [F×kGsBatchBlock] = ut[idx[j], b0..b0+bn) for each j; columns bn.. up to the next
// multiple of kGsRows are zero (the register blocks read them).
void gs_gather(const uint32_t* ik, int64_t fan_in, ConstMatrix ut, int64_t b0, int64_t bn,
               float* tile) {
  const int64_t padded = std::min(kGsBatchBlock, (bn + kGsRows - 1) / kGsRows * kGsRows);
  for (int64_t j = 0; j < fan_in; ++j) {
    float* t = tile + j * kGsBatchBlock;
    std::memcpy(t, ut.row(ik[j]) + b0, static_cast<size_t>(bn) * sizeof(float));
    for (int64_t r = bn; r < padded; ++r) t[r] = 0.0f;
  }
}

}  // namespace

void group_shared_forward(const Context& ctx, const uint32_t* idx, const float* w,
                          const float* bias, int64_t n, int64_t group, int64_t fan_in,
                          ConstMatrix ut, Matrix z) {
  check_fanin_shapes("group-shared forward", idx, n, group, fan_in, z.rows, z.cols, ut.cols);
  if (ctx.on_gpu()) {
    gpu::group_shared_forward(ctx.cuda(), idx, w, bias, n, group, fan_in, ut, z);
    return;
  }
  const int64_t batch = ut.cols;
  const int64_t groups = (n + group - 1) / group;
#pragma omp parallel
  {
    std::vector<float> tile(static_cast<size_t>(fan_in * kGsBatchBlock));
    // acc [G×kGsBatchBlock]: the group's logits for one batch block, written out row by
    // row so that z gets whole runs of G floats.
    std::vector<float> acc(static_cast<size_t>(group * kGsBatchBlock));
    const std::vector<float> zero_w(static_cast<size_t>(fan_in), 0.0f);
#pragma omp for schedule(static)
    for (int64_t k = 0; k < groups; ++k) {
      const int64_t r0 = k * group;
      const int64_t gn = std::min(group, n - r0);
      for (int64_t b0 = 0; b0 < batch; b0 += kGsBatchBlock) {
        const int64_t bn = std::min(kGsBatchBlock, batch - b0);
        gs_gather(idx + k * fan_in, fan_in, ut, b0, bn, tile.data());
        for (int64_t q0 = 0; q0 < gn; q0 += kGsLabels) {
          const float* wq[kGsLabels];
          float bq[kGsLabels];
          for (int64_t q = 0; q < kGsLabels; ++q) {
            const bool real = q0 + q < gn;
            wq[q] = real ? w + (r0 + q0 + q) * fan_in : zero_w.data();
            bq[q] = real && bias ? bias[r0 + q0 + q] : 0.0f;
          }
          for (int64_t rb = 0; rb < bn; rb += kGsRows) {
            float a[kGsLabels][kGsRows];
            for (int64_t q = 0; q < kGsLabels; ++q)
              for (int64_t r = 0; r < kGsRows; ++r) a[q][r] = bq[q];
            for (int64_t j = 0; j < fan_in; ++j) {
              const float* t = tile.data() + j * kGsBatchBlock + rb;
              for (int64_t q = 0; q < kGsLabels; ++q) {
                const float wj = wq[q][j];
#pragma omp simd
                for (int64_t r = 0; r < kGsRows; ++r) a[q][r] += wj * t[r];
              }
            }
            const int64_t qn = std::min(kGsLabels, gn - q0);
            const int64_t rn = std::min(kGsRows, bn - rb);
            for (int64_t q = 0; q < qn; ++q)
              for (int64_t r = 0; r < rn; ++r)
                acc[static_cast<size_t>((q0 + q) * kGsBatchBlock + rb + r)] = a[q][r];
          }
        }
        for (int64_t r = 0; r < bn; ++r) {
          float* zr = z.row(b0 + r) + r0;
          for (int64_t q = 0; q < gn; ++q) zr[q] = acc[static_cast<size_t>(q * kGsBatchBlock + r)];
        }
      }
    }
  }
}

void group_shared_weight_grad(const Context& ctx, const uint32_t* idx, int64_t n, int64_t group,
                              int64_t fan_in, ConstMatrix g, ConstMatrix ut, float* dw, float* db) {
  check_fanin_shapes("group-shared weight gradient", idx, n, group, fan_in, g.rows, g.cols,
                     ut.cols);
  if (ctx.on_gpu()) {
    gpu::group_shared_weight_grad(ctx.cuda(), idx, n, group, fan_in, g, ut, dw, db);
    return;
  }
  const int64_t batch = g.rows;
  const int64_t groups = (n + group - 1) / group;
#pragma omp parallel
  {
    std::vector<float> tile(static_cast<size_t>(fan_in * kGsBatchBlock));
    // gt [G×B]: the group's gradient columns, read from g row by row.
    std::vector<float> gt(static_cast<size_t>(group * batch));
    std::vector<char> live(static_cast<size_t>(group));
#pragma omp for schedule(static)
    for (int64_t k = 0; k < groups; ++k) {
      const int64_t r0 = k * group;
      const int64_t gn = std::min(group, n - r0);
      const bool any = gradient_tile(g, r0, gn, gt.data(), db, live.data());
      std::memset(dw + r0 * fan_in, 0, static_cast<size_t>(gn * fan_in) * sizeof(float));
      if (!any) continue;
      for (int64_t b0 = 0; b0 < batch; b0 += kGsBatchBlock) {
        const int64_t bn = std::min(kGsBatchBlock, batch - b0);
        gs_gather(idx + k * fan_in, fan_in, ut, b0, bn, tile.data());
        for (int64_t q = 0; q < gn; ++q) {
          if (!live[static_cast<size_t>(q)]) continue;
          const float* gq = gt.data() + q * batch + b0;
          float* dwq = dw + (r0 + q) * fan_in;
          for (int64_t j = 0; j < fan_in; ++j) {
            const float* t = tile.data() + j * kGsBatchBlock;
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int64_t r = 0; r < bn; ++r) s += gq[r] * t[r];
            dwq[j] += s;
          }
        }
      }
    }
  }
}

void group_shared_input_grad(const Context& ctx, const uint32_t* idx, const float* w, int64_t n,
                             int64_t group, int64_t fan_in, ConstMatrix g, Matrix du) {
  check_fanin_shapes("group-shared input gradient", idx, n, group, fan_in, g.rows, g.cols, du.rows);
  if (ctx.on_gpu()) {
    gpu::group_shared_input_grad(ctx.cuda(), idx, w, n, group, fan_in, g, du);
    return;
  }
  const int64_t groups = (n + group - 1) / group;
  const int64_t blocks = (g.rows + kGsRowBlock - 1) / kGsRowBlock;
#pragma omp parallel
  {
    std::vector<float> v(static_cast<size_t>(fan_in));
#pragma omp for schedule(dynamic, 1)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t b1 = std::min(g.rows, (blk + 1) * kGsRowBlock);
      for (int64_t k = 0; k < groups; ++k) {
        const int64_t r0 = k * group;
        const int64_t gn = std::min(group, n - r0);
        const uint32_t* ik = idx + k * fan_in;
        for (int64_t b = blk * kGsRowBlock; b < b1; ++b) {
          const float* gb = g.row(b) + r0;
          bool any = false;
          for (int64_t q = 0; q < gn; ++q) {
            const float gv = gb[q];
            if (gv == 0.0f) continue;
            const float* wq = w + (r0 + q) * fan_in;
            if (!any) {
              for (int64_t j = 0; j < fan_in; ++j) v[static_cast<size_t>(j)] = gv * wq[j];
              any = true;
            } else {
#pragma omp simd
              for (int64_t j = 0; j < fan_in; ++j) v[static_cast<size_t>(j)] += gv * wq[j];
            }
          }
          if (!any) continue;
          float* dur = du.row(b);
          for (int64_t j = 0; j < fan_in; ++j) dur[ik[j]] += v[static_cast<size_t>(j)];
        }
      }
    }
  }
}

void group_shared_forward(const Context& ctx, const uint32_t* idx, const gpu::Bf16* w,
                          const float* bias, int64_t n, int64_t group, int64_t fan_in,
                          gpu::ConstBf16Matrix ut, Matrix z) {
  check_fanin_shapes("group-shared forward", idx, n, group, fan_in, z.rows, z.cols, ut.cols);
  gpu::group_shared_forward(bf16_device(ctx, "group-shared forward"), idx, w, bias, n, group,
                            fan_in, ut, z);
}
void group_shared_weight_grad(const Context& ctx, const uint32_t* idx, int64_t n, int64_t group,
                              int64_t fan_in, ConstMatrix g, gpu::ConstBf16Matrix ut, float* dw,
                              float* db) {
  check_fanin_shapes("group-shared weight gradient", idx, n, group, fan_in, g.rows, g.cols,
                     ut.cols);
  gpu::group_shared_weight_grad(bf16_device(ctx, "group-shared weight gradient"), idx, n, group,
                                fan_in, g, ut, dw, db);
}
void group_shared_input_grad(const Context& ctx, const uint32_t* idx, const gpu::Bf16* w, int64_t n,
                             int64_t group, int64_t fan_in, ConstMatrix g, Matrix du) {
  check_fanin_shapes("group-shared input gradient", idx, n, group, fan_in, g.rows, g.cols, du.rows);
  gpu::group_shared_input_grad(bf16_device(ctx, "group-shared input gradient"), idx, w, n, group,
                               fan_in, g, du);
}

}  // namespace xmc::ops
