// CPU-vs-CUDA parity of the group_shared backend (HASTE) as a layer and through the
// trainer. A plain main(): without a CUDA GPU it prints "no CUDA GPU: skipped" and exits
// 77, which CTest reports as skipped (SKIP_RETURN_CODE), never as passed.
//
// Layer level, GroupSharedLayer on a CPU Context against the same layer on a CUDA Context,
// built from the same LayerInit (so the same initial parameters, drawn on the host), at
// odd sizes (L not a multiple of G, B not a multiple of the 64-row tile, several label
// chunks, a partial last group, G = 1, an all-head layer), with and without head
// projection, tail projection and input dropout, four optimizers, two losses:
//   initial state identical; ledger = analytic size; forward scores (more rows than the
//   batch workspace); three train steps (loss, gradient and exact-zero counts, dh, every
//   parameter and optimizer state by name) with a rewiring before step 3 (indices equal,
//   weights after); semantic grouping from the same host inputs (label order equal);
//   top-k in original ids allowing ties; a GPU state loaded into a fresh CPU layer and a
//   CPU state into a fresh GPU layer score alike; bf16 within bf16 tolerance.
// Model level: two Model steps CPU vs CUDA (loss, dh, top-5), and 2-epoch runs through
// run_training (fp32 cpu/cuda, bf16 cuda; semantic grouping and rewiring on), P@1/3/5
// within 0.01 (bf16 0.03), each checkpoint evaluated on the other device.
//
// Tolerances as tests/cuda/test_parity.cpp's dense block (|got - ref| <= abs + |ref|·rel):
// loss 1e-5 + 1e-4 rel, dh 1e-6 + 1e-3 rel, parameters 1e-5 + 1e-3 rel after three steps
// (the GPU input gradient sums by atomics in any order; Adam divides by sqrt(v) of tiny
// gradients), exact-zero counts within 1e-3·count + 2.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config_loader.h"
#include "core/context.h"
#include "core/cuda_context.h"
#include "core/error.h"
#include "core/gpu.h"
#include "core/rng.h"
#include "io/load.h"
#include "layers/group_shared.h"
#include "layers/registry.h"
#include "ops/topk.h"
#include "parity_support.h"
#include "train/evaluation.h"
#include "train/inference.h"
#include "train/model.h"
#include "train/trainer.h"

