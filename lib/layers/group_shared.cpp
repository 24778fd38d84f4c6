#include "layers/group_shared.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "layers/device_topk.h"
#include "core/gpu.h"
#include "core/resources.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "kernels/dense_ops.h"
#include "kernels/dense_ops_cuda.h"
#include "kernels/encoder_ops_cuda.h"  // bias_activation, activation_grad, multiply_mask
#include "kernels/fixed_fanin_ops.h"   // transpose
#include "kernels/group_shared_ops.h"
#include "layers/param_refs.h"
#include "layers/weight_init.h"
#include "model/dropout.h"
#include "model/optimizer_state.h"

namespace xmc {

namespace {

// Stream ids of the layer's random draws.
constexpr uint64_t kGsIndexStream = 0x6a5e'0001ULL;
constexpr uint64_t kGsWeightStream = 0x6a5e'0002ULL;
constexpr uint64_t kGsShuffleStream = 0x6a5e'0003ULL;
constexpr uint64_t kGsDropoutStream = 0x6a5e'0004ULL;
constexpr uint64_t kGsRewireStream = 0x6a5e'0005ULL;
constexpr uint64_t kGsHeadStream = 0x6a5e'0006ULL;
constexpr uint64_t kGsProjStream = 0x6a5e'0007ULL;
constexpr uint64_t kGsSemanticStream = 0x6a5e'0008ULL;

HostBuffer<float> gs_buffer(MemoryLedger& ledger, MemTag tag, int64_t n) {
  if (n <= 0) return {};
  return HostBuffer<float>(ledger, tag, static_cast<size_t>(n));
}

// m = 0 (a DEVICE view) on `stream`.
void gs_zero_device(Matrix m, gpu::Stream stream) {
  if (m.empty()) return;
  if (m.ld == m.cols) {
    gpu::memset_device(m.data, 0, static_cast<size_t>(m.rows * m.cols) * sizeof(float), stream);
    return;
  }
  for (int64_t r = 0; r < m.rows; ++r)
    gpu::memset_device(m.row(r), 0, static_cast<size_t>(m.cols) * sizeof(float), stream);
}

// F distinct values of [0, m) (Floyd's algorithm), sorted; `mark` [m] is all zero on entry
// and on return.
void gs_draw_set(Rng& rng, int64_t m, int64_t f, uint32_t* out, std::vector<char>& mark) {
  for (int64_t j = m - f, t = 0; j < m; ++j, ++t) {
    auto c = static_cast<uint32_t>(rng.below(static_cast<uint64_t>(j) + 1));
    if (mark[c]) c = static_cast<uint32_t>(j);
    mark[c] = 1;
    out[t] = c;
  }
  for (int64_t t = 0; t < f; ++t) mark[out[t]] = 0;
  std::sort(out, out + f);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// GroupSharedProjection

GroupSharedProjection::GroupSharedProjection(Context& ctx, int64_t in, int64_t out, bool relu,
                                             const OptimizerConfig& optim, int64_t max_batch,
                                             uint64_t seed)
    : in_(in), out_(out), max_batch_(max_batch), relu_(relu), optim_(optim) {
  if (out_ <= 0) return;
  MemoryLedger& ledger = ctx.ledger();
  const int64_t pn = out_ * in_ + out_;
  // The initial P (c = 0) on the host, on both devices.
  std::vector<float> p0(static_cast<size_t>(pn), 0.0f);
  init_uniform_rows(p0.data(), out_, in_, seed);
  if (ctx.on_gpu()) {
    cuda_ = &ctx.cuda();
    const auto s = cuda_->stream();
    const auto n = static_cast<size_t>(pn);
    const auto ub = static_cast<size_t>(max_batch_ * out_);
    p_dev_ = gpu::DeviceBuffer<float>(ledger, MemTag::weights, n);
    p_dev_.upload(p0.data(), n, s);
    const int states = optimizer_state_arrays(optim_);
    if (states >= 1) {
      s1_dev_ = gpu::DeviceBuffer<float>(ledger, MemTag::optimizer, n);
      s1_dev_.zero(s);
    }
    if (states >= 2) {
      s2_dev_ = gpu::DeviceBuffer<float>(ledger, MemTag::optimizer, n);
      s2_dev_.zero(s);
    }
    dp_dev_ = gpu::DeviceBuffer<float>(ledger, MemTag::workspace, n);
    u_dev_ = gpu::DeviceBuffer<float>(ledger, MemTag::workspace, ub);
    du_dev_ = gpu::DeviceBuffer<float>(ledger, MemTag::workspace, ub);
    if (relu_) dz_dev_ = gpu::DeviceBuffer<float>(ledger, MemTag::workspace, ub);
    cuda_->synchronize();  // p0 is freed on return
    return;
  }
  p_ = gs_buffer(ledger, MemTag::weights, pn);
  std::copy(p0.begin(), p0.end(), p_.data());
  s1_ = optimizer_state_buffer(ledger, optim_, 1, static_cast<size_t>(pn));
  s2_ = optimizer_state_buffer(ledger, optim_, 2, static_cast<size_t>(pn));
  dp_ = gs_buffer(ledger, MemTag::workspace, pn);
  u_ = gs_buffer(ledger, MemTag::workspace, max_batch_ * out_);
  du_ = gs_buffer(ledger, MemTag::workspace, max_batch_ * out_);
}

void GroupSharedProjection::apply(ConstMatrix x, Matrix u) const {
  if (cuda_) {
    const float* p = p_dev_.data();
    gpu::gemm_nt(*cuda_, x, ConstMatrix(p, out_, in_), u);
    gpu::bias_activation(*cuda_, u, p + out_ * in_, relu_);
    return;
  }
  const float* c = p_.data() + out_ * in_;
  for (int64_t r = 0; r < x.rows; ++r) std::copy(c, c + out_, u.row(r));
  kernels::gemm_nt(x, ConstMatrix(p_.data(), out_, in_), u, 1.0f, 1.0f);
  if (relu_)
    for (int64_t r = 0; r < u.rows; ++r)
      for (int64_t j = 0; j < out_; ++j) u(r, j) = std::max(u(r, j), 0.0f);
}

Matrix GroupSharedProjection::forward(ConstMatrix x) {
  XMC_CHECK(x.rows <= max_batch_, "projection: batch of {} rows exceeds {}", x.rows, max_batch_);
  Matrix u(cuda_ ? u_dev_.data() : u_.data(), x.rows, out_);
  apply(x, u);
  return u;
}

void GroupSharedProjection::backward_update(ConstMatrix x, Matrix dh, float beta,
                                            const LrState& lr) {
  const int64_t rows = x.rows;
  const int64_t pn = out_ * in_ + out_;
  if (cuda_) {
    // The same sequence on the device; the ReLU's gradient goes to its own workspace.
    ConstMatrix du(du_dev_.data(), rows, out_);
    if (relu_) {
      Matrix dz(dz_dev_.data(), rows, out_);
      gpu::activation_grad(*cuda_, true, ConstMatrix(u_dev_.data(), rows, out_), du, dz);
      du = dz;
    }
    float* p = p_dev_.data();
    float* dp = dp_dev_.data();
    gpu::gemm_nn(*cuda_, du, ConstMatrix(p, out_, in_), dh, 1.0f, beta);
    gpu::gemm_tn(*cuda_, du, x, Matrix(dp, out_, in_));
    gpu::column_sums(*cuda_, du, dp + out_ * in_);
    gpu::optimizer_update(*cuda_, optim_, lr.lr, lr.step, p, dp,
                          s1_dev_.size() ? s1_dev_.data() : nullptr,
                          s2_dev_.size() ? s2_dev_.data() : nullptr, pn);
    return;
  }
  Matrix du(du_.data(), rows, out_);
  if (relu_) {
    const float* u = u_.data();
    for (int64_t i = 0; i < rows * out_; ++i)
      if (u[i] <= 0.0f) du.data[i] = 0.0f;
  }
  ConstMatrix p(p_.data(), out_, in_);
  kernels::gemm_nn(du, p, dh, 1.0f, beta);
  kernels::gemm_tn(du, x, Matrix(dp_.data(), out_, in_));
  kernels::column_sums(du, dp_.data() + out_ * in_);
  optimizer_update(optim_, lr.lr, lr.step, p_.data(), dp_.data(), data_or_null(s1_),
                   data_or_null(s2_), pn);
}

void GroupSharedProjection::append_state(std::vector<TensorRef>& out, const std::string& prefix) {
  if (out_ <= 0) return;
  float* p = p_.data();
  float* s1 = data_or_null(s1_);
  float* s2 = data_or_null(s2_);
  if (cuda_) {
    XMC_CHECK(staging_.staged(), "state() of a device projection before sync_state(to_host)");
    BufferCopies& c = staging_.state();  // parameters, their optimizer states
    p = c[0].data();
    s1 = c[1].empty() ? nullptr : c[1].data();
    s2 = c[2].empty() ? nullptr : c[2].data();
  }
  const int64_t pn = out_ * in_ + out_;
  out.push_back({prefix + "/weight", {out_, in_}, p});
  out.push_back({prefix + "/bias", {out_}, p + out_ * in_});
  if (s1) out.push_back({prefix + "/opt1", {pn}, s1});
  if (s2) out.push_back({prefix + "/opt2", {pn}, s2});
}

void GroupSharedProjection::sync_state(StateSync s) {
  if (!cuda_ || out_ <= 0) return;
  staging_.sync(
      s, [&] { return download_buffers(*cuda_, {&p_dev_, &s1_dev_, &s2_dev_}); },
      [&](const BufferCopies& c) { upload_buffers(*cuda_, {&p_dev_, &s1_dev_, &s2_dev_}, c); });
}

int64_t GroupSharedProjection::bytes() const {
  if (out_ <= 0) return 0;
  const int64_t pn = out_ * in_ + out_;
  const int64_t ub = max_batch_ * out_;
  return 4 * (pn * (2 + optimizer_state_arrays(optim_)) + (cuda_ && relu_ ? 3 : 2) * ub);
}

// ---------------------------------------------------------------------------------------
// GroupSharedLayer

GroupSharedLayer::GroupSharedLayer(const LayerInit& init, const GroupSharedConfig& cfg)
    : OutputLayer(init.input_dim, init.num_labels, 0, init.num_labels),
      ledger_(&init.ctx->ledger()),
      group_(cfg.group_size),
      fan_in_(cfg.fan_in),
      head_(head_label_count(init.num_labels, cfg.head_fraction, cfg.group_size)),
      groups_((init.num_labels - head_ + cfg.group_size - 1) / cfg.group_size),
      m_(cfg.tail_projection > 0 ? cfg.tail_projection : init.input_dim),
      max_batch_(init.batch_size),
      chunk_(0),
      dropout_(cfg.dropout),
      loss_(parse_loss(cfg.loss)),
      grouping_(parse_grouping(cfg.grouping)),
      beta_(cfg.beta),
      kmeans_iters_(static_cast<int>(cfg.kmeans_iters)),
      rewire_cfg_(cfg.rewire),
      optim_(init.optim),
      seed_(init.seed),
      total_steps_(init.total_steps) {
  const int64_t d = init.input_dim, n = init.num_labels, g = group_, f = fan_in_;
  const int64_t t = n - head_;
  XMC_CHECK(d > 0 && n > 0 && max_batch_ > 0 && g > 0 && f > 0,
            "group_shared: d={} L={} B={} G={} F={}", d, n, max_batch_, g, f);
  if (loss_ != LossType::squared_hinge && loss_ != LossType::bce)
    throw_input("group_shared: loss '{}' is not supported (squared_hinge, bce)", cfg.loss);
  if (t > 0 && f > m_)
    throw_input("group_shared: fan_in {} exceeds the {} inputs of the tail ({})", f, m_,
                cfg.tail_projection > 0 ? "model.output.tail_projection" : "encoder output width");
  if (!init.label_freq.empty() && static_cast<int64_t>(init.label_freq.size()) != n)
    throw_error("group_shared: {} label frequencies for {} labels", init.label_freq.size(), n);
  if (t > 0) {
    const int64_t per_chunk = std::max(g, cfg.chunk_size / g * g);
    chunk_ = std::min(per_chunk, (t + g - 1) / g * g);
  }
  MemoryLedger& ledger = *ledger_;

  // Label order: frequency (a missing frequency list counts every label 0), then the tail
  // arranged by the grouping; semantic starts from the frequency order (see the header).
  order_ = HostBuffer<uint32_t>(ledger, MemTag::indices, static_cast<size_t>(n));
  pos_ = HostBuffer<uint32_t>(ledger, MemTag::indices, static_cast<size_t>(n));
  grouped_ = HostBuffer<uint32_t>(ledger, MemTag::indices, 1);
  {
    std::vector<int64_t> freq = init.label_freq;
    freq.resize(static_cast<size_t>(n), 0);
    auto order = frequency_order(freq);
    if (grouping_ == GroupingType::random) {
      Rng rng = Rng::stream(seed_, kGsShuffleStream);
      for (int64_t i = n - 1; i > head_; --i) {
        const auto j = head_ + static_cast<int64_t>(rng.below(static_cast<uint64_t>(i - head_ + 1)));
        std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
      }
    }
    std::copy(order.begin(), order.end(), order_.data());
    const auto pos = inverse_order(order);
    std::copy(pos.begin(), pos.end(), pos_.data());
  }

  // Head: a dense block over positions [0, H) on its (projected) input.
  const gpu::DenseCudaOptions opts =
      dense_precision_options(*init.ctx, cfg.precision, cfg.stochastic_rounding);
  if (opts.precision == gpu::WeightPrecision::bf16 && t > 0 && f > 256)
    throw_input(
        "group_shared: fan_in {} with precision bf16: the bf16 kernels stage the whole "
        "[F×64] tile and take F <= 256 (use precision fp32)",
        f);
  if (init.ctx->on_gpu()) {
    gpu_ = &init.ctx->cuda();
    set_device_views(true);
  }
  head_proj_ = GroupSharedProjection(*init.ctx, d, head_ > 0 ? cfg.head_dim : 0, false, optim_,
                                     max_batch_, Rng::stream(seed_, kGsProjStream).next());
  if (head_ > 0)
    head_block_.emplace(*init.ctx, cfg.head_dim > 0 ? cfg.head_dim : d, 0, head_, max_batch_,
                        cfg.chunk_size, loss_, optim_, Rng::stream(seed_, kGsHeadStream).next(),
                        opts);

  // Tail: shared index sets, per-label weights and biases, optional ReLU projection.
  const int64_t tf = t * f;
  tail_proj_ = GroupSharedProjection(*init.ctx, d, t > 0 ? cfg.tail_projection : 0, true, optim_,
                                     max_batch_, Rng::stream(seed_, kGsProjStream + 1).next());
  if (t > 0 && gpu_) {
    // The CPU's initial index sets and weights, drawn on the host and uploaded.
    tail_gpu_ = std::make_unique<GroupSharedTailCuda>(*gpu_, t, g, f, m_, max_batch_, chunk_, loss_,
                                                      optim_, opts, seed_);
    GroupSharedTailCuda::HostState st;
    st.idx.resize(static_cast<size_t>(groups_ * f));
    st.w.resize(static_cast<size_t>(tf));
    draw_tail_indices(st.idx.data());
    init_tail_weights(st.w.data(), nullptr, nullptr);
    tail_gpu_->upload(st);
  } else if (t > 0) {
    idx_ = HostBuffer<uint32_t>(ledger, MemTag::indices, static_cast<size_t>(groups_ * f));
    w_ = gs_buffer(ledger, MemTag::weights, tf);
    b_ = gs_buffer(ledger, MemTag::weights, t);
    w_s1_ = optimizer_state_buffer(ledger, optim_, 1, static_cast<size_t>(tf));
    b_s1_ = optimizer_state_buffer(ledger, optim_, 1, static_cast<size_t>(t));
    w_s2_ = optimizer_state_buffer(ledger, optim_, 2, static_cast<size_t>(tf));
    b_s2_ = optimizer_state_buffer(ledger, optim_, 2, static_cast<size_t>(t));
    ut_ = gs_buffer(ledger, MemTag::workspace, m_ * max_batch_);
    z_ = gs_buffer(ledger, MemTag::workspace, max_batch_ * chunk_);
    dw_ = gs_buffer(ledger, MemTag::workspace, chunk_ * f);
    db_ = gs_buffer(ledger, MemTag::workspace, chunk_);
    draw_tail_indices(idx_.data());
    init_tail_weights(w_.data(), data_or_null(w_s1_), data_or_null(w_s2_));
  }
  if (dropout_ > 0.0) {
    // The mask is drawn on the host on both devices (the same draws); the GPU copies it.
    mask_ = gs_buffer(ledger, MemTag::workspace, max_batch_ * d);
    if (gpu_) {
      xd_dev_ =
          gpu::DeviceBuffer<float>(ledger, MemTag::workspace, static_cast<size_t>(max_batch_ * d));
      mask_dev_ =
          gpu::DeviceBuffer<float>(ledger, MemTag::workspace, static_cast<size_t>(max_batch_ * d));
    } else {
      xd_ = gs_buffer(ledger, MemTag::workspace, max_batch_ * d);
    }
  }

  spdlog::info(
      "group_shared: L={}: dense head of {} labels{}, tail of {} labels in {} groups of G={} "
      "sharing F={} of {} inputs{} ({} grouping); tail weights {} ({:.1f}% of a dense "
      "{}×{} layer), index entries {} ({:.1f}% of fixed_fanin's)",
      n, head_, cfg.head_dim > 0 && head_ > 0 ? fmt::format(" on a {}→{} projection", d, cfg.head_dim) : std::string(),
      t, groups_, g, f, m_,
      tail_proj_.active() ? fmt::format(" after a {}→{} ReLU projection", d, m_) : std::string(),
      cfg.grouping, tf, 100.0 * static_cast<double>(tf) / static_cast<double>(std::max<int64_t>(1, t * d)), t, d,
      groups_ * f, 100.0 * static_cast<double>(groups_ * f) / static_cast<double>(std::max<int64_t>(1, tf)));
}

void GroupSharedLayer::draw_tail_indices(uint32_t* idx) const {
  // One random index set per group, each from its own stream (thread-count independent).
  const int64_t f = fan_in_;
  const uint64_t idx_seed = Rng::stream(seed_, kGsIndexStream).next();
#pragma omp parallel
  {
    std::vector<char> mark(static_cast<size_t>(m_), 0);
#pragma omp for schedule(static)
    for (int64_t k = 0; k < groups_; ++k) {
      Rng rng = Rng::stream(idx_seed, static_cast<uint64_t>(k));
      gs_draw_set(rng, m_, f, idx + k * f, mark);
    }
  }
}

void GroupSharedLayer::init_tail_weights(float* w, float* s1, float* s2) const {
  const int64_t t = tail_labels(), f = fan_in_;
  if (t == 0) return;
  init_uniform_rows(w, t, f, Rng::stream(seed_, kGsWeightStream).next());
  for (float* s : {s1, s2})
    if (s) std::fill(s, s + t * f, 0.0f);
}

void GroupSharedLayer::build_targets(const Batch& batch, int64_t rows) {
  // The batch's positives at internal positions (sorted within a row, as the losses want).
  targets_.rows = rows;
  targets_.cols = num_labels();
  targets_.indptr.assign(1, 0);
  targets_.indices.clear();
  for (int64_t i = 0; i < rows; ++i) {
    const size_t start = targets_.indices.size();
    for (int64_t e = batch.labels.indptr[i]; e < batch.labels.indptr[i + 1]; ++e)
      targets_.indices.push_back(pos_[batch.labels.indices[static_cast<size_t>(e)]]);
    std::sort(targets_.indices.begin() + static_cast<std::ptrdiff_t>(start),
              targets_.indices.end());
    targets_.indptr.push_back(static_cast<int64_t>(targets_.indices.size()));
  }
}

StepStats GroupSharedLayer::train_step_impl(const Batch& batch, ConstMatrix h, Matrix dh,
                                            const LrState& lr) {
  const int64_t bsz = h.rows, d = input_dim(), t = tail_labels(), g = group_, f = fan_in_;
  XMC_CHECK(bsz <= max_batch_, "batch of {} rows exceeds the workspace for {}", bsz, max_batch_);
  StepStats stats;
  Stopwatch sw;
  auto mark = [&](double GroupSharedTimings::*field) {
    timings_.*field += sw.seconds();
    sw.reset();
  };

  build_targets(batch, bsz);

  // x = dropout(h) [B×d]. The mask is drawn on the host from the same stream on both
  // devices (dropout_mask makes dropout_dense's draws); the GPU copies it, [B×d] floats.
  ConstMatrix x = h;
  if (dropout_ > 0.0) {
    Rng rng = Rng::stream(seed_ ^ kGsDropoutStream, static_cast<uint64_t>(lr.step));
    if (gpu_) {
      dropout_mask(mask_.data(), bsz * d, dropout_, rng);
      mask_dev_.upload(mask_.data(), static_cast<size_t>(bsz * d), gpu_->stream());
      Matrix xd(xd_dev_.data(), bsz, d);
      gpu::multiply_mask(*gpu_, h, mask_dev_.data(), xd);
      x = xd;
    } else {
      Matrix xd(xd_.data(), bsz, d);
      for (int64_t r = 0; r < bsz; ++r) std::copy(h.row(r), h.row(r) + d, xd.row(r));
      dropout_dense(xd, mask_.data(), dropout_, rng);
      x = xd;
    }
  }
  mark(&GroupSharedTimings::forward);

  // Head: overwrites dh with its part of dL/dx (or zeroes dh without a head).
  double loss = 0.0;
  if (head_block_) {
    StepStats hs;
    if (head_proj_.active()) {
      ConstMatrix hin = head_proj_.forward(x);
      hs = head_block_->train_step(targets_, hin, head_proj_.grad_workspace(bsz), lr);
      head_proj_.backward_update(x, dh, 0.0f, lr);
    } else {
      hs = head_block_->train_step(targets_, x, dh, lr);
    }
    loss += hs.loss * static_cast<double>(bsz);
    stats.zero_grads += hs.zero_grads;
    stats.grads += hs.grads;
  } else if (gpu_) {
    gs_zero_device(dh, gpu_->stream());
  } else {
    for (int64_t r = 0; r < bsz; ++r) std::fill(dh.row(r), dh.row(r) + d, 0.0f);
  }
  mark(&GroupSharedTimings::head);

  if (t > 0 && gpu_) {
    // The same sequence on the device; the chunk loop is GroupSharedTailCuda::train_step.
    ConstMatrix u = tail_proj_.active() ? ConstMatrix(tail_proj_.forward(x)) : x;
    Matrix du = dh;
    if (tail_proj_.active()) {
      du = tail_proj_.grad_workspace(bsz);
      gs_zero_device(du, gpu_->stream());
    }
    tail_gpu_->set_input(u);
    const StepStats ts = tail_gpu_->train_step(targets_, head_, du, lr);
    loss += ts.loss * static_cast<double>(bsz);
    stats.zero_grads += ts.zero_grads;
    stats.grads += ts.grads;
    if (tail_proj_.active()) tail_proj_.backward_update(x, dh, 1.0f, lr);
    mark(&GroupSharedTimings::tail_gpu);
  } else if (t > 0) {
    ConstMatrix u = tail_proj_.active() ? ConstMatrix(tail_proj_.forward(x)) : x;
    Matrix ut(ut_.data(), m_, bsz);
    kernels::transpose(u, ut);
    // du = dL/du [B×m]: the projection's workspace (zeroed), or dh itself (accumulating).
    Matrix du = dh;
    if (tail_proj_.active()) {
      du = tail_proj_.grad_workspace(bsz);
      std::fill(du.data, du.data + bsz * m_, 0.0f);
    }
    mark(&GroupSharedTimings::forward);
    int64_t tail_zero = 0;
    for (int64_t c0 = 0; c0 < t; c0 += chunk_) {
      const int64_t c = std::min(chunk_, t - c0);
      const uint32_t* idx = idx_.data() + (c0 / g) * f;
      const float* w = w_.data() + c0 * f;
      Matrix z(z_.data(), bsz, c);
      kernels::group_shared_forward(idx, w, b_.data() + c0, c, g, f, ut, z);
      mark(&GroupSharedTimings::forward);
      loss += elementwise_loss_grad(loss_, z, targets_, head_ + c0, bsz, &tail_zero);
      stats.grads += bsz * c;
      mark(&GroupSharedTimings::loss);
      kernels::group_shared_input_grad(idx, w, c, g, f, z, du);  // weights before the step
      mark(&GroupSharedTimings::backward_input);
      kernels::group_shared_weight_grad(idx, c, g, f, z, ut, dw_.data(), db_.data());
      mark(&GroupSharedTimings::backward_weight);
      update_tail(c0, c, lr);
      mark(&GroupSharedTimings::update);
    }
    stats.zero_grads += tail_zero;
    if (tail_proj_.active()) tail_proj_.backward_update(x, dh, 1.0f, lr);
    mark(&GroupSharedTimings::projection_backward);
  }
  if (dropout_ > 0.0 && gpu_) {
    gpu::multiply_mask(*gpu_, dh, mask_dev_.data(), dh);
  } else if (dropout_ > 0.0) {
    const float* mk = mask_.data();
    for (int64_t r = 0; r < bsz; ++r) {
      float* row = dh.row(r);
      for (int64_t j = 0; j < d; ++j) row[j] *= mk[r * d + j];
    }
  }
  timings_.zero_grads += stats.zero_grads;
  timings_.grads += stats.grads;
  stats.loss = loss / static_cast<double>(bsz);
  return stats;
}

void GroupSharedLayer::update_tail(int64_t r0, int64_t n, const LrState& lr) {
  const int64_t wo = r0 * fan_in_;
  optimizer_update(optim_, lr.lr, lr.step, w_.data() + wo, dw_.data(), data_or_null(w_s1_, wo),
                   data_or_null(w_s2_, wo), n * fan_in_);
  OptimizerConfig no_decay = optim_;  // biases get no weight decay
  no_decay.weight_decay = 0.0;
  optimizer_update(no_decay, lr.lr, lr.step, b_.data() + r0, db_.data(), data_or_null(b_s1_, r0),
                   data_or_null(b_s2_, r0), n);
}

GroupSharedLayer::EvalInputs GroupSharedLayer::eval_inputs(ConstMatrix h) const {
  EvalInputs in;
  const int64_t rows = h.rows;
  // A workspace of rows×cols floats: a host vector, or a device temporary on the GPU.
  auto buffer = [&](std::vector<float>& host, gpu::DeviceBuffer<float>& dev, int64_t cols) {
    const auto n = static_cast<size_t>(rows * cols);
    if (gpu_) {
      dev = gpu::DeviceBuffer<float>(*ledger_, MemTag::workspace, std::max<size_t>(n, 1));
      return Matrix(dev.data(), rows, cols);
    }
    host.resize(n);
    return Matrix(host.data(), rows, cols);
  };
  in.head_in = h;
  if (head_proj_.active()) {
    Matrix hp = buffer(in.head_buf, in.head_dev, head_proj_.out_dim());
    head_proj_.apply(h, hp);
    in.head_in = hp;
  }
  if (tail_labels() > 0) {
    ConstMatrix u = h;
    if (tail_proj_.active()) {
      Matrix um = buffer(in.tail_buf, in.tail_dev, m_);
      tail_proj_.apply(h, um);
      u = um;
    }
    if (gpu_) {
      XMC_CHECK(rows <= max_batch_,
                "group_shared: {} rows of scores on the GPU, at most {} at once", rows, max_batch_);
      tail_gpu_->set_input(u);  // the tail keeps ut in its workspace
    } else {
      in.ut_buf.resize(static_cast<size_t>(m_ * rows));
      Matrix ut(in.ut_buf.data(), m_, rows);
      kernels::transpose(u, ut);
      in.ut = ut;
    }
  }
  return in;
}

void GroupSharedLayer::internal_scores(const EvalInputs& in, int64_t lo, Matrix out) const {
  const int64_t hi = lo + out.cols;
  if (lo < head_) {
    const int64_t hn = std::min(hi, head_) - lo;
    head_block_->scores(in.head_in, lo, Matrix(out.data, out.rows, hn, out.ld));
  }
  const int64_t s = std::max(lo, head_);
  if (s < hi) {
    const int64_t r0 = s - head_;
    XMC_CHECK(r0 % group_ == 0, "group_shared scores: tail position {} is not on a group boundary", r0);
    const Matrix tail_out(out.data + (s - lo), out.rows, hi - s, out.ld);
    if (gpu_) {
      tail_gpu_->scores(r0, tail_out);
    } else {
      kernels::group_shared_forward(idx_.data() + (r0 / group_) * fan_in_, w_.data() + r0 * fan_in_,
                                    b_.data() + r0, hi - s, group_, fan_in_, in.ut, tail_out);
    }
  }
}

void GroupSharedLayer::scores_impl(ConstMatrix h, int64_t lo, Matrix out) const {
  // Internal scores of all labels, then out's columns in original label order.
  XMC_CHECK(lo == 0 && out.cols == num_labels(), "group_shared scores: labels [{}, {})", lo,
            lo + out.cols);
  if (gpu_) {
    scores_gpu(h, out);
    return;
  }
  const EvalInputs in = eval_inputs(h);
  std::vector<float> buf(static_cast<size_t>(h.rows * out.cols));
  Matrix all(buf.data(), h.rows, out.cols);
  internal_scores(in, 0, all);
  for (int64_t r = 0; r < h.rows; ++r)
    for (int64_t i = 0; i < out.cols; ++i) out(r, order_[static_cast<size_t>(i)]) = all(r, i);
}

void GroupSharedLayer::scores_gpu(ConstMatrix h, Matrix out) const {
  // Tests and small L only: the internal scores go to the host, are put in original label
  // order there, and come back (2·B·L floats moved; topk_gpu does not do this).
  const int64_t n = num_labels();
  const auto s = gpu_->stream();
  std::vector<float> internal(static_cast<size_t>(h.rows * n)), orig(internal.size());
  for (int64_t r0 = 0; r0 < h.rows; r0 += max_batch_) {
    const int64_t rows = std::min(max_batch_, h.rows - r0);
    const EvalInputs in = eval_inputs(h.rows_range(r0, rows));
    gpu::DeviceBuffer<float> z(*ledger_, MemTag::workspace, static_cast<size_t>(rows * n));
    internal_scores(in, 0, Matrix(z.data(), rows, n));
    z.download(internal.data() + r0 * n, static_cast<size_t>(rows * n), s);
    gpu_->synchronize();  // the temporaries are freed at the end of the iteration
  }
  for (int64_t r = 0; r < h.rows; ++r)
    for (int64_t i = 0; i < n; ++i)
      orig[static_cast<size_t>(r * n + order_[static_cast<size_t>(i)])] =
          internal[static_cast<size_t>(r * n + i)];
  for (int64_t r = 0; r < h.rows; ++r)
    gpu::copy_to_device(out.row(r), orig.data() + r * n, static_cast<size_t>(n) * sizeof(float), s);
  gpu_->synchronize();
}

void GroupSharedLayer::to_original_ids(TopK& top) const {
  const int k = top.k;
  std::vector<std::pair<float, uint32_t>> row(static_cast<size_t>(k));
  for (int64_t r = 0; r < top.rows; ++r) {
    uint32_t* lab = top.row_labels(r);
    float* sc = top.row_scores(r);
    for (int j = 0; j < k; ++j) {
      const uint32_t l = lab[j] == TopK::kNoLabel ? lab[j] : order_[lab[j]];
      row[static_cast<size_t>(j)] = {sc[j], l};
    }
    std::stable_sort(row.begin(), row.end(), [](const auto& a, const auto& b) {
      return ranks_before(a.first, a.second, b.first, b.second);
    });
    for (int j = 0; j < k; ++j) {
      sc[j] = row[static_cast<size_t>(j)].first;
      lab[j] = row[static_cast<size_t>(j)].second;
    }
  }
}

TopK GroupSharedLayer::topk_impl(ConstMatrix h, int k) const {
  if (gpu_) return topk_gpu(h, k);
  const EvalInputs in = eval_inputs(h);
  // Chunks are multiples of G and H is one too, so every tail chunk starts a group.
  const int64_t chunk = chunk_ > 0 ? chunk_ : num_labels();
  TopK top =
      stream_topk(h.rows, k, chunk, [&](int64_t lo, Matrix out) { internal_scores(in, lo, out); });
  to_original_ids(top);  // positions -> original ids; equal scores rank by original id
  return top;
}

TopK GroupSharedLayer::topk_gpu(ConstMatrix h, int k) const {
  // The device top-k runs over internal positions (label offset = the chunk's first
  // position, ties to the lower position, as the CPU's stream_topk); only the k kept
  // entries per row are mapped to original ids, on the host, as on the CPU.
  XMC_CHECK(h.cols == input_dim(), "group_shared top-k: h has {} columns, d = {}", h.cols,
            input_dim());
  const int64_t chunk = chunk_ > 0 ? chunk_ : head_block_->chunk();
  gpu::DeviceBuffer<float> z(
      *ledger_, MemTag::workspace,
      static_cast<size_t>(std::min(max_batch_, std::max<int64_t>(h.rows, 1)) * chunk));
  std::optional<EvalInputs> in;
  TopK out = device_stream_topk(
      *gpu_, h.rows, k, max_batch_, num_labels(), chunk, 0, z.data(),
      [&](int64_t r0, int64_t rows) { in.emplace(eval_inputs(h.rows_range(r0, rows))); },
      [&](int64_t lo, Matrix zc) { internal_scores(*in, lo, zc); });
  to_original_ids(out);
  return out;
}

void GroupSharedLayer::regroup_semantic(ConstMatrix x, const CsrMatrix& point_labels) {
  XMC_CHECK(point_labels.cols == num_labels() && x.rows == point_labels.rows && x.cols == input_dim(),
            "group_shared semantic grouping: x [{}×{}], labels [{}×{}], expected [N×{}], [N×{}]",
            x.rows, x.cols, point_labels.rows, point_labels.cols, input_dim(), num_labels());
  const int64_t t = tail_labels(), n = num_labels(), g = group_;
  grouped_[0] = 1;
  if (t == 0) return;
  Stopwatch sw;
  LedgerEntry scratch(*ledger_, MemTag::workspace, 4 * t * input_dim());
  const DenseMatrix c =
      label_centroids(x, point_labels, std::span<const uint32_t>(order_.data() + head_, static_cast<size_t>(t)));
  SemanticGroupingParams sp;
  sp.group = g;
  sp.beta = beta_;
  sp.kmeans_iters = kmeans_iters_;
  sp.seed = Rng::stream(seed_, kGsSemanticStream).next();
  const std::vector<int64_t> arr = semantic_arrangement(c.view(), sp);
  const double seconds = sw.seconds();
  // Cohesion against the frequency order (the arrangement before) and random groups.
  std::vector<int64_t> ident(static_cast<size_t>(t)), shuffled(static_cast<size_t>(t));
  std::iota(ident.begin(), ident.end(), int64_t{0});
  shuffled = ident;
  Rng rng = Rng::stream(seed_, kGsSemanticStream + 1);
  for (int64_t i = t - 1; i > 0; --i)
    std::swap(shuffled[static_cast<size_t>(i)], shuffled[rng.below(static_cast<uint64_t>(i) + 1)]);
  const double coh = group_cohesion(c.view(), arr, g);
  const double coh_freq = group_cohesion(c.view(), ident, g);
  const double coh_rand = group_cohesion(c.view(), shuffled, g);

  // Move the tail labels (and their biases with their moments) to the new arrangement;
  // the weights start again from the initial draw for the new groups.
  std::vector<uint32_t> old(order_.data() + head_, order_.data() + n);
  for (int64_t i = 0; i < t; ++i) order_[static_cast<size_t>(head_ + i)] = old[static_cast<size_t>(arr[static_cast<size_t>(i)])];
  for (int64_t i = 0; i < n; ++i) pos_[order_[static_cast<size_t>(i)]] = static_cast<uint32_t>(i);
  // On the GPU through host copies of the tail (once per run): T·(F·(1+s)+1+s) floats
  // down and up, s = optimizer state arrays.
  GroupSharedTailCuda::HostState st;
  if (gpu_) st = tail_gpu_->download();
  float* bias[3] = {gpu_ ? data_or_null(st.b) : data_or_null(b_),
                    gpu_ ? data_or_null(st.b_s1) : data_or_null(b_s1_),
                    gpu_ ? data_or_null(st.b_s2) : data_or_null(b_s2_)};
  for (float* b : bias) {
    if (!b) continue;
    const std::vector<float> prev(b, b + t);
    for (int64_t i = 0; i < t; ++i) b[i] = prev[static_cast<size_t>(arr[static_cast<size_t>(i)])];
  }
  if (gpu_) {
    init_tail_weights(st.w.data(), data_or_null(st.w_s1), data_or_null(st.w_s2));
    st.idx.clear();  // unchanged
    tail_gpu_->upload(st);
  } else {
    init_tail_weights(w_.data(), data_or_null(w_s1_), data_or_null(w_s2_));
  }
  spdlog::info(
      "group_shared: semantic grouping of {} tail labels into {} groups in {:.2f}s; cohesion "
      "(mean cosine to the group centroid) {:.4f} vs {:.4f} frequency order, {:.4f} random",
      t, groups_, seconds, coh, coh_freq, coh_rand);
}

bool GroupSharedLayer::rewire_due(int64_t step, int64_t total_steps) const {
  return xmc::rewire_due(rewire_cfg_, step, total_steps);
}

void GroupSharedLayer::on_step_impl(const TrainerView& t) {
  if (grouping_ == GroupingType::semantic && !semantic_done()) {
    XMC_CHECK(t.train != nullptr && static_cast<bool>(t.embed_train),
              "group_shared: semantic grouping needs the training data and embed_train");
    const DenseMatrix x = t.embed_train();
    regroup_semantic(x.view(), t.train->labels);
  }
  const int64_t total = t.total_steps > 0 ? t.total_steps : total_steps_;
  if (!rewire_due(t.step, total)) return;
  const RewireStats s = rewire(t.step);
  const int64_t slots = groups_ * fan_in_;
  spdlog::info("group_shared: rewired {} of {} shared slots ({:.1f}%) at step {} in {:.3f}s",
               s.pruned, slots, 100.0 * static_cast<double>(s.pruned) / static_cast<double>(std::max<int64_t>(1, slots)),
               s.step, s.seconds);
}

void GroupSharedLayer::on_epoch_impl(const TrainerView& t) {
  const auto& tm = timings_;
  const double zero_pct =
      tm.grads > 0 ? 100.0 * static_cast<double>(tm.zero_grads) / static_cast<double>(tm.grads)
                   : 0.0;
  if (gpu_) {
    // Wall times between the step's synchronisation points (the head block and the tail
    // each read their loss back once per step).
    spdlog::info(
        "group_shared epoch {} (cuda): dropout {:.2f}s, head {:.2f}s, tail {:.2f}s, rewiring "
        "{:.2f}s; zero output gradients {:.1f}%",
        t.epoch + 1, tm.forward, tm.head, tm.tail_gpu, tm.rewire, zero_pct);
    timings_ = {};
    return;
  }
  spdlog::info(
      "group_shared epoch {}: head {:.2f}s, tail forward {:.2f}s, loss {:.2f}s, backward "
      "{:.2f}s (input {:.2f}s, weight {:.2f}s), update {:.2f}s, projection backward {:.2f}s, "
      "rewiring {:.2f}s; zero output gradients {:.1f}%",
      t.epoch + 1, tm.head, tm.forward, tm.loss, tm.backward_input + tm.backward_weight,
      tm.backward_input, tm.backward_weight, tm.update, tm.projection_backward, tm.rewire,
      zero_pct);
  timings_ = {};
}

RewireStats GroupSharedLayer::rewire(int64_t step) {
  Stopwatch sw;
  const int64_t t = tail_labels(), f = fan_in_, slots = groups_ * f;
  RewireStats out;
  out.step = step;
  const int64_t k = rewire_count(rewire_cfg_, slots);
  if (t == 0 || k <= 0 || f >= m_) {  // nothing to prune, or every input already used
    last_rewire_ = out;
    return out;
  }
  if (gpu_) {
    // Host round trip at the CPU's schedule (every `interval` steps): indices, weights and
    // their moments down, the CPU code, the same up — K·F·4 + T·F·(w + 4s) bytes each
    // way (w = 4 fp32 | 2 bf16 weights, s = optimizer state arrays); biases stay.
    GroupSharedTailCuda::HostState st = tail_gpu_->download(/*bias=*/false);
    out.pruned = rewire_arrays(step, k, st.idx.data(), st.w.data(), data_or_null(st.w_s1),
                               data_or_null(st.w_s2));
    tail_gpu_->upload(st);
  } else {
    out.pruned =
        rewire_arrays(step, k, idx_.data(), w_.data(), data_or_null(w_s1_), data_or_null(w_s2_));
  }
  out.seconds = sw.seconds();
  timings_.rewire += out.seconds;
  last_rewire_ = out;
  return out;
}

int64_t GroupSharedLayer::rewire_arrays(int64_t step, int64_t k, uint32_t* idx, float* w, float* s1,
                                        float* s2) const {
  const int64_t t = tail_labels(), g = group_, f = fan_in_, slots = groups_ * f;
  // Slot score: mean |w| over the group's labels (the last group may be partial).
  std::vector<float> score(static_cast<size_t>(slots));
#pragma omp parallel for schedule(static)
  for (int64_t q = 0; q < groups_; ++q) {
    const int64_t r0 = q * g, gn = std::min(g, t - r0);
    for (int64_t j = 0; j < f; ++j) {
      float s = 0.0f;
      for (int64_t r = r0; r < r0 + gn; ++r) s += std::abs(w[r * f + j]);
      score[static_cast<size_t>(q * f + j)] = s / static_cast<float>(gn);
    }
  }
  // The k lowest scores (ties to the lower slot); each group regrows its own slots, whose
  // weights and moments restart at zero for every label of the group.
  const std::vector<char> prune = lowest_slots(score.data(), slots, k);
  const uint64_t base = Rng::stream(seed_ ^ kGsRewireStream, static_cast<uint64_t>(step)).next();
  return regrow_sets(idx, groups_, f, m_, prune, base, [&](int64_t q, int64_t j) {
    const int64_t r0 = q * g, gn = std::min(g, t - r0);
    for (int64_t r = r0; r < r0 + gn; ++r) {
      const int64_t e = r * f + j;
      w[e] = 0.0f;
      if (s1) s1[e] = 0.0f;
      if (s2) s2[e] = 0.0f;
    }
  });
}

std::vector<TensorRef> GroupSharedLayer::state_impl() {
  const int64_t n = num_labels(), t = tail_labels(), f = fan_in_;
  std::vector<TensorRef> out = {{"output/label_order", {n}, order_.data()},
                                {"output/label_position", {n}, pos_.data()},
                                {"output/semantic_done", {1}, grouped_.data()}};
  if (head_block_) {
    auto hs = head_block_->state("output/head/");
    out.insert(out.end(), hs.begin(), hs.end());
    head_proj_.append_state(out, "output/head/projection");
  }
  if (t > 0) {
    // The same names and shapes on both devices; on the GPU the host copies.
    XMC_CHECK(!gpu_ || tail_stage_.staged(),
              "state() of a device group_shared layer before sync_state(to_host)");
    GroupSharedTailCuda::HostState& st = tail_stage_.state();
    uint32_t* idx = gpu_ ? st.idx.data() : idx_.data();
    float* w = gpu_ ? st.w.data() : w_.data();
    float* b = gpu_ ? st.b.data() : b_.data();
    float* ws1 = gpu_ ? data_or_null(st.w_s1) : data_or_null(w_s1_);
    float* bs1 = gpu_ ? data_or_null(st.b_s1) : data_or_null(b_s1_);
    float* ws2 = gpu_ ? data_or_null(st.w_s2) : data_or_null(w_s2_);
    float* bs2 = gpu_ ? data_or_null(st.b_s2) : data_or_null(b_s2_);
    out.push_back({"output/indices", {groups_, f}, idx});
    append_weight_bias_refs(out, t, f, w, b, ws1, bs1, ws2, bs2);
    tail_proj_.append_state(out, "output/tail_projection");
  }
  return out;
}

// Biases live by position (head 0..H-1, tail H..L-1), label order_[position].
void GroupSharedLayer::init_bias_impl(std::vector<TensorRef>& refs, std::span<const float> bias) {
  const auto fill = [&](const std::string& name, int64_t first, int64_t count) {
    if (count == 0) return;
    auto r = std::find_if(refs.begin(), refs.end(), [&](const TensorRef& t) { return t.name == name; });
    XMC_CHECK(r != refs.end() && r->numel() == count, "init_bias: no {} of {} values", name, count);
    float* b = std::get<float*>(r->data);
    for (int64_t i = 0; i < count; ++i)
      b[i] = bias[static_cast<size_t>(order_[static_cast<size_t>(first + i)] - label_lo())];
  };
  fill("output/head/bias", 0, head_);
  fill("output/bias", head_, tail_labels());
}

void GroupSharedLayer::sync_state_impl(StateSync s) {
  if (!gpu_) return;
  if (head_block_) head_block_->sync_state(s);
  head_proj_.sync_state(s);
  tail_proj_.sync_state(s);
  if (tail_gpu_) tail_stage_.sync(s, *tail_gpu_);
}

int64_t GroupSharedLayer::analytic_bytes_impl() const {
  const int64_t n = num_labels(), t = tail_labels(), f = fan_in_, d = input_dim(), bsz = max_batch_;
  const int64_t states = optimizer_state_arrays(optim_);
  int64_t bytes = 4 * (2 * n + 1);  // label order, positions, semantic flag (host)
  if (head_block_) bytes += head_block_->analytic_bytes() + head_proj_.bytes();
  if (t > 0) {
    if (gpu_) {
      bytes += tail_gpu_->analytic_bytes();
    } else {
      bytes += 4 * ((t * f + t) * (1 + states) + groups_ * f);
      bytes += 4 * (m_ * bsz + bsz * chunk_ + chunk_ * f + chunk_);
    }
    bytes += tail_proj_.bytes();
  }
  // Dropout: the mask [B×d] (host) and x [B×d]; on the GPU also the mask's device copy.
  if (dropout_ > 0.0) bytes += 4 * (gpu_ ? 3 : 2) * bsz * d;
  return bytes;
}

}  // namespace xmc
