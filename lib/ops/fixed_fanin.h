#pragma once
// The fixed fan-in op family: every label l reads exactly F inputs: indices idx [n×F]
// uint32 (into [0, m)), weights w [n×F], bias [n]. The layer input is kept transposed,
// ut [m×B] (row = one input feature over the batch), so the F gathers of a label are
// contiguous B-vectors and each label's weights and indices are read once per batch block.
// Gradients g [B×n] are dL/dz as the loss functions write them; entries that are exactly
// zero (squared hinge with the margin met) are skipped by both backward ops.
// Each op takes the Context, checks the shapes and runs the CPU op (ops/fixed_fanin.cpp,
// OpenMP) or the gpu:: half below (DEVICE pointers and views).
#include <cstdint>

#include "core/context.h"
#include "core/matrix.h"
#include "ops/dense.h"  // gpu::Bf16Matrix

namespace xmc::ops {

// ut [m×B] = transpose of u [B×m].
void transpose(ConstMatrix u, Matrix ut);
// The same on the Context's device; the bf16 form rounds to nearest even and exists on
// the GPU only (a CPU Context throws xmc::Error).
void transpose(const Context& ctx, ConstMatrix u, Matrix ut);
void transpose(const Context& ctx, ConstMatrix u, gpu::Bf16Matrix ut);

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

// Shared with the group-shared ops (ops/group_shared.cpp; fixed fan-in is group size 1):
// the shape check of an op over n labels in groups of `group` (idx [ceil(n/G)×F]) whose
// matrix [rows×cols] must be [batch×n], and the label tile of a CPU weight gradient:
// gt [n×g.rows] (row q = column c0 + q of g, read row by row: whole cache lines of g),
// db[c0 + q] = the column's sum (db nullable), live[q] = whether it has a nonzero entry;
// returns whether any has.
void check_fanin_shapes(const char* op, const uint32_t* idx, int64_t n, int64_t group,
                        int64_t fan_in, int64_t rows, int64_t cols, int64_t batch);
bool gradient_tile(ConstMatrix g, int64_t c0, int64_t n, float* gt, float* db, char* live);

}  // namespace xmc::ops

// The CUDA half (cuda/fixed_fanin.cu), called by lib/ops/fixed_fanin.cpp after its shape
// checks: work queued on the context's stream, every launch checked, nothing synchronises;
// stubs that throw in a build without CUDA (core/gpu.h). Kernel design: docs/gpu.md.
XMC_GPU_STUBS_BEGIN
namespace xmc::gpu {
XMC_GPU_FN void transpose(const CudaContext& ctx, ConstMatrix u, Matrix ut) XMC_GPU_STUB;
XMC_GPU_FN void transpose(const CudaContext& ctx, ConstMatrix u, Bf16Matrix ut) XMC_GPU_STUB;
XMC_GPU_FN void fixed_fanin_forward(const CudaContext& ctx, const uint32_t* idx, const float* w,
                                    const float* bias, int64_t n, int64_t fan_in, ConstMatrix ut,
                                    Matrix z) XMC_GPU_STUB;
// Batch tiles of 32 rows whose gradients are all zero are skipped; zero_labels is a device
// counter.
XMC_GPU_FN void fixed_fanin_weight_grad(const CudaContext& ctx, const uint32_t* idx, int64_t n,
                                        int64_t fan_in, ConstMatrix g, ConstMatrix ut, float* dw,
                                        float* db,
                                        unsigned long long* zero_labels = nullptr) XMC_GPU_STUB;
// Accumulates per block in shared memory when a 32-row tile of du fits in 96 KiB
// (m <= 768), else by global atomics: the summation order, and so the last bits, vary from
// run to run.
XMC_GPU_FN void fixed_fanin_input_grad(const CudaContext& ctx, const uint32_t* idx, const float* w,
                                       int64_t n, int64_t fan_in, ConstMatrix g,
                                       Matrix du) XMC_GPU_STUB;
}  // namespace xmc::gpu
XMC_GPU_STUBS_END
