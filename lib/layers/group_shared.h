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
// Label-sharded (mpirun, docs/distributed.md): every process computes the same
// arrangement and holds its part of it (GroupSharedSplit: a slice of the head, whole
// groups of the tail — not a contiguous range of label ids, so shard_labels() is its own
// count), each array drawn as the one-process layer draws those rows and groups; the
// projections and dropout masks are the same on every process, the projections' gradients
// summed over them. Rewiring prunes each process's own smallest fraction, and semantic
// grouping arranges each process's own tail labels (both per shard, as fixed_fanin's).
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
// Devices: the same code on both. Parameters, optimizer state and workspaces are Buffers
// (core/buffer.h) on the Context's device and every op takes the Context (ops/): on a
// CUDA Context (device_views(): h, dh and the scores' out are DEVICE views,
// output_layer.h) the arrays live on the GPU, with the same initial values (drawn on the
// host). Labels, TopK, the label order and the dropout masks (drawn on the host) stay on
// the host. Rare work — rewiring, semantic grouping, checkpoints — runs on host copies
// (Buffer::stage / commit: no copy on the CPU). The logits include the bias from the
// forward op on both devices; the loss op adds none. The tail, its projection, the
// dropout and the rewiring are a FaninBlock (layers/fanin_block.h), as fixed_fanin's.
// precision: fp32 | bf16 (GPU only) for the head block and the tail weights (bf16 only,
// no fp32 master copy; the tail's input is rounded to bf16 for the tensor-core kernels);
// the projections, biases, gradients and optimizer state stay fp32.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/field_constraints.h"
#include "core/memory_ledger.h"
#include "core/rng.h"
#include "grouping/label_grouping.h"
#include "layers/dense_block.h"
#include "layers/fanin_block.h"
#include "layers/layer_init.h"
#include "layers/output_layer.h"
#include "layers/projection.h"

namespace xmc {

// The tail's F, its ReLU projection d→m (tail_projection), dropout, loss (bce by default),
// rewiring and chunk (rounded down to a multiple of G) are the FaninConfig's.
struct GroupSharedConfig : FaninConfig {
  int64_t group_size = 16;  // G
  double head_fraction = 0.05;
  int64_t head_dim = 0;  // linear projection d→head_dim before the head (0 = none)
  GroupingType grouping = GroupingType::frequency;
  double beta = 4.0;          // semantic: about T/(β·G) k-means buckets
  int64_t kmeans_iters = 10;
  Precision precision = Precision::fp32;
  bool stochastic_rounding = false;

  GroupSharedConfig() { loss = LossType::bce; }

  template <class V>
  void visit(V& v) {
    v.field("group_size", group_size, "Labels per group sharing one fan-in set (G)", Range{1, 4096});
    v.field("fan_in", fan_in, "Inputs read by every tail label (F, shared within a group)",
            Range{1, launch::kMaxFanIn});
    v.field("head_fraction", head_fraction,
            "Share of the labels, most frequent first, in the dense head (rounded to a multiple of G)",
            Range{0.0, 1.0});
    v.field("head_dim", head_dim, "Width of the head's linear projection of h (0 = none, use h)",
            Range{0, 65536});
    v.field("tail_projection", projection,
            "Width of the ReLU layer before the sparse tail (0 = none)", Range{0, 65536});
    v.field("grouping", grouping, "How tail labels are arranged into groups");
    v.field("beta", beta, "Semantic grouping: about (tail labels)/(beta·G) k-means buckets",
            Range{1.0, 1e6});
    v.field("kmeans_iters", kmeans_iters, "Semantic grouping: spherical k-means rounds",
            Range{1, 1000});
    v.field("loss", loss, "Loss over all labels (squared_hinge skips zero gradients)",
            Choices{LossType::bce, LossType::squared_hinge});
    v.field("rewire", rewire, "Prune-and-regrow of the groups' shared fan-in sets (HASTE Alg. 3)");
    v.field("dropout", dropout, "Dropout probability on the layer's input h",
            Range::half_open(0.0, 1.0));
    v.field("chunk_size", chunk_size, "Labels processed per block", Range{1, int64_t{1} << 24});
    visit_precision(
        v, precision, stochastic_rounding,
        "Weight storage of the head block and the tail: fp32, or bf16 (device cuda only "
        "when there is a tail; the projections stay fp32). fp8 is dense and bottleneck's only",
        Choices{Precision::fp32, Precision::bf16});
  }
};

// The labels one process holds in a label-sharded run: its slice of the head positions
// [head0, head0 + head) (whole groups of G) and the tail groups [group0, group0 + groups)
// (tail labels `tail`) of the one-process arrangement; all of them in one process.
// GroupSharedLayer's constructor refuses (InputError) a part that would leave a process
// without a head or a tail that the layer has (the projections' collectives need every
// process).
struct GroupSharedSplit {
  int64_t head_total = 0;  // H of the whole layer
  int64_t head0 = 0, head = 0;
  int64_t group0 = 0, groups = 0, tail = 0;
};

class GroupSharedLayer final : public OutputLayer {
 public:
  GroupSharedLayer(const LayerInit& init, const GroupSharedConfig& cfg);
  // analytic_bytes() of a layer with this config and shape, before it is built
  // (layers/layer_bytes.h): label maps, the head block and its projection, the tail.
  static LayerBytes planned_bytes(const LayerShape& shape, const GroupSharedConfig& cfg);
  static StepWork planned_step(const LayerShape& shape, const GroupSharedConfig& cfg);

