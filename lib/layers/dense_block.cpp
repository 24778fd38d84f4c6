#include "layers/dense_block.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/resources.h"
#include "dist/comm.h"
#include "layers/weight_init.h"
#include "ops/dense.h"
#include "ops/encoder.h"
#include "ops/loss.h"
#include "ops/topk.h"

namespace xmc {

DensePrecision dense_precision(Precision precision, bool stochastic_rounding) {
  DensePrecision p{.weights = precision};
  if (stochastic_rounding && precision == Precision::fp32)
    throw_input("model.output.stochastic_rounding needs precision bf16 or fp8 (precision is {})",
                to_string(precision));
  p.stochastic_rounding = stochastic_rounding;
  return p;
}

DenseBlock::DenseBlock(Context& ctx, int64_t d, int64_t lo, int64_t n, int64_t max_batch,
                       int64_t chunk, LossType loss, const OptimizerConfig& optim, uint64_t seed,
                       DensePrecision precision)
    : ctx_(&ctx),
      d_(d),
      lo_(lo),
      n_(n),
      max_batch_(max_batch),
      chunk_(std::min(chunk, n)),
      loss_(loss),
      optim_(optim),
      precision_(precision),
      seed_(seed) {
  XMC_CHECK(d > 0 && n > 0 && max_batch > 0 && chunk > 0, "dense block d={} n={} B={} chunk={}",
            d, n, max_batch, chunk);
  XMC_CHECK(!precision.stochastic_rounding || precision.weights != Precision::fp32,
            "stochastic rounding needs bf16 or fp8 weights (precision fp32 given)");
  // fp8 on the GPU updates a row in a block's shared memory (ops::optimizer_update_fp8).
  if (ctx.on_gpu() && precision.weights == Precision::fp8 && d > kFp8MaxRowGpu)
    throw_input(
        "model.output.precision fp8 on cuda takes rows of at most {} weights (the output "
        "layer's input width is {}): use bf16, or a narrower encoder or bottleneck",
        kFp8MaxRowGpu, d);
  // The host memory budget (a device block's weights live in GPU memory).
  if (!ctx.on_gpu()) check_host_budget(false);
  p_ = LabelParams(ctx, optim, n, d, precision.weights);
  const auto zn = static_cast<size_t>(max_batch * chunk_);
  z_ = Buffer<float>(ctx, MemTag::workspace, zn);
  dw_ = Buffer<float>(ctx, MemTag::workspace, static_cast<size_t>(chunk_ * d));
  db_ = Buffer<float>(ctx, MemTag::workspace, static_cast<size_t>(chunk_));
  if (gpu_bf16()) {
    g16_ = Buffer<gpu::Bf16>(ctx, MemTag::workspace, zn);
    h16_ = Buffer<gpu::Bf16>(ctx, MemTag::workspace, static_cast<size_t>(max_batch * d));
  }
  if (loss == LossType::softmax) smax_ = SoftmaxState(ctx, max_batch);
  targets_ = LossTargets(ctx, max_batch);
  acc_ = LossAccumulator(ctx);

  // Row by row from Rng::stream(seed, global row), drawn on the host (uploaded on the GPU).
  init_uniform_rows(p_.w.stage_for_write(), n, d, seed, lo);
  p_.w.commit();
}

void DenseBlock::round_h(ConstMatrix h) const {
  if (gpu_bf16()) ops::to_bf16(*ctx_, h, gpu::Bf16Matrix(h16_.data(), h.rows, d_));
}

gpu::ConstBf16Matrix DenseBlock::chunk16(int64_t row0, int64_t c) const {
  if (p_.w.bf16()) return {p_.w.b16() + row0 * d_, c, d_};
  return {reinterpret_cast<const gpu::Bf16*>(dw_.data()), c, d_};
}

void DenseBlock::logits(ConstMatrix h, int64_t row0, Matrix z) const {
  const int64_t c = z.cols;
  if (gpu_bf16()) {
    if (p_.w.fp8())  // widened into bf16 at the start of dw_ (half of its bytes)
      ops::widen_fp8(*ctx_, gpu::ConstFp8Matrix(p_.w.f8() + row0 * d_, c, d_),
                     p_.w.row_scale() + row0,
                     gpu::Bf16Matrix(reinterpret_cast<gpu::Bf16*>(dw_.data()), c, d_));
    ops::gemm_nt(*ctx_, gpu::ConstBf16Matrix(h16_.data(), h.rows, d_), chunk16(row0, c), z);
  } else if (narrow()) {  // CPU: the chunk widened into dw_, then the fp32 sgemm
    const Matrix wc(dw_.data(), c, d_);
    if (p_.w.fp8())
      ops::widen_fp8(gpu::ConstFp8Matrix(p_.w.f8() + row0 * d_, c, d_), p_.w.row_scale() + row0,
                     wc);
    else
      ops::widen_bf16(gpu::ConstBf16Matrix(p_.w.b16() + row0 * d_, c, d_), wc);
    ops::gemm_nt(*ctx_, h, wc, z);
  } else {
    ops::gemm_nt(*ctx_, h, ConstMatrix(p_.w.f32() + row0 * d_, z.cols, d_), z);
  }
}

void DenseBlock::set_comm(Comm* comm) {
  comm_ = comm;
  reduce_ = comm != nullptr ? row_reductions(*comm) : RowReductions{};
}

StepStats DenseBlock::train_step(const CsrMatrix& targets, ConstMatrix h, Matrix dh,
                                 const LrState& lr) {
  const Context& ctx = *ctx_;
  const int64_t batch = h.rows;
  XMC_CHECK(batch >= 1 && batch <= max_batch_, "batch of {} rows outside the workspace for 1..{}",
            batch, max_batch_);
  XMC_CHECK(h.cols == d_ && dh.rows == batch && dh.cols == d_,
            "dense step shapes h[{}×{}] dh[{}×{}], d={}", h.rows, h.cols, dh.rows, dh.cols, d_);
  XMC_CHECK(targets.rows == batch && lo_ + n_ <= targets.cols,
            "targets [{}×{}] for a batch of {} and labels [{}, {})", targets.rows, targets.cols,
            batch, lo_, lo_ + n_);
  Stopwatch sw;
  // Adds the time since the last mark to one of the timings.
  auto mark = [&](double DenseTimings::*field) {
    if (timings_) timings_->*field += sw.lap();
  };
  targets_.assign(targets);
  acc_.reset();
  round_h(h);
  if (loss_ == LossType::softmax) {
    // Pass 1: logsumexp over all labels of the block.
    smax_.reset(batch);
    for (int64_t c0 = 0; c0 < n_; c0 += chunk_) {
      const int64_t c = std::min(chunk_, n_ - c0);
      Matrix z(z_.data(), batch, c);
      logits(h, c0, z);
      mark(&DenseTimings::forward);
      softmax_accumulate(ctx, z, p_.b.data() + c0, smax_);
      mark(&DenseTimings::loss);
    }
    if (comm_ != nullptr)
      smax_.merge(reduce_);
  }
  ops::set_zero(ctx, dh);
  mark(&DenseTimings::backward_input);

  for (int64_t c0 = 0; c0 < n_; c0 += chunk_) {
    const int64_t c = std::min(chunk_, n_ - c0);
    Matrix z(z_.data(), batch, c);
    logits(h, c0, z);
    mark(&DenseTimings::forward);
    // z becomes G = dL/dZ (already divided by the batch size), and its bf16 copy.
    const gpu::Bf16Matrix g16 =
        gpu_bf16() ? gpu::Bf16Matrix(g16_.data(), batch, c) : gpu::Bf16Matrix();
    if (loss_ == LossType::softmax) {
      softmax_loss_grad(ctx, z, p_.b.data() + c0, smax_, targets_, lo_ + c0, batch, acc_, g16);
    } else {
      elementwise_loss_grad(ctx, loss_, z, p_.b.data() + c0, targets_, lo_ + c0, batch, acc_, g16);
    }
    if (sparse_threshold_ > 0.0)
      sparsify_gradient(ctx, z, static_cast<float>(sparse_threshold_ / batch),
                        sparse_stream(seed_, lr.step), lo_ + c0, targets.cols, g16);
    mark(&DenseTimings::loss);
    // dh += G·W_c with the weights before this step's update; dW_c = Gᵀ·h, db_c = column
    // sums of G; then update the chunk. bf16 / fp8 (CPU), fp8 (GPU): dw_ holds W_c widened
    // by logits() until dW_c overwrites it.
    const Matrix dw(dw_.data(), c, d_);
    int64_t touched = c;  // rows of dW_c written (lazy_: the non-empty columns of G)
    if (sparse_cpu()) {
      touched = sparse_backward(z, narrow() ? dw_.data() : p_.w.f32() + c0 * d_, h, dh);
      mark(&DenseTimings::backward_input);
    } else if (gpu_bf16()) {
      const gpu::ConstBf16Matrix g(g16.data, batch, c);
      ops::gemm_nn(ctx, g, chunk16(c0, c), dh, 1.0f, 1.0f);
      mark(&DenseTimings::backward_input);
      ops::gemm_tn(ctx, g, gpu::ConstBf16Matrix(h16_.data(), batch, d_), dw);
    } else {
      const float* wc = narrow() ? dw_.data() : p_.w.f32() + c0 * d_;
      ops::gemm_nn(ctx, z, ConstMatrix(wc, c, d_), dh, 1.0f, 1.0f);
      mark(&DenseTimings::backward_input);
      ops::gemm_tn(ctx, z, h, dw);
    }
    ops::column_sums(ctx, z, db_.data());
    mark(&DenseTimings::backward_weight);
    if (lazy_ && sparse_cpu()) {
      // The touched rows only: their bias gradients gathered in place (cols ascend, so
      // cols[u] ≥ u), their chunk indices made block rows.
      uint32_t* ids = sparse_.cols.data();
      float* db = db_.data();
      for (int64_t u = 0; u < touched; ++u) {
        db[u] = db[ids[u]];
        ids[u] += static_cast<uint32_t>(c0);
      }
      p_.update_rows(*ctx_, optim_, lr.lr, lr.step, ids, touched, dw_.data(), db);
    } else {
      p_.update(*ctx_, optim_, lr.lr, lr.step, c0, c, dw_.data(), db_.data(),
                WeightArray::rounding_key(precision_.stochastic_rounding, seed_, lo_ + c0));
    }
    mark(&DenseTimings::update);
  }
  const gpu::LossAccum acc = acc_.read();
  StepStats stats;
  stats.loss = acc.loss / static_cast<double>(batch);
  stats.zero_grads = static_cast<int64_t>(acc.zero_grads);
  stats.grads = batch * n_;
  return stats;
}

void DenseBlock::check_host_budget(bool sparse) const {
  check_memory_plan(
      planned_bytes(false, d_, n_, max_batch_, chunk_, loss_, optim_, precision_.weights, sparse)
          .total(),
      fmt::format("a dense output block of {} labels × d = {} (weights, {} "
                  "optimizer state arrays, workspace{})",
                  n_, d_, optimizer_state_arrays(optim_),
                  sparse ? " with model.output.sparse_gradient's" : ""),
      sparse ? "a smaller model.output.chunk_size or train.batch_size (the sparse gradient "
               "keeps 2 arrays of batch × chunk), or sparse_gradient: 0"
             : "fewer labels, a narrower encoder output (the last model.encoder layer's "
               "out) or an optimizer with less state (optim.output.type)");
}

void DenseBlock::set_sparse_gradient(double threshold, bool lazy) {
  XMC_CHECK(threshold >= 0.0 && std::isfinite(threshold), "sparse gradient threshold {}",
            threshold);
  if (lazy) {
    if (threshold == 0.0)
      throw_input(
          "model.output.lazy_update updates the rows that the sparsified gradient touches: it "
          "needs model.output.sparse_gradient > 0 (it is 0)");
    if (narrow() || optim_.state_precision == StatePrecision::bf16 || optim_.rowwise)
      throw_input(
          "model.output.lazy_update needs fp32 label weights and optimizer state (precision "
          "fp32, optim.output.state_precision fp32, rowwise false)");
  }
  sparse_threshold_ = threshold;
  lazy_ = lazy && !ctx_->on_gpu();
  if (!sparse_cpu()) return;
  check_host_budget(true);  // before the workspaces are allocated
  Context& ctx = *ctx_;
  const auto zn = static_cast<size_t>(max_batch_ * chunk_), c = static_cast<size_t>(chunk_);
  constexpr MemTag ws = MemTag::workspace;
  sparse_.start = Buffer<int64_t>(ctx, ws, c + 1);
  sparse_.cols = Buffer<uint32_t>(ctx, ws, c);
  sparse_.rows = Buffer<uint32_t>(ctx, ws, zn);
  sparse_.col_values = Buffer<float>(ctx, ws, zn);
  uint32_t* cols = sparse_.cols.data();
  for (size_t j = 0; j < c; ++j) cols[j] = static_cast<uint32_t>(j);
}

int64_t DenseBlock::sparse_backward(ConstMatrix z, const float* wc, ConstMatrix h, Matrix dh) {
  const int64_t rows = z.rows, c = z.cols;
  int64_t* start = sparse_.start.data();
  uint32_t* crow = sparse_.rows.data();
  float* cval = sparse_.col_values.data();
  // G by column, straight from z: each thread a range of columns over every row — count
  // into start[j + 1], the prefix sums, then the fill (rows ascending within a column).
  start[0] = 0;
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t j0 = c * t / threads, j1 = c * (t + 1) / threads;
    std::fill(start + j0 + 1, start + j1 + 1, int64_t{0});
    for (int64_t r = 0; r < rows; ++r) {
      const float* zr = z.row(r);
      for (int64_t j = j0; j < j1; ++j) start[j + 1] += zr[j] != 0.0f ? 1 : 0;
    }
#pragma omp barrier
#pragma omp single
    for (int64_t j = 0; j < c; ++j) start[j + 1] += start[j];
    // (single's barrier: every count is a start now)
    std::vector<int64_t> next(start + j0, start + j1);
    for (int64_t r = 0; r < rows; ++r) {
      const float* zr = z.row(r);
      for (int64_t j = j0; j < j1; ++j)
        if (zr[j] != 0.0f) {
          const int64_t e = next[static_cast<size_t>(j - j0)]++;
          crow[e] = static_cast<uint32_t>(r);
          cval[e] = zr[j];
        }
    }
  }
  // lazy_: only the non-empty columns, compacted in place (u ≤ j).
  uint32_t* cols = sparse_.cols.data();
  int64_t count = c;
  if (lazy_) {
    const int64_t nnz = start[c];
    count = 0;
    for (int64_t j = 0; j < c; ++j)
      if (start[j + 1] > start[j]) {
        cols[count] = static_cast<uint32_t>(j);
        start[count++] = start[j];
      }
    start[count] = nnz;
  }
  // dh += G·W_c (each thread a block of dh's rows, the columns in order), then dW_c = Gᵀ·h
  // through the sparse layer's weight gradient over the columns (without lazy_ every
  // column of the chunk: empty ones give zero rows).
  const gpu::DeviceCsrByColumn g{cols, start, crow, cval, count};
  ops::csc_accumulate(*ctx_, g, wc, dh);
  ops::csr_column_grad(*ctx_, g, h, Matrix(dw_.data(), count, d_));
  return count;
}

