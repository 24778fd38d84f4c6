#include "ops/fixed_fanin.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/launch_shape.h"

namespace xmc::ops {

namespace {
// Labels per tile: z and g rows are read / written 16 floats (one cache line) at a time.
constexpr int64_t kLabelTile = 16;
// Batch rows per forward sweep: one 128-byte row segment per gathered input, and the
// accumulators of a label tile stay in L1.
constexpr int64_t kFwdBatchBlock = 32;

// One label over one packed batch block: a [kFwdBatchBlock] = b0 + sum_j wl[j]·pack row il[j].
// Written with explicit 4-float vectors (GCC/Clang vector extension): as a plain loop,
// inlined in the tile loop, GCC 12 unrolled-and-jammed j and left the r loop scalar
// (perf annotate: mulss/addss, ~4 GFLOP/s on one core).
using FfV4 = float __attribute__((vector_size(16)));
constexpr int kFwdVecs = static_cast<int>(kFwdBatchBlock / 4);
inline void ff_forward_label(const uint32_t* il, const float* wl, int64_t fan_in, const float* pack,
                             float b0, float* a) {
  FfV4 s[kFwdVecs];
  for (int v = 0; v < kFwdVecs; ++v) s[v] = FfV4{b0, b0, b0, b0};
  for (int64_t j = 0; j < fan_in; ++j) {
    const FfV4 wj = FfV4{wl[j], wl[j], wl[j], wl[j]};
    const float* col = pack + static_cast<int64_t>(il[j]) * kFwdBatchBlock;
    for (int v = 0; v < kFwdVecs; ++v) {
      FfV4 c;
      std::memcpy(&c, col + 4 * v, sizeof c);
      s[v] += wj * c;
    }
  }
  std::memcpy(a, s, sizeof s);
}

// The transpose's shapes, on either device.
template <class T>
void check_transpose(ConstMatrix u, MatrixView<T> ut) {
  XMC_CHECK(ut.rows == u.cols && ut.cols == u.rows, "transpose: u [{}×{}] into [{}×{}]", u.rows,
            u.cols, ut.rows, ut.cols);
}
}  // namespace

void check_fanin_shapes(const char* op, const uint32_t* idx, int64_t n, int64_t group,
                        int64_t fan_in, int64_t rows, int64_t cols, int64_t batch) {
  XMC_CHECK(n >= 0 && group >= 1 && fan_in >= 1 && fan_in <= launch::kMaxFanIn &&
                (idx != nullptr || n == 0) && cols == n && rows == batch,
            "{}: n={} G={} F={}, matrix [{}×{}], expected [{}×{}]", op, n, group, fan_in, rows,
            cols, batch, n);
}

bool gradient_tile(ConstMatrix g, int64_t c0, int64_t n, float* gt, float* db, char* live) {
  const int64_t batch = g.rows;
  for (int64_t r = 0; r < batch; ++r) {
    const float* gr = g.row(r) + c0;
    for (int64_t q = 0; q < n; ++q) gt[static_cast<size_t>(q * batch + r)] = gr[q];
  }
  bool any = false;
  for (int64_t q = 0; q < n; ++q) {
    const float* gq = gt + q * batch;
    float sum = 0.0f;
    bool nz = false;
    for (int64_t b = 0; b < batch; ++b) {
      sum += gq[b];
      nz = nz || gq[b] != 0.0f;
    }
    if (db) db[c0 + q] = sum;
    live[q] = nz;
    any = any || nz;
  }
  return any;
}

void fixed_fanin_forward(const Context& ctx, const uint32_t* idx, const float* w, const float* bias,
                         int64_t n, int64_t fan_in, ConstMatrix ut, Matrix z) {
  check_fanin_shapes("fixed fan-in forward", idx, n, 1, fan_in, z.rows, z.cols, ut.cols);
  if (ctx.on_gpu()) {
    gpu::fixed_fanin_forward(ctx.cuda(), idx, w, bias, n, fan_in, ut, z);
    return;
  }
  const int64_t batch = ut.cols;
  const int64_t m = ut.rows;
  const int64_t tiles = (n + kLabelTile - 1) / kLabelTile;
  // The gathers are random rows of ut, so ut's working set must stay in L2. Sweeping all
  // labels per block of kFwdBatchBlock rows, with the block packed contiguously into
  // `pack` [m×kFwdBatchBlock] (m·128 B: 512 KiB at m = 4096), does that; reading ut's
  // rows in place would not (their power-of-two stride maps them onto a few L2 sets).
  // Each label's weights and indices are then read once per batch block (sequentially).
  std::vector<float> pack(static_cast<size_t>(m * kFwdBatchBlock));
#pragma omp parallel
  {
    alignas(64) float acc[kLabelTile][kFwdBatchBlock];
    for (int64_t r0 = 0; r0 < batch; r0 += kFwdBatchBlock) {
      const int64_t rb = std::min(kFwdBatchBlock, batch - r0);
#pragma omp for schedule(static)
      for (int64_t i = 0; i < m; ++i)
        std::memcpy(pack.data() + i * kFwdBatchBlock, ut.row(i) + r0,
                    static_cast<size_t>(rb) * sizeof(float));
        // (implicit barrier: the block is packed before any label reads it)
#pragma omp for schedule(static)
      for (int64_t t = 0; t < tiles; ++t) {
        const int64_t l0 = t * kLabelTile;
        const int64_t lt = std::min(kLabelTile, n - l0);
        for (int64_t q = 0; q < lt; ++q) {
          const int64_t l = l0 + q;
          ff_forward_label(idx + l * fan_in, w + l * fan_in, fan_in, pack.data(),
                           bias ? bias[l] : 0.0f, acc[q]);
        }
        // z [B×n] gets whole cache lines (16 labels) instead of one float per line.
        for (int64_t r = 0; r < rb; ++r) {
          float* zr = z.row(r0 + r) + l0;
          for (int64_t q = 0; q < lt; ++q) zr[q] = acc[q][r];
        }
      }
      // (implicit barrier: nobody repacks while a label still reads the block)
    }
  }
}

void fixed_fanin_weight_grad(const Context& ctx, const uint32_t* idx, int64_t n, int64_t fan_in,
                             ConstMatrix g, ConstMatrix ut, float* dw, float* db,
                             unsigned long long* zero_labels) {
  check_fanin_shapes("fixed fan-in weight gradient", idx, n, 1, fan_in, g.rows, g.cols, ut.cols);
  if (ctx.on_gpu()) {
    gpu::fixed_fanin_weight_grad(ctx.cuda(), idx, n, fan_in, g, ut, dw, db, zero_labels);
    return;
  }
  const int64_t batch = g.rows;
  const int64_t tiles = (n + kLabelTile - 1) / kLabelTile;
  int64_t skipped = 0;
#pragma omp parallel reduction(+ : skipped)
  {
    // gt [tile×B]: the tile's gradient columns (gradient_tile); then per label the nonzero
    // rows and values.
    std::vector<float> gt(static_cast<size_t>(kLabelTile * batch));
    std::vector<char> live(static_cast<size_t>(kLabelTile));
    std::vector<int64_t> rows(static_cast<size_t>(batch));
    std::vector<float> vals(static_cast<size_t>(batch));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t l0 = t * kLabelTile;
      const int64_t lt = std::min(kLabelTile, n - l0);
      gradient_tile(g, l0, lt, gt.data(), db, live.data());
      for (int64_t q = 0; q < lt; ++q) {
        const int64_t l = l0 + q;
        float* dwl = dw + l * fan_in;
        if (!live[static_cast<size_t>(q)]) {
          std::memset(dwl, 0, static_cast<size_t>(fan_in) * sizeof(float));
          ++skipped;
          continue;
        }
        const float* gl = gt.data() + q * batch;
        int64_t nz = 0;
        for (int64_t r = 0; r < batch; ++r) {
          if (gl[r] == 0.0f) continue;
          rows[static_cast<size_t>(nz)] = r;
          vals[static_cast<size_t>(nz++)] = gl[r];
        }
        const uint32_t* il = idx + l * fan_in;
        if (nz == batch) {  // no zeros: a contiguous dot product per slot
          for (int64_t j = 0; j < fan_in; ++j) {
            const float* col = ut.row(il[j]);
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int64_t r = 0; r < batch; ++r) s += gl[r] * col[r];
            dwl[j] = s;
          }
          continue;
        }
        for (int64_t j = 0; j < fan_in; ++j) {
          const float* col = ut.row(il[j]);
          float s = 0.0f;
          for (int64_t k = 0; k < nz; ++k)
            s += vals[static_cast<size_t>(k)] * col[rows[static_cast<size_t>(k)]];
          dwl[j] = s;
        }
      }
    }
  }
  if (zero_labels) *zero_labels += static_cast<unsigned long long>(skipped);
}

void fixed_fanin_input_grad(const Context& ctx, const uint32_t* idx, const float* w, int64_t n,
                            int64_t fan_in, ConstMatrix g, Matrix du) {
  check_fanin_shapes("fixed fan-in input gradient", idx, n, 1, fan_in, g.rows, g.cols, du.rows);
  if (ctx.on_gpu()) {
    gpu::fixed_fanin_input_grad(ctx.cuda(), idx, w, n, fan_in, g, du);
    return;
  }
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
  check_transpose(u, ut);
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

void transpose(const Context& ctx, ConstMatrix u, Matrix ut) {
  if (!ctx.on_gpu()) return transpose(u, ut);
  check_transpose(u, ut);
  gpu::transpose(ctx.cuda(), u, ut);
}

void transpose(const Context& ctx, ConstMatrix u, gpu::Bf16Matrix ut) {
  check_transpose(u, ut);
  gpu::transpose(bf16_device(ctx, "bf16 transpose"), u, ut);
}

}  // namespace xmc::ops
