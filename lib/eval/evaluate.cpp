#include "eval/evaluate.h"

#include "core/error.h"
#include "eval/propensity.h"
#include "ops/topk.h"

namespace xmc {

MetricsResult evaluate_predictions(const CsrMatrix& predictions, const CsrMatrix& truth,
                                   const std::vector<int64_t>& train_label_freq, int64_t n_train,
                                   double a, double b, int k, const FilterSet* filter) {
  if (k < 1) throw_input("eval: k must be at least 1, got {}", k);
  if (predictions.rows != truth.rows)
    throw_input("eval: the predictions have {} rows but the true labels have {} rows",
                predictions.rows, truth.rows);
  if (predictions.cols != truth.cols)
    throw_input("eval: the predictions have {} labels but the true labels have {} labels",
                predictions.cols, truth.cols);
  if (!train_label_freq.empty() && static_cast<int64_t>(train_label_freq.size()) != truth.cols)
    throw_input("eval: the training labels have {} labels but the test labels have {} labels",
                train_label_freq.size(), truth.cols);
  const bool filtering = filter != nullptr && !filter->empty();
  if (filtering) {
    if (filter->max_point() >= truth.rows)
      throw_input("eval: the filter names point {} but there are only {} test points",
                  filter->max_point(), truth.rows);
    if (filter->max_label() >= truth.cols)
      throw_input("eval: the filter names label {} but there are only {} labels",
                  filter->max_label(), truth.cols);
  }

  // Filtered labels leave gaps that later predictions fill, so take enough candidates.
  const int k_wide = k + (filtering ? filter->max_per_point() : 0);
  TopK top = topk_from_csr(predictions, k_wide);
  if (filtering) apply_filter(top, *filter);

  std::vector<double> q;
  if (!train_label_freq.empty()) q = inverse_propensity(train_label_freq, n_train, a, b);
  return compute_metrics(top, truth, q, k);
}

}  // namespace xmc
