#pragma once
// Losses over label chunks. Reduction: sum over labels, mean over the batch. Targets are
// the batch's positive labels (CSR, global ids, sorted within a row). Backends call these
// per label chunk [lo, lo+c) so a B×L logit matrix never exists. The host functions first,
// then the gpu:: half and the forms on the Context's device (shapes checked before the
// device branch).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "core/enum_names.h"
#include "core/context.h"
#include "core/matrix.h"
#include "ops/dense.h"  // gpu::Bf16Matrix

namespace xmc {

XMC_NAMED_ENUM(LossType, bce, squared_hinge, softmax)

// Elementwise losses (bce, squared_hinge) on one chunk.
// logits [B×c] for labels [lo, lo+c); on return holds dLoss/dlogit already divided by B
// (batch_size). Returns the chunk's loss summed over its entries (not yet divided by B).
// squared_hinge: y in {-1,+1}, loss = max(0, 1 - y·z)^2; gradient exactly 0 when the
// margin is met. bce: log(1+exp(-y·z)), computed stably.
// zero_grads (optional): incremented by the number of exactly-zero gradient entries.
double elementwise_loss_grad(LossType type, Matrix logits, const CsrMatrix& targets, int64_t lo,
                             int64_t batch_size, int64_t* zero_grads = nullptr);

// Softmax with multi-label targets t = 1/|y| on the positives (rows with no positives
// contribute nothing). Two passes over the chunks:
//   1. softmax_accumulate(logits chunk, stats) for every chunk -> per-row running max and
//      sum of exp (online logsumexp);
//   2. softmax_loss_grad(logits chunk, stats, ...) for every chunk: writes the gradient
//      (softmax - t) / B into logits and returns this chunk's part of the loss
//      sum_l -t_l·log p_l (not yet divided by B).
struct SoftmaxStats {
  std::vector<double> max;     // [B], init -inf
  std::vector<double> sumexp;  // [B], relative to max
  explicit SoftmaxStats(int64_t batch = 0);
  double logsumexp(int64_t row) const;
};
void softmax_accumulate(ConstMatrix logits, SoftmaxStats& stats);
// Label-sharded run: element-wise in-place reductions (max, sum) over the processes,
// given as functions so that model/ stays free of dist/ (dist/comm.h row_reductions).
using RowReduce = std::function<void(std::span<double>)>;
struct RowReductions {
  RowReduce reduce_max, reduce_sum;
};
// This process's per-row running max and sum of exps merged in place with the other
// processes' into those over every label.
void merge_softmax_stats(SoftmaxStats& stats, const RowReductions& red);
double softmax_loss_grad(Matrix logits, const SoftmaxStats& stats, const CsrMatrix& targets,
                         int64_t lo, int64_t batch_size);

// Losses restricted to each point's candidate labels (the sampled backends; on the host,
// whatever the device). Point i owns the entries [ptr[i], ptr[i+1]); zg holds their
// scores on entry and weight·dLoss/dz / B (B = batch_size) on return; positive[e] marks
// the positives; weight[e] (nullptr: all 1) weights each entry's loss.
//   bce: log(1 + exp(-y·z)) with y = ±1, in double, stable either side;
//   squared_hinge: max(0, 1 - y·z)² (float margin, as the full loss);
//   softmax: over the point's entries with t = 1/#positives on each positive (points
//   without positives contribute nothing; weights ignored).
// Returns the loss summed over the points (not divided by B); *zeros receives the count of
// exactly-zero gradients. Points in parallel (OpenMP), each summed in entry order, the
// points' losses summed in point order: the same result for any thread count.
// shards (softmax in a label-sharded run; nullptr otherwise): each process holds its part
// of every point's candidates; the normaliser spans every process's part and t = 1/(the
// point's flagged positives over all processes) (pass-1 statistics and positive counts
// merged through shards->reduce_*); the loss returned is this process's positives' share
// (the processes' sum is the loss).
double candidate_loss_grad(LossType type, const int64_t* ptr, int64_t rows, const uint8_t* positive,
                           const float* weight, int64_t batch_size, float* zg, int64_t* zeros,
                           const RowReductions* shards = nullptr);

}  // namespace xmc

