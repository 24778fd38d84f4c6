#include "sampling/lsh_candidates.h"

#include <omp.h>

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace xmc {

bool LabelVectors::has(uint32_t label) const {
  if (ids.empty()) return label < w.rows;
  return std::binary_search(ids.begin(), ids.end(), label);
}

const float* LabelVectors::row(uint32_t label) const {
  if (ids.empty()) return w.row(label);
  const auto it = std::lower_bound(ids.begin(), ids.end(), label);
  XMC_CHECK(it != ids.end() && *it == label, "no weight vector for label {}", label);
  return w.row(it - ids.begin());
}

CandidateSampler::CandidateSampler(int64_t num_labels, const CandidateParams& p)
    : num_labels_(num_labels), p_(p) {
  if (p.max_candidates < 1 || p.min_candidates < 0)
    throw_input("candidate bounds need max_candidates >= 1 and min_candidates >= 0; got {} and {}",
                p.max_candidates, p.min_candidates);
  scratch_.resize(static_cast<size_t>(std::max(1, omp_get_max_threads())));
}

void CandidateSampler::build_row(const LshTables* tables, const std::vector<const float*>& queries,
                                 const uint32_t* pos, int64_t npos, int64_t max_candidates,
                                 int64_t min_candidates, Rng& rng, Scratch& s,
                                 std::vector<uint32_t>& out) const {
  const int nt = tables != nullptr ? tables->tables() : 0;
  const auto nq = static_cast<int64_t>(tables != nullptr ? queries.size() : 0);
  if (nq > 0) {
    s.codes.resize(static_cast<size_t>(nq * nt));
    for (int64_t q = 0; q < nq; ++q) tables->hash(queries[q], s.codes.data() + q * nt);
  }
  const ops::LshTablesView v = tables != nullptr ? tables->view() : ops::LshTablesView{};
  const int64_t reach = nq * nt * (tables != nullptr ? tables->view().capacity : 0);
  const int64_t target = std::min(min_candidates, num_labels_);
  // The map holds the positives, every label the buckets hold and the padding, at most
  // half full.
  auto need = static_cast<size_t>(256);
  while (need < static_cast<size_t>(2 * (npos + reach + target) + 2)) need *= 2;
  if (s.keys.size() < need) {
    s.keys.assign(need, 0u);
    s.vals.resize(need);
    s.used.resize(need);
  }
  if (s.retrieved.size() < static_cast<size_t>(reach)) {
    s.retrieved.resize(static_cast<size_t>(reach));
    s.rank.resize(static_cast<size_t>(reach));
    s.rank_label.resize(static_cast<size_t>(reach));
  }
  if (2 * target > num_labels_ && s.rest.size() < static_cast<size_t>(num_labels_))
    s.rest.resize(static_cast<size_t>(num_labels_));
  const ops::LshDrawScratch scratch{.keys = s.keys.data(),
                                    .vals = s.vals.data(),
                                    .used = s.used.data(),
                                    .map_size = static_cast<int64_t>(s.keys.size()),
                                    .retrieved = s.retrieved.data(),
                                    .rank = s.rank.data(),
                                    .rank_label = s.rank_label.data(),
                                    .rest = s.rest.data()};
  out.resize(static_cast<size_t>(
      ops::lsh_candidate_slots(npos, max_candidates, min_candidates, num_labels_)));
  const int64_t count =
      ops::lsh_point_candidates(v, s.codes.data(), nq, pos, npos, max_candidates, min_candidates,
                                num_labels_, rng, scratch, out.data());
  out.resize(static_cast<size_t>(count));
}

CsrMatrix CandidateSampler::sample(const LshTables* tables, ConstMatrix h, const LabelVectors& w,
                                   const CsrMatrix& positives, uint64_t step,
                                   const CsrMatrix* query_labels) {
  XMC_CHECK(tables || p_.query == LshQuery::none, "LSH query without tables");
  XMC_CHECK(positives.rows == h.rows, "candidates: {} label rows for {} points", positives.rows,
            h.rows);
  XMC_CHECK(w.ids.empty() || w.ids.size() == static_cast<size_t>(w.w.rows),
            "label vectors: {} ids for {} rows", w.ids.size(), w.w.rows);
  for (uint32_t l : positives.indices)
    XMC_CHECK(l < num_labels_, "positive label {} >= {}", l, num_labels_);
  const CsrMatrix& ql = query_labels != nullptr ? *query_labels : positives;
  XMC_CHECK(ql.rows == h.rows, "candidates: {} query label rows for {} points", ql.rows, h.rows);
  // Checked here, outside the parallel region that reads the vectors.
  if (p_.query == LshQuery::label)
    for (uint32_t l : ql.indices)
      XMC_CHECK(w.has(l), "label query: no weight vector for label {}", l);
  const LshTables* retrieval = p_.query == LshQuery::none ? nullptr : tables;
  const int64_t batch = h.rows;
  const uint64_t step_seed = mix64(p_.seed ^ mix64(step));
  std::vector<std::vector<uint32_t>> rows(static_cast<size_t>(p_.shared ? 1 : batch));
  if (p_.shared) {
    std::vector<uint32_t> pos;
    std::vector<const float*> queries;
    for (int64_t i = 0; i < batch; ++i) {
      const uint32_t* pi = positives.row_indices(i);
      pos.insert(pos.end(), pi, pi + positives.row_nnz(i));
      if (p_.query == LshQuery::embedding) queries.push_back(h.row(i));
    }
    if (p_.query == LshQuery::label) {
      std::vector<uint32_t> u = ql.indices;
      std::sort(u.begin(), u.end());
      u.erase(std::unique(u.begin(), u.end()), u.end());
      for (uint32_t l : u) queries.push_back(w.row(l));
    }
    Rng rng = Rng::stream(step_seed, 0);
    build_row(retrieval, queries, pos.data(), static_cast<int64_t>(pos.size()), p_.max_candidates,
              p_.min_candidates, rng, scratch_[0], rows[0]);
    return CsrMatrix::from_rows(rows, num_labels_);
  }
#pragma omp parallel num_threads(threads())
  {
    Scratch& s = scratch_[static_cast<size_t>(omp_get_thread_num())];
    std::vector<const float*> queries;
#pragma omp for schedule(dynamic, 4)
    for (int64_t i = 0; i < batch; ++i) {
      const uint32_t* pi = positives.row_indices(i);
      const int64_t np = positives.row_nnz(i);
      queries.clear();
      if (p_.query == LshQuery::embedding) queries.push_back(h.row(i));
      if (p_.query == LshQuery::label)
        for (int64_t q = 0; q < ql.row_nnz(i); ++q) queries.push_back(w.row(ql.row_indices(i)[q]));
      Rng rng = Rng::stream(step_seed, static_cast<uint64_t>(i));
      build_row(retrieval, queries, pi, np, p_.max_candidates, p_.min_candidates, rng, s,
                rows[i]);
    }
  }
  return CsrMatrix::from_rows(rows, num_labels_);
}

void CandidateSampler::retrieve(const LshTables& tables, const float* x, int64_t cap, int thread,
                                std::vector<uint32_t>& out) {
  Scratch& s = scratch_[static_cast<size_t>(thread) % scratch_.size()];
  Rng rng(p_.seed);
  const std::vector<const float*> queries{x};
  build_row(&tables, queries, nullptr, 0, cap, 0, rng, s, out);
}

CsrMatrix CandidateSampler::retrieve_rows(const LshTables& tables, ConstMatrix x, int64_t cap) {
  std::vector<std::vector<uint32_t>> rows(static_cast<size_t>(x.rows));
#pragma omp parallel num_threads(threads())
  {
    const int th = omp_get_thread_num();
#pragma omp for schedule(dynamic, 8)
    for (int64_t i = 0; i < x.rows; ++i)
      retrieve(tables, x.row(i), cap, th, rows[static_cast<size_t>(i)]);
  }
  return CsrMatrix::from_rows(rows, num_labels_);
}

}  // namespace xmc
