#pragma once
// Exact top-k per row, streamed over label chunks (scores are never held for all labels
// at once), and its conversions: from a predictions CSR, and a merge of two top-k lists
// (label-sharded models).
//
// Order: ranks_before (core/topk_order.h): score descending; equal scores -> the lower
// label id first; NaN scores rank as -inf (a diverged model still gets a deterministic, if
// useless, ranking). The GPU top-k (cuda/topk.cu) uses the same function.
#include <cstdint>
#include <limits>
#include <vector>

#include "core/matrix.h"
#include "core/topk_order.h"  // ranks_before: the order of every top-k, host and device

namespace xmc {

// Top-k lists of `rows` points, row-major [rows×k], best first. A row with fewer than k
// candidates is padded at the end with label kNoLabel and score -inf.
struct TopK {
  static constexpr uint32_t kNoLabel = std::numeric_limits<uint32_t>::max();

  int64_t rows = 0;
  int k = 0;
  std::vector<uint32_t> labels;  // [rows×k]
  std::vector<float> scores;     // [rows×k]

  // rows×k entries, every one a pad (kNoLabel, -inf), to be filled in.
  static TopK padded(int64_t rows, int k);

  const uint32_t* row_labels(int64_t r) const { return labels.data() + r * k; }
  const float* row_scores(int64_t r) const { return scores.data() + r * k; }
  uint32_t* row_labels(int64_t r) { return labels.data() + r * k; }
  float* row_scores(int64_t r) { return scores.data() + r * k; }
};

// Keeps, for each of `rows` rows, the k best (label, score) candidates seen so far.
// Per row a bounded heap [k] whose top is the worst kept candidate: O(log k) per
// candidate that enters, O(1) per candidate that does not.
class TopKAccumulator {
 public:
  // rows >= 0, k >= 1 (InputError otherwise: k comes from the user).
  TopKAccumulator(int64_t rows, int k);

  // scores [rows×c]: the scores of labels [lo, lo + c) for every row. Parallel over rows
  // (OpenMP); the result does not depend on the chunking or the thread count.
  void add_chunk(ConstMatrix scores, int64_t lo);

  // One candidate for one row. Not thread-safe for the same row; different rows may be
  // fed from different threads.
  void add(int64_t row, uint32_t label, float score);

  // The kept candidates, each row sorted best first and padded.
  TopK result() const;

 private:
  struct Cand {
    uint32_t label;
    float score;
  };
  static bool better(const Cand& a, const Cand& b);  // ranks_before
  void push(int64_t row, uint32_t label, float score);

  int64_t rows_;
  int k_;
  std::vector<Cand> heap_;  // [rows×k]: per row a heap of count_[row] candidates
  std::vector<int> count_;  // [rows] candidates kept, <= k
};

// Top-k of each row of a predictions matrix (label:score pairs, any order). A
// pattern-only matrix (no values) scores every stored label 1, so ties go to the lower id.
TopK topk_from_csr(const CsrMatrix& pred, int k);

// Best max(a.k, b.k) of the union of two top-k lists over the same rows (e.g. two label
// shards). A label present in both is kept once, with its better score.
TopK merge_topk(const TopK& a, const TopK& b);

}  // namespace xmc
