// CPU-vs-CUDA parity of the sampled backends (lsh_sampled, anns_sampled) and of their
// row-gathered optimizer update. A plain main(): without a CUDA GPU it prints "no CUDA GPU:
// skipped" and exits 77, which CTest reports as skipped (SKIP_RETURN_CODE), never as
// passed. With a GPU, a CPU layer and a CUDA layer are built from the same LayerInit (same
// seed: identical initial parameters) and fed the same batches and h: forward scores, each
// train_step (loss, gradient counts, dh, parameters and optimizer state after the update),
// several steps across LSH table refreshes / an ANNS index refresh, checkpoint staging,
// exact and approximate top-k; then whole 2-epoch runs through run_training on both
// devices and each run's checkpoint evaluated on the other device. Odd sizes throughout
// (d = 37, L = 301, B = 29). Exit 0 only when every check passed.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "config/config_loader.h"
#include "core/context.h"
#include "core/cuda_context.h"
#include "core/gpu.h"
#include "core/rng.h"
#include "io/load.h"
#include "layers/anns_sampled.h"
#include "layers/lsh_sampled.h"
#include "layers/registry.h"
#include "layers/sampled_block.h"
#include "ops/dense.h"
#include "ops/optimizer.h"
#include "ops/topk.h"
#include "parity_support.h"
#include "train/evaluation.h"
#include "train/inference.h"
#include "train/model.h"
#include "train/trainer.h"