void DenseBlock::scores(ConstMatrix h, int64_t lo, Matrix out) const {
  const int64_t r0 = lo - lo_;
  XMC_CHECK(r0 >= 0 && r0 + out.cols <= n_, "scores of labels [{}, {}) outside [{}, {})", lo,
            lo + out.cols, lo_, lo_ + n_);
  XMC_CHECK(h.cols == d_ && out.rows == h.rows, "scores shapes h[{}×{}] out[{}×{}], d={}", h.rows,
            h.cols, out.rows, out.cols, d_);
  XMC_CHECK(!gpu_bf16() || h.rows <= max_batch_, "bf16 scores of {} rows, workspace for {}", h.rows,
            max_batch_);
  round_h(h);
  // Narrow weights are widened a chunk at a time into dw_ (chunk_ rows).
  const int64_t step = narrow() ? chunk_ : std::max<int64_t>(out.cols, 1);
  for (int64_t c0 = 0; c0 < out.cols; c0 += step)
    logits(h, r0 + c0, Matrix(out.data + c0, out.rows, std::min(step, out.cols - c0), out.ld));
  ops::add_row_vector(*ctx_, out, p_.b.data() + r0);
}

TopK DenseBlock::topk(ConstMatrix h, int k, int64_t block_rows) const {
  XMC_CHECK(h.cols == d_, "top-k: h has {} columns, d = {}", h.cols, d_);
  if (gpu_bf16()) block_rows = std::min(block_rows, max_batch_);
  ConstMatrix hb;
  return stream_topk(
      *ctx_, h.rows, k, block_rows, n_, chunk_, lo_,
      [&](int64_t r0, int64_t rows) {
        hb = h.rows_range(r0, rows);
        round_h(hb);
      },
      [&](int64_t c0, Matrix z) {
        logits(hb, c0, z);
        ops::add_row_vector(*ctx_, z, p_.b.data() + c0);
      });
}

