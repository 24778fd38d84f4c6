#include "eval/topk.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace xmc {

TopK TopK::padded(int64_t rows, int k) {
  const auto n = static_cast<size_t>(rows * k);
  return {rows, k, std::vector<uint32_t>(n, kNoLabel),
          std::vector<float>(n, -std::numeric_limits<float>::infinity())};
}

TopKAccumulator::TopKAccumulator(int64_t rows, int k) : rows_(rows), k_(k) {
  if (k < 1) throw_input("top-k: k must be at least 1, got {}", k);
  if (rows < 0) throw_error("top-k: number of rows must be >= 0, got {}", rows);
  heap_.resize(static_cast<size_t>(rows * k));
  count_.assign(static_cast<size_t>(rows), 0);
}

bool TopKAccumulator::better(const Cand& a, const Cand& b) {
  return ranks_before(a.score, a.label, b.score, b.label);
}

// The row's heap is a max-heap under `better`: the worst kept candidate is its top.
void TopKAccumulator::push(int64_t row, uint32_t label, float score) {
  Cand* h = heap_.data() + row * k_;
  int& n = count_[static_cast<size_t>(row)];
  if (n == k_) {
    if (!ranks_before(score, label, h[0].score, h[0].label)) return;
    std::pop_heap(h, h + n--, better);  // the worst leaves
  }
  h[n++] = {label, score};
  std::push_heap(h, h + n, better);
}

void TopKAccumulator::add(int64_t row, uint32_t label, float score) {
  XMC_CHECK(row >= 0 && row < rows_, "row {} outside [0, {})", row, rows_);
  push(row, label, score);
}

void TopKAccumulator::add_chunk(ConstMatrix scores, int64_t lo) {
  XMC_CHECK(scores.rows == rows_, "score chunk has {} rows, the accumulator {}", scores.rows,
            rows_);
  XMC_CHECK(lo >= 0 && lo + scores.cols <= static_cast<int64_t>(TopK::kNoLabel),
            "label range [{}, {}) does not fit uint32 label ids", lo, lo + scores.cols);
  const int64_t c = scores.cols;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows_; ++r) {
    const float* s = scores.row(r);
    for (int64_t j = 0; j < c; ++j) push(r, static_cast<uint32_t>(lo + j), s[j]);
  }
}

TopK TopKAccumulator::result() const {
  TopK out = TopK::padded(rows_, k_);
  std::vector<Cand> row;
  for (int64_t r = 0; r < rows_; ++r) {
    const Cand* h = heap_.data() + r * k_;
    row.assign(h, h + count_[static_cast<size_t>(r)]);
    std::sort_heap(row.begin(), row.end(), better);  // best first
    for (size_t i = 0; i < row.size(); ++i) {
      out.row_labels(r)[i] = row[i].label;
      out.row_scores(r)[i] = row[i].score;
    }
  }
  return out;
}

TopK topk_from_csr(const CsrMatrix& pred, int k) {
  TopKAccumulator acc(pred.rows, k);
#pragma omp parallel for schedule(dynamic, 256)
  for (int64_t r = 0; r < pred.rows; ++r) {
    const uint32_t* idx = pred.row_indices(r);
    const float* val = pred.row_values(r);
    for (int64_t j = 0; j < pred.row_nnz(r); ++j) acc.add(r, idx[j], val ? val[j] : 1.0f);
  }
  return acc.result();
}

TopK merge_topk(const TopK& a, const TopK& b) {
  if (a.rows != b.rows)
    throw_error("merge_topk: the lists cover {} and {} rows; they must be the same", a.rows,
                b.rows);
  TopK out = TopK::padded(a.rows, std::max(a.k, b.k));
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < out.rows; ++r) {
    const uint32_t* la = a.row_labels(r);
    const float* sa = a.row_scores(r);
    const uint32_t* lb = b.row_labels(r);
    const float* sb = b.row_scores(r);
    uint32_t* lo = out.row_labels(r);
    float* so = out.row_scores(r);
    int i = 0, j = 0, n = 0;
    // Both inputs are sorted best first with padding last: a two-way merge.
    while (n < out.k) {
      const bool a_ok = i < a.k && la[i] != TopK::kNoLabel;
      const bool b_ok = j < b.k && lb[j] != TopK::kNoLabel;
      if (!a_ok && !b_ok) break;
      const bool from_a = a_ok && (!b_ok || ranks_before(sa[i], la[i], sb[j], lb[j]));
      const uint32_t l = from_a ? la[i] : lb[j];
      const float s = from_a ? sa[i++] : sb[j++];
      // The same label in both lists: its first (better) occurrence is already kept.
      if (std::find(lo, lo + n, l) != lo + n) continue;
      lo[n] = l;
      so[n] = s;
      ++n;
    }
  }
  return out;
}

}  // namespace xmc
