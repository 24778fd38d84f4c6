// DenseBlockCuda: host-side orchestration of the dense op family on the GPU (the kernels
// live in dense_loss.cu, optimizer.cu, topk.cu; GEMMs in dense_gemm.cpp). Mirrors
// layers/dense_block.cpp step by step.
#include "layers/dense_block_cuda.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "layers/device_topk.h"
#include "core/gpu.h"
#include "core/rng.h"
#include "layers/weight_init.h"

namespace xmc::gpu {

DenseBlockCuda::DenseBlockCuda(CudaContext& ctx, int64_t d, int64_t lo, int64_t n,
                               int64_t max_batch, int64_t chunk, LossType loss,
                               const OptimizerConfig& optim, uint64_t seed, DenseCudaOptions opts)
    : ctx_(&ctx),
      d_(d),
      lo_(lo),
      n_(n),
      max_batch_(max_batch),
      chunk_(std::min(chunk, n)),
      loss_(loss),
      optim_(optim),
      opts_(opts),
      seed_(seed) {
  XMC_CHECK(d > 0 && n > 0 && max_batch > 0 && chunk > 0,
            "cuda dense block d={} n={} B={} chunk={}", d, n, max_batch, chunk);
  XMC_CHECK(!opts.stochastic_rounding || bf16(),
            "stochastic rounding needs bf16 weights (precision fp32 given)");
  auto& ledger = ctx.ledger();
  const auto s = ctx.stream();
  const auto wn = static_cast<size_t>(n * d);
  const auto nn = static_cast<size_t>(n);
  if (bf16()) {
    w16_ = DeviceBuffer<Bf16>(ledger, MemTag::weights, wn);
  } else {
    w_ = DeviceBuffer<float>(ledger, MemTag::weights, wn);
  }
  b_ = DeviceBuffer<float>(ledger, MemTag::weights, nn);
  b_.zero(s);
  const int states = optimizer_state_arrays(optim);
  if (states >= 1) {
    w_s1_ = DeviceBuffer<float>(ledger, MemTag::optimizer, wn);
    b_s1_ = DeviceBuffer<float>(ledger, MemTag::optimizer, nn);
    w_s1_.zero(s);
    b_s1_.zero(s);
  }
  if (states >= 2) {
    w_s2_ = DeviceBuffer<float>(ledger, MemTag::optimizer, wn);
    b_s2_ = DeviceBuffer<float>(ledger, MemTag::optimizer, nn);
    w_s2_.zero(s);
    b_s2_.zero(s);
  }
  const auto zn = static_cast<size_t>(max_batch * chunk_);
  z_ = DeviceBuffer<float>(ledger, MemTag::workspace, zn);
  if (bf16()) {
    g16_ = DeviceBuffer<Bf16>(ledger, MemTag::workspace, zn);
    h16_ = DeviceBuffer<Bf16>(ledger, MemTag::workspace, static_cast<size_t>(max_batch * d));
  }
  dw_ = DeviceBuffer<float>(ledger, MemTag::workspace, static_cast<size_t>(chunk_ * d));
  db_ = DeviceBuffer<float>(ledger, MemTag::workspace, static_cast<size_t>(chunk_));
  if (loss == LossType::softmax) {
    smax_max_ = DeviceBuffer<float>(ledger, MemTag::workspace, static_cast<size_t>(max_batch));
    smax_sum_ = DeviceBuffer<float>(ledger, MemTag::workspace, static_cast<size_t>(max_batch));
  }
  acc_ = DeviceBuffer<LossAccum>(ledger, MemTag::workspace, 1);
  t_indptr_ = DeviceBuffer<int64_t>(ledger, MemTag::workspace, static_cast<size_t>(max_batch + 1));

  // DenseBlock's initialisation, row by row from Rng::stream(seed, global row), drawn on
  // the host one chunk at a time and uploaded (through dw_ in bf16 mode, then rounded).
  std::vector<float> host(static_cast<size_t>(chunk_ * d));
  for (int64_t r0 = 0; r0 < n; r0 += chunk_) {
    const int64_t rows = std::min(chunk_, n - r0);
    init_uniform_rows(host.data(), rows, d, seed, lo + r0);
    const auto count = static_cast<size_t>(rows * d);
    if (bf16()) {
      dw_.upload(host.data(), count, s);
      to_bf16(ctx, ConstMatrix(dw_.data(), rows, d), Bf16Matrix(w16_.data() + r0 * d, rows, d));
    } else {
      copy_to_device(w_.data() + r0 * d, host.data(), count * sizeof(float), s);
    }
    // `host` is reused by the next chunk: wait for the copy.
    ctx.synchronize();
  }
}

void DenseBlockCuda::upload_targets(const CsrMatrix& targets) {
  const auto nnz = static_cast<size_t>(targets.nnz());
  if (t_indices_.size() < std::max<size_t>(nnz, 1)) {
    // Grow geometrically; the old buffer may still be read by queued work.
    ctx_->synchronize();
    t_indices_ = DeviceBuffer<uint32_t>(ctx_->ledger(), MemTag::workspace,
                                        std::max<size_t>({nnz, 2 * t_indices_.size(), 1024}));
  }
  t_indptr_.upload(targets.indptr.data(), static_cast<size_t>(targets.rows + 1), ctx_->stream());
  t_indices_.upload(targets.indices.data(), nnz, ctx_->stream());
}

void DenseBlockCuda::round_h(ConstMatrix h) {
  if (bf16()) to_bf16(*ctx_, h, Bf16Matrix(h16_.data(), h.rows, d_));
}

void DenseBlockCuda::logits(ConstMatrix h, int64_t row0, Matrix z) {
  if (bf16()) {
    gemm_nt(*ctx_, ConstBf16Matrix(h16_.data(), h.rows, d_),
            ConstBf16Matrix(w16_.data() + row0 * d_, z.cols, d_), z);
  } else {
    gemm_nt(*ctx_, h, ConstMatrix(w_.data() + row0 * d_, z.cols, d_), z);
  }
}

StepStats DenseBlockCuda::train_step(const CsrMatrix& targets, ConstMatrix h, Matrix dh,
                                     const LrState& lr) {
  const int64_t batch = h.rows;
  XMC_CHECK(batch >= 1 && batch <= max_batch_, "batch of {} rows outside the workspace for 1..{}",
            batch, max_batch_);
  XMC_CHECK(h.cols == d_ && dh.rows == batch && dh.cols == d_,
            "cuda dense step shapes h[{}×{}] dh[{}×{}], d={}", h.rows, h.cols, dh.rows, dh.cols,
            d_);
  XMC_CHECK(targets.rows == batch && lo_ + n_ <= targets.cols,
            "targets [{}×{}] for a batch of {} and labels [{}, {})", targets.rows, targets.cols,
            batch, lo_, lo_ + n_);
  const auto s = ctx_->stream();
  upload_targets(targets);
  const DeviceCsr t{t_indptr_.data(), t_indices_.data(), targets.rows, targets.cols};
  acc_.zero(s);
  round_h(h);
  const DeviceSoftmaxStats smax{smax_max_.data(), smax_sum_.data()};
  if (loss_ == LossType::softmax) {
    // Pass 1: online logsumexp over all labels of the block.
    softmax_reset(*ctx_, smax, batch);
    for (int64_t c0 = 0; c0 < n_; c0 += chunk_) {
      const int64_t c = std::min(chunk_, n_ - c0);
      Matrix z(z_.data(), batch, c);
      logits(h, c0, z);
      softmax_accumulate(*ctx_, z, b_.data() + c0, smax);
    }
  }

  for (int64_t c0 = 0; c0 < n_; c0 += chunk_) {
    const int64_t c = std::min(chunk_, n_ - c0);
    Matrix z(z_.data(), batch, c);
    logits(h, c0, z);
    // z becomes G = dL/dZ / B (and its bf16 copy in bf16 mode).
    Bf16Matrix g16 = bf16() ? Bf16Matrix(g16_.data(), batch, c) : Bf16Matrix();
    if (loss_ == LossType::softmax) {
      softmax_loss_grad(*ctx_, z, b_.data() + c0, smax, t, lo_ + c0, batch, acc_.data(), g16);
    } else {
      elementwise_loss_grad(*ctx_, loss_, z, b_.data() + c0, t, lo_ + c0, batch, acc_.data(), g16);
    }
    // dh (+)= G·W_c with the weights before this step's update; the first chunk
    // overwrites dh, so it needs no clearing.
    const float beta = c0 == 0 ? 0.0f : 1.0f;
    Matrix dw(dw_.data(), c, d_);
    if (bf16()) {
      const ConstBf16Matrix w16(w16_.data() + c0 * d_, c, d_);
      gemm_nn(*ctx_, ConstBf16Matrix(g16), w16, dh, 1.0f, beta);
      gemm_tn(*ctx_, ConstBf16Matrix(g16), ConstBf16Matrix(h16_.data(), batch, d_), dw);
    } else {
      gemm_nn(*ctx_, ConstMatrix(z), ConstMatrix(w_.data() + c0 * d_, c, d_), dh, 1.0f, beta);
      gemm_tn(*ctx_, ConstMatrix(z), h, dw);
    }
    column_sums(*ctx_, z, db_.data());
    // Update the chunk; no weight decay on the bias.
    const int64_t off = c0 * d_;
    auto at = [](DeviceBuffer<float>& b, int64_t o) { return b.size() ? b.data() + o : nullptr; };
    if (bf16()) {
      // Rounding bits differ per (seed, chunk); the kernel mixes in the step and index.
      const uint64_t sr_seed = opts_.stochastic_rounding
                                   ? ((seed_ * 0x9E3779B97F4A7C15ULL) ^
                                      (static_cast<uint64_t>(c0) * 0xD1B54A32D192ED03ULL)) |
                                         1ULL
                                   : 0;
      optimizer_update(*ctx_, optim_, lr.lr, lr.step, w16_.data() + off, dw_.data(), at(w_s1_, off),
                       at(w_s2_, off), c * d_, sr_seed);
    } else {
      optimizer_update(*ctx_, optim_, lr.lr, lr.step, w_.data() + off, dw_.data(), at(w_s1_, off),
                       at(w_s2_, off), c * d_);
    }
    OptimizerConfig bias_cfg = optim_;
    bias_cfg.weight_decay = 0.0;
    optimizer_update(*ctx_, bias_cfg, lr.lr, lr.step, b_.data() + c0, db_.data(), at(b_s1_, c0),
                     at(b_s2_, c0), c);
  }
  LossAccum acc;
  acc_.download(&acc, 1, s);
  ctx_->synchronize();
  StepStats stats;
  stats.loss = acc.loss / static_cast<double>(batch);
  stats.zero_grads = static_cast<int64_t>(acc.zero_grads);
  stats.grads = batch * n_;
  return stats;
}

StepStats DenseBlockCuda::train_step_host(const CsrMatrix& targets, ConstMatrix h, Matrix dh,
                                          const LrState& lr) {
  XMC_CHECK(h.rows <= max_batch_ && h.cols == d_ && dh.rows == h.rows && dh.cols == d_,
            "cuda dense host step shapes h[{}×{}] dh[{}×{}], d={}, max batch {}", h.rows, h.cols,
            dh.rows, dh.cols, d_, max_batch_);
  const auto s = ctx_->stream();
  const auto bd = static_cast<size_t>(max_batch_ * d_);
  if (h_host_io_.size() == 0) {
    h_host_io_ = DeviceBuffer<float>(ctx_->ledger(), MemTag::activations, bd);
    dh_host_io_ = DeviceBuffer<float>(ctx_->ledger(), MemTag::activations, bd);
  }
  for (int64_t r = 0; r < h.rows; ++r)
    copy_to_device(h_host_io_.data() + r * d_, h.row(r), static_cast<size_t>(d_) * sizeof(float),
                   s);
  Matrix dh_dev(dh_host_io_.data(), h.rows, d_);
  const StepStats st = train_step(targets, ConstMatrix(h_host_io_.data(), h.rows, d_), dh_dev, lr);
  for (int64_t r = 0; r < h.rows; ++r)
    copy_to_host(dh.row(r), dh_dev.row(r), static_cast<size_t>(d_) * sizeof(float), s);
  ctx_->synchronize();
  return st;
}

void DenseBlockCuda::scores(ConstMatrix h, int64_t lo, Matrix out) {
  const int64_t r0 = lo - lo_;
  XMC_CHECK(r0 >= 0 && r0 + out.cols <= n_, "scores of labels [{}, {}) outside [{}, {})", lo,
            lo + out.cols, lo_, lo_ + n_);
  XMC_CHECK(h.cols == d_ && out.rows == h.rows, "cuda scores shapes h[{}×{}] out[{}×{}], d={}",
            h.rows, h.cols, out.rows, out.cols, d_);
  XMC_CHECK(!bf16() || h.rows <= max_batch_, "bf16 scores of {} rows, workspace for {}", h.rows,
            max_batch_);
  round_h(h);
  logits(h, r0, out);
  add_row_vector(*ctx_, out, b_.data() + r0);
}

TopK DenseBlockCuda::topk(ConstMatrix h, int k) {
  XMC_CHECK(h.cols == d_, "cuda top-k: h has {} columns, d = {}", h.cols, d_);
  ConstMatrix hb;
  return device_stream_topk(
      *ctx_, h.rows, k, max_batch_, n_, chunk_, lo_, z_.data(),
      [&](int64_t r0, int64_t rows) {
        hb = h.rows_range(r0, rows);
        round_h(hb);
      },
      [&](int64_t c0, Matrix z) {
        logits(hb, c0, z);
        add_row_vector(*ctx_, z, b_.data() + c0);
      });
}

DenseBlockCuda::HostState DenseBlockCuda::download() const {
  const auto s = ctx_->stream();
  HostState st;
  auto get = [&](const DeviceBuffer<float>& b, std::vector<float>& v) {
    v.resize(b.size());
    b.download(v.data(), b.size(), s);
  };
  if (bf16()) {
    // Through a temporary fp32 device copy, one chunk at a time.
    st.weight.resize(static_cast<size_t>(n_ * d_));
    DeviceBuffer<float> tmp(ctx_->ledger(), MemTag::workspace, static_cast<size_t>(chunk_ * d_));
    for (int64_t r0 = 0; r0 < n_; r0 += chunk_) {
      const int64_t rows = std::min(chunk_, n_ - r0);
      from_bf16(*ctx_, w16_.data() + r0 * d_, tmp.data(), rows * d_);
      tmp.download(st.weight.data() + r0 * d_, static_cast<size_t>(rows * d_), s);
      ctx_->synchronize();
    }
  } else {
    get(w_, st.weight);
  }
  get(b_, st.bias);
  get(w_s1_, st.weight_opt1);
  get(w_s2_, st.weight_opt2);
  get(b_s1_, st.bias_opt1);
  get(b_s2_, st.bias_opt2);
  ctx_->synchronize();
  return st;
}

void DenseBlockCuda::upload(const HostState& st) {
  const auto s = ctx_->stream();
  const auto wn = static_cast<size_t>(n_ * d_);
  auto check = [&](const std::vector<float>& v, size_t want, const char* name) {
    XMC_CHECK(v.size() == want, "cuda dense upload: {} has {} values, expected {}", name, v.size(),
              want);
  };
  check(st.weight, wn, "weight");
  check(st.bias, b_.size(), "bias");
  check(st.weight_opt1, w_s1_.size(), "weight_opt1");
  check(st.weight_opt2, w_s2_.size(), "weight_opt2");
  check(st.bias_opt1, b_s1_.size(), "bias_opt1");
  check(st.bias_opt2, b_s2_.size(), "bias_opt2");
  if (bf16()) {
    // Through dw_ (chunk×d fp32), one chunk at a time, rounded to bf16 on the device.
    for (int64_t r0 = 0; r0 < n_; r0 += chunk_) {
      const int64_t rows = std::min(chunk_, n_ - r0);
      dw_.upload(st.weight.data() + r0 * d_, static_cast<size_t>(rows * d_), s);
      to_bf16(*ctx_, ConstMatrix(dw_.data(), rows, d_),
              Bf16Matrix(w16_.data() + r0 * d_, rows, d_));
      ctx_->synchronize();
    }
  } else {
    w_.upload(st.weight.data(), wn, s);
  }
  b_.upload(st.bias.data(), st.bias.size(), s);
  w_s1_.upload(st.weight_opt1.data(), st.weight_opt1.size(), s);
  w_s2_.upload(st.weight_opt2.data(), st.weight_opt2.size(), s);
  b_s1_.upload(st.bias_opt1.data(), st.bias_opt1.size(), s);
  b_s2_.upload(st.bias_opt2.data(), st.bias_opt2.size(), s);
  ctx_->synchronize();
}

int64_t DenseBlockCuda::analytic_bytes() const {
  const int64_t wbytes = bf16() ? 2 : 4;
  const int64_t states = optimizer_state_arrays(optim_);
  int64_t bytes = n_ * d_ * wbytes + 4 * n_;                         // weights, bias
  bytes += states * 4 * (n_ * d_ + n_);                              // optimizer state
  bytes += 4 * (max_batch_ * chunk_ + chunk_ * d_ + chunk_);         // z, dW_c, db_c
  if (bf16()) bytes += 2 * (max_batch_ * chunk_ + max_batch_ * d_);  // G, h in bf16
  if (loss_ == LossType::softmax) bytes += 2 * 4 * max_batch_;
  bytes += static_cast<int64_t>(sizeof(LossAccum)) + 8 * (max_batch_ + 1);
  return bytes;
}

}  // namespace xmc::gpu