// The CUDA half (cuda/loss.cu), called by lib/ops/loss.cpp after its shape checks: device
// memory and the context's stream, nothing synchronises; stubs that throw in a build
// without CUDA (core/gpu.h).
XMC_GPU_STUBS_BEGIN
namespace xmc::gpu {
// Batch targets on the device: CSR [B×L], global label ids, sorted within a row.
struct DeviceCsr {
  const int64_t* indptr = nullptr;    // [rows+1]
  const uint32_t* indices = nullptr;  // [nnz]
  int64_t rows = 0;
  int64_t cols = 0;
};
// Per-step accumulators on the device, so a step reads back one small struct, once.
struct LossAccum {
  double loss = 0.0;                   // summed over entries, not yet divided by B
  unsigned long long zero_grads = 0;   // exactly-zero gradient entries
  unsigned long long zero_labels = 0;  // labels whose whole gradient column was zero
};
// Softmax running statistics per row (online logsumexp), device arrays [B].
struct DeviceSoftmaxStats {
  float* max = nullptr;     // init -inf
  float* sumexp = nullptr;  // relative to max, init 0
};

// bce / squared_hinge: logits [B×c] (without bias) in, on return G = dLoss/d(logit + bias)
// / batch_size; adds the chunk's loss and zero count to *acc (device). bias: c entries
// (device), or nullptr when the logits include it already. g_bf16 (optional, [B×c]): a
// bf16 copy of G for the bf16 GEMMs.
XMC_GPU_FN void elementwise_loss_grad(const CudaContext& ctx, LossType type, Matrix logits,
                                      const float* bias, const DeviceCsr& targets, int64_t lo,
                                      int64_t batch_size, LossAccum* acc,
                                      Bf16Matrix g_bf16 = {}) XMC_GPU_STUB;
// Resets the stats of `rows` rows (max = -inf, sumexp = 0).
XMC_GPU_FN void softmax_reset(const CudaContext& ctx, DeviceSoftmaxStats stats,
                              int64_t rows) XMC_GPU_STUB;
// Pass 1 on one chunk: logits [B×c] (+ bias) merged into the running max / sumexp.
XMC_GPU_FN void softmax_accumulate(const CudaContext& ctx, ConstMatrix logits, const float* bias,
                                   DeviceSoftmaxStats stats) XMC_GPU_STUB;
// Pass 2 on one chunk: logits (+ bias) -> (softmax - t) / B with t = 1/|y| on the
// positives (rows without positives: 0); adds -Σ t·log p of the chunk to acc->loss.
XMC_GPU_FN void softmax_loss_grad(const CudaContext& ctx, Matrix logits, const float* bias,
                                  DeviceSoftmaxStats stats, const DeviceCsr& targets, int64_t lo,
                                  int64_t batch_size, LossAccum* acc,
                                  Bf16Matrix g_bf16 = {}) XMC_GPU_STUB;
// Gradient sparsification (sparsify_gradient below): g when |g| >= t, else ±t with
// probability |g|/t (the sign of g) and 0 otherwise, decided by the random bits `bits`
// (the top 24 as a uniform in [0, 1)). Unbiased: its expectation is g. t > 0.
XMC_HOST_DEVICE inline float sparsify_value(float g, float t, uint32_t bits) {
  const float a = g < 0.0f ? -g : g;
  if (a >= t) return g;
  const float u = static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
  return u * t < a ? (g < 0.0f ? -t : t) : 0.0f;
}
// sparsify_gradient's device half: g [B×c] in place (and its bf16 copy g_bf16, optional).
XMC_GPU_FN void sparsify_gradient(const CudaContext& ctx, Matrix g, float threshold,
                                  uint64_t stream, int64_t col0, int64_t counter_cols,
                                  Bf16Matrix g_bf16 = {}) XMC_GPU_STUB;
// candidate_loss_grad's elementwise losses (bce, squared_hinge) over nnz sampled entries,
// one thread per entry: zg [nnz] scores in, weight·dLoss/dz / batch_size out; positive
// [nnz] flags the positives, weight [nnz] (nullable: all 1) weights each entry; the loss
// and exact-zero count added to *acc. The host's formulas in the host's order (bce with
// expf / log1pf where the host has its fast approximations; squared hinge in double).
XMC_GPU_FN void candidate_loss_grad(const CudaContext& ctx, LossType type, int64_t nnz,
                                    const uint8_t* positive, const float* weight,
                                    int64_t batch_size, float* zg, LossAccum* acc) XMC_GPU_STUB;
// candidate_loss_grad's softmax, a block per point (ptr [rows + 1] DEVICE memory): the
// host's order of operations (candidate_softmax), expf for its approximation; weights
// ignored, as on the host.
XMC_GPU_FN void candidate_softmax_grad(const CudaContext& ctx, const int64_t* ptr, int64_t rows,
                                       const uint8_t* positive, int64_t batch_size, float* zg,
                                       LossAccum* acc) XMC_GPU_STUB;
}  // namespace xmc::gpu
XMC_GPU_STUBS_END

