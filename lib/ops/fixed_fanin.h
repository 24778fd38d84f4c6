#pragma once
// Fixed fan-in sparse layer ops on the CPU (the reference and the CPU fast path, OpenMP).
// Every label l reads exactly F inputs: indices idx [n×F] uint32 (into [0, m)), weights
// w [n×F], bias [n]. The layer input is kept transposed, ut [m×B] (row = one input
// feature over the batch), so the F gathers of a label are contiguous B-vectors and each
// label's weights and indices are read once per batch block.
// Gradients g [B×n] are dL/dz as the loss functions write them; entries that are exactly
// zero (squared hinge with the margin met) are skipped by both backward ops.
#include <cstdint>

#include "core/context.h"
#include "core/matrix.h"
#include "ops/dense_ops_cuda.h"  // gpu::Bf16Matrix

namespace xmc::ops {

// ut [m×B] = transpose of u [B×m].
void transpose(ConstMatrix u, Matrix ut);
// gt [n×g.rows] (row q = column c0 + q of g) from the columns [c0, c0+n) of g, read row by
// row (whole cache lines of g): the label tiles of the CPU sparse weight gradients
// (fixed_fanin_ops.cpp, group_shared_ops.cpp).
inline void columns_to_rows(ConstMatrix g, int64_t c0, int64_t n, float* gt) {
  for (int64_t r = 0; r < g.rows; ++r) {
    const float* gr = g.row(r) + c0;
    for (int64_t q = 0; q < n; ++q) gt[static_cast<size_t>(q * g.rows + r)] = gr[q];
  }
}
// The same on the Context's device (DEVICE views on a CUDA Context); the bf16 form rounds
// to nearest even and exists on the GPU only (a CPU Context throws xmc::Error).
void transpose(const Context& ctx, ConstMatrix u, Matrix ut);

// The three fixed fan-in ops on the Context's device (DEVICE pointers and views on a CUDA
// Context: gpu::fixed_fanin_* of ops/sparse_ops_cuda.h).
// z [B×n] (ld >= n) = for each b, l: sum_j w[l,j]·ut[idx[l,j], b] + bias[l].
// ut [m×B]; bias may be nullptr (no bias). CPU: parallel over labels.
void fixed_fanin_forward(const Context& ctx, const uint32_t* idx, const float* w, const float* bias,
                         int64_t n, int64_t fan_in, ConstMatrix ut, Matrix z);
// dw [n×F] = sum_b g[b,l]·ut[idx[l,j], b]; db [n] = sum_b g[b,l] (db may be nullptr).
// Labels whose gradient column is all zero get dw = 0 without touching ut; their number
// is added to *zero_labels (nullable; a pointer on the Context's device). CPU: parallel
// over labels.
void fixed_fanin_weight_grad(const Context& ctx, const uint32_t* idx, int64_t n, int64_t fan_in,
                             ConstMatrix g, ConstMatrix ut, float* dw, float* db,
                             unsigned long long* zero_labels);
// du [B×m] += for each nonzero g[b,l]: du[b, idx[l,j]] += g[b,l]·w[l,j].
// CPU: parallel over batch rows: each thread owns whole rows of du, so there are no races
// and no per-thread copies, and the result does not depend on the thread count.
void fixed_fanin_input_grad(const Context& ctx, const uint32_t* idx, const float* w, int64_t n,
                            int64_t fan_in, ConstMatrix g, Matrix du);
void transpose(const Context& ctx, ConstMatrix u, gpu::Bf16Matrix ut);

}  // namespace xmc::ops
