#include "data/synthetic.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace xmc {
namespace {

// Per-point random streams: results do not depend on the thread count.
constexpr uint64_t kTrainLabels = 1ULL << 40;
constexpr uint64_t kTestLabels = 2ULL << 40;
constexpr uint64_t kTrainFeatures = 3ULL << 40;
constexpr uint64_t kTestFeatures = 4ULL << 40;
constexpr double kSecondaryProb = 0.3;  // a point mixes in a second cluster
constexpr double kPrimaryWeight = 0.7;  // share of its labels from the primary cluster
constexpr double kLabelSpread = 0.7;    // dense: label prototype = μ_c + spread·ε_l
constexpr int kOwnWords = 5;            // sparse: words specific to a label

int64_t poisson(Rng& r, double mean) {
  if (mean <= 0) return 0;
  if (mean > 30) return std::max<int64_t>(0, std::llround(mean + std::sqrt(mean) * r.normal()));
  const double limit = std::exp(-mean);
  double p = 1;
  int64_t k = -1;
  do {
    ++k;
    p *= r.uniform();
  } while (p > limit);
  return k;
}

// Index i with cum[i-1] <= u < cum[i] (cum = inclusive prefix sums).
size_t pick(const std::vector<double>& cum, Rng& r) {
  const double u = r.uniform() * cum.back();
  auto it = std::upper_bound(cum.begin(), cum.end(), u);
  return std::min(static_cast<size_t>(it - cum.begin()), cum.size() - 1);
}

void shuffle(std::vector<uint32_t>& v, Rng& r) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[r.below(i)]);
}

struct Structure {
  std::vector<uint32_t> cluster_of;             // [L]
  std::vector<std::vector<uint32_t>> members;   // [C][labels of c]
  std::vector<std::vector<double>> member_cum;  // [C][...] popularity prefix sums
  std::vector<double> cluster_cum;              // [C] cluster mass prefix sums
};

Structure make_structure(const SynthConfig& cfg, Rng& rng) {
  const auto L = static_cast<size_t>(cfg.labels);
  const auto C = static_cast<size_t>(cfg.clusters);
  std::vector<uint32_t> rank(L), deal(L);
  std::iota(rank.begin(), rank.end(), 0u);
  std::iota(deal.begin(), deal.end(), 0u);
  shuffle(rank, rng);
  shuffle(deal, rng);
  Structure s;
  s.cluster_of.resize(L);
  s.members.resize(C);
  s.member_cum.resize(C);
  for (size_t i = 0; i < L; ++i) s.cluster_of[deal[i]] = static_cast<uint32_t>(i % C);
  for (uint32_t l = 0; l < L; ++l) {
    const uint32_t c = s.cluster_of[l];
    const double w = std::pow(static_cast<double>(rank[l]) + 1.0, -cfg.alpha);
    s.members[c].push_back(l);
    s.member_cum[c].push_back((s.member_cum[c].empty() ? 0.0 : s.member_cum[c].back()) + w);
  }
  for (size_t c = 0; c < C; ++c)
    s.cluster_cum.push_back((c == 0 ? 0.0 : s.cluster_cum.back()) + s.member_cum[c].back());
  return s;
}

struct PointLabels {
  std::vector<std::vector<uint32_t>> labels;  // [N][k], sorted
  std::vector<uint32_t> primary;              // [N]
};

PointLabels draw_labels(const Structure& s, const SynthConfig& cfg, int64_t n, uint64_t stream) {
  PointLabels out;
  out.labels.resize(static_cast<size_t>(n));
  out.primary.resize(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    Rng r = Rng::stream(cfg.seed, stream + static_cast<uint64_t>(i));
    const size_t c1 = pick(s.cluster_cum, r);
    const size_t c2 = r.uniform() < kSecondaryProb ? pick(s.cluster_cum, r) : c1;
    const int64_t k = std::min<int64_t>(cfg.max_labels, 1 + poisson(r, cfg.labels_per_point - 1.0));
    auto& y = out.labels[static_cast<size_t>(i)];
    // A small cluster may not hold k distinct labels: give up after a bounded number of tries.
    for (int64_t tries = 0; static_cast<int64_t>(y.size()) < k && tries < 20 * k; ++tries) {
      const size_t c = r.uniform() < kPrimaryWeight ? c1 : c2;
      const uint32_t l = s.members[c][pick(s.member_cum[c], r)];
      if (std::find(y.begin(), y.end(), l) == y.end()) y.push_back(l);
    }
    std::sort(y.begin(), y.end());
    out.primary[static_cast<size_t>(i)] = static_cast<uint32_t>(c1);
  }
  return out;
}

