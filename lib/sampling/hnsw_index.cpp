#include "sampling/hnsw_index.h"

#include <hnswlib/hnswlib.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>

#include "core/error.h"
#include "core/rng.h"

namespace xmc {

struct HnswIndex::Impl {
  hnswlib::InnerProductSpace space;
  hnswlib::HierarchicalNSW<float> graph;
  Impl(int64_t dim, int64_t n, const HnswParams& p, uint64_t seed)
      : space(static_cast<size_t>(dim)),
        graph(&space, static_cast<size_t>(n), static_cast<size_t>(p.m),
              static_cast<size_t>(p.ef_construction), static_cast<size_t>(seed)) {}
};

HnswIndex::HnswIndex(ConstMatrix vectors, const HnswParams& params, uint64_t seed,
                     MemoryLedger* ledger)
    : size_(vectors.rows), dim_(vectors.cols) {
  XMC_CHECK(vectors.rows > 0 && vectors.cols > 0, "hnsw index over [{}×{}] vectors",
            vectors.rows, vectors.cols);
  XMC_CHECK(params.m >= 2 && params.ef_construction >= 1 && params.ef >= 1,
            "hnsw parameters m={} ef_construction={} ef={}", params.m, params.ef_construction,
            params.ef);
  impl_ = std::make_unique<Impl>(dim_, size_, params, seed);
  impl_->graph.setEf(static_cast<size_t>(params.ef));

  // Level 0 holds every node (2·m links, data, label); upper levels hold a fraction
  // 1/m of the nodes each with m links, ~1/(m-1) of the nodes in total.
  const int64_t level0 = size_ * static_cast<int64_t>(impl_->graph.size_data_per_element_);
  const int64_t upper = size_ * (params.m * 4 + 4) / (params.m - 1) + size_ * 8;
  bytes_ = level0 + upper;
  if (ledger) entry_ = LedgerEntry(*ledger, MemTag::index, bytes_);

  // Level of row r: floor(-ln(U)·mult) as hnswlib draws it, but from a stream of our own
  // per row, so the levels do not depend on the insertion order (hnswlib takes a level
  // > 0 as given; for level 0 its own draw is discarded).
  const double mult = impl_->graph.mult_;
  auto level = [&](int64_t r) {
    Rng rng = Rng::stream(seed, static_cast<uint64_t>(r));
    const double u = std::max(rng.uniform(), 1e-300);
    return static_cast<int>(-std::log(u) * mult);
  };
  // The first point alone sets the entry point; the rest go in from every thread.
  // Worker exceptions are captured and rethrown on this thread.
  impl_->graph.addPoint(vectors.row(0), 0, level(0));
  std::exception_ptr error;
  std::mutex error_mu;
#pragma omp parallel for schedule(dynamic, 64) if (!params.deterministic)
  for (int64_t r = 1; r < size_; ++r) {
    try {
      impl_->graph.addPoint(vectors.row(r), static_cast<size_t>(r), level(r));
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu);
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

HnswIndex::~HnswIndex() = default;

void HnswIndex::search(ConstMatrix queries, int k, uint32_t* labels, float* scores) const {
  XMC_CHECK(queries.cols == dim_, "hnsw search: queries have {} columns, index has {}",
            queries.cols, dim_);
  XMC_CHECK(k >= 1, "hnsw search: k={} must be >= 1", k);
  // searchKnn explores max(ef, k) candidates, so ef is a floor on the search effort.
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  std::exception_ptr error;
  std::mutex error_mu;
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t q = 0; q < queries.rows; ++q) {
    uint32_t* lab = labels + q * k;
    float* sc = scores ? scores + q * k : nullptr;
    try {
      auto top = impl_->graph.searchKnn(queries.row(q), static_cast<size_t>(k));
      // The queue's top is the farthest (distance = 1 - inner product): fill from the back.
      int n = static_cast<int>(top.size());
      for (int j = n; j < k; ++j) {
        lab[j] = std::numeric_limits<uint32_t>::max();
        if (sc) sc[j] = kNegInf;
      }
      for (int j = n - 1; j >= 0; --j) {
        lab[j] = static_cast<uint32_t>(top.top().second);
        if (sc) sc[j] = 1.0f - top.top().first;
        top.pop();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu);
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace xmc
