#pragma once
// Backend `group_shared` (HASTE): labels sorted by training frequency; the top
// `head_fraction` (rounded to a multiple of G) form a dense head (DenseBlock) over its own
// optional linear projection of h; the tail is arranged into groups of G labels (grouping:
// frequency | random | semantic, lib/grouping) that share one fan-in set of F inputs,
// indices [K×F] uint32 (no duplicates within a set), per-label weights [T×F] and biases
// [T]; an optional ReLU projection of h before the tail (as fixed_fanin's intermediate).
//
// Internal label order: position i < H is a head label, i >= H a tail label, tail label r
// = i − H belongs to group r / G. label_order [L] maps positions to original ids and
// label_position [L] back; both are saved, so topk returns original ids after a reload.
//
// Semantic grouping needs the training data, which a layer first sees in the trainer's
// hooks: it runs at the first on_step (after step 1), from the centroids of the layer
// inputs h = embed_train() of every training point, and re-initialises the tail's weights
// and moments in the new arrangement (the biases move with their labels; the head is not
// touched). A checkpoint records that it happened.
//
// Rewiring (HASTE Alg. 3): every `interval` steps until fraction `until` of the run, slot
// (k, j) scores the mean over group k of |w[r, j]|; the globally smallest fraction ρ of the
// K·F slots is pruned and each regrown with a random input the group does not use yet
// (nor just pruned), its weights zeroed for the whole group and their moments reset.
//
// Devices: on a CUDA Context (device_views(): h, dh and the scores' out are DEVICE views,
// output_layer.h) the head is an AnyDenseBlock on the GPU, the projections keep their
// parameters on the device, and the tail is a GroupSharedTailCuda
// (layers/group_shared_cuda.h); the same initial values as on the CPU (drawn on the host,
// uploaded). Labels, TopK, the label order and the dropout masks (drawn on the host from
// the CPU's stream) stay on the host. Rare work — rewiring, semantic grouping, checkpoints
// — runs the CPU code on host copies of the tail (download, change, upload).
// precision: fp32 | bf16 (GPU only) for the head block and the tail weights; the
// projections stay fp32.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/field_constraints.h"

#include "core/cuda_context.h"
#include "core/memory_ledger.h"
#include "grouping/label_grouping.h"
#include "layers/dense_any.h"
#include "layers/group_shared_cuda.h"
#include "layers/host_staging.h"
#include "layers/layer_init.h"
#include "layers/output_layer.h"
#include "layers/rewire.h"
#include "model/loss.h"

namespace xmc {

struct GroupSharedConfig {
  int64_t group_size = 16;    // G
  int64_t fan_in = 64;        // F
  double head_fraction = 0.05;
  int64_t head_dim = 0;       // linear projection d→head_dim before the head (0 = none)
  int64_t tail_projection = 0;  // ReLU layer d→m before the tail (0 = none, m = d)
  std::string grouping = "frequency";
  double beta = 4.0;          // semantic: about T/(β·G) k-means buckets
  int64_t kmeans_iters = 10;
  std::string loss = "bce";
  RewireConfig rewire;
  double dropout = 0.0;       // input dropout on h
  int64_t chunk_size = 8192;  // labels per block (rounded down to a multiple of G)
  std::string precision = "fp32";
  bool stochastic_rounding = false;

