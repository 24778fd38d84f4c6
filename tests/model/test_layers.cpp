// Encoder layers: analytical gradients (float, from the library) against central finite
// differences (eps 1e-6) of double-precision reference forwards on the same weights.
// The reference forward is also compared with the library's forward.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <set>

#include "core/context.h"
#include "core/error.h"
#include "model/dropout.h"
#include "model/linear.h"
#include "model/sparse_linear.h"
#include "model_test_util.h"
#include "ops/dense.h"
#include "ops/encoder.h"

using namespace xmc;
using namespace xmc::test;

namespace {

// Reference dense layer: L = Σ R ⊙ act(x·W + b), x [B×in], W [in×out].
double ref_linear_loss(const std::vector<double>& x, const std::vector<double>& w,
                       const std::vector<double>& b, const std::vector<double>& r, int64_t bs,
                       int64_t in, int64_t out, bool relu, std::vector<double>* h = nullptr) {
  double loss = 0;
  if (h) h->assign(static_cast<size_t>(bs * out), 0.0);
  for (int64_t i = 0; i < bs; ++i)
    for (int64_t j = 0; j < out; ++j) {
      double z = b[j];
      for (int64_t k = 0; k < in; ++k) z += x[i * in + k] * w[k * out + j];
      if (relu) z = std::max(z, 0.0);
      if (h) (*h)[i * out + j] = z;
      loss += r[i * out + j] * z;
    }
  return loss;
}

int count_mismatches(std::span<const float> analytical, const std::vector<double>& numerical,
                     const char* what) {
  int bad = 0;
  for (size_t i = 0; i < numerical.size(); ++i)
    if (!close(analytical[i], numerical[i], 1e-4, 1e-5)) {
      ++bad;
      UNSCOPED_INFO(what << "[" << i << "]: analytical " << analytical[i] << " numerical "
                         << numerical[i]);
    }
  return bad;
}

// Values exactly representable as float, so the double reference sees the library's numbers.
std::vector<double> float_exact(Rng& rng, size_t n, double lo, double hi) {
  auto v = random_vector(rng, n, lo, hi);
  for (auto& x : v) x = static_cast<float>(x);
  return v;
}

}  // namespace

TEST_CASE("linear layer: dW, db, dx match finite differences (none and relu)") {
  for (const bool relu : {false, true}) {
    INFO("relu = " << relu);
    const int64_t bs = 3, in = 5, out = 4;
    Context ctx;
    Rng init(1), data(3);
    OptimizerConfig opt{.type = OptimizerType::sgd};
    Linear layer(ctx, in, out, relu ? Activation::relu : Activation::none, 0.0, opt, init);
    auto x = float_exact(data, bs * in, -1, 1);
    auto w = float_exact(data, in * out, -1, 1);
    auto b = float_exact(data, out, -0.5, 0.5);
    auto r = float_exact(data, bs * out, -1, 1);
    Matrix W = layer.weight();
    for (int64_t i = 0; i < in * out; ++i) W.data[i] = static_cast<float>(w[i]);
    for (int64_t j = 0; j < out; ++j) layer.bias()[j] = static_cast<float>(b[j]);

    auto xf = to_float(x);
    ConstMatrix h = layer.forward(ConstMatrix{xf.data(), bs, in}, nullptr, true);
    std::vector<double> h_ref;
    ref_linear_loss(x, w, b, r, bs, in, out, relu, &h_ref);
    for (int64_t i = 0; i < bs * out; ++i) REQUIRE(h.data[i] == Approx(h_ref[i]).margin(1e-6));
    if (relu) {
      const auto zeros = std::count(h_ref.begin(), h_ref.end(), 0.0);
      CHECK(zeros > 0);  // the relu mask is exercised
    }

    auto rf = to_float(r);
    ConstMatrix dx = layer.backward(ConstMatrix{rf.data(), bs, out}, true);
    auto f = [&] { return ref_linear_loss(x, w, b, r, bs, in, out, relu); };
    auto gw = numerical_gradient(f, w);
    auto gb = numerical_gradient(f, b);
    auto gx = numerical_gradient(f, x);
    ConstMatrix dW = layer.weight_grad();
    CHECK(count_mismatches({dW.data, static_cast<size_t>(in * out)}, gw, "dW") == 0);
    CHECK(count_mismatches(layer.bias_grad(), gb, "db") == 0);
    REQUIRE(dx.rows == bs);
    REQUIRE(dx.cols == in);
    CHECK(count_mismatches({dx.data, static_cast<size_t>(bs * in)}, gx, "dx") == 0);
  }
}