// Every label gets at least one training point: an unseen label joins a random training
// point of its cluster (any point when the cluster is nobody's primary).
void cover_all_labels(PointLabels& p, const Structure& s, int64_t num_labels, Rng& rng) {
  std::vector<int64_t> freq(static_cast<size_t>(num_labels), 0);
  for (const auto& y : p.labels)
    for (uint32_t l : y) ++freq[l];
  std::vector<std::vector<uint32_t>> by_cluster(s.members.size());
  for (size_t i = 0; i < p.primary.size(); ++i)
    by_cluster[p.primary[i]].push_back(static_cast<uint32_t>(i));
  for (uint32_t l = 0; l < static_cast<uint32_t>(num_labels); ++l) {
    if (freq[l] > 0 || p.labels.empty()) continue;
    const auto& pts = by_cluster[s.cluster_of[l]];
    const size_t i = pts.empty() ? rng.below(p.labels.size()) : pts[rng.below(pts.size())];
    auto& y = p.labels[i];
    y.insert(std::upper_bound(y.begin(), y.end(), l), l);
  }
}

// Fraction of rows whose top-scoring label is a true label. score(i, scores) fills [L].
template <class Score>
double precision_at_1(const CsrMatrix& y, int64_t num_labels, Score&& score) {
  int64_t hits = 0;
#pragma omp parallel reduction(+ : hits)
  {
    std::vector<float> s(static_cast<size_t>(num_labels));
#pragma omp for schedule(dynamic, 64)
    for (int64_t i = 0; i < y.rows; ++i) {
      score(i, s.data());
      const auto best = static_cast<uint32_t>(std::max_element(s.begin(), s.end()) - s.begin());
      hits += std::binary_search(y.row_indices(i), y.row_indices(i) + y.row_nnz(i), best);
    }
  }
  return y.rows > 0 ? static_cast<double>(hits) / static_cast<double>(y.rows) : 0.0;
}

double popularity_p1(const CsrMatrix& train_y, const CsrMatrix& test_y) {
  std::vector<int64_t> freq = label_frequencies(train_y);
  if (freq.empty() || test_y.rows == 0) return 0;
  const auto top = static_cast<uint32_t>(std::max_element(freq.begin(), freq.end()) - freq.begin());
  int64_t hits = 0;
  for (int64_t i = 0; i < test_y.rows; ++i)
    hits +=
        std::binary_search(test_y.row_indices(i), test_y.row_indices(i) + test_y.row_nnz(i), top);
  return static_cast<double>(hits) / static_cast<double>(test_y.rows);
}

// ---- dense -------------------------------------------------------------------------

// prototypes [L×D]
DenseMatrix dense_prototypes(const SynthConfig& cfg, const Structure& s, Rng& rng) {
  const int64_t D = cfg.features;
  DenseMatrix mu(cfg.clusters, D), p(cfg.labels, D);
  for (float& v : mu.values) v = static_cast<float>(rng.normal());
  for (int64_t c = 0; c < cfg.clusters; ++c) l2_normalise(mu.view().row(c), D);
  std::vector<float> eps(static_cast<size_t>(D));
  for (int64_t l = 0; l < cfg.labels; ++l) {
    for (float& v : eps) v = static_cast<float>(rng.normal());
    l2_normalise(eps.data(), D);
    const float* m = mu.view().row(s.cluster_of[static_cast<size_t>(l)]);
    float* row = p.view().row(l);
    for (int64_t j = 0; j < D; ++j)
      row[j] = m[j] + static_cast<float>(kLabelSpread) * eps[static_cast<size_t>(j)];
    l2_normalise(row, D);
  }
  return p;
}

