// Kahan compensation of bf16 and fp8 weights (issue 40, OptimizerConfig::kahan): each
// update works on the weight plus its bf16 compensation and keeps what the rounding
// dropped. On the CPU: steps far below half an ulp of the weights, which plain rounding
// loses, follow the fp32 run; one step equals the rule written out. On every device: the
// update of the weights and their compensation against the CPU's (the same counter-based
// rounding draws), for the bf16 update (fp32 and bf16 state), the row-wise one and fp8's.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/rng.h"
#include "ops/dense.h"
#include "ops/optimizer.h"
#include "support/device_test.h"
#include "support/fp8_rows.h"
#include "support/op_cases.h"

using namespace xmc;
using namespace xmc::test;

namespace {

// The update entry points that take a compensation.
enum class Mode { bf16, bf16_state, bf16_rowwise, fp8, fp8_rowwise };

std::string name(Mode m) {
  switch (m) {
    case Mode::bf16:
      return "bf16 weights, fp32 state";
    case Mode::bf16_state:
      return "bf16 weights, bf16 state";
    case Mode::bf16_rowwise:
      return "bf16 weights, row-wise";
    case Mode::fp8:
      return "fp8 weights, fp32 state";
    default:
      return "fp8 weights, row-wise";
  }
}
bool is_fp8(Mode m) { return m == Mode::fp8 || m == Mode::fp8_rowwise; }
bool is_rowwise(Mode m) { return m == Mode::bf16_rowwise || m == Mode::fp8_rowwise; }

OptimizerConfig config_for(Mode m, double lr) {
  OptimizerConfig c;
  c.kahan = true;
  c.lr = lr;
  if (is_rowwise(m)) {
    c.type = OptimizerType::adam;
    c.beta1 = 0.0;
    c.rowwise = true;
  } else if (m == Mode::bf16_state) {
    c.type = OptimizerType::adam;
    c.state_precision = StatePrecision::bf16;
  } else {
    c.type = OptimizerType::sgd;
  }
  return c;
}

// Weights [rows×cols] in one storage, their compensation and optimizer state, on a
// Context's device; values() is each weight as stored plus its compensation.
struct Weights {
  Mode mode;
  int64_t rows, cols;
  Buffer<gpu::Bf16> w16, comp;
  Buffer<gpu::Fp8> w8;
  Buffer<float> scale, s1, s2;
  Buffer<gpu::Bf16> s1b, s2b;

  Weights(Context& ctx, Mode m, const std::vector<float>& x, int64_t rows_, int64_t cols_)
      : mode(m), rows(rows_), cols(cols_) {
    const auto n = x.size();
    const size_t sn = is_rowwise(m) ? static_cast<size_t>(rows) : n;
    comp = put(ctx, std::vector<gpu::Bf16>(n, gpu::Bf16{0}));
    if (is_fp8(m)) {
      std::vector<gpu::Fp8> codes;
      std::vector<float> scales;
      to_fp8_rows(x, rows, cols, codes, scales);
      w8 = put(ctx, codes);
      scale = put(ctx, scales);
    } else {
      w16 = put(ctx, to_bf16(x));
    }
    if (m == Mode::bf16_state) {
      s1b = put(ctx, std::vector<gpu::Bf16>(sn, gpu::Bf16{0}));
      s2b = put(ctx, std::vector<gpu::Bf16>(sn, gpu::Bf16{0}));
    } else {
      s1 = put(ctx, std::vector<float>(sn, 0.0f));
      s2 = put(ctx, std::vector<float>(sn, 0.0f));
    }
  }

  // One update with gradient g (on this device), compensated or not, rounded to nearest or
  // stochastically (key != 0).
  void step(const Context& ctx, const OptimizerConfig& cfg, int64_t t, const float* g, uint64_t key,
            bool compensated) {
    gpu::Bf16* c = compensated ? comp.data() : nullptr;
    const int64_t n = rows * cols;
    float* f1 = optimizer_keeps(cfg, 1) ? s1.data() : nullptr;
    float* f2 = optimizer_keeps(cfg, 2) ? s2.data() : nullptr;
    switch (mode) {
      case Mode::bf16:
        return optimizer_update(ctx, cfg, cfg.lr, t, w16.data(), g, f1, f2, n, key, c);
      case Mode::bf16_state:
        return optimizer_update(ctx, cfg, cfg.lr, t, w16.data(), g, s1b.data(), s2b.data(), n, key,
                                c);
      case Mode::bf16_rowwise:
        return optimizer_update_rowwise(ctx, cfg, cfg.lr, t, w16.data(), g, s2.data(), rows, cols,
                                        key, c);
      default:
        return optimizer_update_fp8(ctx, cfg, cfg.lr, t, w8.data(), scale.data(), g, f1, f2, rows,
                                    cols, key, c);
    }
  }