std::vector<TensorRef> DenseBlock::state(const std::string& prefix) { return p_.refs(prefix); }

void DenseBlock::sync_state(StateSync s) { p_.sync(s); }

LayerBytes DenseBlock::planned_bytes(bool gpu, int64_t d, int64_t n, int64_t max_batch,
                                     int64_t chunk, LossType loss, const OptimizerConfig& optim,
                                     Precision precision, bool sparse_gradient) {
  const double dd = static_cast<double>(d), b = static_cast<double>(max_batch);
  const double c = static_cast<double>(std::min(chunk, n));
  LayerBytes bytes = LabelParams::planned_bytes(optim, n, d, precision);  // W, b, their state
  bytes.workspace = 4.0 * (b * c + c * dd + c);  // z, dW_c (also W_c widened), db_c
  const bool bf16 = precision != Precision::fp32;
  if (sparse_gradient && !gpu)                   // G by column
    bytes.workspace += 8.0 * (c + 1) + 4.0 * (2.0 * b * c + c);
  if (gpu) {
    if (bf16) bytes.workspace += 2.0 * (b * c + b * dd);        // G, h rounded
    if (loss == LossType::softmax) bytes.workspace += 8.0 * b;  // row max, sum
    bytes.workspace += sizeof(gpu::LossAccum) + 8.0 * (b + 1);  // the step's loss, target rows
  }
  return bytes;
}

