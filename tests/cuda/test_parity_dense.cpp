// The dense backends beyond the ops (tests/ops holds the GEMMs, losses, optimizer updates
// and top-k merge): a DenseBlock's steps, its bf16 weights, its top-k and its memory; the
// encoder; two Model steps of the dense and bottleneck backends — each on the device under
// test against the same thing on the CPU (support/device_test.h, parity_support.h).
// Formerly the plain main() test_cuda_parity (tests/cuda/test_parity.cpp).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/cuda_context.h"
#include "core/memory_ledger.h"
#include "layers/dense_block.h"
#include "model/encoder.h"
#include "parity_support.h"
#include "support/fp8_rows.h"
#include "train/model.h"

using namespace xmc;
using namespace xmc::parity;

namespace {

// A DenseBlock step on the block's device: h and dh (overwritten: starts at 7) through
// Buffers on ctx.
StepStats block_step(Context& ctx, DenseBlock& block, const CsrMatrix& t,
                     const std::vector<float>& h, std::vector<float>& dh, int64_t d,
                     const LrState& lr) {
  const int64_t batch = static_cast<int64_t>(h.size()) / d;
  auto dev_h = put(ctx, h);
  auto dev_dh = put(ctx, std::vector<float>(dh.size(), 7.0f));
  const StepStats st =
      block.train_step(t, ConstMatrix(dev_h.data(), batch, d), Matrix(dev_dh.data(), batch, d), lr);
  dh = get(dev_dh, dh.size());
  return st;
}

// One step of the reference block and of the block under test on the same targets (5 a
// row) and inputs h (uniform in ±h_scale): both blocks' StepStats and dh.
struct StepPair {
  StepStats ref, got;
  std::vector<float> dh_ref, dh_got;
};
StepPair step_both(Context& ctx, DenseBlock& ref, DenseBlock& got, Rng& rng, int64_t batch,
                   int64_t d, int64_t labels, const LrState& lr, float h_scale = 1.0f) {
  const CsrMatrix t = random_targets(rng, batch, labels, 5);
  const auto h = random_floats(rng, static_cast<size_t>(batch * d), h_scale);
  StepPair p;
  p.dh_ref.assign(h.size(), 7.0f);
  p.dh_got.resize(h.size());
  p.ref = ref.train_step(t, ConstMatrix(h.data(), batch, d), Matrix(p.dh_ref.data(), batch, d), lr);
  p.got = block_step(ctx, got, t, h, p.dh_got, d, lr);
  return p;
}

}  // namespace

// Two steps of a block over labels [50, 1050) of 1070 (chunks of 300, the last partial),
// d = 64, B = 32, for every loss and update rule, from the same seed: initial weights bit
// for bit; per step the loss (1e-5 + 1e-4 relative), the gradient count (exact), the zero
// count (1e-3 of the count + 2), dh (1e-6 + 1e-3), the weights (1e-6 + Adam's allowance,
// 1e-4), bias (1e-6 + 1e-4) and both optimizer moments (1e-6 / 1e-8 + 1e-3).
DEVICE_TEST("dense block: two steps match the CPU block for every loss and optimizer", "[dense]") {
  const int64_t d = 64, lo = 50, n = 1000, batch = 32, chunk = 300, labels = lo + n + 20;
  for (LossType loss : {LossType::bce, LossType::squared_hinge, LossType::softmax}) {
    for (const OptimizerConfig& cfg : optimizers()) {
      DYNAMIC_SECTION(to_string(loss) << " " << describe(cfg)) {
        Rng rng(101);
        Context cpu;
        DenseBlock ref(cpu, d, lo, n, batch, chunk, loss, cfg, 42);
        DenseBlock got(ctx, d, lo, n, batch, chunk, loss, cfg, 42);
        expect_close("initial weights", floats(snapshot(got), "weight"),
                     floats(snapshot(ref), "weight"), 0.0, 0.0);
        for (int64_t step = 1; step <= 2; ++step) {
          const std::string sn = "step " + std::to_string(step);
          const LrState lr{cfg.lr, step};
          const StepPair pair = step_both(ctx, ref, got, rng, batch, d, labels, lr);
          const StepStats &rs = pair.ref, &gs = pair.got;
          const std::vector<float>&dh_ref = pair.dh_ref, &dh_got = pair.dh_got;
          expect_close(sn + " loss", gs.loss, rs.loss, 1e-5, 1e-4);
          expect_close(sn + " grads", static_cast<double>(gs.grads), static_cast<double>(rs.grads),
                       0, 0);
          expect_close(sn + " zero gradients", static_cast<double>(gs.zero_grads),
                       static_cast<double>(rs.zero_grads), 1e-3 * static_cast<double>(rs.grads) + 2,
                       0);
          expect_close(sn + " dh", dh_got, dh_ref, 1e-6, 1e-3);
          const Snapshot sg = snapshot(got), sr = snapshot(ref);
          expect_close(sn + " weight", floats(sg, "weight"), floats(sr, "weight"),
                       1e-6 + adam_weight_allowance(cfg, step), 1e-4);
          expect_close(sn + " bias", floats(sg, "bias"), floats(sr, "bias"), 1e-6, 1e-4);
          expect_close(sn + " weight_opt1", floats(sg, "weight_opt1"), floats(sr, "weight_opt1"),
                       1e-6, 1e-3);
          expect_close(sn + " weight_opt2", floats(sg, "weight_opt2"), floats(sr, "weight_opt2"),
                       1e-8, 1e-3);
        }
      }
    }
  }
}

