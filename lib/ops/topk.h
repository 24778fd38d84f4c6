#pragma once
// The top-k family: exact top-k per row, streamed over label chunks (scores are never held
// for all labels at once) — on the host (TopKAccumulator) and on the Context's device
// (stream_topk; the gpu:: half below) — and its conversions: from a predictions CSR, and
// a merge of two top-k lists (label-sharded models).
//
// Order (ranks_before, the same on host and device): score descending; equal scores -> the
// lower label id first; NaN scores rank as -inf (a diverged model still gets a
// deterministic, if useless, ranking). Pads (label kNoLabel, score -inf) therefore rank
// after every real candidate.
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "core/context.h"
#include "core/cuda_context.h"
#include "core/host_device.h"
#include "core/matrix.h"

namespace xmc {

// True when (score a, label a) ranks strictly before (score b, label b).
XMC_HOST_DEVICE inline bool ranks_before(float score_a, uint32_t label_a, float score_b,
                                         uint32_t label_b) {
  if (score_a != score_a) score_a = -INFINITY;  // NaN
  if (score_b != score_b) score_b = -INFINITY;
  if (score_a != score_b) return score_a > score_b;
  return label_a < label_b;
}

// The merge of two sorted top-k lists by ranks ("merge path"): the position of each
// element in the merged order is computed independently, so a GPU thread per element can
// place it, for any k (the CPU tests check these against std::merge).
// a and b: k (score, label) pairs each, sorted by ranks_before (best first).
// Position of a[i] in the merge of a and b: i + #{b[j] ranking strictly before a[i]}.
// Position of b[i]: i + #{a[j] not ranking after... i.e. with !ranks_before(b[i], a[j])}.
// Equal elements of a go before those of b, so the positions of a and b together are
// 0 .. 2k-1, each once.
XMC_HOST_DEVICE inline int merged_position_a(int i, const float* as, const uint32_t* al,
                                             const float* bs, const uint32_t* bl, int k) {
  int lo = 0, hi = k;  // first j with !ranks_before(b[j], a[i])
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (ranks_before(bs[mid], bl[mid], as[i], al[i])) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return i + lo;
}

XMC_HOST_DEVICE inline int merged_position_b(int i, const float* as, const uint32_t* al,
                                             const float* bs, const uint32_t* bl, int k) {
  int lo = 0, hi = k;  // first j with ranks_before(b[i], a[j])
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (!ranks_before(bs[i], bl[i], as[mid], al[mid])) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return i + lo;
}

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

// The streamed exact top-k of every backend: rows in blocks of at most `block_rows`; for
// each block, `begin_block(r0, rows)` prepares its input (project, transpose, round; may
// be empty), then the labels [0, n) go in chunks of at most `chunk`, `score(c0, z)`
// writing the scores of labels [c0, c0 + z.cols) of the block into the workspace
// z [rows×c], merged into a running top-k under the label ids label_offset + c0 + column
// (equal scores to the lower id, pads (TopK::kNoLabel, -inf)).
// host_stream_topk: a HOST workspace of at least min(block_rows, rows)·chunk floats, the
// chunks merged by TopKAccumulator in label order. chunk <= n.
TopK host_stream_topk(int64_t rows, int k, int64_t block_rows, int64_t n, int64_t chunk,
                      int64_t label_offset, float* workspace,
                      const std::function<void(int64_t r0, int64_t rows)>& begin_block,
                      const std::function<void(int64_t c0, Matrix z)>& score);

// stream_topk: the same on the Context's device, with a workspace in the ledger: CPU —
// host_stream_topk; CUDA — score() writes DEVICE views, merged on the device
// (gpu::topk_merge_chunk), one download at the end; k is checked against gpu::kMaxTopK.
TopK stream_topk(Context& ctx, int64_t rows, int k, int64_t block_rows, int64_t n, int64_t chunk,
                 int64_t label_offset,
                 const std::function<void(int64_t r0, int64_t rows)>& begin_block,
                 const std::function<void(int64_t c0, Matrix z)>& score);

}  // namespace xmc

// The CUDA half (cuda/topk.cu): all pointers on the device, on `stream`, no
// synchronisation; stubs that throw in a build without CUDA (core/gpu.h).
XMC_GPU_STUBS_BEGIN
namespace xmc::gpu {
// Largest k of the GPU top-k (the merge stages 2k candidates per row in shared memory).
inline constexpr int kMaxTopK = 4096;
// k of a GPU top-k, from eval.k plus the filter's most labels per point: InputError
// outside [1, kMaxTopK]. Host code (ops/topk.cpp), in every build.
void check_topk_k(int k);
// Running top-k over label chunks (evaluation, predict). run_scores / run_labels [rows×k]
// hold each row's best k so far, best first; topk_reset fills them with (-inf, kNoLabel)
// pads. topk_merge_chunk takes the top-k of the chunk scores [rows×cols] (row stride ld,
// labels = column + label_offset) into tmp_* [rows×k] and merges it into run_*.
// 1 <= k <= kMaxTopK (check_topk_k).
XMC_GPU_FN void topk_reset(float* run_scores, uint32_t* run_labels, int64_t rows, int k,
                           CUstream_st* stream) XMC_GPU_STUB;
XMC_GPU_FN void topk_merge_chunk(const float* scores, int64_t rows, int64_t cols, int64_t ld, int k,
                                 int64_t label_offset, float* tmp_scores, uint32_t* tmp_labels,
                                 float* run_scores, uint32_t* run_labels,
                                 CUstream_st* stream) XMC_GPU_STUB;
}  // namespace xmc::gpu
XMC_GPU_STUBS_END
