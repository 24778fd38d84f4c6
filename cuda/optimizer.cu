// Fused optimizer updates (ops/optimizer.h, which checks the step and the state arrays;
// the same fp32 formulas as the CPU): one pass reads the parameter, gradient and state and
// writes parameter and state.
// bf16 parameters are updated in fp32 and rounded back, to nearest even or
// stochastically (random bits from a counter-based hash of (seed, step, index), the
// host's gpu::rounding_bits); bf16 state is widened and rounded back to nearest.
#include <cuda_bf16.h>

#include <cmath>
#include <type_traits>

#include "ops/optimizer.h"
#include "runtime.h"

namespace xmc::gpu {
namespace {

constexpr int kThreads = 256;

// Constants of one update, folded on the host exactly as optimizer.cpp folds them.
struct UpdateParams {
  int kind;  // 0 sgd, 1 sgd with momentum, 2 adam/adamw
  float lr;
  float wd;  // sgd: L2 on the gradient
  float mu;
  float step_size;
  float inv_sqrt_bc2;
  float b1, b2, one_minus_b1, one_minus_b2, eps;
  float l2;     // adam: L2 on the gradient (0 for adamw)
  float decay;  // adamw: 1 - lr·wd (1 for adam)
  uint64_t seed;
  uint64_t step;
};

UpdateParams make_params(const OptimizerConfig& cfg, double lr, int64_t step) {
  UpdateParams p{};
  p.lr = static_cast<float>(lr);
  if (cfg.type == OptimizerType::sgd) {
    p.kind = cfg.momentum != 0.0 ? 1 : 0;
    p.wd = static_cast<float>(cfg.weight_decay);
    p.mu = static_cast<float>(cfg.momentum);
    return p;
  }
  p.kind = 2;
  const double bc1 = 1.0 - std::pow(cfg.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(cfg.beta2, static_cast<double>(step));
  const bool decoupled = cfg.type == OptimizerType::adamw;
  p.step_size = static_cast<float>(lr / bc1);
  p.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  p.b1 = static_cast<float>(cfg.beta1);
  p.b2 = static_cast<float>(cfg.beta2);
  p.one_minus_b1 = static_cast<float>(1.0 - cfg.beta1);
  p.one_minus_b2 = static_cast<float>(1.0 - cfg.beta2);
  p.eps = static_cast<float>(cfg.eps);
  p.l2 = decoupled ? 0.0f : static_cast<float>(cfg.weight_decay);
  p.decay = decoupled ? static_cast<float>(1.0 - lr * cfg.weight_decay) : 1.0f;
  return p;
}

// One slot's update on registers: w the weight, g its gradient, m and v its state (those
// the optimizer keeps); returns the new weight.
__device__ __forceinline__ float update_one(const UpdateParams& p, float w, float g, float& m,
                                            float& v) {
  switch (p.kind) {
    case 0:
      return w - p.lr * (g + p.wd * w);
    case 1: {
      const float gi = g + p.wd * w;
      m = p.mu * m + gi;
      return w - p.lr * m;
    }
    default: {
      const float gi = g + p.l2 * w;
      m = p.b1 * m + p.one_minus_b1 * gi;
      v = p.b2 * v + p.one_minus_b2 * gi * gi;
      const float wi = w * p.decay;
      return wi - p.step_size * m / (sqrtf(v) * p.inv_sqrt_bc2 + p.eps);
    }
  }
}

// The same on slot i of fp32 state arrays (nullable where the optimizer keeps none).
__device__ __forceinline__ float update_one(const UpdateParams& p, float w, float g, float* s1,
                                            float* s2, int64_t i) {
  float m = s1 ? s1[i] : 0.0f, v = s2 ? s2[i] : 0.0f;
  const float x = update_one(p, w, g, m, v);
  if (s1) s1[i] = m;
  if (s2) s2[i] = v;
  return x;
}

__global__ void update_f32_kernel(UpdateParams p, float* __restrict__ w,
                                  const float* __restrict__ g, float* __restrict__ s1,
                                  float* __restrict__ s2, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    w[i] = update_one(p, w[i], g[i], s1, s2, i);
}

// State storage of the bf16 update: fp32 as is, bf16 widened and rounded back to nearest.
__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void narrow(float& dst, float x) { dst = x; }
__device__ __forceinline__ void narrow(__nv_bfloat16& dst, float x) {
  dst = __float2bfloat16_rn(x);
}

// Unbiased stochastic rounding to bf16 (gpu::bf16_bits_stochastic, the host's rule).
// Non-finite values round to nearest.
__device__ __forceinline__ __nv_bfloat16 round_stochastic(float x, uint32_t bits) {
  if (!isfinite(x)) return __float2bfloat16_rn(x);
  return __ushort_as_bfloat16(bf16_bits_stochastic(__float_as_uint(x), bits));
}

// Kahan compensation (c null: none; gpu::kahan_residual_bits, the host's rule): the weight
// as stored plus its compensation, and what the rounding of x into `stored` dropped.
__device__ __forceinline__ float with_residual(float w, const __nv_bfloat16* c, int64_t i) {
  return c ? w + __bfloat162float(c[i]) : w;
}
__device__ __forceinline__ void keep_residual(__nv_bfloat16* c, int64_t i, float x, float stored) {
  if (c) c[i] = __ushort_as_bfloat16(kahan_residual_bits(x, stored));
}

// bf16 weights, state S (float or __nv_bfloat16): the fp32 update on the widened values
// (plus their compensation c), then the rounding (the weights stochastically when p.seed !=
// 0, with the counter-based bits of gpu::rounding_bits, as the CPU).
template <class S>
__global__ void update_bf16_kernel(UpdateParams p, __nv_bfloat16* __restrict__ w,
                                   const float* __restrict__ g, S* __restrict__ s1,
                                   S* __restrict__ s2, __nv_bfloat16* __restrict__ c, int64_t n) {
  const uint64_t stream = rounding_stream(p.seed, p.step);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float m = s1 ? widen(s1[i]) : 0.0f, v = s2 ? widen(s2[i]) : 0.0f;
    const float x = update_one(p, with_residual(__bfloat162float(w[i]), c, i), g[i], m, v);
    if (s1) narrow(s1[i], m);
    if (s2) narrow(s2[i], v);
    w[i] = p.seed != 0 ? round_stochastic(x, rounding_bits(stream, static_cast<uint64_t>(i)))
                       : __float2bfloat16_rn(x);
    keep_residual(c, i, x, __bfloat162float(w[i]));
  }
}

// The sum (max: the largest) of x over the block's threads, for every thread; part:
// [blockDim / 32] shared floats. Values ≥ 0 for the max (0 starts it).
__device__ __forceinline__ float block_reduce(float x, float* part, bool max) {
  for (int off = 16; off > 0; off >>= 1) {
    const float o = __shfl_xor_sync(0xffffffffu, x, off);
    x = max ? fmaxf(x, o) : x + o;
  }
  __syncthreads();  // part may still be read by an earlier reduction
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = x;
  __syncthreads();
  float total = 0.0f;  // |w| ≥ 0, so 0 starts the max too
  for (int k = 0; k < static_cast<int>(blockDim.x >> 5); ++k)
    total = max ? fmaxf(total, part[k]) : total + part[k];
  return total;
}

// Row-wise Adam (beta1 = 0): a block per row. Pass 1 sums the row's squared gradients
// (with adam's L2 term) over the block, pass 2 steps every weight with the row's new v.
// Rounding and compensation (bf16 weights only) as update_bf16_kernel, counter r·cols + j.
__device__ __forceinline__ float load_weight(float w) { return w; }
__device__ __forceinline__ float load_weight(__nv_bfloat16 w) { return __bfloat162float(w); }

template <class W>
__global__ void update_rowwise_kernel(UpdateParams p, W* __restrict__ w,
                                      const float* __restrict__ g, float* __restrict__ row_v,
                                      __nv_bfloat16* __restrict__ c, int64_t cols) {
  __shared__ float part[kThreads / 32];
  const int64_t r = blockIdx.x;
  W* wr = w + r * cols;
  const float* gr = g + r * cols;
  __nv_bfloat16* cr = c ? c + r * cols : nullptr;
  float sq = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float gi = gr[j] + p.l2 * with_residual(load_weight(wr[j]), cr, j);
    sq += gi * gi;
  }
  const float total = block_reduce(sq, part, false);
  const float v = p.b2 * row_v[r] + p.one_minus_b2 * (total / static_cast<float>(cols));
  const float scale = p.step_size * p.one_minus_b1 / (sqrtf(v) * p.inv_sqrt_bc2 + p.eps);
  const uint64_t stream = rounding_stream(p.seed, p.step);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float wi = with_residual(load_weight(wr[j]), cr, j);
    const float x = wi * p.decay - scale * (gr[j] + p.l2 * wi);
    if constexpr (std::is_same_v<W, float>) {
      wr[j] = x;
    } else {
      wr[j] = p.seed != 0
                  ? round_stochastic(x, rounding_bits(stream, static_cast<uint64_t>(r * cols + j)))
                  : __float2bfloat16_rn(x);
      keep_residual(cr, j, x, __bfloat162float(wr[j]));
    }
  }
  __syncthreads();  // every thread has read row_v[r]
  if (threadIdx.x == 0) row_v[r] = v;
}

