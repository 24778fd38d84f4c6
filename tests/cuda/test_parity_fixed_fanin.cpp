// CPU-vs-CUDA parity of the fixed_fanin backend (layers/fixed_fanin.h): the same layer
// built on a CPU and on a CUDA Context from the same seed. A plain main(): without a CUDA
// GPU it prints "no CUDA GPU: skipped" and exits 77, which CTest reports as skipped
// (SKIP_RETURN_CODE), never as passed.
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
// ledger against analytic_bytes(); the per-op CUDA-event timings; and 2-epoch runs through
// the real trainer (run_training) with rewiring, cpu vs cuda, plus the GPU checkpoint
// evaluated on the CPU.
//
// Tolerances as in test_parity.cpp (dh, weights: abs + |ref|·rel); zero-gradient counts
// within 1e-3 of the entries + 2 (logits near the hinge differ in the last bit).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "config/config_loader.h"
#include "core/context.h"
#include "core/cuda_context.h"
#include "core/gpu.h"
#include "core/rng.h"
#include "io/load.h"
#include "layers/fixed_fanin.h"
#include "layers/registry.h"
#include "train/evaluation.h"
#include "train/inference.h"
#include "train/model.h"
#include "train/trainer.h"
#include "parity_support.h"

namespace {

using namespace xmc;
using gpu::CudaContext;
using gpu::DeviceBuffer;

using namespace xmc::parity;

DeviceBuffer<float> upload(const CudaContext& ctx, const std::vector<float>& v) {
  DeviceBuffer<float> b(ctx.ledger(), MemTag::activations, std::max<size_t>(v.size(), 1));
  b.upload(v.data(), v.size(), ctx.stream());
  ctx.synchronize();
  return b;
}

std::vector<float> download(const CudaContext& ctx, const DeviceBuffer<float>& b, size_t n) {
  std::vector<float> v(n);
  b.download(v.data(), n, ctx.stream());
  ctx.synchronize();
  return v;
}

// A batch of `rows` rows with 1..4 random positives each (row 1 none) over [0, labels).
Batch random_batch(Rng& rng, int64_t rows, int64_t labels) {
  Batch b;
  b.sparse = false;
  b.labels.rows = rows;
  b.labels.cols = labels;
  b.labels.indptr = {0};
  for (int64_t r = 0; r < rows; ++r) {
    b.ids.push_back(r);
    const int np = r == 1 ? 0 : 1 + static_cast<int>(rng.below(4));
    std::vector<uint32_t> row;
    for (int i = 0; i < np; ++i) row.push_back(static_cast<uint32_t>(rng.below(static_cast<uint64_t>(labels))));
    std::sort(row.begin(), row.end());
    row.erase(std::unique(row.begin(), row.end()), row.end());
    b.labels.indices.insert(b.labels.indices.end(), row.begin(), row.end());
    b.labels.indptr.push_back(static_cast<int64_t>(b.labels.indices.size()));
  }
  return b;
}

struct Case {
  std::string loss;
  int64_t inter;
  double dropout;
  int opt;  // index into optimizers()
  int64_t d, n, f, batch, chunk;
};

std::string describe(const Case& c) {
  const OptimizerConfig o = optimizers()[static_cast<size_t>(c.opt)];
  return "fixed_fanin " + c.loss + " inter " + std::to_string(c.inter) + " dropout " +
         std::to_string(c.dropout).substr(0, 3) + " " + std::string(to_string(o.type)) +
         (o.momentum != 0.0 ? "+momentum" : "") + " L=" + std::to_string(c.n) +
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

FixedFaninConfig make_config(const Case& c, bool gpu_timing = false) {
  FixedFaninConfig cfg;
  cfg.fan_in = c.f;
  cfg.projection = c.inter;
  cfg.dropout = c.dropout;
  cfg.loss = parse_enum<LossType>(c.loss, "loss");
  cfg.chunk_size = c.chunk;
  cfg.rewire.interval = 0;  // rewiring is driven by hand here
  cfg.rewire.fraction = 0.2;
  cfg.gpu_timing = gpu_timing;
  return cfg;
}

// Host copies of a layer's state by name (a GPU layer is staged and released around it).
struct Snapshot {
  std::map<std::string, std::vector<float>> f;
  std::map<std::string, std::vector<uint32_t>> u;
  std::map<std::string, std::vector<int64_t>> shapes;
};

Snapshot snapshot(OutputLayer& layer) {
  layer.sync_state(StateSync::to_host);
  Snapshot s;
  for (const auto& t : layer.state()) {
    s.shapes[t.name] = t.shape;
    if (const auto* p = std::get_if<float*>(&t.data)) {
      s.f[t.name] = std::vector<float>(*p, *p + t.numel());
    } else if (const auto* q = std::get_if<uint32_t*>(&t.data)) {
      s.u[t.name] = std::vector<uint32_t>(*q, *q + t.numel());
    }
  }
  layer.sync_state(StateSync::release);
  return s;
}

// got's tensors against ref's: indices exactly, floats within (abs, rel); same names/shapes.
// weight_abs: added to `abs` for the parameters (not the optimizer moments), e.g.
// adam_weight_allowance.
void compare_state(const std::string& name, const Snapshot& got, const Snapshot& ref, double abs,
                   double rel, double weight_abs = 0.0) {
  expect_true(name + ": same state names and shapes", got.shapes == ref.shapes);
  for (const auto& [key, v] : ref.u) {
    auto it = got.u.find(key);
    if (it == got.u.end()) continue;
    ++g_checks;
    if (it->second != v) fail(name + " " + key + ": indices differ");
  }
  for (const auto& [key, v] : ref.f) {
    auto it = got.f.find(key);
    if (it == got.f.end()) continue;
    // Second moments are squares of gradients: relative agreement, tiny absolute floor.
    const bool second = key.find("opt2") != std::string::npos;
    const bool moment = key.find("opt") != std::string::npos;
    expect_close(name + " " + key, it->second, v, second ? abs * 1e-2 : abs + (moment ? 0.0 : weight_abs),
                 rel);
  }
}

// Writes `src`'s tensors into a staged layer's state() (same names), then to_device.
void load_into(OutputLayer& layer, const Snapshot& src) {
  layer.sync_state(StateSync::to_host);
  for (const auto& t : layer.state()) {
    if (auto* p = std::get_if<float*>(&t.data)) {
      const auto& v = src.f.at(t.name);
      std::copy(v.begin(), v.end(), *p);
    } else if (auto* q = std::get_if<uint32_t*>(&t.data)) {
      const auto& v = src.u.at(t.name);
      std::copy(v.begin(), v.end(), *q);
    }
  }
  layer.sync_state(StateSync::to_device);
}

// One step on both layers with the same batch and h; compares the step's outputs.
void step_both(const std::string& name, FixedFaninLayer& ref, FixedFaninLayer& got,
               const CudaContext& cuda, Rng& rng, const Case& c, int64_t rows, int64_t step) {
  const Batch b = random_batch(rng, rows, c.n);
  const auto h = random_vec(rng, static_cast<size_t>(rows * c.d));
  std::vector<float> dh_ref(h.size());
  auto h_dev = upload(cuda, h);
  auto dh_dev = upload(cuda, std::vector<float>(h.size(), 7.0f));  // overwritten
  const OptimizerConfig o = optimizers()[static_cast<size_t>(c.opt)];
  const LrState lr{o.lr, step};
  const StepStats rs =
      ref.train_step(b, ConstMatrix(h.data(), rows, c.d), Matrix(dh_ref.data(), rows, c.d), lr);
  const StepStats gs =
      got.train_step(b, ConstMatrix(h_dev.data(), rows, c.d), Matrix(dh_dev.data(), rows, c.d), lr);
  expect_scalar(name + " loss", gs.loss, rs.loss, 1e-5, 1e-4);
  expect_scalar(name + " grads", static_cast<double>(gs.grads), static_cast<double>(rs.grads), 0, 0);
  expect_scalar(name + " zero gradients", static_cast<double>(gs.zero_grads),
                static_cast<double>(rs.zero_grads), 1e-3 * static_cast<double>(rs.grads) + 2, 0);
  expect_close(name + " dh", download(cuda, dh_dev, h.size()), dh_ref, 1e-6, 1e-3);
}

void compare_scores_topk(const std::string& name, const FixedFaninLayer& ref,
                         const FixedFaninLayer& got, const CudaContext& cuda, Rng& rng,
                         const Case& c) {
  // More rows than the step workspace (row blocks of max_batch on the GPU).
  const int64_t rows = 2 * c.batch + 3, n = c.n;
  const auto h = random_vec(rng, static_cast<size_t>(rows * c.d));
  std::vector<float> s_ref(static_cast<size_t>(rows * n));
  ref.scores(ConstMatrix(h.data(), rows, c.d), Matrix(s_ref.data(), rows, n));
  auto h_dev = upload(cuda, h);
  DeviceBuffer<float> s_dev(cuda.ledger(), MemTag::activations, s_ref.size());
  got.scores(ConstMatrix(h_dev.data(), rows, c.d), Matrix(s_dev.data(), rows, n));
  expect_close(name + " scores", download(cuda, s_dev, s_ref.size()), s_ref, 1e-5, 1e-4);

  const int k = static_cast<int>(std::min<int64_t>(5, n));
  const TopK t_ref = ref.topk(ConstMatrix(h.data(), rows, c.d), k);
  const TopK t_got = got.topk(ConstMatrix(h_dev.data(), rows, c.d), k);
  // Position by position: the same score within tolerance, and the same label unless the
  // CPU scores the GPU's label equally (a tie across devices).
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int j = 0; j < k; ++j) {
      const size_t i = static_cast<size_t>(r * k + j);
      const float rs = t_ref.scores[i], gs = t_got.scores[i];
      const uint32_t gl = t_got.labels[i];
      const double tol = 1e-5 + 1e-4 * std::abs(rs);
      const bool score_ok = std::abs(gs - rs) <= tol;
      const bool label_ok =
          gl == t_ref.labels[i] ||
          (gl < static_cast<uint32_t>(n) &&
           std::abs(s_ref[static_cast<size_t>(r * n + gl)] - rs) <= 2 * tol);
      bad += !(score_ok && label_ok);
    }
  ++g_checks;
  if (bad) fail(name + " top-" + std::to_string(k) + ": " + std::to_string(bad) + " positions differ");
}

// --- the layer: init, steps, scores, top-k over odd sizes --------------------------------
void test_layer_steps(CudaContext&, Rng& rng) {
  const std::vector<Case> cases = {
      {"squared_hinge", 0, 0.0, 0, 48, 1003, 13, 37, 300},
      {"squared_hinge", 80, 0.2, 2, 48, 1003, 13, 37, 300},
      {"bce", 0, 0.2, 1, 48, 1003, 40, 37, 300},
      {"bce", 900, 0.0, 3, 48, 1003, 40, 37, 256},
      {"squared_hinge", 900, 0.1, 2, 48, 50, 5, 1, 8192},
  };
  for (const Case& c : cases) {
    const std::string name = describe(c);
    Context cpu(Device::cpu);
    Context dev(Device::cuda);
    FixedFaninLayer ref(make_init(cpu, c), make_config(c));
    FixedFaninLayer got(make_init(dev, c), make_config(c));
    expect_true(name + ": device views", got.device_views() && !ref.device_views());
    compare_state(name + " initial", snapshot(got), snapshot(ref), 0.0, 0.0);
    for (int64_t step = 1; step <= 3; ++step) {
      const std::string sn = name + " step " + std::to_string(step);
      step_both(sn, ref, got, dev.cuda(), rng, c, c.batch, step);
      compare_state(sn, snapshot(got), snapshot(ref), 1e-6, 1e-3,
                    adam_weight_allowance(optimizers()[static_cast<size_t>(c.opt)], step));
    }
    const auto& tr = ref.fanin().timings();
    const auto& tg = got.fanin().timings();
    expect_scalar(name + " skipped labels (weight-gradient counter)",
                  static_cast<double>(tg.skipped_labels), static_cast<double>(tr.skipped_labels),
                  1e-3 * static_cast<double>(tr.label_steps) + 2, 0);
    expect_scalar(name + " label steps", static_cast<double>(tg.label_steps),
                  static_cast<double>(tr.label_steps), 0, 0);
    expect_true(name + ": no per-op GPU times without gpu_timing", tg.forward == 0.0 && tg.update == 0.0);
    compare_scores_topk(name, ref, got, dev.cuda(), rng, c);
  }
}

// --- rewiring: from identical state both devices prune and regrow identically -----------
void test_rewire(CudaContext&, Rng& rng) {
  for (const Case& c : {Case{"squared_hinge", 0, 0.0, 2, 48, 1003, 13, 37, 300},
                        Case{"bce", 80, 0.1, 1, 48, 517, 40, 37, 128}}) {
    const std::string name = describe(c) + " rewiring";
    Context cpu(Device::cpu);
    Context dev(Device::cuda);
    FixedFaninLayer ref(make_init(cpu, c), make_config(c));
    FixedFaninLayer got(make_init(dev, c), make_config(c));
    for (int64_t step = 1; step <= 2; ++step)
      step_both(name + " step " + std::to_string(step), ref, got, dev.cuda(), rng, c, c.batch, step);
    // Near-equal weights could fall on either side of the global threshold, so the CPU
    // layer takes the GPU's state first: then the rewiring must agree bit for bit.
    const Snapshot before = snapshot(got);
    load_into(ref, before);
    const RewireStats rr = ref.rewire(3);
    const RewireStats rg = got.rewire(3);
    expect_true(name + ": something was pruned", rr.pruned > 0);
    expect_scalar(name + " pruned", static_cast<double>(rg.pruned), static_cast<double>(rr.pruned), 0, 0);
    const Snapshot after = snapshot(got);
    compare_state(name + " after rewiring (exact)", after, snapshot(ref), 0.0, 0.0);
    const auto& idx0 = before.u.at("output/indices");
    const auto& idx1 = after.u.at("output/indices");
    int64_t changed = 0;
    for (size_t i = 0; i < idx0.size(); ++i) changed += idx0[i] != idx1[i];
    expect_scalar(name + " changed slots == pruned", static_cast<double>(changed),
                  static_cast<double>(rg.pruned), 0, 0);
    for (int64_t step = 3; step <= 4; ++step) {
      const std::string sn = name + " step " + std::to_string(step) + " after rewiring";
      step_both(sn, ref, got, dev.cuda(), rng, c, c.batch, step);
      compare_state(sn, snapshot(got), snapshot(ref), 1e-6, 1e-3,
                    adam_weight_allowance(optimizers()[static_cast<size_t>(c.opt)], step));
    }
  }
}

// --- checkpoints, ledger, timings --------------------------------------------------------
void test_state_memory_timing(CudaContext&, Rng& rng) {
  const Case c{"squared_hinge", 80, 0.2, 2, 48, 1003, 13, 37, 300};
  const std::string name = describe(c);
  Context cpu(Device::cpu);
  Context dev(Device::cuda);
  const int64_t dev0 = dev.ledger().total_current(MemSpace::device);
  const int64_t host0 = dev.ledger().total_current(MemSpace::host);
  FixedFaninLayer got(make_init(dev, c), make_config(c, /*gpu_timing=*/true));
  const int64_t recorded = dev.ledger().total_current(MemSpace::device) - dev0 +
                           dev.ledger().total_current(MemSpace::host) - host0;
  expect_scalar(name + ": ledger bytes (device + pinned) == analytic size",
                static_cast<double>(recorded), static_cast<double>(got.analytic_bytes()), 0, 0);
  expect_scalar(name + ": no host copies of the parameters left",
                static_cast<double>(dev.ledger().current(MemTag::weights, MemSpace::host)), 0, 0, 0);

  // A CPU layer trained one step (so its state differs from the GPU layer's initial one):
  // its state uploaded into the GPU layer (the checkpoint load path) gives its scores.
  FixedFaninLayer ref(make_init(cpu, c), make_config(c));
  {
    const Batch b = random_batch(rng, c.batch, c.n);
    const auto h = random_vec(rng, static_cast<size_t>(c.batch * c.d));
    std::vector<float> dh(h.size());
    ref.train_step(b, ConstMatrix(h.data(), c.batch, c.d), Matrix(dh.data(), c.batch, c.d), {0.01, 1});
  }
  load_into(got, snapshot(ref));
  expect_scalar(name + ": host copies freed after to_device",
                static_cast<double>(dev.ledger().current(MemTag::weights, MemSpace::host)), 0, 0, 0);
  compare_state(name + " checkpoint round trip", snapshot(got), snapshot(ref), 0.0, 0.0);
  compare_scores_topk(name + " after checkpoint load", ref, got, dev.cuda(), rng, c);

  step_both(name + " timed step", ref, got, dev.cuda(), rng, c, c.batch, 2);
  const auto& t = got.fanin().timings();
  expect_true(name + ": gpu_timing fills forward, loss, backward, update, intermediate",
              t.forward > 0.0 && t.loss > 0.0 && t.backward_input > 0.0 && t.backward_weight > 0.0 &&
                  t.update > 0.0 && t.intermediate_backward > 0.0);
  expect_true(name + ": timed step counts gradients", t.grads == c.batch * c.n && t.label_steps == c.n);
}

// --- the real trainer: 2 epochs with rewiring, cpu vs cuda -------------------------------
const char* kFfParityConfig = R"(name: parity-ff
seed: 7
threads: 2
data:
  train: {features: @DIR@/trn_X.npy, labels: @DIR@/trn_X_Y.txt}
  test: {features: @DIR@/tst_X.npy, labels: @DIR@/tst_X_Y.txt}
  synth: {enabled: true, format: dense, train: 3000, test: 1000, labels: 301, features: 64, clusters: 20, seed: 3}
model:
  encoder: [{type: linear, out: 64, activation: relu, dropout: 0.1}]
  output: {type: fixed_fanin, loss: @LOSS@, fan_in: 16, intermediate: @INTER@, dropout: 0.1, chunk_size: 128, rewire: {interval: 8, fraction: 0.1, until: 0.8}}
optim:
  encoder: {type: adam, lr: 0.01}
  output: {type: adam, lr: 0.01}
train: {epochs: 2, batch_size: 128, log_every_s: 100}
eval: {k: 5}
)";