  int64_t group_size() const { return group_; }
  int64_t head_labels() const { return head_; }
  int64_t tail_labels() const { return split_.tail; }
  int64_t num_groups() const { return groups_; }
  // The tail: F, its input width m (the tail projection, or d), rewiring.
  const FaninBlock& fanin() const { return block_; }
  // Original label id at position i of the whole arrangement [L], and the inverse.
  std::span<const uint32_t> label_order() const { return order_.span(); }
  std::span<const uint32_t> label_position() const { return pos_.span(); }
  bool semantic_done() const { return grouped_[0] != 0; }

  // Semantic grouping from the layer inputs x [N×d] of the training points and their
  // labels [N×L] (what on_step does once with embed_train()). Logs time and cohesion.
  void regroup_semantic(ConstMatrix x, const CsrMatrix& point_labels);
  // Prune and regrow now, as the schedule does at `step` (deterministic given seed, step).
  RewireStats rewire(int64_t step);

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
  // tail's (FaninBlock::eval_input), workspace Buffers.
  struct EvalInputs {
    Buffer<float> head_buf;
    ConstMatrix head_in;
    FaninBlock::Input tail;
  };
  EvalInputs eval_inputs(ConstMatrix h) const;
  // Scores of internal positions [lo, lo+out.cols) (lo and the head/tail boundary on
  // group boundaries of the tail).
  void internal_scores(const EvalInputs& in, int64_t lo, Matrix out) const;
  // Positions -> original ids in place; equal scores then rank by original id.
  void to_original_ids(TopK& top) const;
  void build_targets(const Batch& batch, int64_t rows);
  // One index set per group into idx [K×F].
  void draw_tail_indices(uint32_t* idx) const;

  // This layer's position i (head 0..head_-1, then its tail) in the whole arrangement.
  int64_t position(int64_t i) const {
    return i < head_ ? split_.head0 + i : tail_position(i - head_);
  }
  // Tail label r of this layer in the whole arrangement.
  int64_t tail_position(int64_t r) const {
    return split_.head_total + split_.group0 * group_ + r;
  }
  // The seed of what a shard does on its own (rewiring, semantic grouping): s itself in one
  // process.
  uint64_t shard_seed(uint64_t s) const { return Rng::shard_seed(s, split_.group0); }

  Context* ctx_;
  uint64_t seed_;
  int64_t group_;
  GroupSharedSplit split_;
  int64_t head_, groups_;
  GroupingType grouping_;
  double beta_;
  int kmeans_iters_;
  GroupSharedConfig cfg_;
  HostBuffer<uint32_t> order_, pos_;    // [L] each
  HostBuffer<uint32_t> grouped_;        // [1]: semantic grouping done (checkpointed)
  std::optional<DenseBlock> head_block_;
  Projection head_proj_;  // d→head_dim (linear), or none
  FaninBlock block_;      // the tail, its ReLU projection d→m, dropout, rewiring
};

}  // namespace xmc
