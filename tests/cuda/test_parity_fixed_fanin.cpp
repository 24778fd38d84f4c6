// The fixed_fanin backend (layers/fixed_fanin.h) on the device under test against the same
// layer on the CPU, built from the same LayerInit and config (so the same initial state).
// Formerly the plain main() test_cuda_parity_fixed_fanin.
//
// Checked: identical initial state (indices, weights bit for bit); three training steps
// per configuration (loss, zero-gradient count, dh, every parameter and optimizer-state
// array after each update) over odd sizes — L not a multiple of the label tile, a partial
// last label chunk, B = 37 and B = 1, F = 5 / 13 / 40 (more than one 32-slot pass), with
// and without the intermediate ReLU layer (m = 80 takes the shared-memory input gradient,
// m = 900 the global-atomics one), input dropout, both losses, four optimizers; scores and
// top-k over more rows than the workspace holds; a rewiring from identical state giving
// bit-identical indices, weights and moments on both devices, then further steps; state()
// names and shapes and a checkpoint round trip (CPU state uploaded, same scores); the
// ledger against analytic_bytes(); the per-op timings. Whole trainings: test_parity_training.
//
// Tolerances (dh, weights: abs + |ref|·rel): as the dense block's; zero-gradient counts
// within 1e-3 of the entries + 2 (logits near the hinge differ in the last bit).
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "layers/fixed_fanin.h"
#include "parity_support.h"

using namespace xmc;
using namespace xmc::parity;

namespace {

struct Case {
  std::string loss;
  int64_t inter;
  double dropout;
  int opt;  // index into optimizers()
  int64_t d, n, f, batch, chunk;
};

std::string describe(const Case& c) {
  return c.loss + " inter " + std::to_string(c.inter) + " dropout " +
         std::to_string(c.dropout).substr(0, 3) + " " +
         parity::describe(optimizers()[static_cast<size_t>(c.opt)]) + " L=" + std::to_string(c.n) +
         " F=" + std::to_string(c.f) + " B=" + std::to_string(c.batch);
}

LayerInit make_init(Context& ctx, const Case& c) {
  LayerInit init;
  init.ctx = &ctx;
  init.input_dim = c.d;
  init.num_labels = c.n;
  init.batch_size = c.batch;
  init.optim = optimizers()[static_cast<size_t>(c.opt)];
  init.seed = 1234;
  init.label_freq.assign(static_cast<size_t>(c.n), 1);
  init.total_steps = 100;
  return init;
}

// The layer of case c on ctx; rewiring driven by hand here (interval 0), fraction 0.2.
std::unique_ptr<FixedFaninLayer> make(Context& ctx, const Case& c, bool gpu_timing = false) {
  const std::string yaml =
      "{type: fixed_fanin, fan_in: " + std::to_string(c.f) +
      ", intermediate: " + std::to_string(c.inter) + ", dropout: " + std::to_string(c.dropout) +
      ", loss: " + c.loss + ", chunk_size: " + std::to_string(c.chunk) +
      ", rewire: {interval: 0, fraction: 0.2}, gpu_timing: " + (gpu_timing ? "true" : "false") +
      "}";
  return make_layer<FixedFaninLayer>(make_init(ctx, c), yaml);
}

StateTolerance step_tolerance(const Case& c, int64_t step) {
  return {.abs = 1e-6,
          .rel = 1e-3,
          .weight_abs = adam_weight_allowance(optimizers()[static_cast<size_t>(c.opt)], step),
          .opt2_abs = 1e-8};
}

// A step of both layers on a fresh batch of B rows and h.
void step_both(const std::string& what, FixedFaninLayer& ref, FixedFaninLayer& got, Context& ctx,
               Rng& rng, const Case& c, int64_t step) {
  const Batch b = random_batch(rng, c.batch, c.n, 4);
  const auto h = random_floats(rng, static_cast<size_t>(c.batch * c.d));
  compare_step(what, ref, got, ctx, b, h, {optimizers()[static_cast<size_t>(c.opt)].lr, step});
}

// Scores (1e-5 + 1e-4) and top-5 over more rows than the step workspace (row blocks of the
// batch size on the GPU).
void compare_scores_topk(const std::string& what, FixedFaninLayer& ref, FixedFaninLayer& got,
                         Context& ctx, Rng& rng, const Case& c) {
  const int64_t rows = 2 * c.batch + 3;
  const auto h = random_floats(rng, static_cast<size_t>(rows * c.d));
  Context cpu;
  expect_close(what + " scores", layer_scores(got, ctx, h, rows), layer_scores(ref, cpu, h, rows),
               1e-5, 1e-4);
  compare_layer_topk(what, ref, got, ctx, h, rows, static_cast<int>(std::min<int64_t>(5, c.n)));
}

}  // namespace

