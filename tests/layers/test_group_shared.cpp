// Backend `group_shared` (HASTE): the ops against a dense product under the group mask
// (odd sizes), the layer against a dense layer under the group mask (forward, gradients,
// one SGD and one Adam step), finite differences in double (with and without the head
// projection and the tail projection), grouping invariants for the three groupings,
// rewiring invariants and determinism, ledger = analytic size, top-k in original ids, and
// an end-to-end CLI run that learns and resumes to the same metrics.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "layers/group_shared.h"
#include "layers/registry.h"
#include "ops/group_shared.h"
#include "support/layer_support.h"
#include "support/test_support.h"

using namespace xmc;
using namespace xmc::test;

namespace {

std::vector<float> random_vec(size_t n, uint64_t seed, double scale) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(scale * rng.normal());
  return v;
}

std::vector<uint32_t> u32(const std::vector<TensorRef>& ts, const std::string& name) {
  const auto& t = find(ts, name);
  const uint32_t* p = std::get<uint32_t*>(t.data);
  return {p, p + t.numel()};
}
std::vector<float> f32(const std::vector<TensorRef>& ts, const std::string& name) {
  const auto& t = find(ts, name);
  const float* p = std::get<float*>(t.data);
  return {p, p + t.numel()};
}
bool has(const std::vector<TensorRef>& ts, const std::string& name) {
  for (const auto& t : ts)
    if (t.name == name) return true;
  return false;
}

// Double-precision model of the layer, logits in original label order.
struct Ref {
  int64_t d = 0, num_labels = 0, head = 0, group = 0, fan_in = 0, m = 0, hd = 0;
  std::vector<uint32_t> order, idx;
  std::vector<double> hw, hb, hp, hpc, w, b, tp, tpc;

  static std::vector<double> project(const std::vector<double>& h, int64_t batch, int64_t d,
                                     const std::vector<double>& p, const std::vector<double>& c,
                                     int64_t out, bool relu) {
    std::vector<double> u(static_cast<size_t>(batch * out));
    for (int64_t i = 0; i < batch; ++i)
      for (int64_t k = 0; k < out; ++k) {
        double s = c[k];
        for (int64_t t = 0; t < d; ++t) s += h[i * d + t] * p[k * d + t];
        u[i * out + k] = relu ? std::max(0.0, s) : s;
      }
    return u;
  }
  std::vector<double> logits(const std::vector<double>& h, int64_t batch) const {
    std::vector<double> z(static_cast<size_t>(batch * num_labels));
    const int64_t hin = hd > 0 ? hd : d;
    const auto x = hd > 0 ? project(h, batch, d, hp, hpc, hd, false) : h;
    const bool tproj = !tp.empty();
    const auto u = tproj ? project(h, batch, d, tp, tpc, m, true) : h;
    for (int64_t i = 0; i < batch; ++i) {
      for (int64_t r = 0; r < head; ++r) {
        double s = hb[r];
        for (int64_t t = 0; t < hin; ++t) s += hw[r * hin + t] * x[i * hin + t];
        z[i * num_labels + order[r]] = s;
      }
      for (int64_t r = 0; r < num_labels - head; ++r) {
        double s = b[r];
        for (int64_t j = 0; j < fan_in; ++j)
          s += w[r * fan_in + j] * u[i * m + idx[(r / group) * fan_in + j]];
        z[i * num_labels + order[head + r]] = s;
      }
    }
    return z;
  }
  double loss(const std::string& name, const std::vector<double>& h, const Batch& bt) const {
    const int64_t batch = bt.size();
    auto z = logits(h, batch);
    double total = 0.0, g = 0.0;
    for (int64_t i = 0; i < batch; ++i)
      for (int64_t l = 0; l < num_labels; ++l)
        total += ref_loss1(name, target(bt, i, l), z[i * num_labels + l], &g);
    return total / static_cast<double>(batch);
  }
};

Ref snapshot(GroupSharedLayer& layer) {
  Ref r;
  auto st = layer.state();
  r.d = layer.input_dim();
  r.num_labels = layer.num_labels();
  r.head = layer.head_labels();
  r.group = layer.group_size();
  r.fan_in = layer.fanin().fan_in();
  r.m = layer.fanin().input_width();
  r.order = u32(st, "output/label_order");
  if (r.head > 0) {
    r.hw = floats(st, "output/head/weight");
    r.hb = floats(st, "output/head/bias");
    if (has(st, "output/head/projection/weight")) {
      r.hp = floats(st, "output/head/projection/weight");
      r.hpc = floats(st, "output/head/projection/bias");
      r.hd = static_cast<int64_t>(r.hpc.size());
    }
  }
  if (layer.tail_labels() > 0) {
    r.idx = u32(st, "output/indices");
    r.w = floats(st, "output/weight");
    r.b = floats(st, "output/bias");
    if (has(st, "output/tail_projection/weight")) {
      r.tp = floats(st, "output/tail_projection/weight");
      r.tpc = floats(st, "output/tail_projection/bias");
    }
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
  // A frequency order that is not the identity: label l seen (7·l mod L) times.
  for (int64_t l = 0; l < num_labels; ++l) init.label_freq.push_back((7 * l) % num_labels);
  return init;
}

}  // namespace

