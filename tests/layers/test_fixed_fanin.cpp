// Backend `fixed_fanin`: equivalence with a dense layer under the same mask, finite
// differences (with and without the intermediate layer), rewiring invariants and
// determinism, ledger = analytic size, exact top-k, an end-to-end training run, input
// dropout, and which parameters adamw decays.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "layers/fixed_fanin.h"
#include "support/test_support.h"
#include "support/layer_support.h"

using namespace xmc;
using namespace xmc::test;

namespace {

// Double-precision model of the layer: u = relu(h·Pᵀ + c) (or h), z = sparse(u) + bias.
struct Ref {
  int64_t d = 0, m = 0, num_labels = 0, fan_in = 0;
  bool inter = false;
  std::vector<uint32_t> idx;
  std::vector<double> w, bias, p, c;

  std::vector<double> input(const std::vector<double>& h, int64_t batch) const {
    if (!inter) return h;
    std::vector<double> u(static_cast<size_t>(batch * m));
    for (int64_t i = 0; i < batch; ++i)
      for (int64_t k = 0; k < m; ++k) {
        double s = c[k];
        for (int64_t t = 0; t < d; ++t) s += h[i * d + t] * p[k * d + t];
        u[i * m + k] = std::max(0.0, s);
      }
    return u;
  }
  std::vector<double> logits(const std::vector<double>& h, int64_t batch) const {
    auto u = input(h, batch);
    std::vector<double> z(static_cast<size_t>(batch * num_labels));
    for (int64_t i = 0; i < batch; ++i)
      for (int64_t l = 0; l < num_labels; ++l) {
        double s = bias[l];
        for (int64_t j = 0; j < fan_in; ++j)
          s += w[l * fan_in + j] * u[i * m + idx[l * fan_in + j]];
        z[i * num_labels + l] = s;
      }
    return z;
  }
  double loss(const std::string& name, const std::vector<double>& h, const Batch& b) const {
    const int64_t batch = b.size();
    auto z = logits(h, batch);
    double total = 0.0, g = 0.0;
    for (int64_t i = 0; i < batch; ++i)
      for (int64_t l = 0; l < num_labels; ++l)
        total += ref_loss1(name, target(b, i, l), z[i * num_labels + l], &g);
    return total / static_cast<double>(batch);
  }
};

std::vector<float> floats_f(const std::vector<TensorRef>& ts, const std::string& name) {
  const auto& t = find(ts, name);
  const float* p = std::get<float*>(t.data);
  return {p, p + t.numel()};
}
std::vector<uint32_t> indices(const std::vector<TensorRef>& ts) {
  const auto& t = find(ts, "output/indices");
  const uint32_t* p = std::get<uint32_t*>(t.data);
  return {p, p + t.numel()};
}

Ref snapshot(FixedFaninLayer& layer) {
  Ref r;
  auto st = layer.state();
  r.d = layer.input_dim();
  r.m = layer.fanin().input_width();
  r.num_labels = layer.num_labels();
  r.fan_in = layer.fanin().fan_in();
  r.idx = indices(st);
  r.w = floats(st, "output/weight");
  r.bias = floats(st, "output/bias");
  for (const auto& t : st)
    if (t.name == "output/intermediate/weight") r.inter = true;
  if (r.inter) {
    r.p = floats(st, "output/intermediate/weight");
    r.c = floats(st, "output/intermediate/bias");
  }
  return r;
}

LayerInit make_init(Context& ctx, int64_t d, int64_t num_labels, int64_t batch) {
  LayerInit init;
  init.ctx = &ctx;
  init.input_dim = d;
  init.num_labels = num_labels;
  init.batch_size = batch;
  init.optim.type = OptimizerType::sgd;
  init.optim.lr = 1.0;
  init.seed = 3;
  init.total_steps = 3000;
  return init;
}

std::vector<float> random_h(int64_t batch, int64_t d, uint64_t seed, double scale) {
  Rng rng(seed);
  std::vector<float> h(static_cast<size_t>(batch * d));
  for (auto& x : h) x = static_cast<float>(scale * rng.normal());
  return h;
}

const Batch kBatch = make_batch(7, {{1}, {0, 6}, {}, {2, 3, 5}});

}  // namespace

