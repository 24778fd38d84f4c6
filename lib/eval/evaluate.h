#pragma once
// One call from a predictions matrix to metrics: what `xmctrain eval --predictions` and
// the trainer's per-epoch evaluation use.
#include <cstdint>
#include <vector>

#include "core/matrix.h"
#include "eval/filter.h"
#include "eval/metrics.h"

namespace xmc {

// predictions [N×L]: label:score rows (any order within a row; the best k are taken,
// ties -> lower label id). truth [N×L]: true labels. train_label_freq [L] and n_train
// give the inverse propensities with (a, b); an empty train_label_freq skips PSP/PSnDCG.
// filter (may be null): (point, label) pairs dropped from the predictions before the
// top k are taken. InputError when the predictions' rows or label count differ from the
// truth's, when train_label_freq has the wrong length, or when a filter pair lies
// outside [0, N)×[0, L) — each message gives both numbers.
MetricsResult evaluate_predictions(const CsrMatrix& predictions, const CsrMatrix& truth,
                                   const std::vector<int64_t>& train_label_freq, int64_t n_train,
                                   double a, double b, int k, const FilterSet* filter);

}  // namespace xmc
