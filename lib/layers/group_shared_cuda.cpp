// GroupSharedTailCuda: host-side orchestration of the group-shared tail on the GPU (the
// kernels: cuda/group_shared.cu, cuda/fixed_fanin.cu's transpose, cuda/dense_loss.cu,
// cuda/optimizer.cu). Compiled in every build; without CUDA the gpu:: entry points are
// the throwing stubs of kernels/gpu_stubs.cpp, and nothing constructs this class (the layer
// only does on a CUDA Context).
#include "layers/group_shared_cuda.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/sparse_ops_cuda.h"
#include "layers/param_refs.h"

namespace xmc {

GroupSharedTailCuda::GroupSharedTailCuda(gpu::CudaContext& ctx, int64_t tail, int64_t group,
                                         int64_t fan_in, int64_t m, int64_t max_batch,
                                         int64_t chunk, LossType loss, const OptimizerConfig& optim,
                                         gpu::DenseCudaOptions opts, uint64_t seed)
    : ctx_(&ctx),
      t_(tail),
      g_(group),
      f_(fan_in),
      m_(m),
      groups_(group > 0 ? (tail + group - 1) / group : 0),
      max_batch_(max_batch),
      chunk_(chunk),
      loss_(loss),
      optim_(optim),
      opts_(opts),
      seed_(seed) {
  XMC_CHECK(
      t_ > 0 && g_ > 0 && f_ > 0 && f_ <= m_ && max_batch_ > 0 && chunk_ > 0 && chunk_ % g_ == 0,
      "cuda group-shared tail: T={} G={} F={} m={} B={} chunk={}", t_, g_, f_, m_, max_batch_,
      chunk_);
  XMC_CHECK(loss_ == LossType::bce || loss_ == LossType::squared_hinge,
            "cuda group-shared tail: elementwise losses only");
  XMC_CHECK(!opts_.stochastic_rounding || bf16(),
            "stochastic rounding needs bf16 weights (precision fp32 given)");
  auto& ledger = ctx.ledger();
  const auto s = ctx.stream();
  const auto tf = static_cast<size_t>(t_ * f_);
  const auto tn = static_cast<size_t>(t_);
  idx_ = gpu::DeviceBuffer<uint32_t>(ledger, MemTag::indices, static_cast<size_t>(groups_ * f_));
  if (bf16()) {
    w16_ = gpu::DeviceBuffer<gpu::Bf16>(ledger, MemTag::weights, tf);
    ut16_ = gpu::DeviceBuffer<gpu::Bf16>(ledger, MemTag::workspace,
                                         static_cast<size_t>(m_ * max_batch_));
  } else {
    w_ = gpu::DeviceBuffer<float>(ledger, MemTag::weights, tf);
    ut_ = gpu::DeviceBuffer<float>(ledger, MemTag::workspace, static_cast<size_t>(m_ * max_batch_));
  }
  b_ = gpu::DeviceBuffer<float>(ledger, MemTag::weights, tn);
  b_.zero(s);
  const int states = optimizer_state_arrays(optim_);
  if (states >= 1) {
    w_s1_ = gpu::DeviceBuffer<float>(ledger, MemTag::optimizer, tf);
    b_s1_ = gpu::DeviceBuffer<float>(ledger, MemTag::optimizer, tn);
    w_s1_.zero(s);
    b_s1_.zero(s);
  }
  if (states >= 2) {
    w_s2_ = gpu::DeviceBuffer<float>(ledger, MemTag::optimizer, tf);
    b_s2_ = gpu::DeviceBuffer<float>(ledger, MemTag::optimizer, tn);
    w_s2_.zero(s);
    b_s2_.zero(s);
  }
  z_ =
      gpu::DeviceBuffer<float>(ledger, MemTag::workspace, static_cast<size_t>(max_batch_ * chunk_));
  dw_ = gpu::DeviceBuffer<float>(ledger, MemTag::workspace, static_cast<size_t>(chunk_ * f_));
  db_ = gpu::DeviceBuffer<float>(ledger, MemTag::workspace, static_cast<size_t>(chunk_));
  acc_ = gpu::DeviceBuffer<gpu::LossAccum>(ledger, MemTag::workspace, 1);
  t_indptr_ =
      gpu::DeviceBuffer<int64_t>(ledger, MemTag::workspace, static_cast<size_t>(max_batch_ + 1));
}

GroupSharedTailCuda::HostState GroupSharedTailCuda::download(bool bias) const {
  const auto s = ctx_->stream();
  HostState st;
  auto get = [&](const gpu::DeviceBuffer<float>& b, std::vector<float>& v) {
    v.resize(b.size());
    b.download(v.data(), b.size(), s);
  };
  st.idx.resize(idx_.size());
  idx_.download(st.idx.data(), idx_.size(), s);
  if (bf16()) {
    // Widened to fp32 on the device one chunk at a time, through a temporary.
    st.w.resize(static_cast<size_t>(t_ * f_));
    gpu::DeviceBuffer<float> tmp(ctx_->ledger(), MemTag::workspace,
                                 static_cast<size_t>(chunk_ * f_));
    for (int64_t r0 = 0; r0 < t_; r0 += chunk_) {
      const int64_t rows = std::min(chunk_, t_ - r0);
      gpu::from_bf16(*ctx_, w16_.data() + r0 * f_, tmp.data(), rows * f_);
      tmp.download(st.w.data() + r0 * f_, static_cast<size_t>(rows * f_), s);
    }
    ctx_->synchronize();  // tmp is freed on return
  } else {
    get(w_, st.w);
  }
  get(w_s1_, st.w_s1);
  get(w_s2_, st.w_s2);
  if (bias) {
    get(b_, st.b);
    get(b_s1_, st.b_s1);
    get(b_s2_, st.b_s2);
  }
  ctx_->synchronize();
  return st;
}

void GroupSharedTailCuda::upload(const HostState& st) {
  const auto s = ctx_->stream();
  auto check = [](size_t have, size_t want, const char* name) {
    XMC_CHECK(have == want, "cuda group-shared upload: {} has {} values, expected {}", name, have,
              want);
  };
  if (!st.idx.empty()) {
    check(st.idx.size(), idx_.size(), "indices");
    idx_.upload(st.idx.data(), st.idx.size(), s);
  }
  if (!st.w.empty()) {
    check(st.w.size(), static_cast<size_t>(t_ * f_), "weight");
    if (bf16()) {
      // Through dw_ ([chunk×F] fp32), one chunk at a time, rounded on the device; stream
      // order keeps dw_ from being overwritten before the rounding read it.
      for (int64_t r0 = 0; r0 < t_; r0 += chunk_) {
        const int64_t rows = std::min(chunk_, t_ - r0);
        dw_.upload(st.w.data() + r0 * f_, static_cast<size_t>(rows * f_), s);
        gpu::to_bf16(*ctx_, ConstMatrix(dw_.data(), rows, f_),
                     gpu::Bf16Matrix(w16_.data() + r0 * f_, rows, f_));
      }
    } else {
      w_.upload(st.w.data(), st.w.size(), s);
    }
  }
  auto put = [&](gpu::DeviceBuffer<float>& b, const std::vector<float>& v, const char* name) {
    if (v.empty()) return;
    check(v.size(), b.size(), name);
    b.upload(v.data(), v.size(), s);
  };
  put(b_, st.b, "bias");
  put(w_s1_, st.w_s1, "weight_opt1");
  put(w_s2_, st.w_s2, "weight_opt2");
  put(b_s1_, st.b_s1, "bias_opt1");
  put(b_s2_, st.b_s2, "bias_opt2");
  ctx_->synchronize();
}

void GroupSharedTailCuda::set_input(ConstMatrix u) {
  XMC_CHECK(u.rows >= 1 && u.rows <= max_batch_ && u.cols == m_,
            "cuda group-shared input [{}×{}], expected at most {} rows of {}", u.rows, u.cols,
            max_batch_, m_);
  rows_ = u.rows;
  if (bf16()) {
    gpu::transpose(*ctx_, u, gpu::Bf16Matrix(ut16_.data(), m_, rows_));
  } else {
    gpu::transpose(*ctx_, u, Matrix(ut_.data(), m_, rows_));
  }
}

void GroupSharedTailCuda::upload_targets(const CsrMatrix& targets) {
  const auto nnz = static_cast<size_t>(targets.nnz());
  if (t_indices_.size() < std::max<size_t>(nnz, 1)) {
    // Grow geometrically; the old buffer may still be read by queued work.
    ctx_->synchronize();
    t_indices_ = gpu::DeviceBuffer<uint32_t>(ctx_->ledger(), MemTag::workspace,
                                             std::max<size_t>({nnz, 2 * t_indices_.size(), 1024}));
  }
  t_indptr_.upload(targets.indptr.data(), static_cast<size_t>(targets.rows + 1), ctx_->stream());
  t_indices_.upload(targets.indices.data(), nnz, ctx_->stream());
}

StepStats GroupSharedTailCuda::train_step(const CsrMatrix& targets, int64_t lo, Matrix du,
                                          const LrState& lr) {
  const int64_t rows = rows_;
  XMC_CHECK(rows >= 1 && targets.rows == rows && lo + t_ <= targets.cols,
            "cuda group-shared step: targets [{}×{}] for an input of {} rows and labels [{}, {})",
            targets.rows, targets.cols, rows, lo, lo + t_);
  XMC_CHECK(du.rows == rows && du.cols == m_,
            "cuda group-shared step: du [{}×{}], expected [{}×{}]", du.rows, du.cols, rows, m_);
  const auto s = ctx_->stream();
  upload_targets(targets);
  const gpu::DeviceCsr dt{t_indptr_.data(), t_indices_.data(), targets.rows, targets.cols};
  acc_.zero(s);
  const ConstMatrix ut(ut_.data(), m_, rows);
  const gpu::ConstBf16Matrix ut16(ut16_.data(), m_, rows);
  OptimizerConfig bias_cfg = optim_;  // biases get no weight decay
  bias_cfg.weight_decay = 0.0;
  for (int64_t c0 = 0; c0 < t_; c0 += chunk_) {
    const int64_t c = std::min(chunk_, t_ - c0);
    const uint32_t* idx = idx_.data() + (c0 / g_) * f_;
    const int64_t wo = c0 * f_;
    Matrix z(z_.data(), rows, c);
    // z = logits without bias; the loss kernel adds the bias and leaves G = dL/dz / B.
    if (bf16()) {
      gpu::group_shared_forward(*ctx_, idx, w16_.data() + wo, nullptr, c, g_, f_, ut16, z);
    } else {
      gpu::group_shared_forward(*ctx_, idx, w_.data() + wo, nullptr, c, g_, f_, ut, z);
    }
    gpu::elementwise_loss_grad(*ctx_, loss_, z, b_.data() + c0, dt, lo + c0, rows, acc_.data());
    // Both gradients with the weights before this chunk's update.
    if (bf16()) {
      gpu::group_shared_input_grad(*ctx_, idx, w16_.data() + wo, c, g_, f_, z, du);
      gpu::group_shared_weight_grad(*ctx_, idx, c, g_, f_, z, ut16, dw_.data(), db_.data());
      // Rounding bits differ per (seed, chunk); the kernel mixes in the step and index.
      const uint64_t sr_seed = opts_.stochastic_rounding
                                   ? ((seed_ * 0x9E3779B97F4A7C15ULL) ^
                                      (static_cast<uint64_t>(c0) * 0xD1B54A32D192ED03ULL)) |
                                         1ULL
                                   : 0;
      gpu::optimizer_update(*ctx_, optim_, lr.lr, lr.step, w16_.data() + wo, dw_.data(),
                            data_or_null(w_s1_, wo), data_or_null(w_s2_, wo), c * f_, sr_seed);
    } else {
      gpu::group_shared_input_grad(*ctx_, idx, w_.data() + wo, c, g_, f_, z, du);
      gpu::group_shared_weight_grad(*ctx_, idx, c, g_, f_, z, ut, dw_.data(), db_.data());
      gpu::optimizer_update(*ctx_, optim_, lr.lr, lr.step, w_.data() + wo, dw_.data(),
                            data_or_null(w_s1_, wo), data_or_null(w_s2_, wo), c * f_);
    }
    gpu::optimizer_update(*ctx_, bias_cfg, lr.lr, lr.step, b_.data() + c0, db_.data(),
                          data_or_null(b_s1_, c0), data_or_null(b_s2_, c0), c);
  }
  gpu::LossAccum acc;
  acc_.download(&acc, 1, s);
  ctx_->synchronize();
  StepStats stats;
  stats.loss = acc.loss / static_cast<double>(rows);
  stats.zero_grads = static_cast<int64_t>(acc.zero_grads);
  stats.grads = rows * t_;
  return stats;
}

void GroupSharedTailCuda::scores(int64_t r0, Matrix out) {
  XMC_CHECK(
      r0 >= 0 && r0 % g_ == 0 && r0 + out.cols <= t_ && out.rows == rows_,
      "cuda group-shared scores of tail labels [{}, {}) for {} rows (T={}, G={}, input of {} rows)",
      r0, r0 + out.cols, out.rows, t_, g_, rows_);
  if (out.cols == 0) return;
  const uint32_t* idx = idx_.data() + (r0 / g_) * f_;
  if (bf16()) {
    gpu::group_shared_forward(*ctx_, idx, w16_.data() + r0 * f_, b_.data() + r0, out.cols, g_, f_,
                              gpu::ConstBf16Matrix(ut16_.data(), m_, rows_), out);
  } else {
    gpu::group_shared_forward(*ctx_, idx, w_.data() + r0 * f_, b_.data() + r0, out.cols, g_, f_,
                              ConstMatrix(ut_.data(), m_, rows_), out);
  }
}

int64_t GroupSharedTailCuda::analytic_bytes() const {
  const int64_t states = optimizer_state_arrays(optim_);
  const int64_t wbytes = bf16() ? 2 : 4;
  int64_t bytes = 4 * groups_ * f_;                           // indices
  bytes += t_ * f_ * wbytes + 4 * t_;                         // weights, biases
  bytes += states * 4 * (t_ * f_ + t_);                       // optimizer state
  bytes += wbytes * m_ * max_batch_;                          // ut (bf16 in bf16 mode)
  bytes += 4 * (max_batch_ * chunk_ + chunk_ * f_ + chunk_);  // z, dw, db
  bytes += static_cast<int64_t>(sizeof(gpu::LossAccum)) + 8 * (max_batch_ + 1);
  return bytes;
}

}  // namespace xmc