TEST_CASE("fixed fan-in equals a dense layer under the same mask") {
  const int64_t batch = 4, d = 9, num_labels = 7, f = 3;
  for (std::string loss : {"squared_hinge", "bce"}) {
    DYNAMIC_SECTION(loss) {
      Context ctx(Device::cpu, 2);
      LayerInit init = make_init(ctx, d, num_labels, batch);
      FixedFaninConfig cfg;
      cfg.fan_in = f;
      cfg.loss = parse_enum<LossType>(loss, "loss");
      cfg.chunk_size = 3;
      FixedFaninLayer layer(init, cfg);
      init.optim.type = OptimizerType::adam;
      init.optim.lr = 0.01;
      FixedFaninLayer adam_layer(init, cfg);
      const Ref r = snapshot(layer);
      // Same seed: same structure and initial weights.
      REQUIRE(snapshot(adam_layer).idx == r.idx);

      // The masked dense W [L×d] in double.
      std::vector<double> wd(static_cast<size_t>(num_labels * d), 0.0);
      for (int64_t l = 0; l < num_labels; ++l) {
        std::set<uint32_t> seen;
        for (int64_t j = 0; j < f; ++j) {
          const uint32_t k = r.idx[l * f + j];
          REQUIRE(k < d);
          REQUIRE(seen.insert(k).second);  // no duplicates within a label
          wd[l * d + k] = r.w[l * f + j];
        }
      }
      // Scale 3 so that squared hinge meets the margin for a good share of entries.
      auto hf = random_h(batch, d, 11, 3.0);
      std::vector<double> h(hf.begin(), hf.end());
      std::vector<double> z(static_cast<size_t>(batch * num_labels));
      for (int64_t i = 0; i < batch; ++i)
        for (int64_t l = 0; l < num_labels; ++l) {
          double s = r.bias[l];
          for (int64_t k = 0; k < d; ++k) s += h[i * d + k] * wd[l * d + k];
          z[i * num_labels + l] = s;
        }

      // Forward.
      std::vector<float> sc(static_cast<size_t>(batch * num_labels));
      layer.scores(ConstMatrix(hf.data(), batch, d), Matrix(sc.data(), batch, num_labels));
      for (size_t i = 0; i < sc.size(); ++i) CHECK(sc[i] == Approx(z[i]).margin(1e-5));

      // Dense gradients: G = dL/dz / B, dW = Gᵀ·h, db = Σ G, dh = G·W.
      std::vector<double> g(z.size());
      double loss_ref = 0.0;
      int64_t zeros = 0;
      for (int64_t i = 0; i < batch; ++i)
        for (int64_t l = 0; l < num_labels; ++l) {
          double gi = 0.0;
          loss_ref += ref_loss1(loss, target(kBatch, i, l), z[i * num_labels + l], &gi);
          g[i * num_labels + l] = gi / batch;
          zeros += gi == 0.0;
        }
      std::vector<float> dhf(static_cast<size_t>(batch * d));
      StepStats s = layer.train_step(kBatch, ConstMatrix(hf.data(), batch, d),
                                     Matrix(dhf.data(), batch, d), {1.0, 1});
      CHECK(s.loss == Approx(loss_ref / batch).epsilon(1e-5));
      CHECK(s.grads == batch * num_labels);
      CHECK(s.zero_grads == zeros);
      if (loss == "squared_hinge") CHECK(zeros > 0);
      if (loss == "bce") CHECK(zeros == 0);

      std::vector<double> dw(wd.size(), 0.0), db(static_cast<size_t>(num_labels), 0.0);
      for (int64_t i = 0; i < batch; ++i)
        for (int64_t l = 0; l < num_labels; ++l) {
          db[l] += g[i * num_labels + l];
          for (int64_t k = 0; k < d; ++k) dw[l * d + k] += g[i * num_labels + l] * h[i * d + k];
        }
      auto after = layer.state();
      auto w_new = floats(after, "output/weight");
      auto b_new = floats(after, "output/bias");
      CHECK(indices(after) == r.idx);  // training alone never changes the structure
      for (int64_t l = 0; l < num_labels; ++l) {
        CHECK(r.bias[l] - b_new[l] == Approx(db[l]).margin(1e-5));
        for (int64_t j = 0; j < f; ++j)
          CHECK(r.w[l * f + j] - w_new[l * f + j] ==
                Approx(dw[l * d + r.idx[l * f + j]]).margin(1e-5));
      }
      for (int64_t i = 0; i < batch; ++i)
        for (int64_t k = 0; k < d; ++k) {
          double e = 0.0;
          for (int64_t l = 0; l < num_labels; ++l) e += g[i * num_labels + l] * wd[l * d + k];
          CHECK(dhf[i * d + k] == Approx(e).margin(1e-5));
        }

      // One Adam step of the masked dense layer, restricted to the structural non-zeros.
      std::vector<float> dh2(dhf.size());
      adam_layer.train_step(kBatch, ConstMatrix(hf.data(), batch, d),
                            Matrix(dh2.data(), batch, d), {0.01, 1});
      auto adam_after = adam_layer.state();
      auto wa = floats(adam_after, "output/weight");
      auto m1 = floats(adam_after, "output/weight_opt1");
      auto v1 = floats(adam_after, "output/weight_opt2");
      for (int64_t l = 0; l < num_labels; ++l)
        for (int64_t j = 0; j < f; ++j) {
          const double gi = dw[l * d + r.idx[l * f + j]];
          const double mm = 0.1 * gi, vv = 0.001 * gi * gi;
          const double mhat = mm / 0.1, vhat = vv / 0.001;
          const double expect = r.w[l * f + j] - 0.01 * mhat / (std::sqrt(vhat) + 1e-8);
          CHECK(m1[l * f + j] == Approx(mm).margin(1e-7));
          CHECK(v1[l * f + j] == Approx(vv).margin(1e-9));
          CHECK(wa[l * f + j] == Approx(expect).margin(1e-5));
        }
    }
  }
}

