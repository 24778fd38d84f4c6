#pragma once
// WeightArray: a layer's label weights, or their optimizer state, on the Context's device:
// fp32, or bf16 only (no fp32 master copy; the optimizer rounds each update). Host access
// as Buffer's (core/buffer.h), always in fp32: stage() gives a host fp32 copy (bf16
// widened exactly), commit() writes it back (bf16: rounded to nearest even), release()
// drops it. On the CPU a bf16 array is its 2-byte storage; the GEMMs widen a chunk of it
// just before use (layers/dense_block.h).
#include <cstddef>
#include <vector>

#include "core/buffer.h"
#include "ops/dense.h"  // gpu::Bf16
#include "ops/optimizer.h"

namespace xmc {

class WeightArray {
 public:
  WeightArray() = default;
  // n values, zero, recorded under `tag` (weights, or optimizer for state arrays).
  WeightArray(Context& ctx, bool bf16, size_t n, MemTag tag = MemTag::weights);

  bool bf16() const { return bf16_; }
  bool empty() const { return size() == 0; }
  size_t size() const { return bf16_ ? w16_.size() : w_.size(); }
  int64_t bytes() const { return static_cast<int64_t>(bf16_ ? w16_.bytes() : w_.bytes()); }
  // The device arrays: f32() in fp32 mode, b16() in bf16 mode.
  float* f32() { return w_.data(); }
  const float* f32() const { return w_.data(); }
  gpu::Bf16* b16() { return w16_.data(); }
  const gpu::Bf16* b16() const { return w16_.data(); }

  // Values [off, off+n) take one optimizer step with gradient grad [n], state arrays s1, s2
  // (the same layout; empty when the optimizer keeps none; bf16 state needs bf16 weights):
  // fp32, or bf16 rounded to nearest — or stochastically when stochastic_key != 0 (the
  // rounding bits depend on the key, the step and the index). With cfg.rowwise the slice
  // is whole rows of row_width values and s2 holds one fp32 value per row (s2[off /
  // row_width] on; optimizer_update_rowwise).
  void update(const Context& ctx, const OptimizerConfig& cfg, double lr, int64_t step, size_t off,
              const float* grad, WeightArray& s1, WeightArray& s2, int64_t n, int64_t row_width,
              uint64_t stochastic_key = 0);
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
  bool bf16_ = false;
  Buffer<float> w_;
  Buffer<gpu::Bf16> w16_;
  std::vector<float> wide_;  // bf16: the staged fp32 copy
  bool staged_ = false;
};

}  // namespace xmc
