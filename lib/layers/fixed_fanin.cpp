#include "layers/fixed_fanin.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/resources.h"
#include "core/rng.h"
#include "kernels/dense_ops.h"
#include "kernels/fixed_fanin_ops.h"
#include "layers/fixed_fanin_cuda.h"
#include "layers/param_refs.h"
#include "model/dropout.h"

namespace xmc {

namespace {

HostBuffer<float> maybe_buffer(MemoryLedger& ledger, MemTag tag, bool needed, int64_t n) {
  if (!needed || n == 0) return {};
  return HostBuffer<float>(ledger, tag, static_cast<size_t>(n));
}

// Stream ids, so that the layer's random draws do not collide with each other.
constexpr uint64_t kIndexStream = 0xf1f0'0001ULL;
constexpr uint64_t kWeightStream = 0xf1f0'0002ULL;
constexpr uint64_t kInterStream = 0xf1f0'0003ULL;
constexpr uint64_t kDropoutStream = 0xf1f0'0004ULL;
constexpr uint64_t kRewireStream = 0xf1f0'0005ULL;

}  // namespace

FixedFaninLayer::FixedFaninLayer(const LayerInit& init, const FixedFaninConfig& cfg)
    : OutputLayer(init.input_dim, init.num_labels, 0, init.num_labels),
      fan_in_(cfg.fan_in),
      m_(cfg.intermediate > 0 ? cfg.intermediate : init.input_dim),
      max_batch_(init.batch_size),
      chunk_(std::min(cfg.chunk_size, init.num_labels)),
      inter_(cfg.intermediate > 0),
      dropout_(cfg.dropout),
      loss_(parse_loss(cfg.loss)),
      rewire_cfg_(cfg.rewire),
      optim_(init.optim),
      seed_(init.seed),
      total_steps_(init.total_steps),
      ledger_(&init.ctx->ledger()) {
  const int64_t d = init.input_dim, n = init.num_labels, f = fan_in_;
  XMC_CHECK(d > 0 && n > 0 && max_batch_ > 0, "fixed_fanin: d={} L={} B={}", d, n, max_batch_);
  if (loss_ != LossType::squared_hinge && loss_ != LossType::bce)
    throw_input("fixed_fanin: loss '{}' is not supported (squared_hinge, bce)", cfg.loss);
  if (f > m_)
    throw_input("fixed_fanin: fan_in {} exceeds the {} inputs of the sparse layer ({})", f, m_,
                cfg.intermediate > 0 ? "model.output.intermediate" : "encoder output width");
  const bool inter = inter_;
  auto& ledger = init.ctx->ledger();
  const bool on_gpu = init.ctx->on_gpu();
  const int64_t nf = n * f;
  const int64_t pn = inter ? m_ * d + m_ : 0;
  // Parameters drawn on the host on both devices (a GPU layer uploads them, then frees
  // the host copies); host workspaces only on the CPU.
  alloc_host_params(/*all=*/true);
  if (!on_gpu) {
    dp_ = maybe_buffer(ledger, MemTag::workspace, inter, pn);
    xd_ = maybe_buffer(ledger, MemTag::workspace, dropout_ > 0.0, max_batch_ * d);
    mask_ = maybe_buffer(ledger, MemTag::workspace, dropout_ > 0.0, max_batch_ * d);
    u_ = maybe_buffer(ledger, MemTag::workspace, inter, max_batch_ * m_);
    du_ = maybe_buffer(ledger, MemTag::workspace, inter, max_batch_ * m_);
    ut_ = maybe_buffer(ledger, MemTag::workspace, true, m_ * max_batch_);
    z_ = maybe_buffer(ledger, MemTag::workspace, true, max_batch_ * chunk_);
    dw_ = maybe_buffer(ledger, MemTag::workspace, true, chunk_ * f);
    db_ = maybe_buffer(ledger, MemTag::workspace, true, chunk_);
  }

  // Random fan-in without duplicates, sorted (ascending gathers); each label from its own
  // stream so the result does not depend on the thread count.
  const float wscale = 1.0f / std::sqrt(static_cast<float>(f));
  const uint64_t idx_seed = Rng::stream(seed_, kIndexStream).next();
  const uint64_t w_seed = Rng::stream(seed_, kWeightStream).next();
#pragma omp parallel
  {
    std::vector<uint32_t> pool;  // partial Fisher-Yates when F is a large share of m
#pragma omp for schedule(static)
    for (int64_t l = 0; l < n; ++l) {
      Rng rng = Rng::stream(idx_seed, static_cast<uint64_t>(l));
      uint32_t* il = idx_.data() + l * f;
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
      Rng wrng = Rng::stream(w_seed, static_cast<uint64_t>(l));
      float* wl = w_.data() + l * f;
      for (int64_t j = 0; j < f; ++j) wl[j] = (2.0f * wrng.uniformf() - 1.0f) * wscale;
    }
  }
  if (inter) {
    const float pscale = 1.0f / std::sqrt(static_cast<float>(d));
    const uint64_t p_seed = Rng::stream(seed_, kInterStream).next();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < m_; ++r) {
      Rng rng = Rng::stream(p_seed, static_cast<uint64_t>(r));
      float* row = p_.data() + r * d;
      for (int64_t j = 0; j < d; ++j) row[j] = (2.0f * rng.uniformf() - 1.0f) * pscale;
    }
  }
  if (on_gpu) {
    const FixedFaninShape shape{d, n, f, m_, inter, max_batch_, chunk_, dropout_ > 0.0};
    gpu_ = std::make_unique<FixedFaninCuda>(init.ctx->cuda(), shape, loss_, optim_);
    transfer_host_params(/*to_device=*/true, /*all=*/true);
    free_host_params();
    set_device_views(true);
    time_ops_ = cfg.gpu_timing;
  }
  spdlog::info(
      "fixed_fanin: L={} fan-in F={} over {} inputs (sparsity F/{}={:.4f}){}, {} parameters "
      "({:.1f}% of a dense {}×{} layer){}",
      n, f, m_, m_, static_cast<double>(f) / static_cast<double>(m_),
      inter ? fmt::format(", intermediate {}→{} ReLU", d, m_) : std::string(), nf + n + pn,
      100.0 * static_cast<double>(nf + n + pn) / static_cast<double>(n * d + n), n, d,
      on_gpu ? ", on the GPU" : "");
}

