#include "layers/sampled_block.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "layers/weight_init.h"
#include "ops/dense.h"
#include "ops/topk.h"

namespace xmc {

namespace {
// Touched rows per weight-gradient block: a [block×d] workspace instead of [touched×d].
// CPU: 1024 (the blocks cost nothing). GPU: the reserved entries up to 32 768 rows (a
// launch pair a block: a batch of 256 × 1024 candidates touching most of them takes 8,
// and at d = 768 the workspace is 100 MB, not the 805 MB of one block for them all).
int64_t grad_rows(bool gpu, int64_t n, int64_t hint) {
  return gpu ? std::min({n, hint, int64_t{32768}}) : std::min(n, int64_t{1024});
}
}  // namespace

SampledBlock::SampledBlock(Context& ctx, const OptimizerConfig& optim, int64_t lo, int64_t n,
                           int64_t d, uint64_t seed, int64_t max_batch, int64_t chunk,
                           int64_t nnz_hint, bool drawn)
    : ctx_(&ctx), optim_(optim), lo_(lo), n_(n), d_(d), chunk_(std::min(chunk, n)) {
  XMC_CHECK(lo >= 0 && n > 0 && d > 0 && max_batch > 0 && chunk > 0 && nnz_hint >= 0,
            "sampled block labels [{}, +{}) d={} B={} chunk={} nnz hint {}", lo, n, d, max_batch,
            chunk, nnz_hint);
  XMC_CHECK(n <= int64_t{std::numeric_limits<uint32_t>::max()},
            "sampled block: {} labels do not fit uint32 ids", n);
  const int64_t hint = std::max<int64_t>(nnz_hint, 1);
  block_ = grad_rows(ctx.on_gpu(), n, hint);
  refuse_dense_only_state(optim);
  p_ = LabelParams(ctx, optim, n, d);
  init_uniform_rows(p_.w.stage_for_write(), n, d, seed, lo);  // same initialisation as `dense`
  p_.w.commit();
  dw_ = Buffer<float>(ctx, MemTag::workspace, static_cast<size_t>(block_ * d));
  db_ = Buffer<float>(ctx, MemTag::workspace, static_cast<size_t>(block_));
  ensure_size(zg_, ctx, MemTag::workspace, hint);
  staging_ = ops::CandidateStaging(ctx, max_batch, hint, std::min(hint, n));
  max_batch_ = max_batch;
  nnz_hint_ = nnz_hint;
  if (drawn) {
    device_ = std::make_unique<DeviceGroups>();
    device_->acc = LossAccumulator(ctx);
    ensure_size(device_->labels, ctx, MemTag::workspace, hint);
    ensure_size(device_->row, ctx, MemTag::workspace, hint);
    ensure_size(device_->entry, ctx, MemTag::workspace, hint);
    ensure_size(device_->ptr, ctx, MemTag::workspace, hint + 1);
  }
}

const std::vector<uint32_t>& SampledBlock::train_step(const ops::CandidateCsr& cand, ConstMatrix h,
                                                      Matrix dh, const LrState& lr,
                                                      const LossGrad& loss_grad) {
  XMC_CHECK(h.rows == cand.rows && h.cols == d_ && dh.rows == h.rows && dh.cols == d_,
            "sampled step: h [{}×{}], dh [{}×{}], {} candidate rows, d={}", h.rows, h.cols,
            dh.rows, dh.cols, cand.rows, d_);
  const Context& ctx = *ctx_;
  ops::EntryGroupsBuffers groups = ops::group_entries_by_label(cand, n_);
  ops::EntryGroups all;
  const ops::CandidateCsr dc = staging_.stage(cand, &groups, &all);
  const auto nnz = static_cast<size_t>(cand.nnz);
  ensure_size(zg_, *ctx_, MemTag::workspace, cand.nnz);
  ops::sampled_scores(ctx, p_.w.f32(), p_.b.data(), d_, dc, h, zg_.data());
  loss_grad(std::span<float>(zg_.stage(nnz), nnz));
  zg_.commit(nnz);
  // dh with the weights before this step's update (the op accumulates).
  ops::set_zero(ctx, dh);
  ops::sampled_input_grad(ctx, p_.w.f32(), d_, dc, zg_.data(), dh);
  for (int64_t u0 = 0; u0 < all.groups; u0 += block_) {
    const int64_t m = std::min(block_, all.groups - u0);
    const ops::EntryGroups part{all.labels + u0, all.ptr + u0, all.entry, all.row, m, all.nnz};
    ops::sampled_weight_grad(ctx, part, zg_.data(), h, Matrix(dw_.data(), m, d_), db_.data());
    p_.update_rows(ctx, optim_, lr.lr, lr.step, part.labels, m, dw_.data(), db_.data());
  }
  touched_ = std::move(groups.labels);
  return touched_;
}

SampledBlock::DrawnStepLoss SampledBlock::train_step_drawn(const ops::CandidateCsr& cand,
                                                           const uint8_t* positive,
                                                           const float* weight, LossType loss,
                                                           ConstMatrix h, Matrix dh,
                                                           const LrState& lr) {
  XMC_CHECK(h.rows == cand.rows && h.cols == d_ && dh.rows == h.rows && dh.cols == d_,
            "sampled drawn step: h [{}×{}], dh [{}×{}], {} candidate rows, d={}", h.rows, h.cols,
            dh.rows, dh.cols, cand.rows, d_);
  Context& ctx = *ctx_;
  if (!device_) {
    device_ = std::make_unique<DeviceGroups>();
    device_->acc = LossAccumulator(ctx);
  }
  DeviceGroups& g = *device_;
  const int64_t nnz = std::max<int64_t>(cand.nnz, 1);
  ensure_size(g.labels, ctx, MemTag::workspace, nnz);
  ensure_size(g.row, ctx, MemTag::workspace, nnz);
  ensure_size(g.entry, ctx, MemTag::workspace, nnz);
  ensure_size(g.ptr, ctx, MemTag::workspace, nnz + 1);
  ensure_size(zg_, ctx, MemTag::workspace, nnz);
  const int64_t groups = ops::group_entries_by_label(
      ctx, cand, n_, g.scratch, {g.labels.data(), g.ptr.data(), g.entry.data(), g.row.data()});
  ops::sampled_scores(ctx, p_.w.f32(), p_.b.data(), d_, cand, h, zg_.data());
  g.acc.reset();
  candidate_loss_grad(ctx, loss, cand.indptr, cand.rows, cand.nnz, positive, weight, cand.rows,
                      zg_.data(), g.acc);
  // dh with the weights before this step's update (the op accumulates).
  ops::set_zero(ctx, dh);
  ops::sampled_input_grad(ctx, p_.w.f32(), d_, cand, zg_.data(), dh);
  for (int64_t u0 = 0; u0 < groups; u0 += block_) {
    const int64_t m = std::min(block_, groups - u0);
    const ops::EntryGroups part{
        g.labels.data() + u0, g.ptr.data() + u0, g.entry.data(), g.row.data(), m, cand.nnz};
    ops::sampled_weight_grad(ctx, part, zg_.data(), h, Matrix(dw_.data(), m, d_), db_.data());
    p_.update_rows(ctx, optim_, lr.lr, lr.step, part.labels, m, dw_.data(), db_.data());
  }
  const gpu::LossAccum a = g.acc.read();
  return {a.loss, static_cast<int64_t>(a.zero_grads), g.labels.data(), groups};
}

std::vector<float> SampledBlock::candidate_scores(const ops::CandidateCsr& cand, ConstMatrix h) {
  XMC_CHECK(h.rows == cand.rows && h.cols == d_, "candidate scores: h [{}×{}], {} rows, d={}",
            h.rows, h.cols, cand.rows, d_);
  const ops::CandidateCsr dc = staging_.stage(cand, nullptr, nullptr);
  ensure_size(zg_, *ctx_, MemTag::workspace, cand.nnz);
  ops::sampled_scores(*ctx_, p_.w.f32(), p_.b.data(), d_, dc, h, zg_.data());
  std::vector<float> out(static_cast<size_t>(cand.nnz));
  zg_.copy_to_host(out.data(), out.size());
  return out;
}

void SampledBlock::scores(ConstMatrix h, int64_t lo, Matrix out) const {
  XMC_CHECK(lo >= lo_ && lo + out.cols <= lo_ + n_ && h.cols == d_ && out.rows == h.rows,
            "sampled scores: h [{}×{}], out [{}×{}] at label {}, labels [{}, {}) d={}", h.rows,
            h.cols, out.rows, out.cols, lo, lo_, lo_ + n_, d_);
  const int64_t r0 = lo - lo_;
  ops::gemm_nt(*ctx_, h, ConstMatrix(p_.w.f32() + r0 * d_, out.cols, d_), out);
  ops::add_row_vector(*ctx_, out, p_.b.data() + r0);
}

TopK SampledBlock::topk(ConstMatrix h, int k, int64_t block_rows) const {
  XMC_CHECK(h.cols == d_, "top-k: h has {} columns, d = {}", h.cols, d_);
  ConstMatrix hb;
  return stream_topk(
      *ctx_, h.rows, k, block_rows, n_, chunk_, lo_,
      [&](int64_t r0, int64_t rows) { hb = h.rows_range(r0, rows); },
      [&](int64_t c0, Matrix z) { scores(hb, lo_ + c0, z); });
}

std::vector<float> SampledBlock::rows_to_host(std::span<const uint32_t> labels) const {
  const auto count = static_cast<int64_t>(labels.size());
  std::vector<float> out(static_cast<size_t>(count * d_));
  if (count == 0) return out;
  for (uint32_t l : labels) XMC_CHECK(l < n_, "rows of label {} >= {}", l, n_);
  Buffer<uint32_t> ids(*ctx_, MemTag::workspace, labels.size());
  Buffer<float> rows(*ctx_, MemTag::workspace, out.size());
  ids.copy_from_host(labels.data(), labels.size());
  ops::gather_rows(*ctx_, p_.w.f32(), ids.data(), count, d_, rows.data());
  rows.copy_to_host(out.data(), out.size());
  return out;
}

ConstMatrix SampledBlock::host_weights() { return {p_.w.stage(), n_, d_}; }
const float* SampledBlock::host_bias() { return p_.b.stage(); }
void SampledBlock::release_host() {
  p_.w.release();
  p_.b.release();
}

std::vector<TensorRef> SampledBlock::state() { return p_.refs(); }

void SampledBlock::sync_state(StateSync s) { p_.sync(s); }

int64_t SampledBlock::analytic_bytes() const {
  return planned_bytes(ctx_->on_gpu(), optim_, n_, d_, max_batch_, nnz_hint_, device_ != nullptr)
      .rounded();
}

StepWork SampledBlock::planned_step(const OptimizerConfig& optim, int64_t n, int64_t d, double nnz,
                                    bool host) {
  const double dd = static_cast<double>(d), touched = std::min(static_cast<double>(n), nnz);
  StepWork w = StepWork::of(
      6.0 * nnz * dd, 4.0 * (3.0 * nnz * dd + 2.0 * nnz +
                             touched * (dd + 1.0) * (3.0 + 2.0 * optimizer_state_arrays(optim))));
  w.host_candidates = host;
  return w;
}

LayerBytes SampledBlock::planned_bytes(bool gpu, const OptimizerConfig& optim, int64_t n, int64_t d,
                                       int64_t max_batch, int64_t nnz_hint, bool drawn) {
  // As the constructor sizes them: the entries reserved, the touched rows per block.
  const int64_t hint = std::max<int64_t>(nnz_hint, 1);
  const int64_t block = grad_rows(gpu, n, hint);
  LayerBytes bytes = LabelParams::planned_bytes(optim, n, d, Precision::fp32);
  // zg [hint], dW [block×d], db [block], the staged candidates (GPU)
  bytes.workspace = 4.0 * static_cast<double>(hint + block * d + block) +
                    ops::CandidateStaging::planned_bytes(gpu, max_batch, hint, std::min(hint, n));
  // train_step_drawn's grouping (labels, rows [hint], entries [hint], ptr [hint + 1]) and
  // on the GPU its loss accumulator
  if (drawn)
    bytes.workspace += 24.0 * static_cast<double>(hint) + 8.0 +
                       (gpu ? static_cast<double>(sizeof(gpu::LossAccum)) : 0.0);
  return bytes;
}

}  // namespace xmc