namespace {

using namespace xmc;
using gpu::DeviceBuffer;

using namespace xmc::parity;

DeviceBuffer<float> upload(Context& dev, const std::vector<float>& v) {
  DeviceBuffer<float> b(dev.ledger(), MemTag::workspace, std::max<size_t>(v.size(), 1));
  b.upload(v.data(), v.size(), dev.cuda().stream());
  dev.cuda().synchronize();
  return b;
}

std::vector<float> download(Context& dev, const DeviceBuffer<float>& b, size_t n) {
  std::vector<float> v(n);
  b.download(v.data(), n, dev.cuda().stream());
  dev.cuda().synchronize();
  return v;
}

// A batch of `rows` points with 1..max_pos random positives each (row 1 without any).
Batch random_batch(Rng& rng, int64_t rows, int64_t labels, int max_pos) {
  Batch b;
  b.sparse = false;
  b.labels = random_targets(rng, rows, labels, max_pos);
  for (int64_t r = 0; r < rows; ++r) b.ids.push_back(r);
  return b;
}

// --- layer level ---------------------------------------------------------------------------
struct Case {
  std::string name;
  int64_t d, labels, batch;
  GroupSharedConfig cfg;
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
  std::vector<Case> out;
  {  // head + dropout, several chunks, partial last group (203 - 16 = 187 = 11·16 + 11)
    Case c{"bce adam head dropout", 37, 203, 29, {}, optim(OptimizerType::adam, 0.01)};
    c.cfg.group_size = 16;
    c.cfg.fan_in = 12;
    c.cfg.head_fraction = 0.1;
    c.cfg.dropout = 0.2;
    c.cfg.chunk_size = 48;
    out.push_back(c);
  }
  {  // no head, tail projection, B > 64, random grouping, G = 5
    Case c{"squared_hinge sgd-momentum tail projection", 24, 301, 70, {},
           optim(OptimizerType::sgd, 0.05, 0.9, 1e-4)};
    c.cfg.group_size = 5;
    c.cfg.fan_in = 7;
    c.cfg.head_fraction = 0.0;
    c.cfg.projection = 40;
    c.cfg.loss = LossType::squared_hinge;
    c.cfg.grouping = GroupingType::random;
    c.cfg.chunk_size = 35;
    out.push_back(c);
  }
  {  // head projection, G = 40 (several warps per group), F = 33, B = 64
    Case c{"bce adamw head_dim G=40 F=33",
           50,
           500,
           64,
           {},
           optim(OptimizerType::adamw, 0.01, 0.0, 0.01)};
    c.cfg.group_size = 40;
    c.cfg.fan_in = 33;
    c.cfg.head_fraction = 0.16;
    c.cfg.head_dim = 16;
    c.cfg.dropout = 0.1;
    c.cfg.chunk_size = 120;
    out.push_back(c);
  }
  {  // everything: both projections and dropout, B = 1 (a single row)
    Case c{"squared_hinge adam both projections B=1", 30, 130, 1, {},
           optim(OptimizerType::adam, 0.01)};
    c.cfg.group_size = 8;
    c.cfg.fan_in = 16;
    c.cfg.head_fraction = 0.2;
    c.cfg.head_dim = 12;
    c.cfg.projection = 20;
    c.cfg.dropout = 0.3;
    c.cfg.loss = LossType::squared_hinge;
    c.cfg.chunk_size = 24;
    out.push_back(c);
  }
  {  // G = 1, F = 1 (plain per-label fan-in), plain sgd
    Case c{"bce sgd G=1 F=1", 10, 37, 5, {}, optim(OptimizerType::sgd, 0.1)};
    c.cfg.group_size = 1;
    c.cfg.fan_in = 1;
    c.cfg.head_fraction = 0.0;
    c.cfg.chunk_size = 8;
    out.push_back(c);
  }
  {  // all head (no tail): the dense head alone
    Case c{"bce sgd all head", 20, 64, 9, {}, optim(OptimizerType::sgd, 0.1)};
    c.cfg.group_size = 8;
    c.cfg.fan_in = 4;
    c.cfg.head_fraction = 1.0;
    c.cfg.chunk_size = 16;
    out.push_back(c);
  }
  return out;
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

// The layer's state (host copies on the GPU) as name -> values.
struct StateCopy {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<float>> f32;     // float tensors (empty otherwise)
  std::vector<std::vector<uint32_t>> u32;  // uint32 tensors (empty otherwise)
};
StateCopy copy_state(GroupSharedLayer& layer) {
  layer.sync_state(StateSync::to_host);
  StateCopy s;
  for (const auto& t : layer.state()) {
    s.names.push_back(t.name);
    s.shapes.push_back(t.shape);
    if (std::holds_alternative<float*>(t.data)) {
      const float* p = std::get<float*>(t.data);
      s.f32.emplace_back(p, p + t.numel());
      s.u32.emplace_back();
    } else {
      const uint32_t* p = std::get<uint32_t*>(t.data);
      s.u32.emplace_back(p, p + t.numel());
      s.f32.emplace_back();
    }
  }
  layer.sync_state(StateSync::release);
  return s;
}

void compare_state(const std::string& name, const StateCopy& got, const StateCopy& ref, double abs,
                   double rel) {
  expect_true(name + ": same tensor names and shapes",
              got.names == ref.names && got.shapes == ref.shapes);
  if (got.names != ref.names) return;
  for (size_t i = 0; i < ref.names.size(); ++i) {
    if (!ref.u32[i].empty() || ref.f32[i].empty()) {
      int64_t differ = 0;
      for (size_t j = 0; j < ref.u32[i].size(); ++j) differ += got.u32[i][j] != ref.u32[i][j];
      expect_true(name + " " + ref.names[i] + " identical (" + std::to_string(differ) + " differ)",
                  got.u32[i].size() == ref.u32[i].size() && differ == 0);
      continue;
    }
    expect_close(name + " " + ref.names[i], got.f32[i], ref.f32[i], abs, rel);
  }
}

// Writes `src`'s values into `dst`'s state (same names) and uploads (GPU) — a checkpoint
// round trip without the file.
void load_state(GroupSharedLayer& dst, const StateCopy& src) {
  dst.sync_state(StateSync::to_host);
  for (const auto& t : dst.state()) {
    const auto it = std::find(src.names.begin(), src.names.end(), t.name);
    if (it == src.names.end()) {
      fail("state " + t.name + " missing in the source");
      continue;
    }
    const size_t i = static_cast<size_t>(it - src.names.begin());
    if (std::holds_alternative<float*>(t.data)) {
      std::copy(src.f32[i].begin(), src.f32[i].end(), std::get<float*>(t.data));
    } else {
      std::copy(src.u32[i].begin(), src.u32[i].end(), std::get<uint32_t*>(t.data));
    }
  }
  dst.sync_state(StateSync::to_device);
}

// scores [rows×L] in original label order, from either layer (host out).
std::vector<float> layer_scores(GroupSharedLayer& layer, Context& ctx, const std::vector<float>& h,
                                int64_t rows) {
  const int64_t d = layer.input_dim(), n = layer.num_labels();
  std::vector<float> out(static_cast<size_t>(rows * n));
  if (!ctx.on_gpu()) {
    layer.scores(ConstMatrix(h.data(), rows, d), Matrix(out.data(), rows, n));
    return out;
  }
  auto hd = upload(ctx, h);
  DeviceBuffer<float> od(ctx.ledger(), MemTag::workspace, out.size());
  layer.scores(ConstMatrix(hd.data(), rows, d), Matrix(od.data(), rows, n));
  return download(ctx, od, out.size());
}

// Top-k of the GPU layer against the CPU layer's scores: each position's score matches
// the CPU's at that position, each returned label's CPU score matches it (a tie partner is
// fine, a wrong label is not), pads at the same places, no label twice in a row.
void compare_topk(const std::string& name, const TopK& want, const TopK& have,
                  const std::vector<float>& all, int64_t n, double tol_abs, double tol_rel) {
  int64_t bad = 0;
  for (int64_t r = 0; r < want.rows; ++r) {
    for (int j = 0; j < want.k; ++j) {
      const float ws = want.row_scores(r)[j];
      const float hs = have.row_scores(r)[j];
      const uint32_t wl = want.row_labels(r)[j];
      const uint32_t hl = have.row_labels(r)[j];
      if (wl == TopK::kNoLabel || hl == TopK::kNoLabel) {
        bad += wl != hl;
        continue;
      }
      const bool score_ok = std::abs(hs - ws) <= tol_abs + std::abs(ws) * tol_rel;
      const bool label_ok =
          hl < static_cast<uint32_t>(n) && std::abs(all[static_cast<size_t>(r * n + hl)] - ws) <=
                                               2 * (tol_abs + std::abs(ws) * tol_rel);
      if (!score_ok || !label_ok) ++bad;
    }
    std::vector<uint32_t> l(have.row_labels(r), have.row_labels(r) + have.k);
    std::sort(l.begin(), l.end());
    l.erase(std::remove(l.begin(), l.end(), TopK::kNoLabel), l.end());
    if (std::adjacent_find(l.begin(), l.end()) != l.end()) ++bad;
  }
  expect_true(name + ": " + std::to_string(bad) + " entries differ beyond ties",
              have.rows == want.rows && have.k == want.k && bad == 0);
}

int64_t ledger_total(const Context& ctx) {
  return ctx.ledger().total_current(MemSpace::host) + ctx.ledger().total_current(MemSpace::device);
}

void run_layer_case(const Case& c, Rng& rng) {
  const std::string name = "layer " + c.name;
  Context cpu(Device::cpu);
  Context dev(Device::cuda);
  GroupSharedLayer ref(make_init(cpu, c), c.cfg);
  const int64_t before = ledger_total(dev);
  GroupSharedLayer got(make_init(dev, c), c.cfg);
  const int64_t recorded = ledger_total(dev) - before;
  expect_true(name + ": device views", got.device_views() && !ref.device_views());
  expect_scalar(name + ": ledger bytes == analytic size", static_cast<double>(recorded),
                static_cast<double>(got.analytic_bytes()), 0, 0);
  const int64_t d = c.d, n = c.labels, b = c.batch;

  compare_state(name + " initial", copy_state(got), copy_state(ref), 0.0, 0.0);

  // Forward scores, more rows than the workspace (row blocks on the GPU).
  const int64_t rows = 2 * b + 3;
  const auto he = random_vec(rng, static_cast<size_t>(rows * d));
  expect_close(name + " scores", layer_scores(got, dev, he, rows), layer_scores(ref, cpu, he, rows),
               1e-5, 1e-4);

  // Three steps; a rewiring before the third.
  std::vector<float> dh_ref(static_cast<size_t>(b * d));
  DeviceBuffer<float> dh_dev(dev.ledger(), MemTag::activations, dh_ref.size());
  for (int64_t step = 1; step <= 3; ++step) {
    const std::string sn = name + " step " + std::to_string(step);
    if (step == 3 && got.tail_labels() > 0) {
      const RewireStats rr = ref.rewire(1000);
      const RewireStats rg = got.rewire(1000);
      expect_scalar(sn + " rewired slots", static_cast<double>(rg.pruned),
                    static_cast<double>(rr.pruned), 0, 0);
      expect_true(sn + " rewiring pruned something",
                  rr.pruned > 0 || c.cfg.fan_in >= got.fanin().input_width());
    }
    const Batch bt = random_batch(rng, b, n, 4);
    const auto h = random_vec(rng, static_cast<size_t>(b * d));
    auto hd = upload(dev, h);
    std::fill(dh_ref.begin(), dh_ref.end(), 7.0f);
    const LrState lr{c.optim.lr, step};
    const StepStats rs =
        ref.train_step(bt, ConstMatrix(h.data(), b, d), Matrix(dh_ref.data(), b, d), lr);
    const StepStats gs =
        got.train_step(bt, ConstMatrix(hd.data(), b, d), Matrix(dh_dev.data(), b, d), lr);
    expect_scalar(sn + " loss", gs.loss, rs.loss, 1e-5, 1e-4);
    expect_scalar(sn + " grads", static_cast<double>(gs.grads), static_cast<double>(rs.grads), 0,
                  0);
    expect_scalar(sn + " zero gradients", static_cast<double>(gs.zero_grads),
                  static_cast<double>(rs.zero_grads), 1e-3 * static_cast<double>(rs.grads) + 2, 0);
    expect_close(sn + " dh", download(dev, dh_dev, dh_ref.size()), dh_ref, 1e-6, 1e-3);
    compare_state(sn, copy_state(got), copy_state(ref), 1e-5, 1e-3);
  }

  // Top-k in original ids (k beyond L pads).
  const auto all = layer_scores(ref, cpu, he, rows);
  for (int k : {1, 5, static_cast<int>(std::min<int64_t>(64, n + 3))}) {
    auto hd = upload(dev, he);
    const TopK want = ref.topk(ConstMatrix(he.data(), rows, d), k);
    const TopK have = got.topk(ConstMatrix(hd.data(), rows, d), k);
    compare_topk(name + " topk k=" + std::to_string(k), want, have, all, n, 1e-5, 1e-4);
  }

  // Checkpoint round trips without the file: the GPU state into a fresh CPU layer, the
  // CPU state into a fresh GPU layer; each scores like its source.
  {
    GroupSharedLayer cpu2(make_init(cpu, c), c.cfg);
    load_state(cpu2, copy_state(got));
    expect_close(name + " GPU state on the CPU: scores", layer_scores(cpu2, cpu, he, rows),
                 layer_scores(got, dev, he, rows), 1e-5, 1e-4);
    GroupSharedLayer dev2(make_init(dev, c), c.cfg);
    load_state(dev2, copy_state(ref));
    expect_close(name + " CPU state on the GPU: scores", layer_scores(dev2, dev, he, rows),
                 layer_scores(ref, cpu, he, rows), 1e-5, 1e-4);
  }

  // Semantic grouping from the same host inputs: the same label order, then the state.
  if (got.tail_labels() > 0) {
    const int64_t npts = 3 * n;
    const auto x = random_vec(rng, static_cast<size_t>(npts * d));
    const Batch pts = random_batch(rng, npts, n, 3);
    ref.regroup_semantic(ConstMatrix(x.data(), npts, d), pts.labels);
    got.regroup_semantic(ConstMatrix(x.data(), npts, d), pts.labels);
    const std::vector<uint32_t> o1(ref.label_order().begin(), ref.label_order().end());
    const std::vector<uint32_t> o2(got.label_order().begin(), got.label_order().end());
    expect_true(name + " semantic grouping: same label order", o1 == o2);
    compare_state(name + " after semantic grouping", copy_state(got), copy_state(ref), 1e-5, 1e-3);
  }
}

void test_layers(Rng& rng) {
  for (const Case& c : layer_cases()) {
    const int before = g_failures;
    try {
      run_layer_case(c, rng);
    } catch (const std::exception& e) {
      fail("layer " + c.name + ": exception: " + e.what());
    }
    std::printf("  layer %-45s %s\n", c.name.c_str(), g_failures == before ? "ok" : "FAILED");
  }
}

// bf16 (head block and tail weights in bf16, projections fp32): one step against the fp32
// CPU layer within bf16 accuracy; the initial weights are the CPU's rounded to bf16.
void test_bf16(Rng& rng) {
  for (const bool sr : {false, true}) {
    // SGD with momentum: the step is linear in the gradient (Adam's first step is
    // lr·sign(g), which bf16 rounding may flip for gradients near zero).
    Case c = layer_cases()[0];
    c.optim = optim(OptimizerType::sgd, 0.1, 0.9);
    c.cfg.precision = Precision::bf16;
    c.cfg.stochastic_rounding = sr;
    const std::string name = std::string("bf16") + (sr ? " stochastic" : "");
    Context cpu(Device::cpu);
    Context dev(Device::cuda);
    Case cf = c;
    cf.cfg.precision = Precision::fp32;
    cf.cfg.stochastic_rounding = false;
    GroupSharedLayer ref(make_init(cpu, cf), cf.cfg);
    const int64_t before = ledger_total(dev);
    GroupSharedLayer got(make_init(dev, c), c.cfg);
    expect_scalar(name + ": ledger bytes == analytic size",
                  static_cast<double>(ledger_total(dev) - before),
                  static_cast<double>(got.analytic_bytes()), 0, 0);
    const StateCopy s0 = copy_state(got), r0 = copy_state(ref);
    // Weights within half a bf16 ulp (2^-9 relative).
    compare_state(name + " initial", s0, r0, 0.0, 1.0 / 256);
    const int64_t d = c.d, n = c.labels, b = c.batch;
    const Batch bt = random_batch(rng, b, n, 4);
    const auto h = random_vec(rng, static_cast<size_t>(b * d));
    auto hd = upload(dev, h);
    std::vector<float> dh_ref(static_cast<size_t>(b * d));
    DeviceBuffer<float> dh_dev(dev.ledger(), MemTag::activations, dh_ref.size());
    const LrState lr{c.optim.lr, 1};
    const StepStats rs =
        ref.train_step(bt, ConstMatrix(h.data(), b, d), Matrix(dh_ref.data(), b, d), lr);
    const StepStats gs =
        got.train_step(bt, ConstMatrix(hd.data(), b, d), Matrix(dh_dev.data(), b, d), lr);
    expect_scalar(name + " loss", gs.loss, rs.loss, 0.0, 1e-2);
    float scale = 0.0f;
    for (float x : dh_ref) scale = std::max(scale, std::abs(x));
    expect_close(name + " dh", download(dev, dh_dev, dh_ref.size()), dh_ref, 3e-2 * scale, 2e-2);
    // Weights and momentum (= the first gradient) after one step: gradients summed from
    // bf16 ut and g (2^-8 each) err by up to ~2^-7 of the sum of |terms| (~0.3 here),
    // the weights by two bf16 ulps.
    compare_state(name + " after one step", copy_state(got), copy_state(ref), 5e-3, 1.0 / 64);
    const int64_t rows = 2 * b + 3;
    const auto he = random_vec(rng, static_cast<size_t>(rows * d));
    const auto want = layer_scores(ref, cpu, he, rows);
    float smax = 0.0f;
    for (float x : want) smax = std::max(smax, std::abs(x));
    expect_close(name + " scores", layer_scores(got, dev, he, rows), want, 2e-2 * smax, 2e-2);
  }
  // bf16 is refused on the CPU, with the key named.
  Context cpu(Device::cpu);
  Case c = layer_cases()[0];
  c.cfg.precision = Precision::bf16;
  bool threw = false;
  try {
    GroupSharedLayer layer(make_init(cpu, c), c.cfg);
  } catch (const InputError& e) {
    threw = std::string(e.what()).find("precision") != std::string::npos;
  }
  expect_true("bf16 on the CPU is an InputError naming precision", threw);
}

// --- the real Model / trainer path ----------------------------------------------------------
const char* kParityConfig = R"(name: parity-group-shared
seed: 7
threads: 2
data:
  train: {features: @DIR@/trn_X.npy, labels: @DIR@/trn_X_Y.txt}
  test: {features: @DIR@/tst_X.npy, labels: @DIR@/tst_X_Y.txt}
  synth: {enabled: true, format: dense, train: 3000, test: 1000, labels: 301, features: 64, clusters: 20, seed: 3}
model:
  encoder: [{type: linear, out: 64, activation: relu, dropout: 0.1}]
  output:
    type: group_shared
    group_size: 8
    fan_in: 16
    head_fraction: 0.1
    tail_projection: 48
    dropout: 0.1
    grouping: @GROUPING@
    rewire: {interval: 5, fraction: 0.1, until: 0.66}
    loss: bce
    chunk_size: 64@EXTRA@
optim:
  encoder: {type: adam, lr: 0.01}
  output: {type: adam, lr: 0.01}
train: {epochs: 2, batch_size: 100, log_every_s: 100}
eval: {k: 5}
)";

ExperimentConfig parity_config(const std::string& dir, const std::string& grouping,
                               const std::string& extra) {
  std::string text = kParityConfig;
  auto repl = [&](const std::string& key, const std::string& value) {
    for (size_t p; (p = text.find(key)) != std::string::npos;) text.replace(p, key.size(), value);
  };
  repl("@DIR@", dir);
  repl("@GROUPING@", grouping);
  repl("@EXTRA@", extra);
  return parse_config(text, "parity.yaml", {}, output_types());
}

std::vector<float> to_host_vec(const gpu::CudaContext& ctx, ConstMatrix m) {
  std::vector<float> v(static_cast<size_t>(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r)
    gpu::copy_to_host(v.data() + r * m.cols, m.row(r), static_cast<size_t>(m.cols) * 4,
                      ctx.stream());
  ctx.synchronize();
  return v;
}

Batch dense_batch(Rng& rng, int64_t rows, int64_t dim, int64_t labels) {
  Batch b = random_batch(rng, rows, labels, 4);
  b.dense_x = DenseMatrix(rows, dim);
  for (auto& v : b.dense_x.values) v = 2.0f * rng.uniformf() - 1.0f;
  return b;
}

void test_model_step(Rng& rng) {
  const ExperimentConfig cfg = parity_config("/nonexistent", "random", "");
  ModelMeta meta;
  meta.input_dim = 64;
  meta.num_labels = 301;
  meta.n_train = 1000;
  meta.sparse_input = false;
  for (int64_t l = 0; l < 301; ++l) meta.label_freq.push_back((5 * l) % 17);
  Context cpu(Device::cpu);
  Context dev(Device::cuda);
  Model ref(cpu, cfg, meta, 10);
  Model got(dev, cfg, meta, 10);
  expect_true("model: layer on the device", got.output().device_views());
  Rng r_ref(1), r_got(1);
  const int64_t b = 100, d = 64;
  std::vector<float> dh_host(static_cast<size_t>(b * d));
  DeviceBuffer<float> dh_dev(dev.ledger(), MemTag::activations, dh_host.size());
  for (int64_t step = 1; step <= 2; ++step) {
    const Batch bt = dense_batch(rng, b, d, 301);
    const ConstMatrix h1 = ref.encoder().forward(bt, true, r_ref);
    const ConstMatrix h2 = got.encoder().forward(bt, true, r_got);
    expect_close("model step " + std::to_string(step) + " h", to_host_vec(dev.cuda(), h2),
                 std::vector<float>(h1.data, h1.data + b * d), 1e-5, 1e-4);
    const StepStats s1 =
        ref.output().train_step(bt, h1, Matrix(dh_host.data(), b, d), {0.01, step});
    const StepStats s2 = got.output().train_step(bt, h2, Matrix(dh_dev.data(), b, d), {0.01, step});
    expect_scalar("model step " + std::to_string(step) + " loss", s2.loss, s1.loss, 1e-5, 1e-4);
    expect_close("model step " + std::to_string(step) + " dh",
                 download(dev, dh_dev, dh_host.size()), dh_host, 1e-6, 1e-3);
    ref.encoder().backward_update(ConstMatrix(dh_host.data(), b, d), 0.01, step);
    got.encoder().backward_update(ConstMatrix(dh_dev.data(), b, d), 0.01, step);
  }
  const Batch bt = dense_batch(rng, 250, d, 301);  // more rows than the batch workspace
  const TopK t1 = ref.predict(bt, 5);
  const TopK t2 = got.predict(bt, 5);
  int same = 0;
  for (size_t i = 0; i < t1.labels.size(); ++i) same += t1.labels[i] == t2.labels[i];
  expect_true("model top-5 agrees on >= 95% of positions",
              t2.labels.size() == t1.labels.size() &&
                  same >= static_cast<int>(0.95 * static_cast<double>(t1.labels.size())));
}

void test_training_runs(Rng&) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("xmc_parity_gs_" + std::to_string(::getpid()));
  fs::create_directories(root);
  struct Run {
    std::string grouping, extra, device;
  };
  // Semantic grouping embeds every training point at step 1 (the trainer has batch 2
  // staged then); rewiring every 5 steps through the first 66%.
  // extra: more keys of model.output (block style: a new line each).
  const std::vector<Run> runs = {{"semantic", "", "cpu"},
                                 {"semantic", "", "cuda"},
                                 {"semantic", "\n    precision: bf16", "cuda"},
                                 {"frequency", "\n    head_dim: 32", "cpu"},
                                 {"frequency", "\n    head_dim: 32", "cuda"}};
  std::vector<nlohmann::json> results;
  for (const auto& r : runs) {
    const ExperimentConfig cfg = parity_config((root / "data").string(), r.grouping, r.extra);
    TrainOptions opt;
    opt.device = r.device;
    opt.out_dir = (root / (r.grouping + "_" + r.device + std::to_string(results.size()))).string();
    opt.config_yaml = dump_config(cfg);
    results.push_back(run_training(cfg, opt).results);
    std::string extra = r.extra;  // printed on one line
    for (size_t p; (p = extra.find("\n    ")) != std::string::npos;) extra.replace(p, 5, ", ");
    std::printf("  group_shared %s %s%s: P@1 %.4f P@5 %.4f, %.2f s/epoch\n", r.grouping.c_str(),
                r.device.c_str(), extra.c_str(), metric(results.back(), "P", 1),
                metric(results.back(), "P", 5), results.back()["last_epoch_seconds"].get<double>());
  }
  auto agree = [&](size_t a, size_t b, double tol, const std::string& what) {
    for (int k : {1, 3, 5})
      expect_scalar(what + " P@" + std::to_string(k), metric(results[b], "P", k),
                    metric(results[a], "P", k), tol, 0);
  };
  expect_true("results record device cuda and the GPU",
              results[1]["device"] == "cuda" && results[1].contains("gpu"));
  agree(0, 1, 0.01, "group_shared semantic cpu vs cuda");
  agree(0, 2, 0.03, "group_shared semantic cpu fp32 vs cuda bf16");
  agree(3, 4, 0.01, "group_shared head_dim cpu vs cuda");
  // Each checkpoint evaluates on the other device to its run's metrics.
  // (The bf16 run's config asks for bf16, which the CPU refuses.)
  const std::vector<std::pair<size_t, std::string>> cross = {{1, "cpu"}, {0, "cuda"}, {4, "cpu"}};
  for (const auto& [run, device] : cross) {
    LoadedModel lm =
        load_model(results[run]["run_dir"].get<std::string>() + "/checkpoint.h5", device, 0);
    io::DataSource src;
    src.features = (root / "data" / "tst_X.npy").string();
    src.labels = (root / "data" / "tst_X_Y.txt").string();
    const Dataset test = io::load_dataset(src);
    EvalSettings es;
    es.k = 5;
    const EvalResult ev = evaluate_dataset(*lm.model, test, es);
    const std::string label =
        "checkpoint of run " + std::to_string(run) + " evaluated on " + device;
    expect_true(label + " on the requested device", lm.ctx->device() == resolve_device(device));
    for (int k : {1, 5})
      expect_scalar(label + " P@" + std::to_string(k), ev.metrics.p.at(static_cast<size_t>(k - 1)),
                    metric(results[run], "P", k), 0.005, 0);
  }
  std::error_code ec;
  fs::remove_all(root, ec);
}

}  // namespace

int main() {
  return run_parity_main({
      {"layers", [](gpu::CudaContext&, Rng& rng) { test_layers(rng); }},
      {"bf16", [](gpu::CudaContext&, Rng& rng) { test_bf16(rng); }},
      {"model step", [](gpu::CudaContext&, Rng& rng) { test_model_step(rng); }},
      {"training", [](gpu::CudaContext&, Rng& rng) { test_training_runs(rng); }},
  });
}