DenseMatrix dense_features(const SynthConfig& cfg, const DenseMatrix& proto, const CsrMatrix& y,
                           uint64_t stream) {
  const int64_t D = cfg.features;
  DenseMatrix x(y.rows, D);
  const auto g_scale = static_cast<float>(cfg.noise / std::sqrt(static_cast<double>(D)));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < y.rows; ++i) {
    Rng r = Rng::stream(cfg.seed, stream + static_cast<uint64_t>(i));
    float* row = x.view().row(i);
    for (int64_t k = 0; k < y.row_nnz(i); ++k) {
      const float* p = proto.view().row(y.row_indices(i)[k]);
      for (int64_t j = 0; j < D; ++j) row[j] += p[j];
    }
    l2_normalise(row, D);
    for (int64_t j = 0; j < D; ++j) row[j] += g_scale * static_cast<float>(r.normal());
  }
  return x;
}

double dense_oracle_p1(const DenseMatrix& x, const DenseMatrix& proto, const CsrMatrix& y) {
  // scores [B×L] = x_chunk [B×D] · protoᵀ [D×L], a chunk of rows at a time.
  const int64_t L = proto.rows, D = proto.cols, chunk = 256;
  int64_t hits = 0;
  std::vector<float> scores(static_cast<size_t>(chunk * L));
  for (int64_t r0 = 0; r0 < x.rows; r0 += chunk) {
    const int64_t b = std::min(chunk, x.rows - r0);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(b), static_cast<int>(L),
                static_cast<int>(D), 1.0f, x.view().row(r0), static_cast<int>(D),
                proto.values.data(), static_cast<int>(D), 0.0f, scores.data(), static_cast<int>(L));
    for (int64_t i = 0; i < b; ++i) {
      const float* s = scores.data() + i * L;
      const auto best = static_cast<uint32_t>(std::max_element(s, s + L) - s);
      const int64_t row = r0 + i;
      hits += std::binary_search(y.row_indices(row), y.row_indices(row) + y.row_nnz(row), best);
    }
  }
  return x.rows > 0 ? static_cast<double>(hits) / static_cast<double>(x.rows) : 0.0;
}

// ---- sparse ------------------------------------------------------------------------

struct Vocabulary {
  std::vector<uint32_t> background_words;  // [V] Zipf ranks
  std::vector<double> background_cum;
  std::vector<std::vector<uint32_t>> topic_words;  // [C][T]
  std::vector<std::vector<double>> topic_cum;
  std::vector<uint32_t> own_words;  // [L×kOwnWords]
};

Vocabulary make_vocabulary(const SynthConfig& cfg, Rng& rng) {
  const auto V = static_cast<uint32_t>(cfg.features);
  Vocabulary v;
  v.background_words.resize(V);
  std::iota(v.background_words.begin(), v.background_words.end(), 0u);
  shuffle(v.background_words, rng);
  for (uint32_t k = 0; k < V; ++k)
    v.background_cum.push_back((k ? v.background_cum.back() : 0.0) + 1.0 / (k + 1.0));
  const int64_t T = std::clamp<int64_t>(2 * cfg.features / cfg.clusters, 10, cfg.features);
  v.topic_words.resize(static_cast<size_t>(cfg.clusters));
  v.topic_cum.resize(static_cast<size_t>(cfg.clusters));
  for (int64_t c = 0; c < cfg.clusters; ++c)
    for (int64_t k = 0; k < T; ++k) {
      v.topic_words[c].push_back(static_cast<uint32_t>(rng.below(V)));
      v.topic_cum[c].push_back((k ? v.topic_cum[c].back() : 0.0) +
                               1.0 / (static_cast<double>(k) + 1.0));
    }
  v.own_words.resize(static_cast<size_t>(cfg.labels * kOwnWords));
  for (auto& w : v.own_words) w = static_cast<uint32_t>(rng.below(V));
  return v;
}

