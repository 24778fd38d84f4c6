// Optimizers: one step against hand-computed values.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "core/context.h"
#include "core/error.h"
#include "ops/optimizer.h"

using namespace xmc;

TEST_CASE("sgd without momentum: p -= lr·(g + wd·p)") {
  OptimizerConfig cfg{.type = OptimizerType::sgd, .lr = 0.1, .weight_decay = 0.01};
  CHECK(optimizer_state_arrays(cfg) == 0);
  float p = 1.0f, g = 0.5f;
  optimizer_update(cfg, 0.1, 1, &p, &g, nullptr, nullptr, 1);
  CHECK(p == Approx(1.0 - 0.1 * (0.5 + 0.01 * 1.0)));  // 0.949
}

TEST_CASE("sgd with momentum: v = μv + g, then p -= lr·v") {
  OptimizerConfig cfg{.type = OptimizerType::sgd, .lr = 0.1, .momentum = 0.9, .weight_decay = 0.01};
  CHECK(optimizer_state_arrays(cfg) == 1);
  float p = 1.0f, g = 0.5f, v = 0.2f;
  optimizer_update(cfg, 0.1, 3, &p, &g, &v, nullptr, 1);
  CHECK(v == Approx(0.69));   // 0.9·0.2 + (0.5 + 0.01)
  CHECK(p == Approx(0.931));  // 1 - 0.1·0.69
}

TEST_CASE("adam at step 1 moves every parameter by about lr·sign(g)") {
  OptimizerConfig cfg{.type = OptimizerType::adam};
  CHECK(optimizer_state_arrays(cfg) == 2);
  // beta1 = 0 keeps only the second moment (array 2); adamw alike.
  OptimizerConfig rms{.type = OptimizerType::adam, .beta1 = 0.0};
  CHECK(optimizer_state_arrays(rms) == 1);
  CHECK_FALSE(optimizer_keeps(rms, 1));
  CHECK(optimizer_keeps(rms, 2));
  // Large n exercises the OpenMP path as well.
  const int64_t n = (1 << 16) + 3;
  std::vector<float> p(n), g(n), m(n, 0.0f), v(n, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    p[i] = 0.5f;
    g[i] = (i % 3 == 0 ? -1.0f : 1.0f) * (0.01f + static_cast<float>(i % 7));
  }
  optimizer_update(cfg, 0.01, 1, p.data(), g.data(), m.data(), v.data(), n);
  for (int64_t i = 0; i < n; i += 997) {
    const double expect = 0.5 - 0.01 * (g[i] > 0 ? 1.0 : -1.0);
    REQUIRE(p[i] == Approx(expect).epsilon(1e-5));
    REQUIRE(m[i] == Approx(0.1 * g[i]));
    REQUIRE(v[i] == Approx(0.001 * g[i] * g[i]));
  }
}

TEST_CASE("adam step 2 with bias correction equals the hand-computed value") {
  OptimizerConfig cfg{.type = OptimizerType::adam};
  // State after step 1 with g = 0.5: m = 0.05, v = 0.00025. Step 2 with g = -0.3:
  // m = 0.9·0.05 + 0.1·(-0.3) = 0.015; v = 0.999·0.00025 + 0.001·0.09 = 0.00033975;
  // m̂ = 0.015/0.19, v̂ = 0.00033975/0.001999; p = 1 - 0.1·m̂/(sqrt(v̂)+1e-8) = 0.98085020.
  float p = 1.0f, g = -0.3f, m = 0.05f, v = 0.00025f;
  optimizer_update(cfg, 0.1, 2, &p, &g, &m, &v, 1);
  CHECK(m == Approx(0.015));
  CHECK(v == Approx(0.00033975));
  CHECK(p == Approx(0.9808501969).epsilon(1e-6));
}

TEST_CASE("adam weight decay is L2 on the gradient, adamw's is decoupled") {
  // adam: g' = g + wd·p = -0.05 + 0.1·2 = 0.15 > 0, so step 1 moves by -lr even though g < 0.
  OptimizerConfig adam{.type = OptimizerType::adam, .weight_decay = 0.1};
  float p = 2.0f, g = -0.05f, m = 0, v = 0;
  optimizer_update(adam, 0.1, 1, &p, &g, &m, &v, 1);
  CHECK(p == Approx(1.9).epsilon(1e-6));
  // adamw: p = p·(1 - lr·wd) - lr·m̂/(sqrt(v̂)+eps) = 1·0.99 - 0.1 = 0.89.
  OptimizerConfig adamw{.type = OptimizerType::adamw, .weight_decay = 0.1};
  float q = 1.0f, gq = 0.5f, mq = 0, vq = 0;
  optimizer_update(adamw, 0.1, 1, &q, &gq, &mq, &vq, 1);
  CHECK(q == Approx(0.89).epsilon(1e-6));
  CHECK(mq == Approx(0.05));  // decay not in the moments
}

