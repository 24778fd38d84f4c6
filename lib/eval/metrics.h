#pragma once
// XMC metrics at k = 1..K from top-k lists and the true labels, computed as pyxclib's
// xc_metrics does (so numbers compare with published tables):
//
//   y = true label set of a point, p_1..p_k its top-k predictions, [·] = 1 if true,
//   I_k(y) = Σ_{j≤min(k,|y|)} 1/log2(j+1), q = inverse propensities, q_(1) ≥ q_(2) ≥ ...
//   the q of the point's true labels sorted descending, N = number of points.
//
//   P@k      = mean_i (1/k)·Σ_{j≤k} [p_j∈y]
//   nDCG@k   = mean_i DCG@k / I_k(y),            DCG@k = Σ_{j≤k} [p_j∈y]/log2(j+1)
//   PSP@k    = mean_i (1/k)·Σ_{j≤k} [p_j∈y]·q_{p_j}  /  mean_i (1/k)·Σ_{j≤min(k,|y|)} q_(j)
//   PSnDCG@k = mean_i PSDCG@k / I_k(y)  /  mean_i (Σ_{j≤min(k,|y|)} q_(j)/log2(j+1)) / I_k(y)
//              with PSDCG@k = Σ_{j≤k} [p_j∈y]·q_{p_j}/log2(j+1)   (pyxclib's psndcg: both
//              the numerator and the ideal are divided by the point's plain I_k(y))
//   R@k      = mean_i |{p_1..p_k} ∩ y| / |y|
//
// Every mean runs over ALL points: a point with no true label contributes 0 to every
// numerator and denominator (pyxclib: P@k and R@k count it as 0, nDCG's term is 0/I).
// Drop such points before calling to get the "valid points only" numbers.
// Padding entries (TopK::kNoLabel) are never relevant. A stored entry of `truth` is a
// relevant label whatever its value.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/matrix.h"
#include "ops/topk.h"

namespace xmc {

struct MetricsResult {
  int k = 0;
  // [k] each; index j-1 holds the metric @j. psp and psndcg are empty when no
  // propensities were given.
  std::vector<double> p, ndcg, psp, psndcg, recall;
  int64_t points = 0;

  bool has_ps() const { return !psp.empty(); }
  // {"P@1": .., "nDCG@1": .., "PSP@1": .., "PSnDCG@1": .., "R@1": .., ..., "points": N};
  // values are fractions in [0, 1]; PS keys only when has_ps().
  nlohmann::json to_json() const;
  // Human-readable table: one row per metric, one column per k, in percent.
  std::string table() const;
};

// pred: top-k lists [N×pred.k], best first, pred.k >= k. truth [N×L] CSR (pattern).
// inv_prop: q [L], or empty to skip PSP/PSnDCG. Parallel over points (OpenMP); the
// result is bit-identical for any thread count (fixed blocks, summed in order).
// InputError when the row counts or the propensity length do not match.
MetricsResult compute_metrics(const TopK& pred, const CsrMatrix& truth,
                              const std::vector<double>& inv_prop, int k);

}  // namespace xmc
