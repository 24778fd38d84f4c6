#include "layers/fanin_block.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <utility>

#include "core/error.h"
#include "core/resources.h"
#include "layers/weight_init.h"
#include "ops/dense.h"
#include "ops/encoder.h"
#include "ops/fixed_fanin.h"
#include "ops/group_shared.h"

namespace xmc {

namespace {

// A non-negative float (or |x|) as an order-preserving uint32 key.
uint32_t key_of(float x, bool abs) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  return abs ? bits & 0x7fffffffu : bits;
}

// The k-th smallest key (k >= 1) of the n scores by a two-pass radix select over 16-bit
// digits: {key, number of entries with a smaller key}. O(n) time, O(2^16) memory.
std::pair<uint32_t, int64_t> select_key(const float* s, int64_t n, int64_t k, bool abs) {
  std::vector<int64_t> hist(1 << 16);
  for (int64_t i = 0; i < n; ++i) ++hist[key_of(s[i], abs) >> 16];
  int64_t below = 0;
  uint32_t hi = 0;
  for (; hi < (1u << 16) && below + hist[hi] < k; ++hi) below += hist[hi];
  std::fill(hist.begin(), hist.end(), 0);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t key = key_of(s[i], abs);
    if ((key >> 16) == hi) ++hist[key & 0xffffu];
  }
  uint32_t lo = 0;
  for (; lo < (1u << 16) && below + hist[lo] < k; ++lo) below += hist[lo];
  return {(hi << 16) | lo, below};
}

// The regrowth of one set: for each slot j in `slots` of the index set idx [f], whose
// pruned inputs were `old` (same order), draw a new input uniformly in [0, m) that the set
// does not use — neither a kept input nor one regrown before it — and, when at least
// slots.size() inputs remain outside the set, none of the ones just pruned (so every
// regrown slot really changes). Needs f < m.
void regrow_inputs(uint32_t* idx, int64_t f, const std::vector<int64_t>& slots,
                   const std::vector<uint32_t>& old, int64_t m, Rng& rng) {
  XMC_CHECK(f < m, "regrow_inputs: fan-in {} leaves no free input among {}", f, m);
  const bool avoid_old = m - f >= static_cast<int64_t>(slots.size());
  for (int64_t j : slots) {
    uint32_t c;
    do {
      c = static_cast<uint32_t>(rng.below(static_cast<uint64_t>(m)));
    } while (std::find(idx, idx + f, c) != idx + f ||
             (avoid_old && std::find(old.begin(), old.end(), c) != old.end()));
    idx[j] = c;
  }
}

// F must not exceed the m inputs of the sparse part (InputError naming the backend).
void check_fan_in(const FaninConfig& cfg, const FaninLayout& layout, int64_t m) {
  if (cfg.fan_in > m)
    throw_input("{}: fan_in {} exceeds the {} inputs of the sparse part ({})", layout.name,
                cfg.fan_in, m,
                cfg.projection > 0 ? "its ReLU projection's width" : "the encoder's output width");
}

}  // namespace

bool rewire_due(const RewireConfig& cfg, int64_t step, int64_t total_steps) {
  if (cfg.interval <= 0 || cfg.fraction <= 0.0 || step <= 0 || step % cfg.interval != 0)
    return false;
  return static_cast<double>(step) <= cfg.until * static_cast<double>(total_steps);
}

int64_t rewire_count(const RewireConfig& cfg, int64_t slots) {
  return std::llround(cfg.fraction * static_cast<double>(slots));
}

std::vector<char> lowest_slots(const float* score, int64_t n, int64_t k, bool abs) {
  XMC_CHECK(k >= 1 && k <= n, "lowest_slots: k = {} of {}", k, n);
  // Every slot with key < tkey, then the first (k - below) with key == tkey in slot order.
  const auto [tkey, below] = select_key(score, n, k, abs);
  std::vector<char> mask(static_cast<size_t>(n), 0);
  int64_t ties = k - below;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) mask[static_cast<size_t>(i)] = key_of(score[i], abs) < tkey;
  for (int64_t i = 0; i < n && ties > 0; ++i)
    if (key_of(score[i], abs) == tkey) {
      mask[static_cast<size_t>(i)] = 1;
      --ties;
    }
  return mask;
}