// fp8 weights (ops::optimizer_update_fp8): a block per row. The row is widened (code ·
// scale) and updated in fp32 into shared memory — update_one with fp32 state, or with
// Rowwise the row-wise step (pass 1: the row's mean squared gradient, as
// update_rowwise_kernel) — then the block's largest |w| gives the new scale and every
// weight is rounded back with the counter r·cols + j (the CPU's rule).
template <bool Rowwise>
__global__ void update_fp8_kernel(UpdateParams p, uint8_t* __restrict__ w,
                                  float* __restrict__ row_scale, const float* __restrict__ g,
                                  float* __restrict__ s1, float* __restrict__ s2,
                                  __nv_bfloat16* __restrict__ c, int64_t cols) {
  extern __shared__ float row[];  // [cols]
  __shared__ float part[kThreads / 32];
  const int64_t r = blockIdx.x;
  uint8_t* wr = w + r * cols;
  const float* gr = g + r * cols;
  __nv_bfloat16* cr = c ? c + r * cols : nullptr;
  const float scale = row_scale[r];
  float v = 0.0f, step_scale = 0.0f;
  if constexpr (Rowwise) {
    float sq = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float gi = gr[j] + p.l2 * with_residual(fp8_value(wr[j]) * scale, cr, j);
      sq += gi * gi;
    }
    const float total = block_reduce(sq, part, false);
    v = p.b2 * s2[r] + p.one_minus_b2 * (total / static_cast<float>(cols));
    step_scale = p.step_size * p.one_minus_b1 / (sqrtf(v) * p.inv_sqrt_bc2 + p.eps);
  }
  float top = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float wi = with_residual(fp8_value(wr[j]) * scale, cr, j);
    float x;
    if constexpr (Rowwise)
      x = wi * p.decay - step_scale * (gr[j] + p.l2 * wi);
    else
      x = update_one(p, wi, gr[j], s1, s2, r * cols + j);
    row[j] = x;
    top = fmaxf(top, fabsf(x));
  }
  top = block_reduce(top, part, true);  // its barriers also publish row[]
  const float next = fp8_row_scale(top), inv = fp8_inverse_scale(next);
  const uint64_t stream = rounding_stream(p.seed, p.step);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    wr[j] = fp8_code(row[j] * inv, rounding_bits(stream, static_cast<uint64_t>(r * cols + j)),
                     p.seed != 0);
    keep_residual(cr, j, row[j], fp8_value(wr[j]) * next);
  }
  __syncthreads();  // every thread has read row_scale[r] (and s2[r])
  if (threadIdx.x == 0) {
    row_scale[r] = next;
    if constexpr (Rowwise) s2[r] = v;
  }
}

