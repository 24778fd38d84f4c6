#pragma once
// What the shared op test bodies (tests/ops) need: the devices to run on, host ↔ device
// copies through Buffers, random inputs, the element-wise tolerance check, and bf16
// roundings of host data (the library's conversions).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/context.h"
#include "core/rng.h"
#include "ops/dense.h"  // gpu::Bf16, bf16_round, bf16_widen

namespace xmc::opstest {

// The CPU always; CUDA when the build has it and a GPU is visible. XMC_TEST_REQUIRE_CUDA
// non-empty (the GPU kit): a missing GPU fails instead of shrinking the list.
inline std::vector<Device> test_devices() {
  std::vector<Device> d = {Device::cpu};
  if (resolve_device("auto") == Device::cuda)
    d.push_back(Device::cuda);
  else if (const char* req = std::getenv("XMC_TEST_REQUIRE_CUDA"); req != nullptr && *req != '\0')
    FAIL("XMC_TEST_REQUIRE_CUDA is set but no CUDA GPU is usable");
  return d;
}

template <class T>
Buffer<T> put(Context& ctx, const std::vector<T>& v) {
  Buffer<T> b(ctx, MemTag::workspace, std::max<size_t>(v.size(), 1));
  b.copy_from_host(v.data(), v.size());
  return b;
}

template <class T>
std::vector<T> get(const Buffer<T>& b, size_t n) {
  std::vector<T> v(n);
  b.copy_to_host(v.data(), n);
  return v;
}

inline std::vector<float> random_floats(Rng& rng, size_t n, float scale = 1.0f) {
  std::vector<float> v(n);
  for (auto& x : v) x = (2.0f * rng.uniformf() - 1.0f) * scale;
  return v;
}

// Every element: |got - ref| <= abs + |ref|·rel (or, with `scale`, abs + scale[i]·rel);
// NaN counts as outside. Reports how many missed and the worst one.
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
      if (!(excess <= worst)) {
        worst = excess;
        worst_i = i;
      }
    }
  }
  INFO(bad << " of " << got.size() << " outside tolerance, e.g. [" << worst_i << "] got "
            << (got.empty() ? 0.0f : got[worst_i]) << " ref " << (ref.empty() ? 0.0 : ref[worst_i]));
  CHECK(bad == 0);
}
inline void expect_close(const std::string& name, const std::vector<float>& got,
                         const std::vector<float>& ref, double abs, double rel) {
  expect_close(name, got, std::vector<double>(ref.begin(), ref.end()), abs, rel);
}

// bf16 of every value (round to nearest even), and those values widened back.
inline std::vector<gpu::Bf16> to_bf16(const std::vector<float>& v) {
  std::vector<gpu::Bf16> o(v.size());
  std::transform(v.begin(), v.end(), o.begin(), gpu::bf16_round);
  return o;
}
inline std::vector<float> rounded(std::vector<float> v) {
  for (auto& x : v) x = gpu::bf16_widen(gpu::bf16_round(x));
  return v;
}

}  // namespace xmc::opstest
