#pragma once
// Candidate sets of the lsh_sampled backend: for each training point, its positives ∪ the
// labels retrieved from the LSH tables, capped at max_candidates, padded with uniform
// random labels up to min_candidates. Retrieved labels are ranked by the number of tables
// they collide in (ties broken by a seeded hash, not by label id), so the cap keeps the
// labels most similar to the query.
// Queries: `embedding` hashes the point's h [d]; `label` hashes the current weight vector
// of each of its positives; `none` retrieves nothing (uniform random sampling).
// The random draws come from a stream per (step, point): the result depends neither on the
// thread count nor on any state carried between steps.
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/matrix.h"
#include "core/memory_ledger.h"
#include "sampling/lsh.h"

namespace xmc {

enum class LshQuery { embedding, label, none };
LshQuery parse_lsh_query(std::string_view name);  // throws InputError

struct CandidateParams {
  LshQuery query = LshQuery::embedding;
  int64_t max_candidates = 1024;  // cap on |positives ∪ retrieved| (positives always kept)
  int64_t min_candidates = 256;   // padded with uniform random labels up to this size
  bool shared = false;            // one candidate set for the whole batch
  uint64_t seed = 0;
};

class CandidateSampler {
 public:
  // Labels [0, num_labels); scratch for `threads` threads recorded as workspace.
  CandidateSampler(MemoryLedger& ledger, int64_t num_labels, const CandidateParams& p);

  // h [B×d] the batch embeddings, w [L×d] the label weights (label queries), positives
  // [B×L] (global ids). tables may be null only when query = none.
  // Returns CSR [B×L] (per point) or [1×L] (shared): each row holds distinct labels,
  // positives first (in their order), then retrieved (best ranked first), then random.
  CsrMatrix sample(const LshTables* tables, ConstMatrix h, ConstMatrix w,
                   const CsrMatrix& positives, uint64_t step);

  // Labels retrieved for one query vector x [d] (no positives, no padding), ranked, at
  // most `cap` (evaluation through the tables). Uses the scratch of thread `thread`.
  void retrieve(const LshTables& tables, const float* x, int64_t cap, int thread,
                std::vector<uint32_t>& out);

  const CandidateParams& params() const { return p_; }
  // Threads with their own scratch: parallel callers of retrieve use at most this many.
  int threads() const { return static_cast<int>(scratch_.size()); }
  int64_t scratch_bytes() const { return scratch_entry_.bytes(); }

 private:
  // Per-thread marks: stamp_[l] == epoch means l is in the set being built; count_[l]
  // is then its number of collisions.
  struct Scratch {
    std::vector<uint32_t> stamp, count;
    std::vector<uint32_t> retrieved;
    std::vector<uint32_t> codes;
    uint32_t epoch = 0;
    void next_epoch();
  };
  // One candidate row into out: pos [npos], then labels retrieved by the query vectors
  // (tables null: none), capped, then random padding.
  void build_row(const LshTables* tables, const std::vector<const float*>& queries,
                 const uint32_t* pos, int64_t npos, int64_t max_candidates,
                 int64_t min_candidates, Rng& rng, Scratch& s, std::vector<uint32_t>& out) const;

  int64_t num_labels_;
  CandidateParams p_;
  std::vector<Scratch> scratch_;  // one per OpenMP thread
  LedgerEntry scratch_entry_;
};

}  // namespace xmc
