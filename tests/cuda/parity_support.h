#pragma once
// What the layer-level CPU-vs-device tests (tests/cuda/test_parity_*.cpp, DEVICE_TEST
// bodies: support/device_test.h) share: configs from YAML text, random batches, a layer's
// state copied to the host by name and compared (or loaded into another layer: a
// checkpoint round trip without the file), one train step on two layers compared, scores
// and top-k compared allowing ties across devices.
//
// Each body builds its reference on a CPU Context and the layer under test on the body's
// `ctx`: on CUDA the comparisons are CPU against GPU, on the (cpu) run CPU against CPU
// (bit-identical, so every tolerance holds and the body's own code is exercised).
// Configs are written as YAML and read through the config loader, as a user's config is.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "config/config_loader.h"
#include "core/buffer.h"
#include "core/context.h"
#include "core/rng.h"
#include "data/batch.h"
#include "layers/output_layer.h"
#include "layers/registry.h"
#include "ops/optimizer.h"
#include "support/device_test.h"
#include "support/op_cases.h"

namespace xmc::parity {

using namespace xmc::test;
using testcases::optimizers;
using testcases::random_targets;

inline std::string describe(const OptimizerConfig& o) { return testcases::describe(o); }

// Adam's update lr·m̂/(√v̂ + eps) is ill-conditioned where a weight's gradient nearly
// cancels (|g| ~ eps): there the devices' float sums (cuBLAS and OpenBLAS add in other
// orders) move the update by a few thousandths of lr although m and v agree to 1e-3.
// First GPU run (H200, 2026-11-26): 4-6 of 64000 dense-block weights and 1 of 43200
// fixed_fanin intermediate weights, |diff| <= 3.5e-3·lr per step. Weights after t Adam
// steps therefore get an absolute allowance of 1e-2·lr·t (a wrong kernel is off by ~lr
// on most weights); other optimizers none.
inline double adam_weight_allowance(const OptimizerConfig& cfg, int64_t steps) {
  const bool adam = cfg.type == OptimizerType::adam || cfg.type == OptimizerType::adamw;
  return adam ? 1e-2 * cfg.lr * static_cast<double>(steps) : 0.0;
}

// --- configs ---------------------------------------------------------------------------
// An experiment config whose model.output is `output` (a YAML flow map) and model.encoder
// `encoder`, Adam at 0.01 for both, batches of up to batch_size (the data paths lead
// nowhere: nothing here reads data).
inline ExperimentConfig experiment_config(const std::string& output,
                                          const std::string& encoder = "[]",
                                          int64_t batch_size = 128) {
  const std::string text =
      "name: parity\nseed: 7\nthreads: 2\n"
      "data:\n"
      "  train: {features: /nonexistent/trn_X.npy, labels: /nonexistent/trn_X_Y.txt}\n"
      "  test: {features: /nonexistent/tst_X.npy, labels: /nonexistent/tst_X_Y.txt}\n"
      "model:\n  encoder: " +
      encoder + "\n  output: " + output +
      "\n"
      "optim:\n  encoder: {type: adam, lr: 0.01}\n  output: {type: adam, lr: 0.01}\n"
      "train: {batch_size: " +
      std::to_string(batch_size) + "}\n";
  return parse_config(text, "parity.yaml", {}, output_types());
}
// A backend's layer from its YAML (`{type: fixed_fanin, fan_in: 5, ...}`), built by the
// registry as the trainer builds it, as the concrete class.
template <class Layer>
std::unique_ptr<Layer> make_layer(const LayerInit& init, const std::string& output_yaml) {
  std::unique_ptr<OutputLayer> l =
      create_output_layer(init, experiment_config(output_yaml).model.output);
  auto* p = dynamic_cast<Layer*>(l.get());
  REQUIRE(p != nullptr);
  l.release();
  return std::unique_ptr<Layer>(p);
}

// --- batches ---------------------------------------------------------------------------
// `rows` points with 1..max_pos random positives each over [0, labels) (row 1 without
// any); ids 0..rows-1, or drawn from [0, n_train) when n_train > 0. No features.
inline Batch random_batch(Rng& rng, int64_t rows, int64_t labels, int max_pos,
                          int64_t n_train = 0) {
  Batch b;
  b.sparse = false;
  b.labels = random_targets(rng, rows, labels, max_pos);
  for (int64_t r = 0; r < rows; ++r)
    b.ids.push_back(n_train > 0 ? static_cast<int64_t>(rng.below(static_cast<uint64_t>(n_train)))
                                : r);
  return b;
}

// `rows` points of dimension dim (sparse: about 12 distinct features per row, values in
// [0.1, 1.1); dense: uniform in [-1, 1)) with 1..4 positives over [0, labels).
inline Batch feature_batch(Rng& rng, bool sparse, int64_t rows, int64_t dim, int64_t labels) {
  Batch b;
  b.sparse = sparse;
  for (int64_t i = 0; i < rows; ++i) b.ids.push_back(i);
  if (sparse) {
    b.sparse_x.rows = rows;
    b.sparse_x.cols = dim;
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<uint32_t> idx;
      for (int k = 0; k < 12; ++k)
        idx.push_back(static_cast<uint32_t>(rng.below(static_cast<uint64_t>(dim))));
      std::sort(idx.begin(), idx.end());
      idx.erase(std::unique(idx.begin(), idx.end()), idx.end());
      for (auto i : idx) {
        b.sparse_x.indices.push_back(i);
        b.sparse_x.values.push_back(0.1f + rng.uniformf());
      }
      b.sparse_x.indptr.push_back(static_cast<int64_t>(b.sparse_x.indices.size()));
    }
  } else {
    b.dense_x = DenseMatrix(rows, dim);
    for (auto& v : b.dense_x.values) v = 2.0f * rng.uniformf() - 1.0f;
  }
  b.labels = random_targets(rng, rows, labels, 4);
  return b;
}

