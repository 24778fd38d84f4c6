// Losses: values and gradients against double-precision references, gradients against
// central finite differences of the reference (eps 1e-6, in double), chunked evaluation
// against one chunk.
#include <omp.h>

#include <algorithm>
#include <barrier>
#include <catch2/catch.hpp>
#include <cmath>
#include <span>
#include <thread>

#include "core/error.h"
#include "model_test_util.h"
#include "ops/loss.h"

using namespace xmc;
using namespace xmc::test;

namespace {

constexpr int64_t kB = 4;
constexpr int64_t kL = 10;

// Row 2 has no positives; row 3 has its positives in different chunks.
CsrMatrix test_targets() { return make_csr({{1, 4}, {0}, {}, {2, 3, 8, 9}}, kL); }

bool is_pos(const CsrMatrix& t, int64_t r, int64_t l) {
  for (int64_t k = t.indptr[r]; k < t.indptr[r + 1]; ++k)
    if (t.indices[k] == l) return true;
  return false;
}

// Reference losses, summed over all entries (not divided by B), in double.
double ref_loss(LossType type, const std::vector<double>& z, const CsrMatrix& t) {
  double total = 0;
  for (int64_t r = 0; r < kB; ++r) {
    if (type == LossType::softmax) {
      const int64_t n = t.row_nnz(r);
      if (n == 0) continue;
      double s = 0;
      for (int64_t l = 0; l < kL; ++l) s += std::exp(z[r * kL + l]);
      for (int64_t l = 0; l < kL; ++l)
        if (is_pos(t, r, l)) total += -(1.0 / n) * std::log(std::exp(z[r * kL + l]) / s);
      continue;
    }
    for (int64_t l = 0; l < kL; ++l) {
      const double y = is_pos(t, r, l) ? 1.0 : -1.0;
      const double x = z[r * kL + l];
      if (type == LossType::bce) {
        total += std::log(1.0 + std::exp(-y * x));
      } else {
        const double m = std::max(0.0, 1.0 - y * x);
        total += m * m;
      }
    }
  }
  return total;
}

std::vector<double> test_logits(LossType type) {
  Rng rng(11);
  auto z = random_vector(rng, kB * kL, -3.0, 3.0);
  if (type == LossType::squared_hinge) {
    // Keep away from the kink 1 - y·z = 0 so finite differences are valid.
    for (auto& x : z)
      if (std::abs(std::abs(x) - 1.0) < 0.05) x += 0.2;
  }
  return z;
}

// Runs the library over the given chunk boundaries; returns the loss sum, gradient in g.
double run_chunks(LossType type, const std::vector<double>& z, const CsrMatrix& t,
                  const std::vector<int64_t>& bounds, std::vector<float>& g,
                  int64_t* zero_grads = nullptr) {
  g = to_float(z);
  Matrix all{g.data(), kB, kL};
  double loss = 0;
  if (type == LossType::softmax) {
    SoftmaxStats stats(kB);
    for (size_t c = 0; c + 1 < bounds.size(); ++c)
      softmax_accumulate(ConstMatrix{all.data + bounds[c], kB, bounds[c + 1] - bounds[c], kL},
                         stats);
    for (size_t c = 0; c + 1 < bounds.size(); ++c)
      loss += softmax_loss_grad(Matrix{all.data + bounds[c], kB, bounds[c + 1] - bounds[c], kL},
                                stats, t, bounds[c], kB);
  } else {
    for (size_t c = 0; c + 1 < bounds.size(); ++c)
      loss += elementwise_loss_grad(type,
                                    Matrix{all.data + bounds[c], kB, bounds[c + 1] - bounds[c], kL},
                                    t, bounds[c], kB, zero_grads);
  }
  return loss;
}

// Entries of g (the library's gradient / B) away from the central finite differences of
// the reference loss / B.
int gradient_misses(LossType type, std::vector<double> z, const CsrMatrix& t,
                    const std::vector<float>& g) {
  auto num = numerical_gradient([&] { return ref_loss(type, z, t) / kB; }, z);
  int bad = 0;
  for (size_t i = 0; i < num.size(); ++i)
    if (!close(g[i], num[i])) {
      ++bad;
      UNSCOPED_INFO("entry " << i << ": analytical " << g[i] << " numerical " << num[i]);
    }
  return bad;
}

void check_loss(LossType type) {
  const CsrMatrix t = test_targets();
  auto z = test_logits(type);
  // The library sees float logits: build the reference on the same rounded values.
  for (auto& x : z) x = static_cast<double>(static_cast<float>(x));
  std::vector<float> g;
  const double loss = run_chunks(type, z, t, {0, kL}, g);
  const double expect = ref_loss(type, z, t);
  CHECK(loss == Approx(expect).epsilon(1e-6));

  CHECK(gradient_misses(type, z, t, g) == 0);

  // Chunked over three uneven chunks: same loss, same gradients.
  std::vector<float> gc;
  const double loss_c = run_chunks(type, z, t, {0, 3, 7, kL}, gc);
  // softmax: each chunk's exps are taken relative to a different running max in float
  // (relative error < 3e-7 per term), so chunking moves the total in the 9th digit.
  CHECK(loss_c == Approx(loss).epsilon(type == LossType::softmax ? 1e-7 : 1e-9));
  for (size_t i = 0; i < g.size(); ++i) CHECK(gc[i] == Approx(g[i]).epsilon(1e-6).margin(1e-9));
}

}  // namespace

