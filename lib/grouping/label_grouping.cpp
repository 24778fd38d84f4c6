#include "grouping/label_grouping.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"
#include "grouping/spherical_kmeans.h"

namespace xmc {

std::vector<uint32_t> frequency_order(std::span<const int64_t> freq) {
  std::vector<uint32_t> order(freq.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return freq[a] > freq[b]; });
  return order;
}

int64_t head_label_count(int64_t num_labels, double head_fraction, int64_t group) {
  XMC_CHECK(num_labels >= 0 && group >= 1 && head_fraction >= 0.0 && head_fraction <= 1.0,
            "head split: L={} G={} fraction={}", num_labels, group, head_fraction);
  const double groups = head_fraction * static_cast<double>(num_labels) / static_cast<double>(group);
  return std::min<int64_t>(num_labels, group * std::llround(groups));
}

std::vector<uint32_t> inverse_order(std::span<const uint32_t> order) {
  std::vector<uint32_t> pos(order.size());
  for (size_t i = 0; i < order.size(); ++i) pos[order[i]] = static_cast<uint32_t>(i);
  return pos;
}

DenseMatrix label_centroids(ConstMatrix x, const CsrMatrix& point_labels,
                            std::span<const uint32_t> labels) {
  XMC_CHECK(x.rows == point_labels.rows, "label centroids: {} feature rows for {} label rows",
            x.rows, point_labels.rows);
  const int64_t n = static_cast<int64_t>(labels.size()), d = x.cols;
  // Points of each requested label, in point order (a CSC of the requested columns).
  std::vector<int64_t> slot(static_cast<size_t>(point_labels.cols), -1);
  for (int64_t i = 0; i < n; ++i) slot[labels[static_cast<size_t>(i)]] = i;
  std::vector<int64_t> offset(static_cast<size_t>(n) + 1, 0);
  for (uint32_t l : point_labels.indices)
    if (slot[l] >= 0) ++offset[static_cast<size_t>(slot[l]) + 1];
  for (int64_t i = 0; i < n; ++i) offset[static_cast<size_t>(i) + 1] += offset[static_cast<size_t>(i)];
  std::vector<int64_t> points(static_cast<size_t>(offset.back()));
  std::vector<int64_t> fill(offset.begin(), offset.end() - 1);
  for (int64_t p = 0; p < point_labels.rows; ++p)
    for (int64_t e = point_labels.indptr[p]; e < point_labels.indptr[p + 1]; ++e) {
      const int64_t s = slot[point_labels.indices[static_cast<size_t>(e)]];
      if (s >= 0) points[static_cast<size_t>(fill[static_cast<size_t>(s)]++)] = p;
    }
  DenseMatrix c(n, d);
#pragma omp parallel for schedule(dynamic, 64)
  for (int64_t i = 0; i < n; ++i) {
    float* ci = c.values.data() + i * d;
    for (int64_t e = offset[static_cast<size_t>(i)]; e < offset[static_cast<size_t>(i) + 1]; ++e) {
      const float* xr = x.row(points[static_cast<size_t>(e)]);
      for (int64_t j = 0; j < d; ++j) ci[j] += xr[j];
    }
    const double norm = std::sqrt(dot_double(ci, ci, d));
    if (norm > 0.0)
      for (int64_t j = 0; j < d; ++j) ci[j] = static_cast<float>(ci[j] / norm);
  }
  return c;
}