TEST_CASE("fixed fan-in gradients match finite differences") {
  const int64_t batch = 4, d = 5, num_labels = 7;
  for (std::string loss : {"squared_hinge", "bce"}) {
    for (int64_t inter : {0, 6}) {
      for (int64_t chunk : {7, 3}) {
        DYNAMIC_SECTION(loss << " intermediate " << inter << " chunk " << chunk) {
          Context ctx(Device::cpu, 2);
          LayerInit init = make_init(ctx, d, num_labels, batch);
          FixedFaninConfig cfg;
          cfg.fan_in = 3;
          cfg.projection = inter;
          cfg.loss = parse_enum<LossType>(loss, "loss");
          cfg.chunk_size = chunk;
          FixedFaninLayer layer(init, cfg);
          Ref r = snapshot(layer);
          // Non-zero bias of the intermediate layer, so its gradient is exercised around
          // a shifted ReLU; written through state().
          if (inter) {
            auto st = layer.state();
            float* c = std::get<float*>(find(st, "output/intermediate/bias").data);
            for (int64_t k = 0; k < inter; ++k) c[k] = 0.1f * static_cast<float>(k % 3) - 0.05f;
            r = snapshot(layer);
          }
          auto hf = random_h(batch, d, 17, 1.0);
          std::vector<double> h(hf.begin(), hf.end());
          auto f = [&] { return r.loss(loss, h, kBatch); };
          const double ref = f();
          std::vector<float> dhf(static_cast<size_t>(batch * d));
          StepStats s = layer.train_step(kBatch, ConstMatrix(hf.data(), batch, d),
                                         Matrix(dhf.data(), batch, d), {1.0, 1});
          CHECK(s.loss == Approx(ref).epsilon(1e-4));
          const Ref after = snapshot(layer);
          for (size_t i = 0; i < r.w.size(); ++i)
            check_close(r.w[i] - after.w[i], fd(r.w, i, f), "dW[" + std::to_string(i) + "]");
          for (size_t i = 0; i < r.bias.size(); ++i)
            check_close(r.bias[i] - after.bias[i], fd(r.bias, i, f), "db[" + std::to_string(i) + "]");
          for (size_t i = 0; i < r.p.size(); ++i)
            check_close(r.p[i] - after.p[i], fd(r.p, i, f), "dP[" + std::to_string(i) + "]");
          for (size_t i = 0; i < r.c.size(); ++i)
            check_close(r.c[i] - after.c[i], fd(r.c, i, f), "dc[" + std::to_string(i) + "]");
          for (size_t i = 0; i < h.size(); ++i)
            check_close(dhf[i], fd(h, i, f), "dh[" + std::to_string(i) + "]");
        }
      }
    }
  }
}