TEST_CASE("relu backward matches finite differences away from 0") {
  std::vector<float> h = {-0.5f, 0.3f, 0.0f, 2.0f};
  ops::relu_inplace(Matrix{h.data(), 1, 4});
  CHECK(h[0] == 0.0f);
  CHECK(h[1] == 0.3f);
  std::vector<float> dh = {1.0f, 2.0f, 3.0f, -4.0f}, dz(4);
  ops::activation_grad(Context{}, true, ConstMatrix{h.data(), 1, 4}, ConstMatrix{dh.data(), 1, 4},
                       Matrix{dz.data(), 1, 4});
  const std::vector<double> z = {-0.5, 0.3, -0.1, 2.0};  // pre-activations (h[2] came from ≤ 0)
  for (size_t i = 0; i < z.size(); ++i) {
    const double eps = 1e-6;
    const double num = dh[i] * (std::max(z[i] + eps, 0.0) - std::max(z[i] - eps, 0.0)) / (2 * eps);
    CHECK(dz[i] == Approx(num).margin(1e-6));
  }
  CHECK_THROWS_AS(parse_enum<Activation>("tanh", "activation"), InputError);
}

TEST_CASE("linear layer: inverted dropout zeroes about p of the inputs and scales the rest") {
  const int64_t bs = 64, in = 256, out = 2;
  Context ctx;
  Rng init(1), rng(9);
  Linear layer(ctx, in, out, Activation::none, 0.25, OptimizerConfig{}, init);
  // W = identity on the first two inputs only is not enough to see every input; instead
  // look at dL/dx: with dh = 1 and all weights 1, dx = Σ_j W[k,j]·mask = 2·mask.
  Matrix W = layer.weight();
  std::fill(W.data, W.data + in * out, 1.0f);
  std::vector<float> x(bs * in, 1.0f), dh(bs * out, 1.0f), mask(bs * in);
  dropout_mask(mask.data(), bs * in, layer.dropout(), rng);  // the mask the Encoder draws
  ConstMatrix h = layer.forward(ConstMatrix{x.data(), bs, in}, mask.data(), true);
  ConstMatrix dx = layer.backward(ConstMatrix{dh.data(), bs, out}, true);
  int64_t dropped = 0;
  double h_sum = 0;
  for (int64_t i = 0; i < bs * in; ++i) {
    if (dx.data[i] == 0.0f) {
      ++dropped;
    } else {
      REQUIRE(dx.data[i] == Approx(2.0 / 0.75));
    }
  }
  for (int64_t i = 0; i < bs; ++i) h_sum += h(i, 0);
  const double frac = static_cast<double>(dropped) / (bs * in);
  CHECK(frac > 0.22);
  CHECK(frac < 0.28);
  // Inverted scaling keeps the expected activation: mean h ≈ in.
  CHECK(h_sum / bs == Approx(static_cast<double>(in)).epsilon(0.03));
  // Evaluation: no dropout.
  ConstMatrix he = layer.forward(ConstMatrix{x.data(), bs, in}, nullptr, false);
  for (int64_t i = 0; i < bs; ++i) REQUIRE(he(i, 0) == Approx(static_cast<double>(in)));
}

namespace {

struct SparseCase {
  int64_t bs = 3, d = 20, out = 4;
  std::vector<std::vector<uint32_t>> idx = {{1, 5, 7}, {5, 12}, {0, 7, 12, 19}};
  std::vector<std::vector<double>> val;
  CsrMatrix x;
  CsrMatrix staged;      // x as the Encoder stages it for the layer (dropout applied) ...
  CsrByColumn staged_t;  // ... and grouped by column
  SparseCase() {
    Rng data(5);
    std::vector<std::vector<float>> vf;
    for (auto& row : idx) {
      val.push_back(float_exact(data, row.size(), -1, 1));
      vf.push_back(to_float(val.back()));
    }
    x = make_csr(idx, d, &vf);
  }
  // L = Σ R ⊙ act(x·W + b)
  double loss(const std::vector<double>& w, const std::vector<double>& b,
              const std::vector<double>& r, bool relu) const {
    double l = 0;
    for (int64_t i = 0; i < bs; ++i)
      for (int64_t j = 0; j < out; ++j) {
        double z = b[j];
        for (size_t k = 0; k < idx[i].size(); ++k) z += val[i][k] * w[idx[i][k] * out + j];
        if (relu) z = std::max(z, 0.0);
        l += r[i * out + j] * z;
      }
    return l;
  }
  // The layer's forward and backward on x, staged on the host (CPU Context) as the Encoder
  // stages a batch.
  ConstMatrix forward(SparseLinear& layer, bool training, Rng& rng) {
    layer.prepare_input(x, training, rng, staged, staged_t);
    return layer.forward(gpu::DeviceCsrValues{staged.indptr.data(), staged.indices.data(),
                                              staged.values.data(), staged.rows, staged.cols},
                         training);
  }
  void backward(SparseLinear& layer, ConstMatrix dh) {
    layer.backward(
        dh, gpu::DeviceCsrByColumn{staged_t.cols.data(), staged_t.start.data(),
                                   staged_t.rows.data(), staged_t.values.data(), staged_t.count()});
  }
};

}  // namespace

