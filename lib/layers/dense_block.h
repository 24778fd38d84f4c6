#pragma once
// DenseBlock: W [n×d] + bias [n] over labels [lo, lo+n), trained in label chunks so that
// neither a B×n logit matrix nor a full dW ever exists: per chunk c, logits Z = h·W_cᵀ,
// bias + loss gradient in place, dh += G·W_c, dW_c = Gᵀ·h, db_c = column sums of G,
// update W_c and b_c. Shared by the dense and bottleneck backends and group_shared's head.
//
// One path on the Context's device (ops of ops/dense.h, ops/loss.h,
// ops/optimizer.h): a CPU Context keeps host arrays and every matrix is a host view; a
// CUDA Context keeps device arrays and h, dh and the scores' out are DEVICE views. Weights
// fp32, bf16 (stored only in bf16: half the memory) or fp8 e4m3 with a scale per row (a
// quarter); updates rounded to nearest or stochastically; the weights' optimizer state
// fp32 or bf16 (bf16 weights only), the bias and its state fp32. On the GPU the GEMMs of
// bf16 and fp8 weights run in bf16 with fp32 accumulation, h and G rounded to bf16 for
// them (an fp8 chunk is first widened into bf16 in the dW_c workspace); on the CPU each
// chunk of W is widened to fp32 just before its sgemm (in the dW_c workspace, so neither
// adds a buffer). The same initial weights on both devices for the same seed. Every buffer goes
// through the ledger: weights, optimizer, workspace.
#include <cstdint>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/context.h"
#include "core/field_constraints.h"
#include "core/matrix.h"
#include "core/tensor_ref.h"
#include "layers/label_params.h"
#include "layers/output_layer.h"
#include "layers/weight_array.h"
#include "ops/loss.h"
#include "ops/optimizer.h"

namespace xmc {

class Comm;

// Per-op wall time of train_step, summed over chunks (CPU benchmarks; off by default; on
// a CUDA Context the marks time the launches, not the kernels).
struct DenseTimings {
  double forward = 0.0;          // logits GEMM + bias (both passes for softmax)
  double loss = 0.0;             // loss gradient in place
  double backward_input = 0.0;   // dh += G·W_c
  double backward_weight = 0.0;  // dW_c = Gᵀ·h, db_c
  double update = 0.0;           // optimizer step of W_c, b_c
};

// Weight storage of a dense block (Precision: layers/weight_array.h).
struct DensePrecision {
  Precision weights = Precision::fp32;
  bool stochastic_rounding = false;  // bf16 and fp8 only
  bool bf16() const { return weights == Precision::bf16; }
};
// The config keys `precision` and `stochastic_rounding` of the backends built on a
// DenseBlock (dense, bottleneck, group_shared); `doc` describes what the precision covers.
template <class V>
void visit_precision(V& v, Precision& precision, bool& stochastic_rounding, const char* doc,
                     const Choices& choices = Choices::of<Precision>()) {
  v.field("precision", precision, doc, choices);
  v.field("stochastic_rounding", stochastic_rounding,
          "Round weight updates stochastically (unbiased) instead of to nearest (precision bf16 "
          "or fp8)");
}
// The config keys `sparse_gradient` and `lazy_update` of the backends built on a DenseBlock
// (dense, bottleneck): DenseBlock::set_sparse_gradient's threshold and `lazy`.
template <class V>
void visit_sparse_gradient(V& v, double& sparse_gradient, bool& lazy_update) {
  v.field("sparse_gradient", sparse_gradient,
          "Unbiased gradient sparsification: each per-point entry of dLoss/dlogit below this "
          "magnitude becomes 0 or ±this value at random (probability |g|/value), so on the cpu "
          "the two backward products cost per non-zero instead of per label (the forward still "
          "scores every label); 0: exact. docs/benchmarks.md, \"Sparse gradients\"",
          Range{0.0, 1.0});
  v.field("lazy_update", lazy_update,
          "With sparse_gradient on the cpu: update only the label rows whose sparsified "
          "gradient has a non-zero (the sampled backends' lazy update: the other rows and their "
          "optimizer state wait, Adam's moments included) instead of every row at every step; "
          "fp32 weights and optimizer state. On cuda every row is updated. docs/benchmarks.md, "
          "\"Lazy updates\"");
}
// stochastic_rounding: bf16 and fp8 only (InputError otherwise).
DensePrecision dense_precision(Precision precision, bool stochastic_rounding);

class DenseBlock {
 public:
  // Labels [lo, lo+n) of the model; inputs of width d; workspace for batches up to
  // max_batch rows and chunks of up to chunk labels. W ~ uniform(±1/sqrt(d)) from seed.
  DenseBlock(Context& ctx, int64_t d, int64_t lo, int64_t n, int64_t max_batch, int64_t chunk,
             LossType loss, const OptimizerConfig& optim, uint64_t seed,
             DensePrecision precision = {});

