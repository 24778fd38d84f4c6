#pragma once
// Prune and regrow of fixed fan-in index sets (dynamic sparse training), shared by
// fixed_fanin (one index set of F inputs per label; Schultheis & Babbar 2023) and
// group_shared (one per group of labels; HASTE Alg. 3): the schedule, the choice of the
// slots to prune (the k lowest scores over all sets, ties to the lower slot) and the
// regrowth of each set with inputs it does not use. Each backend scores its slots (|w|
// per label, or the mean |w| over a group) and resets what a regrown slot held.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/field_constraints.h"
#include "core/rng.h"
#include "layers/label_params.h"
#include "layers/layer_init.h"
#include "layers/output_layer.h"
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
// phase's time there is the host's time until the next synchronisation (the tail's loss
// read-back at the end of its chunk loop lands in `update`).
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

// What fixed_fanin and group_shared's tail share: index sets of F of the m inputs of the
// sparse part, per-label weights and biases with their optimizer state (p_), input dropout
// on h, the chunk loop's workspaces and the rewiring schedule (each backend's rewire()
// scores its own slots and resets what a regrown slot held).
class FaninLayer : public OutputLayer {
 public:
  int64_t fan_in() const { return fan_in_; }
  // Prune and regrow now, as the schedule does at `step` (deterministic given seed, step).
  virtual RewireStats rewire(int64_t step) = 0;
  const RewireStats& last_rewire() const { return last_rewire_; }
  // True when the schedule rewires after `step` completed steps of total_steps.
  bool rewire_due(int64_t step, int64_t total_steps) const {
    return xmc::rewire_due(rewire_cfg_, step, total_steps);
  }

 protected:
  // m: the width of the sparse part's input (0: the layer's input, d wide).
  FaninLayer(const LayerInit& init, int64_t fan_in, int64_t m, double dropout,
             LossType loss, const RewireConfig& rewire);
  // With dropout its mask [B×d] (drawn on the host on both devices) and x [B×d]; with
  // `chunks` the transposed input ut [m×B] (bf16 when the weights are), z [B×chunk], dw
  // [chunk×F], db [chunk], the targets and the loss accumulator, for chunks of chunk_.
  void allocate_workspace(bool chunks);
  // x = dropout(h) [B×d], the mask drawn from stream (seed_ ^ stream, step) and returned
  // in *mask; without dropout h itself (*mask null).
  ConstMatrix apply_dropout(ConstMatrix h, uint64_t stream, int64_t step, const float** mask);
  // One rewiring at `step` of the layer's `sets` index sets idx_ [sets×F], set q shared by
  // the weight rows [q·group, (q+1)·group) of p_ (the last set's cut at p_.rows): k =
  // rewire_count of the sets·F slots; when k > 0 and some input is still unused (F < m),
  // on host copies of the indices, the weights and their moments (on the GPU a round
  // trip), prune(k, w) marks the slots to prune [sets×F], regrow_sets regrows them from
  // `base` and each regrown slot's weights and moments restart at zero in every row of its
  // set. The stats (step, slots pruned, time) go into last_rewire_, the time is added to
  // timings_.rewire too.
  RewireStats rewire_on_host(
      int64_t step, int64_t sets, int64_t group, uint64_t base,
      const std::function<std::vector<char>(int64_t k, const float* w)>& prune);
  // The trainer hook's rewiring: rewire(t.step) when the schedule is due (over
  // t.total_steps, or the planned steps), logged as "<name>: rewired P of `slots` <what>".
  void rewire_when_due(const TrainerView& t, const char* name, int64_t slots, const char* what);

  Context* ctx_;
  int64_t fan_in_, m_, max_batch_, chunk_ = 0;
  double dropout_;
  LossType loss_;
  RewireConfig rewire_cfg_;
  OptimizerConfig optim_;
  uint64_t seed_;
  int64_t total_steps_;
  Buffer<uint32_t> idx_;    // [sets×F]
  LabelParams p_;           // W [labels×F] (fp32, or bf16 on the GPU), bias, their state
  DropoutMask mask_;        // [B×d] (dropout only)
  Buffer<float> xd_;        // workspace [B×d] (dropout only)
  Buffer<float> ut_;        // workspace [m×B] (fp32 weights)
  Buffer<gpu::Bf16> ut16_;  // workspace [m×B] (bf16 weights)
  Buffer<float> z_;         // workspace [B×chunk]
  Buffer<float> dw_, db_;   // workspace [chunk×F], [chunk]
  LossTargets targets_;     // the batch's positives (group_shared: at internal positions)
  LossAccumulator acc_;     // the step's loss and zero counts
  RewireStats last_rewire_;
  FaninTimings timings_;
};

}  // namespace xmc
