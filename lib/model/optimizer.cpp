#include "model/optimizer.h"

#include <cmath>

#include "core/error.h"

namespace xmc {

OptimizerType parse_optimizer(std::string_view name) {
  if (name == "sgd") return OptimizerType::sgd;
  if (name == "adam") return OptimizerType::adam;
  if (name == "adamw") return OptimizerType::adamw;
  throw_input("unknown optimizer '{}': expected one of sgd, adam, adamw", name);
}

std::string_view to_string(OptimizerType t) {
  switch (t) {
    case OptimizerType::sgd:
      return "sgd";
    case OptimizerType::adam:
      return "adam";
    case OptimizerType::adamw:
      return "adamw";
  }
  return "?";
}

int optimizer_state_arrays(const OptimizerConfig& cfg) {
  if (cfg.type == OptimizerType::sgd) return cfg.momentum != 0.0 ? 1 : 0;
  return 2;
}

namespace {

// Below this many slots the loop runs on the calling thread (also the case when called
// from inside a parallel region, e.g. per touched row of a sparse layer).
constexpr int64_t kParallelMin = 1 << 15;

void sgd_update(const OptimizerConfig& cfg, double lr, float* p, const float* g, float* v,
                int64_t n) {
  const float lr_f = static_cast<float>(lr);
  const float wd = static_cast<float>(cfg.weight_decay);
  const float mu = static_cast<float>(cfg.momentum);
  if (cfg.momentum != 0.0) {
    XMC_CHECK(v != nullptr, "sgd with momentum {} needs a state array", cfg.momentum);
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      const float gi = g[i] + wd * p[i];
      v[i] = mu * v[i] + gi;
      p[i] -= lr_f * v[i];
    }
  } else {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) p[i] -= lr_f * (g[i] + wd * p[i]);
  }
}

void adam_update(const OptimizerConfig& cfg, double lr, int64_t step, float* p, const float* g,
                 float* m, float* v, int64_t n) {
  XMC_CHECK(m != nullptr && v != nullptr, "{} needs two state arrays", to_string(cfg.type));
  XMC_CHECK(step >= 1, "optimizer step is 1-based, got {}", step);
  const double bc1 = 1.0 - std::pow(cfg.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(cfg.beta2, static_cast<double>(step));
  const bool decoupled = cfg.type == OptimizerType::adamw;
  // p -= lr·m̂/(sqrt(v̂)+eps) with m̂ = m/bc1, v̂ = v/bc2, folded into two constants.
  const float step_size = static_cast<float>(lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  const float b1 = static_cast<float>(cfg.beta1);
  const float b2 = static_cast<float>(cfg.beta2);
  // 1-β computed in double: 1.0f - 0.999f is off by 1e-5 relative.
  const float one_minus_b1 = static_cast<float>(1.0 - cfg.beta1);
  const float one_minus_b2 = static_cast<float>(1.0 - cfg.beta2);
  const float eps = static_cast<float>(cfg.eps);
  const float l2 = decoupled ? 0.0f : static_cast<float>(cfg.weight_decay);
  const float decay = decoupled ? static_cast<float>(1.0 - lr * cfg.weight_decay) : 1.0f;
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] + l2 * p[i];
    m[i] = b1 * m[i] + one_minus_b1 * gi;
    v[i] = b2 * v[i] + one_minus_b2 * gi * gi;
    const float pi = p[i] * decay;  // adamw: decoupled p -= lr·wd·p
    p[i] = pi - step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + eps);
  }
}

}  // namespace

void optimizer_update(const OptimizerConfig& cfg, double lr, int64_t step, float* params,
                      const float* grad, float* state1, float* state2, int64_t n) {
  if (n <= 0) return;
  switch (cfg.type) {
    case OptimizerType::sgd:
      sgd_update(cfg, lr, params, grad, state1, n);
      return;
    case OptimizerType::adam:
    case OptimizerType::adamw:
      adam_update(cfg, lr, step, params, grad, state1, state2, n);
      return;
  }
}

}  // namespace xmc
