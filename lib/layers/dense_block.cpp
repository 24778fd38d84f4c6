#include "layers/dense_block.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/resources.h"
#include "core/rng.h"
#include "kernels/dense_ops.h"
#include "layers/param_refs.h"
#include "layers/weight_init.h"
#include "model/optimizer_state.h"

namespace xmc {

DenseBlock::DenseBlock(Context& ctx, int64_t d, int64_t lo, int64_t n, int64_t max_batch,
                       int64_t chunk, LossType loss, const OptimizerConfig& optim, uint64_t seed)
    : d_(d),
      lo_(lo),
      n_(n),
      max_batch_(max_batch),
      chunk_(std::min(chunk, n)),
      loss_(loss),
      optim_(optim) {
  XMC_CHECK(d > 0 && n > 0 && max_batch > 0 && chunk > 0, "dense block d={} n={} B={} chunk={}",
            d, n, max_batch, chunk);
  check_memory_plan(planned_bytes(d, n, max_batch, chunk, optim),
                    fmt::format("a dense output block of {} labels × d = {} (weights, {} "
                                "optimizer state arrays, workspace)",
                                n, d, optimizer_state_arrays(optim)),
                    "fewer labels, a narrower encoder output (the last model.encoder layer's "
                    "out) or an optimizer with less state (optim.output.type)");
  auto& ledger = ctx.ledger();
  const auto wn = static_cast<size_t>(n * d);
  w_ = HostBuffer<float>(ledger, MemTag::weights, wn);
  b_ = HostBuffer<float>(ledger, MemTag::weights, static_cast<size_t>(n));
  w_s1_ = optimizer_state_buffer(ledger, optim, 1, wn);
  b_s1_ = optimizer_state_buffer(ledger, optim, 1, static_cast<size_t>(n));
  w_s2_ = optimizer_state_buffer(ledger, optim, 2, wn);
  b_s2_ = optimizer_state_buffer(ledger, optim, 2, static_cast<size_t>(n));
  z_ = HostBuffer<float>(ledger, MemTag::workspace, static_cast<size_t>(max_batch * chunk_));
  dw_ = HostBuffer<float>(ledger, MemTag::workspace, static_cast<size_t>(chunk_ * d));
  db_ = HostBuffer<float>(ledger, MemTag::workspace, static_cast<size_t>(chunk_));

  init_uniform_rows(w_.data(), n, d, seed, lo);
}

StepStats DenseBlock::train_step(const CsrMatrix& targets, ConstMatrix h, Matrix dh,
                                 const LrState& lr) {
  const int64_t batch = h.rows;
  XMC_CHECK(batch <= max_batch_, "batch of {} rows exceeds the workspace for {}", batch,
            max_batch_);
  StepStats stats;
  Stopwatch sw;
  // Adds the time since the last mark to one of the timings.
  auto mark = [&](double DenseTimings::*field) {
    if (timings_) {
      timings_->*field += sw.seconds();
      sw.reset();
    }
  };
  SoftmaxStats smax(loss_ == LossType::softmax ? batch : 0);
  if (loss_ == LossType::softmax) {
    // Pass 1: logsumexp over all labels of the block.
    for (int64_t c0 = 0; c0 < n_; c0 += chunk_) {
      const int64_t c = std::min(chunk_, n_ - c0);
      Matrix z(z_.data(), batch, c);
      kernels::gemm_nt(h, weights(c0, c), z);
      kernels::add_row_vector(z, b_.data() + c0);
      mark(&DenseTimings::forward);
      softmax_accumulate(z, smax);
      mark(&DenseTimings::loss);
    }
  }
  for (int64_t i = 0; i < dh.rows; ++i) std::fill(dh.row(i), dh.row(i) + dh.cols, 0.0f);
  mark(&DenseTimings::backward_input);

  for (int64_t c0 = 0; c0 < n_; c0 += chunk_) {
    const int64_t c = std::min(chunk_, n_ - c0);
    Matrix z(z_.data(), batch, c);
    kernels::gemm_nt(h, weights(c0, c), z);
    kernels::add_row_vector(z, b_.data() + c0);
    mark(&DenseTimings::forward);
    // z becomes G = dL/dZ (already divided by the batch size).
    if (loss_ == LossType::softmax) {
      stats.loss += softmax_loss_grad(z, smax, targets, lo_ + c0, batch);
    } else {
      stats.loss += elementwise_loss_grad(loss_, z, targets, lo_ + c0, batch, &stats.zero_grads);
    }
    stats.grads += batch * c;
    mark(&DenseTimings::loss);
    // dh += G·W_c with the weights before this step's update.
    kernels::gemm_nn(z, weights(c0, c), dh, 1.0f, 1.0f);
    mark(&DenseTimings::backward_input);
    // dW_c = Gᵀ·h, db_c = column sums of G; then update the chunk.
    Matrix dw(dw_.data(), c, d_);
    kernels::gemm_tn(z, h, dw);
    kernels::column_sums(z, db_.data());
    mark(&DenseTimings::backward_weight);
    update_chunk(c0, c, lr);
    mark(&DenseTimings::update);
  }
  stats.loss /= static_cast<double>(batch);
  return stats;
}

void DenseBlock::update_chunk(int64_t row0, int64_t rows, const LrState& lr) {
  const int64_t off = row0 * d_;
  optimizer_update(optim_, lr.lr, lr.step, w_.data() + off, dw_.data(), data_or_null(w_s1_, off),
                   data_or_null(w_s2_, off), rows * d_);
  // No weight decay on the bias.
  OptimizerConfig bias_cfg = optim_;
  bias_cfg.weight_decay = 0.0;
  optimizer_update(bias_cfg, lr.lr, lr.step, b_.data() + row0, db_.data(),
                   data_or_null(b_s1_, row0), data_or_null(b_s2_, row0), rows);
}

void DenseBlock::scores(ConstMatrix h, int64_t lo, Matrix out) const {
  const int64_t r0 = lo - lo_;
  XMC_CHECK(r0 >= 0 && r0 + out.cols <= n_, "scores of labels [{}, {}) outside [{}, {})", lo,
            lo + out.cols, lo_, lo_ + n_);
  kernels::gemm_nt(h, weights(r0, out.cols), out);
  kernels::add_row_vector(out, b_.data() + r0);
}

std::vector<TensorRef> DenseBlock::state(const std::string& prefix) {
  std::vector<TensorRef> out = {{prefix + "weight", {n_, d_}, w_.data()},
                                {prefix + "bias", {n_}, b_.data()}};
  if (w_s1_.size()) {
    out.push_back({prefix + "weight_opt1", {n_, d_}, w_s1_.data()});
    out.push_back({prefix + "bias_opt1", {n_}, b_s1_.data()});
  }
  if (w_s2_.size()) {
    out.push_back({prefix + "weight_opt2", {n_, d_}, w_s2_.data()});
    out.push_back({prefix + "bias_opt2", {n_}, b_s2_.data()});
  }
  return out;
}

double DenseBlock::planned_bytes(int64_t d, int64_t n, int64_t max_batch, int64_t chunk,
                                 const OptimizerConfig& optim) {
  const double dd = static_cast<double>(d), nn = static_cast<double>(n);
  const double c = static_cast<double>(std::min(chunk, n));
  const double params = nn * dd + nn;
  const double states = optimizer_state_arrays(optim);
  const double workspace = static_cast<double>(max_batch) * c + c * dd + c;
  return 4.0 * (params * (1.0 + states) + workspace);
}

int64_t DenseBlock::analytic_bytes() const {
  return static_cast<int64_t>(planned_bytes(d_, n_, max_batch_, chunk_, optim_));
}

}  // namespace xmc