namespace {

// A layer with Adam state after a few training steps: L=200 labels, F=8 of m=50 inputs.
struct Trained {
  Context ctx;
  std::unique_ptr<FixedFaninLayer> layer;
  Trained(int threads, uint64_t seed, double fraction = 0.1) : ctx(Device::cpu, threads) {
    const int64_t batch = 16, d = 50, num_labels = 200;
    LayerInit init = make_init(ctx, d, num_labels, batch);
    init.seed = seed;
    init.optim.type = OptimizerType::adam;
    init.optim.lr = 0.01;
    FixedFaninConfig cfg;
    cfg.fan_in = 8;
    cfg.loss = LossType::bce;  // every slot gets a gradient, so every moment is non-zero
    cfg.rewire.fraction = fraction;
    cfg.chunk_size = 64;
    layer = std::make_unique<FixedFaninLayer>(init, cfg);
    std::vector<std::vector<uint32_t>> pos;
    for (uint32_t i = 0; i < batch; ++i) pos.push_back({(i * 13) % 200, (i * 7 + 5) % 200});
    for (auto& p : pos) std::sort(p.begin(), p.end());
    Batch b = make_batch(num_labels, pos);
    std::vector<float> dh(static_cast<size_t>(batch * d));
    for (int64_t step = 1; step <= 3; ++step) {
      auto h = random_h(batch, d, 100 + static_cast<uint64_t>(step), 1.0);
      layer->train_step(b, ConstMatrix(h.data(), batch, d), Matrix(dh.data(), batch, d),
                        {0.01, step});
    }
  }
};

}  // namespace

TEST_CASE("rewiring prunes the globally smallest weights and regrows unused inputs") {
  Trained t(2, 5);
  FixedFaninLayer& layer = *t.layer;
  const int64_t num_labels = 200, f = 8, m = 50;
  auto before = layer.state();
  const auto idx0 = indices(before);
  const auto w0 = floats_f(before, "output/weight");
  const auto s10 = floats_f(before, "output/weight_opt1");
  const auto s20 = floats_f(before, "output/weight_opt2");
  const auto b0 = floats_f(before, "output/bias");
  for (float v : s10) REQUIRE(v != 0.0f);

  // Expected: the 160 slots (10% of 1600) with the smallest |w|.
  const int64_t k = 160;
  std::vector<int64_t> order(static_cast<size_t>(num_labels * f));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return std::make_pair(std::abs(w0[a]), a) < std::make_pair(std::abs(w0[b]), b);
  });
  std::set<int64_t> pruned(order.begin(), order.begin() + k);

  const RewireStats s = layer.rewire(1000);
  CHECK(s.pruned == k);
  CHECK(s.step == 1000);
  CHECK(s.seconds >= 0.0);
  auto after = layer.state();
  const auto idx1 = indices(after);
  const auto w1 = floats_f(after, "output/weight");
  const auto s11 = floats_f(after, "output/weight_opt1");
  const auto s21 = floats_f(after, "output/weight_opt2");
  CHECK(floats_f(after, "output/bias") == b0);
  int64_t changed = 0;
  for (int64_t l = 0; l < num_labels; ++l) {
    std::set<uint32_t> row;
    std::set<uint32_t> old_row(idx0.begin() + l * f, idx0.begin() + (l + 1) * f);
    for (int64_t j = 0; j < f; ++j) {
      const int64_t slot = l * f + j;
      const uint32_t in = idx1[static_cast<size_t>(slot)];
      CHECK(in < m);
      row.insert(in);
      if (pruned.count(slot)) {
        ++changed;
        CHECK(w1[slot] == 0.0f);
        CHECK(s11[slot] == 0.0f);
        CHECK(s21[slot] == 0.0f);
        CHECK(old_row.count(in) == 0);  // a new input for this label
      } else {
        CHECK(in == idx0[slot]);
        CHECK(w1[slot] == w0[slot]);
        CHECK(s11[slot] == s10[slot]);
        CHECK(s21[slot] == s20[slot]);
      }
    }
    CHECK(static_cast<int64_t>(row.size()) == f);  // fan-in stays F, no duplicates
  }
  CHECK(changed == k);

  // A second round at once: the 160 regrown zeros are now the smallest and tie; exactly
  // k slots are pruned again, all of them among the zeros.
  const RewireStats s2 = layer.rewire(2000);
  CHECK(s2.pruned == k);
  auto again = layer.state();
  const auto idx2 = indices(again);
  int64_t moved = 0;
  for (size_t i = 0; i < idx2.size(); ++i) {
    if (idx2[i] != idx1[i]) {
      ++moved;
      CHECK(w1[i] == 0.0f);
    }
  }
  CHECK(moved == k);
}

