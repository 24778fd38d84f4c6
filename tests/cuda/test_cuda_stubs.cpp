// A build without CUDA: every GPU entry point fails loudly with an InputError naming the
// missing CUDA support (never a silent CPU fallback).
#include <catch2/catch.hpp>

#include "core/context.h"
#include "core/cuda_context.h"
#include "core/error.h"
#include "core/gpu.h"
#include "ops/topk.h"

using Catch::Matchers::Contains;

TEST_CASE("without CUDA every GPU entry point throws 'built without CUDA support'") {
  xmc::MemoryLedger ledger;
  CHECK_FALSE(xmc::gpu::built_with_cuda());
  CHECK_THROWS_WITH(xmc::gpu::query_devices(), Contains("built without CUDA support"));
  CHECK_THROWS_AS(xmc::gpu::CudaContext(ledger, 0), xmc::InputError);
  CHECK_THROWS_WITH(xmc::gpu::device_alloc(16), Contains("built without CUDA support"));
  CHECK_THROWS_WITH(xmc::gpu::device_mem_info(), Contains("built without CUDA support"));
  CHECK_THROWS_WITH((xmc::gpu::DeviceBuffer<float>(ledger, xmc::MemTag::weights, 4)),
                    Contains("built without CUDA support"));
  CHECK_THROWS_WITH(xmc::gpu::topk_reset(nullptr, nullptr, 1, 1, nullptr),
                    Contains("built without CUDA support"));
  // Nothing was recorded for the buffer that could not be allocated.
  CHECK(ledger.total_current(xmc::MemSpace::device) == 0);
}

TEST_CASE("device 'cuda' without CUDA support is an input error, 'auto' resolves to cpu") {
  CHECK_THROWS_AS(xmc::resolve_device("cuda"), xmc::InputError);
  CHECK(xmc::resolve_device("auto") == xmc::Device::cpu);
}