  // targets: batch positives (host CSR, global ids). Overwrites dh [B×d] with dL/dh.
  StepStats train_step(const CsrMatrix& targets, ConstMatrix h, Matrix dh, const LrState& lr);
  // out [B×c] = scores of labels [lo, lo+c) (global lo within this block's range). bf16:
  // at most max_batch rows.
  void scores(ConstMatrix h, int64_t lo, Matrix out) const;
  // Exact top-k over the block's labels of every row of h, streamed (ops/topk.h)
  // in blocks of `block_rows` rows.
  TopK topk(ConstMatrix h, int k, int64_t block_rows) const;

  // Names "<prefix>weight" [n×d], "<prefix>bias" [n], then the optimizer state that exists
  // (weight_opt1, bias_opt1, weight_opt2, bias_opt2). Host arrays: on a CUDA Context after
  // sync_state(to_host) (bf16 weights as fp32).
  std::vector<TensorRef> state(const std::string& prefix);
  void sync_state(StateSync s);
  // Label-sharded run: the processes holding the other labels. Softmax then
  // normalises over every label: pass 1's per-row statistics are merged over them before
  // pass 2 (the loss and dL/dh of each process are its labels' share; the trainer sums
  // them). nullptr (the default): this block's labels are all there are.
  void set_comm(Comm* comm);
  // Unbiased gradient sparsification (ops::sparsify_gradient) of each chunk's dL/dz with
  // this per-point threshold (applied to G·B; 0: off, exact). On the CPU the two backward
  // products then run over G's non-zeros (grouped by column) instead of GEMMs; the
  // GPU keeps its GEMMs on the sparsified G. Allocates the CPU's sparse workspaces
  // (planned_bytes with sparse_gradient), after checking the block's planned bytes with
  // them against the memory budget (InputError). Threshold ≥ 0, finite.
  // lazy (CPU, with a threshold > 0): each chunk then updates only the rows of W and b whose
  // column of G has a non-zero (LabelParams::update_rows), the other rows and their state
  // are left as they are; InputError without a threshold, with bf16 weights or state, or
  // row-wise Adam. Ignored on a CUDA Context.
  void set_sparse_gradient(double threshold, bool lazy = false);
  // The random stream of that sparsification at an optimizer step (per seed and step; the
  // counter of entry (i, l) is i·(the model's labels) + l).
  static uint64_t sparse_stream(uint64_t seed, int64_t step) {
    return gpu::rounding_stream(seed ^ 0x5350415253454752ULL, static_cast<uint64_t>(step));
  }
  // Accumulate per-op times into *t (nullptr: off).
  void set_timings(DenseTimings* t) { timings_ = t; }
  int64_t analytic_bytes() const;  // planned_bytes of this block
  // The bytes of a block with these sizes, before it is built (layers/layer_bytes.h): W, b
  // and their state, the chunk workspaces, and on a CUDA Context (gpu) the bf16 copies of
  // G and h, softmax's statistics, the loss accumulator and the targets' row pointers. The
  // CPU constructor checks the total against the memory budget.
  // sparse_gradient: set_sparse_gradient's workspaces (CPU only).
  static LayerBytes planned_bytes(bool gpu, int64_t d, int64_t n, int64_t max_batch, int64_t chunk,
                                  LossType loss, const OptimizerConfig& optim,
                                  Precision precision = Precision::fp32,
                                  bool sparse_gradient = false);
  // The work of one step (layers/layer_bytes.h): the GEMMs, the loss pass over the logits,
  // the update of W, b and their state.
  static StepWork planned_step(int64_t d, int64_t n, int64_t batch, LossType loss,
                               const OptimizerConfig& optim, Precision precision = Precision::fp32,
                               bool sparse_gradient = false);
  int64_t chunk() const { return chunk_; }

