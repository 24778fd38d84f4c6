#include "layers/weight_array.h"

#include <cmath>
#include <cstdint>

#include "core/error.h"

namespace xmc {

WeightArray::WeightArray(Context& ctx, Precision precision, size_t n, MemTag tag, int64_t row_width)
    : precision_(precision) {
  switch (precision) {
    case Precision::fp32:
      w_ = Buffer<float>(ctx, tag, n);
      break;
    case Precision::bf16:
      w16_ = Buffer<gpu::Bf16>(ctx, tag, n);
      break;
    case Precision::fp8: {
      XMC_CHECK(row_width >= 1 && n % static_cast<size_t>(row_width) == 0,
                "fp8 weights: {} values in rows of {}", n, row_width);
      row_width_ = row_width;
      w8_ = Buffer<gpu::Fp8>(ctx, tag, n);
      scale_ = Buffer<float>(ctx, tag, n / static_cast<size_t>(row_width));
      break;
    }
  }
}

size_t WeightArray::size() const {
  switch (precision_) {
    case Precision::bf16:
      return w16_.size();
    case Precision::fp8:
      return w8_.size();
    default:
      return w_.size();
  }
}

int64_t WeightArray::bytes() const {
  return static_cast<int64_t>(w_.bytes() + w16_.bytes() + w8_.bytes() + scale_.bytes());
}

void WeightArray::update(const Context& ctx, const OptimizerConfig& cfg, double lr, int64_t step,
                         size_t off, const float* grad, WeightArray& s1, WeightArray& s2, int64_t n,
                         int64_t row_width, uint64_t stochastic_key, WeightArray& comp) {
  XMC_CHECK(off + static_cast<size_t>(n) <= size(), "weight update of [{}, {}) of {} weights",
            off, off + static_cast<size_t>(n), size());
  XMC_CHECK(comp.empty() || (comp.bf16() && comp.size() == size() && precision_ != Precision::fp32),
            "Kahan compensation of {} {} weights: {} {} values", size(), to_string(precision_),
            comp.size(), to_string(comp.precision()));
  gpu::Bf16* c = comp.empty() ? nullptr : comp.b16() + off;
  const bool bf16_state = (!s1.empty() && s1.bf16()) || (!s2.empty() && s2.bf16());
  if (fp8()) {  // whole rows, fp32 state (rowwise: one v per row in s2)
    const auto w = static_cast<size_t>(row_width_);
    XMC_CHECK(
        row_width == row_width_ && off % w == 0 && static_cast<size_t>(n) % w == 0 && !bf16_state,
        "fp8 update of [{}, {}) in rows of {} (weights in rows of {}), bf16 state {}", off,
        off + static_cast<size_t>(n), row_width, row_width_, bf16_state);
    const size_t r0 = off / w;
    float* s1p = s1.empty() ? nullptr : s1.f32() + off;
    float* s2p = s2.empty() ? nullptr : s2.f32() + (cfg.rowwise ? r0 : off);
    return optimizer_update_fp8(ctx, cfg, lr, step, w8_.data() + off, scale_.data() + r0, grad, s1p,
                                s2p, n / row_width, row_width, stochastic_key, c);
  }
  if (cfg.rowwise) {  // one fp32 second moment per row, in s2
    const auto w = static_cast<size_t>(row_width);
    XMC_CHECK(row_width >= 1 && off % w == 0 && static_cast<size_t>(n) % w == 0 && s1.empty() &&
                  !s2.bf16() && (off + static_cast<size_t>(n)) / w <= s2.size(),
              "row-wise update of [{}, {}) in rows of {} with {} row moments", off,
              off + static_cast<size_t>(n), row_width, s2.size());
    float* row_v = s2.f32() + off / w;
    const int64_t rows = n / row_width;
    if (bf16())
      return optimizer_update_rowwise(ctx, cfg, lr, step, w16_.data() + off, grad, row_v, rows,
                                      row_width, stochastic_key, c);
    return optimizer_update_rowwise(ctx, cfg, lr, step, w_.data() + off, grad, row_v, rows,
                                    row_width);
  }
  XMC_CHECK(!bf16_state || bf16(), "bf16 optimizer state of fp32 weights");
  if (!bf16())
    return optimizer_update(ctx, cfg, lr, step, w_.data() + off, grad,
                            s1.empty() ? nullptr : s1.f32() + off,
                            s2.empty() ? nullptr : s2.f32() + off, n);
  if (bf16_state)
    return optimizer_update(ctx, cfg, lr, step, w16_.data() + off, grad,
                            s1.empty() ? nullptr : s1.b16() + off,
                            s2.empty() ? nullptr : s2.b16() + off, n, stochastic_key, c);
  optimizer_update(ctx, cfg, lr, step, w16_.data() + off, grad,
                   s1.empty() ? nullptr : s1.f32() + off, s2.empty() ? nullptr : s2.f32() + off, n,
                   stochastic_key, c);
}

float* WeightArray::stage() {
  if (precision_ == Precision::fp32) return w_.stage();
  if (!staged_) {
    wide_.resize(size());
    if (bf16()) {
      const gpu::Bf16* h = w16_.stage();
      for (size_t i = 0; i < wide_.size(); ++i) wide_[i] = gpu::bf16_widen(h[i]);
      w16_.release();
    } else {
      const gpu::Fp8* h = w8_.stage();
      const float* scale = scale_.stage();
      const auto w = static_cast<size_t>(row_width_);
      for (size_t i = 0; i < wide_.size(); ++i) wide_[i] = gpu::fp8_value(h[i].bits) * scale[i / w];
      w8_.release();
      scale_.release();
    }
    staged_ = true;
  }
  return wide_.data();
}

float* WeightArray::stage_for_write() {
  if (precision_ == Precision::fp32) return w_.stage_for_write();
  if (!staged_) {
    wide_.assign(size(), 0.0f);
    staged_ = true;
  }
  return wide_.data();
}

float* WeightArray::host_data() {
  if (precision_ == Precision::fp32) return w_.host_data();
  XMC_CHECK(staged_ || wide_.empty(), "host access to {} weights before stage()",
            to_string(precision_));
  return wide_.data();
}

void WeightArray::commit() {
  if (precision_ == Precision::fp32) return w_.commit();
  XMC_CHECK(staged_, "commit() of {} weights that were not staged", to_string(precision_));
  if (bf16()) {
    gpu::Bf16* h = w16_.stage_for_write();
    for (size_t i = 0; i < wide_.size(); ++i) h[i] = gpu::bf16_round(wide_[i]);
    w16_.commit();
  } else {  // each row scaled by its largest |w|, rounded to nearest even
    gpu::Fp8* h = w8_.stage_for_write();
    float* scale = scale_.stage_for_write();
    const auto w = static_cast<size_t>(row_width_);
    for (size_t r = 0; r < scale_.size(); ++r) {
      const float* x = wide_.data() + r * w;
      float top = 0.0f;
      for (size_t j = 0; j < w; ++j) top = std::fmax(top, std::fabs(x[j]));
      scale[r] = gpu::fp8_row_scale(top);
      const float inv = gpu::fp8_inverse_scale(scale[r]);
      for (size_t j = 0; j < w; ++j) h[r * w + j].bits = gpu::fp8_code(x[j] * inv, 0, false);
    }
    w8_.commit();
    scale_.commit();
  }
  release();
}

void WeightArray::release() {
  if (precision_ == Precision::fp32) return w_.release();
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