FixedFaninLayer::~FixedFaninLayer() = default;

void FixedFaninLayer::alloc_host_params(bool all) {
  auto& ledger = *ledger_;
  const int states = optimizer_state_arrays(optim_);
  const int64_t n = num_labels(), nf = n * fan_in_;
  const int64_t pn = inter_ ? m_ * input_dim() + m_ : 0;
  idx_ = HostBuffer<uint32_t>(ledger, MemTag::indices, static_cast<size_t>(nf));
  w_ = HostBuffer<float>(ledger, MemTag::weights, static_cast<size_t>(nf));
  w_s1_ = maybe_buffer(ledger, MemTag::optimizer, states >= 1, nf);
  w_s2_ = maybe_buffer(ledger, MemTag::optimizer, states >= 2, nf);
  if (!all) return;
  b_ = HostBuffer<float>(ledger, MemTag::weights, static_cast<size_t>(n));
  b_s1_ = maybe_buffer(ledger, MemTag::optimizer, states >= 1, n);
  b_s2_ = maybe_buffer(ledger, MemTag::optimizer, states >= 2, n);
  p_ = maybe_buffer(ledger, MemTag::weights, inter_, pn);
  p_s1_ = maybe_buffer(ledger, MemTag::optimizer, inter_ && states >= 1, pn);
  p_s2_ = maybe_buffer(ledger, MemTag::optimizer, inter_ && states >= 2, pn);
}

