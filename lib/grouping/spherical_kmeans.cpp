#include "grouping/spherical_kmeans.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"
#include "ops/dense.h"

namespace xmc {

namespace {

// Rows of x listed per cluster (ascending row order within a cluster): CSR-like offsets.
struct KmMembers {
  std::vector<int64_t> offset;  // [k+1]
  std::vector<int64_t> rows;    // [n]
};

KmMembers km_members(const std::vector<int32_t>& assign, int64_t k) {
  KmMembers m;
  m.offset.assign(static_cast<size_t>(k) + 1, 0);
  for (int32_t a : assign) ++m.offset[static_cast<size_t>(a) + 1];
  for (int64_t c = 0; c < k; ++c) m.offset[static_cast<size_t>(c) + 1] += m.offset[static_cast<size_t>(c)];
  m.rows.resize(assign.size());
  std::vector<int64_t> fill(m.offset.begin(), m.offset.end() - 1);
  for (size_t i = 0; i < assign.size(); ++i)
    m.rows[static_cast<size_t>(fill[static_cast<size_t>(assign[i])]++)] = static_cast<int64_t>(i);
  return m;
}

}  // namespace

KMeansResult spherical_kmeans(ConstMatrix x, int64_t k, int iters, uint64_t seed) {
  const int64_t n = x.rows, d = x.cols;
  XMC_CHECK(n >= 1 && d >= 1 && k >= 1 && iters >= 0, "spherical k-means: n={} D={} k={} iters={}",
            n, d, k, iters);
  k = std::min(k, n);
  KMeansResult res;
  res.centres = DenseMatrix(k, d);
  res.assign.assign(static_cast<size_t>(n), 0);
  // Initial centres by k-means++ seeding on the cosine distance 1 − x·c: the first row
  // uniform, each next one with probability proportional to its distance from the nearest
  // centre so far (uniform when every row is covered), so that a tight cluster rarely
  // gets two centres.
  {
    Rng rng(seed);
    std::vector<double> dist(static_cast<size_t>(n), 1.0), cum(dist.size());
    int64_t row = static_cast<int64_t>(rng.below(static_cast<uint64_t>(n)));
    for (int64_t c = 0; c < k; ++c) {
      if (c > 0) {
        std::partial_sum(dist.begin(), dist.end(), cum.begin());
        const double total = cum.back();
        if (total <= 0.0) {
          row = static_cast<int64_t>(rng.below(static_cast<uint64_t>(n)));
        } else {  // the first row whose running sum passes r (the last when none does)
          const double r = rng.uniform() * total;
          row = std::min<int64_t>(n - 1, std::upper_bound(cum.begin(), cum.end(), r) - cum.begin());
        }
      }
      const float* xr = x.row(row);
      std::copy(xr, xr + d, res.centres.values.begin() + c * d);
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) {
        const double dot = dot_double(x.row(i), xr, d);
        dist[static_cast<size_t>(i)] = std::min(dist[static_cast<size_t>(i)], std::max(0.0, 1.0 - dot));
      }
    }
  }
  // Rows per assignment block: the block's score matrix stays around 16 MiB.
  const int64_t block = std::max<int64_t>(1, std::min<int64_t>(n, (int64_t{1} << 22) / k));
  std::vector<float> scores(static_cast<size_t>(block * k));
  std::vector<float> best(static_cast<size_t>(n));
  const int rounds = std::max(iters, 1);
  for (int it = 0; it < rounds; ++it) {
    int64_t moved = 0;
    for (int64_t r0 = 0; r0 < n; r0 += block) {
      const int64_t rn = std::min(block, n - r0);
      Matrix s(scores.data(), rn, k);
      ops::gemm_nt(x.rows_range(r0, rn), res.centres.view(), s);
#pragma omp parallel for schedule(static) reduction(+ : moved)
      for (int64_t i = 0; i < rn; ++i) {
        const float* si = s.row(i);
        int64_t arg = 0;
        for (int64_t c = 1; c < k; ++c)
          if (si[c] > si[arg]) arg = c;
        auto& a = res.assign[static_cast<size_t>(r0 + i)];
        moved += (it == 0 || a != static_cast<int32_t>(arg)) ? 1 : 0;
        a = static_cast<int32_t>(arg);
        best[static_cast<size_t>(r0 + i)] = si[arg];
      }
    }
    if (moved == 0 || it + 1 == rounds) break;  // the centres of the final assignment are not needed
    // New centres: normalised sums in row order (parallel over clusters).
    const KmMembers mem = km_members(res.assign, k);
    std::vector<int64_t> empty;
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t c = 0; c < k; ++c) {
      float* cc = res.centres.values.data() + c * d;
      const int64_t lo = mem.offset[static_cast<size_t>(c)], hi = mem.offset[static_cast<size_t>(c) + 1];
      if (lo == hi) continue;  // empty: refilled below
      std::fill(cc, cc + d, 0.0f);
      for (int64_t p = lo; p < hi; ++p) {
        const float* xr = x.row(mem.rows[static_cast<size_t>(p)]);
        for (int64_t j = 0; j < d; ++j) cc[j] += xr[j];
      }
      l2_normalise(cc, d);
    }
    for (int64_t c = 0; c < k; ++c)
      if (mem.offset[static_cast<size_t>(c)] == mem.offset[static_cast<size_t>(c) + 1]) empty.push_back(c);
    if (!empty.empty()) {
      // Rows worst served by their centres (ties: lower row) seed the empty clusters; a row
      // that an already chosen seed serves better than its own centre is skipped, so that
      // two new centres do not split one tight cluster.
      std::vector<int64_t> order(static_cast<size_t>(n));
      std::iota(order.begin(), order.end(), int64_t{0});
      std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return std::make_pair(best[static_cast<size_t>(a)], a) < std::make_pair(best[static_cast<size_t>(b)], b);
      });
      std::vector<int64_t> seeds;
      for (size_t o = 0; o < order.size() && seeds.size() < empty.size(); ++o) {
        const int64_t row = order[o];
        const float* xr = x.row(row);
        bool covered = false;
        for (int64_t s : seeds) {
          const float* xs = x.row(s);
          float dot = 0.0f;
          for (int64_t j = 0; j < d; ++j) dot += xr[j] * xs[j];
          covered = covered || dot >= best[static_cast<size_t>(row)];
        }
        if (covered) continue;
        seeds.push_back(row);
        std::copy(xr, xr + d, res.centres.values.begin() + empty[seeds.size() - 1] * d);
      }
    }
  }
  return res;
}