namespace {

using namespace xmc;
using gpu::CudaContext;
using gpu::DeviceBuffer;

using namespace xmc::parity;

template <class T>
DeviceBuffer<T> upload(CudaContext& ctx, const std::vector<T>& v) {
  DeviceBuffer<T> b(ctx.ledger(), MemTag::workspace, std::max<size_t>(v.size(), 1));
  b.upload(v.data(), v.size(), ctx.stream());
  ctx.synchronize();
  return b;
}
template <class T>
std::vector<T> download(CudaContext& ctx, const DeviceBuffer<T>& b, size_t n) {
  std::vector<T> v(n);
  b.download(v.data(), n, ctx.stream());
  ctx.synchronize();
  return v;
}

// --- the row-gathered optimizer kernel against OptimizerStep::apply per row ----------------
void test_optimizer_rows(CudaContext& ctx, Rng& rng) {
  const int64_t n = 50;
  for (const OptimizerConfig& cfg : optimizers()) {
    for (int64_t width : {int64_t{1}, int64_t{37}, int64_t{130}}) {
      const std::string name = "update rows " + describe(cfg) + " width " + std::to_string(width);
      const auto total = static_cast<size_t>(n * width);
      std::vector<float> p = random_vec(rng, total), s1(total, 0.0f), s2(total, 0.0f);
      const int states = optimizer_state_arrays(cfg);
      auto dp = upload(ctx, p), d1 = upload(ctx, s1), d2 = upload(ctx, s2);
      for (int64_t step = 1; step <= 3; ++step) {
        // A random subset of distinct rows, in shuffled order.
        std::vector<uint32_t> rows;
        for (uint32_t r = 0; r < n; ++r)
          if (rng.below(3) == 0) rows.push_back(r);
        for (size_t i = rows.size(); i > 1; --i) std::swap(rows[i - 1], rows[rng.below(i)]);
        const auto count = static_cast<int64_t>(rows.size());
        const std::vector<float> g = random_vec(rng, static_cast<size_t>(count * width), 0.5f);
        const OptimizerStep os(cfg, cfg.lr, step);
        for (int64_t u = 0; u < count; ++u) {
          const int64_t o = int64_t{rows[static_cast<size_t>(u)]} * width;
          os.apply(p.data() + o, g.data() + u * width, states >= 1 ? s1.data() + o : nullptr,
                   states >= 2 ? s2.data() + o : nullptr, width);
        }
        auto dg = upload(ctx, g);
        auto drows = upload(ctx, rows);
        const auto before = download(ctx, dp, total);  // the device's own values
        gpu::optimizer_update_rows(ctx, cfg, cfg.lr, step, dp.data(), dg.data(),
                                   states >= 1 ? d1.data() : nullptr,
                                   states >= 2 ? d2.data() : nullptr, drows.data(), count, width);
        const std::string sn = name + " step " + std::to_string(step);
        // Touched rows within rounding of the fp32 formulas; untouched rows bit-identical to
        // the device's own values before the call (not to the host's: a row touched at an
        // earlier step carries that step's rounding difference).
        expect_close(sn + " params", download(ctx, dp, total), p, 1e-6, 1e-5);
        if (states >= 1) expect_close(sn + " state1", download(ctx, d1, total), s1, 1e-7, 1e-5);
        if (states >= 2) expect_close(sn + " state2", download(ctx, d2, total), s2, 1e-9, 1e-5);
        const auto got = download(ctx, dp, total);
        int changed_untouched = 0;
        std::vector<char> hit(static_cast<size_t>(n), 0);
        for (uint32_t r : rows) hit[r] = 1;
        for (int64_t r = 0; r < n; ++r)
          if (!hit[static_cast<size_t>(r)])
            for (int64_t j = 0; j < width; ++j)
              changed_untouched += got[static_cast<size_t>(r * width + j)] !=
                                   before[static_cast<size_t>(r * width + j)];
        expect_true(sn + ": untouched rows unchanged", changed_untouched == 0);
      }
    }
  }
}

// --- the ledger records what the block says it holds ---------------------------------------
void test_block_memory(CudaContext&, Rng&) {
  Context local(Device::cuda), cpu(Device::cpu);
  MemoryLedger& ledger = local.ledger();
  const int64_t before = ledger.total_current(MemSpace::device);
  const int64_t n = 1001, d = 37;
  for (const OptimizerConfig& cfg : optimizers()) {
    {
      const int64_t at = ledger.total_current(MemSpace::device);
      SampledBlock block(local, cfg, 0, n, d, 77, 29, 257, 29 * 40);
      expect_scalar("ledger device bytes of a sampled block (" + describe(cfg) + ") == analytic",
                    static_cast<double>(ledger.total_current(MemSpace::device) - at),
                    static_cast<double>(block.analytic_bytes()), 0, 0);
      // The same initial weights as the CPU block of the same seed.
      SampledBlock ref(cpu, cfg, 0, n, d, 77, 29, 257, 29 * 40);
      const ConstMatrix wg = block.host_weights(), wr = ref.host_weights();
      expect_close("sampled block initial weights", std::vector<float>(wg.data, wg.data + n * d),
                   std::vector<float>(wr.data, wr.data + n * d), 0, 0);
      block.release_host();
    }
  }
  expect_scalar("ledger back to the context's bytes",
                static_cast<double>(ledger.total_current(MemSpace::device)),
                static_cast<double>(before), 0, 0);
}

// --- layer helpers ----------------------------------------------------------------------
struct Devices {
  Context cpu{Device::cpu};
  Context dev{Device::cuda};
};

LayerInit layer_init(Context& ctx, const OptimizerConfig& optim, int64_t d, int64_t labels,
                     int64_t batch, int64_t n_train) {
  LayerInit init;
  init.ctx = &ctx;
  init.input_dim = d;
  init.num_labels = labels;
  init.batch_size = batch;
  init.optim = optim;
  init.seed = 1234;
  init.num_train = n_train;
  init.total_steps = 100;
  return init;
}

// `rows` points with ids drawn from [0, n_train); positives sorted, distinct; row 1 has none.
Batch random_batch(Rng& rng, int64_t rows, int64_t labels, int64_t n_train) {
  Batch b;
  b.sparse = false;
  b.labels.rows = rows;
  b.labels.cols = labels;
  for (int64_t i = 0; i < rows; ++i) {
    b.ids.push_back(static_cast<int64_t>(rng.below(static_cast<uint64_t>(n_train))));
    const int np = i == 1 ? 0 : 1 + static_cast<int>(rng.below(4));
    std::vector<uint32_t> row;
    for (int q = 0; q < np; ++q) row.push_back(static_cast<uint32_t>(rng.below(labels)));
    std::sort(row.begin(), row.end());
    row.erase(std::unique(row.begin(), row.end()), row.end());
    b.labels.indices.insert(b.labels.indices.end(), row.begin(), row.end());
    b.labels.indptr.push_back(static_cast<int64_t>(b.labels.indices.size()));
  }
  return b;
}

const TensorRef* find_tensor(const std::vector<TensorRef>& ts, const std::string& name) {
  for (const auto& t : ts)
    if (t.name == name) return &t;
  return nullptr;
}

// Every tensor of the CPU layer's state against the CUDA layer's (same names and shapes):
// floats within tolerance, integer arrays compared as the fraction of equal entries (>=
// min_equal; 1 = identical).
void compare_state(const std::string& tag, OutputLayer& cpu, OutputLayer& gpu,
                   double min_equal = 1.0) {
  gpu.sync_state(StateSync::to_host);
  const auto rs = cpu.state();
  const auto gs = gpu.state();
  expect_true(tag + ": same number of state tensors", rs.size() == gs.size());
  for (const auto& r : rs) {
    const TensorRef* g = find_tensor(gs, r.name);
    if (g == nullptr || g->shape != r.shape || g->data.index() != r.data.index()) {
      fail(tag + ": state tensor " + r.name + " missing or of another shape / type on the GPU");
      continue;
    }
    if (std::holds_alternative<float*>(r.data)) {
      const float* a = std::get<float*>(r.data);
      const float* b = std::get<float*>(g->data);
      const bool moment2 = r.name.find("opt2") != std::string::npos;
      expect_close(tag + " " + r.name, std::vector<float>(b, b + g->numel()),
                   std::vector<float>(a, a + r.numel()), moment2 ? 1e-8 : 1e-6,
                   moment2 ? 1e-3 : 1e-4);
      continue;
    }
    int64_t same = 0;
    for (int64_t i = 0; i < r.numel(); ++i) {
      if (std::holds_alternative<uint32_t*>(r.data)) {
        same += std::get<uint32_t*>(r.data)[i] == std::get<uint32_t*>(g->data)[i];
      } else {
        same += std::get<int64_t*>(r.data)[i] == std::get<int64_t*>(g->data)[i];
      }
    }
    const double frac = r.numel() ? static_cast<double>(same) / static_cast<double>(r.numel()) : 1.0;
    char buf[160];
    std::snprintf(buf, sizeof buf, " equal entries %.4f >= %.4f", frac, min_equal);
    expect_true(tag + " " + r.name + buf, frac >= min_equal);
  }
  gpu.sync_state(StateSync::release);
}

// Loads the CPU layer's state into the CUDA layer (the checkpoint load path: to_host, write
// the host copies, to_device).
void copy_state(OutputLayer& from, OutputLayer& to) {
  to.sync_state(StateSync::to_host);
  const auto src = from.state();
  for (const auto& t : to.state()) {
    const TensorRef* s = find_tensor(src, t.name);
    if (s == nullptr || s->numel() != t.numel()) {
      fail("copy_state: no tensor " + t.name + " of the same size");
      continue;
    }
    std::visit(
        [&](auto* dst) {
          using T = std::remove_pointer_t<decltype(dst)>;
          const T* p = std::get<T*>(s->data);
          std::copy(p, p + t.numel(), dst);
        },
        t.data);
  }
  to.sync_state(StateSync::to_device);
}

// One train_step on both layers with the same batch and h; compares loss, counts and dh.
void compare_step(const std::string& sn, CudaContext& cuda, OutputLayer& cpu, OutputLayer& gpu,
                  const Batch& b, const std::vector<float>& h, int64_t d, const LrState& lr) {
  const int64_t rows = b.size();
  std::vector<float> dh_ref(h.size(), 0.0f);
  auto dh_dev = upload(cuda, std::vector<float>(h.size(), 7.0f));  // overwritten by the step
  auto h_dev = upload(cuda, h);
  const StepStats rs =
      cpu.train_step(b, ConstMatrix(h.data(), rows, d), Matrix(dh_ref.data(), rows, d), lr);
  const StepStats gs =
      gpu.train_step(b, ConstMatrix(h_dev.data(), rows, d), Matrix(dh_dev.data(), rows, d), lr);
  expect_scalar(sn + " loss", gs.loss, rs.loss, 1e-5, 1e-4);
  expect_scalar(sn + " grads", static_cast<double>(gs.grads), static_cast<double>(rs.grads), 0, 0);
  expect_scalar(sn + " zero gradients", static_cast<double>(gs.zero_grads),
                static_cast<double>(rs.zero_grads), 1e-3 * static_cast<double>(rs.grads) + 2, 0);
  expect_close(sn + " dh", download(cuda, dh_dev, h.size()), dh_ref, 1e-6, 1e-3);
}

// Forward scores of all labels for h [rows×d].
void compare_scores(const std::string& tag, CudaContext& cuda, OutputLayer& cpu, OutputLayer& gpu,
                    const std::vector<float>& h, int64_t rows, int64_t d) {
  const int64_t n = cpu.num_labels();
  std::vector<float> ref(static_cast<size_t>(rows * n));
  cpu.scores(ConstMatrix(h.data(), rows, d), Matrix(ref.data(), rows, n));
  auto h_dev = upload(cuda, h);
  DeviceBuffer<float> out(cuda.ledger(), MemTag::workspace, ref.size());
  gpu.scores(ConstMatrix(h_dev.data(), rows, d), Matrix(out.data(), rows, n));
  expect_close(tag + " scores", download(cuda, out, ref.size()), ref, 1e-5, 1e-4);
}

// Top-k: GPU scores differ from the CPU's by rounding, so near-ties may swap. Each position's
// score must match the CPU's, and each returned label's CPU score must match it too.
void compare_topk(const std::string& tag, CudaContext& cuda, OutputLayer& cpu, OutputLayer& gpu,
                  const std::vector<float>& h, int64_t rows, int64_t d, int k) {
  const int64_t n = cpu.num_labels();
  std::vector<float> all(static_cast<size_t>(rows * n));
  cpu.scores(ConstMatrix(h.data(), rows, d), Matrix(all.data(), rows, n));
  const TopK want = cpu.topk(ConstMatrix(h.data(), rows, d), k);
  auto h_dev = upload(cuda, h);
  const TopK have = gpu.topk(ConstMatrix(h_dev.data(), rows, d), k);
  const double tol_abs = 1e-5, tol_rel = 1e-4;
  int bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int j = 0; j < k; ++j) {
      const float ws = want.row_scores(r)[j];
      const float hs = have.row_scores(r)[j];
      const uint32_t hl = have.row_labels(r)[j];
      if (want.row_labels(r)[j] == TopK::kNoLabel) {
        bad += hl != TopK::kNoLabel;
        continue;
      }
      const bool score_ok = std::abs(hs - ws) <= tol_abs + std::abs(ws) * tol_rel;
      const bool label_ok = hl < static_cast<uint32_t>(n) &&
                            std::abs(all[static_cast<size_t>(r * n + hl)] - ws) <=
                                2 * (tol_abs + std::abs(ws) * tol_rel);
      if (!score_ok || !label_ok) ++bad;
    }
  }
  expect_true(tag + " top-" + std::to_string(k) + ": " + std::to_string(bad) +
                  " entries differ beyond ties",
              bad == 0);
}