// Row-gathered update (sampled layers): the same update_one, on rows rows[u] of params
// (and of the state arrays, same layout), gradient row u of grad [count×width]. A thread
// per (u, column); the rows are distinct, so no two threads touch one slot.
__global__ void update_rows_kernel(UpdateParams p, float* __restrict__ w,
                                   const float* __restrict__ g, float* __restrict__ s1,
                                   float* __restrict__ s2, const uint32_t* __restrict__ rows,
                                   int64_t count, int64_t width) {
  const int64_t n = count * width;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t u = i / width;
    const int64_t slot = static_cast<int64_t>(rows[u]) * width + (i - u * width);
    w[slot] = update_one(p, w[slot], g[i], s1, s2, slot);
  }
}

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < (1 << 20) ? b : (1 << 20));
}

}  // namespace

void optimizer_update(const CudaContext& ctx, const OptimizerConfig& cfg, double lr, int64_t step,
                      float* params, const float* grad, float* state1, float* state2, int64_t n) {
  if (n <= 0) return;
  const UpdateParams p = make_params(cfg, lr, step);
  XMC_CUDA_LAUNCH(update_f32_kernel, blocks_for(n), kThreads, 0, ctx.stream(), p, params, grad,
                  state1, state2, n);
}

void optimizer_update(const CudaContext& ctx, const OptimizerConfig& cfg, double lr, int64_t step,
                      Bf16* params, const float* grad, float* state1, float* state2, int64_t n,
                      uint64_t stochastic_seed, Bf16* compensation) {
  if (n <= 0) return;
  UpdateParams p = make_params(cfg, lr, step);
  p.seed = stochastic_seed;
  p.step = static_cast<uint64_t>(step);
  XMC_CUDA_LAUNCH(update_bf16_kernel<float>, blocks_for(n), kThreads, 0, ctx.stream(), p,
                  reinterpret_cast<__nv_bfloat16*>(params), grad, state1, state2,
                  reinterpret_cast<__nv_bfloat16*>(compensation), n);
}