void FixedFaninLayer::free_host_params() {
  idx_ = {};
  for (auto* b : {&w_, &w_s1_, &w_s2_, &b_, &b_s1_, &b_s2_, &p_, &p_s1_, &p_s2_}) *b = {};
}

void FixedFaninLayer::transfer_host_params(bool to_device, bool all) {
  FixedFaninHostArrays a;
  a.idx = idx_.data();
  a.w = w_.data();
  a.w_s1 = data_or_null(w_s1_);
  a.w_s2 = data_or_null(w_s2_);
  if (all) {
    a.b = b_.data();
    a.b_s1 = data_or_null(b_s1_);
    a.b_s2 = data_or_null(b_s2_);
    a.p = data_or_null(p_);
    a.p_s1 = data_or_null(p_s1_);
    a.p_s2 = data_or_null(p_s2_);
  }
  if (to_device) {
    gpu_->upload(a);
  } else {
    gpu_->download(a);
  }
}

StepStats FixedFaninLayer::train_step_impl(const Batch& batch, ConstMatrix h, Matrix dh,
                                           const LrState& lr) {
  const int64_t bsz = h.rows, d = input_dim(), n = num_labels(), f = fan_in_;
  XMC_CHECK(bsz <= max_batch_, "batch of {} rows exceeds the workspace for {}", bsz, max_batch_);
  if (gpu_) {
    // The same mask draws as dropout_dense below, into the pinned buffer the step uploads.
    if (dropout_ > 0.0) {
      Rng rng = Rng::stream(seed_ ^ kDropoutStream, static_cast<uint64_t>(lr.step));
      dropout_mask(gpu_->mask_host(), bsz * d, dropout_, rng);
    }
    return gpu_->train_step(batch.labels, h, dh, lr, timings_, time_ops_);
  }
  const bool inter = inter_;
  StepStats stats;
  Stopwatch sw;
  auto mark = [&](double FixedFaninTimings::*field) {
    timings_.*field += sw.seconds();
    sw.reset();
  };

  // x = dropout(h) [B×d]; u = relu(x·Pᵀ + c) [B×m] or x; ut = uᵀ [m×B].
  ConstMatrix x = h;
  if (dropout_ > 0.0) {
    Matrix xd(xd_.data(), bsz, d);
    for (int64_t r = 0; r < bsz; ++r) std::copy(h.row(r), h.row(r) + d, xd.row(r));
    Rng rng = Rng::stream(seed_ ^ kDropoutStream, static_cast<uint64_t>(lr.step));
    dropout_dense(xd, mask_.data(), dropout_, rng);
    x = xd;
  }
  ConstMatrix u = x;
  ConstMatrix p(p_.data(), m_, d);
  if (inter) {
    Matrix um(u_.data(), bsz, m_);
    const float* c = p_.data() + m_ * d;
    for (int64_t r = 0; r < bsz; ++r) std::copy(c, c + m_, um.row(r));
    kernels::gemm_nt(x, p, um, 1.0f, 1.0f);
    for (int64_t i = 0; i < bsz * m_; ++i) um.data[i] = std::max(um.data[i], 0.0f);
    u = um;
  }
  Matrix ut(ut_.data(), m_, bsz);
  kernels::transpose(u, ut);
  // du = dL/du [B×m]: the intermediate's workspace, or dh itself.
  Matrix du = inter ? Matrix(du_.data(), bsz, m_) : dh;
  for (int64_t r = 0; r < bsz; ++r) std::fill(du.row(r), du.row(r) + du.cols, 0.0f);
  mark(&FixedFaninTimings::forward);

  for (int64_t c0 = 0; c0 < n; c0 += chunk_) {
    const int64_t c = std::min(chunk_, n - c0);
    Matrix z(z_.data(), bsz, c);
    const uint32_t* idx = idx_.data() + c0 * f;
    const float* w = w_.data() + c0 * f;
    kernels::fixed_fanin_forward(idx, w, b_.data() + c0, c, f, ut, z);
    mark(&FixedFaninTimings::forward);
    // z becomes G = dL/dz (already divided by B).
    stats.loss += elementwise_loss_grad(loss_, z, batch.labels, c0, bsz, &stats.zero_grads);
    stats.grads += bsz * c;
    mark(&FixedFaninTimings::loss);
    // With the weights before this step's update.
    kernels::fixed_fanin_input_grad(idx, w, c, f, z, du);
    mark(&FixedFaninTimings::backward_input);
    timings_.skipped_labels +=
        kernels::fixed_fanin_weight_grad(idx, c, f, z, ut, dw_.data(), db_.data());
    timings_.label_steps += c;
    mark(&FixedFaninTimings::backward_weight);
    update_labels(c0, c, lr);
    mark(&FixedFaninTimings::update);
  }

  if (inter) {
    // Through the ReLU (u > 0), then dP = duᵀ·x, dc = Σ_rows du, dx = du·P (old P).
    ConstMatrix um(u_.data(), bsz, m_);
    for (int64_t i = 0; i < bsz * m_; ++i)
      if (um.data[i] <= 0.0f) du.data[i] = 0.0f;
    kernels::gemm_tn(du, x, Matrix(dp_.data(), m_, d));
    kernels::column_sums(du, dp_.data() + m_ * d);
    kernels::gemm_nn(du, p, dh);
    optimizer_update(optim_, lr.lr, lr.step, p_.data(), dp_.data(), data_or_null(p_s1_),
                     data_or_null(p_s2_), static_cast<int64_t>(p_.size()));
  }
  if (dropout_ > 0.0) {
    const float* mk = mask_.data();
    for (int64_t r = 0; r < bsz; ++r) {
      float* row = dh.row(r);
      for (int64_t j = 0; j < d; ++j) row[j] *= mk[r * d + j];
    }
  }
  mark(&FixedFaninTimings::intermediate_backward);
  timings_.zero_grads += stats.zero_grads;
  timings_.grads += stats.grads;
  stats.loss /= static_cast<double>(bsz);
  return stats;
}