// --- state -----------------------------------------------------------------------------
struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  std::variant<std::vector<float>, std::vector<uint32_t>, std::vector<int64_t>> values;
};
using Snapshot = std::vector<Tensor>;

// Host copies of a state list (in its order).
inline Snapshot copy_tensors(const std::vector<TensorRef>& refs) {
  Snapshot s;
  for (const TensorRef& t : refs) {
    Tensor c{t.name, t.shape, {}};
    std::visit([&](auto* p) { c.values = std::vector(p, p + t.numel()); }, t.data);
    s.push_back(std::move(c));
  }
  return s;
}
// The state of a layer, encoder or dense block (a device-resident one staged through host
// copies and released).
template <class Owner>
Snapshot snapshot(Owner& o) {
  o.sync_state(StateSync::to_host);
  Snapshot s;
  if constexpr (requires { o.state(""); })
    s = copy_tensors(o.state(""));
  else
    s = copy_tensors(o.state());
  o.sync_state(StateSync::release);
  return s;
}
// One float tensor of a snapshot (empty when there is none of that name).
inline std::vector<float> floats(const Snapshot& s, const std::string& name) {
  for (const Tensor& t : s)
    if (t.name == name) return std::get<std::vector<float>>(t.values);
  return {};
}

// Tolerances of a state comparison: float tensors within |got - ref| <= abs + |ref|·rel;
// parameters (names without "opt") get weight_abs more (adam_weight_allowance), second
// moments ("opt2") opt2_abs / opt2_rel instead when set (>= 0); integer tensors (indices,
// tables) equal on at least min_equal of their entries.
struct StateTolerance {
  double abs = 0.0, rel = 0.0;
  double weight_abs = 0.0;
  double opt2_abs = -1.0, opt2_rel = -1.0;
  double min_equal = 1.0;
};
inline constexpr StateTolerance kExact{};