// --- lsh_sampled -------------------------------------------------------------------------
// Each layer owns its Context (and so its stream): inputs are uploaded and outputs read
// through that layer's CudaContext.
void test_lsh_layer(CudaContext&, Rng& rng) {
  const int64_t d = 37, n = 301, batch = 29, n_train = 500;
  struct Case {
    std::string name;
    std::string loss, query, reinsert, hash;
    bool shared;
    OptimizerConfig optim;
  };
  const auto opts = optimizers();
  const std::vector<Case> cases = {
      {"softmax embedding", "softmax", "embedding", "updated", "simhash", false, opts[2]},
      {"bce label", "bce", "label", "updated", "dwta", false, opts[1]},
      {"softmax none shared", "softmax", "none", "updated", "simhash", true, opts[3]},
      {"bce embedding shared all", "bce", "embedding", "all", "simhash", true, opts[0]},
  };
  for (const auto& c : cases) {
    const std::string tag = "lsh " + c.name + " " + describe(c.optim);
    LshSampledConfig cfg;
    cfg.loss = parse_enum<LossType>(c.loss, "loss");
    cfg.query = parse_enum<LshQuery>(c.query, "query");
    cfg.reinsert = parse_enum<LshReinsert>(c.reinsert, "reinsert");
    cfg.hash = parse_enum<LshFamily>(c.hash, "hash");
    cfg.shared_candidates = c.shared;
    cfg.k = 4;
    cfg.tables = 8;
    cfg.bucket_capacity = 16;
    cfg.max_candidates = c.shared ? 120 : 40;
    cfg.min_candidates = c.shared ? 60 : 16;
    cfg.rebuild_interval = 2;
    cfg.chunk_size = 128;  // several label chunks, the last one partial
    Devices dv;
    LshSampledLayer ref(layer_init(dv.cpu, c.optim, d, n, batch, n_train), cfg);
    LshSampledLayer got(layer_init(dv.dev, c.optim, d, n, batch, n_train), cfg);
    expect_true(tag + ": layer on the device", got.device_views());
    compare_state(tag + " initial", ref, got);
    compare_scores(tag + " initial", dv.dev.cuda(), ref, got, random_vec(rng, 7 * d), 7, d);
    for (int64_t step = 1; step <= 5; ++step) {
      const std::string sn = tag + " step " + std::to_string(step);
      const Batch b = random_batch(rng, batch, n, n_train);
      compare_step(sn, dv.dev.cuda(), ref, got, b, random_vec(rng, static_cast<size_t>(batch * d)),
                   d, {c.optim.lr, step});
      TrainerView view;
      view.step = step;
      view.total_steps = 100;
      ref.on_step(view);
      got.on_step(view);
      // The tables were refreshed after steps 2 and 4 from the device's weights (rows or all
      // of W downloaded): a bucket may differ only if a projection sign flipped by rounding.
      compare_state(sn, ref, got, 0.999);
    }
    if (c.query != "none")
      expect_true(tag + ": both refreshed twice",
                  ref.next_refresh_step() == 6 && got.next_refresh_step() == 6);
    // Identical tables and parameters from here on: the checkpoint load path.
    copy_state(ref, got);
    compare_state(tag + " after a state copy", ref, got);
    for (int k : {1, 5})
      compare_topk(tag, dv.dev.cuda(), ref, got, random_vec(rng, 40 * d), 40, d, k);
  }
  // eval_search lsh: retrieval on the host from the downloaded h, scores of the retrieved
  // labels on the device; the same tables give the same candidates.
  {
    LshSampledConfig cfg;
    cfg.eval_search = LshEvalSearch::lsh;
    cfg.eval_candidates = 50;
    cfg.k = 3;
    cfg.tables = 6;
    cfg.chunk_size = 100;
    Devices dv;
    LshSampledLayer ref(layer_init(dv.cpu, opts[2], d, n, batch, n_train), cfg);
    LshSampledLayer got(layer_init(dv.dev, opts[2], d, n, batch, n_train), cfg);
    const int64_t rows = 45;
    const auto h = random_vec(rng, static_cast<size_t>(rows * d));
    compare_topk("lsh eval_search lsh", dv.dev.cuda(), ref, got, h, rows, d, 5);
    expect_scalar("lsh eval_search lsh recall", got.last_eval_recall(), ref.last_eval_recall(),
                  0.02, 0);
    expect_true("lsh eval_search lsh recall measured", got.last_eval_recall() >= 0.0);
  }
}

