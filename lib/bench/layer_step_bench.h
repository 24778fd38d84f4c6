#pragma once
// The measured training step of an output layer at a shape: what `xmctrain plan` adds to
// the sampled backends' modelled step for the host work its counts leave out (candidate
// draws, LSH lookups, grouping by label, the candidate loss; StepWork::host_candidates).
#include <cstdint>

#include "config/output_spec.h"
#include "layers/layer_bytes.h"

namespace xmc::bench {

// Seconds of one train_step of the layer `spec` builds at shape s on a CPU Context of
// `threads` threads (0: the default): random batches of s.batch points (ids in [0,
// s.num_train), ⌈labels_per_point⌉ distinct uniform positives each, h of norm ~1), after
// two warm-up steps, the mean over at least 3 steps and 0.3 s. A layer with a stale
// hard-negative table (anns_sampled) gets one of uniform labels through its checkpoint
// state first, so that its steps draw hard negatives as after a refresh.
double measure_layer_step_seconds(const LayerShape& s, const OutputSpec& spec, int threads = 0);

}  // namespace xmc::bench
