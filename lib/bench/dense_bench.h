#pragma once
// `xmctrain bench dense`: per-op time of one dense training step (forward, loss,
// backward, update) at B, d, L, with achieved GFLOP/s and GB/s beside the measured sgemm
// and copy ceilings.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace xmc::bench {

struct DenseBenchParams {
  int64_t batch = 256;
  int64_t dim = 768;
  int64_t labels = 131072;
  int64_t chunk = 8192;
  int iters = 3;
  std::string optimizer = "adam";
  std::string loss = "bce";
  int threads = 0;
};

nlohmann::json bench_dense(const DenseBenchParams& p);
// A short human-readable table of the JSON above.
std::string dense_bench_table(const nlohmann::json& j);

}  // namespace xmc::bench