std::vector<int32_t> two_level_spherical_kmeans(ConstMatrix x, int64_t k, int iters,
                                                uint64_t seed) {
  const int64_t n = x.rows, d = x.cols;
  k = std::clamp<int64_t>(k, 1, n);
  if (k <= 64) return spherical_kmeans(x, k, iters, seed).assign;
  const auto top = static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(k))));
  const KMeansResult first = spherical_kmeans(x, top, iters, seed);
  const KmMembers mem = km_members(first.assign, top);
  std::vector<int32_t> out(static_cast<size_t>(n), 0);
  int32_t next = 0;
  for (int64_t c = 0; c < top; ++c) {
    const int64_t lo = mem.offset[static_cast<size_t>(c)], hi = mem.offset[static_cast<size_t>(c) + 1];
    const int64_t size = hi - lo;
    if (size == 0) continue;
    const int64_t kc = std::clamp<int64_t>(
        std::llround(static_cast<double>(k) * static_cast<double>(size) / static_cast<double>(n)),
        1, size);
    DenseMatrix sub(size, d);
    for (int64_t p = lo; p < hi; ++p) {
      const float* xr = x.row(mem.rows[static_cast<size_t>(p)]);
      std::copy(xr, xr + d, sub.values.begin() + (p - lo) * d);
    }
    const KMeansResult second =
        spherical_kmeans(sub.view(), kc, iters, Rng::stream(seed, static_cast<uint64_t>(c) + 1).next());
    // Renumber the sub-clusters actually used, in order of first use.
    std::vector<int32_t> id(static_cast<size_t>(kc), -1);
    for (int64_t p = lo; p < hi; ++p) {
      int32_t& s = id[static_cast<size_t>(second.assign[static_cast<size_t>(p - lo)])];
      if (s < 0) s = next++;
      out[static_cast<size_t>(mem.rows[static_cast<size_t>(p)])] = s;
    }
  }
  return out;
}

}  // namespace xmc
