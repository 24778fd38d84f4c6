#include "layers/weight_array.h"

#include <cstdint>

#include "core/error.h"

namespace xmc {

WeightArray::WeightArray(Context& ctx, bool bf16, size_t n, MemTag tag) : bf16_(bf16) {
  if (bf16)
    w16_ = Buffer<gpu::Bf16>(ctx, tag, n);
  else
    w_ = Buffer<float>(ctx, tag, n);
}

void WeightArray::update(const Context& ctx, const OptimizerConfig& cfg, double lr, int64_t step,
                         size_t off, const float* grad, WeightArray& s1, WeightArray& s2, int64_t n,
                         int64_t row_width, uint64_t stochastic_key) {
  XMC_CHECK(off + static_cast<size_t>(n) <= size(), "weight update of [{}, {}) of {} weights",
            off, off + static_cast<size_t>(n), size());
  if (cfg.rowwise) {  // one fp32 second moment per row, in s2
    const auto w = static_cast<size_t>(row_width);
    XMC_CHECK(row_width >= 1 && off % w == 0 && static_cast<size_t>(n) % w == 0 && s1.empty() &&
                  !s2.bf16() && (off + static_cast<size_t>(n)) / w <= s2.size(),
              "row-wise update of [{}, {}) in rows of {} with {} row moments", off,
              off + static_cast<size_t>(n), row_width, s2.size());
    float* row_v = s2.f32() + off / w;
    const int64_t rows = n / row_width;
    if (bf16_)
      return optimizer_update_rowwise(ctx, cfg, lr, step, w16_.data() + off, grad, row_v, rows,
                                      row_width, stochastic_key);
    return optimizer_update_rowwise(ctx, cfg, lr, step, w_.data() + off, grad, row_v, rows,
                                    row_width);
  }
  const bool bf16_state = (!s1.empty() && s1.bf16()) || (!s2.empty() && s2.bf16());
  XMC_CHECK(!bf16_state || bf16_, "bf16 optimizer state of fp32 weights");
  if (!bf16_)
    return optimizer_update(ctx, cfg, lr, step, w_.data() + off, grad,
                            s1.empty() ? nullptr : s1.f32() + off,
                            s2.empty() ? nullptr : s2.f32() + off, n);
  if (bf16_state)
    return optimizer_update(ctx, cfg, lr, step, w16_.data() + off, grad,
                            s1.empty() ? nullptr : s1.b16() + off,
                            s2.empty() ? nullptr : s2.b16() + off, n, stochastic_key);
  optimizer_update(ctx, cfg, lr, step, w16_.data() + off, grad,
                   s1.empty() ? nullptr : s1.f32() + off, s2.empty() ? nullptr : s2.f32() + off, n,
                   stochastic_key);
}

float* WeightArray::stage() {
  if (!bf16_) return w_.stage();
  if (!staged_) {
    const gpu::Bf16* h = w16_.stage();
    wide_.resize(w16_.size());
    for (size_t i = 0; i < wide_.size(); ++i) wide_[i] = gpu::bf16_widen(h[i]);
    w16_.release();
    staged_ = true;
  }
  return wide_.data();
}

float* WeightArray::stage_for_write() {
  if (!bf16_) return w_.stage_for_write();
  if (!staged_) {
    wide_.assign(w16_.size(), 0.0f);
    staged_ = true;
  }
  return wide_.data();
}

float* WeightArray::host_data() {
  if (!bf16_) return w_.host_data();
  XMC_CHECK(staged_ || wide_.empty(), "host access to bf16 weights before stage()");
  return wide_.data();
}

void WeightArray::commit() {
  if (!bf16_) return w_.commit();
  XMC_CHECK(staged_, "commit() of bf16 weights that were not staged");
  gpu::Bf16* h = w16_.stage_for_write();
  for (size_t i = 0; i < wide_.size(); ++i) h[i] = gpu::bf16_round(wide_[i]);
  w16_.commit();
  release();
}

void WeightArray::release() {
  if (!bf16_) return w_.release();
  std::vector<float>().swap(wide_);
  staged_ = false;
}

void WeightArray::sync(StateSync s) {
  switch (s) {
    case StateSync::to_host: stage(); return;
    case StateSync::to_device: commit(); return;
    case StateSync::release: release(); return;
  }
}

}  // namespace xmc
