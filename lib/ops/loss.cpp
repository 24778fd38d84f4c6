#include "ops/loss.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "ops/dense.h"
#include "ops/fast_math.h"

namespace xmc {

namespace {

// The row's targets inside the chunk [lo, hi): a sub-range of the sorted CSR row found by
// binary search, so a chunk costs O(c + log nnz) per row, never a dense B×L target matrix.
struct ChunkTargets {
  const uint32_t* first;
  const uint32_t* last;
};

ChunkTargets chunk_targets(const CsrMatrix& t, int64_t r, int64_t lo, int64_t hi) {
  const uint32_t* b = t.row_indices(r);
  const uint32_t* e = b + t.row_nnz(r);
  const auto below = [](uint32_t a, uint64_t v) { return a < v; };
  const uint32_t* first = std::lower_bound(b, e, static_cast<uint64_t>(lo), below);
  const uint32_t* last = std::lower_bound(first, e, static_cast<uint64_t>(hi), below);
  return {first, last};
}

// The chunk's shapes; `type` (that of an elementwise loss) must not be softmax.
void check_chunk(ConstMatrix logits, const CsrMatrix& targets, int64_t lo, int64_t batch_size,
                 LossType type = LossType::bce) {
  XMC_CHECK(logits.rows == targets.rows, "logits have {} rows, targets {}", logits.rows,
            targets.rows);
  XMC_CHECK(batch_size > 0, "batch_size = {}", batch_size);
  XMC_CHECK(lo >= 0 && lo + logits.cols <= targets.cols,
            "label chunk [{}, {}) outside the targets' {} labels", lo, lo + logits.cols,
            targets.cols);
  if (type == LossType::softmax)
    throw_error(
        "elementwise_loss_grad: softmax is not elementwise; use "
        "softmax_accumulate + softmax_loss_grad");
}

// The same for the forms on the Context's device, before the branch; a bf16 copy of the
// gradient (the shape of the logits) exists only on a CUDA Context.
void check_chunk(const Context& ctx, ConstMatrix logits, const CsrMatrix& targets, int64_t lo,
                 int64_t batch_size, gpu::Bf16Matrix g_bf16, LossType type = LossType::bce) {
  check_chunk(logits, targets, lo, batch_size, type);
  XMC_CHECK(
      !g_bf16.data || (ctx.on_gpu() && g_bf16.rows == logits.rows && g_bf16.cols == logits.cols),
      "a bf16 gradient copy [{}×{}] of logits [{}×{}] on device {}", g_bf16.rows, g_bf16.cols,
      logits.rows, logits.cols, to_string(ctx.device()));
}

// bce's pass over the row z [c] with every entry treated as a negative, one exp per entry:
// z[j] becomes sigmoid(z[j])·inv_bf·weight(j); returns sum_j weight(j)·softplus(z[j]),
// summed in double (chunking must not change the total). weight(j) is w[j], or the
// constant 1 (× 1 is exact, folded away). A function, not a lambda capturing z: under
// `omp simd` GCC re-read a captured pointer per element and turned the row into gathers and
// scatters (3× slower).
template <class Weight>
double bce_entries(float* z, int64_t c, float inv_bf, Weight weight) {
  double row_loss = 0.0;
#pragma omp simd reduction(+ : row_loss)
  for (int64_t j = 0; j < c; ++j) {
    const float x = z[j];
    const float e = exp_approx(-std::fabs(x));
    row_loss += static_cast<double>(weight(j)) *
                static_cast<double>(std::max(x, 0.0f) + log1p_unit_approx(e));
    const float sig = (x >= 0.0f ? 1.0f : e) / (1.0f + e);
    z[j] = sig * inv_bf * weight(j);
  }
  return row_loss;
}

// bce: every entry is first treated as a negative (bce_entries), then the few positives of
// the row are corrected: loss -= z, gradient -= 1/B. log(1+exp(-y·z)) = softplus(z) -
// [pos]·z and d/dz = sigmoid(z) - [pos].
double bce_row(float* z, int64_t c, int64_t lo, ChunkTargets tg, double inv_b, const float* w) {
  double loss = 0.0;
  for (const uint32_t* p = tg.first; p != tg.last; ++p)
    loss -= w ? static_cast<double>(w[*p - lo]) * z[*p - lo] : z[*p - lo];
  const float inv_bf = static_cast<float>(inv_b);
  loss += w == nullptr ? bce_entries(z, c, inv_bf, [](int64_t) { return 1.0f; })
                       : bce_entries(z, c, inv_bf, [w](int64_t j) { return w[j]; });
  for (const uint32_t* p = tg.first; p != tg.last; ++p)
    z[*p - lo] -= w ? inv_bf * w[*p - lo] : inv_bf;
  return loss;
}

// squared hinge: y = ±1, loss max(0, 1 - y·z)², gradient exactly 0 when the margin is met.
double squared_hinge_row(float* z, int64_t c, int64_t lo, ChunkTargets tg, double inv_b,
                         const float* w) {
  double loss = 0.0;
  const uint32_t* p = tg.first;
  for (int64_t j = 0; j < c; ++j) {
    const uint64_t label = static_cast<uint64_t>(lo + j);
    while (p != tg.last && *p < label) ++p;
    const bool pos = p != tg.last && *p == label;
    const double x = z[j];
    const double y = pos ? 1.0 : -1.0;
    const double m = 1.0 - y * x;
    double g = 0.0;  // margin met: exactly zero, sparse kernels skip these
    if (m > 0) {
      const double wj = w ? static_cast<double>(w[j]) : 1.0;  // × 1.0 is exact
      loss += wj * (m * m);
      g = -2.0 * y * m * wj;
    }
    z[j] = static_cast<float>(g * inv_b);
  }
  return loss;
}

// One row of an elementwise loss (bce or squared_hinge); z [c] logits in, gradient·inv_b
// out. w [c] (nullable: all 1) weights each entry's loss and gradient (the candidate
// losses' weights).
double row_loss_grad(LossType type, float* z, int64_t c, int64_t lo, ChunkTargets tg, double inv_b,
                     const float* w = nullptr) {
  return type == LossType::bce ? bce_row(z, c, lo, tg, inv_b, w)
                               : squared_hinge_row(z, c, lo, tg, inv_b, w);
}

}  // namespace

double elementwise_loss_grad(LossType type, Matrix logits, const CsrMatrix& targets, int64_t lo,
                             int64_t batch_size, int64_t* zero_grads) {
  check_chunk(logits, targets, lo, batch_size, type);
  const double inv_b = 1.0 / static_cast<double>(batch_size);
  double total = 0.0;
  int64_t zeros = 0;
  const int64_t rows = logits.rows;
  const int64_t c = logits.cols;
#pragma omp parallel for reduction(+ : total, zeros) schedule(static) if (rows * c > 16384)
  for (int64_t r = 0; r < rows; ++r) {
    float* z = logits.row(r);
    total += row_loss_grad(type, z, c, lo, chunk_targets(targets, r, lo, lo + c), inv_b);
    zeros += std::count(z, z + c, 0.0f);
  }
  if (zero_grads) *zero_grads += zeros;
  return total;
}

namespace {

// One row of softmax pass 1: its running max and sum of exps relative to it (online
// logsumexp), merged with the chunk z [c].
void softmax_row_accumulate(const float* z, int64_t c, double& row_max, double& sumexp) {
  float mf = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mf)
  for (int64_t j = 0; j < c; ++j) mf = mf < z[j] ? z[j] : mf;
  const double new_max = std::max(row_max, static_cast<double>(mf));
  // Rescale the running sum to the new max; exp(-inf) = 0 on the first chunk.
  double s = sumexp == 0.0 ? 0.0 : sumexp * std::exp(row_max - new_max);
  const auto nm = static_cast<float>(new_max);
  double cs = 0.0;
#pragma omp simd reduction(+ : cs)
  for (int64_t j = 0; j < c; ++j) cs += static_cast<double>(exp_approx(z[j] - nm));
  row_max = new_max;
  sumexp = s + cs;
}

// One row of softmax pass 2 on the chunk z [c] (labels lo..lo+c), its npos positives in
// tg: z becomes (softmax - t) / B with t = 1/npos; adds -t·log p of each positive of the
// chunk to total, one by one.
void softmax_row_loss_grad(float* z, int64_t c, int64_t lo, ChunkTargets tg, int64_t npos,
                           double row_max, double lse, double inv_b, double& total) {
  if (npos == 0) {
    // No positives: the row's loss is 0 whatever the logits, so is its gradient.
    std::fill(z, z + c, 0.0f);
    return;
  }
  const double t = 1.0 / static_cast<double>(npos);
  // Positives first (their logits are read before the row is overwritten): -t·log p.
  for (const uint32_t* p = tg.first; p != tg.last; ++p)
    total += t * (lse - static_cast<double>(z[*p - lo]));
  // z - lse as (z - max) - (lse - max): both parts exact or small in float, where a
  // float lse near |z| ~ 1000 would be off by 6e-5.
  const auto max_f = static_cast<float>(row_max);
  const auto shift = static_cast<float>(lse - row_max);
  const auto inv_bf = static_cast<float>(inv_b);
#pragma omp simd
  for (int64_t j = 0; j < c; ++j) z[j] = exp_approx((z[j] - max_f) - shift) * inv_bf;
  const auto t_b = static_cast<float>(t * inv_b);
  for (const uint32_t* p = tg.first; p != tg.last; ++p) z[*p - lo] -= t_b;
}

// The flagged entries' positions among a point's nc entries, into pos_at.
ChunkTargets flagged(const uint8_t* flag, int64_t nc, std::vector<uint32_t>& pos_at) {
  pos_at.clear();
  for (int64_t j = 0; j < nc; ++j)
    if (flag[j]) pos_at.push_back(static_cast<uint32_t>(j));
  return {pos_at.data(), pos_at.data() + pos_at.size()};
}

// point(i, g, nc, pos_at) -> the loss of point i, whose nc entries' scores g become their
// gradients, over every point in parallel (each with scratch pos_at); returns the loss
// summed in point order (the same for any thread count) and counts the exactly-zero
// gradients into *zeros.
template <class Point>
double over_points(const int64_t* ptr, int64_t rows, float* zg, int64_t* zeros, Point&& point) {
  std::vector<double> loss(static_cast<size_t>(rows));
  int64_t zs = 0;
#pragma omp parallel reduction(+ : zs)
  {
    std::vector<uint32_t> pos_at;
#pragma omp for schedule(dynamic, 4)
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t e0 = ptr[i], nc = ptr[i + 1] - e0;
      float* g = zg + e0;
      loss[static_cast<size_t>(i)] = point(i, g, nc, pos_at);
      zs += std::count(g, g + nc, 0.0f);
    }
  }
  if (zeros) *zeros = zs;
  double ls = 0.0;
  for (double x : loss) ls += x;
  return ls;
}

