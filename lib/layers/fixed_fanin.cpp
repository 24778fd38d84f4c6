#include "layers/fixed_fanin.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/resources.h"
#include "core/rng.h"
#include "ops/topk.h"

namespace xmc {

namespace {

// Stream ids, so that the layer's random draws do not collide with each other.
constexpr uint64_t kIndexStream = 0xf1f0'0001ULL;
constexpr uint64_t kWeightStream = 0xf1f0'0002ULL;
constexpr uint64_t kInterStream = 0xf1f0'0003ULL;
constexpr uint64_t kDropoutStream = 0xf1f0'0004ULL;
constexpr uint64_t kRewireStream = 0xf1f0'0005ULL;

// The sparse part: this process's labels [lo, hi), one index set each.
FaninLayout layout(const LayerShape& s, const FixedFaninConfig& cfg) {
  return {.name = "fixed_fanin",
          .labels = s.labels(),
          .first = s.label_lo,
          .projection_stream = kInterStream,
          .time_ops = !s.gpu || cfg.gpu_timing,
          .sync_ops = true};
}

}  // namespace

StepWork FixedFaninLayer::planned_step(const LayerShape& s, const FixedFaninConfig& cfg) {
  return FaninBlock::planned_step(s.input_dim, s.batch, s.optim, cfg, layout(s, cfg));
}

LayerBytes FixedFaninLayer::planned_bytes(const LayerShape& s, const FixedFaninConfig& cfg) {
  return FaninBlock::planned_bytes(s.gpu, s.input_dim, s.batch, s.optim, cfg, layout(s, cfg));
}

FixedFaninLayer::FixedFaninLayer(const LayerInit& init, const FixedFaninConfig& cfg)
    : OutputLayer(init), cfg_(cfg), block_(init, cfg, layout(shape(), cfg)) {
  // Label-sharded (mpirun): this process's labels [lo, lo + n); every per-label draw uses
  // the global label id, so a shard starts as the same rows of a one-process layer.
  const int64_t d = init.input_dim, n = shard_labels(), f = block_.fan_in(), lo = label_lo();
  const int64_t m = block_.input_width();
  const uint64_t seed = block_.seed();
  Context& ctx = *init.ctx;
  if (ctx.on_gpu()) set_device_views(true);

  // Drawn on the host on both devices (a GPU layer uploads them).
  // Random fan-in without duplicates, sorted (ascending gathers); each label from its own
  // stream so the result does not depend on the thread count. Weights uniform(±1/sqrt(F)).
  uint32_t* idx = block_.indices().stage_for_write();
  const uint64_t idx_seed = Rng::stream(seed, kIndexStream).next();
  block_.init_weights(Rng::stream(seed, kWeightStream).next());
#pragma omp parallel
  {
    std::vector<uint32_t> pool;  // partial Fisher-Yates when F is a large share of m
#pragma omp for schedule(static)
    for (int64_t l = 0; l < n; ++l) {
      Rng rng = Rng::stream(idx_seed, static_cast<uint64_t>(lo + l));
      uint32_t* il = idx + l * f;
      if (2 * f > m) {
        pool.resize(static_cast<size_t>(m));
        for (int64_t i = 0; i < m; ++i) pool[static_cast<size_t>(i)] = static_cast<uint32_t>(i);
        for (int64_t j = 0; j < f; ++j) {
          const auto r = static_cast<size_t>(
              j + static_cast<int64_t>(rng.below(static_cast<uint64_t>(m - j))));
          std::swap(pool[static_cast<size_t>(j)], pool[r]);
          il[j] = pool[static_cast<size_t>(j)];
        }
      } else {
        for (int64_t j = 0; j < f; ++j) {
          uint32_t c;
          do {
            c = static_cast<uint32_t>(rng.below(static_cast<uint64_t>(m)));
          } while (std::find(il, il + j, c) != il + j);
          il[j] = c;
        }
      }
      std::sort(il, il + f);
    }
  }
  block_.indices().commit();
  const int64_t nf = n * f, pn = cfg.projection > 0 ? m * d + m : 0;
  spdlog::info(
      "fixed_fanin: L={} fan-in F={} over {} inputs (sparsity F/{}={:.4f}){}, {} parameters "
      "({:.1f}% of a dense {}×{} layer), on the {}",
      n, f, m, m, static_cast<double>(f) / static_cast<double>(m),
      pn > 0 ? fmt::format(", intermediate {}→{} ReLU", d, m) : std::string(), nf + n + pn,
      100.0 * static_cast<double>(nf + n + pn) / static_cast<double>(n * d + n), n, d,
      to_string(ctx.device()));
}

StepStats FixedFaninLayer::train_step_impl(const Batch& batch, ConstMatrix h, Matrix dh,
                                           const LrState& lr) {
  // x = dropout(h) [B×d] (the mask drawn on the host on both devices), then the sparse
  // layer (and the intermediate one) on x; dh = dL/dx, then times the mask.
  const int64_t bsz = h.rows, n = shard_labels();
  const ConstMatrix x = block_.dropout(h, kDropoutStream, lr.step);
  block_.targets().assign(batch.labels);
  const gpu::LossAccum acc = block_.train_step(x, dh, 0.0f, lr, label_lo(), 0.0);
  block_.dropout_grad(dh);
  const StepStats stats{.loss = acc.loss / static_cast<double>(bsz),
                        .zero_grads = static_cast<int64_t>(acc.zero_grads),
                        .grads = bsz * n};
  block_.timings().zero_grads += stats.zero_grads;
  block_.timings().grads += stats.grads;
  return stats;
}

void FixedFaninLayer::scores_impl(ConstMatrix h, int64_t lo, Matrix out) const {
  block_.forward(lo - label_lo(), block_.eval_input(h), out);
  block_.context().synchronize();  // before the input is freed
}

TopK FixedFaninLayer::topk_impl(ConstMatrix h, int k) const {
  FaninBlock::Input in;
  return xmc::stream_topk(
      block_.context(), h.rows, k, eval_rows(), shard_labels(), block_.chunk(), label_lo(),
      [&](int64_t r0, int64_t rows) { in = block_.eval_input(h.rows_range(r0, rows)); },
      [&](int64_t c0, Matrix z) { block_.forward(c0, in, z); });
}

void FixedFaninLayer::on_step_impl(const TrainerView& t) {
  block_.rewire_when_due(t, "connections", [this](int64_t s) { return rewire(s); });
}

void FixedFaninLayer::on_epoch_impl(const TrainerView& t) {
  FaninTimings& tm = block_.timings();
  auto frac = [](int64_t a, int64_t b) { return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0.0; };
  if (!block_.layout().time_ops)  // GPU without gpu_timing: counts only
    spdlog::info(
        "fixed_fanin epoch {}: rewiring {:.2f}s; zero output gradients {:.1f}%, labels skipped "
        "whole {:.1f}% (per-op GPU times: model.output.gpu_timing: true)",
        t.epoch + 1, tm.rewire, 100.0 * frac(tm.zero_grads, tm.grads),
        100.0 * frac(tm.skipped_labels, tm.label_steps));
  else
    spdlog::info(
        "fixed_fanin epoch {}: forward {:.2f}s, loss {:.2f}s, backward {:.2f}s (input {:.2f}s, "
        "weight {:.2f}s), update {:.2f}s, intermediate backward {:.2f}s, rewiring {:.2f}s; "
        "zero output gradients {:.1f}%, labels skipped whole {:.1f}%",
        t.epoch + 1, tm.forward, tm.loss, tm.backward_input + tm.backward_weight, tm.backward_input,
        tm.backward_weight, tm.update, tm.intermediate_backward, tm.rewire,
        100.0 * frac(tm.zero_grads, tm.grads), 100.0 * frac(tm.skipped_labels, tm.label_steps));
  tm = {};
}

RewireStats FixedFaninLayer::rewire(int64_t step) {
  // Label-sharded: each process prunes the fraction of its own slots (not the lowest of
  // every process's slots together) and regrows from its own label streams.
  const int64_t nf = shard_labels() * block_.fan_in();
  // On host copies of idx, w and their moments (on the GPU a round trip of
  // 4·(2 + states)·L·F bytes each way every `interval` steps), so that both devices
  // rewire with this very code: the k smallest |w| over all L·F slots; each label regrows
  // its own.
  const uint64_t base =
      Rng::stream(block_.seed() ^ kRewireStream, static_cast<uint64_t>(step)).next();
  return block_.rewire(
      step, base, [&](int64_t k, const float* w) { return lowest_slots(w, nf, k, /*abs=*/true); });
}

std::vector<TensorRef> FixedFaninLayer::state_impl() {
  std::vector<TensorRef> out;
  block_.append_state(out, "output/intermediate");
  return out;
}

void FixedFaninLayer::sync_state_impl(StateSync s) { block_.sync_state(s); }

}  // namespace xmc
