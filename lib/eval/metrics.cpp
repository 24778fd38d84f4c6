#include "eval/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>

#include "core/error.h"

namespace xmc {

namespace {

// Per-point quantities, each [k], summed over points.
enum Stat : int {
  kP,          // (1/j)·hits
  kNdcg,       // DCG / I
  kPspNum,     // (1/j)·Σ hit·q
  kPspDen,     // (1/j)·Σ top q
  kPsndcgNum,  // PSDCG / I
  kPsndcgDen,  // ideal PSDCG / I
  kRecall,     // hits / |y|
  kNumStats
};

// Points per block. Blocks are fixed, so the summation order (within a block, then over
// blocks) does not depend on the number of threads.
constexpr int64_t kBlock = 1024;

using NamedMetric = std::pair<const char*, const std::vector<double>*>;  // name, values [k]

// The metrics in table order; PSP and PSnDCG only with propensities.
std::vector<NamedMetric> named_metrics(const MetricsResult& r) {
  std::vector<NamedMetric> out = {{"P", &r.p}, {"nDCG", &r.ndcg}};
  if (r.has_ps()) out.insert(out.end(), {{"PSP", &r.psp}, {"PSnDCG", &r.psndcg}});
  out.emplace_back("R", &r.recall);
  return out;
}

}  // namespace

MetricsResult compute_metrics(const TopK& pred, const CsrMatrix& truth,
                              const std::vector<double>& inv_prop, int k) {
  if (k < 1) throw_input("metrics: k must be at least 1, got {}", k);
  if (pred.k < k)
    throw_error("metrics: the top-k lists hold {} labels per point, fewer than k = {}", pred.k, k);
  if (pred.rows != truth.rows)
    throw_input("metrics: the predictions have {} points but the true labels {}", pred.rows,
                truth.rows);
  if (truth.rows == 0) throw_input("metrics: there are no points to evaluate (0 rows)");
  const bool ps = !inv_prop.empty();
  if (ps && static_cast<int64_t>(inv_prop.size()) != truth.cols)
    throw_input("metrics: {} propensities for {} labels; train and test label counts differ",
                inv_prop.size(), truth.cols);

  // Checked here because nothing may throw inside the parallel region below.
  if (ps && truth.nnz() > 0) {
    const uint32_t max_label = *std::max_element(truth.indices.begin(), truth.indices.end());
    if (max_label >= inv_prop.size())
      throw_input("metrics: true label {} is outside the {} labels that have propensities",
                  max_label, inv_prop.size());
  }

  // 1/log2(j+1) and its prefix sums I_j, j = 1..k.
  std::vector<double> disc(static_cast<size_t>(k)), idcg(static_cast<size_t>(k));
  for (int j = 0; j < k; ++j) {
    disc[static_cast<size_t>(j)] = 1.0 / std::log2(static_cast<double>(j) + 2.0);
    idcg[static_cast<size_t>(j)] =
        disc[static_cast<size_t>(j)] + (j ? idcg[static_cast<size_t>(j - 1)] : 0.0);
  }

  const int64_t n = truth.rows;
  const int64_t n_blocks = (n + kBlock - 1) / kBlock;
  const size_t stride = static_cast<size_t>(kNumStats) * static_cast<size_t>(k);
  std::vector<double> partial(static_cast<size_t>(n_blocks) * stride, 0.0);

#pragma omp parallel
  {
    std::vector<uint32_t> y;  // the point's true labels, sorted, unique
    std::vector<double> qy;   // their q, sorted descending (first min(k,|y|))
#pragma omp for schedule(dynamic, 1)
    for (int64_t blk = 0; blk < n_blocks; ++blk) {
      double* acc = partial.data() + static_cast<size_t>(blk) * stride;
      auto at = [&](Stat s, int j) -> double& { return acc[static_cast<size_t>(s) * k + j]; };
      const int64_t end = std::min(n, (blk + 1) * kBlock);
      for (int64_t i = blk * kBlock; i < end; ++i) {
        y.assign(truth.row_indices(i), truth.row_indices(i) + truth.row_nnz(i));
        std::sort(y.begin(), y.end());
        y.erase(std::unique(y.begin(), y.end()), y.end());
        if (y.empty()) continue;  // contributes 0 everywhere
        const int ny = static_cast<int>(std::min<size_t>(y.size(), static_cast<size_t>(k)));
        if (ps) {
          qy.clear();
          for (uint32_t l : y) qy.push_back(inv_prop[l]);
          std::partial_sort(qy.begin(), qy.begin() + ny, qy.end(), std::greater<>());
        }
        const uint32_t* p = pred.row_labels(i);
        const double inv_ny = 1.0 / static_cast<double>(y.size());
        double hits = 0, dcg = 0, ps_hits = 0, psdcg = 0, ideal_ps = 0, ideal_psdcg = 0;
        for (int j = 0; j < k; ++j) {
          const auto js = static_cast<size_t>(j);
          const bool hit = p[j] != TopK::kNoLabel && std::binary_search(y.begin(), y.end(), p[j]);
          const double inv_j = 1.0 / (j + 1.0);
          // I_j(y) = I_{min(j,|y|)}
          const double ideal = idcg[static_cast<size_t>(std::min(j, ny - 1))];
          if (hit) {
            hits += 1;
            dcg += disc[js];
          }
          at(kP, j) += hits * inv_j;
          at(kNdcg, j) += dcg / ideal;
          at(kRecall, j) += hits * inv_ny;
          if (ps) {
            if (hit) {
              ps_hits += inv_prop[p[j]];
              psdcg += inv_prop[p[j]] * disc[js];
            }
            if (j < ny) {
              ideal_ps += qy[js];
              ideal_psdcg += qy[js] * disc[js];
            }
            at(kPspNum, j) += ps_hits * inv_j;
            at(kPspDen, j) += ideal_ps * inv_j;
            at(kPsndcgNum, j) += psdcg / ideal;
            at(kPsndcgDen, j) += ideal_psdcg / ideal;
          }
        }
      }
    }
  }

  std::vector<double> total(stride, 0.0);
  for (int64_t blk = 0; blk < n_blocks; ++blk)
    for (size_t s = 0; s < stride; ++s) total[s] += partial[static_cast<size_t>(blk) * stride + s];
  auto tot = [&](Stat s, int j) { return total[static_cast<size_t>(s) * k + j]; };

  MetricsResult r;
  r.k = k;
  r.points = n;
  const double dn = static_cast<double>(n);
  for (int j = 0; j < k; ++j) {
    r.p.push_back(tot(kP, j) / dn);
    r.ndcg.push_back(tot(kNdcg, j) / dn);
    r.recall.push_back(tot(kRecall, j) / dn);
    if (ps) {
      // Ratio of means; the 1/N cancels. 0/0 (no point has a label) gives NaN.
      r.psp.push_back(tot(kPspNum, j) / tot(kPspDen, j));
      r.psndcg.push_back(tot(kPsndcgNum, j) / tot(kPsndcgDen, j));
    }
  }
  return r;
}

nlohmann::json MetricsResult::to_json() const {
  nlohmann::json j = nlohmann::json::object();  // keys sorted: the insertion order is not kept
  for (const auto& [name, values] : named_metrics(*this))
    for (int i = 0; i < k; ++i) j[fmt::format("{}@{}", name, i + 1)] = (*values)[i];
  j["points"] = points;
  return j;
}

std::string MetricsResult::table() const {
  std::string out = fmt::format("{:<8}", "(%)");
  for (int i = 0; i < k; ++i) out += fmt::format(" {:>7}", fmt::format("@{}", i + 1));
  out += '\n';
  auto row = [&](const char* name, const std::vector<double>& v) {
    out += fmt::format("{:<8}", name);
    for (double x : v) out += fmt::format(" {:>7.2f}", 100.0 * x);
    out += '\n';
  };
  for (const auto& [name, values] : named_metrics(*this)) row(name, *values);
  out += fmt::format("points: {}\n", points);
  return out;
}

}  // namespace xmc