// candidate_loss_grad's softmax: pass 1 on every point; over label shards (sh not null) the
// statistics and positive counts merged over the processes; pass 2 with the normaliser.
double candidate_softmax(const int64_t* ptr, int64_t rows, const uint8_t* positive, double inv_b,
                         float* zg, int64_t* zeros, const RowReductions* sh) {
  SoftmaxStats st(rows);
  std::vector<double> npos(static_cast<size_t>(rows));  // positives (over every process)
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t i = 0; i < rows; ++i) {
    const auto ri = static_cast<size_t>(i);
    softmax_row_accumulate(zg + ptr[i], ptr[i + 1] - ptr[i], st.max[ri], st.sumexp[ri]);
    npos[ri] = static_cast<double>(
        std::count_if(positive + ptr[i], positive + ptr[i + 1], [](uint8_t f) { return f != 0; }));
  }
  if (sh != nullptr) {
    merge_softmax_stats(st, *sh);
    sh->reduce_sum(npos);
  }
  return over_points(ptr, rows, zg, zeros,
                     [&](int64_t i, float* g, int64_t nc, std::vector<uint32_t>& pos_at) {
                       const auto ri = static_cast<size_t>(i);
                       double loss = 0.0;
                       softmax_row_loss_grad(g, nc, 0, flagged(positive + ptr[i], nc, pos_at),
                                             static_cast<int64_t>(npos[ri]), st.max[ri],
                                             st.logsumexp(i), inv_b, loss);
                       return loss;
                     });
}

}  // namespace

