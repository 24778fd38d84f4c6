#include "eval/topk.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace xmc {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Cand {
  uint32_t label;
  float score;
};

}  // namespace

TopK TopK::padded(int64_t rows, int k) {
  const auto n = static_cast<size_t>(rows * k);
  return {rows, k, std::vector<uint32_t>(n, kNoLabel), std::vector<float>(n, kNegInf)};
}

TopKAccumulator::TopKAccumulator(int64_t rows, int k) {
  if (k < 1) throw_input("top-k: k must be at least 1, got {}", k);
  if (rows < 0) throw_error("top-k: number of rows must be >= 0, got {}", rows);
  heap_ = TopK::padded(rows, k);
  count_.assign(static_cast<size_t>(rows), 0);
}

// Heap over the row's slots [k]: a max-heap under "ranks before", i.e. the worst kept
// candidate sits at slot 0. Sift operations are written out because labels and scores
// live in two parallel arrays.
void TopKAccumulator::push(int64_t row, uint32_t label, float score) {
  uint32_t* lab = heap_.row_labels(row);
  float* sc = heap_.row_scores(row);
  int& n = count_[static_cast<size_t>(row)];
  // "worse(i, j)": slot i ranks after slot j.
  auto worse = [&](int i, int j) { return ranks_before(sc[j], lab[j], sc[i], lab[i]); };
  if (n < heap_.k) {
    int i = n++;
    lab[i] = label;
    sc[i] = score;
    while (i > 0) {
      int parent = (i - 1) / 2;
      if (!worse(i, parent)) break;
      std::swap(lab[i], lab[parent]);
      std::swap(sc[i], sc[parent]);
      i = parent;
    }
    return;
  }
  if (!ranks_before(score, label, sc[0], lab[0])) return;
  lab[0] = label;
  sc[0] = score;
  int i = 0;
  for (;;) {
    int l = 2 * i + 1, r = l + 1, w = i;
    if (l < n && worse(l, w)) w = l;
    if (r < n && worse(r, w)) w = r;
    if (w == i) break;
    std::swap(lab[i], lab[w]);
    std::swap(sc[i], sc[w]);
    i = w;
  }
}

void TopKAccumulator::add(int64_t row, uint32_t label, float score) {
  XMC_CHECK(row >= 0 && row < heap_.rows, "row {} outside [0, {})", row, heap_.rows);
  push(row, label, score);
}

void TopKAccumulator::add_chunk(ConstMatrix scores, int64_t lo) {
  XMC_CHECK(scores.rows == heap_.rows, "score chunk has {} rows, the accumulator {}", scores.rows,
            heap_.rows);
  XMC_CHECK(lo >= 0 && lo + scores.cols <= static_cast<int64_t>(TopK::kNoLabel),
            "label range [{}, {}) does not fit uint32 label ids", lo, lo + scores.cols);
  const int64_t c = scores.cols;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < heap_.rows; ++r) {
    const float* s = scores.row(r);
    for (int64_t j = 0; j < c; ++j) push(r, static_cast<uint32_t>(lo + j), s[j]);
  }
}

TopK TopKAccumulator::result() const {
  TopK out = heap_;  // heap order; the slots past count_ are padding
  std::vector<Cand> buf;
  for (int64_t r = 0; r < out.rows; ++r) {
    const int n = count_[static_cast<size_t>(r)];
    uint32_t* lab = out.row_labels(r);
    float* sc = out.row_scores(r);
    buf.resize(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) buf[static_cast<size_t>(i)] = {lab[i], sc[i]};
    std::sort(buf.begin(), buf.end(), [](const Cand& a, const Cand& b) {
      return ranks_before(a.score, a.label, b.score, b.label);
    });
    for (int i = 0; i < n; ++i) {
      lab[i] = buf[static_cast<size_t>(i)].label;
      sc[i] = buf[static_cast<size_t>(i)].score;
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