TEST_CASE("group-shared ops equal dense products under the group mask") {
  // n = 23 labels in groups of G = 4 (the last has 3), F = 5 of m = 11 inputs; batch sizes
  // below and above the 64-row block, odd; z with a leading dimension larger than n.
  const int64_t n = 23, g = 4, f = 5, m = 11, groups = 6;
  for (int64_t batch : {7, 67}) {
    DYNAMIC_SECTION("B=" << batch) {
      Rng rng(4);
      Context cpu;
      std::vector<uint32_t> idx(static_cast<size_t>(groups * f));
      for (int64_t k = 0; k < groups; ++k) {
        std::vector<uint32_t> all(static_cast<size_t>(m));
        for (uint32_t i = 0; i < m; ++i) all[i] = i;
        for (int64_t j = 0; j < f; ++j) {
          std::swap(all[static_cast<size_t>(j)], all[static_cast<size_t>(j) + rng.below(static_cast<uint64_t>(m - j))]);
          idx[static_cast<size_t>(k * f + j)] = all[static_cast<size_t>(j)];
        }
      }
      auto w = random_vec(static_cast<size_t>(n * f), 5, 1.0);
      auto bias = random_vec(static_cast<size_t>(n), 6, 1.0);
      auto ut = random_vec(static_cast<size_t>(m * batch), 7, 1.0);
      auto gv = random_vec(static_cast<size_t>(batch * n), 8, 1.0);
      // Zeros: a whole label column, a whole group in one row, scattered entries.
      for (int64_t b = 0; b < batch; ++b) {
        gv[static_cast<size_t>(b * n + 2)] = 0.0f;
        if (b % 3 == 0) gv[static_cast<size_t>(b * n + 5)] = 0.0f;
      }
      for (int64_t q = 4; q < 8; ++q) gv[static_cast<size_t>(1 * n + q)] = 0.0f;
      // Dense W [n×m] under the mask.
      std::vector<double> wd(static_cast<size_t>(n * m), 0.0);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < f; ++j)
          wd[static_cast<size_t>(r * m + idx[static_cast<size_t>((r / g) * f + j)])] = w[static_cast<size_t>(r * f + j)];

      const int64_t ld = n + 3;
      std::vector<float> z(static_cast<size_t>(batch * ld), -7.0f);
      ops::group_shared_forward(cpu, idx.data(), w.data(), bias.data(), n, g, f,
                                ConstMatrix(ut.data(), m, batch), Matrix(z.data(), batch, n, ld));
      std::vector<float> z0(static_cast<size_t>(batch * n));
      ops::group_shared_forward(cpu, idx.data(), w.data(), nullptr, n, g, f,
                                ConstMatrix(ut.data(), m, batch), Matrix(z0.data(), batch, n));
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t r = 0; r < n; ++r) {
          double s = 0.0;
          for (int64_t k = 0; k < m; ++k) s += wd[static_cast<size_t>(r * m + k)] * ut[static_cast<size_t>(k * batch + b)];
          CHECK(z0[static_cast<size_t>(b * n + r)] == Approx(s).margin(1e-4));
          CHECK(z[static_cast<size_t>(b * ld + r)] == Approx(s + bias[static_cast<size_t>(r)]).margin(1e-4));
        }
        for (int64_t r = n; r < ld; ++r) CHECK(z[static_cast<size_t>(b * ld + r)] == -7.0f);  // padding untouched
      }

      std::vector<float> dw(static_cast<size_t>(n * f), 99.0f), db(static_cast<size_t>(n), 99.0f);
      ConstMatrix gm(gv.data(), batch, n);
      ops::group_shared_weight_grad(cpu, idx.data(), n, g, f, gm, ConstMatrix(ut.data(), m, batch),
                                    dw.data(), db.data());
      for (int64_t r = 0; r < n; ++r) {
        double sb = 0.0;
        for (int64_t b = 0; b < batch; ++b) sb += gv[static_cast<size_t>(b * n + r)];
        CHECK(db[static_cast<size_t>(r)] == Approx(sb).margin(1e-4));
        for (int64_t j = 0; j < f; ++j) {
          const uint32_t k = idx[static_cast<size_t>((r / g) * f + j)];
          double s = 0.0;
          for (int64_t b = 0; b < batch; ++b) s += gv[static_cast<size_t>(b * n + r)] * ut[static_cast<size_t>(k * batch + b)];
          CHECK(dw[static_cast<size_t>(r * f + j)] == Approx(s).margin(1e-4));
        }
      }
      for (int64_t j = 0; j < f; ++j) CHECK(dw[static_cast<size_t>(2 * f + j)] == 0.0f);  // all-zero column
      ops::group_shared_weight_grad(cpu, idx.data(), n, g, f, gm, ConstMatrix(ut.data(), m, batch),
                                    dw.data(),
                                    nullptr);  // db optional

      // du += G·W_dense, on top of what du held.
      std::vector<float> du(static_cast<size_t>(batch * m), 0.5f);
      ops::group_shared_input_grad(cpu, idx.data(), w.data(), n, g, f, gm,
                                   Matrix(du.data(), batch, m));
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t k = 0; k < m; ++k) {
          double s = 0.5;
          for (int64_t r = 0; r < n; ++r) s += gv[static_cast<size_t>(b * n + r)] * wd[static_cast<size_t>(r * m + k)];
          CHECK(du[static_cast<size_t>(b * m + k)] == Approx(s).margin(1e-4));
        }
    }
  }
}