TEST_CASE("bce: value and gradient match finite differences, chunked = whole") {
  check_loss(LossType::bce);
}

TEST_CASE("squared_hinge: value and gradient match finite differences, chunked = whole") {
  check_loss(LossType::squared_hinge);
}

TEST_CASE("softmax: value and gradient match finite differences, chunked = whole") {
  check_loss(LossType::softmax);
}

TEST_CASE("softmax: a row without positives contributes neither loss nor gradient") {
  const CsrMatrix t = test_targets();
  auto z = test_logits(LossType::softmax);
  std::vector<float> g;
  run_chunks(LossType::softmax, z, t, {0, 5, kL}, g);
  for (int64_t l = 0; l < kL; ++l) CHECK(g[2 * kL + l] == 0.0f);
  // Rows with positives: gradient sums to zero (softmax sums to 1, targets sum to 1).
  double s = 0;
  for (int64_t l = 0; l < kL; ++l) s += g[0 * kL + l];
  CHECK(std::abs(s) < 1e-6);
}

TEST_CASE("squared_hinge: gradient is exactly zero where the margin is met, and counted") {
  const CsrMatrix t = test_targets();
  auto z = test_logits(LossType::squared_hinge);
  int64_t expect_zero = 0;
  for (int64_t r = 0; r < kB; ++r)
    for (int64_t l = 0; l < kL; ++l) {
      const double y = is_pos(t, r, l) ? 1.0 : -1.0;
      if (1.0 - y * static_cast<float>(z[r * kL + l]) <= 0) ++expect_zero;
    }
  REQUIRE(expect_zero > 0);
  REQUIRE(expect_zero < kB * kL);
  std::vector<float> g;
  int64_t zeros = 0;
  run_chunks(LossType::squared_hinge, z, t, {0, 4, kL}, g, &zeros);
  CHECK(zeros == expect_zero);
  int64_t exact = 0;
  for (float x : g) exact += x == 0.0f;
  CHECK(exact == expect_zero);
}

TEST_CASE("bce is stable for huge logits") {
  const CsrMatrix t = make_csr({{0}, {}}, 2);
  // Row 0: positive at 0 with z = -200 (wrong side), negative at 1 with z = 200.
  std::vector<float> z = {-200.0f, 200.0f, -200.0f, -200.0f};
  const double loss = elementwise_loss_grad(LossType::bce, Matrix{z.data(), 2, 2}, t, 0, 2);
  CHECK(loss == Approx(400.0).epsilon(1e-9));
  CHECK(z[0] == Approx(-0.5));  // (sigmoid(-200) - 1) / 2
  CHECK(z[1] == Approx(0.5));
  CHECK(z[2] == 0.0f);  // well-classified negatives: gradient underflows to 0
  CHECK(std::isfinite(loss));
}

