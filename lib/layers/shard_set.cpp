#include "layers/shard_set.h"

#include "core/error.h"
#include "layers/registry.h"

namespace xmc {

namespace {
int64_t first_label(const std::vector<LabelRange>& ranges) {
  XMC_CHECK(!ranges.empty(), "a shard set without shards");
  return ranges.front().lo;
}
}  // namespace

ShardSetLayer::ShardSetLayer(const LayerInit& init, const OutputSpec& spec,
                             const ShardSelection& set)
    : OutputLayer(init, first_label(set.ranges), set.ranges.back().hi) {
  const std::vector<LabelRange>& ranges = set.ranges;
  XMC_CHECK(set.first >= 0 && set.first + static_cast<int64_t>(ranges.size()) <= set.total,
            "shards [{}, +{}) of {}", set.first, ranges.size(), set.total);
  int64_t held = 0;
  for (size_t s = 0; s < ranges.size(); ++s) {
    XMC_CHECK(s == 0 || ranges[s].lo == ranges[s - 1].hi, "shard ranges [{}, {}) then [{}, {})",
              ranges[s - 1].lo, ranges[s - 1].hi, ranges[s].lo, ranges[s].hi);
    LayerInit p = init;
    p.label_lo = ranges[s].lo;
    p.label_hi = ranges[s].hi;
    p.shard = set.first + static_cast<int>(s);
    p.shards = set.total;
    p.comm = nullptr;
    p.inference_only = true;
    parts_.push_back(create_output_layer(p, spec));
    held += parts_.back()->shard_labels();
  }
  set_held_labels(held);
  set_device_views(parts_.front()->device_views());
}

StepStats ShardSetLayer::train_step_impl(const Batch&, ConstMatrix, Matrix, const LrState&) {
  throw_error("the shards of a checkpoint set are loaded for evaluation only");
}

void ShardSetLayer::scores_impl(ConstMatrix, int64_t, Matrix) const {
  // Nothing evaluates a checkpoint set through full scores (eval and predict use top-k).
  throw_error("the shards of a checkpoint set give top-k lists, not full scores");
}

TopK ShardSetLayer::topk_impl(ConstMatrix h, int k) const {
  TopK merged = parts_.front()->topk(h, k);
  for (size_t s = 1; s < parts_.size(); ++s) merged = merge_topk(merged, parts_[s]->topk(h, k));
  return merged;
}

void ShardSetLayer::sync_state_impl(StateSync s) {
  for (auto& p : parts_) p->sync_state(s);
}

int64_t ShardSetLayer::analytic_bytes_impl() const {
  int64_t bytes = 0;
  for (const auto& p : parts_) bytes += p->analytic_bytes();
  return bytes;
}

}  // namespace xmc