StepWork DenseBlock::planned_step(int64_t d, int64_t n, int64_t batch, LossType loss,
                                  const OptimizerConfig& optim, Precision precision,
                                  bool sparse_gradient) {
  const double b = static_cast<double>(batch), nd = static_cast<double>(n) * static_cast<double>(d);
  // GEMMs: the logits, dh += G·W_c, dW_c = Gᵀ·h (softmax: the logits twice); with a sparse
  // gradient only the logits (the backward's cost follows G's non-zeros, not modelled: a
  // lower bound). Bytes: the loss pass over the logits (read,
  // write; softmax's first pass reads them once more), their column sums, and the update
  // (read W and dW, write W, read and write each per-weight state array: none with
  // rowwise).
  const double passes = (loss == LossType::softmax ? 2.0 : 1.0) + (sparse_gradient ? 0.0 : 2.0);
  const double wb = weight_bytes(precision);
  const double state =
      (optim.rowwise ? 0.0 : optimizer_state_arrays(optim) * state_slot_bytes(optim)) +
      (optim.kahan ? 2.0 : 0.0);  // the bf16 compensation, read and written
  return StepWork::of(2.0 * b * nd * passes,
                      4.0 * b * static_cast<double>(n) * passes + nd * (2.0 * wb + 4.0 + 2.0 * state));
}

int64_t DenseBlock::analytic_bytes() const {
  return planned_bytes(ctx_->on_gpu(), d_, n_, max_batch_, chunk_, loss_, optim_, p_.w.precision(),
                       sparse_threshold_ > 0.0)
      .rounded();
}

}  // namespace xmc
