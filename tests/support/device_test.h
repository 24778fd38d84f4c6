#pragma once
// One test body per comparison, run on every device (issue 38): the DEVICE_TEST and
// CUDA_TEST macros, and what the bodies share — host <-> device copies through Buffers,
// random inputs, bf16 roundings, the one tolerance check of the suite (expect_close).
//
//   DEVICE_TEST("title", "[tags]") { ... ctx ... }
//     one body, registered as two Catch2 test cases: "title (cpu)" (tags + [cpu]), run with
//     `ctx` a CPU Context, and "title (cuda)" (tags + [cuda]), run with `ctx` a CUDA
//     Context. A body that compares a device against the CPU builds its reference on a CPU
//     Context of its own (`Context cpu;`), so the (cpu) case runs the same comparisons CPU
//     against CPU: every body runs and asserts in a build without CUDA.
//   CUDA_TEST("title", "[tags]") { ... ctx ... }
//     a GPU-only body (bf16, the driver's memory): one test case "title (cuda)", tags +
//     [cuda], `ctx` a CUDA Context.
//
// Test cases tagged [cuda] need a GPU. Without one (or in a build without CUDA) tests/main.cpp
// never runs them and never counts them as passed: a run whose selection holds only [cuda]
// cases prints why and exits 77 — CTest registers each [cuda] case as its own test with
// SKIP_RETURN_CODE 77 (xmc_add_device_test, tests/CMakeLists.txt), so ctest lists it as
// "Skipped" —; a run that selects others too runs those and says how many [cuda] cases it
// left out. XMC_TEST_REQUIRE_CUDA non-empty (the GPU kit): a missing GPU fails the run
// instead (exit 1).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/context.h"
#include "core/rng.h"
#include "ops/dense.h"  // gpu::Bf16, bf16_round, bf16_widen, gpu::Bf16Matrix
#include "ops/topk.h"   // stream_topk, TopK, TopKAccumulator

namespace xmc::test {

// Runs a DEVICE_TEST / CUDA_TEST body on a fresh Context of the device.
template <class Body>
void run_on(Device device, Body body) {
  Context ctx(device);
  body(ctx);
}

}  // namespace xmc::test

#define XMC_DEVICE_TEST_IMPL_(body, title, tags)                                                \
  static void body(::xmc::Context& ctx);                                                        \
  TEST_CASE(title " (cpu)", tags "[cpu]") { ::xmc::test::run_on(::xmc::Device::cpu, body); }    \
  TEST_CASE(title " (cuda)", tags "[cuda]") { ::xmc::test::run_on(::xmc::Device::cuda, body); } \
  static void body([[maybe_unused]] ::xmc::Context& ctx)
#define DEVICE_TEST(title, tags) \
  XMC_DEVICE_TEST_IMPL_(INTERNAL_CATCH_UNIQUE_NAME(xmc_device_test_body_), title, tags)

#define XMC_CUDA_TEST_IMPL_(body, title, tags)                                                  \
  static void body(::xmc::Context& ctx);                                                        \
  TEST_CASE(title " (cuda)", tags "[cuda]") { ::xmc::test::run_on(::xmc::Device::cuda, body); } \
  static void body([[maybe_unused]] ::xmc::Context& ctx)
#define CUDA_TEST(title, tags) \
  XMC_CUDA_TEST_IMPL_(INTERNAL_CATCH_UNIQUE_NAME(xmc_cuda_test_body_), title, tags)

namespace xmc::test {

// v copied into a new Buffer on ctx's device (at least one element).
template <class T>
Buffer<T> put(Context& ctx, const std::vector<T>& v) {
  Buffer<T> b(ctx, MemTag::workspace, std::max<size_t>(v.size(), 1));
  b.copy_from_host(v.data(), v.size());
  return b;
}

// The first n elements of b, on the host.
template <class T>
std::vector<T> get(const Buffer<T>& b, size_t n) {
  std::vector<T> v(n);
  b.copy_to_host(v.data(), n);
  return v;
}

// A matrix on ctx's device (a device view on CUDA) as a host vector, row after row.
inline std::vector<float> host_copy(const Context& ctx, ConstMatrix m) {
  const ConstMatrix h = HostView(ctx, m).view();
  std::vector<float> v(static_cast<size_t>(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r) std::copy_n(h.row(r), m.cols, v.begin() + r * m.cols);
  return v;
}

// n values uniform in [-scale, scale).
inline std::vector<float> random_floats(Rng& rng, size_t n, float scale = 1.0f) {
  std::vector<float> v(n);
  for (auto& x : v) x = (2.0f * rng.uniformf() - 1.0f) * scale;
  return v;
}

// The suite's one tolerance check. Every element: |got - ref| <= abs + |ref|·rel (with
// `scale`: abs + scale[i]·rel); NaN counts as outside. On a miss it reports how many
// missed and the worst one (index, got, ref, the tolerance).
inline void expect_close(const std::string& name, const std::vector<float>& got,
                         const std::vector<double>& ref, double abs, double rel,
                         const std::vector<double>* scale = nullptr) {
  INFO(name);
  REQUIRE(got.size() == ref.size());
  double worst = 0.0;
  size_t worst_i = 0;
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double s = scale ? (*scale)[i] : std::abs(ref[i]);
    const double excess = std::abs(static_cast<double>(got[i]) - ref[i]) - (abs + s * rel);
    if (!(excess <= 0.0)) {
      ++bad;
      if (bad == 1 || !(excess <= worst)) {
        worst = excess;
        worst_i = i;
      }
    }
  }
  INFO(bad << " of " << got.size() << " outside |got - ref| <= " << abs << " + |ref|·" << rel
           << ", the worst [" << worst_i << "] got " << (got.empty() ? 0.0f : got[worst_i])
           << " ref " << (ref.empty() ? 0.0 : ref[worst_i]));
  CHECK(bad == 0);
}
inline void expect_close(const std::string& name, const std::vector<float>& got,
                         const std::vector<float>& ref, double abs, double rel) {
  expect_close(name, got, std::vector<double>(ref.begin(), ref.end()), abs, rel);
}
// One value (a loss, a count, a metric).
inline void expect_close(const std::string& name, double got, double ref, double abs, double rel) {
  INFO(name << ": got " << got << " ref " << ref << " (|got - ref| <= " << abs << " + |ref|·" << rel
            << ")");
  CHECK(std::abs(got - ref) <= abs + std::abs(ref) * rel);
}

// bf16 of every value (round to nearest even), those values widened back, and widening.
inline std::vector<gpu::Bf16> to_bf16(const std::vector<float>& v) {
  std::vector<gpu::Bf16> o(v.size());
  std::transform(v.begin(), v.end(), o.begin(), gpu::bf16_round);
  return o;
}
inline std::vector<float> rounded(std::vector<float> v) {
  for (auto& x : v) x = gpu::bf16_widen(gpu::bf16_round(x));
  return v;
}
inline std::vector<float> widen(const std::vector<gpu::Bf16>& v) {
  std::vector<float> o(v.size());
  std::transform(v.begin(), v.end(), o.begin(), gpu::bf16_widen);
  return o;
}

}  // namespace xmc::test