TEST_CASE("group_shared equals a dense layer under the group mask") {
  // L = 13 labels: a head of G = 3 labels, a tail of 10 in groups of 3 (the last one
  // partial), F = 2 of d = 5 inputs, B = 5 (odd).
  const int64_t batch = 5, d = 5, num_labels = 13, f = 2;
  const Batch bt = make_batch(num_labels, {{1}, {0, 6}, {}, {2, 3, 5}, {12}});
  for (std::string loss : {"squared_hinge", "bce"}) {
    DYNAMIC_SECTION(loss) {
      Context ctx(Device::cpu, 2);
      LayerInit init = make_init(ctx, d, num_labels, batch);
      GroupSharedConfig cfg;
      cfg.group_size = 3;
      cfg.fan_in = f;
      cfg.head_fraction = 0.25;
      cfg.loss = parse_enum<LossType>(loss, "loss");
      cfg.chunk_size = 4;  // rounded down to 3: several tail chunks
      GroupSharedLayer layer(init, cfg);
      REQUIRE(layer.head_labels() == 3);
      REQUIRE(layer.num_groups() == 4);
      init.optim.type = OptimizerType::adam;
      init.optim.lr = 0.01;
      GroupSharedLayer adam_layer(init, cfg);
      const Ref r = snapshot(layer);
      REQUIRE(snapshot(adam_layer).idx == r.idx);

      // Masked dense W [L×d] and bias [L] in original label order.
      std::vector<double> wd(static_cast<size_t>(num_labels * d), 0.0), bd(static_cast<size_t>(num_labels));
      for (int64_t i = 0; i < 3; ++i) {
        for (int64_t k = 0; k < d; ++k) wd[r.order[i] * d + k] = r.hw[i * d + k];
        bd[r.order[i]] = r.hb[i];
      }
      for (int64_t t = 0; t < 10; ++t) {
        std::set<uint32_t> seen;
        for (int64_t j = 0; j < f; ++j) {
          const uint32_t k = r.idx[(t / 3) * f + j];
          REQUIRE(k < d);
          REQUIRE(seen.insert(k).second);
          wd[r.order[3 + t] * d + k] = r.w[t * f + j];
        }
        bd[r.order[3 + t]] = r.b[t];
      }
      auto hf = random_vec(static_cast<size_t>(batch * d), 11, 3.0);
      std::vector<double> h(hf.begin(), hf.end());
      std::vector<double> z(static_cast<size_t>(batch * num_labels));
      for (int64_t i = 0; i < batch; ++i)
        for (int64_t l = 0; l < num_labels; ++l) {
          double s = bd[l];
          for (int64_t k = 0; k < d; ++k) s += h[i * d + k] * wd[l * d + k];
          z[i * num_labels + l] = s;
        }
      std::vector<float> sc(static_cast<size_t>(batch * num_labels));
      layer.scores(ConstMatrix(hf.data(), batch, d), Matrix(sc.data(), batch, num_labels));
      for (size_t i = 0; i < sc.size(); ++i) CHECK(sc[i] == Approx(z[i]).margin(1e-5));

      std::vector<double> g(z.size());
      double loss_ref = 0.0;
      int64_t zeros = 0;
      for (int64_t i = 0; i < batch; ++i)
        for (int64_t l = 0; l < num_labels; ++l) {
          double gi = 0.0;
          loss_ref += ref_loss1(loss, target(bt, i, l), z[i * num_labels + l], &gi);
          g[i * num_labels + l] = gi / batch;
          zeros += gi == 0.0;
        }
      std::vector<float> dhf(static_cast<size_t>(batch * d));
      const StepStats s = layer.train_step(bt, ConstMatrix(hf.data(), batch, d),
                                           Matrix(dhf.data(), batch, d), {1.0, 1});
      CHECK(s.loss == Approx(loss_ref / batch).epsilon(1e-5));
      CHECK(s.grads == batch * num_labels);
      CHECK(s.zero_grads == zeros);
      if (loss == "squared_hinge") CHECK(zeros > 0);

      std::vector<double> dw(wd.size(), 0.0), db(static_cast<size_t>(num_labels), 0.0);
      for (int64_t i = 0; i < batch; ++i)
        for (int64_t l = 0; l < num_labels; ++l) {
          db[l] += g[i * num_labels + l];
          for (int64_t k = 0; k < d; ++k) dw[l * d + k] += g[i * num_labels + l] * h[i * d + k];
        }
      const Ref a = snapshot(layer);
      CHECK(a.idx == r.idx);
      CHECK(a.order == r.order);
      for (int64_t i = 0; i < 3; ++i) {
        CHECK(r.hb[i] - a.hb[i] == Approx(db[r.order[i]]).margin(1e-5));
        for (int64_t k = 0; k < d; ++k)
          CHECK(r.hw[i * d + k] - a.hw[i * d + k] == Approx(dw[r.order[i] * d + k]).margin(1e-5));
      }
      for (int64_t t = 0; t < 10; ++t) {
        const uint32_t l = r.order[3 + t];
        CHECK(r.b[t] - a.b[t] == Approx(db[l]).margin(1e-5));
        for (int64_t j = 0; j < f; ++j)
          CHECK(r.w[t * f + j] - a.w[t * f + j] == Approx(dw[l * d + r.idx[(t / 3) * f + j]]).margin(1e-5));
      }
      for (int64_t i = 0; i < batch; ++i)
        for (int64_t k = 0; k < d; ++k) {
          double e = 0.0;
          for (int64_t l = 0; l < num_labels; ++l) e += g[i * num_labels + l] * wd[l * d + k];
          CHECK(dhf[i * d + k] == Approx(e).margin(1e-5));
        }

      // One Adam step of the same layer, on the tail's structural non-zeros.
      std::vector<float> dh2(dhf.size());
      adam_layer.train_step(bt, ConstMatrix(hf.data(), batch, d), Matrix(dh2.data(), batch, d),
                            {0.01, 1});
      auto st = adam_layer.state();
      const auto wa = f32(st, "output/weight");
      const auto m1 = f32(st, "output/weight_opt1");
      const auto v1 = f32(st, "output/weight_opt2");
      for (int64_t t = 0; t < 10; ++t)
        for (int64_t j = 0; j < f; ++j) {
          const double gi = dw[r.order[3 + t] * d + r.idx[(t / 3) * f + j]];
          const double mm = 0.1 * gi, vv = 0.001 * gi * gi;
          const double expect = r.w[t * f + j] - 0.01 * (mm / 0.1) / (std::sqrt(vv / 0.001) + 1e-8);
          CHECK(m1[t * f + j] == Approx(mm).margin(1e-7));
          CHECK(v1[t * f + j] == Approx(vv).margin(1e-9));
          CHECK(wa[t * f + j] == Approx(expect).margin(1e-5));
        }
    }
  }
}

