// Encoder end-to-end: d loss / d weights through two layers against central finite
// differences (eps 1e-6) of a double-precision reference on the same weights. The
// encoder's gradients are read back from one plain SGD step with lr = 1 (p_before - p_after).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>

#include "core/context.h"
#include "core/error.h"
#include "model/encoder.h"
#include "model_test_util.h"

using namespace xmc;
using namespace xmc::test;

namespace {

constexpr int64_t kB = 3, kD = 12, kH = 6, kO = 3;

Batch make_batch(bool sparse) {
  Batch b;
  b.ids = {0, 1, 2};
  b.sparse = sparse;
  Rng data(21);
  if (sparse) {
    std::vector<std::vector<uint32_t>> idx = {{0, 3, 4}, {3, 9}, {1, 4, 10, 11}};
    std::vector<std::vector<float>> val;
    for (auto& row : idx) val.push_back(to_float(random_vector(data, row.size(), 0.2, 1.5)));
    b.sparse_x = make_csr(idx, kD, &val);
  } else {
    b.dense_x = DenseMatrix(kB, kD);
    for (auto& v : b.dense_x.values) v = static_cast<float>(2 * data.uniform() - 1);
  }
  b.labels = make_csr({{0}, {1}, {}}, 5);
  return b;
}

std::vector<double> dense_input(const Batch& b) {
  std::vector<double> x(kB * kD, 0.0);
  if (b.sparse) {
    for (int64_t r = 0; r < kB; ++r)
      for (int64_t k = b.sparse_x.indptr[r]; k < b.sparse_x.indptr[r + 1]; ++k)
        x[r * kD + b.sparse_x.indices[k]] = b.sparse_x.values[k];
  } else {
    for (int64_t i = 0; i < kB * kD; ++i) x[i] = b.dense_x.values[i];
  }
  return x;
}

struct Params {
  std::vector<double> w1, b1, w2, b2;
};

// L = Σ R ⊙ (relu(x·W1 + b1)·W2 + b2)
double ref_loss(const std::vector<double>& x, const Params& p, const std::vector<double>& r) {
  double loss = 0;
  for (int64_t i = 0; i < kB; ++i) {
    double h1[kH];
    for (int64_t j = 0; j < kH; ++j) {
      double z = p.b1[j];
      for (int64_t k = 0; k < kD; ++k) z += x[i * kD + k] * p.w1[k * kH + j];
      h1[j] = std::max(z, 0.0);
    }
    for (int64_t j = 0; j < kO; ++j) {
      double z = p.b2[j];
      for (int64_t k = 0; k < kH; ++k) z += h1[k] * p.w2[k * kO + j];
      loss += r[i * kO + j] * z;
    }
  }
  return loss;
}

std::map<std::string, TensorRef> by_name(Encoder& e) {
  std::map<std::string, TensorRef> m;
  for (auto& t : e.state()) m.emplace(t.name, t);
  return m;
}

std::vector<double> read(const TensorRef& t) {
  const float* p = std::get<float*>(t.data);
  return std::vector<double>(p, p + t.numel());
}

void check_two_layers(bool sparse) {
  INFO((sparse ? "sparse input" : "dense input"));
  Context ctx;
  const std::vector<EncoderLayerConfig> layers = {
      {sparse ? "sparse_linear" : "linear", kH, "relu", 0.0}, {"linear", kO, "none", 0.0}};
  OptimizerConfig sgd{.type = OptimizerType::sgd, .lr = 1.0};
  Encoder enc(ctx, layers, kD, sparse, sgd, 7);
  REQUIRE(enc.output_dim() == kO);
  auto st = by_name(enc);
  // Non-zero biases so they matter.
  Rng data(8);
  for (const char* name : {"encoder/0/bias", "encoder/1/bias"}) {
    float* p = std::get<float*>(st.at(name).data);
    for (int64_t j = 0; j < st.at(name).numel(); ++j)
      p[j] = static_cast<float>(0.2 * data.uniform() - 0.05);
  }
  Params before{read(st.at("encoder/0/weight")), read(st.at("encoder/0/bias")),
                read(st.at("encoder/1/weight")), read(st.at("encoder/1/bias"))};
  const Batch batch = make_batch(sparse);
  const auto x = dense_input(batch);
  auto r = random_vector(data, kB * kO, -1, 1);
  for (auto& v : r) v = static_cast<float>(v);

  Rng rng(3);
  ConstMatrix h = enc.forward(batch, true, rng);
  REQUIRE(h.rows == kB);
  REQUIRE(h.cols == kO);
  // The forward equals the reference: L(h) with R = unit vectors picks single entries.
  for (int64_t i = 0; i < kB; ++i)
    for (int64_t j = 0; j < kO; ++j) {
      std::vector<double> e(kB * kO, 0.0);
      e[i * kO + j] = 1.0;
      REQUIRE(h(i, j) == Approx(ref_loss(x, before, e)).margin(1e-5));
    }
  const auto rf = to_float(r);
  enc.backward_update(ConstMatrix{rf.data(), kB, kO}, 1.0, 1);

  Params num = before;
  Params work = before;
  auto f = [&] { return ref_loss(x, work, r); };
  num.w1 = numerical_gradient(f, work.w1);
  num.b1 = numerical_gradient(f, work.b1);
  num.w2 = numerical_gradient(f, work.w2);
  num.b2 = numerical_gradient(f, work.b2);

  auto compare = [&](const char* name, const std::vector<double>& b0,
                     const std::vector<double>& numerical) {
    const auto after = read(st.at(name));
    int bad = 0;
    double max_abs = 0;
    for (size_t i = 0; i < b0.size(); ++i) {
      const double g = b0[i] - after[i];  // SGD, lr = 1: p_after = p_before - g
      max_abs = std::max(max_abs, std::abs(numerical[i]));
      if (!close(g, numerical[i], 1e-4, 1e-6)) {
        ++bad;
        UNSCOPED_INFO(name << "[" << i << "]: analytical " << g << " numerical " << numerical[i]);
      }
    }
    CHECK(bad == 0);
    CHECK(max_abs > 1e-3);  // the check is not vacuous
  };
  compare("encoder/0/weight", before.w1, num.w1);
  compare("encoder/0/bias", before.b1, num.b1);
  compare("encoder/1/weight", before.w2, num.w2);
  compare("encoder/1/bias", before.b2, num.b2);
}

}  // namespace

