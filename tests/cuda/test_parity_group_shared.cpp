// The group_shared backend (HASTE, layers/group_shared.h) on the device under test against
// the same layer on the CPU, built from the same LayerInit and config (so the same initial
// parameters, drawn on the host), and two Model steps. Formerly the plain main()
// test_cuda_parity_group_shared; its trainings: test_parity_training.
//
// Layer level, at odd sizes (L not a multiple of G, B not a multiple of the 64-row tile,
// several label chunks, a partial last group, G = 1, an all-head layer), with and without
// head projection, tail projection and input dropout, four optimizers, two losses:
// initial state identical; ledger = analytic size; forward scores (more rows than the
// batch workspace); three train steps (loss, gradient and exact-zero counts, dh, every
// parameter and optimizer state by name) with a rewiring before step 3 (indices equal,
// weights after); semantic grouping from the same host inputs (label order equal); top-k
// in original ids allowing ties; a device state loaded into a fresh CPU layer and a CPU
// state into a fresh layer on the device score alike; bf16 (CUDA) within bf16 tolerance.
//
// Tolerances as the dense block's (|got - ref| <= abs + |ref|·rel): loss 1e-5 + 1e-4
// relative, dh 1e-6 + 1e-3, parameters 1e-5 + 1e-3 after three steps (the GPU input
// gradient sums by atomics in any order; Adam divides by sqrt(v) of tiny gradients),
// exact-zero counts within 1e-3·count + 2.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "layers/group_shared.h"
#include "parity_support.h"
#include "train/model.h"

using namespace xmc;
using namespace xmc::parity;

namespace {

struct Case {
  std::string name;
  int64_t d, labels, batch;
  int64_t fan_in;
  std::string output;  // the YAML keys of model.output after the type and fan_in
  OptimizerConfig optim;
};

OptimizerConfig optim(OptimizerType type, double lr, double momentum = 0.0, double wd = 0.0) {
  OptimizerConfig o;
  o.type = type;
  o.lr = lr;
  o.momentum = momentum;
  o.weight_decay = wd;
  return o;
}

std::vector<Case> layer_cases() {
  return {
      // head + dropout, several chunks, partial last group (203 - 16 = 187 = 11·16 + 11)
      {"bce adam head dropout", 37, 203, 29, 12,
       "group_size: 16, head_fraction: 0.1, dropout: 0.2, chunk_size: 48",
       optim(OptimizerType::adam, 0.01)},
      // no head, tail projection, B > 64, random grouping, G = 5
      {"squared_hinge sgd-momentum tail projection", 24, 301, 70, 7,
       "group_size: 5, head_fraction: 0.0, tail_projection: 40, loss: squared_hinge, "
       "grouping: random, chunk_size: 35",
       optim(OptimizerType::sgd, 0.05, 0.9, 1e-4)},
      // head projection, G = 40 (several warps per group), F = 33, B = 64
      {"bce adamw head_dim G=40 F=33", 50, 500, 64, 33,
       "group_size: 40, head_fraction: 0.16, head_dim: 16, dropout: 0.1, chunk_size: 120",
       optim(OptimizerType::adamw, 0.01, 0.0, 0.01)},
      // everything: both projections and dropout, B = 1 (a single row)
      {"squared_hinge adam both projections B=1", 30, 130, 1, 16,
       "group_size: 8, head_fraction: 0.2, head_dim: 12, tail_projection: 20, dropout: 0.3, "
       "loss: squared_hinge, chunk_size: 24",
       optim(OptimizerType::adam, 0.01)},
      // G = 1, F = 1 (plain per-label fan-in), plain sgd
      {"bce sgd G=1 F=1", 10, 37, 5, 1, "group_size: 1, head_fraction: 0.0, chunk_size: 8",
       optim(OptimizerType::sgd, 0.1)},
      // all head (no tail): the dense head alone
      {"bce sgd all head", 20, 64, 9, 4, "group_size: 8, head_fraction: 1.0, chunk_size: 16",
       optim(OptimizerType::sgd, 0.1)},
  };
}

LayerInit make_init(Context& ctx, const Case& c) {
  LayerInit init;
  init.ctx = &ctx;
  init.input_dim = c.d;
  init.num_labels = c.labels;
  init.batch_size = c.batch;
  init.optim = c.optim;
  init.seed = 3;
  init.total_steps = 100;
  // A frequency order that is not the identity: label l seen (7·l mod L) times.
  for (int64_t l = 0; l < c.labels; ++l) init.label_freq.push_back((7 * l) % c.labels);
  return init;
}

// The layer of case c on ctx; `extra`: more keys (e.g. precision).
std::unique_ptr<GroupSharedLayer> make(Context& ctx, const Case& c, const std::string& extra = "") {
  return make_layer<GroupSharedLayer>(
      make_init(ctx, c),
      "{type: group_shared, fan_in: " + std::to_string(c.fan_in) + ", " + c.output + extra + "}");
}

}  // namespace