TEST_CASE("softmax is stable for huge logits") {
  const CsrMatrix t = make_csr({{1}}, 3);
  std::vector<float> z = {1000.0f, 999.0f, -1000.0f};
  SoftmaxStats stats(1);
  softmax_accumulate(ConstMatrix{z.data(), 1, 2, 3}, stats);
  softmax_accumulate(ConstMatrix{z.data() + 2, 1, 1, 3}, stats);
  const double loss = softmax_loss_grad(Matrix{z.data(), 1, 3}, stats, t, 0, 1);
  // -log(e^999 / (e^1000 + e^999)) = log(1 + e)
  // exp is evaluated in float (ops/fast_math.h, relative error < 3e-7).
  CHECK(loss == Approx(std::log1p(std::exp(1.0))).epsilon(1e-6));
  CHECK(z[0] == Approx(1.0 / (1.0 + std::exp(-1.0))));
  CHECK(std::isfinite(z[2]));
}

TEST_CASE("loss names parse and unknown names list the known ones") {
  CHECK(parse_enum<LossType>("bce", "loss") == LossType::bce);
  CHECK(parse_enum<LossType>("squared_hinge", "loss") == LossType::squared_hinge);
  CHECK(parse_enum<LossType>("softmax", "loss") == LossType::softmax);
  CHECK(to_string(LossType::squared_hinge) == "squared_hinge");
  CHECK_THROWS_AS(parse_enum<LossType>("hinge", "loss"), InputError);
  CHECK_THROWS_WITH(parse_enum<LossType>("hinge", "loss"),
                    Catch::Matchers::Contains("'hinge'") &&
                        Catch::Matchers::Contains("bce, squared_hinge, softmax"));
}

TEST_CASE("elementwise loss rejects a chunk outside the targets' labels") {
  const CsrMatrix t = make_csr({{0}}, 3);
  std::vector<float> z(3);
  CHECK_THROWS_AS(elementwise_loss_grad(LossType::bce, Matrix{z.data(), 1, 3}, t, 1, 1), Error);
  CHECK_THROWS_AS(elementwise_loss_grad(LossType::softmax, Matrix{z.data(), 1, 3}, t, 0, 1), Error);
}

TEST_CASE("losses give the same result on one thread and on many (OpenMP path)") {
  // Large enough for the parallel branch (rows·c > 16384).
  const int64_t b = 64, l = 1000;
  Rng rng(5);
  std::vector<std::vector<uint32_t>> rows(b);
  for (int64_t r = 0; r < b; ++r)
    for (uint32_t c = 0; c < l; ++c)
      if (rng.uniform() < 0.01) rows[r].push_back(c);
  const CsrMatrix t = make_csr(rows, l);
  const auto z0 = to_float(random_vector(rng, b * l, -4, 4));
  const int threads = omp_get_max_threads();
  for (auto type : {LossType::bce, LossType::squared_hinge, LossType::softmax}) {
    INFO(to_string(type));
    std::vector<float> g[2];
    double loss[2];
    int64_t zeros[2] = {0, 0};
    for (int pass = 0; pass < 2; ++pass) {
      omp_set_num_threads(pass == 0 ? 1 : std::max(2, threads));
      g[pass] = z0;
      Matrix m{g[pass].data(), b, l};
      if (type == LossType::softmax) {
        SoftmaxStats s(b);
        softmax_accumulate(m, s);
        loss[pass] = softmax_loss_grad(m, s, t, 0, b);
      } else {
        loss[pass] = elementwise_loss_grad(type, m, t, 0, b, &zeros[pass]);
      }
    }
    omp_set_num_threads(threads);
    CHECK(loss[1] == Approx(loss[0]).epsilon(1e-12));
    CHECK(g[1] == g[0]);  // per-entry work is independent of the thread count
    CHECK(zeros[1] == zeros[0]);
  }
}