TEST_CASE("rewiring is deterministic given seed and step, independent of threads") {
  Trained a(1, 9), b(2, 9), c(2, 9), other_seed(2, 10);
  a.layer->rewire(1000);
  b.layer->rewire(1000);
  c.layer->rewire(2000);
  other_seed.layer->rewire(1000);
  const auto ia = indices(a.layer->state());
  CHECK(ia == indices(b.layer->state()));
  CHECK(floats_f(a.layer->state(), "output/weight") == floats_f(b.layer->state(), "output/weight"));
  CHECK(ia != indices(c.layer->state()));
  CHECK(ia != indices(other_seed.layer->state()));
}

TEST_CASE("rewiring schedule: every interval steps until the fraction of the run") {
  Context ctx(Device::cpu, 1);
  LayerInit init = make_init(ctx, 20, 30, 4);
  FixedFaninConfig cfg;
  cfg.fan_in = 4;
  cfg.rewire = {100, 0.1, 0.5};
  FixedFaninLayer layer(init, cfg);
  std::vector<int64_t> due;
  for (int64_t s = 0; s <= 1000; ++s)
    if (layer.fanin().rewire_due(s, 1000)) due.push_back(s);
  CHECK(due == std::vector<int64_t>{100, 200, 300, 400, 500});
  // on_step applies it: step 100 rewires (10% of 120 slots), step 101 does not.
  TrainerView v;
  v.total_steps = 1000;
  v.step = 101;
  layer.on_step(v);
  CHECK(layer.fanin().last_rewire().pruned == 0);
  v.step = 100;
  layer.on_step(v);
  CHECK(layer.fanin().last_rewire().step == 100);
  CHECK(layer.fanin().last_rewire().pruned == 12);
  cfg.rewire.interval = 0;
  FixedFaninLayer never(init, cfg);
  CHECK_FALSE(never.fanin().rewire_due(100, 1000));
}

TEST_CASE("fixed fan-in memory in the ledger equals the analytic size") {
  struct Case {
    OptimizerType opt;
    double momentum;
    int64_t inter;
    double dropout;
  };
  for (const Case& c : {Case{OptimizerType::sgd, 0.0, 0, 0.0}, Case{OptimizerType::sgd, 0.9, 0, 0.2},
                        Case{OptimizerType::adam, 0.0, 96, 0.0}, Case{OptimizerType::adam, 0.0, 96, 0.1}}) {
    Context ctx(Device::cpu, 1);
    LayerInit init = make_init(ctx, 64, 1000, 32);
    init.optim.type = c.opt;
    init.optim.momentum = c.momentum;
    FixedFaninConfig cfg;
    cfg.fan_in = 16;
    cfg.projection = c.inter;
    cfg.dropout = c.dropout;
    cfg.chunk_size = 256;
    FixedFaninLayer layer(init, cfg);
    const int64_t states = c.opt == OptimizerType::adam ? 2 : (c.momentum != 0.0 ? 1 : 0);
    const int64_t m = c.inter ? c.inter : 64;
    const int64_t pn = c.inter ? c.inter * 64 + c.inter : 0;
    int64_t expected = 4 * ((1000 * 16 + 1000) * (1 + states) + 1000 * 16 + pn * (2 + states) +
                            m * 32 + 32 * 256 + 256 * 16 + 256);
    if (c.inter) expected += 4 * 2 * 32 * c.inter;
    if (c.dropout > 0) expected += 4 * 2 * 32 * 64;
    INFO("states " << states << " intermediate " << c.inter << " dropout " << c.dropout);
    CHECK(layer.analytic_bytes() == expected);
    CHECK(ctx.ledger().total_current() == expected);
    CHECK(ctx.ledger().current(MemTag::indices) == 4 * 1000 * 16);
    CHECK(ctx.ledger().current(MemTag::optimizer) == 4 * states * (1000 * 16 + 1000 + pn));
  }
}

