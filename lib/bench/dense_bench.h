#pragma once
// `xmctrain bench dense`: per-op time of one dense training step (forward, loss,
// backward, update) at B, d, L, with achieved GFLOP/s and GB/s beside the measured sgemm
// and memory-bandwidth ceilings.
#include <cstdint>
#include <string>
#include <vector>

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
  // DenseBlock::set_sparse_gradient's threshold (0: exact). With it the bias starts at the
  // labels' log prior (3 positives a row), as `bias_init: log_prior` starts a real run, so
  // that G is as sparse as in training rather than dense at σ(0) = 0.5.
  double sparse_gradient = 0.0;
};

nlohmann::json bench_dense(const DenseBenchParams& p);

// The same step on the GPU (DenseBlock on a CUDA Context), per label count and precision,
// adam + bce.
struct DenseCudaBenchParams {
  int64_t batch = 256;
  int64_t dim = 768;
  std::vector<int64_t> labels = {131072, 670091, 3000000};
  int64_t chunk = 16384;
  int iters = 5;
  std::vector<std::string> precisions = {"fp32", "bf16", "fp8"};
};
// InputError without a GPU or without CUDA support.
nlohmann::json bench_dense_cuda(const DenseCudaBenchParams& p);
std::string dense_cuda_bench_table(const nlohmann::json& j);
// A short human-readable table of the JSON above.
std::string dense_bench_table(const nlohmann::json& j);

}  // namespace xmc::bench