TEST_CASE("sparse_linear layer: dW on the touched rows and db match finite differences") {
  SparseCase c;
  Context ctx;
  Rng init(1), rng(2), data(4);
  SparseLinear layer(ctx, c.d, c.out, Activation::relu, 0.0,
                     OptimizerConfig{.type = OptimizerType::adam}, init);
  std::vector<double> w(c.d * c.out), b = float_exact(data, c.out, -0.2, 0.2);
  Matrix W = layer.weight();
  for (int64_t i = 0; i < c.d * c.out; ++i) w[i] = W.data[i];
  for (int64_t j = 0; j < c.out; ++j) layer.bias()[j] = static_cast<float>(b[j]);
  auto r = float_exact(data, c.bs * c.out, -1, 1);
  auto rf = to_float(r);

  c.forward(layer, true, rng);
  c.backward(layer, ConstMatrix{rf.data(), c.bs, c.out});
  const std::vector<uint32_t> expect_rows = {0, 1, 5, 7, 12, 19};
  auto touched = layer.touched_rows();
  REQUIRE(std::vector<uint32_t>(touched.begin(), touched.end()) == expect_rows);

  auto f = [&] { return c.loss(w, b, r, true); };
  auto gw = numerical_gradient(f, w);
  auto gb = numerical_gradient(f, b);
  ConstMatrix g = layer.row_grad();
  int bad = 0;
  for (int64_t row = 0; row < c.d; ++row) {
    const auto it = std::find(expect_rows.begin(), expect_rows.end(), static_cast<uint32_t>(row));
    for (int64_t j = 0; j < c.out; ++j) {
      const double num = gw[row * c.out + j];
      if (it == expect_rows.end()) {
        if (num != 0.0) ++bad;  // untouched rows have no gradient
        continue;
      }
      const float ana = g(it - expect_rows.begin(), j);
      if (!close(ana, num, 1e-4, 1e-5)) {
        ++bad;
        UNSCOPED_INFO("dW[" << row << "," << j << "]: analytical " << ana << " numerical " << num);
      }
    }
  }
  CHECK(bad == 0);
  CHECK(count_mismatches(layer.bias_grad(), gb, "db") == 0);
}

TEST_CASE("sparse_linear update leaves rows outside the batch bit-identical") {
  for (auto type : {OptimizerType::sgd, OptimizerType::adam, OptimizerType::adamw}) {
    INFO("optimizer " << to_string(type));
    SparseCase c;
    Context ctx;
    Rng init(1), rng(2);
    OptimizerConfig opt{.type = type, .momentum = 0.9, .weight_decay = 0.01};
    SparseLinear layer(ctx, c.d, c.out, Activation::none, 0.0, opt, init);
    Matrix W = layer.weight();
    const std::vector<float> before(W.data, W.data + c.d * c.out);
    std::vector<float> dh(c.bs * c.out, 0.5f);
    for (int step = 1; step <= 3; ++step) {
      c.forward(layer, true, rng);
      c.backward(layer, ConstMatrix{dh.data(), c.bs, c.out});
      layer.apply_update(0.1, step);
    }
    const std::set<uint32_t> touched = {0, 1, 5, 7, 12, 19};
    auto st = layer.state("enc");
    const float* opt1 = nullptr;
    for (auto& t : st)
      if (t.name == "enc/opt1") opt1 = std::get<float*>(t.data);
    REQUIRE(opt1 != nullptr);
    for (int64_t row = 0; row < c.d; ++row) {
      const bool changed =
          std::memcmp(W.row(row), before.data() + row * c.out, c.out * sizeof(float)) != 0;
      CHECK(changed == (touched.count(static_cast<uint32_t>(row)) > 0));
      if (!touched.count(static_cast<uint32_t>(row)))
        for (int64_t j = 0; j < c.out; ++j) CHECK(opt1[row * c.out + j] == 0.0f);
    }
  }
}

TEST_CASE("sparse_linear dropout removes entries from the touched set") {
  SparseCase c;
  Context ctx;
  Rng init(1), rng(3);
  SparseLinear layer(ctx, c.d, c.out, Activation::none, 0.5, OptimizerConfig{}, init);
  std::vector<float> dh(c.bs * c.out, 1.0f);
  size_t min_touched = 100;
  for (int t = 0; t < 20; ++t) {
    c.forward(layer, true, rng);
    c.backward(layer, ConstMatrix{dh.data(), c.bs, c.out});
    min_touched = std::min(min_touched, layer.touched_rows().size());
  }
  CHECK(min_touched < 6);  // with p = 0.5, some draw drops a feature everywhere
}