// The loss on the Context's device. Its classes hold Buffers (core/buffer.h, which brings
// fmt): host code only, not for nvcc, which compiles cuda/loss.cu against the part above.
#ifndef __CUDACC__
#include "core/buffer.h"

namespace xmc {

// A batch's positives for the losses on the Context's device: the host CSR (global ids,
// sorted within a row), filled by the caller, and on a CUDA Context its device copy,
// made by upload() (the index array grows geometrically with the batch's nnz, in the
// ledger as workspace).
class LossTargets {
 public:
  LossTargets() = default;
  LossTargets(Context& ctx, int64_t max_batch);
  // The targets' own CSR, for the caller to fill (then upload()).
  CsrMatrix& fill() {
    ext_ = nullptr;
    return csr_;
  }
  // Targets held by the caller (alive until the step ends) instead of fill()'s; uploaded
  // on a CUDA Context.
  void assign(const CsrMatrix& t) {
    ext_ = &t;
    upload();
  }
  const CsrMatrix& host() const { return ext_ ? *ext_ : csr_; }
  // CUDA: copies host() to the device (queued on the stream); CPU: nothing.
  void upload();
  // The device copy (CUDA Context only).
  gpu::DeviceCsr device() const;
  // The long-lived device bytes (indptr [max_batch+1]; the grown indices excluded); 0 on
  // the CPU, where the CSR is the host one.
  int64_t analytic_bytes() const {
    return indptr_.empty() ? 0 : static_cast<int64_t>(indptr_.bytes());
  }

 private:
  Context* ctx_ = nullptr;
  CsrMatrix csr_;
  const CsrMatrix* ext_ = nullptr;
  Buffer<int64_t> indptr_;    // CUDA: [max_batch+1]
  Buffer<uint32_t> indices_;  // CUDA: grows with nnz
};

// The running loss and exact-zero gradient count of one step on the Context's device, so
// that a GPU step reads back one small struct once (a device Buffer in the ledger; on the
// CPU a plain member).
class LossAccumulator {
 public:
  LossAccumulator() = default;
  explicit LossAccumulator(Context& ctx) {
    if (ctx.on_gpu()) dev_ = Buffer<gpu::LossAccum>(ctx, MemTag::workspace, 1);
  }
  // loss = start (what the step has summed before), the counts 0.
  void reset(double start = 0.0) {
    host_ = gpu::LossAccum{start, 0, 0};
    if (!dev_.empty()) dev_.copy_from_host(&host_, 1);
  }
  gpu::LossAccum* data() { return dev_.empty() ? &host_ : dev_.data(); }
  // The zero-label counter inside data() (for ops::fixed_fanin_weight_grad).
  unsigned long long* zero_labels() {
    return reinterpret_cast<unsigned long long*>(reinterpret_cast<char*>(data()) +
                                                 offsetof(gpu::LossAccum, zero_labels));
  }
  // Synchronises on the GPU.
  gpu::LossAccum read() {
    if (!dev_.empty()) dev_.copy_to_host(&host_, 1);
    return host_;
  }
  int64_t bytes() const { return static_cast<int64_t>(dev_.bytes()); }

