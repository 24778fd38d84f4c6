// The dense op family on the CPU: the three GEMM forms against a naive product at odd
// sizes, and the Context overloads (what layers call) equal to the host ops.
#include <catch2/catch.hpp>
#include <vector>

#include "core/context.h"
#include "core/rng.h"
#include "ops/dense.h"

using namespace xmc;

namespace {
std::vector<float> random_vec(Rng& rng, size_t n) {
  std::vector<float> v(n);
  for (auto& x : v) x = rng.uniformf() * 2.0f - 1.0f;
  return v;
}
}  // namespace

TEST_CASE("dense ops: gemm_nt / nn / tn against a naive product, host and Context forms") {
  Rng rng(5);
  Context ctx(Device::cpu, 1);
  const int64_t m = 7, n = 5, k = 3;
  for (int op = 0; op < 3; ++op) {
    INFO("op " << op);
    // A is [m×k] (tn: [k×m]), B is [n×k] (nt) or [k×n].
    const std::vector<float> a = random_vec(rng, m * k), b = random_vec(rng, n * k);
    const std::vector<float> c0 = random_vec(rng, m * n);
    auto A = [&](int64_t i, int64_t p) { return op == 2 ? a[p * m + i] : a[i * k + p]; };
    auto B = [&](int64_t p, int64_t j) { return op == 0 ? b[j * k + p] : b[p * n + j]; };
    const ConstMatrix am(a.data(), op == 2 ? k : m, op == 2 ? m : k);
    const ConstMatrix bm(b.data(), op == 0 ? n : k, op == 0 ? k : n);
    std::vector<float> host = c0, via_ctx = c0;
    Matrix hc(host.data(), m, n), cc(via_ctx.data(), m, n);
    if (op == 0) ops::gemm_nt(am, bm, hc, 1.5f, 0.5f), ops::gemm_nt(ctx, am, bm, cc, 1.5f, 0.5f);
    if (op == 1) ops::gemm_nn(am, bm, hc, 1.5f, 0.5f), ops::gemm_nn(ctx, am, bm, cc, 1.5f, 0.5f);
    if (op == 2) ops::gemm_tn(am, bm, hc, 1.5f, 0.5f), ops::gemm_tn(ctx, am, bm, cc, 1.5f, 0.5f);
    CHECK(host == via_ctx);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double want = 0.5 * c0[static_cast<size_t>(i * n + j)];
        for (int64_t p = 0; p < k; ++p) want += 1.5 * A(i, p) * B(p, j);
        CHECK(host[static_cast<size_t>(i * n + j)] == Approx(want).margin(1e-5));
      }
    // A shape mismatch names the op and the shapes.
    Matrix wrong(host.data(), m, n - 1);
    CHECK_THROWS_WITH(op == 0   ? ops::gemm_nt(am, bm, wrong)
                      : op == 1 ? ops::gemm_nn(am, bm, wrong)
                                : ops::gemm_tn(am, bm, wrong),
                      Catch::Contains(op == 0   ? "gemm_nt shapes"
                                      : op == 1 ? "gemm_nn shapes"
                                                : "gemm_tn shapes"));
  }
  // column_sums and add_row_vector through the Context.
  std::vector<float> x = {1, 2, 3, 4, 5, 6}, sums(3);
  ops::column_sums(ctx, ConstMatrix(x.data(), 2, 3), sums.data());
  CHECK(sums == std::vector<float>{5, 7, 9});
  ops::add_row_vector(ctx, Matrix(x.data(), 2, 3), sums.data());
  CHECK(x == std::vector<float>{6, 9, 12, 9, 12, 15});
}