namespace {

// Every label of every row as a candidate entry (row-major), flagged from the targets.
struct AllCandidates {
  std::vector<int64_t> ptr;
  std::vector<uint8_t> positive;
  explicit AllCandidates(const CsrMatrix& t) {
    for (int64_t r = 0; r <= kB; ++r) ptr.push_back(r * kL);
    for (int64_t r = 0; r < kB; ++r)
      for (int64_t l = 0; l < kL; ++l) positive.push_back(is_pos(t, r, l) ? 1 : 0);
  }
};

void check_candidate_loss(LossType type) {
  const CsrMatrix t = test_targets();
  auto z = test_logits(type);
  for (auto& x : z) x = static_cast<double>(static_cast<float>(x));
  const AllCandidates c(t);
  std::vector<float> g = to_float(z);
  int64_t zeros = -1;
  const double loss =
      candidate_loss_grad(type, c.ptr.data(), kB, c.positive.data(), nullptr, kB, g.data(), &zeros);
  // With every label a candidate, the candidate loss is the full loss: the same row code,
  // so the same gradients to the bit, and the reference within the float math's error.
  const double eps = 1e-6;
  CHECK(loss == Approx(ref_loss(type, z, t)).epsilon(eps));
  std::vector<float> g_full;
  const double loss_full = run_chunks(type, z, t, {0, kL}, g_full);
  CHECK(loss == Approx(loss_full).epsilon(1e-12));
  CHECK(g == g_full);
  CHECK(zeros == std::count(g.begin(), g.end(), 0.0f));
  CHECK(gradient_misses(type, z, t, g) == 0);
  if (type == LossType::softmax) return;  // weights apply to the elementwise losses
  // Weights scale each entry's loss and gradient.
  Rng rng(5);
  const auto wd = random_vector(rng, kB * kL, 0.5, 3.0);
  const std::vector<float> w = to_float(wd);
  std::vector<float> gw = to_float(z);
  const double loss_w =
      candidate_loss_grad(type, c.ptr.data(), kB, c.positive.data(), w.data(), kB, gw.data(), nullptr);
  double expect = 0.0;
  for (int64_t r = 0; r < kB; ++r)
    for (int64_t l = 0; l < kL; ++l) {
      const double y = is_pos(t, r, l) ? 1.0 : -1.0;
      const double x = z[r * kL + l];
      const double m = std::max(0.0, 1.0 - y * x);
      expect += w[r * kL + l] *
                (type == LossType::bce ? std::log(1.0 + std::exp(-y * x)) : m * m);
    }
  CHECK(loss_w == Approx(expect).epsilon(eps));
  for (size_t i = 0; i < g.size(); ++i)
    CHECK(gw[i] == Approx(static_cast<double>(g[i]) * w[i]).epsilon(1e-6).margin(1e-12));
}

}  // namespace

TEST_CASE("candidate losses over every label equal the full losses, weights scale them") {
  for (LossType type : {LossType::bce, LossType::squared_hinge, LossType::softmax}) {
    INFO("loss " << to_string(type));
    check_candidate_loss(type);
  }
}

TEST_CASE("candidate softmax: a point without positives contributes neither loss nor gradient") {
  const std::vector<int64_t> ptr = {0, 3, 5};
  const std::vector<uint8_t> pos = {0, 1, 0, 0, 0};
  std::vector<float> g = {1.0f, 2.0f, -1.0f, 5.0f, -3.0f};
  int64_t zeros = 0;
  const double loss =
      candidate_loss_grad(LossType::softmax, ptr.data(), 2, pos.data(), nullptr, 2, g.data(), &zeros);
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(-1.0));
  CHECK(loss == Approx(lse - 2.0).epsilon(1e-6));
  CHECK(g[3] == 0.0f);
  CHECK(g[4] == 0.0f);
  CHECK(zeros == 2);
  CHECK(g[1] == Approx((std::exp(2.0 - lse) - 1.0) / 2.0).epsilon(1e-6));
}