 private:
  gpu::LossAccum host_{};
  Buffer<gpu::LossAccum> dev_;
};

// elementwise_loss_grad on the Context's device: logits [B×c] (a DEVICE view on a CUDA
// Context) for labels [lo, lo+c), plus bias [c] first when bias is not nullptr; adds the
// chunk's loss sum and exact-zero count to acc. CPU: the function above (bias added by
// add_row_vector first); CUDA: gpu::elementwise_loss_grad.
// g_bf16 (CUDA only, optional [B×c]): also writes a bf16 copy of the gradient there.
void elementwise_loss_grad(const Context& ctx, LossType type, Matrix logits, const float* bias,
                           const LossTargets& targets, int64_t lo, int64_t batch_size,
                           LossAccumulator& acc, gpu::Bf16Matrix g_bf16 = {});

// candidate_loss_grad (above) on the Context's device: zg, positive and weight (nullable)
// [nnz] and ptr [rows + 1] (ptr[rows] = nnz) on the Context's device. Adds the loss (not
// divided by B) and the exact-zero count to acc. bce and squared hinge a thread per entry on
// the GPU, softmax a block per point (one process: a label-sharded softmax needs the host
// form's reductions).
void candidate_loss_grad(const Context& ctx, LossType type, const int64_t* ptr, int64_t rows,
                         int64_t nnz, const uint8_t* positive, const float* weight,
                         int64_t batch_size, float* zg, LossAccumulator& acc);

// Unbiased gradient sparsification on the Context's device: every entry of g [B×c] (the
// loss gradient of labels [col0, col0+c), a DEVICE view on a CUDA Context) below
// `threshold` in magnitude becomes ±threshold or 0 at random (gpu::sparsify_value), so
// most of a trained layer's gradient entries are exactly zero and its expectation is
// unchanged. Entry (i, j) draws gpu::rounding_bits(stream, i·counter_cols + col0 + j):
// both devices, any chunking and any label sharding draw alike when counter_cols is the
// model's label count and col0 the global label id. g_bf16 (CUDA only, optional [B×c]):
// rewritten as the bf16 copy of the result.
void sparsify_gradient(const Context& ctx, Matrix g, float threshold, uint64_t stream, int64_t col0,
                       int64_t counter_cols, gpu::Bf16Matrix g_bf16 = {});

// Softmax's running per-row statistics on the Context's device: SoftmaxStats (double) on
// the CPU, device arrays (float) [max_batch] on a CUDA Context, in the ledger.
class SoftmaxState {
 public:
  SoftmaxState() = default;
  SoftmaxState(Context& ctx, int64_t max_batch);
  // Starts pass 1 for a batch of `rows` rows.
  void reset(int64_t rows);
  // Label-sharded run, after pass 1: merge_softmax_stats of the statistics (on a CUDA
  // Context through a host copy).
  void merge(const RowReductions& red);
  int64_t bytes() const { return static_cast<int64_t>(max_.bytes() + sum_.bytes()); }

 private:
  friend void softmax_accumulate(const Context&, Matrix, const float*, SoftmaxState&);
  friend void softmax_loss_grad(const Context&, Matrix, const float*, const SoftmaxState&,
                                const LossTargets&, int64_t, int64_t, LossAccumulator&,
                                gpu::Bf16Matrix);
  gpu::DeviceSoftmaxStats device() const;
  Context* ctx_ = nullptr;
  SoftmaxStats host_;
  Buffer<float> max_, sum_;  // CUDA
  int64_t rows_ = 0;         // CUDA: rows of the current batch
};
// The two passes on the Context's device, logits [B×c] without bias (bias [c] added
// first; CPU: add_row_vector into logits, then the host functions above).
void softmax_accumulate(const Context& ctx, Matrix logits, const float* bias, SoftmaxState& st);
void softmax_loss_grad(const Context& ctx, Matrix logits, const float* bias, const SoftmaxState& st,
                       const LossTargets& targets, int64_t lo, int64_t batch_size,
                       LossAccumulator& acc, gpu::Bf16Matrix g_bf16 = {});

}  // namespace xmc
#endif  // __CUDACC__