std::vector<int64_t> semantic_arrangement(ConstMatrix centroids, const SemanticGroupingParams& p) {
  const int64_t n = centroids.rows, d = centroids.cols, g = p.group;
  XMC_CHECK(g >= 1 && p.beta > 0.0, "semantic grouping: G={} beta={}", g, p.beta);
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(n));
  if (n == 0) return out;
  const int64_t buckets = std::max<int64_t>(
      1, std::llround(static_cast<double>(n) / (p.beta * static_cast<double>(g))));
  const std::vector<int32_t> assign =
      two_level_spherical_kmeans(centroids, buckets, p.kmeans_iters, p.seed);
  const int64_t used = static_cast<int64_t>(*std::max_element(assign.begin(), assign.end())) + 1;
  std::vector<std::vector<int64_t>> members(static_cast<size_t>(used));
  for (int64_t i = 0; i < n; ++i) members[static_cast<size_t>(assign[static_cast<size_t>(i)])].push_back(i);

  Rng rng = Rng::stream(p.seed, 0x5e3a'0001ULL);
  int64_t seed_row = -1;  // seed of the open group
  int64_t open = 0;       // members of the open group already in `out`
  std::vector<std::pair<double, int64_t>> sims;
  for (auto& rem : members) {
    while (!rem.empty()) {
      if (open == 0) {
        const auto s = static_cast<size_t>(rng.below(rem.size()));
        seed_row = rem[s];
        rem.erase(rem.begin() + static_cast<std::ptrdiff_t>(s));
        out.push_back(seed_row);
        open = 1;
      }
      // The G − open nearest remaining labels of this bucket to the seed (ties: lower row).
      const auto take = std::min<size_t>(static_cast<size_t>(g - open), rem.size());
      if (take > 0) {
        sims.clear();
        const float* sv = centroids.row(seed_row);
        for (int64_t r : rem) sims.emplace_back(-dot_double(sv, centroids.row(r), d), r);
        std::partial_sort(sims.begin(), sims.begin() + static_cast<std::ptrdiff_t>(take), sims.end());
        std::vector<int64_t> chosen;
        for (size_t t = 0; t < take; ++t) chosen.push_back(sims[t].second);
        std::sort(chosen.begin(), chosen.end());
        for (int64_t r : chosen) out.push_back(r);
        open += static_cast<int64_t>(take);
        std::erase_if(rem, [&](int64_t r) { return std::binary_search(chosen.begin(), chosen.end(), r); });
      }
      if (open == g) open = 0;
    }
  }
  XMC_CHECK(static_cast<int64_t>(out.size()) == n, "semantic grouping placed {} of {} labels",
            out.size(), n);
  return out;
}

double group_cohesion(ConstMatrix centroids, std::span<const int64_t> arrangement, int64_t group) {
  const int64_t n = static_cast<int64_t>(arrangement.size()), d = centroids.cols;
  XMC_CHECK(group >= 1 && n == centroids.rows, "cohesion: {} of {} rows, G={}", n, centroids.rows,
            group);
  if (n == 0) return 0.0;
  const int64_t groups = (n + group - 1) / group;
  double total = 0.0;
#pragma omp parallel reduction(+ : total)
  {
    std::vector<double> sum(static_cast<size_t>(d));
#pragma omp for schedule(static)
    for (int64_t k = 0; k < groups; ++k) {
      const int64_t i0 = k * group, i1 = std::min(n, i0 + group);
      std::fill(sum.begin(), sum.end(), 0.0);
      for (int64_t i = i0; i < i1; ++i) {
        const float* r = centroids.row(arrangement[static_cast<size_t>(i)]);
        for (int64_t j = 0; j < d; ++j) sum[static_cast<size_t>(j)] += r[j];
      }
      double norm = 0.0;
      for (double v : sum) norm += v * v;
      norm = std::sqrt(norm);
      if (norm <= 0.0) continue;
      for (int64_t i = i0; i < i1; ++i) {
        const float* r = centroids.row(arrangement[static_cast<size_t>(i)]);
        double dot = 0.0, rr = 0.0;
        for (int64_t j = 0; j < d; ++j) {
          dot += r[j] * sum[static_cast<size_t>(j)];
          rr += static_cast<double>(r[j]) * r[j];
        }
        if (rr > 0.0) total += dot / (norm * std::sqrt(rr));
      }
    }
  }
  return total / static_cast<double>(n);
}

}  // namespace xmc
