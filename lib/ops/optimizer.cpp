#include "ops/optimizer.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/buffer.h"
#include "core/error.h"

namespace xmc {

namespace {
// Below this many slots the loop runs on the calling thread (also the case when called
// from inside a parallel region, e.g. per touched row of a sparse layer).
constexpr int64_t kParallelMin = 1 << 15;
// Slots per thread task above that size (a multiple of the SIMD width).
constexpr int64_t kOptimizerBlock = 1 << 14;

// An update of n > 0 slots: Adam's step is 1-based, the state arrays the optimizer keeps
// are there. On either device.
void check_update(const OptimizerConfig& cfg, int64_t step, const void* s1, const void* s2,
                  int64_t n) {
  if (n <= 0) return;
  XMC_CHECK(cfg.type == OptimizerType::sgd || step >= 1, "optimizer step is 1-based, got {}", step);
  XMC_CHECK((!optimizer_keeps(cfg, 1) || s1) && (!optimizer_keeps(cfg, 2) || s2),
            "{} (momentum {}, beta1 {}) needs {} state arrays", to_string(cfg.type), cfg.momentum,
            cfg.beta1, optimizer_state_arrays(cfg));
}
// Element-wise storage conversions of the bf16 update: fp32 state as is, bf16 widened
// exactly and rounded back to nearest even.
inline float widen(float x) { return x; }
inline float widen(gpu::Bf16 x) { return gpu::bf16_widen(x); }
inline void narrow(float& dst, float x) { dst = x; }
inline void narrow(gpu::Bf16& dst, float x) { dst = gpu::bf16_round(x); }

// bf16 weights p[0, n) (state S: float or gpu::Bf16) in tiles: widened to fp32 (plus the
// Kahan compensation c, when not null), updated by OptimizerStep::apply (the fp32
// formulas), rounded back — the weights to nearest even, or stochastically (stochastic)
// with the bits of counter i0 + i of the stream (gpu::rounding_bits); c keeps what the
// weight's rounding dropped.
template <class S>
void apply_bf16(const OptimizerStep& st, gpu::Bf16* p, const float* g, S* s1, S* s2, gpu::Bf16* c,
                int64_t n, int64_t i0, bool stochastic, uint64_t stream) {
  constexpr int64_t kTile = 256;
  float w[kTile], m[kTile], v[kTile];
  for (int64_t t0 = 0; t0 < n; t0 += kTile) {
    const int64_t len = std::min(kTile, n - t0);
    for (int64_t i = 0; i < len; ++i) {
      w[i] = gpu::bf16_widen(p[t0 + i]);
      if (c) w[i] += gpu::bf16_widen(c[t0 + i]);
      if (s1) m[i] = widen(s1[t0 + i]);
      if (s2) v[i] = widen(s2[t0 + i]);
    }
    st.apply(w, g + t0, s1 ? m : nullptr, s2 ? v : nullptr, len);
    for (int64_t i = 0; i < len; ++i) {
      const auto at = static_cast<uint64_t>(i0 + t0 + i);
      p[t0 + i] = stochastic ? gpu::bf16_round_stochastic(w[i], gpu::rounding_bits(stream, at))
                             : gpu::bf16_round(w[i]);
      if (c) c[t0 + i] = gpu::kahan_residual(w[i], gpu::bf16_widen(p[t0 + i]));
      if (s1) narrow(s1[t0 + i], m[i]);
      if (s2) narrow(s2[t0 + i], v[i]);
    }
  }
}

// The CPU update of n bf16 weights, split over threads as the fp32 one.
template <class S>
void update_bf16(const OptimizerConfig& cfg, double lr, int64_t step, gpu::Bf16* params,
                 const float* grad, S* state1, S* state2, int64_t n, uint64_t stochastic_seed,
                 gpu::Bf16* compensation) {
  if (n <= 0) return;
  const OptimizerStep st(cfg, lr, step);
  const uint64_t stream = gpu::rounding_stream(stochastic_seed, static_cast<uint64_t>(step));
  const int64_t blocks = (n + kOptimizerBlock - 1) / kOptimizerBlock;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t o = blk * kOptimizerBlock;
    apply_bf16(st, params + o, grad + o, state1 ? state1 + o : nullptr,
               state2 ? state2 + o : nullptr, compensation ? compensation + o : nullptr,
               std::min(kOptimizerBlock, n - o), o, stochastic_seed != 0, stream);
  }
}
}  // namespace

Buffer<float> optimizer_state_buffer(Context& ctx, const OptimizerConfig& optim, int which,
                                     size_t n) {
  if (!optimizer_keeps(optim, which)) return {};
  return Buffer<float>(ctx, MemTag::optimizer, n);
}

