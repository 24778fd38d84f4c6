// FixedFaninCuda (layers/fixed_fanin_cuda.h): FixedFaninLayer::train_step_impl,
// scores_impl and topk_impl op for op on the device. The CPU file is the reference for
// the order of operations; comments here only note where the GPU differs.
#include "layers/fixed_fanin_cuda.h"

#include <algorithm>
#include <limits>

#include "core/cuda_stream.h"
#include "core/error.h"
#include "layers/device_topk.h"
#include "core/gpu.h"
#include "kernels/encoder_ops_cuda.h"
#include "kernels/sparse_ops_cuda.h"
#include "layers/param_refs.h"

namespace xmc {

using gpu::DeviceBuffer;

namespace {

template <class T>
DeviceBuffer<T> ffgpu_buffer(MemoryLedger& ledger, MemTag tag, bool needed, int64_t n) {
  if (!needed || n <= 0) return {};
  return DeviceBuffer<T>(ledger, tag, static_cast<size_t>(n));
}

}  // namespace

FixedFaninCuda::FixedFaninCuda(gpu::CudaContext& ctx, const FixedFaninShape& shape, LossType loss,
                               const OptimizerConfig& optim)
    : ctx_(&ctx), s_(shape), loss_(loss), optim_(optim) {
  const int64_t n = s_.n, f = s_.fan_in, nf = n * f, d = s_.d, m = s_.m, bsz = s_.max_batch;
  XMC_CHECK(n > 0 && f > 0 && d > 0 && m > 0 && bsz > 0 && s_.chunk > 0,
            "cuda fixed fan-in: L={} F={} d={} m={} B={} chunk={}", n, f, d, m, bsz, s_.chunk);
  // The loss kernel and the input gradient put the batch rows on the grid's y dimension.
  auto& ledger = ctx.ledger();
  const auto st = ctx.stream();
  const int states = optimizer_state_arrays(optim);
  const int64_t pn = s_.intermediate ? m * d + m : 0;
  idx_ = DeviceBuffer<uint32_t>(ledger, MemTag::indices, static_cast<size_t>(nf));
  w_ = DeviceBuffer<float>(ledger, MemTag::weights, static_cast<size_t>(nf));
  b_ = DeviceBuffer<float>(ledger, MemTag::weights, static_cast<size_t>(n));
  w_s1_ = ffgpu_buffer<float>(ledger, MemTag::optimizer, states >= 1, nf);
  b_s1_ = ffgpu_buffer<float>(ledger, MemTag::optimizer, states >= 1, n);
  w_s2_ = ffgpu_buffer<float>(ledger, MemTag::optimizer, states >= 2, nf);
  b_s2_ = ffgpu_buffer<float>(ledger, MemTag::optimizer, states >= 2, n);
  p_ = ffgpu_buffer<float>(ledger, MemTag::weights, s_.intermediate, pn);
  p_s1_ = ffgpu_buffer<float>(ledger, MemTag::optimizer, s_.intermediate && states >= 1, pn);
  p_s2_ = ffgpu_buffer<float>(ledger, MemTag::optimizer, s_.intermediate && states >= 2, pn);
  dp_ = ffgpu_buffer<float>(ledger, MemTag::workspace, s_.intermediate, pn);
  xd_ = ffgpu_buffer<float>(ledger, MemTag::workspace, s_.dropout, bsz * d);
  mask_ = ffgpu_buffer<float>(ledger, MemTag::workspace, s_.dropout, bsz * d);
  if (s_.dropout)
    mask_host_ = gpu::PinnedBuffer<float>(ledger, MemTag::workspace, static_cast<size_t>(bsz * d));
  u_ = ffgpu_buffer<float>(ledger, MemTag::workspace, s_.intermediate, bsz * m);
  du_ = ffgpu_buffer<float>(ledger, MemTag::workspace, s_.intermediate, bsz * m);
  ut_ = ffgpu_buffer<float>(ledger, MemTag::workspace, true, m * bsz);
  z_ = ffgpu_buffer<float>(ledger, MemTag::workspace, true, bsz * s_.chunk);
  dw_ = ffgpu_buffer<float>(ledger, MemTag::workspace, true, s_.chunk * f);
  db_ = ffgpu_buffer<float>(ledger, MemTag::workspace, true, s_.chunk);
  acc_ = DeviceBuffer<gpu::LossAccum>(ledger, MemTag::workspace, 1);
  zero_labels_ = DeviceBuffer<unsigned long long>(ledger, MemTag::workspace, 1);
  t_indptr_ = DeviceBuffer<int64_t>(ledger, MemTag::workspace, static_cast<size_t>(bsz + 1));
  for (auto* b : {&w_s1_, &w_s2_, &b_s1_, &b_s2_, &p_s1_, &p_s2_})
    if (b->size()) b->zero(st);
  ctx.synchronize();
}

FixedFaninCuda::~FixedFaninCuda() = default;

void FixedFaninCuda::upload(const FixedFaninHostArrays& a) {
  const auto st = ctx_->stream();
  auto put = [&](DeviceBuffer<float>& b, const float* src) {
    if (src && b.size()) b.upload(src, b.size(), st);
  };
  if (a.idx) idx_.upload(a.idx, idx_.size(), st);
  put(w_, a.w);
  put(w_s1_, a.w_s1);
  put(w_s2_, a.w_s2);
  put(b_, a.b);
  put(b_s1_, a.b_s1);
  put(b_s2_, a.b_s2);
  put(p_, a.p);
  put(p_s1_, a.p_s1);
  put(p_s2_, a.p_s2);
  ctx_->synchronize();
}

void FixedFaninCuda::download(const FixedFaninHostArrays& a) const {
  const auto st = ctx_->stream();
  auto get = [&](const DeviceBuffer<float>& b, float* dst) {
    if (dst && b.size()) b.download(dst, b.size(), st);
  };
  if (a.idx) idx_.download(a.idx, idx_.size(), st);
  get(w_, a.w);
  get(w_s1_, a.w_s1);
  get(w_s2_, a.w_s2);
  get(b_, a.b);
  get(b_s1_, a.b_s1);
  get(b_s2_, a.b_s2);
  get(p_, a.p);
  get(p_s1_, a.p_s1);
  get(p_s2_, a.p_s2);
  ctx_->synchronize();
}

void FixedFaninCuda::upload_targets(const CsrMatrix& targets) {
  const auto nnz = static_cast<size_t>(targets.nnz());
  if (t_indices_.size() < std::max<size_t>(nnz, 1)) {
    ctx_->synchronize();  // the old buffer may still be read by queued work
    t_indices_ = DeviceBuffer<uint32_t>(ctx_->ledger(), MemTag::workspace,
                                        std::max<size_t>({nnz, 2 * t_indices_.size(), 1024}));
  }
  t_indptr_.upload(targets.indptr.data(), static_cast<size_t>(targets.rows + 1), ctx_->stream());
  t_indices_.upload(targets.indices.data(), nnz, ctx_->stream());
}

void FixedFaninCuda::zero_rows(Matrix m) {
  const size_t row_bytes = static_cast<size_t>(m.cols) * sizeof(float);
  if (m.ld == m.cols) {
    gpu::memset_device(m.data, 0, static_cast<size_t>(m.rows) * row_bytes, ctx_->stream());
    return;
  }
  for (int64_t r = 0; r < m.rows; ++r) gpu::memset_device(m.row(r), 0, row_bytes, ctx_->stream());
}

void FixedFaninCuda::mark(double FixedFaninTimings::*field) {
  if (!timing_) return;
  if (events_.size() <= marks_) {
    events_.push_back(std::make_unique<gpu::CudaEvent>(/*timing=*/true));
    fields_.push_back(field);
  }
  fields_[marks_] = field;
  events_[marks_]->record(ctx_->stream());
  ++marks_;
}

StepStats FixedFaninCuda::train_step(const CsrMatrix& targets, ConstMatrix h, Matrix dh,
                                     const LrState& lr, FixedFaninTimings& tm, bool time_ops) {
  const int64_t bsz = h.rows, d = s_.d, n = s_.n, f = s_.fan_in, m = s_.m;
  XMC_CHECK(bsz >= 1 && bsz <= s_.max_batch, "batch of {} rows outside the workspace for 1..{}",
            bsz, s_.max_batch);
  XMC_CHECK(h.cols == d && dh.rows == bsz && dh.cols == d,
            "cuda fixed fan-in step shapes h[{}×{}] dh[{}×{}], d={}", h.rows, h.cols, dh.rows,
            dh.cols, d);
  XMC_CHECK(targets.rows == bsz && n <= targets.cols,
            "targets [{}×{}] for a batch of {} and {} labels", targets.rows, targets.cols, bsz, n);
  auto& ctx = *ctx_;
  const auto st = ctx.stream();
  timing_ = time_ops;
  marks_ = 0;
  mark(nullptr);  // opens the step

  upload_targets(targets);
  const gpu::DeviceCsr t{t_indptr_.data(), t_indices_.data(), targets.rows, targets.cols};
  acc_.zero(st);
  zero_labels_.zero(st);

  // x = dropout(h) with the host-drawn mask; u = relu(x·Pᵀ + c) or x; ut = uᵀ [m×B].
  ConstMatrix x = h;
  if (s_.dropout) {
    mask_.upload(mask_host_.data(), static_cast<size_t>(bsz * d), st);
    const Matrix xd(xd_.data(), bsz, d);
    gpu::multiply_mask(ctx, h, mask_.data(), xd);
    x = xd;
  }
  ConstMatrix u = x;
  const ConstMatrix p(p_.data(), m, d);
  if (s_.intermediate) {
    const Matrix um(u_.data(), bsz, m);
    gpu::gemm_nt(ctx, x, p, um);
    gpu::bias_activation(ctx, um, p_.data() + m * d, /*relu=*/true);
    u = um;
  }
  const Matrix ut(ut_.data(), m, bsz);
  gpu::transpose(ctx, u, ut);
  // du = dL/du [B×m]: the intermediate's workspace, or dh itself.
  const Matrix du = s_.intermediate ? Matrix(du_.data(), bsz, m) : dh;
  zero_rows(du);
  mark(&FixedFaninTimings::forward);

  for (int64_t c0 = 0; c0 < n; c0 += s_.chunk) {
    const int64_t c = std::min(s_.chunk, n - c0);
    const Matrix z(z_.data(), bsz, c);
    const uint32_t* idx = idx_.data() + c0 * f;
    const float* w = w_.data() + c0 * f;
    // Logits without the bias: the loss kernel adds it (as the dense GPU path does).
    gpu::fixed_fanin_forward(ctx, idx, w, nullptr, c, f, ut, z);
    mark(&FixedFaninTimings::forward);
    gpu::elementwise_loss_grad(ctx, loss_, z, b_.data() + c0, t, c0, bsz, acc_.data());
    mark(&FixedFaninTimings::loss);
    // With the weights before this step's update.
    gpu::fixed_fanin_input_grad(ctx, idx, w, c, f, z, du);
    mark(&FixedFaninTimings::backward_input);
    gpu::fixed_fanin_weight_grad(ctx, idx, c, f, z, ut, dw_.data(), db_.data(),
                                 zero_labels_.data());
    mark(&FixedFaninTimings::backward_weight);
    const int64_t off = c0 * f;
    gpu::optimizer_update(ctx, optim_, lr.lr, lr.step, w_.data() + off, dw_.data(),
                          data_or_null(w_s1_, off), data_or_null(w_s2_, off), c * f);
    OptimizerConfig bias_cfg = optim_;
    bias_cfg.weight_decay = 0.0;  // no weight decay on the bias
    gpu::optimizer_update(ctx, bias_cfg, lr.lr, lr.step, b_.data() + c0, db_.data(),
                          data_or_null(b_s1_, c0), data_or_null(b_s2_, c0), c);
    mark(&FixedFaninTimings::update);
  }

  if (s_.intermediate) {
    // Through the ReLU into the ut workspace (free now; same size, no aliasing with du),
    // then dP = dzᵀ·x, dc = column sums, dx = dz·P with the old P.
    const Matrix dz(ut_.data(), bsz, m);
    gpu::activation_grad(ctx, /*relu=*/true, ConstMatrix(u_.data(), bsz, m), du, dz);
    gpu::gemm_tn(ctx, dz, x, Matrix(dp_.data(), m, d));
    gpu::column_sums(ctx, dz, dp_.data() + m * d);
    gpu::gemm_nn(ctx, dz, p, dh);
    gpu::optimizer_update(ctx, optim_, lr.lr, lr.step, p_.data(), dp_.data(), data_or_null(p_s1_),
                          data_or_null(p_s2_), static_cast<int64_t>(p_.size()));
  }
  if (s_.dropout) gpu::multiply_mask(ctx, dh, mask_.data(), dh);
  mark(&FixedFaninTimings::intermediate_backward);

  gpu::LossAccum acc;
  unsigned long long zero_labels = 0;
  acc_.download(&acc, 1, st);
  zero_labels_.download(&zero_labels, 1, st);
  ctx.synchronize();
  if (timing_)
    for (size_t i = 1; i < marks_; ++i)
      tm.*fields_[i] += 1e-3 * static_cast<double>(events_[i]->elapsed_ms_since(*events_[i - 1]));
  StepStats stats;
  stats.loss = acc.loss / static_cast<double>(bsz);
  stats.zero_grads = static_cast<int64_t>(acc.zero_grads);
  stats.grads = bsz * n;
  tm.zero_grads += stats.zero_grads;
  tm.grads += stats.grads;
  tm.skipped_labels += static_cast<int64_t>(zero_labels);
  tm.label_steps += n;
  return stats;
}

ConstMatrix FixedFaninCuda::eval_input_t(ConstMatrix h) {
  const int64_t rows = h.rows, d = s_.d, m = s_.m;
  XMC_CHECK(h.cols == d && rows <= s_.max_batch, "cuda fixed fan-in input h[{}×{}], d={}, B<={}",
            rows, h.cols, d, s_.max_batch);
  ConstMatrix u = h;
  if (s_.intermediate) {
    const Matrix um(u_.data(), rows, m);
    gpu::gemm_nt(*ctx_, h, ConstMatrix(p_.data(), m, d), um);
    gpu::bias_activation(*ctx_, um, p_.data() + m * d, /*relu=*/true);
    u = um;
  }
  const Matrix ut(ut_.data(), m, rows);
  gpu::transpose(*ctx_, u, ut);
  return ut;
}

void FixedFaninCuda::scores(ConstMatrix h, int64_t lo, Matrix out) {
  XMC_CHECK(lo >= 0 && lo + out.cols <= s_.n && out.rows == h.rows,
            "cuda fixed fan-in scores of labels [{}, {}) of {}, out [{}×{}], h [{}×{}]", lo,
            lo + out.cols, s_.n, out.rows, out.cols, h.rows, h.cols);
  const int64_t f = s_.fan_in;
  // Row blocks of max_batch (the u / ut workspaces).
  for (int64_t r0 = 0; r0 < h.rows; r0 += s_.max_batch) {
    const int64_t rows = std::min(s_.max_batch, h.rows - r0);
    const ConstMatrix ut = eval_input_t(h.rows_range(r0, rows));
    gpu::fixed_fanin_forward(*ctx_, idx_.data() + lo * f, w_.data() + lo * f, b_.data() + lo,
                             out.cols, f, ut, out.rows_range(r0, rows));
  }
  ctx_->synchronize();
}

TopK FixedFaninCuda::topk(ConstMatrix h, int k) {
  const int64_t f = s_.fan_in;
  ConstMatrix ut;
  return device_stream_topk(
      *ctx_, h.rows, k, s_.max_batch, s_.n, s_.chunk, 0, z_.data(),
      [&](int64_t r0, int64_t rows) { ut = eval_input_t(h.rows_range(r0, rows)); },
      [&](int64_t c0, Matrix z) {
        gpu::fixed_fanin_forward(*ctx_, idx_.data() + c0 * f, w_.data() + c0 * f, b_.data() + c0,
                                 z.cols, f, ut, z);
      });
}

int64_t FixedFaninCuda::analytic_bytes() const {
  const int64_t n = s_.n, f = s_.fan_in, d = s_.d, m = s_.m, bsz = s_.max_batch, c = s_.chunk;
  const int64_t states = optimizer_state_arrays(optim_);
  const int64_t pn = s_.intermediate ? m * d + m : 0;
  int64_t floats = (n * f + n) * (1 + states) + pn * (2 + states);  // params, state, dP
  if (s_.dropout) floats += 3 * bsz * d;                            // xd, mask, pinned mask
  if (s_.intermediate) floats += 2 * bsz * m;
  floats += m * bsz + bsz * c + c * f + c;
  return 4 * (floats + n * f)  // + indices (uint32)
         + static_cast<int64_t>(sizeof(gpu::LossAccum)) + 8 + 8 * (bsz + 1);
}

}  // namespace xmc
