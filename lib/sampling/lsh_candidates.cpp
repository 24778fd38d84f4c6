#include "sampling/lsh_candidates.h"

#include <omp.h>

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace xmc {

namespace {

constexpr uint32_t kPositive = std::numeric_limits<uint32_t>::max();
constexpr uint32_t kCut = kPositive - 1;  // retrieved but cut by the cap: may be padding

}  // namespace

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

void CandidateSampler::LabelMap::clear() {
  for (uint32_t u : used) keys[u] = 0;
  used.clear();
  if (keys.empty()) {
    keys.assign(256, 0u);
    vals.assign(256, 0u);
  }
}

uint32_t* CandidateSampler::LabelMap::find(uint32_t label) {
  const auto mask = static_cast<uint32_t>(keys.size() - 1);
  for (auto u = static_cast<uint32_t>(mix64(label)) & mask;; u = (u + 1) & mask) {
    if (keys[u] == label + 1) return &vals[u];
    if (keys[u] == 0) return nullptr;
  }
}

uint32_t& CandidateSampler::LabelMap::insert(uint32_t label, uint32_t v, bool* inserted) {
  if (2 * (used.size() + 1) > keys.size()) grow();
  const auto mask = static_cast<uint32_t>(keys.size() - 1);
  for (auto u = static_cast<uint32_t>(mix64(label)) & mask;; u = (u + 1) & mask) {
    if (keys[u] == label + 1) {
      *inserted = false;
      return vals[u];
    }
    if (keys[u] == 0) {
      keys[u] = label + 1;
      vals[u] = v;
      used.push_back(u);
      *inserted = true;
      return vals[u];
    }
  }
}

void CandidateSampler::LabelMap::grow() {
  std::vector<std::pair<uint32_t, uint32_t>> items;
  items.reserve(used.size());
  for (uint32_t u : used) items.emplace_back(keys[u] - 1, vals[u]);
  keys.assign(keys.size() * 2, 0u);
  vals.assign(keys.size(), 0u);
  used.clear();
  bool ins = false;
  for (auto [l, v] : items) insert(l, v, &ins);
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
  LabelMap& m = s.map;
  m.clear();
  out.clear();
  bool inserted = false;
  for (int64_t q = 0; q < npos; ++q) {
    m.insert(pos[q], kPositive, &inserted);
    if (inserted) out.push_back(pos[q]);
  }
  s.retrieved.clear();
  if (tables) {
    s.codes.resize(static_cast<size_t>(tables->tables()));
    for (const float* x : queries) {
      tables->hash(x, s.codes.data());
      for (int t = 0; t < tables->tables(); ++t) {
        for (uint32_t l : tables->bucket(t, s.codes[t])) {
          uint32_t& c = m.insert(l, 0u, &inserted);
          if (inserted) s.retrieved.push_back(l);
          if (c != kPositive) ++c;
        }
      }
    }
  }
  const auto room = static_cast<size_t>(
      std::max<int64_t>(0, max_candidates - static_cast<int64_t>(out.size())));
  const uint64_t salt = rng.next();
  // Rank key = (collisions << 32) | seeded hash of the label: one integer compare per
  // comparison, ties between equal counts broken at random but reproducibly.
  auto& ranked = s.ranked;
  ranked.clear();
  for (uint32_t l : s.retrieved)
    ranked.emplace_back((uint64_t{*m.find(l)} << 32) | (mix64(salt ^ l) >> 32), l);
  auto better = [](const std::pair<uint64_t, uint32_t>& a, const std::pair<uint64_t, uint32_t>& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  if (ranked.size() > room) {
    std::nth_element(ranked.begin(), ranked.begin() + static_cast<int64_t>(room), ranked.end(),
                     better);
    // Labels cut by the cap may still be drawn as random padding.
    for (size_t q = room; q < ranked.size(); ++q) *m.find(ranked[q].second) = kCut;
    ranked.resize(room);
  }
  std::sort(ranked.begin(), ranked.end(), better);
  for (const auto& r : ranked) out.push_back(r.second);

  const auto target = static_cast<size_t>(std::min(min_candidates, num_labels_));
  if (out.size() >= target) return;
  auto take = [&](uint32_t l) {
    uint32_t& c = m.insert(l, kPositive, &inserted);
    if (!inserted && c != kCut) return false;
    c = kPositive;
    out.push_back(l);
    return true;
  };
  if (2 * target > static_cast<size_t>(num_labels_)) {
    // Dense padding (small L): a random subset of the labels not yet taken.
    std::vector<uint32_t> rest;
    for (int64_t l = 0; l < num_labels_; ++l) {
      const uint32_t* c = m.find(static_cast<uint32_t>(l));
      if (!c || *c == kCut) rest.push_back(static_cast<uint32_t>(l));
    }
    const size_t need = target - out.size();
    for (size_t q = 0; q < need; ++q) {
      const size_t r = q + static_cast<size_t>(rng.below(rest.size() - q));
      std::swap(rest[q], rest[r]);
      take(rest[q]);
    }
    return;
  }
  while (out.size() < target) take(static_cast<uint32_t>(rng.below(static_cast<uint64_t>(num_labels_))));
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
