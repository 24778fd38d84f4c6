#include "data/batcher.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace xmc {
namespace {

// Rows `ids` of m into out (reusing its buffers): indices, and values when m has them.
void gather_rows(const CsrMatrix& m, std::span<const int64_t> ids, CsrMatrix& out) {
  out.rows = static_cast<int64_t>(ids.size());
  out.cols = m.cols;
  out.indptr.assign(1, 0);
  out.indices.clear();
  out.values.clear();
  for (int64_t r : ids) {
    out.indices.insert(out.indices.end(), m.row_indices(r), m.row_indices(r) + m.row_nnz(r));
    if (m.has_values())
      out.values.insert(out.values.end(), m.row_values(r), m.row_values(r) + m.row_nnz(r));
    out.indptr.push_back(static_cast<int64_t>(out.indices.size()));
  }
}

}  // namespace

void gather_batch(const Dataset& ds, std::span<const int64_t> ids, Batch& out) {
  const int64_t n = ds.num_points();
  for (int64_t id : ids) XMC_CHECK(id >= 0 && id < n, "row id {} outside [0, {})", id, n);
  const auto b = static_cast<int64_t>(ids.size());
  out.ids.assign(ids.begin(), ids.end());
  out.sparse = ds.sparse();
  gather_rows(ds.labels, ids, out.labels);
  if (ds.sparse()) {
    gather_rows(ds.sparse_features(), ids, out.sparse_x);
    out.dense_x = DenseMatrix();
  } else {
    const DenseMatrix& x = ds.dense_features();
    out.dense_x.rows = b;
    out.dense_x.cols = x.cols;
    out.dense_x.values.resize(static_cast<size_t>(b * x.cols));
    for (int64_t i = 0; i < b; ++i)
      std::copy_n(x.values.data() + ids[static_cast<size_t>(i)] * x.cols, x.cols,
                  out.dense_x.values.data() + i * x.cols);
    out.sparse_x = CsrMatrix();
  }
}

Batcher::Batcher(const Dataset& ds, int64_t batch_size, uint64_t seed, bool shuffle)
    : ds_(ds), batch_size_(batch_size), seed_(seed), shuffle_(shuffle) {
  if (batch_size < 1) throw_input("batch size must be >= 1, got {}", batch_size);
}

int64_t Batcher::batches_per_epoch() const {
  return (ds_.num_points() + batch_size_ - 1) / batch_size_;
}

void Batcher::start_epoch(int64_t epoch) {
  order_.resize(static_cast<size_t>(ds_.num_points()));
  std::iota(order_.begin(), order_.end(), int64_t{0});
  if (shuffle_) {
    Rng rng = Rng::stream(seed_, static_cast<uint64_t>(epoch));
    for (size_t i = order_.size(); i > 1; --i) std::swap(order_[i - 1], order_[rng.below(i)]);
  }
  pos_ = 0;
  started_ = true;
}

bool Batcher::next(Batch& out) {
  XMC_CHECK(started_, "Batcher::next before start_epoch");
  const auto n = static_cast<int64_t>(order_.size());
  if (pos_ >= n) return false;
  const int64_t b = std::min(batch_size_, n - pos_);
  gather_batch(ds_, std::span<const int64_t>(order_.data() + pos_, static_cast<size_t>(b)), out);
  pos_ += b;
  return true;
}

void Batcher::skip(int64_t batches) {
  XMC_CHECK(started_, "Batcher::skip before start_epoch");
  XMC_CHECK(batches >= 0, "Batcher::skip({})", batches);
  pos_ = std::min(static_cast<int64_t>(order_.size()), pos_ + batches * batch_size_);
}

}  // namespace xmc