// --- anns_sampled ------------------------------------------------------------------------
void test_anns_layer(CudaContext&, Rng& rng) {
  const int64_t d = 37, n = 301, batch = 29, n_train = 211;
  const auto opts = optimizers();
  struct Case {
    std::string loss, negative_weight;
    OptimizerConfig optim;
  };
  const std::vector<Case> cases = {{"bce", "none", opts[2]},
                                   {"squared_hinge", "none", opts[1]},
                                   {"bce", "unbiased", opts[3]},
                                   {"bce", "none", opts[0]}};
  // The embeddings a refresh sees (the trainer's embed_train), identical on both devices.
  DenseMatrix embedded(n_train, d);
  for (auto& x : embedded.values) x = 2.0f * rng.uniformf() - 1.0f;
  for (const auto& c : cases) {
    const std::string tag = "anns " + c.loss + " " + c.negative_weight +
                            (c.negative_weight == "unbiased" ? " hard_weight 0.25 " : " ") +
                            describe(c.optim);
    AnnsSampledConfig cfg;
    cfg.loss = parse_enum<LossType>(c.loss, "loss");
    cfg.negative_weight = parse_enum<NegativeWeight>(c.negative_weight, "negative_weight");
    cfg.hard_weight = c.negative_weight == "unbiased" ? 0.25 : 1.0;  // weighted hard negatives too
    cfg.hard_negatives = 8;
    cfg.random_negatives = 13;
    cfg.synchronous = true;  // deterministic single-threaded index build
    cfg.chunk_size = 128;
    Devices dv;
    AnnsSampledLayer ref(layer_init(dv.cpu, c.optim, d, n, batch, n_train), cfg);
    AnnsSampledLayer got(layer_init(dv.dev, c.optim, d, n, batch, n_train), cfg);
    expect_true(tag + ": layer on the device", got.device_views());
    compare_state(tag + " initial", ref, got);
    compare_scores(tag + " initial", dv.dev.cuda(), ref, got, random_vec(rng, 5 * d), 5, d);
    int64_t step = 0;
    auto steps = [&](int count) {
      for (int s = 0; s < count; ++s) {
        ++step;
        const Batch b = random_batch(rng, batch, n, n_train);
        compare_step(tag + " step " + std::to_string(step), dv.dev.cuda(), ref, got, b,
                     random_vec(rng, static_cast<size_t>(batch * d)), d, {c.optim.lr, step});
        compare_state(tag + " step " + std::to_string(step), ref, got);
      }
    };
    steps(2);  // uniform negatives only
    // Refresh after epoch 1: the index over [W | b] downloaded from the device.
    TrainerView view;
    view.step = step;
    view.epoch = 0;
    view.epochs = 3;
    view.embed_train = [&] { return embedded; };
    ref.on_epoch(view);
    got.on_epoch(view);
    expect_true(tag + ": hard negatives installed on both",
                ref.has_hard_negatives() && got.has_hard_negatives());
    int64_t same = 0, total = 0;
    for (int64_t p = 0; p < n_train; ++p) {
      const auto a = ref.hard_negatives(p);
      const auto b = got.hard_negatives(p);
      for (size_t j = 0; j < a.size(); ++j) {
        ++total;
        same += std::find(b.begin(), b.end(), a[j]) != b.end();
      }
    }
    // Weights equal up to rounding: the retrieved sets may differ only at near-ties.
    expect_true(tag + ": hard negative sets agree on >= 95% (" + std::to_string(same) + "/" +
                    std::to_string(total) + ")",
                static_cast<double>(same) >= 0.95 * static_cast<double>(total));
    copy_state(ref, got);  // identical hard sets from here on (checkpoint load path)
    compare_state(tag + " after a state copy", ref, got);
    steps(3);
    for (int k : {1, 5})
      compare_topk(tag, dv.dev.cuda(), ref, got, random_vec(rng, 40 * d), 40, d, k);
  }
  // search: hnsw right after construction: bit-identical weights, single-threaded build,
  // so the host index and its answers are the same on both devices.
  {
    AnnsSampledConfig cfg;
    cfg.search = AnnsSearch::hnsw;
    cfg.synchronous = true;
    cfg.recall_sample = 20;
    Devices dv;
    AnnsSampledLayer ref(layer_init(dv.cpu, opts[2], d, n, batch, n_train), cfg);
    AnnsSampledLayer got(layer_init(dv.dev, opts[2], d, n, batch, n_train), cfg);
    const int64_t rows = 33;
    const auto h = random_vec(rng, static_cast<size_t>(rows * d));
    const TopK a = ref.topk(ConstMatrix(h.data(), rows, d), 5);
    auto h_dev = upload(dv.dev.cuda(), h);
    const TopK b = got.topk(ConstMatrix(h_dev.data(), rows, d), 5);
    expect_true("anns search hnsw: same labels", a.labels == b.labels);
    expect_close("anns search hnsw: same scores", b.scores, a.scores, 0, 0);
    expect_scalar("anns search hnsw: recall against exact", got.eval_recall(), ref.eval_recall(),
                  0.02, 0);
  }
}