// Term counts per point (values = tf).
CsrMatrix sparse_counts(const SynthConfig& cfg, const Structure& s, const Vocabulary& voc,
                        const CsrMatrix& y, uint64_t stream) {
  std::vector<std::vector<uint32_t>> rows(static_cast<size_t>(y.rows));  // words
  std::vector<std::vector<float>> tf(rows.size());                       // their counts
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < y.rows; ++i) {
    Rng r = Rng::stream(cfg.seed, stream + static_cast<uint64_t>(i));
    std::vector<uint32_t> words;
    words.reserve(static_cast<size_t>(cfg.nnz));
    const int64_t k = y.row_nnz(i);
    for (int64_t t = 0; t < cfg.nnz; ++t) {
      if (k == 0 || r.uniform() < cfg.noise) {
        words.push_back(voc.background_words[pick(voc.background_cum, r)]);
        continue;
      }
      const uint32_t l = y.row_indices(i)[r.below(static_cast<uint64_t>(k))];
      if (r.uniform() < 0.5) {
        words.push_back(voc.own_words[l * kOwnWords + r.below(kOwnWords)]);
      } else {
        const uint32_t c = s.cluster_of[l];
        words.push_back(voc.topic_words[c][pick(voc.topic_cum[c], r)]);
      }
    }
    std::sort(words.begin(), words.end());
    for (auto a = words.begin(); a != words.end();) {
      const auto b = std::upper_bound(a, words.end(), *a);  // a run of equal words
      rows[static_cast<size_t>(i)].push_back(*a);
      tf[static_cast<size_t>(i)].push_back(static_cast<float>(b - a));
      a = b;
    }
  }
  CsrMatrix m = CsrMatrix::from_rows(rows, cfg.features);
  for (const auto& t : tf) m.values.insert(m.values.end(), t.begin(), t.end());
  return m;
}

std::vector<float> inverse_document_frequency(const CsrMatrix& counts) {
  std::vector<int64_t> df(static_cast<size_t>(counts.cols), 0);
  for (uint32_t w : counts.indices) ++df[w];
  std::vector<float> idf(df.size());
  const double n = static_cast<double>(counts.rows);
  for (size_t w = 0; w < df.size(); ++w)
    idf[w] = static_cast<float>(std::log((n + 1.0) / (static_cast<double>(df[w]) + 1.0)) + 1.0);
  return idf;
}

// tf -> (1 + ln tf)·idf, rows L2-normalised.
void tfidf(CsrMatrix& m, const std::vector<float>& idf) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < m.rows; ++i) {
    float* v = m.values.data() + m.indptr[i];
    const uint32_t* w = m.row_indices(i);
    for (int64_t k = 0; k < m.row_nnz(i); ++k) v[k] = (1.0f + std::log(v[k])) * idf[w[k]];
    l2_normalise(v, m.row_nnz(i));
  }
}

double sparse_oracle_p1(const SynthConfig& cfg, const Structure& s, const Vocabulary& voc,
                        const std::vector<float>& idf, const CsrMatrix& x, const CsrMatrix& y) {
  // q [V×L]: label l's expected word distribution (half own words, half cluster topic),
  // idf-weighted like the features.
  const int64_t L = cfg.labels;
  std::vector<float> q(static_cast<size_t>(cfg.features * L), 0.0f);
  for (int64_t l = 0; l < L; ++l) {
    for (int k = 0; k < kOwnWords; ++k)
      q[voc.own_words[static_cast<size_t>(l * kOwnWords + k)] * L + l] += 0.5f / kOwnWords;
    const uint32_t c = s.cluster_of[static_cast<size_t>(l)];
    const auto& cum = voc.topic_cum[c];
    for (size_t k = 0; k < cum.size(); ++k)
      q[voc.topic_words[c][k] * L + l] +=
          static_cast<float>(0.5 * (cum[k] - (k ? cum[k - 1] : 0.0)) / cum.back());
  }
  for (int64_t w = 0; w < cfg.features; ++w)
    for (int64_t l = 0; l < L; ++l)
      q[static_cast<size_t>(w * L + l)] *= idf[static_cast<size_t>(w)];
  return precision_at_1(y, L, [&](int64_t i, float* scores) {
    std::fill(scores, scores + L, 0.0f);
    for (int64_t k = 0; k < x.row_nnz(i); ++k) {
      const float v = x.row_values(i)[k];
      const float* qw = q.data() + static_cast<size_t>(x.row_indices(i)[k]) * L;
      for (int64_t l = 0; l < L; ++l) scores[l] += v * qw[l];
    }
  });
}

}  // namespace