OptimizerStep::OptimizerStep(const OptimizerConfig& cfg, double lr, int64_t step)
    : type_(cfg.type),
      momentum_(cfg.momentum != 0.0),
      lr_(static_cast<float>(lr)),
      wd_(static_cast<float>(cfg.weight_decay)),
      mu_(static_cast<float>(cfg.momentum)),
      step_size_(0.0f),
      inv_sqrt_bc2_(1.0f),
      b1_(static_cast<float>(cfg.beta1)),
      b2_(static_cast<float>(cfg.beta2)),
      // 1-β computed in double: 1.0f - 0.999f is off by 1e-5 relative.
      one_minus_b1_(static_cast<float>(1.0 - cfg.beta1)),
      one_minus_b2_(static_cast<float>(1.0 - cfg.beta2)),
      eps_(static_cast<float>(cfg.eps)),
      l2_(0.0f),
      decay_(1.0f) {
  if (type_ == OptimizerType::sgd) return;
  const double bc1 = 1.0 - std::pow(cfg.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(cfg.beta2, static_cast<double>(step));
  const bool decoupled = type_ == OptimizerType::adamw;
  // p -= lr·m̂/(sqrt(v̂)+eps) with m̂ = m/bc1, v̂ = v/bc2, folded into two constants.
  step_size_ = static_cast<float>(lr / bc1);
  inv_sqrt_bc2_ = static_cast<float>(1.0 / std::sqrt(bc2));
  l2_ = decoupled ? 0.0f : static_cast<float>(cfg.weight_decay);
  decay_ = decoupled ? static_cast<float>(1.0 - lr * cfg.weight_decay) : 1.0f;
}

void OptimizerStep::apply(float* p, const float* g, float* m, float* v, int64_t n) const {
  if (type_ == OptimizerType::sgd) {
    if (momentum_) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        const float gi = g[i] + wd_ * p[i];
        m[i] = mu_ * m[i] + gi;
        p[i] -= lr_ * m[i];
      }
    } else {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) p[i] -= lr_ * (g[i] + wd_ * p[i]);
    }
    return;
  }
  if (m == nullptr) {  // beta1 = 0: the first moment is the gradient (not stored)
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float gi = g[i] + l2_ * p[i];
      const float mi = one_minus_b1_ * gi;
      v[i] = b2_ * v[i] + one_minus_b2_ * gi * gi;
      const float pi = p[i] * decay_;
      p[i] = pi - step_size_ * mi / (std::sqrt(v[i]) * inv_sqrt_bc2_ + eps_);
    }
    return;
  }
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] + l2_ * p[i];
    m[i] = b1_ * m[i] + one_minus_b1_ * gi;
    v[i] = b2_ * v[i] + one_minus_b2_ * gi * gi;
    const float pi = p[i] * decay_;  // adamw: decoupled p -= lr·wd·p
    p[i] = pi - step_size_ * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2_ + eps_);
  }
}

void OptimizerStep::apply_row(float* p, const float* g, float& v, int64_t n) const {
  float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] + l2_ * p[i];
    sq += gi * gi;
  }
  v = b2_ * v + one_minus_b2_ * (sq / static_cast<float>(n));
  const float scale = step_size_ * one_minus_b1_ / (std::sqrt(v) * inv_sqrt_bc2_ + eps_);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] + l2_ * p[i];
    p[i] = p[i] * decay_ - scale * gi;
  }
}

void optimizer_update(const OptimizerConfig& cfg, double lr, int64_t step, float* params,
                      const float* grad, float* state1, float* state2, int64_t n) {
  if (n <= 0) return;
  check_update(cfg, step, state1, state2, n);
  const OptimizerStep s(cfg, lr, step);
  if (n < kParallelMin) {
    s.apply(params, grad, state1, state2, n);
    return;
  }
  const int64_t blocks = (n + kOptimizerBlock - 1) / kOptimizerBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t o = blk * kOptimizerBlock;
    const int64_t len = std::min(kOptimizerBlock, n - o);
    s.apply(params + o, grad + o, state1 ? state1 + o : nullptr, state2 ? state2 + o : nullptr,
            len);
  }
}

void optimizer_update(const Context& ctx, const OptimizerConfig& cfg, double lr, int64_t step,
                      float* params, const float* grad, float* state1, float* state2, int64_t n) {
  if (!ctx.on_gpu()) return optimizer_update(cfg, lr, step, params, grad, state1, state2, n);
  check_update(cfg, step, state1, state2, n);
  gpu::optimizer_update(ctx.cuda(), cfg, lr, step, params, grad, state1, state2, n);
}