// --- whole runs through the trainer, CPU vs CUDA -------------------------------------------
const char* kSampledConfig = R"(name: parity-sampled
seed: 7
threads: 2
data:
  train: {features: @DIR@/trn_X.npy, labels: @DIR@/trn_X_Y.txt}
  test: {features: @DIR@/tst_X.npy, labels: @DIR@/tst_X_Y.txt}
  synth: {enabled: true, format: dense, train: 3000, test: 1000, labels: 300, features: 64, clusters: 20, seed: 3}
model:
  encoder: [{type: linear, out: 48, activation: relu, dropout: 0.1}]
  output: {type: @TYPE@, chunk_size: 128@EXTRA@}
optim:
  encoder: {type: adam, lr: 0.01}
  output: {type: adam, lr: 0.01}
train: {epochs: 2, batch_size: 128, log_every_s: 100}
eval: {k: 5}
)";

ExperimentConfig sampled_config(const std::string& dir, const std::string& type,
                                const std::string& extra) {
  std::string text = kSampledConfig;
  auto repl = [&](const std::string& key, const std::string& value) {
    for (size_t p; (p = text.find(key)) != std::string::npos;) text.replace(p, key.size(), value);
  };
  repl("@DIR@", dir);
  repl("@TYPE@", type);
  repl("@EXTRA@", extra);
  return parse_config(text, "parity_sampled.yaml", {}, output_types());
}

