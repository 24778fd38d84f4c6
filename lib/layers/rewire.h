#pragma once
// Prune and regrow of fixed fan-in index sets (dynamic sparse training), shared by
// fixed_fanin (one index set of F inputs per label; Schultheis & Babbar 2023) and
// group_shared (one per group of labels; HASTE Alg. 3): the schedule, the choice of the
// slots to prune (the k lowest scores over all sets, ties to the lower slot) and the
// regrowth of each set with inputs it does not use. Each backend scores its slots (|w|
// per label, or the mean |w| over a group) and resets what a regrown slot held.
#include <cstdint>
#include <functional>
#include <vector>

#include "config/field_constraints.h"
#include "core/rng.h"

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
// One rewiring at `step` of a layer with `slots` slots: k = rewire_count; when k > 0 and
// the layer can rewire at all (`possible`: some input is still unused), prune_regrow(k)
// does it and returns the slots pruned. The stats carry the step and the time taken.
RewireStats run_rewire(const RewireConfig& cfg, int64_t step, int64_t slots, bool possible,
                       const std::function<int64_t(int64_t k)>& prune_regrow);

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

// The regrowth of one set: for each slot j in `slots` of the index set idx [f], whose
// pruned inputs were `old` (same order), draw a new input uniformly in [0, m) that the set
// does not use — neither a kept input nor one regrown before it — and, when at least
// slots.size() inputs remain outside the set, none of the ones just pruned (so every
// regrown slot really changes). Needs f < m.
void regrow_inputs(uint32_t* idx, int64_t f, const std::vector<int64_t>& slots,
                   const std::vector<uint32_t>& old, int64_t m, Rng& rng);

}  // namespace xmc
