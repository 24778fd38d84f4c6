// The CPU fixed fan-in forward op (ops/fixed_fanin.h) against a naive double
// loop at sizes that exercise every edge of its blocking: batches that are not a multiple
// of the 32-row batch block (and smaller than one), label counts that are not a multiple
// of the 16-label tile, fan-in 1 and fan-in above the vector width, with and without
// bias, a row stride of z larger than n, and 1 and 2 threads.
#include <omp.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "core/rng.h"
#include "ops/fixed_fanin.h"

using namespace xmc;

namespace {

void check_forward(int64_t batch, int64_t n, int64_t m, int64_t fan_in, bool with_bias,
                   int64_t ld, int threads) {
  Rng rng(1000 + static_cast<uint64_t>(batch * 131 + n * 7 + fan_in));
  std::vector<uint32_t> idx(static_cast<size_t>(n * fan_in));
  std::vector<float> w(idx.size()), bias(static_cast<size_t>(n));
  std::vector<float> ut(static_cast<size_t>(m * batch));
  for (auto& v : w) v = static_cast<float>(rng.normal());
  for (auto& v : bias) v = static_cast<float>(rng.normal());
  for (auto& v : ut) v = static_cast<float>(rng.normal());
  for (int64_t l = 0; l < n; ++l)
    for (int64_t j = 0; j < fan_in; ++j)  // distinct inputs: a stride coprime to m
      idx[static_cast<size_t>(l * fan_in + j)] =
          static_cast<uint32_t>((l * 13 + j * 7) % m);
  const float sentinel = 12345.0f;
  std::vector<float> z(static_cast<size_t>(batch * ld), sentinel);
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  const Context cpu(Device::cpu, threads);
  ops::fixed_fanin_forward(cpu, idx.data(), w.data(), with_bias ? bias.data() : nullptr, n, fan_in,
                           ConstMatrix{ut.data(), m, batch, batch}, Matrix{z.data(), batch, n, ld});
  omp_set_num_threads(before);
  int64_t bad = 0;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t l = 0; l < n; ++l) {
      double ref = with_bias ? bias[static_cast<size_t>(l)] : 0.0;
      double mag = std::fabs(ref);
      for (int64_t j = 0; j < fan_in; ++j) {
        const size_t e = static_cast<size_t>(l * fan_in + j);
        const double t = static_cast<double>(w[e]) * ut[static_cast<size_t>(idx[e] * batch + b)];
        ref += t;
        mag += std::fabs(t);
      }
      const double got = z[static_cast<size_t>(b * ld + l)];
      if (std::fabs(got - ref) > 1e-6 * (1.0 + mag)) ++bad;
    }
    for (int64_t l = n; l < ld; ++l)  // the padding of each row is not written
      if (z[static_cast<size_t>(b * ld + l)] != sentinel) ++bad;
  }
  INFO("B=" << batch << " n=" << n << " m=" << m << " F=" << fan_in << " bias=" << with_bias
            << " ld=" << ld << " threads=" << threads);
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("fixed fan-in forward op equals a naive loop at odd sizes", "[fixed_fanin]") {
  for (int threads : {1, 2}) {
    check_forward(1, 5, 9, 1, true, 5, threads);
    check_forward(7, 37, 50, 3, false, 40, threads);
    check_forward(32, 16, 64, 32, true, 16, threads);
    check_forward(33, 33, 100, 17, true, 35, threads);
    check_forward(77, 50, 257, 40, false, 50, threads);
    check_forward(130, 21, 96, 64, true, 24, threads);
  }
}