DEVICE_TEST(
    "group_shared layer: state, scores, steps with a rewiring, top-k, state loads, "
    "semantic grouping match the CPU",
    "[group_shared]") {
  for (const Case& c : layer_cases()) {
    DYNAMIC_SECTION(c.name) {
      Rng rng(301);
      Context cpu;
      auto ref = make(cpu, c);
      const int64_t before = ledger_total(ctx);
      auto got = make(ctx, c);
      expect_close("ledger bytes == analytic size", static_cast<double>(ledger_total(ctx) - before),
                   static_cast<double>(got->analytic_bytes()), 0, 0);
      CHECK(got->device_views() == ctx.on_gpu());
      CHECK_FALSE(ref->device_views());
      const int64_t d = c.d, n = c.labels, b = c.batch;
      compare_state("initial", snapshot(*got), snapshot(*ref), kExact);

      // Forward scores, more rows than the workspace (row blocks on the GPU).
      const int64_t rows = 2 * b + 3;
      const auto he = random_floats(rng, static_cast<size_t>(rows * d));
      expect_close("scores", layer_scores(*got, ctx, he, rows), layer_scores(*ref, cpu, he, rows),
                   1e-5, 1e-4);

      // Three steps; a rewiring before the third.
      for (int64_t step = 1; step <= 3; ++step) {
        const std::string sn = "step " + std::to_string(step);
        if (step == 3 && got->tail_labels() > 0) {
          const RewireStats rr = ref->rewire(1000);
          const RewireStats rg = got->rewire(1000);
          expect_close(sn + " rewired slots", static_cast<double>(rg.pruned),
                       static_cast<double>(rr.pruned), 0, 0);
          INFO(sn << " rewiring pruned something");
          CHECK((rr.pruned > 0 || c.fan_in >= got->fanin().input_width()));
        }
        const Batch bt = random_batch(rng, b, n, 4);
        const auto h = random_floats(rng, static_cast<size_t>(b * d));
        compare_step(sn, *ref, *got, ctx, bt, h, {c.optim.lr, step});
        compare_state(sn, snapshot(*got), snapshot(*ref), {.abs = 1e-5, .rel = 1e-3});
      }

      // Top-k in original ids (k beyond L pads).
      for (int k : {1, 5, static_cast<int>(std::min<int64_t>(64, n + 3))})
        compare_layer_topk("", *ref, *got, ctx, he, rows, k);

      // Checkpoint round trips without the file: the device state into a fresh CPU layer,
      // the CPU state into a fresh layer on the device; each scores like its source.
      {
        auto cpu2 = make(cpu, c);
        load_state(*cpu2, snapshot(*got));
        expect_close("device state on the CPU: scores", layer_scores(*cpu2, cpu, he, rows),
                     layer_scores(*got, ctx, he, rows), 1e-5, 1e-4);
        auto dev2 = make(ctx, c);
        load_state(*dev2, snapshot(*ref));
        expect_close("CPU state on the device: scores", layer_scores(*dev2, ctx, he, rows),
                     layer_scores(*ref, cpu, he, rows), 1e-5, 1e-4);
      }

      // Semantic grouping from the same host inputs: the same label order, then the state.
      if (got->tail_labels() > 0) {
        const int64_t npts = 3 * n;
        const auto x = random_floats(rng, static_cast<size_t>(npts * d));
        const Batch pts = random_batch(rng, npts, n, 3);
        ref->regroup_semantic(ConstMatrix(x.data(), npts, d), pts.labels);
        got->regroup_semantic(ConstMatrix(x.data(), npts, d), pts.labels);
        const std::vector<uint32_t> o1(ref->label_order().begin(), ref->label_order().end());
        const std::vector<uint32_t> o2(got->label_order().begin(), got->label_order().end());
        INFO("semantic grouping: the same label order");
        CHECK(o1 == o2);
        compare_state("after semantic grouping", snapshot(*got), snapshot(*ref),
                      {.abs = 1e-5, .rel = 1e-3});
      }
    }
  }
}

