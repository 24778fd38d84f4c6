#pragma once
// SampledBlock: the parameters and the training step shared by the sampled backends
// (lsh_sampled, anns_sampled): W [n×d], bias [n] and their optimizer state on the
// Context's device (ledger: weights, optimizer), trained on each step's candidate lists,
// which the layer draws on the host (LSH tables, HNSW, stale hard negatives).
//
// One step, the same code on both devices (ops of ops/sampled.h):
//   1. the candidates (CSR over the batch rows) and their grouping by label
//      (ops::group_entries_by_label, on the host) go where the ops read them
//      (ops::CandidateStaging: the host arrays on the CPU, one packed upload on the GPU);
//   2. ops::sampled_scores: z [nnz] = h_row·w_label + b_label;
//   3. the layer's loss callback turns z into g [nnz] = dLoss/dz / B in place, on the host
//      (a GPU step downloads z and uploads g: nnz floats each way, its one synchronisation);
//   4. dh = Σ g·w_label with the weights before the update (ops::sampled_input_grad);
//      dW and db of the touched labels, kBlock labels at a time
//      (ops::sampled_weight_grad: segmented sums in a fixed order, no atomics, nothing
//      of size n×d), then the lazy update of those rows (optimizer_update_rows: the global
//      step for Adam's bias correction, weight decay on touched rows only, none on the
//      bias).
// Exact scores and top-k: GEMM per label chunk (ops/topk.h). Rare host work
// (table / index rebuilds, checkpoints) goes through host copies (Buffer::stage; none on
// the CPU) or rows_to_host.
//
// Labels: the block holds labels [lo, lo + n) (all of them, lo = 0, unless label-sharded);
// its rows, candidate lists and the labels it returns are local ids 0..n-1, except where a
// method says global (scores' lo, top-k's labels).
// Initial weights: init_uniform_rows(seed) of the global label ids, as `dense`, drawn on
// the host on both devices.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/context.h"
#include "core/matrix.h"
#include "core/tensor_ref.h"
#include "layers/label_params.h"
#include "layers/output_layer.h"
#include "ops/loss.h"
#include "ops/optimizer.h"
#include "ops/sampled.h"
#include "ops/topk.h"

namespace xmc {

class SampledBlock {
 public:
  SampledBlock() = default;
  // n labels [lo, lo + n) × d; max_batch: the largest batch / rows per top-k block on the GPU;
  // chunk: labels per chunk of the exact scoring; nnz_hint: candidate entries per step reserved up
  // front (the workspaces grow past it when a step needs more); drawn: the layer trains
  // through train_step_drawn, whose grouping arrays are then reserved for nnz_hint too.
  SampledBlock(Context& ctx, const OptimizerConfig& optim, int64_t lo, int64_t n, int64_t d,
               uint64_t seed, int64_t max_batch, int64_t chunk, int64_t nnz_hint,
               bool drawn = false);

  // zg [nnz]: the entries' scores on entry (in cand's order), dLoss/dz / B on return.
  using LossGrad = std::function<void(std::span<float> zg)>;
  // cand: host CSR over the rows of h (labels distinct within a row). h, dh [B×d] on the
  // Context's device; dh is overwritten with dL/dh. Returns the touched labels (ascending),
  // valid until the next call.
  const std::vector<uint32_t>& train_step(const ops::CandidateCsr& cand, ConstMatrix h, Matrix dh,
                                          const LrState& lr, const LossGrad& loss_grad);
  // The loss sum of a drawn step (not divided by B), its exactly-zero gradients, and the
  // labels it updated (ascending, on the Context's device, valid until the next step).
  struct DrawnStepLoss {
    double loss = 0.0;
    int64_t zeros = 0;
    const uint32_t* touched = nullptr;
    int64_t touched_count = 0;
  };
  // The same step over candidates already on the Context's device with their flags and
  // weights (anns_sampled draws them there): cand a CSR over the rows of h, positive /
  // weight (nullable) [cand.nnz] on that device; the grouping by label
  // (ops::group_entries_by_label), the loss (candidate_loss_grad: bce, squared hinge or a
  // one-process softmax) and everything after it on the Context's device too. On the GPU two
  // read-backs: the number of touched labels and the loss.
  DrawnStepLoss train_step_drawn(const ops::CandidateCsr& cand, const uint8_t* positive,
                                 const float* weight, LossType loss, ConstMatrix h, Matrix dh,
                                 const LrState& lr);
  // Host scores [nnz] of the listed candidates (host CSR over the rows of h).
  std::vector<float> candidate_scores(const ops::CandidateCsr& cand, ConstMatrix h);

