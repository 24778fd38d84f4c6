#pragma once
// Measured machine ceilings that benchmarks report their figures against, and the one
// form of an op's figures and of its table row.
#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace xmc::bench {

// sgemm throughput (GFLOP/s) on an n×n×n product, best of a few runs.
double measure_sgemm_gflops(int n = 2048);
// Copy bandwidth (GB/s, bytes read + written) of a buffer much larger than the caches.
double measure_copy_gbps(long long bytes = 1LL << 29);

// Seconds per repetition of op(c0, c) over the blocks [c0, c0+c) of n labels in blocks of
// `chunk`, averaged over `iters` repetitions.
double time_over_blocks(int iters, int64_t n, int64_t chunk,
                        const std::function<void(int64_t, int64_t)>& op);
// One op: {"seconds": per call}, plus "gflops" and "gemm_ratio" (of gemm_gflops) when
// flops > 0, "gbps" and "copy_ratio" (of copy_gbps) when bytes > 0.
nlohmann::json op_figures(double seconds, double flops, double bytes, double gemm_gflops,
                          double copy_gbps);
// "ceilings: sgemm … GFLOP/s, copy … GB/s" from a benchmark's JSON (its "ceilings"), and
// the column header of op_row's table.
std::string ceilings_line(const nlohmann::json& j);
std::string op_header(int name_width);
// Its table row: name (left, name_width), ms, GFLOP/s, %gemm, GB/s, %copy ("-" where absent).
std::string op_row(const std::string& name, const nlohmann::json& o, int name_width);

}  // namespace xmc::bench