int64_t regrow_sets(uint32_t* idx, int64_t sets, int64_t f, int64_t m,
                    const std::vector<char>& prune, uint64_t base,
                    const std::function<void(int64_t, int64_t)>& reset) {
  int64_t regrown = 0;
#pragma omp parallel reduction(+ : regrown)
  {
    std::vector<int64_t> slots;
    std::vector<uint32_t> old;
#pragma omp for schedule(static)
    for (int64_t q = 0; q < sets; ++q) {
      uint32_t* iq = idx + q * f;
      slots.clear();
      old.clear();
      for (int64_t j = 0; j < f; ++j)
        if (prune[static_cast<size_t>(q * f + j)]) {
          slots.push_back(j);
          old.push_back(iq[j]);
        }
      if (slots.empty()) continue;
      Rng rng = Rng::stream(base, static_cast<uint64_t>(q));
      regrow_inputs(iq, f, slots, old, m, rng);
      for (int64_t j : slots) reset(q, j);
      regrown += static_cast<int64_t>(slots.size());
    }
  }
  return regrown;
}

FaninBlock::FaninBlock(const LayerInit& init, const FaninConfig& cfg, const FaninLayout& layout)
    : ctx_(init.ctx),
      cfg_(cfg),
      layout_(layout),
      d_(init.input_dim),
      m_(cfg.projection > 0 ? cfg.projection : init.input_dim),
      f_(cfg.fan_in),
      n_(layout.labels),
      group_(layout.group),
      sets_((layout.labels + layout.group - 1) / layout.group),
      max_batch_(init.batch_size),
      total_steps_(init.total_steps),
      optim_(init.optim),
      seed_(init.seed) {
  XMC_CHECK(max_batch_ > 0 && group_ >= 1 && (layout_.group_ops || group_ == 1),
            "{}: B={} group {}", layout_.name, max_batch_, group_);
  if (cfg_.loss != LossType::squared_hinge && cfg_.loss != LossType::bce)
    throw_input("{}: loss '{}' is not supported (squared_hinge, bce)", layout_.name,
                to_string(cfg_.loss));
  Context& ctx = *ctx_;
  if (cfg_.dropout > 0.0) {
    mask_ = DropoutMask(ctx, max_batch_, d_);
    xd_ = Buffer<float>(ctx, MemTag::workspace, static_cast<size_t>(max_batch_ * d_));
  }
  if (n_ == 0) return;
  check_fan_in(cfg, layout, m_);
  chunk_ = std::min(std::max(group_, cfg.chunk_size / group_ * group_), sets_ * group_);
  idx_ = Buffer<uint32_t>(ctx, MemTag::indices, static_cast<size_t>(sets_ * f_));
  refuse_dense_only_state(optim_);
  p_ = LabelParams(ctx, optim_, n_, f_, layout.precision.weights);
  proj_ = Projection(ctx, d_, cfg.projection, Projection::Kind::relu, optim_, max_batch_,
                     Rng::stream(seed_, layout.projection_stream));
  if (Comm* c = init.shard_comm()) proj_.set_comm(c);  // dP, dc summed over the processes
  const auto utn = static_cast<size_t>(m_ * max_batch_);
  if (p_.w.bf16())
    ut16_ = Buffer<gpu::Bf16>(ctx, MemTag::workspace, utn);
  else
    ut_ = Buffer<float>(ctx, MemTag::workspace, utn);
  z_ = Buffer<float>(ctx, MemTag::workspace, static_cast<size_t>(max_batch_ * chunk_));
  dw_ = Buffer<float>(ctx, MemTag::workspace, static_cast<size_t>(chunk_ * f_));
  db_ = Buffer<float>(ctx, MemTag::workspace, static_cast<size_t>(chunk_));
  targets_ = LossTargets(ctx, max_batch_);
  acc_ = LossAccumulator(ctx);
}