double candidate_loss_grad(LossType type, const int64_t* ptr, int64_t rows, const uint8_t* positive,
                           const float* weight, int64_t batch_size, float* zg, int64_t* zeros,
                           const RowReductions* shards) {
  XMC_CHECK(batch_size > 0, "candidate loss over a batch of {}", batch_size);
  const double inv_b = 1.0 / static_cast<double>(batch_size);
  if (type == LossType::softmax)
    return candidate_softmax(ptr, rows, positive, inv_b, zg, zeros, shards);
  // A point's entries through the full losses' row functions: the row's "labels" are
  // 0..nc-1, its positives the flagged entries.
  return over_points(ptr, rows, zg, zeros,
                     [&](int64_t i, float* g, int64_t nc, std::vector<uint32_t>& pos_at) {
                       return row_loss_grad(type, g, nc, 0, flagged(positive + ptr[i], nc, pos_at),
                                            inv_b, weight ? weight + ptr[i] : nullptr);
                     });
}

void candidate_loss_grad(const Context& ctx, LossType type, const int64_t* ptr, int64_t rows,
                         int64_t nnz, const uint8_t* positive, const float* weight,
                         int64_t batch_size, float* zg, LossAccumulator& acc) {
  XMC_CHECK(batch_size > 0 && rows >= 0 && nnz >= 0,
            "candidate loss: {} entries over {} rows, batch of {}", nnz, rows, batch_size);
  if (ctx.on_gpu()) {
    if (type == LossType::softmax)
      gpu::candidate_softmax_grad(ctx.cuda(), ptr, rows, positive, batch_size, zg, acc.data());
    else if (nnz > 0)
      gpu::candidate_loss_grad(ctx.cuda(), type, nnz, positive, weight, batch_size, zg, acc.data());
    return;
  }
  XMC_CHECK(ptr != nullptr && ptr[rows] == nnz, "candidate loss: the rows end at {}, nnz {}",
            ptr == nullptr ? -1 : ptr[rows], nnz);
  int64_t zeros = 0;
  gpu::LossAccum* a = acc.data();
  a->loss += candidate_loss_grad(type, ptr, rows, positive, weight, batch_size, zg, &zeros);
  a->zero_grads += static_cast<unsigned long long>(zeros);
}

