#pragma once
// SampledCudaBlock: the device half of the sampled backends (lsh_sampled, anns_sampled).
// W [L×d], bias [L] and their optimizer state live on the GPU (ledger: weights, optimizer);
// the layer keeps its sampling logic on the host (LSH tables, HNSW, stale hard negatives)
// and hands each step's candidate lists to train_step.
//
// One step, on the context's stream:
//   1. the candidates (CSR over the batch rows) and their grouping by label
//      (kernels::group_entries_by_label, on the host where the candidates are) are packed
//      into one pinned block and copied in one transfer;
//   2. gpu::sampled_scores: z [nnz] = h_row·w_label + b_label;
//   3. z is copied back (nnz floats; the step's one synchronisation) and the layer's loss
//      callback turns it into g [nnz] = dLoss/dz / B on the host, with the CPU layer's
//      own code: the same loss semantics by construction, the loss value without a device
//      reduction; g is copied up (nnz floats);
//   4. dh = Σ g·w_label with the weights before the update (gpu::sampled_input_grad), dW
//      [U×d] and db [U] of the U touched labels (gpu::sampled_weight_grad: segmented sums
//      in the CPU's order, no atomics, nothing of size L×d);
//   5. gpu::optimizer_update_rows on the touched rows of W, b and their state only — the
//      CPU layers' lazy update (global step for Adam's bias correction, weight decay on
//      touched rows only, none on the bias).
// Exact scores and top-k run on the device (cuBLAS GEMM per label chunk, device top-k
// merge, as DenseBlockCuda). Rare work (table / index rebuilds, checkpoints) takes host
// copies: download_weights (L×d + L floats), download_rows (count×d floats).
//
// Numerics: fp32 throughout (there is no bf16 sampled kernel). Initial weights are the
// CPU layer's (drawn on the host by the layer and uploaded), so a CPU and a CUDA layer
// start from identical parameters; the scores and gradients differ from the CPU's only by
// summation order (warp reductions, FMA).
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/cuda_context.h"
#include "core/matrix.h"
#include "eval/topk.h"
#include "kernels/sampled_ops.h"
#include "layers/output_layer.h"
#include "model/optimizer.h"

namespace xmc {

class SampledCudaBlock {
 public:
  // w_init [n×d] host: the initial weights (bias and optimizer state start at zero).
  // max_batch: the largest batch of train_step / rows per top-k block; chunk: labels per
  // chunk of the exact scoring; nnz_hint: candidate entries per step reserved up front
  // (the per-step workspaces grow past it when a step needs more).
  SampledCudaBlock(gpu::CudaContext& ctx, const OptimizerConfig& optim, ConstMatrix w_init,
                   int64_t max_batch, int64_t chunk, int64_t nnz_hint);
  ~SampledCudaBlock();
  SampledCudaBlock(const SampledCudaBlock&) = delete;
  SampledCudaBlock& operator=(const SampledCudaBlock&) = delete;

  // z [nnz] (host scores of the entries, in cand's order) -> g [nnz] (host, written by the
  // callback): dLoss/dz already divided by the batch size.
  using LossGrad = std::function<void(std::span<const float> z, std::span<float> g)>;

  // cand: host CSR over the rows of h (labels distinct within a row). h, dh [B×d]: DEVICE
  // views; dh is overwritten with dL/dh. Returns the touched labels (ascending), valid
  // until the next call.
  const std::vector<uint32_t>& train_step(const kernels::CandidateCsr& cand, ConstMatrix h,
                                          Matrix dh, const LrState& lr, const LossGrad& loss_grad);

  // Host scores [nnz] of the listed candidates (host CSR over the rows of h, DEVICE view).
  // Synchronises.
  std::vector<float> candidate_scores(const kernels::CandidateCsr& cand, ConstMatrix h);

  // out [B×c] = scores of labels [lo, lo+c); h and out DEVICE views.
  void scores(ConstMatrix h, int64_t lo, Matrix out);
  // Exact top-k (k <= gpu::kMaxTopK) of every row of h (DEVICE view, any number of rows), streamed
  // over label chunks with a running merge on the device.
  TopK topk(ConstMatrix h, int k);

  // Host copy of a device matrix (rows×cols floats). Synchronises.
  std::vector<float> to_host(ConstMatrix m) const;
  // Host copy of the rows `labels` of W -> out [count×d]. Synchronises.
  std::vector<float> download_rows(std::span<const uint32_t> labels);
  // Host copies of W [n×d] and b [n] (either pointer may be null). Synchronises.
  void download_weights(float* w, float* b) const;

  // Parameters and optimizer state as host copies in the CPU layers' layout: weight [n×d],
  // bias [n], weight_opt1/2 [n×d], bias_opt1/2 [n] (empty when the optimizer has no such
  // state). Synchronises.
  struct HostState {
    std::vector<float> weight, bias, weight_opt1, weight_opt2, bias_opt1, bias_opt2;
  };
  HostState download() const;
  // The reverse; every array must have download()'s size. Synchronises.
  void upload(const HostState& st);

  // Analytic bytes of the long-lived device buffers: W, b, optimizer state, the top-k
  // logits workspace [max_batch×chunk] and the per-step workspaces reserved for nnz_hint
  // (device part; growth past the hint is not included).
  int64_t analytic_bytes() const;
  int64_t labels() const { return n_; }
  int64_t dim() const { return d_; }
  int64_t chunk() const { return chunk_; }

 private:
  // Device CSR of `cand` (and, when groups is not null, of the grouping) after one packed
  // upload; grows the workspaces first when needed.
  kernels::CandidateCsr stage(const kernels::CandidateCsr& cand,
                              const kernels::EntryGroupsBuffers* groups,
                              kernels::EntryGroups* dgroups);
  void reserve(int64_t rows, int64_t nnz, int64_t groups);

  gpu::CudaContext* ctx_;
  OptimizerConfig optim_;
  int64_t n_, d_, max_batch_, chunk_;
  gpu::DeviceBuffer<float> w_, b_;                 // [n×d], [n]
  gpu::DeviceBuffer<float> w_s1_, w_s2_, b_s1_, b_s2_;
  gpu::DeviceBuffer<float> z_;                     // [max_batch×chunk] top-k logits
  // Per-step workspaces, sized for rows_cap_ rows, nnz_cap_ entries, groups_cap_ labels.
  int64_t rows_cap_ = 0, nnz_cap_ = 0, groups_cap_ = 0;
  gpu::PinnedBuffer<int64_t> pack_host_;           // packed candidate arrays (8-byte words)
  gpu::DeviceBuffer<int64_t> pack_dev_;
  gpu::PinnedBuffer<float> z_host_, g_host_;       // [nnz_cap]
  gpu::DeviceBuffer<float> z_dev_, g_dev_;         // [nnz_cap]
  gpu::DeviceBuffer<float> dw_, db_;               // [groups_cap×d], [groups_cap]
  int64_t reserved_bytes_ = 0;                     // device bytes of the workspaces at construction
  std::vector<uint32_t> touched_;
};

}  // namespace xmc