TEST_CASE("group_shared gradients match finite differences") {
  const int64_t batch = 4, d = 5, num_labels = 14;
  const Batch bt = make_batch(num_labels, {{1, 13}, {0, 6}, {}, {2, 3, 5}});
  for (std::string loss : {"squared_hinge", "bce"}) {
    for (int64_t head_dim : {0, 3}) {
      for (int64_t tail_proj : {0, 6}) {
        DYNAMIC_SECTION(loss << " head_dim " << head_dim << " tail_projection " << tail_proj) {
          Context ctx(Device::cpu, 2);
          LayerInit init = make_init(ctx, d, num_labels, batch);
          GroupSharedConfig cfg;
          cfg.group_size = 4;
          cfg.fan_in = 3;
          cfg.head_fraction = 0.3;  // 4.2 labels → one group of 4
          cfg.head_dim = head_dim;
          cfg.projection = tail_proj;
          cfg.loss = parse_enum<LossType>(loss, "loss");
          cfg.chunk_size = 4;
          GroupSharedLayer layer(init, cfg);
          REQUIRE(layer.head_labels() == 4);
          // Non-zero projection biases, so the gradients are checked around shifted ReLUs.
          auto st = layer.state();
          for (const auto& t : st)
            if (t.name.ends_with("projection/bias")) {
              float* c = std::get<float*>(t.data);
              for (int64_t k = 0; k < t.numel(); ++k) c[k] = 0.1f * static_cast<float>(k % 3) - 0.05f;
            }
          Ref r = snapshot(layer);
          auto hf = random_vec(static_cast<size_t>(batch * d), 17, 1.0);
          std::vector<double> h(hf.begin(), hf.end());
          auto fl = [&] { return r.loss(loss, h, bt); };
          const double ref = fl();
          std::vector<float> dhf(static_cast<size_t>(batch * d));
          const StepStats s = layer.train_step(bt, ConstMatrix(hf.data(), batch, d),
                                               Matrix(dhf.data(), batch, d), {1.0, 1});
          CHECK(s.loss == Approx(ref).epsilon(1e-4));
          const Ref a = snapshot(layer);
          auto check_all = [&](std::vector<double>& before, const std::vector<double>& after,
                               const std::string& what) {
            REQUIRE(before.size() == after.size());
            for (size_t i = 0; i < before.size(); ++i)
              check_close(before[i] - after[i], fd(before, i, fl), what + "[" + std::to_string(i) + "]");
          };
          check_all(r.hw, a.hw, "head W");
          check_all(r.hb, a.hb, "head b");
          check_all(r.hp, a.hp, "head P");
          check_all(r.hpc, a.hpc, "head c");
          check_all(r.w, a.w, "tail w");
          check_all(r.b, a.b, "tail b");
          check_all(r.tp, a.tp, "tail P");
          check_all(r.tpc, a.tpc, "tail c");
          for (size_t i = 0; i < h.size(); ++i)
            check_close(dhf[i], fd(h, i, fl), "dh[" + std::to_string(i) + "]");
        }
      }
    }
  }
}