SoftmaxStats::SoftmaxStats(int64_t batch)
    : max(static_cast<size_t>(batch), -std::numeric_limits<double>::infinity()),
      sumexp(static_cast<size_t>(batch), 0.0) {}

double SoftmaxStats::logsumexp(int64_t row) const {
  return max[static_cast<size_t>(row)] + std::log(sumexp[static_cast<size_t>(row)]);
}

void softmax_accumulate(ConstMatrix logits, SoftmaxStats& stats) {
  XMC_CHECK(static_cast<size_t>(logits.rows) == stats.max.size(),
            "logits have {} rows, softmax stats {}", logits.rows, stats.max.size());
  const int64_t c = logits.cols;
  if (c == 0) return;
#pragma omp parallel for schedule(static) if (logits.rows * c > 16384)
  for (int64_t r = 0; r < logits.rows; ++r) {
    const auto ri = static_cast<size_t>(r);
    softmax_row_accumulate(logits.row(r), c, stats.max[ri], stats.sumexp[ri]);
  }
}

void merge_softmax_stats(SoftmaxStats& stats, const RowReductions& red) {
  std::vector<double> global = stats.max;
  red.reduce_max(global);
  // Each process's sum relative to its own max, rescaled to the global one, then summed.
  for (size_t r = 0; r < global.size(); ++r)
    stats.sumexp[r] =
        stats.sumexp[r] == 0.0 ? 0.0 : stats.sumexp[r] * std::exp(stats.max[r] - global[r]);
  stats.max = std::move(global);
  red.reduce_sum(stats.sumexp);
}