void optimizer_update(const CudaContext& ctx, const OptimizerConfig& cfg, double lr, int64_t step,
                      Bf16* params, const float* grad, Bf16* state1, Bf16* state2, int64_t n,
                      uint64_t stochastic_seed, Bf16* compensation) {
  if (n <= 0) return;
  UpdateParams p = make_params(cfg, lr, step);
  p.seed = stochastic_seed;
  p.step = static_cast<uint64_t>(step);
  XMC_CUDA_LAUNCH(
      update_bf16_kernel<__nv_bfloat16>, blocks_for(n), kThreads, 0, ctx.stream(), p,
      reinterpret_cast<__nv_bfloat16*>(params), grad, reinterpret_cast<__nv_bfloat16*>(state1),
      reinterpret_cast<__nv_bfloat16*>(state2), reinterpret_cast<__nv_bfloat16*>(compensation), n);
}

void optimizer_update_rowwise(const CudaContext& ctx, const OptimizerConfig& cfg, double lr,
                              int64_t step, float* params, const float* grad, float* row_v,
                              int64_t rows, int64_t cols) {
  if (rows <= 0) return;
  const UpdateParams p = make_params(cfg, lr, step);
  XMC_CUDA_LAUNCH(update_rowwise_kernel<float>, static_cast<unsigned>(rows), kThreads, 0,
                  ctx.stream(), p, params, grad, row_v, nullptr, cols);
}

void optimizer_update_rowwise(const CudaContext& ctx, const OptimizerConfig& cfg, double lr,
                              int64_t step, Bf16* params, const float* grad, float* row_v,
                              int64_t rows, int64_t cols, uint64_t stochastic_seed,
                              Bf16* compensation) {
  if (rows <= 0) return;
  UpdateParams p = make_params(cfg, lr, step);
  p.seed = stochastic_seed;
  p.step = static_cast<uint64_t>(step);
  XMC_CUDA_LAUNCH(update_rowwise_kernel<__nv_bfloat16>, static_cast<unsigned>(rows), kThreads, 0,
                  ctx.stream(), p, reinterpret_cast<__nv_bfloat16*>(params), grad, row_v,
                  reinterpret_cast<__nv_bfloat16*>(compensation), cols);
}

void optimizer_update_fp8(const CudaContext& ctx, const OptimizerConfig& cfg, double lr,
                          int64_t step, Fp8* params, float* row_scale, const float* grad,
                          float* state1, float* state2, int64_t rows, int64_t cols,
                          uint64_t stochastic_seed, Bf16* compensation) {
  if (rows <= 0) return;
  UpdateParams p = make_params(cfg, lr, step);
  p.seed = stochastic_seed;
  p.step = static_cast<uint64_t>(step);
  const size_t shared = static_cast<size_t>(cols) * sizeof(float);
  auto* w = reinterpret_cast<uint8_t*>(params);
  auto* c = reinterpret_cast<__nv_bfloat16*>(compensation);
  if (cfg.rowwise)
    XMC_CUDA_LAUNCH(update_fp8_kernel<true>, static_cast<unsigned>(rows), kThreads, shared,
                    ctx.stream(), p, w, row_scale, grad, state1, state2, c, cols);
  else
    XMC_CUDA_LAUNCH(update_fp8_kernel<false>, static_cast<unsigned>(rows), kThreads, shared,
                    ctx.stream(), p, w, row_scale, grad, state1, state2, c, cols);
}

void optimizer_update_rows(const CudaContext& ctx, const OptimizerConfig& cfg, double lr,
                           int64_t step, float* params, const float* grad, float* state1,
                           float* state2, const uint32_t* rows, int64_t count, int64_t width) {
  if (count == 0 || width == 0) return;
  const UpdateParams p = make_params(cfg, lr, step);
  XMC_CUDA_LAUNCH(update_rows_kernel, blocks_for(count * width), kThreads, 0, ctx.stream(), p,
                  params, grad, state1, state2, rows, count, width);
}

}  // namespace xmc::gpu