// The gradient sparsified (DenseBlock::set_sparse_gradient, per-point threshold 0.05): on
// the CPU the backward products run over G's non-zeros, on CUDA the GEMMs take the
// sparsified G; both draw the same entries (ops/loss.h sparsify_gradient). Two Adam steps
// per loss against the CPU block with the first test's tolerances, and the block's ledger
// bytes equal its analytic size (the CPU's sparse workspaces; none on CUDA).
DEVICE_TEST("dense block with a sparse gradient: two steps match the CPU block", "[dense]") {
  const int64_t d = 64, lo = 50, n = 1000, batch = 32, chunk = 300, labels = lo + n + 20;
  for (LossType loss : {LossType::bce, LossType::squared_hinge, LossType::softmax}) {
    DYNAMIC_SECTION(to_string(loss)) {
      Rng rng(107);
      const OptimizerConfig cfg = optimizers()[2];
      Context cpu;
      DenseBlock ref(cpu, d, lo, n, batch, chunk, loss, cfg, 11);
      ref.set_sparse_gradient(0.05);
      const MemSpace space = ctx.on_gpu() ? MemSpace::device : MemSpace::host;
      const int64_t before = ctx.ledger().total_current(space);
      DenseBlock got(ctx, d, lo, n, batch, chunk, loss, cfg, 11);
      got.set_sparse_gradient(0.05);
      CHECK(ctx.ledger().total_current(space) - before == got.analytic_bytes());
      for (int64_t step = 1; step <= 2; ++step) {
        const std::string sn = "step " + std::to_string(step);
        const LrState lr{cfg.lr, step};
        const StepPair pair = step_both(ctx, ref, got, rng, batch, d, labels, lr, 3.0f);
        const StepStats &rs = pair.ref, &gs = pair.got;
        const std::vector<float>&dh_ref = pair.dh_ref, &dh_got = pair.dh_got;
        expect_close(sn + " loss", gs.loss, rs.loss, 1e-5, 1e-4);
        expect_close(sn + " dh", dh_got, dh_ref, 1e-6, 1e-3);
        const Snapshot sg = snapshot(got), sr = snapshot(ref);
        expect_close(sn + " weight", floats(sg, "weight"), floats(sr, "weight"),
                     1e-6 + adam_weight_allowance(cfg, step), 1e-4);
        expect_close(sn + " bias", floats(sg, "bias"), floats(sr, "bias"), 1e-6, 1e-4);
        expect_close(sn + " weight_opt2", floats(sg, "weight_opt2"), floats(sr, "weight_opt2"),
                     1e-8, 1e-3);
      }
    }
  }
}

