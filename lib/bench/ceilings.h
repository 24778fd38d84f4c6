#pragma once
// Measured machine ceilings that benchmarks report their figures against.
namespace xmc::bench {

// sgemm throughput (GFLOP/s) on an n×n×n product, best of a few runs.
double measure_sgemm_gflops(int n = 2048);
// Copy bandwidth (GB/s, bytes read + written) of a buffer much larger than the caches.
double measure_copy_gbps(long long bytes = 1LL << 29);

}  // namespace xmc::bench