TEST_CASE("encoder sparse_linear(relu) -> linear: weight gradients match finite differences") {
  check_two_layers(true);
}

TEST_CASE(
    "encoder linear(relu) -> linear on dense input: weight gradients match finite differences") {
  check_two_layers(false);
}

TEST_CASE("encoder state names, shapes and ledger accounting") {
  Context ctx;
  OptimizerConfig adam{.type = OptimizerType::adam};
  Encoder enc(ctx, {{"sparse_linear", kH, "relu", 0.1}, {"linear", kO, "none", 0.0}}, kD, true,
              adam, 1);
  auto st = by_name(enc);
  CHECK(st.at("encoder/0/weight").shape == std::vector<int64_t>{kD, kH});
  CHECK(st.at("encoder/0/bias").shape == std::vector<int64_t>{kH});
  CHECK(st.at("encoder/0/opt1").shape == std::vector<int64_t>{kD + 1, kH});
  CHECK(st.at("encoder/0/opt2").shape == std::vector<int64_t>{kD + 1, kH});
  CHECK(st.at("encoder/1/weight").shape == std::vector<int64_t>{kH, kO});
  CHECK(std::holds_alternative<int64_t*>(st.at("encoder/1/step").data));
  CHECK(st.size() == 10);
  const int64_t params = (kD + 1) * kH + (kH + 1) * kO;
  CHECK(ctx.ledger().current(MemTag::weights) == params * 4);
  CHECK(ctx.ledger().current(MemTag::optimizer) == 2 * params * 4);
  // Weights are initialised in ±1/sqrt(fan_in), not all equal.
  const auto w = read(st.at("encoder/0/weight"));
  const double bound = 1.0 / std::sqrt(static_cast<double>(kD));
  CHECK(std::all_of(w.begin(), w.end(), [&](double v) { return std::abs(v) <= bound; }));
  CHECK(*std::max_element(w.begin(), w.end()) > *std::min_element(w.begin(), w.end()));

  // A training step records activations and moves the step counter.
  Rng rng(1);
  const Batch batch = make_batch(true);
  enc.forward(batch, true, rng);
  std::vector<float> dh(kB * kO, 0.1f);
  enc.backward_update(ConstMatrix{dh.data(), kB, kO}, 1e-3, 1);
  CHECK(ctx.ledger().peak(MemTag::activations) > 0);
  CHECK(*std::get<int64_t*>(st.at("encoder/0/step").data) == 1);

  // sgd without momentum has no optimizer state.
  Context ctx2;
  Encoder plain(ctx2, {{"linear", 4, "none", 0.0}}, kD, false,
                OptimizerConfig{.type = OptimizerType::sgd}, 1);
  auto st2 = by_name(plain);
  CHECK(st2.count("encoder/0/opt1") == 0);
  CHECK(ctx2.ledger().current(MemTag::optimizer) == 0);
}

