#pragma once
// Group-shared fixed fan-in ops (HASTE) on the Context's device: the shapes checked, then
// the CPU op (ops/group_shared.cpp, OpenMP) or the gpu:: half below.
//
// Tail labels in internal (grouped) order r = 0..n-1; group k = r / G holds labels
// [kG, min(n, (k+1)G)) (the last group may be partial) and all of them read the same F
// inputs idx[k, 0..F) (into [0, m), no duplicates within a set), each label with its own
// weights w[r, 0..F). The layer input is kept transposed, ut [m×B], so that one input
// feature over the batch is a contiguous row.
//
// CPU scheme: a group's F input rows are gathered once per batch block into a
// contiguous [F×rows] tile (per thread), then every label of the group is a small dense
// product against that tile — F·B floats read per group instead of per label.
#include <cstdint>

#include "core/context.h"
#include "core/matrix.h"
#include "ops/dense.h"  // gpu::Bf16

namespace xmc::ops {

// The ops on the Context's device (every pointer and view a DEVICE one on a CUDA
// Context). The bf16 forms (bf16 weights and input, fp32 accumulation) exist on the GPU
// only: a CPU Context throws xmc::Error.
//
// idx [K×F] uint32 (K = ceil(n/G)); w [n×F]; bias [n] (may be nullptr); ut [m×B].
// z [B×n] (z.ld >= n) = sum_j w[r,j]·ut[idx[r/G, j], b] + bias[r]. CPU: parallel over
// groups.
void group_shared_forward(const Context& ctx, const uint32_t* idx, const float* w,
                          const float* bias, int64_t n, int64_t group, int64_t fan_in,
                          ConstMatrix ut, Matrix z);
void group_shared_forward(const Context& ctx, const uint32_t* idx, const gpu::Bf16* w,
                          const float* bias, int64_t n, int64_t group, int64_t fan_in,
                          gpu::ConstBf16Matrix ut, Matrix z);

// g [B×n] = dL/dz. dw [n×F] = sum_b g[b,r]·ut[idx[r/G,j], b]; db [n] = column sums of g
// (db may be nullptr). Labels whose gradient column is all zero get dw = 0 without a
// product; groups that are all zero skip the gather. CPU: parallel over groups.
void group_shared_weight_grad(const Context& ctx, const uint32_t* idx, int64_t n, int64_t group,
                              int64_t fan_in, ConstMatrix g, ConstMatrix ut, float* dw, float* db);
void group_shared_weight_grad(const Context& ctx, const uint32_t* idx, int64_t n, int64_t group,
                              int64_t fan_in, ConstMatrix g, gpu::ConstBf16Matrix ut, float* dw,
                              float* db);

// du [B×m] += sum_r g[b,r]·w[r,j] at column idx[r/G, j]: per (row, group) the F partial
// sums v_j = sum_{r in group, g[b,r] != 0} g[b,r]·w[r,j] first, then one scatter of F
// values (skips exactly-zero g; a group with no nonzero g in a row scatters nothing).
// CPU: parallel over blocks of batch rows: each thread owns whole rows of du, so there
// are no races and the result does not depend on the thread count.
void group_shared_input_grad(const Context& ctx, const uint32_t* idx, const float* w, int64_t n,
                             int64_t group, int64_t fan_in, ConstMatrix g, Matrix du);
void group_shared_input_grad(const Context& ctx, const uint32_t* idx, const gpu::Bf16* w, int64_t n,
                             int64_t group, int64_t fan_in, ConstMatrix g, Matrix du);

}  // namespace xmc::ops

// The CUDA half (cuda/group_shared.cu), called by lib/ops/group_shared.cpp after its shape
// checks. One block per (group, batch tile of 64); F <= 256 in bf16. fp32: tiled SIMT FMA
// in fp32 (never tensor cores: no silent TF32/bf16). bf16: ut and w in bf16,
// nvcuda::wmma bf16 16×16×16 MMA with fp32 accumulation; the gradient g stays fp32 in
// memory and is rounded to bf16 when staged (db from fp32 g); needs compute capability
// >= 8.0 (throws otherwise). The weight gradient's blocks own their group's rows of dw (no
// atomics); the input gradient scatters ∇X_k = ∇Z_k·W_k into du by atomics (nonzero values
// only; blocks whose gradient tile is all zero do nothing). Stubs that throw in a build
// without CUDA (core/gpu.h).
XMC_GPU_STUBS_BEGIN
namespace xmc::gpu {
XMC_GPU_FN void group_shared_forward(const CudaContext& ctx, const uint32_t* idx, const float* w,
                                     const float* bias, int64_t n, int64_t group, int64_t fan_in,
                                     ConstMatrix ut, Matrix z) XMC_GPU_STUB;
XMC_GPU_FN void group_shared_forward(const CudaContext& ctx, const uint32_t* idx, const Bf16* w,
                                     const float* bias, int64_t n, int64_t group, int64_t fan_in,
                                     ConstBf16Matrix ut, Matrix z) XMC_GPU_STUB;
XMC_GPU_FN void group_shared_weight_grad(const CudaContext& ctx, const uint32_t* idx, int64_t n,
                                         int64_t group, int64_t fan_in, ConstMatrix g,
                                         ConstMatrix ut, float* dw, float* db) XMC_GPU_STUB;
XMC_GPU_FN void group_shared_weight_grad(const CudaContext& ctx, const uint32_t* idx, int64_t n,
                                         int64_t group, int64_t fan_in, ConstMatrix g,
                                         ConstBf16Matrix ut, float* dw, float* db) XMC_GPU_STUB;
XMC_GPU_FN void group_shared_input_grad(const CudaContext& ctx, const uint32_t* idx, const float* w,
                                        int64_t n, int64_t group, int64_t fan_in, ConstMatrix g,
                                        Matrix du) XMC_GPU_STUB;
XMC_GPU_FN void group_shared_input_grad(const CudaContext& ctx, const uint32_t* idx, const Bf16* w,
                                        int64_t n, int64_t group, int64_t fan_in, ConstMatrix g,
                                        Matrix du) XMC_GPU_STUB;
}  // namespace xmc::gpu
XMC_GPU_STUBS_END