TEST_CASE("fixed fan-in top-k equals the top-k of the full score matrix") {
  const int64_t batch = 6, d = 8, num_labels = 50;
  Context ctx(Device::cpu, 2);
  LayerInit init = make_init(ctx, d, num_labels, batch);
  FixedFaninConfig cfg;
  cfg.fan_in = 4;
  cfg.projection = 12;
  cfg.chunk_size = 7;
  FixedFaninLayer layer(init, cfg);
  auto h = random_h(batch, d, 2, 1.0);
  std::vector<float> all(static_cast<size_t>(batch * num_labels));
  layer.scores(ConstMatrix(h.data(), batch, d), Matrix(all.data(), batch, num_labels));
  TopK top = layer.topk(ConstMatrix(h.data(), batch, d), 5);
  for (int64_t i = 0; i < batch; ++i) {
    std::vector<int> order(static_cast<size_t>(num_labels));
    for (int l = 0; l < num_labels; ++l) order[l] = l;
    std::sort(order.begin(), order.end(), [&](int a, int b2) {
      return all[i * num_labels + a] > all[i * num_labels + b2];
    });
    for (int j = 0; j < 5; ++j) CHECK(top.row_labels(i)[j] == static_cast<uint32_t>(order[j]));
  }
}

TEST_CASE("fixed fan-in rejects a fan-in larger than its input") {
  Context ctx(Device::cpu, 1);
  LayerInit init = make_init(ctx, 16, 10, 4);
  FixedFaninConfig cfg;
  cfg.fan_in = 17;
  try {
    FixedFaninLayer layer(init, cfg);
    FAIL("expected an error");
  } catch (const InputError& e) {
    std::string msg = e.what();
    CHECK(msg.find("17") != std::string::npos);
    CHECK(msg.find("16") != std::string::npos);
  }
}

TEST_CASE("xmctrain train with fixed_fanin learns and resumes to the same metrics") {
  using namespace xmc::test;
  namespace fs = std::filesystem;
  using nlohmann::json;
  TempDir tmp;
  const fs::path data = tmp / "data";
  const std::string yaml =
      "name: ff\nseed: 7\ndevice: cpu\nthreads: 2\n"
      "data:\n"
      "  train: {features: " + (data / "trn_X.npy").string() +
      ", labels: " + (data / "trn_X_Y.txt").string() + "}\n"
      "  test: {features: " + (data / "tst_X.npy").string() +
      ", labels: " + (data / "tst_X_Y.txt").string() + "}\n"
      "  synth: {enabled: true, format: dense, train: 3000, test: 1000, labels: 300, "
      "features: 64, clusters: 20, seed: 3}\n"
      "model:\n"
      "  encoder: [{type: linear, out: 64, activation: relu, dropout: 0.1}]\n"
      "  output: {type: fixed_fanin, fan_in: 16, intermediate: 128, loss: squared_hinge, "
      "chunk_size: 128, rewire: {interval: 10, fraction: 0.1, until: 0.66}}\n"
      "optim:\n"
      "  encoder: {type: adam, lr: 0.01}\n"
      "  output: {type: adam, lr: 0.01}\n"
      "train: {epochs: 3, batch_size: 128, log_every_s: 100}\n"
      "eval: {k: 5}\n";
  write_file(tmp / "c.yaml", yaml);
  auto full = run_cli({"train", (tmp / "c.yaml").string(), "--out", (tmp / "a").string(), "--json"});
  INFO(full.err);
  REQUIRE(full.exit_code == 0);
  CHECK(full.err.find("rewired") != std::string::npos);
  CHECK(full.err.find("sparsity") != std::string::npos);
  json res = json::parse(full.out);
  const double p1 = res["metrics"]["P@1"].get<double>();
  // The popularity baseline on this problem is 0.196 (the generator logs it), the
  // oracle 0.653; this run reaches about 0.47 in 3 epochs (dense: about 0.55 in 5). The
  // floor asks for twice the baseline and 0.2 above it.
  INFO("P@1 " << p1);
  CHECK(p1 > 0.40);
  // Squared hinge: most output gradients are exactly zero, and metrics.jsonl says so.
  std::ifstream in(tmp / "a" / "metrics.jsonl");
  std::string line;
  int epochs = 0;
  while (std::getline(in, line)) {
    json j = json::parse(line);
    ++epochs;
    INFO("epoch " << epochs);
    CHECK(j["zero_grad_fraction"].get<double>() > 0.5);
  }
  CHECK(epochs == 3);

  // Interrupted after epoch 1 (rewiring has happened), resumed: same final metrics.
  auto part = run_cli({"train", (tmp / "c.yaml").string(), "--out", (tmp / "b").string(),
                       "--halt-after-epoch", "1"});
  INFO(part.err);
  REQUIRE(part.exit_code == 0);
  auto resumed = run_cli({"train", (tmp / "c.yaml").string(), "--out", (tmp / "b").string(),
                          "--resume", "--json"});
  INFO(resumed.err);
  REQUIRE(resumed.exit_code == 0);
  CHECK(res["metrics"] == json::parse(resumed.out)["metrics"]);
}