  template <class V>
  void visit(V& v) {
    v.field("group_size", group_size, "Labels per group sharing one fan-in set (G)", Range{1, 4096});
    v.field("fan_in", fan_in, "Inputs read by every tail label (F, shared within a group)",
            Range{1, 65536});
    v.field("head_fraction", head_fraction,
            "Share of the labels, most frequent first, in the dense head (rounded to a multiple of G)",
            Range{0.0, 1.0});
    v.field("head_dim", head_dim, "Width of the head's linear projection of h (0 = none, use h)",
            Range{0, 65536});
    v.field("tail_projection", tail_projection,
            "Width of the ReLU layer before the sparse tail (0 = none)", Range{0, 65536});
    v.field("grouping", grouping, "How tail labels are arranged into groups",
            Choices{"frequency", "random", "semantic"});
    v.field("beta", beta, "Semantic grouping: about (tail labels)/(beta·G) k-means buckets",
            Range{1.0, 1e6});
    v.field("kmeans_iters", kmeans_iters, "Semantic grouping: spherical k-means rounds",
            Range{1, 1000});
    v.field("loss", loss, "Loss over all labels (squared_hinge skips zero gradients)",
            Choices{"bce", "squared_hinge"});
    v.field("rewire", rewire, "Prune-and-regrow of the groups' shared fan-in sets (HASTE Alg. 3)");
    v.field("dropout", dropout, "Dropout probability on the layer's input h",
            Range::half_open(0.0, 1.0));
    v.field("chunk_size", chunk_size, "Labels processed per block", Range{1, int64_t{1} << 24});
    v.field("precision", precision,
            "Weight storage of the head block and the tail: fp32, or bf16 (device cuda only; the "
            "projections stay fp32)",
            Choices{"fp32", "bf16"});
    v.field("stochastic_rounding", stochastic_rounding,
            "Round bf16 weight updates stochastically instead of to nearest (precision bf16)");
  }
};

// Per-op wall time of train_step, accumulated (logged per epoch).
struct GroupSharedTimings {
  double head = 0.0;             // projection, dense head step, projection backward
  double forward = 0.0;          // dropout, tail projection, transpose, tail forward
  double loss = 0.0;
  double backward_input = 0.0;
  double backward_weight = 0.0;
  double update = 0.0;
  double projection_backward = 0.0;
  double rewire = 0.0;
  double tail_gpu = 0.0;  // GPU: the whole tail step (its kernels are not timed one by one)
  int64_t zero_grads = 0;
  int64_t grads = 0;
};

// A projection u = act(x·Pᵀ + c) of the layer input, P [out×in] and c [out] in one array
// [out×in + out] (zero bias at start, P ~ uniform(±1/sqrt(in))), with its optimizer state,
// gradient and batch workspaces u, du [B×out] in the ledger. Empty (out = 0) = identity.
// On a CUDA Context all of it lives on the device (the same initial P, drawn on the host;
// plus a [B×out] workspace for the ReLU's gradient) and every matrix argument below is a
// DEVICE view.
class GroupSharedProjection {
 public:
  GroupSharedProjection() = default;
  GroupSharedProjection(Context& ctx, int64_t in, int64_t out, bool relu,
                        const OptimizerConfig& optim, int64_t max_batch, uint64_t seed);

  bool active() const { return out_ > 0; }
  int64_t out_dim() const { return out_; }
  // u [rows×out] of x [rows×in] (evaluation; u is the caller's).
  void apply(ConstMatrix x, Matrix u) const;
  // Training forward into the workspace u [B×out].
  Matrix forward(ConstMatrix x);
  // The workspace du [B×out] for the caller to fill.
  Matrix grad_workspace(int64_t rows) { return {cuda_ ? du_dev_.data() : du_.data(), rows, out_}; }
  // With du = dL/du filled: through the ReLU, dh = du·P + beta·dh (P before the step),
  // then one optimizer step of P and c.
  void backward_update(ConstMatrix x, Matrix dh, float beta, const LrState& lr);
  // On the GPU: host copies (sync_state(to_host) first).
  void append_state(std::vector<TensorRef>& out, const std::string& prefix);
  void sync_state(StateSync s);  // no-op on the CPU (OutputLayer::sync_state)
  int64_t bytes() const;  // analytic size of every buffer above

 private:
  int64_t in_ = 0, out_ = 0, max_batch_ = 0;
  bool relu_ = false;
  OptimizerConfig optim_;
  gpu::CudaContext* cuda_ = nullptr;    // set on a CUDA Context
  HostBuffer<float> p_, s1_, s2_, dp_;  // [out×in + out] each (state empty when unused)
  HostBuffer<float> u_, du_;            // [B×out]
  gpu::DeviceBuffer<float> p_dev_, s1_dev_, s2_dev_, dp_dev_;  // GPU twins of the above
  gpu::DeviceBuffer<float> u_dev_, du_dev_, dz_dev_;           // dz: ReLU gradient (relu only)
  HostStaging<BufferCopies> staging_;  // GPU: checkpoint host copies (parameters, states)
};

class GroupSharedLayer final : public OutputLayer {
 public:
  GroupSharedLayer(const LayerInit& init, const GroupSharedConfig& cfg);

  int64_t group_size() const { return group_; }
  int64_t fan_in() const { return fan_in_; }
  int64_t head_labels() const { return head_; }
  int64_t tail_labels() const { return num_labels() - head_; }
  int64_t num_groups() const { return groups_; }
  // Width m of the tail's input: the tail projection, or d.
  int64_t tail_input_dim() const { return m_; }
  // Original label id at internal position i, and the inverse.
  std::span<const uint32_t> label_order() const { return order_.span(); }
  std::span<const uint32_t> label_position() const { return pos_.span(); }
  bool semantic_done() const { return grouped_[0] != 0; }