void FaninBlock::init_weights(uint64_t seed) {
  init_uniform_rows(p_.w.stage_for_write(), n_, f_, seed, layout_.first);
  p_.w.commit();
}

ConstMatrix FaninBlock::dropout(ConstMatrix h, uint64_t stream, int64_t step) {
  XMC_CHECK(h.rows <= max_batch_, "batch of {} rows exceeds the workspace for {}", h.rows,
            max_batch_);
  drawn_ = nullptr;
  if (cfg_.dropout <= 0.0) return h;
  Rng rng = Rng::stream(seed_ ^ stream, static_cast<uint64_t>(step));
  drawn_ = mask_.draw(h.rows, cfg_.dropout, rng);
  const Matrix xd(xd_.data(), h.rows, d_);
  ops::multiply_mask(*ctx_, h, drawn_, xd);
  return xd;
}

void FaninBlock::dropout_grad(Matrix dh) const {
  if (drawn_ != nullptr) ops::multiply_mask(*ctx_, dh, drawn_, dh);
}

void FaninBlock::mark(Stopwatch& sw, double FaninTimings::*field) {
  if (!layout_.time_ops) return;
  if (layout_.sync_ops) ctx_->synchronize();
  timings_.*field += sw.lap();
}

gpu::LossAccum FaninBlock::train_step(ConstMatrix x, Matrix dh, float beta, const LrState& lr,
                                      int64_t target0, double loss) {
  const Context& ctx = *ctx_;
  const int64_t rows = x.rows, f = f_;
  Stopwatch sw;
  const ConstMatrix u = proj_.active() ? ConstMatrix(proj_.forward(x)) : x;
  const Matrix du = proj_.active() ? proj_.grad_workspace(rows) : dh;
  if (proj_.active() || beta == 0.0f) ops::set_zero(ctx, du);
  const bool bf16 = p_.w.bf16();
  const ConstMatrix ut(ut_.data(), m_, rows);
  const gpu::ConstBf16Matrix ut16(ut16_.data(), m_, rows);
  if (bf16)
    ops::transpose(ctx, u, gpu::Bf16Matrix(ut16_.data(), m_, rows));
  else
    ops::transpose(ctx, u, Matrix(ut_.data(), m_, rows));
  acc_.reset(loss);
  mark(sw, &FaninTimings::forward);
  for (int64_t c0 = 0; c0 < n_; c0 += chunk_) {
    const int64_t c = std::min(chunk_, n_ - c0), wo = c0 * f;
    const uint32_t* idx = idx_.data() + (c0 / group_) * f;
    Matrix z(z_.data(), rows, c);
    forward(c0, ut.data, ut16.data, z);
    mark(sw, &FaninTimings::forward);
    // z becomes G = dL/dz (already divided by B).
    elementwise_loss_grad(ctx, cfg_.loss, z, nullptr, targets_, target0 + c0, rows, acc_);
    mark(sw, &FaninTimings::loss);
    // Both gradients with the weights before this chunk's update.
    if (!layout_.group_ops)
      ops::fixed_fanin_input_grad(ctx, idx, p_.w.f32() + wo, c, f, z, du);
    else if (bf16)
      ops::group_shared_input_grad(ctx, idx, p_.w.b16() + wo, c, group_, f, z, du);
    else
      ops::group_shared_input_grad(ctx, idx, p_.w.f32() + wo, c, group_, f, z, du);
    mark(sw, &FaninTimings::backward_input);
    if (!layout_.group_ops)
      ops::fixed_fanin_weight_grad(ctx, idx, c, f, z, ut, dw_.data(), db_.data(),
                                   acc_.zero_labels());
    else if (bf16)
      ops::group_shared_weight_grad(ctx, idx, c, group_, f, z, ut16, dw_.data(), db_.data());
    else
      ops::group_shared_weight_grad(ctx, idx, c, group_, f, z, ut, dw_.data(), db_.data());
    mark(sw, &FaninTimings::backward_weight);
    p_.update(ctx, optim_, lr.lr, lr.step, c0, c, dw_.data(), db_.data(),
              WeightArray::rounding_key(layout_.precision.stochastic_rounding, seed_,
                                        layout_.first + c0));
    mark(sw, &FaninTimings::update);
  }
  const gpu::LossAccum acc = acc_.read();
  mark(sw, &FaninTimings::loss);
  if (!layout_.group_ops) {
    timings_.skipped_labels += static_cast<int64_t>(acc.zero_labels);
    timings_.label_steps += n_;
  }
  // Through the ReLU (u > 0), then dh = du·P + beta·dh (old P), dP = duᵀ·x, dc, update.
  if (proj_.active()) proj_.backward_update(x, dh, beta, lr);
  mark(sw, &FaninTimings::intermediate_backward);
  return acc;
}