void SynthConfig::resolve() {
  if (format != "dense" && format != "sparse")
    throw_input("synth: --format must be 'dense' or 'sparse', got '{}'", format);
  if (features == 0) features = format == "dense" ? 256 : 5000;
  if (noise < 0) noise = format == "dense" ? 1.5 : 0.85;
  if (max_labels == 0) max_labels = static_cast<int64_t>(std::ceil(3.0 * labels_per_point));
  if (train < 1) throw_input("synth: --train must be >= 1, got {}", train);
  if (test < 0) throw_input("synth: --test must be >= 0, got {}", test);
  if (labels < 1 || labels > int64_t{UINT32_MAX})
    throw_input("synth: --labels must be in [1, 2^32), got {}", labels);
  if (features < 1 || features > int64_t{UINT32_MAX})
    throw_input("synth: --features must be in [1, 2^32), got {}", features);
  if (clusters < 1 || clusters > labels)
    throw_input("synth: --clusters must be in [1, labels = {}], got {}", labels, clusters);
  if (!(alpha >= 0 && alpha <= 10)) throw_input("synth: --alpha must be in [0, 10], got {}", alpha);
  if (!(labels_per_point >= 1 && labels_per_point <= static_cast<double>(labels)))
    throw_input("synth: --labels-per-point must be in [1, labels = {}], got {}", labels,
                labels_per_point);
  if (max_labels < 1) throw_input("synth: --max-labels must be >= 1, got {}", max_labels);
  if (!(noise >= 0 && noise < 1e6) || (format == "sparse" && noise > 1))
    throw_input("synth: --noise must be >= 0 (and <= 1 for sparse), got {}", noise);
  if (nnz < 1) throw_input("synth: --nnz must be >= 1, got {}", nnz);
}

SynthData generate_synthetic(const SynthConfig& cfg_in) {
  SynthConfig cfg = cfg_in;
  cfg.resolve();
  Rng rng(cfg.seed);
  const Structure s = make_structure(cfg, rng);
  PointLabels train_y = draw_labels(s, cfg, cfg.train, kTrainLabels);
  cover_all_labels(train_y, s, cfg.labels, rng);
  const PointLabels test_y = draw_labels(s, cfg, cfg.test, kTestLabels);

  SynthData out;
  out.train.source = "synthetic train";
  out.test.source = "synthetic test";
  out.train.labels = CsrMatrix::from_rows(train_y.labels, cfg.labels);
  out.test.labels = CsrMatrix::from_rows(test_y.labels, cfg.labels);
  out.popularity_p1 = popularity_p1(out.train.labels, out.test.labels);

  if (cfg.format == "dense") {
    const DenseMatrix proto = dense_prototypes(cfg, s, rng);
    out.train.features = dense_features(cfg, proto, out.train.labels, kTrainFeatures);
    out.test.features = dense_features(cfg, proto, out.test.labels, kTestFeatures);
    out.oracle_p1 = dense_oracle_p1(out.test.dense_features(), proto, out.test.labels);
  } else {
    const Vocabulary voc = make_vocabulary(cfg, rng);
    CsrMatrix xtr = sparse_counts(cfg, s, voc, out.train.labels, kTrainFeatures);
    CsrMatrix xte = sparse_counts(cfg, s, voc, out.test.labels, kTestFeatures);
    const std::vector<float> idf = inverse_document_frequency(xtr);
    tfidf(xtr, idf);
    tfidf(xte, idf);
    out.oracle_p1 = sparse_oracle_p1(cfg, s, voc, idf, xte, out.test.labels);
    out.train.features = std::move(xtr);
    out.test.features = std::move(xte);
  }
  return out;
}

}  // namespace xmc