// bf16 (head block and tail weights in bf16, projections fp32): one step against the fp32
// CPU layer within bf16 accuracy; the initial weights are the CPU's rounded to bf16 (half
// a bf16 ulp, 2^-9 relative). SGD with momentum: the step is linear in the gradient (Adam's
// first step is lr·sign(g), which bf16 rounding may flip for gradients near zero). After
// the step, gradients summed from bf16 ut and g (2^-8 each) err by up to ~2^-7 of the sum
// of |terms| (~0.3 here): weights and momentum within 5e-3 + 2^-6 relative; scores within
// 2e-2 of the largest + 2e-2 relative.
CUDA_TEST("group_shared bf16: one step within bf16 accuracy of the fp32 CPU layer",
          "[group_shared]") {
  for (const bool sr : {false, true}) {
    DYNAMIC_SECTION((sr ? "stochastic rounding" : "round to nearest")) {
      Rng rng(303);
      Case c = layer_cases()[0];
      c.optim = optim(OptimizerType::sgd, 0.1, 0.9);
      Context cpu;
      auto ref = make(cpu, c);
      const int64_t before = ledger_total(ctx);
      auto got =
          make(ctx, c,
               std::string(", precision: bf16, stochastic_rounding: ") + (sr ? "true" : "false"));
      expect_close("ledger bytes == analytic size", static_cast<double>(ledger_total(ctx) - before),
                   static_cast<double>(got->analytic_bytes()), 0, 0);
      compare_state("initial", snapshot(*got), snapshot(*ref), {.abs = 0.0, .rel = 1.0 / 256});
      const int64_t d = c.d, n = c.labels, b = c.batch;
      const Batch bt = random_batch(rng, b, n, 4);
      const auto h = random_floats(rng, static_cast<size_t>(b * d));
      auto hd = put(ctx, h);
      std::vector<float> dh_ref(static_cast<size_t>(b * d));
      Buffer<float> dh_dev(ctx, MemTag::activations, dh_ref.size());
      const LrState lr{c.optim.lr, 1};
      const StepStats rs =
          ref->train_step(bt, ConstMatrix(h.data(), b, d), Matrix(dh_ref.data(), b, d), lr);
      const StepStats gs =
          got->train_step(bt, ConstMatrix(hd.data(), b, d), Matrix(dh_dev.data(), b, d), lr);
      expect_close("loss", gs.loss, rs.loss, 0.0, 1e-2);
      float scale = 0.0f;
      for (float x : dh_ref) scale = std::max(scale, std::abs(x));
      expect_close("dh", get(dh_dev, dh_ref.size()), dh_ref, 3e-2 * scale, 2e-2);
      compare_state("after one step", snapshot(*got), snapshot(*ref),
                    {.abs = 5e-3, .rel = 1.0 / 64});
      const int64_t rows = 2 * b + 3;
      const auto he = random_floats(rng, static_cast<size_t>(rows * d));
      const auto want = layer_scores(*ref, cpu, he, rows);
      float smax = 0.0f;
      for (float x : want) smax = std::max(smax, std::abs(x));
      expect_close("scores", layer_scores(*got, ctx, he, rows), want, 2e-2 * smax, 2e-2);
    }
  }
}