// got against ref: the same tensors (names, shapes, types, in order), then each within tol.
inline void compare_state(const std::string& what, const Snapshot& got, const Snapshot& ref,
                          const StateTolerance& tol) {
  INFO(what);
  REQUIRE(got.size() == ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    const Tensor &g = got[i], &r = ref[i];
    INFO("tensor " << r.name);
    REQUIRE(g.name == r.name);
    REQUIRE(g.shape == r.shape);
    REQUIRE(g.values.index() == r.values.index());
    if (const auto* rf = std::get_if<std::vector<float>>(&r.values)) {
      const bool moment = r.name.find("opt") != std::string::npos;
      const bool second = r.name.find("opt2") != std::string::npos;
      const double abs =
          second && tol.opt2_abs >= 0 ? tol.opt2_abs : tol.abs + (moment ? 0.0 : tol.weight_abs);
      const double rel = second && tol.opt2_rel >= 0 ? tol.opt2_rel : tol.rel;
      expect_close(what + " " + r.name, std::get<std::vector<float>>(g.values), *rf, abs, rel);
      continue;
    }
    std::visit(
        [&](const auto& rv) {
          using V = std::decay_t<decltype(rv)>;
          const V& gv = std::get<V>(g.values);
          int64_t same = 0;
          for (size_t j = 0; j < rv.size(); ++j) same += gv[j] == rv[j];
          const double frac = rv.empty() ? 1.0 : static_cast<double>(same) / rv.size();
          INFO(same << " of " << rv.size() << " entries equal, at least " << tol.min_equal
                    << " needed");
          CHECK(frac >= tol.min_equal);
        },
        r.values);
  }
}

// Writes src's tensors (same names and sizes) into a layer's state and uploads them: the
// checkpoint load path (sync_state to_host, fill state(), to_device) without the file.
inline void load_state(OutputLayer& dst, const Snapshot& src) {
  dst.sync_state(StateSync::to_host);
  for (const TensorRef& t : dst.state()) {
    const auto it =
        std::find_if(src.begin(), src.end(), [&](const Tensor& s) { return s.name == t.name; });
    INFO("state tensor " << t.name);
    REQUIRE(it != src.end());
    REQUIRE(it->values.index() == t.data.index());
    std::visit(
        [&](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          const auto& v = std::get<std::vector<T>>(it->values);
          REQUIRE(static_cast<int64_t>(v.size()) == t.numel());
          std::copy(v.begin(), v.end(), p);
        },
        t.data);
  }
  dst.sync_state(StateSync::to_device);
}

// The host + device bytes recorded in a Context's ledger.
inline int64_t ledger_total(const Context& ctx) {
  return ctx.ledger().total_current(MemSpace::host) + ctx.ledger().total_current(MemSpace::device);
}

// --- steps, scores, top-k --------------------------------------------------------------
// One train_step of the reference (on the CPU) and of the layer under test (on got_ctx)
// with the same batch, h and rate: loss within 1e-5 + 1e-4 relative, the gradient count
// equal, exact-zero gradients within 1e-3 of the count + 2 (logits at the hinge may differ
// in the last bit), dh within 1e-6 + 1e-3 relative (dh is overwritten: both start at 7).
inline void compare_step(const std::string& what, OutputLayer& ref, OutputLayer& got,
                         Context& got_ctx, const Batch& batch, const std::vector<float>& h,
                         const LrState& lr) {
  const int64_t rows = batch.size(), d = ref.input_dim();
  std::vector<float> dh_ref(h.size(), 7.0f);
  auto dh_got = put(got_ctx, std::vector<float>(h.size(), 7.0f));
  auto h_got = put(got_ctx, h);
  const StepStats rs =
      ref.train_step(batch, ConstMatrix(h.data(), rows, d), Matrix(dh_ref.data(), rows, d), lr);
  const StepStats gs =
      got.train_step(batch, ConstMatrix(h_got.data(), rows, d), Matrix(dh_got.data(), rows, d), lr);
  expect_close(what + " loss", gs.loss, rs.loss, 1e-5, 1e-4);
  expect_close(what + " gradients", static_cast<double>(gs.grads), static_cast<double>(rs.grads), 0,
               0);
  expect_close(what + " zero gradients", static_cast<double>(gs.zero_grads),
               static_cast<double>(rs.zero_grads), 1e-3 * static_cast<double>(rs.grads) + 2, 0);
  expect_close(what + " dh", get(dh_got, h.size()), dh_ref, 1e-6, 1e-3);
}

