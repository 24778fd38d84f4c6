#pragma once
// FaninBlock: the sparse part of the fan-in backends, held by fixed_fanin (one index set of
// F inputs per label; Schultheis & Babbar 2023) and by group_shared's tail (one set per
// group of G labels; HASTE) as dense holds a DenseBlock: index sets [sets×F] over the m
// inputs of the sparse part (uint32, no duplicates within a set), per-label weights [n×F]
// and biases [n] with their optimizer state (LabelParams), the optional ReLU projection
// d→m before it, input dropout on h, the chunk loop of a step and of the evaluation, and
// prune-and-regrow of the sets (dynamic sparse training): the schedule, the choice of the
// slots to prune (the k lowest scores over all sets, ties to the lower slot) and the
// regrowth of each set with inputs it does not use. Each backend draws its initial sets,
// scores its slots for rewiring (|w| per label, or the mean |w| over a group) and logs.
//
// Devices: the same code on both. Parameters, optimizer state and workspaces are Buffers
// on the Context's device and every op takes the Context (ops/fixed_fanin.h,
// ops/group_shared.h); on a CUDA Context h, dh and the scores are device views. Dropout
// masks and rewiring run on the host (rewiring on staged copies of the sets, weights and
// moments: a round trip on the GPU), so both devices make the same draws.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/field_constraints.h"
#include "core/launch_shape.h"
#include "core/resources.h"      // Stopwatch
#include "layers/dense_block.h"  // DensePrecision
#include "layers/label_params.h"
#include "layers/layer_init.h"
#include "layers/output_layer.h"
#include "layers/projection.h"
#include "model/dropout.h"
#include "ops/loss.h"

namespace xmc {

struct RewireConfig {
  int64_t interval = 1000;  // steps between rewirings (paper: ΔT = 1000)
  double fraction = 0.1;    // ρ, share of all slots pruned per rewiring (paper: 10%)
  double until = 0.66;      // stop rewiring after this fraction of the planned steps