DEVICE_TEST("fixed_fanin layer: initial state, three steps, scores and top-k match the CPU",
            "[fixed_fanin]") {
  const std::vector<Case> cases = {
      {"squared_hinge", 0, 0.0, 0, 48, 1003, 13, 37, 300},
      {"squared_hinge", 80, 0.2, 2, 48, 1003, 13, 37, 300},
      {"bce", 0, 0.2, 1, 48, 1003, 40, 37, 300},
      {"bce", 900, 0.0, 3, 48, 1003, 40, 37, 256},
      {"squared_hinge", 900, 0.1, 2, 48, 50, 5, 1, 8192},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(describe(c)) {
      Rng rng(201);
      Context cpu;
      auto ref = make(cpu, c);
      auto got = make(ctx, c);
      CHECK(got->device_views() == ctx.on_gpu());
      CHECK_FALSE(ref->device_views());
      compare_state("initial", snapshot(*got), snapshot(*ref), kExact);
      for (int64_t step = 1; step <= 3; ++step) {
        const std::string sn = "step " + std::to_string(step);
        step_both(sn, *ref, *got, ctx, rng, c, step);
        compare_state(sn, snapshot(*got), snapshot(*ref), step_tolerance(c, step));
      }
      const auto& tr = ref->fanin().timings();
      const auto& tg = got->fanin().timings();
      expect_close("skipped labels (weight-gradient counter)",
                   static_cast<double>(tg.skipped_labels), static_cast<double>(tr.skipped_labels),
                   1e-3 * static_cast<double>(tr.label_steps) + 2, 0);
      expect_close("label steps", static_cast<double>(tg.label_steps),
                   static_cast<double>(tr.label_steps), 0, 0);
      if (ctx.on_gpu()) {  // the CPU always times its ops
        INFO("no per-op GPU times without gpu_timing");
        CHECK((tg.forward == 0.0 && tg.update == 0.0));
      }
      compare_scores_topk("", *ref, *got, ctx, rng, c);
    }
  }
}

