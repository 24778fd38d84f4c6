#pragma once
// `xmctrain bench lsh`: cost of the lsh_sampled sampling step alone (hash the query, read
// the buckets, rank, cap, pad) per point as the number of labels grows, plus the table
// build time. Label weights and queries are random Gaussian; tables are full when every
// table has more labels than buckets × capacity, which is what makes the cost per point
// independent of L.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace xmc::bench {

struct LshBenchParams {
  std::vector<int64_t> labels = {10000, 100000, 1000000};
  int64_t dim = 128;
  int64_t batch = 256;
  int iters = 20;
  std::string hash = "simhash";
  int k = 6;
  int tables = 32;
  int capacity = 128;
  std::string query = "embedding";  // embedding | label | none
  int64_t max_candidates = 1024;
  int64_t min_candidates = 256;
  int threads = 1;
};

nlohmann::json bench_lsh(const LshBenchParams& p);
std::string lsh_bench_table(const nlohmann::json& j);

}  // namespace xmc::bench