TEST_CASE("optimizer names parse and unknown names list the known ones") {
  CHECK(parse_enum<OptimizerType>("adamw", "optimizer") == OptimizerType::adamw);
  CHECK(to_string(OptimizerType::sgd) == "sgd");
  CHECK_THROWS_AS(parse_enum<OptimizerType>("rmsprop", "optimizer"), InputError);
  CHECK_THROWS_WITH(parse_enum<OptimizerType>("rmsprop", "optimizer"), Catch::Matchers::Contains("'rmsprop'") &&
                                                    Catch::Matchers::Contains("sgd, adam, adamw"));
  OptimizerConfig cfg{.type = OptimizerType::adam};
  float p = 0, g = 0, m = 0, v = 0;
  CHECK_THROWS_AS(optimizer_update(cfg, 0.1, 0, &p, &g, &m, &v, 1), Error);  // step is 1-based
}

TEST_CASE("optimizer_update through a CPU Context is the host update") {
  Context ctx(Device::cpu, 1);
  OptimizerConfig cfg;  // adam
  std::vector<float> p1 = {0.5f, -1.0f, 2.0f}, g = {0.1f, -0.2f, 0.3f};
  std::vector<float> p2 = p1, a1(3), b1(3), a2(3), b2(3);
  for (int64_t step = 1; step <= 3; ++step) {
    optimizer_update(cfg, 0.01, step, p1.data(), g.data(), a1.data(), b1.data(), 3);
    optimizer_update(ctx, cfg, 0.01, step, p2.data(), g.data(), a2.data(), b2.data(), 3);
  }
  CHECK(p1 == p2);
  CHECK(a1 == a2);
  CHECK(b1 == b2);
}

TEST_CASE("every optimizer's blocked, vectorised update equals its formula at odd sizes") {
  // The update runs in OpenMP blocks of SIMD loops (ops/optimizer.cpp); sizes below,
  // at and above the parallel threshold with ragged tails. Reference: the per-element
  // formula in double, two steps (bias correction moves between them).
  std::vector<OptimizerConfig> cfgs = {
      {.type = OptimizerType::sgd, .lr = 0.1, .weight_decay = 0.01},
      {.type = OptimizerType::sgd, .lr = 0.1, .momentum = 0.9, .weight_decay = 0.01},
      {.type = OptimizerType::adam, .weight_decay = 0.01},
      {.type = OptimizerType::adamw, .weight_decay = 0.01},
      {.type = OptimizerType::adam, .weight_decay = 0.01, .beta1 = 0.0}};
  for (const OptimizerConfig& cfg : cfgs) {
    for (int64_t n : {int64_t{1}, int64_t{15}, int64_t{17}, int64_t{(1 << 15) + 5},
                      int64_t{3 * (1 << 14) + 7 + (1 << 15)}}) {
      INFO(to_string(cfg.type) << " momentum " << cfg.momentum << " beta1 " << cfg.beta1 << " n "
                               << n);
      std::vector<float> p(n), m(n, 0.0f), v(n, 0.0f), g(n);
      std::vector<double> rp(n), rm(n, 0.0), rv(n, 0.0);
      for (int64_t i = 0; i < n; ++i) rp[i] = p[i] = 0.01f * static_cast<float>(i % 101 - 50);
      for (int64_t step = 1; step <= 2; ++step) {
        for (int64_t i = 0; i < n; ++i)
          g[i] = (step == 1 ? 0.3f : -0.2f) * static_cast<float>(i % 13 - 6) + 0.05f;
        optimizer_update(cfg, 0.01, step, p.data(), g.data(),
                         optimizer_keeps(cfg, 1) ? m.data() : nullptr,
                         optimizer_keeps(cfg, 2) ? v.data() : nullptr, n);
        const double lr = 0.01, wd = cfg.weight_decay;
        for (int64_t i = 0; i < n; ++i) {
          if (cfg.type == OptimizerType::sgd) {
            const double gi = g[i] + wd * rp[i];
            rm[i] = cfg.momentum * rm[i] + gi;
            rp[i] -= lr * (cfg.momentum != 0.0 ? rm[i] : gi);
            continue;
          }
          const bool decoupled = cfg.type == OptimizerType::adamw;
          const double gi = g[i] + (decoupled ? 0.0 : wd * rp[i]);
          rm[i] = cfg.beta1 * rm[i] + (1 - cfg.beta1) * gi;
          rv[i] = cfg.beta2 * rv[i] + (1 - cfg.beta2) * gi * gi;
          const double mh = rm[i] / (1 - std::pow(cfg.beta1, step));
          const double vh = rv[i] / (1 - std::pow(cfg.beta2, step));
          rp[i] = rp[i] * (decoupled ? 1 - lr * wd : 1.0) - lr * mh / (std::sqrt(vh) + cfg.eps);
        }
      }
      int64_t bad = 0;
      for (int64_t i = 0; i < n; ++i) {
        bad += std::abs(p[i] - rp[i]) > 1e-6 * std::max(1.0, std::abs(rp[i]));
        // m and v may be sums that cancel: tolerances on the scale of the gradients.
        if (optimizer_keeps(cfg, 1))
          bad += std::abs(m[i] - rm[i]) > 1e-6 * std::max(0.1, std::abs(rm[i]));
        if (optimizer_keeps(cfg, 2))
          bad += std::abs(v[i] - rv[i]) > 1e-5 * std::max(1e-4, std::abs(rv[i]));
      }
      CHECK(bad == 0);
    }
  }
}
