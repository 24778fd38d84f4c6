#pragma once
// The sparse op families on the GPU: fixed fan-in (ops/fixed_fanin.h), group-shared
// fixed fan-in (HASTE; the CPU op of the same signature is ops::group_shared_*) and
// sampled scoring (ops/sampled.h). Same semantics and argument order as the CPU
// ops, with the context first; every pointer and matrix view is a DEVICE pointer. Work is
// queued on the context's stream, every launch is checked, nothing synchronises. Shapes
// are checked on the host and a mismatch throws xmc::Error with the value.
// Implementation: cuda/fixed_fanin.cu, cuda/group_shared.cu, cuda/sampled.cu; stubs that
// throw in a build without CUDA (XMC_GPU_STUB, core/gpu.h). Kernel design: docs/gpu.md.
#include <cstdint>

#include "core/cuda_context.h"
#include "core/matrix.h"
#include "ops/dense_ops_cuda.h"
#include "ops/sampled.h"

XMC_GPU_STUBS_BEGIN
namespace xmc::gpu {

// ut [m×B] = transpose of u [B×m] (fp32, or rounded to nearest-even bf16): the sparse ops
// read their input transposed so that one input feature over the batch is contiguous.
XMC_GPU_FN void transpose(const CudaContext& ctx, ConstMatrix u, Matrix ut) XMC_GPU_STUB;
XMC_GPU_FN void transpose(const CudaContext& ctx, ConstMatrix u, Bf16Matrix ut) XMC_GPU_STUB;

// --- fixed fan-in: idx [n×F] uint32 (into [0, m)), w [n×F], bias [n] ---------------------
// z [B×n] (ld >= n) = sum_j w[l,j]·ut[idx[l,j], b] + bias[l]; bias may be nullptr.
XMC_GPU_FN void fixed_fanin_forward(const CudaContext& ctx, const uint32_t* idx, const float* w,
                                    const float* bias, int64_t n, int64_t fan_in, ConstMatrix ut,
                                    Matrix z) XMC_GPU_STUB;

// dw [n×F] = sum_b g[b,l]·ut[idx[l,j], b]; db [n] = sum_b g[b,l] (nullable). Batch tiles
// of 32 rows whose gradients are all zero are skipped; labels whose whole column is zero
// get dw = 0 without touching ut, and their number is added to *zero_labels (device
// counter, nullable) — the CPU op returns the same count.
XMC_GPU_FN void fixed_fanin_weight_grad(const CudaContext& ctx, const uint32_t* idx, int64_t n,
                                        int64_t fan_in, ConstMatrix g, ConstMatrix ut, float* dw,
                                        float* db,
                                        unsigned long long* zero_labels = nullptr) XMC_GPU_STUB;

// du [B×m] += for each nonzero g[b,l]: du[b, idx[l,j]] += g[b,l]·w[l,j]. Zero gradient
// entries are skipped (warp-uniform branch). Accumulates per block in shared memory when
// a 32-row tile of du fits in 96 KiB (m <= 768), else by global atomics: the summation
// order, and so the last bits, vary from run to run.
XMC_GPU_FN void fixed_fanin_input_grad(const CudaContext& ctx, const uint32_t* idx, const float* w,
                                       int64_t n, int64_t fan_in, ConstMatrix g,
                                       Matrix du) XMC_GPU_STUB;

// --- group-shared fixed fan-in (HASTE) ------------------------------------------------
// Tail labels r = 0..n-1; group k = r / G holds labels [kG, min(n,(k+1)G)) (the last group
// may be partial). idx [K×F] uint32 (K = ceil(n/G)); w [n×F]; bias [n] (nullable);
// ut [m×B] transposed input. One block per (group, batch tile of 64); F <= 256.
// fp32: tiled SIMT FMA in fp32 (never tensor cores: no silent TF32/bf16).
// bf16: ut and w in bf16, nvcuda::wmma bf16 16×16×16 MMA with fp32 accumulation; the
// gradient g stays fp32 in memory and is rounded to bf16 when staged (db from fp32 g).
// Needs compute capability >= 8.0 (throws otherwise).

// z [B×n] (ld >= n) = sum_j w[r,j]·ut[idx[r/G,j], b] + bias[r]
XMC_GPU_FN void group_shared_forward(const CudaContext& ctx, const uint32_t* idx, const float* w,
                                     const float* bias, int64_t n, int64_t group, int64_t fan_in,
                                     ConstMatrix ut, Matrix z) XMC_GPU_STUB;
XMC_GPU_FN void group_shared_forward(const CudaContext& ctx, const uint32_t* idx, const Bf16* w,
                                     const float* bias, int64_t n, int64_t group, int64_t fan_in,
                                     ConstBf16Matrix ut, Matrix z) XMC_GPU_STUB;

// dw [n×F] = sum_b g[b,r]·ut[idx[r/G,j], b]; db [n] = column sums of g (nullable).
// Each block owns its group's rows of dw: no atomics.
XMC_GPU_FN void group_shared_weight_grad(const CudaContext& ctx, const uint32_t* idx, int64_t n,
                                         int64_t group, int64_t fan_in, ConstMatrix g,
                                         ConstMatrix ut, float* dw, float* db) XMC_GPU_STUB;
XMC_GPU_FN void group_shared_weight_grad(const CudaContext& ctx, const uint32_t* idx, int64_t n,
                                         int64_t group, int64_t fan_in, ConstMatrix g,
                                         ConstBf16Matrix ut, float* dw, float* db) XMC_GPU_STUB;

// du [B×m] += sum_r g[b,r]·w[r,j] at column idx[r/G,j]. ∇X_k = ∇Z_k·W_k per block, then
// scattered into du by atomics (nonzero values only); blocks whose gradient tile is all
// zero do nothing.
XMC_GPU_FN void group_shared_input_grad(const CudaContext& ctx, const uint32_t* idx, const float* w,
                                        int64_t n, int64_t group, int64_t fan_in, ConstMatrix g,
                                        Matrix du) XMC_GPU_STUB;
XMC_GPU_FN void group_shared_input_grad(const CudaContext& ctx, const uint32_t* idx, const Bf16* w,
                                        int64_t n, int64_t group, int64_t fan_in, ConstMatrix g,
                                        Matrix du) XMC_GPU_STUB;

// --- sampled scoring (ops/sampled.h semantics; lsh_sampled, anns_sampled) ------
// cand: per-row candidate lists, CSR over the batch (device arrays); w [L×d]; bias [L]
// (nullable). scores [nnz]: scores[e] = h_row(e)·w[label e] + bias[label e].
XMC_GPU_FN void sampled_scores(const CudaContext& ctx, const float* w, const float* bias, int64_t d,
                               const ops::CandidateCsr& cand, ConstMatrix h,
                               float* scores) XMC_GPU_STUB;

// dh [B×d] += for each row b: sum over its entries e of g[e]·w[label e] (zero g skipped).
// One thread per (row, column), entries in order: deterministic, no atomics.
XMC_GPU_FN void sampled_input_grad(const CudaContext& ctx, const float* w, int64_t d,
                                   const ops::CandidateCsr& cand, const float* g,
                                   Matrix dh) XMC_GPU_STUB;

// Sparse weight gradient by segmented reduction over the entries grouped by label
// (ops::group_entries_by_label, built on the host where the candidates come from):
// dw [U×d] row u = sum over the entries of touched label u of g[e]·h[row e], db [U] (nullable)
// their sum. One thread per (label, column), entries in order: deterministic, no atomics,
// and nothing of size L×d.
XMC_GPU_FN void sampled_weight_grad(const CudaContext& ctx, const ops::EntryGroups& groups,
                                    const float* g, ConstMatrix h, Matrix dw,
                                    float* db) XMC_GPU_STUB;

}  // namespace xmc::gpu
XMC_GPU_STUBS_END