void FaninBlock::forward(int64_t r0, const float* ut, const gpu::Bf16* ut16, Matrix z) const {
  const uint32_t* idx = idx_.data() + (r0 / group_) * f_;
  const float* b = p_.b.data() + r0;
  if (!layout_.group_ops)
    ops::fixed_fanin_forward(*ctx_, idx, p_.w.f32() + r0 * f_, b, z.cols, f_,
                             ConstMatrix(ut, m_, z.rows), z);
  else if (p_.w.bf16())
    ops::group_shared_forward(*ctx_, idx, p_.w.b16() + r0 * f_, b, z.cols, group_, f_,
                              gpu::ConstBf16Matrix(ut16, m_, z.rows), z);
  else
    ops::group_shared_forward(*ctx_, idx, p_.w.f32() + r0 * f_, b, z.cols, group_, f_,
                              ConstMatrix(ut, m_, z.rows), z);
}

FaninBlock::Input FaninBlock::eval_input(ConstMatrix h) const {
  Input in;
  Buffer<float> u_buf;
  const ConstMatrix u = proj_.apply_into(h, u_buf);
  const auto n = static_cast<size_t>(m_ * h.rows);
  if (p_.w.bf16()) {
    in.ut16 = Buffer<gpu::Bf16>(*ctx_, MemTag::workspace, n);
    ops::transpose(*ctx_, u, gpu::Bf16Matrix(in.ut16.data(), m_, h.rows));
  } else {
    in.ut = Buffer<float>(*ctx_, MemTag::workspace, n);
    ops::transpose(*ctx_, u, Matrix(in.ut.data(), m_, h.rows));
  }
  return in;
}

RewireStats FaninBlock::rewire(
    int64_t step, uint64_t base,
    const std::function<std::vector<char>(int64_t, const float*)>& prune) {
  Stopwatch sw;
  last_rewire_ = RewireStats{.step = step};
  const int64_t f = f_, k = rewire_count(cfg_.rewire, sets_ * f);
  if (k > 0 && f < m_) {  // else nothing to prune, or every input already used
    float* w = p_.w.stage();
    float* s1 = p_.w_s1.empty() ? nullptr : p_.w_s1.stage();
    float* s2 = p_.w_s2.empty() ? nullptr : p_.w_s2.stage();
    last_rewire_.pruned =
        regrow_sets(idx_.stage(), sets_, f, m_, prune(k, w), base, [&](int64_t q, int64_t j) {
          for (int64_t r = q * group_; r < std::min((q + 1) * group_, p_.rows); ++r)
            for (float* a : {w, s1, s2})
              if (a) a[r * f + j] = 0.0f;
        });
    p_.w.commit();
    for (WeightArray* b : {&p_.w_s1, &p_.w_s2}) b->commit();
    idx_.commit();
    last_rewire_.seconds = sw.seconds();
  }
  timings_.rewire += last_rewire_.seconds;
  return last_rewire_;
}

void FaninBlock::rewire_when_due(const TrainerView& t, const char* what,
                                 const std::function<RewireStats(int64_t)>& rewire) {
  const int64_t total = t.total_steps > 0 ? t.total_steps : total_steps_, slots = sets_ * f_;
  if (!rewire_due(t.step, total)) return;
  const RewireStats s = rewire(t.step);
  spdlog::info(
      "{}: rewired {} of {} {} ({:.1f}%) at step {} in {:.3f}s", layout_.name, s.pruned, slots,
      what,
      100.0 * static_cast<double>(s.pruned) / static_cast<double>(std::max<int64_t>(1, slots)),
      s.step, s.seconds);
}

