// Fused optimizer updates (ops/optimizer.h, which checks the step and the state arrays;
// the same fp32 formulas as the CPU): one pass reads the parameter, gradient and state and
// writes parameter and state.
// bf16 parameters are updated in fp32 and rounded back, to nearest even or
// stochastically (random bits from a counter-based hash of (seed, step, index)).
#include <cuda_bf16.h>

#include <cmath>

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

__device__ __forceinline__ float update_one(const UpdateParams& p, float w, float g, float* s1,
                                            float* s2, int64_t i) {
  switch (p.kind) {
    case 0:
      return w - p.lr * (g + p.wd * w);
    case 1: {
      const float gi = g + p.wd * w;
      const float v = p.mu * s1[i] + gi;
      s1[i] = v;
      return w - p.lr * v;
    }
    default: {
      const float gi = g + p.l2 * w;
      const float m = p.b1 * s1[i] + p.one_minus_b1 * gi;
      const float v = p.b2 * s2[i] + p.one_minus_b2 * gi * gi;
      s1[i] = m;
      s2[i] = v;
      const float wi = w * p.decay;
      return wi - p.step_size * m / (sqrtf(v) * p.inv_sqrt_bc2 + p.eps);
    }
  }
}

__global__ void update_f32_kernel(UpdateParams p, float* __restrict__ w,
                                  const float* __restrict__ g, float* __restrict__ s1,
                                  float* __restrict__ s2, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    w[i] = update_one(p, w[i], g[i], s1, s2, i);
}

// splitmix64 finaliser: a counter-based generator, so the bits do not depend on the launch.
__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Unbiased stochastic rounding to bf16: add 16 random bits below the kept mantissa, then
// truncate. Non-finite values round to nearest.
__device__ __forceinline__ __nv_bfloat16 round_stochastic(float x, uint32_t bits16) {
  if (!isfinite(x)) return __float2bfloat16_rn(x);
  const uint32_t u = (__float_as_uint(x) + (bits16 & 0xffffu)) & 0xffff0000u;
  return __ushort_as_bfloat16(static_cast<unsigned short>(u >> 16));
}

__global__ void update_bf16_kernel(UpdateParams p, __nv_bfloat16* __restrict__ w,
                                   const float* __restrict__ g, float* __restrict__ s1,
                                   float* __restrict__ s2, int64_t n) {
  const uint64_t key = mix64(p.seed ^ (p.step * 0x9E3779B97F4A7C15ULL));
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float x = update_one(p, __bfloat162float(w[i]), g[i], s1, s2, i);
    w[i] = p.seed != 0
               ? round_stochastic(x, static_cast<uint32_t>(mix64(key + static_cast<uint64_t>(i))))
               : __float2bfloat16_rn(x);
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
                      uint64_t stochastic_seed) {
  if (n <= 0) return;
  UpdateParams p = make_params(cfg, lr, step);
  p.seed = stochastic_seed;
  p.step = static_cast<uint64_t>(step);
  XMC_CUDA_LAUNCH(update_bf16_kernel, blocks_for(n), kThreads, 0, ctx.stream(), p,
                  reinterpret_cast<__nv_bfloat16*>(params), grad, state1, state2, n);
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