TEST_CASE("group_shared bf16 on the CPU is an InputError naming precision", "[group_shared]") {
  Context cpu;
  bool threw = false;
  try {
    make(cpu, layer_cases()[0], ", precision: bf16");
  } catch (const InputError& e) {
    threw = std::string(e.what()).find("precision") != std::string::npos;
  }
  CHECK(threw);
}

// Two steps of a Model (encoder with dropout, group_shared with head, tail projection,
// random grouping) against the CPU Model: h (1e-5 + 1e-4), the step's loss (1e-5 + 1e-4)
// and dh (1e-6 + 1e-3); then the top-5 of 250 points (more rows than the batch workspace)
// equal on at least 95% of the positions.
DEVICE_TEST("model: two steps of the group_shared backend match the CPU", "[group_shared][model]") {
  Rng rng(305);
  const ExperimentConfig cfg = experiment_config(
      "{type: group_shared, group_size: 8, fan_in: 16, head_fraction: 0.1, tail_projection: 48, "
      "dropout: 0.1, grouping: random, rewire: {interval: 5, fraction: 0.1, until: 0.66}, "
      "loss: bce, chunk_size: 64}",
      "[{type: linear, out: 64, activation: relu, dropout: 0.1}]", 100);
  ModelMeta meta;
  meta.input_dim = 64;
  meta.num_labels = 301;
  meta.n_train = 1000;
  meta.sparse_input = false;
  for (int64_t l = 0; l < 301; ++l) meta.label_freq.push_back((5 * l) % 17);
  Context cpu;
  Model ref(cpu, cfg, meta, 10);
  Model got(ctx, cfg, meta, 10);
  CHECK(got.output().device_views() == ctx.on_gpu());
  Rng r_ref(1), r_got(1);
  const int64_t b = 100, d = 64;
  std::vector<float> dh_host(static_cast<size_t>(b * d));
  Buffer<float> dh_dev(ctx, MemTag::activations, dh_host.size());
  for (int64_t step = 1; step <= 2; ++step) {
    const std::string sn = "step " + std::to_string(step);
    const Batch bt = feature_batch(rng, false, b, d, 301);
    const ConstMatrix h1 = ref.encoder().forward(bt, true, r_ref);
    const ConstMatrix h2 = got.encoder().forward(bt, true, r_got);
    expect_close(sn + " h", host_copy(ctx, h2), std::vector<float>(h1.data, h1.data + b * d), 1e-5,
                 1e-4);
    const StepStats s1 =
        ref.output().train_step(bt, h1, Matrix(dh_host.data(), b, d), {0.01, step});
    const StepStats s2 = got.output().train_step(bt, h2, Matrix(dh_dev.data(), b, d), {0.01, step});
    expect_close(sn + " loss", s2.loss, s1.loss, 1e-5, 1e-4);
    expect_close(sn + " dh", get(dh_dev, dh_host.size()), dh_host, 1e-6, 1e-3);
    ref.encoder().backward_update(ConstMatrix(dh_host.data(), b, d), 0.01, step);
    got.encoder().backward_update(ConstMatrix(dh_dev.data(), b, d), 0.01, step);
  }
  const Batch bt = feature_batch(rng, false, 250, d, 301);
  const TopK t1 = ref.predict(bt, 5);
  const TopK t2 = got.predict(bt, 5);
  REQUIRE(t2.labels.size() == t1.labels.size());
  int same = 0;
  for (size_t i = 0; i < t1.labels.size(); ++i) same += t1.labels[i] == t2.labels[i];
  INFO(same << " of " << t1.labels.size() << " top-5 positions agree");
  CHECK(same >= static_cast<int>(0.95 * static_cast<double>(t1.labels.size())));
}