void FixedFaninLayer::update_labels(int64_t l0, int64_t n, const LrState& lr) {
  const int64_t off = l0 * fan_in_;
  optimizer_update(optim_, lr.lr, lr.step, w_.data() + off, dw_.data(), data_or_null(w_s1_, off),
                   data_or_null(w_s2_, off), n * fan_in_);
  OptimizerConfig bias_cfg = optim_;
  bias_cfg.weight_decay = 0.0;  // no weight decay on the bias
  optimizer_update(bias_cfg, lr.lr, lr.step, b_.data() + l0, db_.data(), data_or_null(b_s1_, l0),
                   data_or_null(b_s2_, l0), n);
}

ConstMatrix FixedFaninLayer::eval_input_t(ConstMatrix h, std::vector<float>& buf) const {
  const int64_t rows = h.rows, d = input_dim();
  std::vector<float> u_buf;
  ConstMatrix u = h;
  if (inter_) {
    u_buf.resize(static_cast<size_t>(rows * m_));
    Matrix um(u_buf.data(), rows, m_);
    const float* c = p_.data() + m_ * d;
    for (int64_t r = 0; r < rows; ++r) std::copy(c, c + m_, um.row(r));
    kernels::gemm_nt(h, ConstMatrix(p_.data(), m_, d), um, 1.0f, 1.0f);
    for (auto& v : u_buf) v = std::max(v, 0.0f);
    u = um;
  }
  buf.resize(static_cast<size_t>(m_ * rows));
  Matrix ut(buf.data(), m_, rows);
  kernels::transpose(u, ut);
  return ut;
}