// scores [rows×L] of a layer on its Context for host h [rows×d], on the host.
inline std::vector<float> layer_scores(const OutputLayer& layer, Context& ctx,
                                       const std::vector<float>& h, int64_t rows) {
  const int64_t d = layer.input_dim(), n = layer.label_hi() - layer.label_lo();
  auto hd = put(ctx, h);
  Buffer<float> out(ctx, MemTag::workspace, static_cast<size_t>(rows * n));
  layer.scores(ConstMatrix(hd.data(), rows, d), Matrix(out.data(), rows, n));
  return get(out, static_cast<size_t>(rows * n));
}

// Top-k lists of the layer under test (have) against the CPU's (want), with `all` the CPU
// scores [rows×n] of every label: scores differ by rounding across devices, so near-ties
// may swap. At each position the score matches the CPU's within tol_abs + |ref|·tol_rel,
// the label is the CPU's or one the CPU scores equally (within twice that: a tie partner,
// not a wrong label); pads at the same places; no label twice in a row.
inline void compare_topk(const std::string& what, const TopK& want, const TopK& have,
                         const std::vector<float>& all, int64_t n, double tol_abs = 1e-5,
                         double tol_rel = 1e-4) {
  INFO(what);
  REQUIRE(have.rows == want.rows);
  REQUIRE(have.k == want.k);
  int64_t bad = 0;
  for (int64_t r = 0; r < want.rows; ++r) {
    for (int j = 0; j < want.k; ++j) {
      const float ws = want.row_scores(r)[j], hs = have.row_scores(r)[j];
      const uint32_t wl = want.row_labels(r)[j], hl = have.row_labels(r)[j];
      if (wl == TopK::kNoLabel || hl == TopK::kNoLabel) {
        bad += wl != hl;
        continue;
      }
      const double tol = tol_abs + std::abs(ws) * tol_rel;
      const bool score_ok = std::abs(hs - ws) <= tol;
      const bool label_ok =
          hl == wl || (hl < static_cast<uint32_t>(n) &&
                       std::abs(all[static_cast<size_t>(r * n + hl)] - ws) <= 2 * tol);
      bad += !(score_ok && label_ok);
    }
    std::vector<uint32_t> l(have.row_labels(r), have.row_labels(r) + have.k);
    std::sort(l.begin(), l.end());
    l.erase(std::remove(l.begin(), l.end(), TopK::kNoLabel), l.end());
    bad += std::adjacent_find(l.begin(), l.end()) != l.end();
  }
  INFO(bad << " entries differ beyond ties");
  CHECK(bad == 0);
}

// compare_topk of the two layers' top-k for host h [rows×d], k labels.
inline void compare_layer_topk(const std::string& what, const OutputLayer& ref,
                               const OutputLayer& got, Context& got_ctx,
                               const std::vector<float>& h, int64_t rows, int k) {
  Context cpu;
  const std::vector<float> all = layer_scores(ref, cpu, h, rows);
  const int64_t d = ref.input_dim();
  const TopK want = ref.topk(ConstMatrix(h.data(), rows, d), k);
  auto hd = put(got_ctx, h);
  const TopK have = got.topk(ConstMatrix(hd.data(), rows, d), k);
  compare_topk(what + " top-" + std::to_string(k), want, have, all,
               ref.label_hi() - ref.label_lo());
}

}  // namespace xmc::parity
