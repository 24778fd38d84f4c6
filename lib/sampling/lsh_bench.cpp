#include "sampling/lsh_bench.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>

#include "core/memory_ledger.h"
#include "core/resources.h"
#include "core/rng.h"
#include "sampling/lsh.h"
#include "sampling/lsh_candidates.h"

namespace xmc::bench {

nlohmann::json bench_lsh(const LshBenchParams& p) {
  if (p.threads > 0) omp_set_num_threads(p.threads);
  nlohmann::json out;
  out["op"] = "lsh_sampling";
  out["params"] = {{"dim", p.dim},           {"batch", p.batch},
                   {"iters", p.iters},       {"hash", p.hash},
                   {"k", p.k},               {"tables", p.tables},
                   {"capacity", p.capacity}, {"query", p.query},
                   {"max_candidates", p.max_candidates},
                   {"min_candidates", p.min_candidates},
                   {"threads", omp_get_max_threads()}};
  out["results"] = nlohmann::json::array();
  for (int64_t n : p.labels) {
    MemoryLedger ledger;
    std::vector<float> w(static_cast<size_t>(n * p.dim));
#pragma omp parallel for schedule(static)
    for (int64_t l = 0; l < n; ++l) {
      Rng rng = Rng::stream(1, static_cast<uint64_t>(l));
      for (int64_t j = 0; j < p.dim; ++j) w[l * p.dim + j] = static_cast<float>(rng.normal());
    }
    LshTables tables(ledger, p.dim, n,
                     {.family = parse_enum<LshFamily>(p.hash, "LSH family"),
                      .k = p.k,
                      .tables = p.tables,
                      .capacity = p.capacity,
                      .seed = 2});
    Stopwatch sw;
    tables.build(ConstMatrix(w.data(), n, p.dim));
    const double build_s = sw.seconds();

    CandidateSampler sampler(n, {.query = parse_enum<LshQuery>(p.query, "LSH query"),
                                 .max_candidates = p.max_candidates,
                                 .min_candidates = p.min_candidates});
    Rng rng(3);
    std::vector<float> h(static_cast<size_t>(p.batch * p.dim));
    std::vector<std::vector<uint32_t>> y_rows(static_cast<size_t>(p.batch));  // one label each
    for (auto& r : y_rows) r = {static_cast<uint32_t>(rng.below(static_cast<uint64_t>(n)))};
    const CsrMatrix y = CsrMatrix::from_rows(y_rows, n);
    for (auto& v : h) v = static_cast<float>(rng.normal());
    int64_t total = 0;
    // One untimed warm-up batch, then iters timed batches.
    const LabelVectors all{ConstMatrix(w.data(), n, p.dim), {}};
    sampler.sample(&tables, ConstMatrix(h.data(), p.batch, p.dim), all, y, 0);
    sw.reset();
    for (int it = 1; it <= p.iters; ++it) {
      CsrMatrix c = sampler.sample(&tables, ConstMatrix(h.data(), p.batch, p.dim), all, y,
                                   static_cast<uint64_t>(it));
      total += c.nnz();
    }
    const double secs = sw.seconds();
    const double points = static_cast<double>(p.batch) * p.iters;
    out["results"].push_back({{"labels", n},
                              {"build_seconds", build_s},
                              {"us_per_point", 1e6 * secs / points},
                              {"candidates_per_point", static_cast<double>(total) / points},
                              {"table_bytes", tables.bytes()}});
  }
  return out;
}

std::string lsh_bench_table(const nlohmann::json& j) {
  std::string s = fmt::format("lsh sampling ({} threads, {} {}×{} tables, capacity {}, query {})\n",
                              j["params"]["threads"].get<int>(), j["params"]["hash"].get<std::string>(),
                              j["params"]["tables"].get<int>(), j["params"]["k"].get<int>(),
                              j["params"]["capacity"].get<int>(),
                              j["params"]["query"].get<std::string>());
  s += fmt::format("{:>10} {:>10} {:>12} {:>12} {:>12}\n", "labels", "build_s", "us/point",
                   "cand/point", "table_MiB");
  for (const auto& r : j["results"])
    s += fmt::format("{:>10} {:>10.3f} {:>12.2f} {:>12.1f} {:>12.1f}\n", r["labels"].get<int64_t>(),
                     r["build_seconds"].get<double>(), r["us_per_point"].get<double>(),
                     r["candidates_per_point"].get<double>(),
                     static_cast<double>(r["table_bytes"].get<int64_t>()) / 1048576.0);
  return s;
}

}  // namespace xmc::bench
