#include "layers/fixed_fanin.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/resources.h"
#include "core/rng.h"
#include "layers/weight_init.h"
#include "ops/dense.h"
#include "ops/encoder.h"
#include "ops/fixed_fanin.h"
#include "ops/topk.h"

namespace xmc {

namespace {

// Stream ids, so that the layer's random draws do not collide with each other.
constexpr uint64_t kIndexStream = 0xf1f0'0001ULL;
constexpr uint64_t kWeightStream = 0xf1f0'0002ULL;
constexpr uint64_t kInterStream = 0xf1f0'0003ULL;
constexpr uint64_t kDropoutStream = 0xf1f0'0004ULL;
constexpr uint64_t kRewireStream = 0xf1f0'0005ULL;

}  // namespace

FixedFaninLayer::FixedFaninLayer(const LayerInit& init, const FixedFaninConfig& cfg)
    : FaninLayer(init, cfg.fan_in, cfg.intermediate, cfg.dropout, cfg.loss, cfg.rewire),
      time_ops_(!init.ctx->on_gpu() || cfg.gpu_timing) {
  // Label-sharded (mpirun): this process's labels [lo, lo + n); every per-label draw uses
  // the global label id, so a shard starts as the same rows of a one-process layer.
  const int64_t d = init.input_dim, n = shard_labels(), f = fan_in_, lo = label_lo();
  XMC_CHECK(d > 0 && n > 0 && max_batch_ > 0, "fixed_fanin: d={} L={} B={}", d, n, max_batch_);
  chunk_ = std::min(cfg.chunk_size, n);
  if (loss_ != LossType::squared_hinge && loss_ != LossType::bce)
    throw_input("fixed_fanin: loss '{}' is not supported (squared_hinge, bce)", to_string(cfg.loss));
  if (f > m_)
    throw_input("fixed_fanin: fan_in {} exceeds the {} inputs of the sparse layer ({})", f, m_,
                cfg.intermediate > 0 ? "model.output.intermediate" : "encoder output width");
  Context& ctx = *init.ctx;
  if (ctx.on_gpu()) set_device_views(true);
  const int64_t nf = n * f;
  idx_ = Buffer<uint32_t>(ctx, MemTag::indices, static_cast<size_t>(nf));
  p_ = LabelParams(ctx, optim_, n, f);
  inter_ = Projection(ctx, d, cfg.intermediate, true, optim_, max_batch_,
                      Rng::stream(seed_, kInterStream).next());
  // Label-sharded: the intermediate layer's gradient summed over the processes.
  if (Comm* c = init.shard_comm()) inter_.set_comm(c);
  allocate_workspace(true);

  // Drawn on the host on both devices (a GPU layer uploads them).
  uint32_t* idx = idx_.stage_for_write();
  float* w = p_.w.stage_for_write();
  // Random fan-in without duplicates, sorted (ascending gathers); each label from its own
  // stream so the result does not depend on the thread count. Weights uniform(±1/sqrt(F)).
  const uint64_t idx_seed = Rng::stream(seed_, kIndexStream).next();
  init_uniform_rows(w, n, f, Rng::stream(seed_, kWeightStream).next(), lo);
#pragma omp parallel
  {
    std::vector<uint32_t> pool;  // partial Fisher-Yates when F is a large share of m
#pragma omp for schedule(static)
    for (int64_t l = 0; l < n; ++l) {
      Rng rng = Rng::stream(idx_seed, static_cast<uint64_t>(lo + l));
      uint32_t* il = idx + l * f;
      if (2 * f > m_) {
        pool.resize(static_cast<size_t>(m_));
        for (int64_t i = 0; i < m_; ++i) pool[static_cast<size_t>(i)] = static_cast<uint32_t>(i);
        for (int64_t j = 0; j < f; ++j) {
          const auto r = static_cast<size_t>(j + static_cast<int64_t>(rng.below(static_cast<uint64_t>(m_ - j))));
          std::swap(pool[static_cast<size_t>(j)], pool[r]);
          il[j] = pool[static_cast<size_t>(j)];
        }
      } else {
        for (int64_t j = 0; j < f; ++j) {
          uint32_t c;
          do {
            c = static_cast<uint32_t>(rng.below(static_cast<uint64_t>(m_)));
          } while (std::find(il, il + j, c) != il + j);
          il[j] = c;
        }
      }
      std::sort(il, il + f);
    }
  }
  idx_.commit();
  p_.w.commit();
  const int64_t pn = inter_.active() ? m_ * d + m_ : 0;
  spdlog::info(
      "fixed_fanin: L={} fan-in F={} over {} inputs (sparsity F/{}={:.4f}){}, {} parameters "
      "({:.1f}% of a dense {}×{} layer), on the {}",
      n, f, m_, m_, static_cast<double>(f) / static_cast<double>(m_),
      inter_.active() ? fmt::format(", intermediate {}→{} ReLU", d, m_) : std::string(),
      nf + n + pn, 100.0 * static_cast<double>(nf + n + pn) / static_cast<double>(n * d + n), n,
      d, to_string(ctx.device()));
}

void FixedFaninLayer::mark(Stopwatch& sw, double FaninTimings::*field) {
  if (!time_ops_) return;
  ctx_->synchronize();
  timings_.*field += sw.lap();
}

StepStats FixedFaninLayer::train_step_impl(const Batch& batch, ConstMatrix h, Matrix dh,
                                           const LrState& lr) {
  const Context& ctx = *ctx_;
  const int64_t bsz = h.rows, n = shard_labels(), f = fan_in_;
  XMC_CHECK(bsz <= max_batch_, "batch of {} rows exceeds the workspace for {}", bsz, max_batch_);
  StepStats stats;
  Stopwatch sw;

  // x = dropout(h) [B×d] (the mask drawn on the host on both devices); u = relu(x·Pᵀ + c)
  // [B×m] or x; ut = uᵀ [m×B].
  const float* mask;
  const ConstMatrix x = apply_dropout(h, kDropoutStream, lr.step, &mask);
  const ConstMatrix u = inter_.active() ? ConstMatrix(inter_.forward(x)) : x;
  Matrix ut(ut_.data(), m_, bsz);
  ops::transpose(ctx, u, ut);
  // du = dL/du [B×m]: the intermediate's workspace, or dh itself.
  const Matrix du = inter_.active() ? inter_.grad_workspace(bsz) : dh;
  ops::set_zero(ctx, du);
  targets_.assign(batch.labels);
  acc_.reset();
  mark(sw, &FaninTimings::forward);

  for (int64_t c0 = 0; c0 < n; c0 += chunk_) {
    const int64_t c = std::min(chunk_, n - c0);
    Matrix z(z_.data(), bsz, c);
    const uint32_t* idx = idx_.data() + c0 * f;
    const float* w = p_.w.f32() + c0 * f;
    forward(c0, ut.data, z);
    mark(sw, &FaninTimings::forward);
    // z becomes G = dL/dz (already divided by B).
    elementwise_loss_grad(ctx, loss_, z, nullptr, targets_, label_lo() + c0, bsz, acc_);
    mark(sw, &FaninTimings::loss);
    // With the weights before this step's update.
    ops::fixed_fanin_input_grad(ctx, idx, w, c, f, z, du);
    mark(sw, &FaninTimings::backward_input);
    ops::fixed_fanin_weight_grad(ctx, idx, c, f, z, ut, dw_.data(), db_.data(), acc_.zero_labels());
    mark(sw, &FaninTimings::backward_weight);
    p_.update(ctx, optim_, lr.lr, lr.step, c0, c, dw_.data(), db_.data());
    mark(sw, &FaninTimings::update);
  }
  const gpu::LossAccum acc = acc_.read();
  stats.loss = acc.loss;
  stats.zero_grads = static_cast<int64_t>(acc.zero_grads);
  stats.grads = bsz * n;
  timings_.skipped_labels += static_cast<int64_t>(acc.zero_labels);
  timings_.label_steps += n;

  // Through the ReLU (u > 0), then dh = du·P (old P), dP = duᵀ·x, dc = Σ_rows du, update.
  if (inter_.active()) inter_.backward_update(x, dh, 0.0f, lr);
  if (mask) ops::multiply_mask(ctx, dh, mask, dh);
  mark(sw, &FaninTimings::intermediate_backward);
  timings_.zero_grads += stats.zero_grads;
  timings_.grads += stats.grads;
  stats.loss /= static_cast<double>(bsz);
  return stats;
}

void FixedFaninLayer::forward(int64_t l0, const float* ut, Matrix z) const {
  ops::fixed_fanin_forward(*ctx_, idx_.data() + l0 * fan_in_, p_.w.f32() + l0 * fan_in_,
                           p_.b.data() + l0, z.cols, fan_in_, ConstMatrix(ut, m_, z.rows), z);
}

Buffer<float> FixedFaninLayer::eval_input_t(ConstMatrix h) const {
  Buffer<float> u_buf;
  const ConstMatrix u = inter_.apply_into(h, u_buf);
  Buffer<float> ut(*ctx_, MemTag::workspace, static_cast<size_t>(m_ * h.rows));
  ops::transpose(*ctx_, u, Matrix(ut.data(), m_, h.rows));
  return ut;
}

void FixedFaninLayer::scores_impl(ConstMatrix h, int64_t lo, Matrix out) const {
  for (int64_t r0 = 0; r0 < h.rows; r0 += eval_rows()) {
    const int64_t rows = std::min(eval_rows(), h.rows - r0);
    const Buffer<float> ut = eval_input_t(h.rows_range(r0, rows));
    forward(lo - label_lo(), ut.data(), out.rows_range(r0, rows));
    ctx_->synchronize();  // ut is freed at the end of the iteration
  }
}

TopK FixedFaninLayer::topk_impl(ConstMatrix h, int k) const {
  Buffer<float> ut;
  return xmc::stream_topk(
      *ctx_, h.rows, k, eval_rows(), shard_labels(), chunk_, label_lo(),
      [&](int64_t r0, int64_t rows) { ut = eval_input_t(h.rows_range(r0, rows)); },
      [&](int64_t c0, Matrix z) { forward(c0, ut.data(), z); });
}

void FixedFaninLayer::on_step_impl(const TrainerView& t) {
  rewire_when_due(t, "fixed_fanin", shard_labels() * fan_in_, "connections");
}

void FixedFaninLayer::on_epoch_impl(const TrainerView& t) {
  const auto& tm = timings_;
  auto frac = [](int64_t a, int64_t b) { return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0.0; };
  if (!time_ops_)
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
  timings_ = {};
}

RewireStats FixedFaninLayer::rewire(int64_t step) {
  // Label-sharded: each process prunes the fraction of its own slots (not the lowest of
  // every process's slots together) and regrows from its own label streams.
  const int64_t n = shard_labels(), nf = n * fan_in_;
  // On host copies of idx, w and their moments (on the GPU a round trip of
  // 4·(2 + states)·L·F bytes each way every `interval` steps), so that both devices
  // rewire with this very code: the k smallest |w| over all L·F slots; each label regrows
  // its own.
  const uint64_t base = Rng::stream(seed_ ^ kRewireStream, static_cast<uint64_t>(step)).next();
  return rewire_on_host(step, n, 1, base, [&](int64_t k, const float* w) {
    return lowest_slots(w, nf, k, /*abs=*/true);
  });
}

std::vector<TensorRef> FixedFaninLayer::state_impl() {
  const int64_t n = shard_labels(), f = fan_in_;
  std::vector<TensorRef> out = p_.refs();
  out.insert(out.begin(), {"output/indices", {n, f}, idx_.host_data()});
  inter_.append_state(out, "output/intermediate");
  return out;
}

void FixedFaninLayer::sync_state_impl(StateSync s) {
  idx_.sync(s);
  p_.sync(s);
  inter_.sync_state(s);
}

int64_t FixedFaninLayer::analytic_bytes_impl() const {
  const int64_t n = shard_labels(), f = fan_in_, bsz = max_batch_;
  int64_t bytes = p_.bytes() + 4 * n * f;  // parameters, state, indices
  bytes += inter_.bytes();
  if (dropout_ > 0.0) bytes += mask_.bytes() + 4 * bsz * input_dim();  // mask (GPU: + host), x
  bytes += 4 * (m_ * bsz + bsz * chunk_ + chunk_ * f + chunk_);  // ut, z, dw, db
  bytes += acc_.bytes() + targets_.analytic_bytes();            // GPU: loss, target rows
  return bytes;
}

}  // namespace xmc