// bf16 weights (on CUDA h, G and W rounded to 8 bits of mantissa for bf16 GEMMs; on the CPU
// W widened to fp32 chunk by chunk; stochastic rounding of the update), with fp32 or bf16
// optimizer state: two Adam steps against the fp32 CPU block within bf16 accuracy — the
// loss within 1e-2 relative, dh within a few bf16 ulps of the largest reference value
// (3e-2·max|dh| + 2e-2 relative), the weights within 2 bf16 ulps + Adam's allowance but for
// at most 0.1% moved by a sign flip (never more than 2·lr a step) — and
// the block's ledger bytes equal its analytic size (half the fp32 weights; bf16 state
// halves the state too).
DEVICE_TEST("dense block bf16: two steps within bf16 accuracy of the fp32 CPU block", "[dense]") {
  const int64_t d = 64, lo = 50, n = 1000, batch = 32, chunk = 300, labels = lo + n + 20;
  for (LossType loss : {LossType::bce, LossType::softmax}) {
    for (StatePrecision sp : {StatePrecision::fp32, StatePrecision::bf16}) {
      DYNAMIC_SECTION(to_string(loss) << ", state " << to_string(sp)) {
        Rng rng(103);
        OptimizerConfig cfg = optimizers()[2];
        Context cpu;
        DenseBlock ref(cpu, d, lo, n, batch, chunk, loss, cfg, 7);
        cfg.state_precision = sp;
        const MemSpace space = ctx.on_gpu() ? MemSpace::device : MemSpace::host;
        const int64_t before = ctx.ledger().total_current(space);
        DenseBlock got(ctx, d, lo, n, batch, chunk, loss, cfg, 7,
                       DensePrecision{Precision::bf16, true});
        CHECK(ctx.ledger().total_current(space) - before == got.analytic_bytes());
        expect_close("initial weights", floats(snapshot(got), "weight"),
                     rounded(floats(snapshot(ref), "weight")), 0.0, 0.0);
        for (int64_t step = 1; step <= 2; ++step) {
          const std::string sn = "step " + std::to_string(step);
          const LrState lr{cfg.lr, step};
          const StepPair pair = step_both(ctx, ref, got, rng, batch, d, labels, lr);
          const StepStats &rs = pair.ref, &gs = pair.got;
          const std::vector<float>&dh_ref = pair.dh_ref, &dh_got = pair.dh_got;
          expect_close(sn + " loss", gs.loss, rs.loss, 0.0, 1e-2);
          float scale = 0.0f;
          for (float x : dh_ref) scale = std::max(scale, std::abs(x));
          expect_close(sn + " dh", dh_got, dh_ref, 3e-2 * scale, 2e-2);
          // Adam's first steps are ±lr whatever the gradient's size: where a gradient
          // near zero changes sign with the rounding, the weight moves 2·lr the other way.
          // At most 0.1% of the weights may do so; none by more.
          const auto wg = floats(snapshot(got), "weight"), wr = floats(snapshot(ref), "weight");
          expect_close(sn + " weight", wg, wr, 2.0 * cfg.lr * static_cast<double>(step), 1.0 / 64);
          int64_t flipped = 0;
          for (size_t i = 0; i < wg.size(); ++i)
            flipped +=
                std::abs(wg[i] - wr[i]) > adam_weight_allowance(cfg, step) + std::abs(wr[i]) / 64;
          INFO(sn << ": " << flipped << " of " << wg.size() << " weights moved by a flipped sign");
          CHECK(flipped <= static_cast<int64_t>(wg.size()) / 1000);
        }
      }
    }
  }
}