 private:
  bool narrow() const { return p_.w.precision() != Precision::fp32; }
  // bf16 or fp8 weights on the GPU: bf16 GEMMs on h and G rounded. On the CPU they are
  // widened chunk by chunk and the GEMMs stay fp32.
  bool gpu_bf16() const { return narrow() && ctx_->on_gpu(); }
  // z [B×c] = h·W_cᵀ (no bias) for labels [row0, row0+c) of the block; bf16: h16_ must
  // hold h rounded (round_h). CPU bf16 / fp8: leaves W_c widened to fp32 in dw_; GPU fp8:
  // leaves W_c widened to bf16 at the start of dw_ (chunk16).
  void logits(ConstMatrix h, int64_t row0, Matrix z) const;
  // GPU: W_c's bf16 rows for labels [row0, row0+c): bf16 weights in place, fp8 weights as
  // logits() left them widened.
  gpu::ConstBf16Matrix chunk16(int64_t row0, int64_t c) const;
  void round_h(ConstMatrix h) const;
  bool sparse_cpu() const { return sparse_threshold_ > 0.0 && !ctx_->on_gpu(); }
  // check_memory_plan of this block's planned host bytes (with the sparse workspaces when
  // `sparse`): InputError naming what to change when over the budget.
  void check_host_budget(bool sparse) const;
  // CPU sparse backward of one chunk: dh += G·W_c (wc [c×d]) and dW_c = Gᵀ·h over the
  // non-zeros of G = z [B×c], into dw_. Returns the rows of dW_c written: c (every column of
  // the chunk, empty ones zero), or with lazy_ the non-empty columns only, their chunk
  // indices then in sparse_.cols[0, count) ascending.
  int64_t sparse_backward(ConstMatrix z, const float* wc, ConstMatrix h, Matrix dh);

  Context* ctx_;
  int64_t d_, lo_, n_, max_batch_, chunk_;
  LossType loss_;
  OptimizerConfig optim_;
  DensePrecision precision_;
  uint64_t seed_;
  LabelParams p_;                      // W [n×d], bias [n] and their optimizer state
  Buffer<float> z_;                    // [max_batch×chunk] logits / gradients
  mutable Buffer<float> dw_;           // [chunk×d] dW_c; first W_c widened (CPU bf16/fp8:
                                       // fp32; GPU fp8: bf16)
  Buffer<float> db_;                   // [chunk]
  Buffer<gpu::Bf16> g16_;              // GPU bf16: [max_batch×chunk] G rounded
  mutable Buffer<gpu::Bf16> h16_;      // GPU bf16: [max_batch×d] h rounded
  SoftmaxState smax_;
  LossTargets targets_;
  LossAccumulator acc_;
  DenseTimings* timings_ = nullptr;
  Comm* comm_ = nullptr;
  RowReductions reduce_;  // comm_'s, for softmax's statistics
  double sparse_threshold_ = 0.0;
  bool lazy_ = false;  // set_sparse_gradient's, CPU only
  // CPU sparse backward: a chunk's G by column (start, rows, col_values; cols = 0..chunk-1,
  // or with lazy_ the non-empty columns).
  struct SparseWork {
    Buffer<int64_t> start;
    Buffer<uint32_t> cols, rows;
    Buffer<float> col_values;
  } sparse_;
};

}  // namespace xmc