double softmax_loss_grad(Matrix logits, const SoftmaxStats& stats, const CsrMatrix& targets,
                         int64_t lo, int64_t batch_size) {
  check_chunk(logits, targets, lo, batch_size);
  XMC_CHECK(static_cast<size_t>(logits.rows) == stats.max.size(),
            "logits have {} rows, softmax stats {}", logits.rows, stats.max.size());
  const double inv_b = 1.0 / static_cast<double>(batch_size);
  const int64_t c = logits.cols;
  double total = 0.0;
#pragma omp parallel for reduction(+ : total) schedule(static) if (logits.rows * c > 16384)
  for (int64_t r = 0; r < logits.rows; ++r) {
    softmax_row_loss_grad(logits.row(r), c, lo, chunk_targets(targets, r, lo, lo + c),
                          targets.row_nnz(r), stats.max[static_cast<size_t>(r)], stats.logsumexp(r),
                          inv_b, total);
  }
  return total;
}

LossTargets::LossTargets(Context& ctx, int64_t max_batch) : ctx_(&ctx) {
  if (ctx.on_gpu())
    indptr_ = Buffer<int64_t>(ctx, MemTag::workspace, static_cast<size_t>(max_batch + 1));
}

void LossTargets::upload() {
  if (!ctx_ || !ctx_->on_gpu()) return;
  const CsrMatrix& t = host();
  XMC_CHECK(t.rows + 1 <= static_cast<int64_t>(indptr_.size()),
            "loss targets: {} rows for a workspace of {}", t.rows, indptr_.size() - 1);
  const auto nnz = static_cast<size_t>(t.nnz());
  ensure_size(indices_, *ctx_, MemTag::workspace,
              static_cast<int64_t>(std::max<size_t>(nnz, 1024)));
  indptr_.copy_from_host(t.indptr.data(), static_cast<size_t>(t.rows + 1));
  indices_.copy_from_host(t.indices.data(), nnz);
}

gpu::DeviceCsr LossTargets::device() const {
  XMC_CHECK(!indptr_.empty(), "loss targets: no device copy on a CPU Context");
  return {indptr_.data(), indices_.data(), host().rows, host().cols};
}

void elementwise_loss_grad(const Context& ctx, LossType type, Matrix logits, const float* bias,
                           const LossTargets& targets, int64_t lo, int64_t batch_size,
                           LossAccumulator& acc, gpu::Bf16Matrix g_bf16) {
  check_chunk(ctx, logits, targets.host(), lo, batch_size, g_bf16, type);
  if (ctx.on_gpu()) {
    gpu::elementwise_loss_grad(ctx.cuda(), type, logits, bias, targets.device(), lo, batch_size,
                               acc.data(), g_bf16);
    return;
  }
  if (bias) ops::add_row_vector(logits, bias);
  int64_t zeros = 0;
  const double loss = elementwise_loss_grad(type, logits, targets.host(), lo, batch_size, &zeros);
  gpu::LossAccum* a = acc.data();
  a->loss += loss;
  a->zero_grads += static_cast<unsigned long long>(zeros);
}

