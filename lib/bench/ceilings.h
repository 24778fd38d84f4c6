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
// Memory bandwidth (GB/s, bytes read + written) over buffers much larger than the caches:
// the faster of a block-wise memcpy (2 arrays; its stores also read the destination
// lines first, which memcpy's count leaves out) and an in-place a += s·b (3 arrays, the
// read-modify-write pattern of the optimizer updates and the in-place losses).
double measure_memory_gbps(long long bytes = 1LL << 29);

// Achieved GFLOP/s of the fan-in ops (forward + weight gradient + input gradient, every
// output gradient nonzero, 6·B·L·F FLOPs) at batch B, m inputs, fan-in F over `labels`
// labels: group = 1 times ops::fixed_fanin_*, group > 1 ops::group_shared_* with groups of
// that size. The best of at least five passes spanning at least half a second.
double measure_fanin_gflops(int64_t batch, int64_t inputs, int64_t fan_in, int64_t group,
                            int64_t labels = 8192);

// The "ceilings" object of a CPU benchmark's JSON: {"sgemm_gflops", "memory_gbps",
// "blas_kernels"}, the last the core whose kernels OpenBLAS ran (core/blas_kernels.h),
// since the sgemm figure depends on it.
nlohmann::json cpu_ceilings(double sgemm_gflops, double memory_gbps);

// Where `xmctrain bench ceilings` caches the CPU ceilings measured with `threads` threads
// and `xmctrain plan` looks for them: $XDG_CACHE_HOME/xmctrain/ceilings-cpu-<threads>t.json
// (XDG_CACHE_HOME defaulting to ~/.cache).
std::string ceilings_cache_path(int threads);
// {"ceilings": {"sgemm_gflops", "memory_gbps"}, "threads", "device": "cpu", "cpu": model
// name, "measured_at": UTC time}, measured with the calling thread count (`threads`).
nlohmann::json measure_ceilings(int threads);

// Seconds per repetition of op(c0, c) over the blocks [c0, c0+c) of n labels in blocks of
// `chunk`, averaged over `iters` repetitions.
double time_over_blocks(int iters, int64_t n, int64_t chunk,
                        const std::function<void(int64_t, int64_t)>& op);
// One op: {"seconds": per call}, plus "gflops" and "gemm_ratio" (of gemm_gflops) when
// flops > 0, "gbps" and "memory_ratio" (of memory_gbps) when bytes > 0.
nlohmann::json op_figures(double seconds, double flops, double bytes, double gemm_gflops,
                          double memory_gbps);
// "ceilings: sgemm … GFLOP/s, memory … GB/s[, OpenBLAS … kernels]" from a benchmark's JSON
// (its "ceilings"), and the column header of op_row's table.
std::string ceilings_line(const nlohmann::json& j);
std::string op_header(int name_width);
// Its table row: name (left, name_width), ms, GFLOP/s, %gemm, GB/s, %mem ("-" where absent).
std::string op_row(const std::string& name, const nlohmann::json& o, int name_width);

}  // namespace xmc::bench