TEST_CASE("group_shared label order: head of the most frequent labels, tail grouped, inverse map") {
  const int64_t d = 12, num_labels = 101, batch = 4;
  for (std::string grouping : {"frequency", "random", "semantic"}) {
    DYNAMIC_SECTION(grouping) {
      Context ctx(Device::cpu, 2);
      LayerInit init = make_init(ctx, d, num_labels, batch);
      GroupSharedConfig cfg;
      cfg.group_size = 8;
      cfg.fan_in = 4;
      cfg.head_fraction = 0.2;  // 20.2 labels → 2.5 groups → 3 groups of 8 (llround)
      cfg.grouping = parse_enum<GroupingType>(grouping, "grouping");
      cfg.beta = 2.0;
      GroupSharedLayer layer(init, cfg);
      REQUIRE(layer.head_labels() == 24);
      CHECK(layer.num_groups() == (101 - 24 + 7) / 8);
      auto check_order = [&] {
        const auto order = layer.label_order();
        const auto pos = layer.label_position();
        std::vector<uint32_t> sorted(order.begin(), order.end());
        std::sort(sorted.begin(), sorted.end());
        for (int64_t l = 0; l < num_labels; ++l) REQUIRE(sorted[static_cast<size_t>(l)] == l);
        for (int64_t i = 0; i < num_labels; ++i) CHECK(pos[order[static_cast<size_t>(i)]] == i);
        // Head = the 24 most frequent labels.
        int64_t min_head = num_labels, max_tail = -1;
        for (int64_t i = 0; i < 24; ++i) min_head = std::min(min_head, init.label_freq[order[static_cast<size_t>(i)]]);
        for (int64_t i = 24; i < num_labels; ++i) max_tail = std::max(max_tail, init.label_freq[order[static_cast<size_t>(i)]]);
        CHECK(min_head >= max_tail);
        return std::vector<uint32_t>(order.begin(), order.end());
      };
      const auto before = check_order();
      const auto freq_order = frequency_order(init.label_freq);
      bool tail_sorted = true;
      for (int64_t i = 25; i < num_labels; ++i)
        tail_sorted = tail_sorted && init.label_freq[before[static_cast<size_t>(i - 1)]] >=
                                         init.label_freq[before[static_cast<size_t>(i)]];
      if (grouping == "random") {
        CHECK_FALSE(tail_sorted);
        CHECK_FALSE(layer.semantic_done());
      } else {
        CHECK(before == freq_order);  // semantic starts from the frequency order
      }
      if (grouping != "semantic") return;

      // Training data: points near one of 7 directions; each label belongs to a direction
      // (l % 7) and each point carries 3 labels of its direction.
      const int64_t n = 300;
      Rng rng(12);
      DenseMatrix dirs(7, d);
      for (auto& v : dirs.values) v = static_cast<float>(rng.normal());
      Dataset ds;
      DenseMatrix x(n, d);
      ds.labels.rows = n;
      ds.labels.cols = num_labels;
      for (int64_t p = 0; p < n; ++p) {
        const int64_t c = p % 7;
        for (int64_t j = 0; j < d; ++j)
          x.values[static_cast<size_t>(p * d + j)] = dirs.values[static_cast<size_t>(c * d + j)] + 0.2f * static_cast<float>(rng.normal());
        std::set<uint32_t> ls;
        while (ls.size() < 3) ls.insert(static_cast<uint32_t>(c + 7 * static_cast<int64_t>(rng.below(14))));
        for (uint32_t l : ls)
          if (l < num_labels) ds.labels.indices.push_back(l);
        ds.labels.indptr.push_back(static_cast<int64_t>(ds.labels.indices.size()));
      }
      ds.features = x;
      // Biases tagged with their labels, to see them move along.
      {
        auto st = layer.state();
        float* b = std::get<float*>(find(st, "output/bias").data);
        for (int64_t t = 0; t < layer.tail_labels(); ++t) b[t] = static_cast<float>(before[static_cast<size_t>(24 + t)]);
      }
      TrainerView view;
      view.step = 1;
      view.total_steps = 100;
      view.train = &ds;
      view.embed_train = [&] { return x; };
      layer.on_step(view);
      CHECK(layer.semantic_done());
      const auto after = check_order();
      CHECK(std::equal(after.begin(), after.begin() + 24, before.begin()));  // head untouched
      CHECK(after != before);
      auto st = layer.state();
      const auto b = f32(st, "output/bias");
      const auto w = f32(st, "output/weight");
      for (int64_t t = 0; t < layer.tail_labels(); ++t) CHECK(b[t] == static_cast<float>(after[static_cast<size_t>(24 + t)]));
      // Tail groups follow the directions: the share of label pairs within a group that
      // come from the same direction is far above the 1/7 of random groups.
      int64_t same = 0, pairs = 0;
      for (int64_t i0 = 24; i0 < num_labels; i0 += 8) {
        const int64_t i1 = std::min<int64_t>(num_labels, i0 + 8);
        for (int64_t i = i0; i < i1; ++i)
          for (int64_t j = i + 1; j < i1; ++j) {
            same += after[static_cast<size_t>(i)] % 7 == after[static_cast<size_t>(j)] % 7;
            ++pairs;
          }
      }
      INFO("same-direction pairs " << same << " of " << pairs);
      CHECK(same * 2 > pairs);
      // A second on_step does not regroup.
      view.step = 2;
      layer.on_step(view);
      CHECK(check_order() == after);
    }
  }
}

