#pragma once
// HnswIndex: an HNSW graph (hnswlib) in inner-product space over the rows of a matrix —
// for `anns_sampled`, the classifier vectors [w_l | b_l], queried with [h | 1] so the
// nearest rows are the labels with the highest scores. hnswlib is included only by
// hnsw_index.cpp (its Debian 0.6.2 headers define non-inline symbols), hence the pimpl.
#include <cstdint>
#include <memory>

#include "core/matrix.h"
#include "core/memory_ledger.h"

namespace xmc {

struct HnswParams {
  int64_t m = 16;                 // graph degree (2·m links per node on level 0)
  int64_t ef_construction = 200;  // candidate list while inserting
  int64_t ef = 64;                // candidate list while searching (raised to k when smaller)
  bool deterministic = false;     // insert from one thread in row order: the same graph every run
};

class HnswIndex {
 public:
  // Indexes every row of vectors [n×dim] (copied; row r gets id r). Node levels come
  // from our own seeded RNG. The build inserts from all OpenMP threads (hnswlib's
  // addPoint is thread-safe), so the graph — not its quality — depends on thread timing,
  // unless params.deterministic. ledger (optional): the index's bytes under MemTag::index.
  HnswIndex(ConstMatrix vectors, const HnswParams& params, uint64_t seed,
            MemoryLedger* ledger = nullptr);
  ~HnswIndex();

  // For each row of queries [q×dim]: the k rows of largest inner product, best first,
  // into labels [q×k] (row ids) and scores [q×k] (inner products, may be nullptr). Rows
  // with fewer than k results are padded with UINT32_MAX and -inf. Parallel over queries.
  void search(ConstMatrix queries, int k, uint32_t* labels, float* scores) const;

  int64_t size() const { return size_; }
  int64_t dim() const { return dim_; }
  // Bytes held by the graph and its copy of the vectors (hnswlib's level-0 block plus an
  // estimate of the upper levels).
  int64_t bytes() const { return bytes_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t size_ = 0;
  int64_t dim_ = 0;
  int64_t bytes_ = 0;
  LedgerEntry entry_;
};

}  // namespace xmc