void FixedFaninLayer::scores_impl(ConstMatrix h, int64_t lo, Matrix out) const {
  if (gpu_) {
    gpu_->scores(h, lo, out);
    return;
  }
  std::vector<float> buf;
  ConstMatrix ut = eval_input_t(h, buf);
  kernels::fixed_fanin_forward(idx_.data() + lo * fan_in_, w_.data() + lo * fan_in_,
                               b_.data() + lo, out.cols, fan_in_, ut, out);
}

TopK FixedFaninLayer::topk_impl(ConstMatrix h, int k) const {
  if (gpu_) return gpu_->topk(h, k);
  std::vector<float> buf;
  ConstMatrix ut = eval_input_t(h, buf);
  return stream_topk(h.rows, k, chunk_, [&](int64_t lo, Matrix out) {
    kernels::fixed_fanin_forward(idx_.data() + lo * fan_in_, w_.data() + lo * fan_in_,
                                 b_.data() + lo, out.cols, fan_in_, ut, out);
  });
}

bool FixedFaninLayer::rewire_due(int64_t step, int64_t total_steps) const {
  return xmc::rewire_due(rewire_cfg_, step, total_steps);
}

void FixedFaninLayer::on_step_impl(const TrainerView& t) {
  const int64_t total = t.total_steps > 0 ? t.total_steps : total_steps_;
  if (!rewire_due(t.step, total)) return;
  const RewireStats s = rewire(t.step);
  // GPU: idx, w and the moments go to the host and back.
  const int64_t nf = num_labels() * fan_in_;
  const double moved_mib =
      gpu_ ? 2.0 * static_cast<double>(nf * 4 * (2 + optimizer_state_arrays(optim_))) / 1048576.0
           : 0.0;
  spdlog::info("fixed_fanin: rewired {} of {} connections ({:.1f}%) at step {} in {:.3f}s{}",
               s.pruned, nf, 100.0 * static_cast<double>(s.pruned) / static_cast<double>(nf),
               s.step, s.seconds,
               gpu_ ? fmt::format(" (host round trip, {:.1f} MiB moved)", moved_mib) : "");
}

void FixedFaninLayer::on_epoch_impl(const TrainerView& t) {
  const auto& tm = timings_;
  auto frac = [](int64_t a, int64_t b) { return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0.0; };
  if (!time_ops_) {
    spdlog::info(
        "fixed_fanin epoch {}: rewiring {:.2f}s; zero output gradients {:.1f}%, labels skipped "
        "whole {:.1f}% (per-op GPU times: model.output.gpu_timing: true)",
        t.epoch + 1, tm.rewire, 100.0 * frac(tm.zero_grads, tm.grads),
        100.0 * frac(tm.skipped_labels, tm.label_steps));
    timings_ = {};
    return;
  }
  spdlog::info(
      "fixed_fanin epoch {}: forward {:.2f}s, loss {:.2f}s, backward {:.2f}s (input {:.2f}s, "
      "weight {:.2f}s), update {:.2f}s, intermediate backward {:.2f}s, rewiring {:.2f}s; "
      "zero output gradients {:.1f}%, labels skipped whole {:.1f}%",
      t.epoch + 1, tm.forward, tm.loss, tm.backward_input + tm.backward_weight,
      tm.backward_input, tm.backward_weight, tm.update, tm.intermediate_backward, tm.rewire,
      100.0 * frac(tm.zero_grads, tm.grads), 100.0 * frac(tm.skipped_labels, tm.label_steps));
  timings_ = {};
}