namespace {

// A layer with Adam state after a few steps: L = 220 (head 20, tail 200 in 50 groups of
// G = 4), F = 8 of m = 50 inputs.
struct Trained {
  Context ctx;
  std::unique_ptr<GroupSharedLayer> layer;
  Trained(int threads, uint64_t seed) : ctx(Device::cpu, threads) {
    const int64_t batch = 16, d = 50, num_labels = 220;
    LayerInit init = make_init(ctx, d, num_labels, batch);
    init.seed = seed;
    init.optim.type = OptimizerType::adam;
    init.optim.lr = 0.01;
    GroupSharedConfig cfg;
    cfg.group_size = 4;
    cfg.fan_in = 8;
    cfg.head_fraction = 20.0 / 220.0;
    cfg.loss = LossType::bce;  // every slot gets a gradient, so every moment is non-zero
    cfg.rewire.fraction = 0.1;
    cfg.chunk_size = 64;
    layer = std::make_unique<GroupSharedLayer>(init, cfg);
    std::vector<std::vector<uint32_t>> pos;
    for (uint32_t i = 0; i < batch; ++i) pos.push_back({(i * 13) % 220, (i * 7 + 5) % 220});
    for (auto& p : pos) std::sort(p.begin(), p.end());
    const Batch b = make_batch(num_labels, pos);
    std::vector<float> dh(static_cast<size_t>(batch * d));
    for (int64_t step = 1; step <= 3; ++step) {
      auto h = random_vec(static_cast<size_t>(batch * d), 100 + static_cast<uint64_t>(step), 1.0);
      layer->train_step(b, ConstMatrix(h.data(), batch, d), Matrix(dh.data(), batch, d), {0.01, step});
    }
  }
};

}  // namespace

TEST_CASE("group_shared rewiring prunes the weakest shared slots and regrows unused inputs") {
  Trained tr(2, 5);
  GroupSharedLayer& layer = *tr.layer;
  const int64_t g = 4, f = 8, m = 50, groups = 50, tail = 200;
  REQUIRE(layer.head_labels() == 20);
  auto before = layer.state();
  const auto idx0 = u32(before, "output/indices");
  const auto w0 = f32(before, "output/weight");
  const auto s10 = f32(before, "output/weight_opt1");
  const auto s20 = f32(before, "output/weight_opt2");
  const auto b0 = f32(before, "output/bias");
  const auto hw0 = f32(before, "output/head/weight");
  for (float v : s10) REQUIRE(v != 0.0f);

  // Expected: the 40 slots (10% of 400) with the smallest mean |w| over the group.
  std::vector<float> score(static_cast<size_t>(groups * f));
  for (int64_t k = 0; k < groups; ++k)
    for (int64_t j = 0; j < f; ++j) {
      float s = 0.0f;
      for (int64_t r = k * g; r < (k + 1) * g; ++r) s += std::abs(w0[r * f + j]);
      score[k * f + j] = s / static_cast<float>(g);
    }
  std::vector<int64_t> order(score.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return std::make_pair(score[a], a) < std::make_pair(score[b], b);
  });
  const int64_t k = 40;
  const std::set<int64_t> pruned(order.begin(), order.begin() + k);

  const RewireStats s = layer.rewire(1000);
  CHECK(s.pruned == k);
  CHECK(s.step == 1000);
  auto after = layer.state();
  const auto idx1 = u32(after, "output/indices");
  const auto w1 = f32(after, "output/weight");
  const auto s11 = f32(after, "output/weight_opt1");
  const auto s21 = f32(after, "output/weight_opt2");
  CHECK(f32(after, "output/bias") == b0);
  CHECK(f32(after, "output/head/weight") == hw0);
  for (int64_t q = 0; q < groups; ++q) {
    std::set<uint32_t> set1(idx1.begin() + q * f, idx1.begin() + (q + 1) * f);
    const std::set<uint32_t> set0(idx0.begin() + q * f, idx0.begin() + (q + 1) * f);
    CHECK(static_cast<int64_t>(set1.size()) == f);  // F constant, no duplicates
    for (int64_t j = 0; j < f; ++j) {
      const int64_t slot = q * f + j;
      CHECK(idx1[slot] < m);
      for (int64_t r = q * g; r < (q + 1) * g; ++r) {
        const int64_t e = r * f + j;
        if (pruned.count(slot)) {
          CHECK(w1[e] == 0.0f);  // zeroed for the whole group
          CHECK(s11[e] == 0.0f);
          CHECK(s21[e] == 0.0f);
        } else {
          CHECK(w1[e] == w0[e]);
          CHECK(s11[e] == s10[e]);
          CHECK(s21[e] == s20[e]);
        }
      }
      if (pruned.count(slot)) CHECK(set0.count(idx1[slot]) == 0);  // a new input for the group
      else CHECK(idx1[slot] == idx0[slot]);
    }
  }
  CHECK(tail == layer.tail_labels());

  // Deterministic given seed and step, independent of the thread count.
  Trained a(1, 9), b(2, 9), c(2, 9);
  a.layer->rewire(1000);
  b.layer->rewire(1000);
  c.layer->rewire(2000);
  CHECK(u32(a.layer->state(), "output/indices") == u32(b.layer->state(), "output/indices"));
  CHECK(f32(a.layer->state(), "output/weight") == f32(b.layer->state(), "output/weight"));
  CHECK(u32(a.layer->state(), "output/indices") != u32(c.layer->state(), "output/indices"));

  // The schedule: every interval steps until the fraction of the run.
  Context ctx(Device::cpu, 1);
  LayerInit init = make_init(ctx, 20, 30, 4);
  GroupSharedConfig cfg;
  cfg.fan_in = 4;
  cfg.group_size = 4;
  cfg.rewire = {100, 0.1, 0.5};
  GroupSharedLayer sched(init, cfg);
  std::vector<int64_t> due;
  for (int64_t st = 0; st <= 1000; ++st)
    if (sched.fanin().rewire_due(st, 1000)) due.push_back(st);
  CHECK(due == std::vector<int64_t>{100, 200, 300, 400, 500});
  TrainerView v;
  v.total_steps = 1000;
  v.step = 100;
  sched.on_step(v);
  CHECK(sched.fanin().last_rewire().pruned == std::llround(0.1 * sched.num_groups() * 4));
}