// Near-equal weights could fall on either side of the global |w| threshold, so the CPU
// layer takes the device layer's state first: then the rewiring must agree bit for bit
// (pruned count, indices, weights, moments), change exactly the pruned slots, and two
// more steps still match.
DEVICE_TEST("fixed_fanin rewiring from identical state is identical, later steps match",
            "[fixed_fanin]") {
  for (const Case& c : {Case{"squared_hinge", 0, 0.0, 2, 48, 1003, 13, 37, 300},
                        Case{"bce", 80, 0.1, 1, 48, 517, 40, 37, 128}}) {
    DYNAMIC_SECTION(describe(c)) {
      Rng rng(203);
      Context cpu;
      auto ref = make(cpu, c);
      auto got = make(ctx, c);
      for (int64_t step = 1; step <= 2; ++step)
        step_both("step " + std::to_string(step), *ref, *got, ctx, rng, c, step);
      const Snapshot before = snapshot(*got);
      load_state(*ref, before);
      const RewireStats rr = ref->rewire(3);
      const RewireStats rg = got->rewire(3);
      CHECK(rr.pruned > 0);
      expect_close("pruned", static_cast<double>(rg.pruned), static_cast<double>(rr.pruned), 0, 0);
      const Snapshot after = snapshot(*got);
      compare_state("after rewiring (exact)", after, snapshot(*ref), kExact);
      const auto& idx0 = std::get<std::vector<uint32_t>>(
          std::find_if(before.begin(), before.end(), [](const Tensor& t) {
            return t.name == "output/indices";
          })->values);
      const auto& idx1 = std::get<std::vector<uint32_t>>(
          std::find_if(after.begin(), after.end(), [](const Tensor& t) {
            return t.name == "output/indices";
          })->values);
      REQUIRE(idx0.size() == idx1.size());
      int64_t changed = 0;
      for (size_t i = 0; i < idx0.size(); ++i) changed += idx0[i] != idx1[i];
      expect_close("changed slots == pruned", static_cast<double>(changed),
                   static_cast<double>(rg.pruned), 0, 0);
      for (int64_t step = 3; step <= 4; ++step) {
        const std::string sn = "step " + std::to_string(step) + " after rewiring";
        step_both(sn, *ref, *got, ctx, rng, c, step);
        compare_state(sn, snapshot(*got), snapshot(*ref), step_tolerance(c, step));
      }
    }
  }
}

// The ledger (device + pinned on the GPU) grows by analytic_bytes() at construction, and no
// host copy of the parameters stays on the GPU; a CPU layer's state loaded into the layer
// under test (the checkpoint load path) gives the same state and scores, and frees the
// host copies again; with gpu_timing every op of a step gets a time and the step counts
// B·L gradients over L labels.
DEVICE_TEST("fixed_fanin state load, ledger, timings", "[fixed_fanin]") {
  const Case c{"squared_hinge", 80, 0.2, 2, 48, 1003, 13, 37, 300};
  Rng rng(205);
  Context cpu;
  const int64_t before = ledger_total(ctx);
  auto got = make(ctx, c, /*gpu_timing=*/true);
  expect_close("ledger bytes (device + pinned) == analytic size",
               static_cast<double>(ledger_total(ctx) - before),
               static_cast<double>(got->analytic_bytes()), 0, 0);
  if (ctx.on_gpu())
    expect_close("no host copies of the parameters left",
                 static_cast<double>(ctx.ledger().current(MemTag::weights, MemSpace::host)), 0, 0,
                 0);

  // A CPU layer trained one step (so its state differs from the initial one).
  auto ref = make(cpu, c);
  {
    const Batch b = random_batch(rng, c.batch, c.n, 4);
    const auto h = random_floats(rng, static_cast<size_t>(c.batch * c.d));
    std::vector<float> dh(h.size());
    ref->train_step(b, ConstMatrix(h.data(), c.batch, c.d), Matrix(dh.data(), c.batch, c.d),
                    {0.01, 1});
  }
  load_state(*got, snapshot(*ref));
  if (ctx.on_gpu())
    expect_close("host copies freed after to_device",
                 static_cast<double>(ctx.ledger().current(MemTag::weights, MemSpace::host)), 0, 0,
                 0);
  compare_state("checkpoint round trip", snapshot(*got), snapshot(*ref), kExact);
  compare_scores_topk("after checkpoint load", *ref, *got, ctx, rng, c);

  step_both("timed step", *ref, *got, ctx, rng, c, 2);
  const auto& t = got->fanin().timings();
  INFO("timings fill forward, loss, backward, update, intermediate");
  CHECK(t.forward > 0.0);
  CHECK(t.loss > 0.0);
  CHECK(t.backward_input > 0.0);
  CHECK(t.backward_weight > 0.0);
  CHECK(t.update > 0.0);
  CHECK(t.intermediate_backward > 0.0);
  CHECK(t.grads == c.batch * c.n);
  CHECK(t.label_steps == c.n);
}