double metric(const nlohmann::json& r, int at) {
  return r["metrics"]["P@" + std::to_string(at)].get<double>();
}

void test_training_runs(CudaContext&, Rng&) {
  namespace fs = std::filesystem;
  const fs::path root =
      fs::temp_directory_path() / ("xmc_parity_sampled_" + std::to_string(::getpid()));
  fs::create_directories(root);
  struct Run {
    std::string type, extra, device;
  };
  const std::string lsh =
      ", loss: softmax, rebuild_interval: 10, min_candidates: 32, max_candidates: 64";
  const std::string anns = ", loss: bce, synchronous: true, hard_negatives: 8, random_negatives: 32";
  const std::vector<Run> runs = {{"lsh_sampled", lsh, "cpu"},
                                 {"lsh_sampled", lsh, "cuda"},
                                 {"anns_sampled", anns, "cpu"},
                                 {"anns_sampled", anns, "cuda"}};
  std::vector<nlohmann::json> results;
  for (const auto& r : runs) {
    const ExperimentConfig cfg = sampled_config((root / "data").string(), r.type, r.extra);
    TrainOptions opt;
    opt.device = r.device;
    opt.out_dir = (root / (r.type + "_" + r.device)).string();
    opt.config_yaml = dump_config(cfg);
    results.push_back(run_training(cfg, opt).results);
    std::printf("  %s %s: P@1 %.4f P@5 %.4f, %.2f s/epoch\n", r.type.c_str(), r.device.c_str(),
                metric(results.back(), 1), metric(results.back(), 5),
                results.back()["last_epoch_seconds"].get<double>());
  }
  for (size_t i = 0; i < runs.size(); i += 2) {
    expect_true(runs[i].type + ": results record device cuda",
                results[i + 1]["device"] == "cuda" && results[i + 1].contains("gpu"));
    for (int k : {1, 3, 5})
      expect_scalar(runs[i].type + " cpu vs cuda P@" + std::to_string(k), metric(results[i + 1], k),
                    metric(results[i], k), 0.01, 0);
  }
  // Each run's checkpoint evaluates on the other device to that run's metrics.
  for (size_t run = 0; run < runs.size(); ++run) {
    const std::string device = runs[run].device == "cpu" ? "cuda" : "cpu";
    LoadedModel lm = load_model(results[run]["run_dir"].get<std::string>() + "/checkpoint.h5",
                                device, 0);
    io::DataSource src;
    src.features = (root / "data" / "tst_X.npy").string();
    src.labels = (root / "data" / "tst_X_Y.txt").string();
    const Dataset test = io::load_dataset(src);
    EvalSettings es;
    es.k = 5;
    const EvalResult ev = evaluate_dataset(*lm.model, test, es);
    const std::string label = runs[run].type + " " + runs[run].device + " checkpoint on " + device;
    expect_true(label + ": on the requested device", lm.ctx->device() == resolve_device(device));
    for (int k : {1, 5})
      expect_scalar(label + " P@" + std::to_string(k), ev.metrics.p.at(static_cast<size_t>(k - 1)),
                    metric(results[run], k), 0.005, 0);
  }
  std::error_code ec;
  fs::remove_all(root, ec);
}

}  // namespace

int main() {
  return run_parity_main({
      {"update rows", test_optimizer_rows}, {"block memory", test_block_memory},
      {"lsh layer", test_lsh_layer},        {"anns layer", test_anns_layer},
      {"training", test_training_runs},
  });
}