  // The weights as stored (widened), and their compensation.
  std::vector<float> stored() const {
    const auto n = static_cast<size_t>(rows * cols);
    if (is_fp8(mode)) return widened(get(w8, n), get(scale, static_cast<size_t>(rows)), cols);
    std::vector<float> v(n);
    const auto b = get(w16, n);
    for (size_t i = 0; i < n; ++i) v[i] = gpu::bf16_widen(b[i]);
    return v;
  }
  std::vector<float> residual() const {
    const auto c = get(comp, static_cast<size_t>(rows * cols));
    std::vector<float> v(c.size());
    for (size_t i = 0; i < c.size(); ++i) v[i] = gpu::bf16_widen(c[i]);
    return v;
  }
  // As the update sees them: stored + compensation in fp32.
  std::vector<float> values() const {
    auto v = stored();
    const auto c = residual();
    for (size_t i = 0; i < v.size(); ++i) v[i] += c[i];
    return v;
  }
};

// The fp32 run of the same optimizer (the reference of the compensated ones): fp32 weights,
// the state rounded to bf16 after each step where the optimizer keeps it so
// (cfg.state_precision bf16: the weights' storage is all that differs).
void fp32_step(const OptimizerConfig& cfg, int64_t t, std::vector<float>& w, std::vector<float>& s1,
               std::vector<float>& s2, const std::vector<float>& g, int64_t rows, int64_t cols) {
  testcases::fp32_rows_step(OptimizerStep(cfg, cfg.lr, t), cfg, w, s1, s2, g, rows, cols);
  if (cfg.state_precision == StatePrecision::bf16)
    for (auto* s : {&s1, &s2}) *s = rounded(*s);
}

}  // namespace

TEST_CASE("Kahan compensation: steps below half an ulp of the weights accumulate as in fp32",
          "[dense][optimizer][kahan]") {
  Context cpu;
  for (Mode m : {Mode::bf16, Mode::bf16_state, Mode::bf16_rowwise, Mode::fp8, Mode::fp8_rowwise}) {
    DYNAMIC_SECTION(name(m)) {
      // Weights in [0.75, 1): half an ulp is 2^-9 in bf16, 2^-5 in fp8 (the row's scale maps
      // 1 to 256). Each step moves a weight by about lr: 1/20 and 1/30 of those.
      const int64_t rows = 6, cols = 40, steps = is_fp8(m) ? 500 : 1000;
      const double lr = is_fp8(m) ? 1e-3 : 1e-4;
      const OptimizerConfig cfg = config_for(m, lr);
      OptimizerConfig plain = cfg;
      plain.kahan = false;
      const auto n = static_cast<size_t>(rows * cols);
      Rng rng(7);
      std::vector<float> x0(n);
      for (auto& v : x0) v = 0.75f + 0.25f * rng.uniformf();
      Weights kahan(cpu, m, x0, rows, cols), rounded(cpu, m, x0, rows, cols);
      const auto start = kahan.stored();
      std::vector<float> ref = start, r1(is_rowwise(m) ? static_cast<size_t>(rows) : n, 0.0f),
                         r2 = r1;
      for (int64_t t = 1; t <= steps; ++t) {
        std::vector<float> g(n);
        for (auto& v : g) v = 0.5f + rng.uniformf();  // positive: every weight drifts down
        kahan.step(cpu, cfg, t, g.data(), 0, true);
        rounded.step(cpu, plain, t, g.data(), 0, false);
        fp32_step(cfg, t, ref, r1, r2, g, rows, cols);
      }
      const auto got = kahan.values(), lost = rounded.stored();
      double worst = 0.0;
      for (size_t i = 0; i < n; ++i) {
        const double moved = double{start[i]} - double{ref[i]};
        INFO("weight " << i << ": from " << start[i] << ", fp32 " << ref[i] << ", compensated "
                       << got[i] << ", plain " << lost[i]);
        REQUIRE(moved > 0.05);       // the fp32 run moved it
        CHECK(lost[i] == start[i]);  // rounding alone loses every step
        worst = std::max(worst, std::abs(double{got[i]} - double{ref[i]}) / moved);
      }
      INFO("worst |compensated - fp32| / |fp32 movement| " << worst);
      CHECK(worst < 0.015);
    }
  }
}

