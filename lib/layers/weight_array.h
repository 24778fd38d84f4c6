#pragma once
// WeightArray: a layer's label weights, or their optimizer state, on the Context's device:
// fp32, bf16 only, or fp8 (e4m3) only with one power-of-two fp32 scale per row (no fp32
// master copy; the optimizer rounds each update). Host access as Buffer's
// (core/buffer.h), always in fp32: stage() gives a host fp32 copy (widened exactly),
// commit() writes it back (bf16: rounded to nearest even; fp8: each row scaled by
// gpu::fp8_row_scale and rounded to nearest even), release() drops it. On the CPU a bf16 or
// fp8 array is its 2- or 1-byte storage; the GEMMs widen a chunk of it just before use
// (layers/dense_block.h).
#include <cstddef>
#include <vector>

#include "core/buffer.h"
#include "ops/dense.h"  // gpu::Bf16
#include "ops/optimizer.h"

namespace xmc {

XMC_NAMED_ENUM(Precision, fp32, bf16, fp8);  // weight storage

// Bytes of one stored weight: 4, 2 or 1 (fp8's row scales not included).
inline double weight_bytes(Precision p) {
  return p == Precision::fp32 ? 4.0 : (p == Precision::bf16 ? 2.0 : 1.0);
}

class WeightArray {
 public:
  WeightArray() = default;
  // n values, zero, recorded under `tag` (weights, or optimizer for state arrays). fp8:
  // rows of row_width values (n a multiple of it), one scale each (under `tag` too).
  WeightArray(Context& ctx, Precision precision, size_t n, MemTag tag = MemTag::weights,
              int64_t row_width = 0);

  Precision precision() const { return precision_; }
  bool bf16() const { return precision_ == Precision::bf16; }
  bool fp8() const { return precision_ == Precision::fp8; }
  bool empty() const { return size() == 0; }
  size_t size() const;
  int64_t bytes() const;  // with fp8's row scales
  // The device arrays: f32() in fp32 mode, b16() in bf16 mode, f8() and row_scale() in fp8
  // mode.
  float* f32() { return w_.data(); }
  const float* f32() const { return w_.data(); }
  gpu::Bf16* b16() { return w16_.data(); }
  const gpu::Bf16* b16() const { return w16_.data(); }
  gpu::Fp8* f8() { return w8_.data(); }
  const gpu::Fp8* f8() const { return w8_.data(); }
  float* row_scale() { return scale_.data(); }
  const float* row_scale() const { return scale_.data(); }

  // Values [off, off+n) take one optimizer step with gradient grad [n], state arrays s1, s2
  // (the same layout; empty when the optimizer keeps none; bf16 state needs bf16 weights):
  // fp32, or bf16 / fp8 rounded to nearest — or stochastically when stochastic_key != 0
  // (the rounding bits depend on the key, the step and the index). With cfg.rowwise the
  // slice is whole rows of row_width values and s2 holds one fp32 value per row (s2[off /
  // row_width] on; optimizer_update_rowwise). fp8: whole rows (optimizer_update_fp8), fp32
  // state. comp: the Kahan compensation (cfg.kahan; bf16, as long as this array) or empty.
  void update(const Context& ctx, const OptimizerConfig& cfg, double lr, int64_t step, size_t off,
              const float* grad, WeightArray& s1, WeightArray& s2, int64_t n, int64_t row_width,
              uint64_t stochastic_key, WeightArray& comp);
  // The stochastic-rounding key of a slice that starts at `offset` (the bits differ per
  // seed and per slice); 0 when `on` is false (round to nearest).
  static uint64_t rounding_key(bool on, uint64_t seed, int64_t offset) {
    return on ? ((seed * 0x9E3779B97F4A7C15ULL) ^
                 (static_cast<uint64_t>(offset) * 0xD1B54A32D192ED03ULL)) |
                    1ULL
              : 0;
  }

  float* stage();
  // A host fp32 copy the host fills from scratch (no download first).
  float* stage_for_write();
  float* host_data();
  void commit();
  void release();
  void sync(StateSync s);

 private:
  Precision precision_ = Precision::fp32;
  int64_t row_width_ = 0;  // fp8
  Buffer<float> w_;
  Buffer<gpu::Bf16> w16_;
  Buffer<gpu::Fp8> w8_;
  Buffer<float> scale_;      // fp8: [size / row_width]
  std::vector<float> wide_;  // bf16, fp8: the staged fp32 copy
  bool staged_ = false;
};

}  // namespace xmc
