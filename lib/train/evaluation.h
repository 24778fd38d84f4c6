#pragma once
// Evaluation of a model on a dataset: encoder forward in batches, exact top-k streamed over
// label chunks, optional filter, metrics.
#include <cstdint>
#include <vector>

#include "data/dataset.h"
#include "eval/filter.h"
#include "eval/metrics.h"
#include "ops/topk.h"
#include "train/model.h"

namespace xmc {

struct EvalSettings {
  int k = 5;                      // metrics at 1..k, predictions of k labels
  int64_t batch_size = 1024;
  const FilterSet* filter = nullptr;
  std::vector<double> inv_prop;  // [L]; empty: no PS metrics
};

// Top-k predictions for every point of `data` (filtered when a filter is given).
TopK predict_dataset(Model& model, const Dataset& data, const EvalSettings& s);

struct EvalResult {
  MetricsResult metrics;
  double seconds = 0.0;
};
EvalResult evaluate_dataset(Model& model, const Dataset& data, const EvalSettings& s);

}  // namespace xmc