TEST_CASE("group_shared memory in the ledger equals the analytic size") {
  struct Case {
    OptimizerType opt;
    double momentum;
    int64_t head_dim, tail_proj;
    double dropout, head_fraction;
  };
  for (const Case& c : {Case{OptimizerType::sgd, 0.0, 0, 0, 0.0, 0.05},
                        Case{OptimizerType::sgd, 0.9, 16, 0, 0.2, 0.1},
                        Case{OptimizerType::adam, 0.0, 0, 96, 0.0, 0.0},
                        Case{OptimizerType::adam, 0.0, 8, 96, 0.1, 0.3}}) {
    Context ctx(Device::cpu, 1);
    LayerInit init = make_init(ctx, 64, 1000, 32);
    init.optim.type = c.opt;
    init.optim.momentum = c.momentum;
    GroupSharedConfig cfg;
    cfg.fan_in = 16;
    cfg.group_size = 16;
    cfg.head_fraction = c.head_fraction;
    cfg.head_dim = c.head_dim;
    cfg.projection = c.tail_proj;
    cfg.dropout = c.dropout;
    cfg.chunk_size = 250;  // rounded down to 240
    GroupSharedLayer layer(init, cfg);
    const int64_t states = c.opt == OptimizerType::adam ? 2 : (c.momentum != 0.0 ? 1 : 0);
    const int64_t head = layer.head_labels(), tail = 1000 - head, groups = (tail + 15) / 16;
    const int64_t m = c.tail_proj ? c.tail_proj : 64, hin = c.head_dim ? c.head_dim : 64;
    int64_t floats = 2 * 1000 + 1 + groups * 16 + (tail * 16 + tail) * (1 + states) +
                     m * 32 + 32 * 240 + 240 * 16 + 240;
    if (head > 0) {
      const int64_t hc = std::min<int64_t>(250, head);
      floats += (head * hin + head) * (1 + states) + 32 * hc + hc * hin + hc;
      if (c.head_dim) floats += (c.head_dim * 64 + c.head_dim) * (2 + states) + 2 * 32 * c.head_dim;
    }
    if (c.tail_proj) floats += (m * 64 + m) * (2 + states) + 2 * 32 * m;
    if (c.dropout > 0) floats += 2 * 32 * 64;
    INFO("states " << states << " head " << head << " head_dim " << c.head_dim << " tail projection " << c.tail_proj);
    CHECK(layer.analytic_bytes() == 4 * floats);
    CHECK(ctx.ledger().total_current() == 4 * floats);
    CHECK(ctx.ledger().current(MemTag::indices) == 4 * (2 * 1000 + 1 + groups * 16));
  }
}

TEST_CASE("group_shared top-k returns original label ids") {
  const int64_t batch = 6, d = 8, num_labels = 50;
  Context ctx(Device::cpu, 2);
  LayerInit init = make_init(ctx, d, num_labels, batch);
  GroupSharedConfig cfg;
  cfg.fan_in = 4;
  cfg.group_size = 4;
  cfg.head_fraction = 0.2;
  cfg.head_dim = 5;
  cfg.projection = 12;
  cfg.grouping = GroupingType::random;
  cfg.chunk_size = 7;  // → 4: many chunks, the first ones in the head
  GroupSharedLayer layer(init, cfg);
  REQUIRE(layer.label_order()[0] != 0);
  auto h = random_vec(static_cast<size_t>(batch * d), 2, 1.0);
  std::vector<float> all(static_cast<size_t>(batch * num_labels));
  layer.scores(ConstMatrix(h.data(), batch, d), Matrix(all.data(), batch, num_labels));
  const TopK top = layer.topk(ConstMatrix(h.data(), batch, d), 5);
  for (int64_t i = 0; i < batch; ++i) {
    std::vector<int> order(static_cast<size_t>(num_labels));
    for (int l = 0; l < num_labels; ++l) order[l] = l;
    std::sort(order.begin(), order.end(),
              [&](int a, int b) { return all[i * num_labels + a] > all[i * num_labels + b]; });
    for (int j = 0; j < 5; ++j) {
      CHECK(top.row_labels(i)[j] == static_cast<uint32_t>(order[j]));
      CHECK(top.row_scores(i)[j] == all[i * num_labels + order[j]]);
    }
  }
  // k larger than L pads.
  const TopK big = layer.topk(ConstMatrix(h.data(), batch, d), 60);
  CHECK(big.row_labels(0)[59] == TopK::kNoLabel);
}

