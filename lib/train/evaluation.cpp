#include "train/evaluation.h"

#include <algorithm>

#include "core/resources.h"
#include "data/batcher.h"

namespace xmc {

TopK predict_dataset(Model& model, const Dataset& data, const EvalSettings& s) {
  const int extra = s.filter ? s.filter->max_per_point() : 0;
  const int kk = s.k + extra;
  TopK all = TopK::padded(data.num_points(), kk);
  Batcher in_order(data, s.batch_size, 0, /*shuffle=*/false);
  in_order.start_epoch(0);
  Batch batch;
  for (int64_t r0 = 0; in_order.next(batch); r0 += batch.size()) {
    TopK part = model.predict(batch, kk);
    // Label-sharded: every rank's lists merged on rank 0; the other ranks keep nothing.
    if (model.comm() != nullptr) {
      part = gather_topk(*model.comm(), part);
      if (!model.comm()->is_root()) continue;
    }
    std::copy(part.labels.begin(), part.labels.end(), all.labels.begin() + r0 * kk);
    std::copy(part.scores.begin(), part.scores.end(), all.scores.begin() + r0 * kk);
  }
  if (model.comm() != nullptr && !model.comm()->is_root()) return {};
  if (s.filter) apply_filter(all, *s.filter);
  return all;
}

EvalResult evaluate_dataset(Model& model, const Dataset& data, const EvalSettings& s) {
  Stopwatch sw;
  TopK pred = predict_dataset(model, data, s);
  EvalResult r;
  if (model.comm() != nullptr && !model.comm()->is_root()) return r;  // rank 0 scores
  r.metrics = compute_metrics(pred, data.labels, s.inv_prop, s.k);
  r.seconds = sw.seconds();
  return r;
}

}  // namespace xmc