  template <class V>
  void visit(V& v) {
    v.field("interval", interval, "Steps between prune-and-regrow rounds (0 = never)",
            Range{0, 1e9});
    v.field("fraction", fraction, "Fraction of all L·F connections pruned per round (smallest |w|)",
            Range{0.0, 1.0});
    v.field("until", until, "Rewire only during this fraction of the planned training steps",
            Range{0.0, 1.0});
  }
};

// What configures a FaninBlock. FixedFaninConfig and GroupSharedConfig derive from it and
// list these fields in their visit(), beside their own, under the keys and with the
// descriptions each backend documents (`projection` is fixed_fanin's `intermediate` and
// group_shared's `tail_projection`).
struct FaninConfig {
  int64_t fan_in = 64;     // F (paper: 32 or 64), at most launch::kMaxFanIn
  int64_t projection = 0;  // m: width of the ReLU layer before the sparse part (0: none, m = d)
  double dropout = 0.0;    // input dropout on h
  LossType loss = LossType::squared_hinge;  // squared_hinge or bce
  RewireConfig rewire;
  int64_t chunk_size = 8192;  // labels per block (rounded down to a multiple of the group)
};

// What the last rewiring did (tests, logs).
struct RewireStats {
  int64_t step = 0;
  int64_t pruned = 0;  // slots pruned and regrown
  double seconds = 0.0;
};

// Whether the schedule rewires after global step `step` of `total_steps`.
bool rewire_due(const RewireConfig& cfg, int64_t step, int64_t total_steps);
// How many of `slots` slots one rewiring prunes: round(fraction · slots).
int64_t rewire_count(const RewireConfig& cfg, int64_t slots);

// The k (1 <= k <= n) lowest of score[0..n) as a mask [n], ties to the lower index. The
// scores must be non-negative (their float bits then order like their values): a radix
// select over the bits, O(n). abs = true scores |score[i]| instead (no copy of |w|).
std::vector<char> lowest_slots(const float* score, int64_t n, int64_t k, bool abs = false);

// For each index set q of idx [sets×f] with slots marked in prune [sets×f]: new inputs in
// [0, m) for those slots (regrow_inputs, random stream (base, q)), then reset(q, j) for
// each of them (the backend zeroes the slot's weights and moments). Parallel over sets
// (reset is called for different sets from different threads). Returns the slots regrown.
int64_t regrow_sets(uint32_t* idx, int64_t sets, int64_t f, int64_t m,
                    const std::vector<char>& prune, uint64_t base,
                    const std::function<void(int64_t, int64_t)>& reset);

// Per-op wall time of a fan-in layer's train_step, accumulated (logged per epoch, then
// reset). fixed_fanin on the GPU fills the times only with gpu_timing (a synchronisation
// after each op), the counts always; group_shared's ops are queued on the GPU, so a
// phase's time there is the host's time until the next synchronisation (the loss
// read-back at the end of the chunk loop lands in `loss`).
struct FaninTimings {
  double head = 0.0;                   // group_shared: projection, dense head step, its backward
  double forward = 0.0;                // dropout, projection, transpose, sparse forward
  double loss = 0.0;                   // loss gradient in place
  double backward_input = 0.0;         // dL/du scatter of the nonzero gradients
  double backward_weight = 0.0;        // dW, db of the sparse part
  double update = 0.0;                 // optimizer steps of the sparse part
  double intermediate_backward = 0.0;  // ReLU, dP, dh, update of the ReLU projection
  double rewire = 0.0;
  int64_t zero_grads = 0;
  int64_t grads = 0;
  // fixed_fanin: (label, step) pairs whose whole gradient column was zero, of label_steps.
  int64_t skipped_labels = 0;
  int64_t label_steps = 0;
};

// Where a backend's sparse part sits in its layer and which ops train it.
struct FaninLayout {
  const char* name = "";           // the backend, for messages
  int64_t labels = 0;              // n: the labels of the sparse part (0: none, only dropout)
  int64_t group = 1;               // labels per index set
  bool group_ops = false;          // group_shared's ops (any group), else fixed_fanin's (group 1)
  int64_t first = 0;               // global row of label 0: the initial weights, the rounding keys
  uint64_t projection_stream = 0;  // the projection's initial draw: Rng::stream(seed, this)
  DensePrecision precision{};      // bf16 weights (CUDA, group_ops only), stochastic rounding
  // Per-op timing of train_step: with time_ops, charge each op's interval (after a
  // synchronisation with sync_ops).
  bool time_ops = true, sync_ops = false;
};

class FaninBlock {
 public:
  FaninBlock() = default;
  FaninBlock(const LayerInit& init, const FaninConfig& cfg, const FaninLayout& layout);

  int64_t fan_in() const { return f_; }
  int64_t input_width() const { return m_; }  // m: the projection's width, or d
  int64_t chunk() const { return chunk_; }
  const FaninLayout& layout() const { return layout_; }
  uint64_t seed() const { return seed_; }
  Context& context() const { return *ctx_; }
  FaninTimings& timings() { return timings_; }
  const FaninTimings& timings() const { return timings_; }
  const RewireStats& last_rewire() const { return last_rewire_; }
  // True when the schedule rewires after `step` completed steps of total_steps.
  bool rewire_due(int64_t step, int64_t total_steps) const {
    return xmc::rewire_due(cfg_.rewire, step, total_steps);
  }

  // The backend's access for its initial draws and rearrangements (stage, then commit).
  Buffer<uint32_t>& indices() { return idx_; }
  LabelParams& params() { return p_; }
  // The initial weights: init_uniform_rows from seed, rows numbered from layout.first.
  void init_weights(uint64_t seed);
  // The step's targets (global positions), filled or assigned by the backend.
  LossTargets& targets() { return targets_; }

  // x = dropout(h) [B×d], the mask drawn on the host from (seed ^ stream, step); h itself
  // without dropout. dropout_grad(dh) then multiplies dh by the same mask.
  ConstMatrix dropout(ConstMatrix h, uint64_t stream, int64_t step);
  void dropout_grad(Matrix dh) const;
  // One step of the sparse part on x [B×d]: u = relu(x·Pᵀ + c) (or x), ut = uᵀ, then per
  // chunk of labels the logits with the bias, the loss gradient in place against
  // targets() at positions target0.., du = dL/du += G·W (the weights before this step),
  // dW, db and the update; then dh = dL/dx + beta·dh through the projection (without one,
  // du is dh itself, zeroed first when beta is 0). Returns the loss sum, starting at
  // `loss`, and the zero counts (a synchronisation on the GPU).
  gpu::LossAccum train_step(ConstMatrix x, Matrix dh, float beta, const LrState& lr,
                            int64_t target0, double loss);