void FaninBlock::append_state(std::vector<TensorRef>& out, const std::string& projection) {
  if (n_ == 0) return;
  out.push_back({"output/indices", {sets_, f_}, idx_.host_data()});
  for (TensorRef& r : p_.refs()) out.push_back(std::move(r));
  proj_.append_state(out, projection);
}

void FaninBlock::sync_state(StateSync s) {
  idx_.sync(s);
  p_.sync(s);
  proj_.sync_state(s);
}

int64_t FaninBlock::analytic_bytes() const {
  return planned_bytes(ctx_->on_gpu(), d_, max_batch_, optim_, cfg_, layout_).rounded();
}

StepWork FaninBlock::planned_step(int64_t d, int64_t batch, const OptimizerConfig& optim,
                                  const FaninConfig& cfg, const FaninLayout& layout) {
  const double b = static_cast<double>(batch);
  StepWork w;
  if (cfg.dropout > 0.0) w.bytes += 3.0 * 4.0 * b * static_cast<double>(d);  // mask, x
  if (layout.labels == 0) return w;
  const int64_t sets = (layout.labels + layout.group - 1) / layout.group;
  const auto m = static_cast<double>(cfg.projection > 0 ? cfg.projection : d);
  const double n = static_cast<double>(layout.labels), f = static_cast<double>(cfg.fan_in);
  w += Projection::planned_step(d, cfg.projection, Projection::Kind::relu, optim, batch);
  // The three ops' multiply-adds (their gathers of the sets' F rows of uᵀ are in the
  // measured rate of the op family).
  w.fanin_flops += 6.0 * b * n * f;
  w.fanin = {.batch = batch,
             .inputs = cfg.projection > 0 ? cfg.projection : d,
             .fan_in = cfg.fan_in,
             .group = layout.group_ops ? layout.group : 1};
  w.bytes += 4.0 * (static_cast<double>(sets) * f  // the index sets
                    + 2.0 * b * m                  // the transpose
                    + 2.0 * b * n                  // the loss pass
                    + n * f * (3.0 + 2.0 * optimizer_state_arrays(optim)));
  return w;
}

LayerBytes FaninBlock::planned_bytes(bool gpu, int64_t d, int64_t max_batch,
                                     const OptimizerConfig& optim, const FaninConfig& cfg,
                                     const FaninLayout& layout) {
  const double b = static_cast<double>(max_batch), dd = static_cast<double>(d);
  LayerBytes bytes;
  // The mask (on the GPU also its host draw) and the dropped-out input x.
  if (cfg.dropout > 0.0) bytes.workspace = 4.0 * b * dd * (gpu ? 3.0 : 2.0);
  if (layout.labels == 0) return bytes;
  // As the constructor sizes them: sets, m, the chunk (a multiple of the group).
  const int64_t group = layout.group, sets = (layout.labels + group - 1) / group;
  const int64_t m = cfg.projection > 0 ? cfg.projection : d;
  check_fan_in(cfg, layout, m);  // what the constructor refuses, plan refuses too
  const auto chunk =
      static_cast<double>(std::min(std::max(group, cfg.chunk_size / group * group), sets * group));
  const auto f = static_cast<double>(cfg.fan_in);
  bytes.params += 4.0 * static_cast<double>(sets) * f;  // index sets
  bytes += LabelParams::planned_bytes(optim, layout.labels, cfg.fan_in, layout.precision.weights);
  bytes += Projection::planned_bytes(d, cfg.projection, Projection::Kind::relu, optim, max_batch);
  // ut [m×B] (bf16 with bf16 weights), z [B×chunk], dW [chunk×F], db [chunk]
  bytes.workspace += (layout.precision.bf16() ? 2.0 : 4.0) * static_cast<double>(m) * b +
                     4.0 * (b * chunk + chunk * f + chunk);
  if (gpu) bytes.workspace += sizeof(gpu::LossAccum) + 8.0 * (b + 1);  // loss, target rows
  return bytes;
}

}  // namespace xmc