// fp8 weights (e4m3, a power-of-two scale per label row; on CUDA each chunk widened into
// bf16 for bf16 GEMMs on h and G rounded, on the CPU widened to fp32), stochastic rounding,
// with Adam's fp32 state and with the lean row-wise moment: the initial weights are the
// fp32 CPU block's rounded per row to nearest (exactly), then two steps against that block
// within fp8 accuracy — the loss within 2e-2 relative, dh within 0.1·max|dh| + 5e-2
// relative, every weight within one fp8 step at its row's scale (for each rounding so far) +
// Adam's allowance but for at most 3% moved by a sign flip (never more than 2·lr a step +
// 2e-3; Adam's first steps are ±lr whatever the gradient's size, and fp8 logits flip the
// sign of ~1% of the small gradients: 669 of 64 000 with softmax on the CPU; a wrong kernel
// moves about half) — and the ledger bytes equal the analytic size (a byte a weight and a
// float a row).
DEVICE_TEST("dense block fp8: two steps within fp8 accuracy of the fp32 CPU block",
            "[dense][fp8]") {
  const int64_t d = 64, lo = 50, n = 1000, batch = 32, chunk = 300, labels = lo + n + 20;
  for (LossType loss : {LossType::bce, LossType::softmax}) {
    for (bool rowwise : {false, true}) {
      DYNAMIC_SECTION(to_string(loss) << (rowwise ? ", rowwise" : ", adam")) {
        Rng rng(109);
        OptimizerConfig cfg = optimizers()[2];
        REQUIRE(cfg.type == OptimizerType::adam);
        cfg.beta1 = rowwise ? 0.0 : cfg.beta1;
        cfg.rowwise = rowwise;
        Context cpu;
        DenseBlock ref(cpu, d, lo, n, batch, chunk, loss, cfg, 7);
        const MemSpace space = ctx.on_gpu() ? MemSpace::device : MemSpace::host;
        const int64_t before = ctx.ledger().total_current(space);
        DenseBlock got(ctx, d, lo, n, batch, chunk, loss, cfg, 7,
                       DensePrecision{Precision::fp8, true});
        CHECK(ctx.ledger().total_current(space) - before == got.analytic_bytes());
        CHECK(ctx.ledger().current(MemTag::weights, space) == n * d + 4 * n + 4 * n);
        // The row scales of the reference's rows, and one fp8 step at each weight.
        auto quanta = [&](const std::vector<float>& w) {
          std::vector<double> q(w.size());
          for (int64_t r = 0; r < n; ++r) {
            float top = 0.0f;
            for (int64_t j = 0; j < d; ++j) top = std::fmax(top, std::fabs(w[r * d + j]));
            const double sc = gpu::fp8_row_scale(top);
            for (int64_t j = 0; j < d; ++j) q[r * d + j] = sc * fp8_quantum(w[r * d + j] / sc);
          }
          return q;
        };
        {
          const auto want = fp8_rounded_rows(floats(snapshot(ref), "weight"), n, d);
          expect_close("initial weights", floats(snapshot(got), "weight"), want, 0.0, 0.0);
        }
        for (int64_t step = 1; step <= 2; ++step) {
          const std::string sn = "step " + std::to_string(step);
          const LrState lr{cfg.lr, step};
          const StepPair pair = step_both(ctx, ref, got, rng, batch, d, labels, lr);
          const StepStats &rs = pair.ref, &gs = pair.got;
          const std::vector<float>&dh_ref = pair.dh_ref, &dh_got = pair.dh_got;
          expect_close(sn + " loss", gs.loss, rs.loss, 0.0, 2e-2);
          float scale = 0.0f;
          for (float x : dh_ref) scale = std::max(scale, std::abs(x));
          expect_close(sn + " dh", dh_got, dh_ref, 0.1 * scale, 5e-2);
          const auto wg = floats(snapshot(got), "weight"), wr = floats(snapshot(ref), "weight");
          expect_close(sn + " weight", wg, wr, 2.0 * cfg.lr * static_cast<double>(step) + 2e-3,
                       0.25);
          const auto q = quanta(wr);
          int64_t flipped = 0;
          for (size_t i = 0; i < wg.size(); ++i)
            flipped += std::abs(wg[i] - wr[i]) >
                       adam_weight_allowance(cfg, step) + static_cast<double>(step + 1) * q[i];
          INFO(sn << ": " << flipped << " of " << wg.size() << " weights moved by a flipped sign");
          CHECK(flipped <= 3 * static_cast<int64_t>(wg.size()) / 100);
        }
      }
    }
  }
}

// The block's streamed top-k (rows in blocks of the batch size, labels in chunks) against
// the CPU block's scores of every label, ties allowed (parity_support.h compare_topk).
DEVICE_TEST("dense block top-k matches the CPU block's scores, ties allowed", "[dense]") {
  const int64_t d = 48, lo = 0, n = 2500, chunk = 600, max_batch = 16, rows = 40;
  Rng rng(107);
  const OptimizerConfig cfg = optimizers()[0];
  Context cpu;
  DenseBlock ref(cpu, d, lo, n, max_batch, chunk, LossType::bce, cfg, 3);
  DenseBlock got(ctx, d, lo, n, max_batch, chunk, LossType::bce, cfg, 3);
  auto h = random_floats(rng, static_cast<size_t>(rows * d));
  std::vector<float> all(static_cast<size_t>(rows * n));
  for (int64_t r0 = 0; r0 < rows; r0 += max_batch) {
    const int64_t b = std::min(max_batch, rows - r0);
    ref.scores(ConstMatrix(h.data() + r0 * d, b, d), lo, Matrix(all.data() + r0 * n, b, n));
  }
  auto dh = put(ctx, h);
  for (int k : {1, 5, 20}) {
    TopKAccumulator acc(rows, k);
    acc.add_chunk(ConstMatrix(all.data(), rows, n), lo);
    compare_topk("dense topk k=" + std::to_string(k), acc.result(),
                 got.topk(ConstMatrix(dh.data(), rows, d), k, max_batch), all, n);
  }
}