void test_training_runs(CudaContext&, Rng&) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("xmc_parity_ff_" + std::to_string(::getpid()));
  fs::create_directories(root);
  struct Variant {
    std::string loss, inter;
  };
  for (const Variant& v : {Variant{"squared_hinge", "96"}, Variant{"bce", "0"}}) {
    std::string text = kFfParityConfig;
    auto repl = [&](const std::string& key, const std::string& value) {
      for (size_t p; (p = text.find(key)) != std::string::npos;) text.replace(p, key.size(), value);
    };
    repl("@DIR@", (root / "data").string());
    repl("@LOSS@", v.loss);
    repl("@INTER@", v.inter);
    const ExperimentConfig cfg = parse_config(text, "parity-ff.yaml", {}, output_types());
    std::vector<nlohmann::json> results;
    for (const std::string device : {"cpu", "cuda"}) {
      TrainOptions opt;
      opt.device = device;
      opt.out_dir = (root / (v.loss + "_" + v.inter + "_" + device)).string();
      opt.config_yaml = dump_config(cfg);
      results.push_back(run_training(cfg, opt).results);
      std::printf("  fixed_fanin %s inter %s %s: P@1 %.4f P@5 %.4f, %.2f s/epoch\n",
                  v.loss.c_str(), v.inter.c_str(), device.c_str(), metric(results.back(), "P", 1),
                  metric(results.back(), "P", 5), results.back()["last_epoch_seconds"].get<double>());
    }
    const std::string what = "fixed_fanin " + v.loss + " inter " + v.inter + " cpu vs cuda";
    expect_true(what + ": results record device cuda", results[1]["device"] == "cuda");
    // Rewiring (3 rounds here) selects by a global |w| threshold: a weight within rounding
    // of it can be pruned on one device and kept on the other, so the runs drift a little
    // more than the dense ones (0.01 there).
    for (int k : {1, 3, 5})
      expect_scalar(what + " P@" + std::to_string(k), metric(results[1], "P", k),
                    metric(results[0], "P", k), 0.02, 0);
    // The GPU checkpoint evaluates on the CPU to the GPU run's metrics.
    LoadedModel lm = load_model(results[1]["run_dir"].get<std::string>() + "/checkpoint.h5", "cpu", 0);
    io::DataSource src;
    src.features = (root / "data" / "tst_X.npy").string();
    src.labels = (root / "data" / "tst_X_Y.txt").string();
    const Dataset test = io::load_dataset(src);
    EvalSettings es;
    es.k = 5;
    const EvalResult ev = evaluate_dataset(*lm.model, test, es);
    for (int k : {1, 5})
      expect_scalar(what + ": GPU checkpoint on the CPU P@" + std::to_string(k),
                    ev.metrics.p.at(static_cast<size_t>(k - 1)), metric(results[1], "P", k), 0.005, 0);
  }
  std::error_code ec;
  fs::remove_all(root, ec);
}

}  // namespace

int main() {
  return run_parity_main({
      {"layer steps", test_layer_steps},
      {"rewiring", test_rewire},
      {"state/memory/timing", test_state_memory_timing},
      {"training", test_training_runs},
  });
}
