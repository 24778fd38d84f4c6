#pragma once
// The host half of the sampled backends (lsh_sampled, anns_sampled): W [n×d], bias [n] and
// their optimizer state, updated lazily one touched row at a time, and the checkpoint
// names of those arrays, which are the same on both devices (a device layer lists its
// SampledCudaBlock::HostState copies under them).
#include <cstdint>
#include <vector>

#include "core/matrix.h"
#include "core/memory_ledger.h"
#include "core/tensor_ref.h"
#include "kernels/sampled_ops.h"
#include "layers/param_refs.h"
#include "layers/sampled_cuda.h"
#include "model/optimizer.h"
#include "model/optimizer_state.h"

namespace xmc {

// One step's lazy row update, prepared once (Adam's bias corrections folded) and applied
// to every touched row: W with the layer's optimizer, the bias without weight decay (as
// `dense`).
struct SampledRowStep {
  OptimizerStep w, b;
  SampledRowStep(const OptimizerConfig& optim, double lr, int64_t step)
      : w(optim, lr, step), b(without_decay(optim), lr, step) {}

 private:
  static OptimizerConfig without_decay(OptimizerConfig c) {
    c.weight_decay = 0.0;
    return c;
  }
};

struct SampledHostParams {
  HostBuffer<float> w, b;        // [n×d], [n]: ledger `weights`
  HostBuffer<float> w_s1, w_s2;  // optimizer state of W (`optimizer`; empty when not needed)
  HostBuffer<float> b_s1, b_s2;  // optimizer state of b

  SampledHostParams() = default;
  SampledHostParams(MemoryLedger& ledger, const OptimizerConfig& optim, int64_t n, int64_t d)
      : w(ledger, MemTag::weights, static_cast<size_t>(n * d)),
        b(ledger, MemTag::weights, static_cast<size_t>(n)),
        w_s1(optimizer_state_buffer(ledger, optim, 1, static_cast<size_t>(n * d))),
        w_s2(optimizer_state_buffer(ledger, optim, 2, static_cast<size_t>(n * d))),
        b_s1(optimizer_state_buffer(ledger, optim, 1, static_cast<size_t>(n))),
        b_s2(optimizer_state_buffer(ledger, optim, 2, static_cast<size_t>(n))) {}

  // The lazy update of row l with its summed gradient g [d] and bias gradient gb. Touches
  // row l of W, b and their state only, on the calling thread (no OpenMP region).
  void update_row(int64_t l, int64_t d, const float* g, float gb, const SampledRowStep& step) {
    const int64_t o = l * d;
    step.w.apply(w.data() + o, g, data_or_null(w_s1, o), data_or_null(w_s2, o), d);
    step.b.apply(b.data() + l, &gb, data_or_null(b_s1, l), data_or_null(b_s2, l), 1);
  }

  // The CPU training step of the weights on the entries of cand (row b's candidate labels;
  // g [nnz] = dL/dz of each entry, h [B×d]): dh = Σ g·w_label with the weights before the
  // update (kernels::sampled_input_grad; dh is overwritten), then dW and db of the touched
  // labels (kernels::sampled_weight_grad over the entries grouped by label, rows ascending
  // within a label, as the GPU groups them) and their lazy update. Returns the touched
  // labels, ascending.
  std::vector<uint32_t> train_step(const kernels::CandidateCsr& cand, const float* g, ConstMatrix h,
                                   Matrix dh, const SampledRowStep& step);
};

// The checkpoint names (append_weight_bias_refs) over a device layer's host copies.
inline std::vector<TensorRef> sampled_param_refs(int64_t n, int64_t d,
                                                 SampledCudaBlock::HostState& st) {
  std::vector<TensorRef> out;
  append_weight_bias_refs(out, n, d, st.weight.data(), st.bias.data(), data_or_null(st.weight_opt1),
                          data_or_null(st.bias_opt1), data_or_null(st.weight_opt2),
                          data_or_null(st.bias_opt2));
  return out;
}

// ... and over a CPU layer's arrays.
inline std::vector<TensorRef> sampled_param_refs(int64_t n, int64_t d, SampledHostParams& hp) {
  std::vector<TensorRef> out;
  append_weight_bias_refs(out, n, d, hp.w.data(), hp.b.data(), data_or_null(hp.w_s1),
                          data_or_null(hp.b_s1), data_or_null(hp.w_s2), data_or_null(hp.b_s2));
  return out;
}

}  // namespace xmc