// The ledger against the block's analytic size and against the driver: a block of 100000
// labels, d = 256, Adam, on a Context of its own; the driver counts what the ledger counts
// plus allocator granularity and the cuBLAS context (tens of MiB): at least 0.99 × the
// ledger, at most 1.1 × + 256 MiB; the ledger back to the Context's own bytes after.
CUDA_TEST("dense block memory: ledger == analytic, the driver's figure near the ledger",
          "[dense]") {
  const int64_t baseline = gpu::device_mem_info().used_bytes();
  const OptimizerConfig cfg = optimizers()[2];
  Context local(Device::cuda);
  MemoryLedger& ledger = local.ledger();
  const int64_t ctx_bytes = ledger.total_current(MemSpace::device);
  {
    DenseBlock block(local, 256, 0, 100000, 256, 8192, LossType::bce, cfg, 1);
    const int64_t recorded = ledger.total_current(MemSpace::device) - ctx_bytes;
    expect_close("ledger bytes of a dense block == analytic size", static_cast<double>(recorded),
                 static_cast<double>(block.analytic_bytes()), 0, 0);
    const gpu::MemCrossCheck mc = gpu::memory_cross_check(ledger, baseline);
    WARN("memory: ledger " << mc.ledger_bytes << " bytes, driver " << mc.driver_bytes
                           << " bytes (excess " << 100.0 * mc.relative_excess() << "%)");
    CHECK(static_cast<double>(mc.driver_bytes) >= 0.99 * static_cast<double>(mc.ledger_bytes));
    CHECK(static_cast<double>(mc.driver_bytes) <=
          1.1 * static_cast<double>(mc.ledger_bytes) + (256 << 20));
  }
  expect_close("ledger device bytes back to the context's own",
               static_cast<double>(ledger.total_current(MemSpace::device)),
               static_cast<double>(ctx_bytes), 0, 0);
}

// The encoder against the CPU encoder, same seed, same dropout draws (the Rng states
// equal after): sparse input (sparse_linear + linear) and dense (two linear layers), every
// update rule, three steps with a random dh: forward within 1e-5 + 1e-4, every state
// tensor after (1e-4 + 1e-3), then an evaluation forward of 300 rows (more than a batch
// workspace) without dropout (1e-4 + 1e-3).
DEVICE_TEST("encoder: three steps, state and evaluation forward match the CPU encoder",
            "[encoder]") {
  for (const bool sparse : {true, false}) {
    for (const OptimizerConfig& cfg : optimizers()) {
      DYNAMIC_SECTION((sparse ? "sparse " : "dense ") << describe(cfg)) {
        Rng rng(109);
        const std::string layers_yaml =
            sparse ? "[{type: sparse_linear, out: 40, activation: relu, dropout: 0.2}, "
                     "{type: linear, out: 24, activation: relu, dropout: 0.3}]"
                   : "[{type: linear, out: 40, activation: relu, dropout: 0.1}, "
                     "{type: linear, out: 24, activation: none, dropout: 0.0}]";
        const auto layers = experiment_config("{type: dense}", layers_yaml).model.encoder;
        const int64_t dim = sparse ? 500 : 64, rows = 37;
        Context cpu;
        Encoder ref(cpu, layers, dim, sparse, cfg, 11);
        Encoder got(ctx, layers, dim, sparse, cfg, 11);
        Rng r_ref(5), r_got(5);
        for (int step = 1; step <= 3; ++step) {
          const Batch b = feature_batch(rng, sparse, rows, dim, 10);
          const ConstMatrix h_ref = ref.forward(b, true, r_ref);
          const std::vector<float> want(h_ref.data, h_ref.data + h_ref.rows * h_ref.cols);
          expect_close("forward step " + std::to_string(step),
                       host_copy(ctx, got.forward(b, true, r_got)), want, 1e-5, 1e-4);
          const auto dh = random_floats(rng, want.size(), 0.1f);
          auto dh_dev = put(ctx, dh);
          ref.backward_update(ConstMatrix(dh.data(), rows, 24), 1e-2, step);
          got.backward_update(ConstMatrix(dh_dev.data(), rows, 24), 1e-2, step);
          ctx.synchronize();
        }
        INFO("same dropout draws");
        CHECK(r_ref.state() == r_got.state());
        compare_state("after 3 steps", snapshot(got), snapshot(ref),
                      StateTolerance{.abs = 1e-4, .rel = 1e-3});
        const Batch b = feature_batch(rng, sparse, 300, dim, 10);
        Rng unused(0);
        const ConstMatrix e_ref = ref.forward(b, false, unused);
        const std::vector<float> want(e_ref.data, e_ref.data + e_ref.rows * e_ref.cols);
        expect_close("eval forward", host_copy(ctx, got.forward(b, false, unused)), want, 1e-4,
                     1e-3);
      }
    }
  }
}