TEST_CASE("group_shared rejects a fan-in larger than its input") {
  Context ctx(Device::cpu, 1);
  LayerInit init = make_init(ctx, 16, 40, 4);
  GroupSharedConfig cfg;
  cfg.fan_in = 17;
  try {
    GroupSharedLayer layer(init, cfg);
    FAIL("expected an error");
  } catch (const InputError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("17") != std::string::npos);
    CHECK(msg.find("16") != std::string::npos);
  }
}

TEST_CASE(
    "group_shared device options: a CUDA path, bf16 refused on the CPU, sync_state a no-op there") {
  CHECK(backend_has_cuda("group_shared"));
  Context ctx(Device::cpu, 1);
  LayerInit init = make_init(ctx, 16, 40, 4);
  GroupSharedConfig cfg;
  cfg.fan_in = 4;
  cfg.group_size = 4;
  cfg.head_fraction = 0.2;
  for (const auto& [precision, sr, key] : {std::tuple{"bf16", false, "model.output.precision"},
                                           std::tuple{"fp32", true, "stochastic_rounding"}}) {
    GroupSharedConfig c = cfg;
    c.precision = parse_enum<Precision>(precision, "precision");
    c.stochastic_rounding = sr;
    CHECK_THROWS_AS(GroupSharedLayer(init, c), InputError);
    CHECK_THROWS_WITH(GroupSharedLayer(init, c), Catch::Matchers::Contains(key));
  }
  GroupSharedLayer layer(init, cfg);
  CHECK_FALSE(layer.device_views());
  const auto before = f32(layer.state(), "output/weight");
  const auto head_before = f32(layer.state(), "output/head/weight");
  for (StateSync s : {StateSync::to_host, StateSync::to_device, StateSync::release})
    layer.sync_state(s);
  CHECK(f32(layer.state(), "output/weight") == before);
  CHECK(f32(layer.state(), "output/head/weight") == head_before);
}

TEST_CASE("xmctrain train with group_shared learns and resumes to the same metrics") {
  namespace fs = std::filesystem;
  using nlohmann::json;
  TempDir tmp;
  const fs::path data = tmp / "data";
  const std::string yaml =
      "name: gs\nseed: 7\ndevice: cpu\nthreads: 2\n"
      "data:\n"
      "  train: {features: " + (data / "trn_X.npy").string() +
      ", labels: " + (data / "trn_X_Y.txt").string() + "}\n"
      "  test: {features: " + (data / "tst_X.npy").string() +
      ", labels: " + (data / "tst_X_Y.txt").string() + "}\n"
      "  synth: {enabled: true, format: dense, train: 3000, test: 1000, labels: 300, "
      "features: 64, clusters: 20, seed: 3}\n"
      "model:\n"
      "  encoder: [{type: linear, out: 64, activation: relu, dropout: 0.1}]\n"
      "  output: {type: group_shared, group_size: 8, fan_in: 16, head_fraction: 0.1, "
      "tail_projection: 128, grouping: semantic, beta: 2, loss: squared_hinge, chunk_size: 128, "
      "rewire: {interval: 10, fraction: 0.1, until: 0.66}}\n"
      "optim:\n"
      "  encoder: {type: adam, lr: 0.01}\n"
      "  output: {type: adam, lr: 0.01}\n"
      "train: {epochs: 3, batch_size: 128, log_every_s: 100}\n"
      "eval: {k: 5}\n";
  write_file(tmp / "c.yaml", yaml);
  auto full = run_cli({"train", (tmp / "c.yaml").string(), "--out", (tmp / "a").string(), "--json"});
  INFO(full.err);
  REQUIRE(full.exit_code == 0);
  CHECK(full.err.find("semantic grouping of") != std::string::npos);
  CHECK(full.err.find("rewired") != std::string::npos);
  const json res = json::parse(full.out);
  const double p1 = res["metrics"]["P@1"].get<double>();
  // Popularity baseline on this problem: 0.196 (the generator logs it); fixed_fanin
  // reaches about 0.47 in 3 epochs with the same encoder.
  INFO("P@1 " << p1);
  CHECK(p1 > 0.40);

  // Interrupted after epoch 1 (grouped and rewired by then), resumed: same final metrics.
  auto part = run_cli({"train", (tmp / "c.yaml").string(), "--out", (tmp / "b").string(),
                       "--halt-after-epoch", "1"});
  INFO(part.err);
  REQUIRE(part.exit_code == 0);
  auto resumed = run_cli({"train", (tmp / "c.yaml").string(), "--out", (tmp / "b").string(),
                          "--resume", "--json"});
  INFO(resumed.err);
  REQUIRE(resumed.exit_code == 0);
  CHECK(resumed.err.find("semantic grouping of") == std::string::npos);  // restored, not redone
  CHECK(res["metrics"] == json::parse(resumed.out)["metrics"]);
}