namespace {
// bf16 weights with fp32 (S = float) or bf16 (S = gpu::Bf16) state, on the Context's device.
template <class S>
void update_bf16_on(const Context& ctx, const OptimizerConfig& cfg, double lr, int64_t step,
                    gpu::Bf16* params, const float* grad, S* state1, S* state2, int64_t n,
                    uint64_t stochastic_seed, gpu::Bf16* compensation) {
  check_update(cfg, step, state1, state2, n);
  if (ctx.on_gpu())
    return gpu::optimizer_update(ctx.cuda(), cfg, lr, step, params, grad, state1, state2, n,
                                 stochastic_seed, compensation);
  update_bf16(cfg, lr, step, params, grad, state1, state2, n, stochastic_seed, compensation);
}
}  // namespace

void optimizer_update(const Context& ctx, const OptimizerConfig& cfg, double lr, int64_t step,
                      gpu::Bf16* params, const float* grad, float* state1, float* state2, int64_t n,
                      uint64_t stochastic_seed, gpu::Bf16* compensation) {
  update_bf16_on(ctx, cfg, lr, step, params, grad, state1, state2, n, stochastic_seed,
                 compensation);
}

void optimizer_update(const Context& ctx, const OptimizerConfig& cfg, double lr, int64_t step,
                      gpu::Bf16* params, const float* grad, gpu::Bf16* state1, gpu::Bf16* state2,
                      int64_t n, uint64_t stochastic_seed, gpu::Bf16* compensation) {
  update_bf16_on(ctx, cfg, lr, step, params, grad, state1, state2, n, stochastic_seed,
                 compensation);
}

namespace {
// The row-wise update of rows [0, rows) on the CPU, fp32 or bf16 params (widened row by
// row with their compensation, rounded back as update_bf16 rounds).
template <class W>
void update_rowwise(const OptimizerConfig& cfg, double lr, int64_t step, W* params,
                    const float* grad, float* row_v, int64_t rows, int64_t cols,
                    uint64_t stochastic_seed, gpu::Bf16* compensation) {
  const OptimizerStep st(cfg, lr, step);
  const uint64_t stream = gpu::rounding_stream(stochastic_seed, static_cast<uint64_t>(step));
#pragma omp parallel if (rows * cols >= kParallelMin)
  {
    std::vector<float> wide(std::is_same_v<W, float> ? 0 : static_cast<size_t>(cols));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      W* pr = params + r * cols;
      if constexpr (std::is_same_v<W, float>) {
        st.apply_row(pr, grad + r * cols, row_v[r], cols);
      } else {
        gpu::Bf16* cr = compensation ? compensation + r * cols : nullptr;
        for (int64_t j = 0; j < cols; ++j) {
          wide[static_cast<size_t>(j)] = gpu::bf16_widen(pr[j]);
          if (cr) wide[static_cast<size_t>(j)] += gpu::bf16_widen(cr[j]);
        }
        st.apply_row(wide.data(), grad + r * cols, row_v[r], cols);
        for (int64_t j = 0; j < cols; ++j) {
          const float x = wide[static_cast<size_t>(j)];
          pr[j] = stochastic_seed != 0
                      ? gpu::bf16_round_stochastic(
                            x, gpu::rounding_bits(stream, static_cast<uint64_t>(r * cols + j)))
                      : gpu::bf16_round(x);
          if (cr) cr[j] = gpu::kahan_residual(x, gpu::bf16_widen(pr[j]));
        }
      }
    }
  }
}

void check_rowwise(const OptimizerConfig& cfg, int64_t step, const float* row_v, int64_t rows,
                   int64_t cols) {
  XMC_CHECK(cfg.rowwise && cfg.type != OptimizerType::sgd && cfg.beta1 == 0.0,
            "the row-wise update is adam/adamw with rowwise and beta1 = 0 ({}, rowwise {}, beta1 "
            "{})",
            to_string(cfg.type), cfg.rowwise, cfg.beta1);
  XMC_CHECK(step >= 1 && rows >= 0 && cols >= 1 && (rows == 0 || row_v),
            "row-wise update: step {}, {} rows of {}, row_v {}", step, rows, cols,
            static_cast<const void*>(row_v));
}
}  // namespace

namespace {
// The row-wise update on the Context's device, fp32 or bf16 params (W).
template <class W>
void update_rowwise_on(const Context& ctx, const OptimizerConfig& cfg, double lr, int64_t step,
                       W* params, const float* grad, float* row_v, int64_t rows, int64_t cols,
                       uint64_t stochastic_seed, gpu::Bf16* compensation) {
  check_rowwise(cfg, step, row_v, rows, cols);
  if (rows == 0) return;
  if (!ctx.on_gpu())
    return update_rowwise(cfg, lr, step, params, grad, row_v, rows, cols, stochastic_seed,
                          compensation);
  if constexpr (std::is_same_v<W, float>)
    gpu::optimizer_update_rowwise(ctx.cuda(), cfg, lr, step, params, grad, row_v, rows, cols);
  else
    gpu::optimizer_update_rowwise(ctx.cuda(), cfg, lr, step, params, grad, row_v, rows, cols,
                                  stochastic_seed, compensation);
}
}  // namespace