TEST_CASE("Kahan compensation: one step is the rule written out", "[dense][optimizer][kahan]") {
  Context cpu;
  for (Mode m : {Mode::bf16, Mode::bf16_rowwise, Mode::fp8, Mode::fp8_rowwise}) {
    DYNAMIC_SECTION(name(m)) {
      const int64_t rows = 5, cols = 33;
      const auto n = static_cast<size_t>(rows * cols);
      const OptimizerConfig cfg = config_for(m, 3e-3);
      Rng rng(11);
      Weights w(cpu, m, random_floats(rng, n, 0.2f), rows, cols);
      for (int64_t t = 1; t <= 3; ++t) {
        INFO("step " << t);
        const auto g = random_floats(rng, n, 0.5f);
        // x = stored + compensation, its fp32 step, then the rounding of x and x − stored.
        std::vector<float> x = w.stored(), c = w.residual();
        for (size_t i = 0; i < n; ++i) x[i] += c[i];
        std::vector<float> s1 = get(w.s1, optimizer_keeps(cfg, 1) ? w.s1.size() : 0);
        std::vector<float> s2 = get(w.s2, w.s2.size());
        fp32_step(cfg, t, x, s1, s2, g, rows, cols);
        w.step(cpu, cfg, t, g.data(), 0, true);
        const auto stored = w.stored(), res = w.residual();
        for (int64_t r = 0; r < rows; ++r) {
          float top = 0.0f;
          for (int64_t j = 0; j < cols; ++j) top = std::fmax(top, std::fabs(x[r * cols + j]));
          const float sc = gpu::fp8_row_scale(top), inv = gpu::fp8_inverse_scale(sc);
          for (int64_t j = 0; j < cols; ++j) {
            const auto i = static_cast<size_t>(r * cols + j);
            const float want = is_fp8(m) ? gpu::fp8_value(gpu::fp8_code(x[i] * inv, 0, false)) * sc
                                         : gpu::bf16_widen(gpu::bf16_round(x[i]));
            INFO("row " << r << " col " << j << " x " << x[i]);
            REQUIRE(stored[i] == want);
            REQUIRE(res[i] == gpu::bf16_widen(gpu::bf16_round(x[i] - want)));
          }
        }
      }
    }
  }
}

DEVICE_TEST("Kahan-compensated updates on the device equal the CPU's",
            "[dense][optimizer][kahan]") {
  Context cpu;
  for (Mode m : {Mode::bf16, Mode::bf16_state, Mode::bf16_rowwise, Mode::fp8, Mode::fp8_rowwise}) {
    for (bool stochastic : {false, true}) {
      DYNAMIC_SECTION(name(m) << (stochastic ? ", stochastic" : ", nearest")) {
        const int64_t rows = 41, cols = 300;
        const auto n = static_cast<size_t>(rows * cols);
        const OptimizerConfig cfg = config_for(m, 2e-3);
        Rng rng(23);
        const auto x0 = random_floats(rng, n, 0.3f);
        Weights dev(ctx, m, x0, rows, cols), host(cpu, m, x0, rows, cols);
        int64_t differ = 0;
        for (int64_t t = 1; t <= 4; ++t) {
          INFO("step " << t);
          const auto g = random_floats(rng, n, 0.5f);
          auto dg = put(ctx, g);
          const uint64_t key = stochastic ? 0x77u + static_cast<uint64_t>(t) : 0;
          dev.step(ctx, cfg, t, dg.data(), key, true);
          host.step(cpu, cfg, t, g.data(), key, true);
          const auto a = dev.stored(), b = host.stored();
          for (size_t i = 0; i < n; ++i) differ += a[i] != b[i];
          // Weight plus compensation: the same value to the pair's ~16 bits (fp8: ~11 bits of
          // the row's largest weight, about 0.3), even where an fp32 contraction moved a
          // rounding.
          const auto want = host.values();
          const std::vector<double> ref(want.begin(), want.end()), row_top(n, 0.3);
          if (is_fp8(m))
            expect_close("weight + compensation", dev.values(), ref, 1e-7, 1.0 / 1024, &row_top);
          else
            expect_close("weight + compensation", dev.values(), ref, 1e-7, 1.0 / 16384);
        }
        // A contraction may move a value across a rounding boundary, rarely.
        INFO(differ << " stored weights differ between the device and the CPU");
        CHECK(differ <= static_cast<int64_t>(4 * n / 500));
      }
    }
  }
}