TEST_CASE("fixed fan-in input dropout zeroes the gradient of dropped inputs") {
  // bce: every output gradient is nonzero, and with L·F/d = 32 labels per input every
  // input gets a gradient — so exact zeros in dh come from dropout alone.
  const int64_t batch = 8, d = 1000, num_labels = 2000;
  for (double p : {0.0, 0.5}) {
    Context ctx(Device::cpu, 2);
    LayerInit init = make_init(ctx, d, num_labels, batch);
    FixedFaninConfig cfg;
    cfg.fan_in = 16;
    cfg.loss = LossType::bce;
    cfg.dropout = p;
    FixedFaninLayer layer(init, cfg);
    auto h = random_h(batch, d, 4, 1.0);
    std::vector<float> dh(h.size());
    layer.train_step(make_batch(num_labels, std::vector<std::vector<uint32_t>>(batch, {1})),
                     ConstMatrix(h.data(), batch, d), Matrix(dh.data(), batch, d), {0.01, 1});
    const auto zeros = std::count(dh.begin(), dh.end(), 0.0f);
    const double frac = static_cast<double>(zeros) / static_cast<double>(dh.size());
    INFO("dropout " << p << ": zero fraction of dh " << frac);
    if (p == 0.0) CHECK(frac < 0.01);
    else CHECK(std::abs(frac - p) < 0.05);
  }
}

TEST_CASE("fixed fan-in adamw decays the sparse and intermediate weights, not the label bias") {
  // One step from the same start with adam and with adamw: the gradient and the Adam term
  // are the same, so the two differ by exactly the decoupled decay lr·wd·p_old — on the
  // sparse weights and the intermediate layer (weights and bias), and not at all on the
  // label bias.
  const int64_t batch = 4, d = 9, num_labels = 7;
  const double lr = 0.01, wd = 0.5;
  Context ctx(Device::cpu, 2);
  LayerInit init = make_init(ctx, d, num_labels, batch);
  init.optim.type = OptimizerType::adam;
  init.optim.lr = lr;
  FixedFaninConfig cfg;
  cfg.fan_in = 3;
  cfg.projection = 5;
  FixedFaninLayer adam(init, cfg);
  init.optim.type = OptimizerType::adamw;
  init.optim.weight_decay = wd;
  FixedFaninLayer adamw(init, cfg);
  // Both biases start at zero, where decay is invisible: give them the same nonzero values.
  for (FixedFaninLayer* layer : {&adam, &adamw})
    for (const auto& t : layer->state())
      if (t.name == "output/bias" || t.name == "output/intermediate/bias") {
        float* p = std::get<float*>(t.data);
        for (int64_t i = 0; i < t.numel(); ++i) p[i] = 0.1f * static_cast<float>(i + 1);
      }
  const Ref r = snapshot(adam);
  auto h = random_h(batch, d, 11, 3.0);
  std::vector<float> dh(h.size());
  for (FixedFaninLayer* layer : {&adam, &adamw})
    layer->train_step(kBatch, ConstMatrix(h.data(), batch, d), Matrix(dh.data(), batch, d),
                      {lr, 1});
  auto sa = adam.state(), sw = adamw.state();
  auto check_decay = [&](const std::string& name, const std::vector<double>& before,
                         double factor) {
    auto a = floats(sa, name), w = floats(sw, name);
    REQUIRE(a.size() == before.size());
    int64_t moved = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      INFO(name << " [" << i << "]");
      CHECK(a[i] - w[i] == Approx(factor * before[i]).margin(1e-6));
      moved += a[i] != w[i];
    }
    return moved;
  };
  CHECK(check_decay("output/weight", r.w, lr * wd) > 0);
  CHECK(check_decay("output/intermediate/weight", r.p, lr * wd) > 0);
  CHECK(check_decay("output/intermediate/bias", r.c, lr * wd) > 0);
  CHECK(check_decay("output/bias", r.bias, 0.0) == 0);
}
