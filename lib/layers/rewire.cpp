#include "layers/rewire.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <utility>

#include "core/error.h"
#include "core/resources.h"
#include "ops/encoder.h"

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

FaninLayer::FaninLayer(const LayerInit& init, int64_t fan_in, int64_t m, double dropout,
                       LossType loss, const RewireConfig& rewire)
    : OutputLayer(init),
      ctx_(init.ctx),
      fan_in_(fan_in),
      m_(m > 0 ? m : init.input_dim),
      max_batch_(init.batch_size),
      dropout_(dropout),
      loss_(loss),
      rewire_cfg_(rewire),
      optim_(init.optim),
      seed_(init.seed),
      total_steps_(init.total_steps) {}

void FaninLayer::allocate_workspace(bool chunks) {
  Context& ctx = *ctx_;
  if (dropout_ > 0.0) {
    mask_ = DropoutMask(ctx, max_batch_, input_dim());
    xd_ = Buffer<float>(ctx, MemTag::workspace, static_cast<size_t>(max_batch_ * input_dim()));
  }
  if (!chunks) return;
  const auto utn = static_cast<size_t>(m_ * max_batch_);
  if (p_.w.bf16())
    ut16_ = Buffer<gpu::Bf16>(ctx, MemTag::workspace, utn);
  else
    ut_ = Buffer<float>(ctx, MemTag::workspace, utn);
  z_ = Buffer<float>(ctx, MemTag::workspace, static_cast<size_t>(max_batch_ * chunk_));
  dw_ = Buffer<float>(ctx, MemTag::workspace, static_cast<size_t>(chunk_ * fan_in_));
  db_ = Buffer<float>(ctx, MemTag::workspace, static_cast<size_t>(chunk_));
  targets_ = LossTargets(ctx, max_batch_);
  acc_ = LossAccumulator(ctx);
}

ConstMatrix FaninLayer::apply_dropout(ConstMatrix h, uint64_t stream, int64_t step,
                                      const float** mask) {
  *mask = nullptr;
  if (dropout_ <= 0.0) return h;
  Rng rng = Rng::stream(seed_ ^ stream, static_cast<uint64_t>(step));
  *mask = mask_.draw(h.rows, dropout_, rng);
  const Matrix xd(xd_.data(), h.rows, input_dim());
  ops::multiply_mask(*ctx_, h, *mask, xd);
  return xd;
}

RewireStats FaninLayer::rewire_on_host(
    int64_t step, int64_t sets, int64_t group, uint64_t base,
    const std::function<std::vector<char>(int64_t, const float*)>& prune) {
  Stopwatch sw;
  last_rewire_ = RewireStats{.step = step};
  const int64_t f = fan_in_, k = rewire_count(rewire_cfg_, sets * f);
  if (k > 0 && f < m_) {  // else nothing to prune, or every input already used
    float* w = p_.w.stage();
    float* s1 = p_.w_s1.empty() ? nullptr : p_.w_s1.stage();
    float* s2 = p_.w_s2.empty() ? nullptr : p_.w_s2.stage();
    last_rewire_.pruned =
        regrow_sets(idx_.stage(), sets, f, m_, prune(k, w), base, [&](int64_t q, int64_t j) {
          for (int64_t r = q * group; r < std::min((q + 1) * group, p_.rows); ++r)
            for (float* a : {w, s1, s2})
              if (a) a[r * f + j] = 0.0f;
        });
    p_.w.commit();
    for (Buffer<float>* b : {&p_.w_s1, &p_.w_s2}) b->commit();
    idx_.commit();
    last_rewire_.seconds = sw.seconds();
  }
  timings_.rewire += last_rewire_.seconds;
  return last_rewire_;
}

void FaninLayer::rewire_when_due(const TrainerView& t, const char* name, int64_t slots,
                                 const char* what) {
  const int64_t total = t.total_steps > 0 ? t.total_steps : total_steps_;
  if (!rewire_due(t.step, total)) return;
  const RewireStats s = rewire(t.step);
  spdlog::info(
      "{}: rewired {} of {} {} ({:.1f}%) at step {} in {:.3f}s", name, s.pruned, slots, what,
      100.0 * static_cast<double>(s.pruned) / static_cast<double>(std::max<int64_t>(1, slots)),
      s.step, s.seconds);
}

}  // namespace xmc
