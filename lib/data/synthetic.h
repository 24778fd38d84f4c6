#pragma once
// Synthetic extreme multi-label data with known structure, deterministic by seed.
//
// Labels: popularity ∝ rank^-alpha (rank = a random permutation of the label ids); labels
// are dealt round-robin into `clusters` latent clusters. A point draws a primary cluster
// (∝ the cluster's popularity mass) and, with probability 0.3, a secondary one; each of
// its k labels (k = 1 + Poisson(labels_per_point - 1), capped at max_labels) comes from
// the primary cluster with probability 0.7 (else the secondary), and inside the cluster
// ∝ popularity, so a label's marginal frequency stays ∝ rank^-alpha. Training labels never
// drawn are added to one training point of their own cluster (min. 1 point per label).
//
// dense features [N×D]: cluster prototype μ_c (unit); label prototype
//   p_l = normalise(μ_c + 0.7·ε_l); x = normalise(mean of its labels' p_l) + noise·g,
//   g ~ N(0, I/D) (|g| ≈ 1).
// sparse features [N×V] (V = features): bag of `nnz` words; each word with probability
//   `noise` from a Zipf background over the vocabulary, else from one of the point's
//   labels: half from the label's 5 own words, half from its cluster's topic words
//   (Zipf over 2V/C words). Values (1 + ln tf)·idf (idf from the training split), rows
//   L2-normalised: non-negative tf-idf-like features.
#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace xmc {

struct SynthConfig {
  int64_t train = 20000;
  int64_t test = 5000;
  int64_t labels = 2000;
  int64_t features = 0;  // 0: 256 (dense) or 5000 (sparse)
  int64_t clusters = 50;
  double alpha = 1.0;             // popularity exponent
  double labels_per_point = 3.0;  // mean labels per point (>= 1)
  int64_t max_labels = 0;         // 0: ceil(3 × labels_per_point)
  // dense: noise norm relative to the (unit) signal; sparse: fraction of background words.
  // < 0: 1.5 (dense) or 0.85 (sparse), where the oracle P@1 is about 0.87 / 0.84.
  double noise = -1;
  int64_t nnz = 60;  // sparse: words drawn per point
  uint64_t seed = 0;
  std::string format = "dense";  // dense | sparse

  // Fills the 0 defaults and checks bounds (InputError naming the option).
  void resolve();
  bool operator==(const SynthConfig&) const = default;
};

struct SynthData {
  Dataset train;
  Dataset test;
  // P@1 on the test split of the oracle that ranks labels by their true generating
  // similarity (dense: <x, p_l>; sparse: <x, idf-weighted word distribution of l>), and of
  // the constant prediction of the most frequent training label.
  double oracle_p1 = 0;
  double popularity_p1 = 0;
};

SynthData generate_synthetic(const SynthConfig& cfg);

}  // namespace xmc