TEST_CASE("candidate softmax over two label shards equals the softmax over their union") {
  // Two processes emulated by two threads that reduce through shared slots (the same sum
  // order on both, as MPI_Allreduce gives). Row r's labels [0, split[r]) are shard 0's
  // candidates, the rest shard 1's: row 0's positives on both sides, row 1 entirely on
  // shard 0 (shard 1 holds no entry of it), row 2 without positives, row 3 entirely on
  // shard 1.
  const CsrMatrix t = test_targets();
  const auto z = to_float(test_logits(LossType::softmax));
  const AllCandidates all(t);
  std::vector<float> g_one = z;
  int64_t zeros_one = 0;
  const double loss_one = candidate_loss_grad(LossType::softmax, all.ptr.data(), kB,
                                              all.positive.data(), nullptr, kB, g_one.data(),
                                              &zeros_one);
  const int64_t split[kB] = {3, kL, 3, 0};
  struct Shard {
    std::vector<int64_t> ptr{0};
    std::vector<uint8_t> positive;
    std::vector<float> g;
    double loss = 0.0;
    int64_t zeros = 0;
  } part[2];
  for (int64_t r = 0; r < kB; ++r)
    for (int s = 0; s < 2; ++s) {
      const int64_t l0 = s == 0 ? 0 : split[r], l1 = s == 0 ? split[r] : kL;
      for (int64_t l = l0; l < l1; ++l) {
        part[s].positive.push_back(all.positive[static_cast<size_t>(r * kL + l)]);
        part[s].g.push_back(z[static_cast<size_t>(r * kL + l)]);
      }
      part[s].ptr.push_back(static_cast<int64_t>(part[s].g.size()));
    }
  std::barrier<> sync(2);
  std::vector<double> slot[2];
  auto reduce = [&](int me, std::span<double> x, bool is_max) {
    slot[me].assign(x.begin(), x.end());
    sync.arrive_and_wait();
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = is_max ? std::max(slot[0][i], slot[1][i]) : slot[0][i] + slot[1][i];
    sync.arrive_and_wait();
  };
  std::vector<std::thread> procs;
  for (int s = 0; s < 2; ++s)
    procs.emplace_back([&, s] {
      RowReductions sh;
      sh.reduce_max = [&, s](std::span<double> x) { reduce(s, x, true); };
      sh.reduce_sum = [&, s](std::span<double> x) { reduce(s, x, false); };
      Shard& p = part[s];
      p.loss = candidate_loss_grad(LossType::softmax, p.ptr.data(), kB, p.positive.data(),
                                   nullptr, kB, p.g.data(), &p.zeros, &sh);
    });
  for (auto& th : procs) th.join();
  CHECK(part[0].loss + part[1].loss == Approx(loss_one).epsilon(1e-6));
  CHECK(part[0].loss > 0.0);  // both shards hold positives' loss terms
  CHECK(part[1].loss > 0.0);
  CHECK(part[0].zeros + part[1].zeros == zeros_one);
  for (int64_t r = 0; r < kB; ++r)
    for (int64_t l = 0; l < kL; ++l) {
      const int s = l < split[r] ? 0 : 1;
      const int64_t e = part[s].ptr[static_cast<size_t>(r)] + (s == 0 ? l : l - split[r]);
      INFO("row " << r << " label " << l);
      CHECK(part[s].g[static_cast<size_t>(e)] ==
            Approx(g_one[static_cast<size_t>(r * kL + l)]).epsilon(1e-6).margin(1e-9));
    }
}

TEST_CASE("candidate losses are the same to the bit at any thread count") {
  // Points of uneven size (1..40 entries) so that the dynamic schedule hands them out
  // differently each run: the loss is summed in point order, not per thread.
  Rng rng(17);
  const int64_t rows = 2000;
  std::vector<int64_t> ptr = {0};
  std::vector<uint8_t> positive;
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t nc = 1 + static_cast<int64_t>(rng.below(40));
    for (int64_t j = 0; j < nc; ++j) positive.push_back(rng.uniform() < 0.1 ? 1 : 0);
    ptr.push_back(ptr.back() + nc);
  }
  const auto z0 = to_float(random_vector(rng, ptr.back(), -4, 4));
  const int threads = omp_get_max_threads();
  for (auto type : {LossType::bce, LossType::squared_hinge, LossType::softmax}) {
    INFO(to_string(type));
    double loss[2];
    std::vector<float> g[2];
    for (int pass = 0; pass < 2; ++pass) {
      omp_set_num_threads(pass == 0 ? 1 : std::max(4, threads));
      g[pass] = z0;
      loss[pass] = candidate_loss_grad(type, ptr.data(), rows, positive.data(), nullptr, rows,
                                       g[pass].data(), nullptr);
    }
    omp_set_num_threads(threads);
    CHECK(loss[1] == loss[0]);
    CHECK(g[1] == g[0]);
  }
}