TEST_CASE("empty encoder on dense input is the identity") {
  Context ctx;
  Encoder enc(ctx, {}, kD, false, OptimizerConfig{}, 1);
  CHECK(enc.empty());
  CHECK(enc.output_dim() == kD);
  const Batch batch = make_batch(false);
  Rng rng(1);
  ConstMatrix h = enc.forward(batch, true, rng);
  REQUIRE(h.rows == kB);
  for (int64_t i = 0; i < kB * kD; ++i) CHECK(h.data[i] == batch.dense_x.values[i]);
  std::vector<float> dh(kB * kD, 1.0f);
  enc.backward_update(ConstMatrix{dh.data(), kB, kD}, 0.1, 1);  // nothing to learn
  CHECK(enc.state().empty());
}

TEST_CASE("encoder config validation names the layer and the problem") {
  Context ctx;
  OptimizerConfig opt;
  using L = std::vector<EncoderLayerConfig>;
  auto make = [&](const L& layers, bool sparse) { Encoder e(ctx, layers, kD, sparse, opt, 0); };
  CHECK_THROWS_AS(make({}, true), InputError);
  CHECK_THROWS_WITH(make({{"linear", 4, "relu", 0.0}}, true),
                    Catch::Matchers::Contains("sparse input needs type sparse_linear"));
  CHECK_THROWS_WITH(make({{"sparse_linear", 4, "relu", 0.0}}, false),
                    Catch::Matchers::Contains("sparse_linear needs sparse input"));
  CHECK_THROWS_WITH(
      make({{"sparse_linear", 4, "relu", 0.0}, {"sparse_linear", 2, "relu", 0.0}}, true),
      Catch::Matchers::Contains("encoder layer 1"));
  CHECK_THROWS_WITH(make({{"linear", 0, "relu", 0.0}}, false),
                    Catch::Matchers::Contains("out = 0"));
  CHECK_THROWS_WITH(make({{"linear", 4, "relu", 1.0}}, false),
                    Catch::Matchers::Contains("dropout = 1"));
  CHECK_THROWS_WITH(make({{"linear", 4, "tanh", 0.0}}, false),
                    Catch::Matchers::Contains("'tanh'") && Catch::Matchers::Contains("none, relu"));
  CHECK_THROWS_WITH(make({{"conv", 4, "relu", 0.0}}, false),
                    Catch::Matchers::Contains("sparse_linear, linear"));
  CHECK_THROWS_AS(make({{"linear", 4, "tanh", 0.0}}, false), InputError);
}