// Two steps of a Model (encoder with dropout + output layer) of the dense and bottleneck
// backends against the CPU Model (same config, same seed): the output layer on the device
// (device views), the step's loss (1e-5 + 1e-4) and dh (1e-6 + 1e-3), then the top-5 of 50
// points equal on at least 95% of the positions.
DEVICE_TEST("model: two steps of the dense and bottleneck backends match the CPU",
            "[dense][model]") {
  for (const std::string type : {"dense", "bottleneck"}) {
    DYNAMIC_SECTION(type) {
      Rng rng(113);
      const ExperimentConfig cfg =
          experiment_config("{type: " + type + ", loss: bce, chunk_size: 128" +
                                (type == "bottleneck" ? ", dim: 32}" : "}"),
                            "[{type: linear, out: 64, activation: relu, dropout: 0.1}]");
      ModelMeta meta;
      meta.input_dim = 64;
      meta.num_labels = 300;
      meta.n_train = 1000;
      meta.sparse_input = false;
      meta.label_freq.assign(300, 3);
      Context cpu;
      Model ref(cpu, cfg, meta, 10);
      Model got(ctx, cfg, meta, 10);
      CHECK(got.output().device_views() == ctx.on_gpu());
      Rng r_ref(1), r_got(1);
      std::vector<float> dh_host(128 * 64);
      Buffer<float> dh_dev(ctx, MemTag::activations, dh_host.size());
      for (int64_t step = 1; step <= 2; ++step) {
        const Batch b = feature_batch(rng, false, 128, 64, 300);
        const ConstMatrix h1 = ref.encoder().forward(b, true, r_ref);
        const ConstMatrix h2 = got.encoder().forward(b, true, r_got);
        const StepStats s1 =
            ref.output().train_step(b, h1, Matrix(dh_host.data(), 128, 64), {0.01, step});
        const StepStats s2 =
            got.output().train_step(b, h2, Matrix(dh_dev.data(), 128, 64), {0.01, step});
        expect_close("step loss", s2.loss, s1.loss, 1e-5, 1e-4);
        expect_close("step dh", get(dh_dev, dh_host.size()), dh_host, 1e-6, 1e-3);
        ref.encoder().backward_update(ConstMatrix(dh_host.data(), 128, 64), 0.01, step);
        got.encoder().backward_update(ConstMatrix(dh_dev.data(), 128, 64), 0.01, step);
      }
      const Batch b = feature_batch(rng, false, 50, 64, 300);
      const TopK t1 = ref.predict(b, 5);
      const TopK t2 = got.predict(b, 5);
      REQUIRE(t2.labels.size() == t1.labels.size());
      int same = 0;
      for (size_t i = 0; i < t1.labels.size(); ++i) same += t1.labels[i] == t2.labels[i];
      INFO(same << " of " << t1.labels.size() << " top-5 positions agree");
      CHECK(same >= static_cast<int>(0.95 * static_cast<double>(t1.labels.size())));
    }
  }
}