void optimizer_update_rowwise(const Context& ctx, const OptimizerConfig& cfg, double lr,
                              int64_t step, float* params, const float* grad, float* row_v,
                              int64_t rows, int64_t cols) {
  update_rowwise_on(ctx, cfg, lr, step, params, grad, row_v, rows, cols, 0, nullptr);
}

void optimizer_update_rowwise(const Context& ctx, const OptimizerConfig& cfg, double lr,
                              int64_t step, gpu::Bf16* params, const float* grad, float* row_v,
                              int64_t rows, int64_t cols, uint64_t stochastic_seed,
                              gpu::Bf16* compensation) {
  update_rowwise_on(ctx, cfg, lr, step, params, grad, row_v, rows, cols, stochastic_seed,
                    compensation);
}

void optimizer_update_fp8(const Context& ctx, const OptimizerConfig& cfg, double lr, int64_t step,
                          gpu::Fp8* params, float* row_scale, const float* grad, float* state1,
                          float* state2, int64_t rows, int64_t cols, uint64_t stochastic_seed,
                          gpu::Bf16* compensation) {
  XMC_CHECK(rows >= 0 && cols >= 1, "fp8 update of {} rows of {}", rows, cols);
  if (cfg.rowwise)
    check_rowwise(cfg, step, state2, rows, cols);
  else
    check_update(cfg, step, state1, state2, rows * cols);
  if (rows == 0) return;
  if (ctx.on_gpu()) {
    XMC_CHECK(cols <= kFp8MaxRowGpu,
              "fp8 weights on cuda: rows of at most {} weights (the update keeps a row in shared "
              "memory), {} given",
              kFp8MaxRowGpu, cols);
    return gpu::optimizer_update_fp8(ctx.cuda(), cfg, lr, step, params, row_scale, grad, state1,
                                     state2, rows, cols, stochastic_seed, compensation);
  }
  const OptimizerStep st(cfg, lr, step);
  const uint64_t stream = gpu::rounding_stream(stochastic_seed, static_cast<uint64_t>(step));
  const bool stochastic = stochastic_seed != 0;
#pragma omp parallel if (rows * cols >= kParallelMin)
  {
    std::vector<float> wide(static_cast<size_t>(cols));
    float* x = wide.data();
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      gpu::Fp8* pr = params + r * cols;
      const float* gr = grad + r * cols;
      const float scale = row_scale[r];
      gpu::Bf16* cr = compensation ? compensation + r * cols : nullptr;
      for (int64_t j = 0; j < cols; ++j) {
        x[j] = gpu::fp8_value(pr[j].bits) * scale;
        if (cr) x[j] += gpu::bf16_widen(cr[j]);
      }
      if (cfg.rowwise)
        st.apply_row(x, gr, state2[r], cols);
      else
        st.apply(x, gr, state1 ? state1 + r * cols : nullptr, state2 ? state2 + r * cols : nullptr,
                 cols);
      float top = 0.0f;
      for (int64_t j = 0; j < cols; ++j) top = std::fmax(top, std::fabs(x[j]));
      const float next = gpu::fp8_row_scale(top), inv = gpu::fp8_inverse_scale(next);
      for (int64_t j = 0; j < cols; ++j) {
        pr[j].bits = gpu::fp8_code(x[j] * inv,
                                   gpu::rounding_bits(stream, static_cast<uint64_t>(r * cols + j)),
                                   stochastic);
        if (cr) cr[j] = gpu::kahan_residual(x[j], gpu::fp8_value(pr[j].bits) * next);
      }
      row_scale[r] = next;
    }
  }
}

void optimizer_update_rows(const Context& ctx, const OptimizerConfig& cfg, double lr, int64_t step,
                           float* params, const float* grad, float* state1, float* state2,
                           const uint32_t* rows, int64_t count, int64_t width) {
  XMC_CHECK(count >= 0 && width >= 0, "optimizer_update_rows: {} rows of width {}", count, width);
  check_update(cfg, step, state1, state2, count * width);
  if (ctx.on_gpu()) {
    gpu::optimizer_update_rows(ctx.cuda(), cfg, lr, step, params, grad, state1, state2, rows, count,
                               width);
    return;
  }
  const OptimizerStep st(cfg, lr, step);
  // apply() opens no OpenMP region, so per-row calls are cheap.
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t u = 0; u < count; ++u) {
    const int64_t o = int64_t{rows[u]} * width;
    st.apply(params + o, grad + u * width, state1 ? state1 + o : nullptr,
             state2 ? state2 + o : nullptr, width);
  }
}

}  // namespace xmc