  // Semantic grouping from the layer inputs x [N×d] of the training points and their
  // labels [N×L] (what on_step does once with embed_train()). Logs time and cohesion.
  void regroup_semantic(ConstMatrix x, const CsrMatrix& point_labels);
  // Prune and regrow now, as the schedule does at `step` (deterministic given seed, step).
  RewireStats rewire(int64_t step);
  const RewireStats& last_rewire() const { return last_rewire_; }
  bool rewire_due(int64_t step, int64_t total_steps) const;
  const GroupSharedTimings& timings() const { return timings_; }

 private:
  StepStats train_step_impl(const Batch& batch, ConstMatrix h, Matrix dh,
                            const LrState& lr) override;
  void scores_impl(ConstMatrix h, int64_t lo, Matrix out) const override;
  TopK topk_impl(ConstMatrix h, int k) const override;
  void on_step_impl(const TrainerView& t) override;
  void on_epoch_impl(const TrainerView& t) override;
  std::vector<TensorRef> state_impl() override;
  void sync_state_impl(StateSync s) override;
  void init_bias_impl(std::vector<TensorRef>& refs, std::span<const float> bias) override;
  int64_t analytic_bytes_impl() const override;

  // Inputs of the evaluation path for h [rows×d]: the head's (projected) input and the
  // tail's transposed input ut [m×rows] (on the GPU: set into the device tail, rows <=
  // max_batch; the buffers are device temporaries).
  struct EvalInputs {
    std::vector<float> head_buf, tail_buf, ut_buf;
    gpu::DeviceBuffer<float> head_dev, tail_dev;
    ConstMatrix head_in, ut;
  };
  EvalInputs eval_inputs(ConstMatrix h) const;
  // Scores of internal positions [lo, lo+out.cols) (lo and the head/tail boundary on
  // group boundaries of the tail).
  void internal_scores(const EvalInputs& in, int64_t lo, Matrix out) const;
  TopK topk_gpu(ConstMatrix h, int k) const;
  void scores_gpu(ConstMatrix h, Matrix out) const;
  // Positions -> original ids in place; equal scores then rank by original id.
  void to_original_ids(TopK& top) const;
  void build_targets(const Batch& batch, int64_t rows);
  // One index set per group into idx [K×F]; the initial tail weights into w [T×F] and
  // zero moments s1, s2 [T×F] (nullable).
  void draw_tail_indices(uint32_t* idx) const;
  void init_tail_weights(float* w, float* s1, float* s2) const;
  // Alg. 3's prune and regrow of k slots on host arrays; returns the slots pruned.
  int64_t rewire_arrays(int64_t step, int64_t k, uint32_t* idx, float* w, float* s1,
                        float* s2) const;
  void update_tail(int64_t r0, int64_t n, const LrState& lr);

  MemoryLedger* ledger_;
  gpu::CudaContext* gpu_ = nullptr;  // set on a CUDA Context
  int64_t group_, fan_in_, head_, groups_, m_, max_batch_, chunk_;
  double dropout_;
  LossType loss_;
  GroupingType grouping_;
  double beta_;
  int kmeans_iters_;
  RewireConfig rewire_cfg_;
  OptimizerConfig optim_;
  uint64_t seed_;
  int64_t total_steps_;
  HostBuffer<uint32_t> order_, pos_;    // [L] each
  HostBuffer<uint32_t> grouped_;        // [1]: semantic grouping done (checkpointed)
  std::optional<AnyDenseBlock> head_block_;
  GroupSharedProjection head_proj_;             // d→head_dim (linear), or none
  HostBuffer<uint32_t> idx_;                    // [K×F] (CPU)
  HostBuffer<float> w_, b_, w_s1_, w_s2_, b_s1_, b_s2_;  // [T×F], [T] and optimizer state (CPU)
  std::unique_ptr<GroupSharedTailCuda> tail_gpu_;        // the same on the GPU
  HostStaging<GroupSharedTailCuda::HostState> tail_stage_;  // GPU: checkpoint host copies
  GroupSharedProjection tail_proj_;             // d→m (ReLU), or none
  HostBuffer<float> xd_, mask_;                 // workspace [B×d] (dropout only; GPU: mask_ only)
  gpu::DeviceBuffer<float> xd_dev_, mask_dev_;  // GPU: [B×d] each (dropout only)
  HostBuffer<float> ut_;                        // workspace [m×B] (CPU)
  HostBuffer<float> z_;                         // workspace [B×chunk] (CPU)
  HostBuffer<float> dw_, db_;                   // workspace [chunk×F], [chunk] (CPU)
  CsrMatrix targets_;                           // the batch's positives at internal positions
  RewireStats last_rewire_;
  GroupSharedTimings timings_;
};

}  // namespace xmc
