// GPU microbenchmark of one dense training step: a thin front end to
// bench::bench_dense_cuda (lib/bench/dense_bench_cuda.cpp, also `xmctrain bench dense
// --device cuda`). Not a test: tools/gpu_check.sh runs it and keeps its JSON. Exit 77
// without a GPU.
//
//   bench_dense_cuda [--batch 256] [--dim 768] [--labels 131072,670091,3000000]
//                    [--chunk 16384] [--iters 5] [--precision fp32,bf16,fp8] [--json FILE]
#include <cstdio>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/dense_bench.h"
#include "core/gpu.h"

namespace {
std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  xmc::bench::DenseCudaBenchParams p;
  std::string json_path;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--batch") {
      p.batch = std::stoll(v);
    } else if (k == "--dim") {
      p.dim = std::stoll(v);
    } else if (k == "--labels") {
      p.labels.clear();
      for (const auto& x : split(v)) p.labels.push_back(std::stoll(x));
    } else if (k == "--chunk") {
      p.chunk = std::stoll(v);
    } else if (k == "--iters") {
      p.iters = std::stoi(v);
    } else if (k == "--precision") {
      p.precisions = split(v);
    } else if (k == "--json") {
      json_path = v;
    } else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  try {
    if (xmc::gpu::query_devices().empty()) {
      std::printf("no CUDA GPU: skipped\n");
      return 77;
    }
    const auto j = xmc::bench::bench_dense_cuda(p);
    if (!json_path.empty()) std::ofstream(json_path) << j.dump(2) << "\n";
    std::printf("%s", xmc::bench::dense_cuda_bench_table(j).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_dense_cuda: %s\n", e.what());
    return 1;
  }
  return 0;
}