  // The evaluation input of h [rows×d]: ut = uᵀ [m×rows] (bf16 with bf16 weights).
  struct Input {
    Buffer<float> ut;
    Buffer<gpu::Bf16> ut16;
  };
  Input eval_input(ConstMatrix h) const;
  // z [rows×c] = the logits (bias included) of labels [r0, r0+c), r0 on a set boundary.
  void forward(int64_t r0, const Input& in, Matrix z) const {
    forward(r0, in.ut.data(), in.ut16.data(), z);
  }

  // One rewiring at `step`: k = rewire_count of the sets·F slots; when k > 0 and some
  // input is still unused (F < m), on host copies of the sets, the weights and their
  // moments, prune(k, w) marks the slots to prune [sets×F], regrow_sets regrows them from
  // `base` and each regrown slot's weights and moments restart at zero in every row of its
  // set. Into last_rewire(); the time into timings().rewire too.
  RewireStats rewire(int64_t step, uint64_t base,
                     const std::function<std::vector<char>(int64_t k, const float* w)>& prune);
  // The trainer hook: rewire(t.step) when the schedule is due (over t.total_steps, or the
  // planned steps), logged as "<name>: rewired P of <sets·F> <what>".
  void rewire_when_due(const TrainerView& t, const char* what,
                       const std::function<RewireStats(int64_t)>& rewire);

  // "output/indices" [sets×F], the LabelParams names, then the projection's under
  // `projection`; host arrays (sync_state(to_host) first on the GPU).
  void append_state(std::vector<TensorRef>& out, const std::string& projection);
  void sync_state(StateSync s);
  int64_t analytic_bytes() const;  // planned_bytes of this block
  // The bytes of a block over inputs of width d for batches of up to max_batch rows, before
  // it is built (layers/layer_bytes.h): dropout's mask and input, the index sets, the
  // weights, biases and their state, the projection, the evaluation-free workspaces.
  static LayerBytes planned_bytes(bool gpu, int64_t d, int64_t max_batch,
                                  const OptimizerConfig& optim, const FaninConfig& cfg,
                                  const FaninLayout& layout);
  // The work of one training step: dropout, the projection, the multiply-adds of the three
  // sparse ops (fixed fan-in or group-shared), the transpose, the loss pass, the update.
  static StepWork planned_step(int64_t d, int64_t batch, const OptimizerConfig& optim,
                               const FaninConfig& cfg, const FaninLayout& layout);

 private:
  void forward(int64_t r0, const float* ut, const gpu::Bf16* ut16, Matrix z) const;
  void mark(Stopwatch& sw, double FaninTimings::*field);

  Context* ctx_ = nullptr;
  FaninConfig cfg_;
  FaninLayout layout_;
  int64_t d_ = 0, m_ = 0, f_ = 0, n_ = 0, group_ = 1, sets_ = 0, chunk_ = 0, max_batch_ = 0;
  int64_t total_steps_ = 0;
  OptimizerConfig optim_;
  uint64_t seed_ = 0;
  Buffer<uint32_t> idx_;          // [sets×F]
  LabelParams p_;                 // W [n×F] (fp32, or bf16 on the GPU), bias, their state
  Projection proj_;               // u = relu(x·Pᵀ + c) [B×m], or none
  DropoutMask mask_;              // [B×d] (dropout only)
  const float* drawn_ = nullptr;  // the step's mask, or none
  Buffer<float> xd_;              // workspace [B×d] (dropout only)
  Buffer<float> ut_;              // workspace [m×B] (fp32 weights)
  Buffer<gpu::Bf16> ut16_;        // workspace [m×B] (bf16 weights)
  Buffer<float> z_;               // workspace [B×chunk]
  Buffer<float> dw_, db_;         // workspace [chunk×F], [chunk]
  LossTargets targets_;           // the batch's positives (group_shared: at internal positions)
  LossAccumulator acc_;           // the step's loss and zero counts
  RewireStats last_rewire_;
  FaninTimings timings_;
};

}  // namespace xmc