RewireStats FixedFaninLayer::rewire(int64_t step) {
  Stopwatch sw;
  const int64_t n = num_labels(), f = fan_in_, nf = n * f;
  RewireStats out;
  out.step = step;
  const int64_t k = rewire_count(rewire_cfg_, nf);
  if (k <= 0 || f >= m_) {  // nothing to prune, or every input already used
    last_rewire_ = out;
    return out;
  }
  // GPU: a host round trip of idx, w and their moments (4·(2 + states)·L·F bytes each
  // way) every `interval` steps, so that both devices rewire with this very code.
  if (gpu_) {
    XMC_CHECK(!staged_, "fixed_fanin: rewiring while the state is staged for a checkpoint");
    alloc_host_params(/*all=*/false);
    transfer_host_params(/*to_device=*/false, /*all=*/false);
  }
  // The k smallest |w| over all L·F slots; each label regrows its own.
  const std::vector<char> prune = lowest_slots(w_.data(), nf, k, /*abs=*/true);
  const uint64_t base = Rng::stream(seed_ ^ kRewireStream, static_cast<uint64_t>(step)).next();
  float* w = w_.data();
  float* s1 = data_or_null(w_s1_);
  float* s2 = data_or_null(w_s2_);
  out.pruned = regrow_sets(idx_.data(), n, f, m_, prune, base, [&](int64_t l, int64_t j) {
    w[l * f + j] = 0.0f;
    if (s1) s1[l * f + j] = 0.0f;
    if (s2) s2[l * f + j] = 0.0f;
  });
  if (gpu_) {
    transfer_host_params(/*to_device=*/true, /*all=*/false);
    free_host_params();
  }
  out.seconds = sw.seconds();
  timings_.rewire += out.seconds;
  last_rewire_ = out;
  return out;
}

std::vector<TensorRef> FixedFaninLayer::state_impl() {
  XMC_CHECK(!gpu_ || staged_, "state() of a device fixed_fanin layer before sync_state(to_host)");
  const int64_t n = num_labels(), f = fan_in_, d = input_dim();
  std::vector<TensorRef> out = {{"output/indices", {n, f}, idx_.data()}};
  append_weight_bias_refs(out, n, f, w_.data(), b_.data(), data_or_null(w_s1_),
                          data_or_null(b_s1_), data_or_null(w_s2_), data_or_null(b_s2_));
  if (inter_) {
    out.push_back({"output/intermediate/weight", {m_, d}, p_.data()});
    out.push_back({"output/intermediate/bias", {m_}, p_.data() + m_ * d});
    if (p_s1_.size())
      out.push_back({"output/intermediate/opt1", {static_cast<int64_t>(p_s1_.size())}, p_s1_.data()});
    if (p_s2_.size())
      out.push_back({"output/intermediate/opt2", {static_cast<int64_t>(p_s2_.size())}, p_s2_.data()});
  }
  return out;
}

void FixedFaninLayer::sync_state_impl(StateSync s) {
  if (!gpu_) return;
  switch (s) {
    case StateSync::to_host:
      if (!staged_) alloc_host_params(/*all=*/true);
      transfer_host_params(/*to_device=*/false, /*all=*/true);
      staged_ = true;
      return;
    case StateSync::to_device:
      XMC_CHECK(staged_, "sync_state(to_device) without host copies");
      transfer_host_params(/*to_device=*/true, /*all=*/true);
      break;
    case StateSync::release:
      break;
  }
  free_host_params();
  staged_ = false;
}

int64_t FixedFaninLayer::analytic_bytes_impl() const {
  if (gpu_) return gpu_->analytic_bytes();
  const int64_t n = num_labels(), f = fan_in_, d = input_dim(), bsz = max_batch_;
  const int64_t states = optimizer_state_arrays(optim_);
  const bool inter = inter_;
  const int64_t pn = inter ? m_ * d + m_ : 0;
  int64_t floats = (n * f + n) * (1 + states) + pn * (2 + states);  // params, state, dP
  if (dropout_ > 0.0) floats += 2 * bsz * d;
  if (inter) floats += 2 * bsz * m_;
  floats += m_ * bsz + bsz * chunk_ + chunk_ * f + chunk_;
  return 4 * (floats + n * f);  // + indices (uint32)
}

}  // namespace xmc