void sparsify_gradient(const Context& ctx, Matrix g, float threshold, uint64_t stream, int64_t col0,
                       int64_t counter_cols, gpu::Bf16Matrix g_bf16) {
  XMC_CHECK(
      threshold > 0.0f && std::isfinite(threshold) && col0 >= 0 && col0 + g.cols <= counter_cols,
      "gradient sparsification: threshold {}, columns [{}, {}) of {}", threshold, col0,
      col0 + g.cols, counter_cols);
  XMC_CHECK(!g_bf16.data || (ctx.on_gpu() && g_bf16.rows == g.rows && g_bf16.cols == g.cols),
            "a bf16 gradient copy [{}×{}] of g [{}×{}] on device {}", g_bf16.rows, g_bf16.cols,
            g.rows, g.cols, to_string(ctx.device()));
  if (ctx.on_gpu())
    return gpu::sparsify_gradient(ctx.cuda(), g, threshold, stream, col0, counter_cols, g_bf16);
#pragma omp parallel for schedule(static) if (g.rows * g.cols > 16384)
  for (int64_t r = 0; r < g.rows; ++r) {
    float* gr = g.row(r);
    const auto base = static_cast<uint64_t>(r * counter_cols + col0);
    for (int64_t j = 0; j < g.cols; ++j)
      gr[j] = gpu::sparsify_value(gr[j], threshold,
                                  gpu::rounding_bits(stream, base + static_cast<uint64_t>(j)));
  }
}

SoftmaxState::SoftmaxState(Context& ctx, int64_t max_batch) : ctx_(&ctx) {
  if (!ctx.on_gpu()) return;
  max_ = Buffer<float>(ctx, MemTag::workspace, static_cast<size_t>(max_batch));
  sum_ = Buffer<float>(ctx, MemTag::workspace, static_cast<size_t>(max_batch));
}

void SoftmaxState::reset(int64_t rows) {
  XMC_CHECK(ctx_ != nullptr, "softmax state without a Context");
  if (ctx_->on_gpu()) {
    XMC_CHECK(rows <= static_cast<int64_t>(max_.size()), "softmax stats of {} rows, room for {}",
              rows, max_.size());
    gpu::softmax_reset(ctx_->cuda(), device(), rows);
    rows_ = rows;
  } else {
    host_ = SoftmaxStats(rows);
  }
}

void SoftmaxState::merge(const RowReductions& red) {
  XMC_CHECK(ctx_ != nullptr, "softmax state without a Context");
  if (!ctx_->on_gpu()) {
    merge_softmax_stats(host_, red);
    return;
  }
  // GPU ranks: the rows' float statistics merged on the host (2 floats a row each way).
  const auto n = static_cast<size_t>(rows_);
  float* mx = max_.stage(n);
  float* sum = sum_.stage(n);
  SoftmaxStats s(rows_);
  std::copy(mx, mx + n, s.max.begin());
  std::copy(sum, sum + n, s.sumexp.begin());
  merge_softmax_stats(s, red);
  std::transform(s.max.begin(), s.max.end(), mx, [](double v) { return static_cast<float>(v); });
  std::transform(s.sumexp.begin(), s.sumexp.end(), sum,
                 [](double v) { return static_cast<float>(v); });
  max_.commit(n);
  sum_.commit(n);
}

gpu::DeviceSoftmaxStats SoftmaxState::device() const {
  return {const_cast<float*>(max_.data()), const_cast<float*>(sum_.data())};
}

void softmax_accumulate(const Context& ctx, Matrix logits, const float* bias, SoftmaxState& st) {
  if (ctx.on_gpu()) {
    gpu::softmax_accumulate(ctx.cuda(), logits, bias, st.device());
    return;
  }
  if (bias) ops::add_row_vector(logits, bias);
  softmax_accumulate(ConstMatrix(logits), st.host_);
}

void softmax_loss_grad(const Context& ctx, Matrix logits, const float* bias, const SoftmaxState& st,
                       const LossTargets& targets, int64_t lo, int64_t batch_size,
                       LossAccumulator& acc, gpu::Bf16Matrix g_bf16) {
  check_chunk(ctx, logits, targets.host(), lo, batch_size, g_bf16);
  if (ctx.on_gpu()) {
    gpu::softmax_loss_grad(ctx.cuda(), logits, bias, st.device(), targets.device(), lo, batch_size,
                           acc.data(), g_bf16);
    return;
  }
  if (bias) ops::add_row_vector(logits, bias);
  acc.data()->loss += softmax_loss_grad(logits, st.host_, targets.host(), lo, batch_size);
}

}  // namespace xmc
