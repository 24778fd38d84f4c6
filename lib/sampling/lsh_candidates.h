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
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "core/matrix.h"
#include "sampling/lsh.h"

namespace xmc {

XMC_NAMED_ENUM(LshQuery, embedding, label, none);

struct CandidateParams {
  LshQuery query = LshQuery::embedding;
  int64_t max_candidates = 1024;  // cap on |positives ∪ retrieved| (positives always kept)
  int64_t min_candidates = 256;   // padded with uniform random labels up to this size
  bool shared = false;            // one candidate set for the whole batch
  uint64_t seed = 0;
};

// The weight vectors that label queries read: every row of w [L×d] (ids empty), or only
// the rows of the listed labels (ids sorted and distinct, row q of w [|ids|×d] is label
// ids[q]'s vector) — what a device-resident layer downloads for one batch's positives.
struct LabelVectors {
  ConstMatrix w;
  std::span<const uint32_t> ids;
  // Vector of `label` (must be present: sample() checks the positives beforehand).
  const float* row(uint32_t label) const;
  bool has(uint32_t label) const;
};

class CandidateSampler {
 public:
  // Labels [0, num_labels). The per-thread scratch is a few KiB per thread, sized by the
  // candidate sets and not by num_labels, so it is not recorded in the ledger.
  CandidateSampler(int64_t num_labels, const CandidateParams& p);

  // h [B×d] the batch embeddings, w the label weights (label queries; LabelVectors{W, {}}
  // for every row of W [L×d]; every query label present), positives [B×L] (global ids).
  // tables may be null only when query = none.
  // Returns CSR [B×L] (per point) or [1×L] (shared): each row holds distinct labels,
  // positives first (in their order), then retrieved (best ranked first), then random.
  // query_labels (nullptr: the positives): the labels whose vectors label queries hash,
  // when they are not the positives kept in the sets — a label shard keeps its own
  // positives (its local ids) and queries with every positive of the point (global ids).
  CsrMatrix sample(const LshTables* tables, ConstMatrix h, const LabelVectors& w,
                   const CsrMatrix& positives, uint64_t step,
                   const CsrMatrix* query_labels = nullptr);

  // Labels retrieved for one query vector x [d] (no positives, no padding), ranked, at
  // most `cap` (evaluation through the tables). Uses the scratch of thread `thread`.
  void retrieve(const LshTables& tables, const float* x, int64_t cap, int thread,
                std::vector<uint32_t>& out);
  // retrieve() of every row of x [n×d] (OpenMP over the rows): CSR [n×num_labels].
  CsrMatrix retrieve_rows(const LshTables& tables, ConstMatrix x, int64_t cap);

  const CandidateParams& params() const { return p_; }
  // Threads with their own scratch: parallel callers of retrieve use at most this many.
  int threads() const { return static_cast<int>(scratch_.size()); }

 private:
  // One thread's scratch for ops::lsh_point_candidates (the map zero between rows), grown
  // to the largest row so far: sized by the candidates of a row, never by L (but for the
  // dense padding of an L below twice min_candidates), so it is not in the ledger.
  struct Scratch {
    std::vector<uint32_t> keys, vals, used, retrieved, rank_label, rest, codes;
    std::vector<uint64_t> rank;
  };
  // One candidate row into out: pos [npos], then labels retrieved by the query vectors
  // (tables null: none), capped, then random padding (ops::lsh_point_candidates).
  void build_row(const LshTables* tables, const std::vector<const float*>& queries,
                 const uint32_t* pos, int64_t npos, int64_t max_candidates,
                 int64_t min_candidates, Rng& rng, Scratch& s, std::vector<uint32_t>& out) const;

  int64_t num_labels_;
  CandidateParams p_;
  std::vector<Scratch> scratch_;  // one per OpenMP thread (small, grows with the candidates)
};

}  // namespace xmc