  // out [B×c] = scores of labels [lo, lo+c) (global ids within the block's range).
  void scores(ConstMatrix h, int64_t lo, Matrix out) const;
  // Exact top-k (global ids) of every row of h, in blocks of block_rows rows.
  TopK topk(ConstMatrix h, int k, int64_t block_rows) const;

  // W [n×d] on the Context's device (a device view on a CUDA Context).
  ConstMatrix weights() const { return {p_.w.f32(), n_, d_}; }
  // Host copy of the rows `labels` of W -> [count×d].
  std::vector<float> rows_to_host(std::span<const uint32_t> labels) const;
  // Host W [n×d] and b [n] until release_host(): the arrays themselves on the CPU, copies
  // on the GPU.
  ConstMatrix host_weights();
  const float* host_bias();
  void release_host();

  // "output/weight" [n×d], "output/bias" [n] and their optimizer state (LabelParams);
  // host arrays: on a CUDA Context after sync_state(to_host).
  std::vector<TensorRef> state();
  void sync_state(StateSync s);
  // Bytes of the long-lived buffers: W, b, optimizer state, the per-step workspaces
  // reserved at construction (growth past nnz_hint not included): planned_bytes.
  int64_t analytic_bytes() const;
  // The same for a block with these sizes, before it is built (layers/layer_bytes.h).
  static LayerBytes planned_bytes(bool gpu, const OptimizerConfig& optim, int64_t n, int64_t d,
                                  int64_t max_batch, int64_t nnz_hint, bool drawn = false);
  // The work of one step over nnz candidate entries: scores, dh and dW gather a row of W
  // (or of h) per entry; the lazy update of the touched rows (at most min(n, nnz)).
  // host: the candidate lists, their grouping and the loss are host work that these counts
  // leave out (StepWork::host_candidates: plan measures it on a CPU); false where a GPU
  // runs them (one process drawing on the device: the counted bytes are its work).
  static StepWork planned_step(const OptimizerConfig& optim, int64_t n, int64_t d, double nnz,
                               bool host);

 private:
  Context* ctx_ = nullptr;
  OptimizerConfig optim_;
  int64_t lo_ = 0, n_ = 0, d_ = 0, chunk_ = 0, block_ = 0, max_batch_ = 0, nnz_hint_ = 0;
  LabelParams p_;                      // W [n×d], bias [n], their optimizer state
  Buffer<float> zg_;                   // [nnz capacity] scores, then gradients
  Buffer<float> dw_, db_;              // [block×d], [block]
  ops::CandidateStaging staging_;
  std::vector<uint32_t> touched_;
  // train_step_drawn's workspaces, reserved for nnz_hint by a `drawn` block (else allocated
  // by its first call) and grown with nnz (ledger: workspace; the growth and the GPU sort's
  // scratch are not in planned_bytes, as the staging's growth is not).
  struct DeviceGroups {
    Buffer<uint32_t> labels, row;  // [nnz]
    Buffer<int64_t> ptr, entry;    // [nnz + 1], [nnz]
    Buffer<uint8_t> scratch;       // the sort's
    LossAccumulator acc;
  };
  std::unique_ptr<DeviceGroups> device_;
};

}  // namespace xmc
