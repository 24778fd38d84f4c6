#include "layers/bottleneck.h"

#include <cmath>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/dense_ops.h"
#include "kernels/dense_ops_cuda.h"
#include "layers/param_refs.h"
#include "model/optimizer_state.h"

namespace xmc {

BottleneckLayer::BottleneckLayer(const LayerInit& init, const BottleneckConfig& cfg)
    : OutputLayer(init.input_dim, init.num_labels, 0, init.num_labels),
      dim_(cfg.dim),
      optim_(init.optim),
      block_(*init.ctx, cfg.dim, 0, init.num_labels, init.batch_size, cfg.chunk_size,
             parse_loss(cfg.loss), init.optim, init.seed,
             dense_precision_options(*init.ctx, cfg.precision, cfg.stochastic_rounding)) {
  auto& ledger = init.ctx->ledger();
  const int64_t d = init.input_dim;
  const auto pn = static_cast<size_t>(dim_ * d);
  const auto ub = static_cast<size_t>(init.batch_size * dim_);
  // The same initial P on both devices: drawn on the host, uploaded on the GPU.
  std::vector<float> p0(pn);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  Rng rng = Rng::stream(init.seed, 0xb0771e);
  for (auto& x : p0) x = (2.0f * rng.uniformf() - 1.0f) * scale;
  if (init.ctx->on_gpu()) {
    gpu_ = &init.ctx->cuda();
    set_device_views(true);
    const auto s = gpu_->stream();
    p_dev_ = gpu::DeviceBuffer<float>(ledger, MemTag::weights, pn);
    p_dev_.upload(p0.data(), pn, s);
    const int states = optimizer_state_arrays(optim_);
    if (states >= 1) {
      p_s1_dev_ = gpu::DeviceBuffer<float>(ledger, MemTag::optimizer, pn);
      p_s1_dev_.zero(s);
    }
    if (states >= 2) {
      p_s2_dev_ = gpu::DeviceBuffer<float>(ledger, MemTag::optimizer, pn);
      p_s2_dev_.zero(s);
    }
    u_dev_ = gpu::DeviceBuffer<float>(ledger, MemTag::workspace, ub);
    du_dev_ = gpu::DeviceBuffer<float>(ledger, MemTag::workspace, ub);
    dp_dev_ = gpu::DeviceBuffer<float>(ledger, MemTag::workspace, pn);
    gpu_->synchronize();  // p0 is freed on return
    return;
  }
  p_ = HostBuffer<float>(ledger, MemTag::weights, pn);
  std::copy(p0.begin(), p0.end(), p_.data());
  p_s1_ = optimizer_state_buffer(ledger, optim_, 1, pn);
  p_s2_ = optimizer_state_buffer(ledger, optim_, 2, pn);
  u_ = HostBuffer<float>(ledger, MemTag::workspace, ub);
  du_ = HostBuffer<float>(ledger, MemTag::workspace, ub);
  dp_ = HostBuffer<float>(ledger, MemTag::workspace, pn);
}

StepStats BottleneckLayer::train_step_impl(const Batch& batch, ConstMatrix h, Matrix dh,
                                           const LrState& lr) {
  const int64_t b = h.rows;
  const int64_t d = input_dim();
  if (gpu_) {
    // Same sequence as below, on the device (all views device views).
    const ConstMatrix p(p_dev_.data(), dim_, d);
    const Matrix u(u_dev_.data(), b, dim_);
    gpu::gemm_nt(*gpu_, h, p, u);
    const Matrix du(du_dev_.data(), b, dim_);
    StepStats s = block_.train_step(batch.labels, u, du, lr);
    gpu::gemm_nn(*gpu_, du, p, dh);
    gpu::gemm_tn(*gpu_, du, h, Matrix(dp_dev_.data(), dim_, d));
    gpu::optimizer_update(*gpu_, optim_, lr.lr, lr.step, p_dev_.data(), dp_dev_.data(),
                          data_or_null(p_s1_dev_), data_or_null(p_s2_dev_), dim_ * d);
    return s;
  }
  ConstMatrix p(p_.data(), dim_, d);
  Matrix u(u_.data(), b, dim_);
  kernels::gemm_nt(h, p, u);
  Matrix du(du_.data(), b, dim_);
  StepStats s = block_.train_step(batch.labels, u, du, lr);
  // dh = du·P (before P's update), dP = duᵀ·h.
  kernels::gemm_nn(du, p, dh);
  Matrix dp(dp_.data(), dim_, d);
  kernels::gemm_tn(du, h, dp);
  optimizer_update(optim_, lr.lr, lr.step, p_.data(), dp_.data(), data_or_null(p_s1_),
                   data_or_null(p_s2_), dim_ * d);
  return s;
}

Matrix BottleneckLayer::project(ConstMatrix h, std::vector<float>& buf) const {
  buf.resize(static_cast<size_t>(h.rows * dim_));
  Matrix u(buf.data(), h.rows, dim_);
  kernels::gemm_nt(h, ConstMatrix(p_.data(), dim_, input_dim()), u);
  return u;
}

Matrix BottleneckLayer::project_gpu(ConstMatrix h, gpu::DeviceBuffer<float>& buf) const {
  buf = gpu::DeviceBuffer<float>(gpu_->ledger(), MemTag::workspace,
                                 static_cast<size_t>(std::max<int64_t>(1, h.rows * dim_)));
  Matrix u(buf.data(), h.rows, dim_);
  gpu::gemm_nt(*gpu_, h, ConstMatrix(p_dev_.data(), dim_, input_dim()), u);
  return u;
}

void BottleneckLayer::scores_impl(ConstMatrix h, int64_t lo, Matrix out) const {
  if (gpu_) {
    gpu::DeviceBuffer<float> buf;
    block_.scores(project_gpu(h, buf), lo, out);
    gpu_->synchronize();  // buf is freed on return
    return;
  }
  std::vector<float> buf;
  block_.scores(project(h, buf), lo, out);
}

TopK BottleneckLayer::topk_impl(ConstMatrix h, int k) const {
  if (gpu_) {
    gpu::DeviceBuffer<float> buf;
    return block_.topk_gpu(project_gpu(h, buf), k);  // synchronises
  }
  // Project once, then stream the dense block's chunks.
  std::vector<float> buf;
  ConstMatrix u = project(h, buf);
  return stream_topk(h.rows, k, block_.chunk(),
                     [&](int64_t lo, Matrix out) { block_.scores(u, lo, out); });
}

std::vector<TensorRef> BottleneckLayer::state_impl() {
  auto out = block_.state("output/dense/");
  float* p = p_.data();
  float* s1 = data_or_null(p_s1_);
  float* s2 = data_or_null(p_s2_);
  if (gpu_) {
    XMC_CHECK(staging_.staged(), "state() of a device bottleneck before sync_state(to_host)");
    BufferCopies& c = staging_.state();  // projection, its optimizer states
    p = c[0].data();
    s1 = data_or_null(c[1]);
    s2 = data_or_null(c[2]);
  }
  out.push_back({"output/projection", {dim_, input_dim()}, p});
  if (s1) out.push_back({"output/projection_opt1", {dim_, input_dim()}, s1});
  if (s2) out.push_back({"output/projection_opt2", {dim_, input_dim()}, s2});
  return out;
}

void BottleneckLayer::sync_state_impl(StateSync s) {
  block_.sync_state(s);
  if (!gpu_) return;
  staging_.sync(
      s, [&] { return download_buffers(*gpu_, {&p_dev_, &p_s1_dev_, &p_s2_dev_}); },
      [&](const BufferCopies& c) { upload_buffers(*gpu_, {&p_dev_, &p_s1_dev_, &p_s2_dev_}, c); });
}

int64_t BottleneckLayer::analytic_bytes_impl() const {
  const int64_t pn = dim_ * input_dim();
  const int64_t states = optimizer_state_arrays(optim_);
  const int64_t ub = static_cast<int64_t>(gpu_ ? u_dev_.size() : u_.size());
  return block_.analytic_bytes() + 4 * (pn * (1 + states) + 2 * ub + pn);
}

}  // namespace xmc
