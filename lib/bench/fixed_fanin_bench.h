#pragma once
// `xmctrain bench fixed_fanin`: time of the fixed fan-in ops (forward, weight gradient,
// input gradient — with every output gradient nonzero, and with only a fraction nonzero
// as squared hinge leaves them) at B, m, L, F, beside a dense GEMM of the same shape
// (B×m · m×L) and a FLOPs-matched dense GEMM (inner dimension F), with achieved GB/s
// against the measured memory-bandwidth ceiling.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace xmc::bench {

struct FixedFaninBenchParams {
  int64_t batch = 64;
  int64_t dim = 768;        // m, inputs of the sparse layer
  int64_t labels = 65536;
  int64_t fan_in = 32;
  int64_t chunk = 8192;     // labels per block (bounds z [B×chunk])
  double nonzero = 0.05;    // share of nonzero output gradients in the sparse case
  int iters = 3;
  int threads = 0;
};

nlohmann::json bench_fixed_fanin(const FixedFaninBenchParams& p);
std::string fixed_fanin_bench_table(const nlohmann::json& j);

}  // namespace xmc::bench
