#pragma once
// ShardSetLayer: the label shards of a label-sharded run side by side in one process, for
// evaluation and prediction from its checkpoint set (eval / predict --checkpoint, in one
// process or under mpirun with at most as many processes as shards). Part s is the
// backend's own layer over the labels ranges[s], built as the process that trained them
// built it and read from that process's checkpoint file — whatever the backend keeps per
// shard (a projection on every process, LSH tables, label groups) is used as trained.
// Top-k lists of the parts are merged (merge_topk: the ranking of one layer over all their
// labels, ties to the lower id). Not trainable; no full scores().
#include <cstdint>
#include <memory>
#include <vector>

#include "config/output_spec.h"
#include "dist/comm.h"
#include "layers/layer_init.h"
#include "layers/output_layer.h"

namespace xmc {

// Shards [first, first + ranges.size()) of a set of `total`, with their label ranges
// (consecutive: ranges[s].hi == ranges[s+1].lo).
struct ShardSelection {
  std::vector<LabelRange> ranges;
  int first = 0;
  int total = 1;
};

class ShardSetLayer final : public OutputLayer {
 public:
  // init's label range and shard are ignored (the layer covers [ranges.front().lo,
  // ranges.back().hi)).
  ShardSetLayer(const LayerInit& init, const OutputSpec& spec, const ShardSelection& set);

  size_t parts() const { return parts_.size(); }
  OutputLayer& part(size_t s) { return *parts_[s]; }

 private:
  StepStats train_step_impl(const Batch& batch, ConstMatrix h, Matrix dh,
                            const LrState& lr) override;
  void scores_impl(ConstMatrix h, int64_t lo, Matrix out) const override;
  TopK topk_impl(ConstMatrix h, int k) const override;
  // The parts' state has the same names in every part: read part by part (Model).
  std::vector<TensorRef> state_impl() override { return {}; }
  void sync_state_impl(StateSync s) override;
  int64_t analytic_bytes_impl() const override;

  std::vector<std::unique_ptr<OutputLayer>> parts_;
};

}  // namespace xmc
