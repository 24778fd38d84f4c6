#pragma once
// `xmctrain bench group_shared`: time of the group-shared ops (forward, weight gradient,
// input gradient, every output gradient nonzero) for each G and F at B, m, L, beside the
// fixed fan-in ops and the FLOPs-matched dense GEMM at the same B, m, L, F (measured by
// bench_fixed_fanin, lib/bench/fixed_fanin_bench.h), with achieved GB/s against the
// measured memory-bandwidth ceiling.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace xmc::bench {

struct GroupSharedBenchParams {
  int64_t batch = 64;
  int64_t dim = 768;  // m, inputs of the tail
  int64_t labels = 65536;
  std::vector<int64_t> groups = {16, 32, 64};
  std::vector<int64_t> fan_ins = {32, 64, 128};
  int64_t chunk = 8192;  // labels per block (rounded down to a multiple of G)
  int iters = 3;
  int threads = 0;
};

nlohmann::json bench_group_shared(const GroupSharedBenchParams& p);
std::string group_shared_bench_table(const nlohmann::json& j);

}  // namespace xmc::bench
