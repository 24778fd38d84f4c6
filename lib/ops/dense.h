#pragma once
// The dense op family: matrix products and the element-wise ops of the layers. All
// matrices are row-major views with leading dimensions; shapes are checked (before the
// device branch) and a mismatch throws xmc::Error with the values. The plain forms run on
// the CPU (OpenBLAS sgemm, row-major); the overloads taking a Context dispatch on its
// device: on a CUDA Context every view is a DEVICE view and the op is queued on the
// context's stream (the gpu:: half below; in a build without CUDA a CUDA Context cannot
// exist).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/context.h"
#include "core/cuda_context.h"
#include "core/host_device.h"
#include "core/matrix.h"

namespace xmc::gpu {
// bfloat16 storage (the bits of __nv_bfloat16); arithmetic happens in fp32 on the device.
struct Bf16 {
  uint16_t bits;
};
// Host conversions: round to nearest even, as the device's __float2bfloat16_rn (NaN stays a
// quiet NaN), and the exact widening back.
inline Bf16 bf16_round(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {static_cast<uint16_t>((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return {static_cast<uint16_t>(u >> 16)};
}
inline float bf16_widen(Bf16 v) {
  const uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
// Stochastic rounding, one rule on both devices. The random bits are counter-based: the
// stream of one update is rounding_stream(key, step) (key: WeightArray::rounding_key, step:
// the optimizer step), element i of that update draws rounding_bits(stream, i), so a run
// rounds alike on the CPU and the GPU and whatever the launch shape.
XMC_HOST_DEVICE inline uint64_t rounding_mix(uint64_t z) {  // the splitmix64 finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
XMC_HOST_DEVICE inline uint64_t rounding_stream(uint64_t key, uint64_t step) {
  return rounding_mix(key ^ (step * 0x9E3779B97F4A7C15ULL));
}
XMC_HOST_DEVICE inline uint32_t rounding_bits(uint64_t stream, uint64_t i) {
  return static_cast<uint32_t>(rounding_mix(stream + i));
}
// The bf16 bits of the fp32 value with bits u, rounded stochastically (unbiased: up with
// probability the dropped fraction) with the low 16 of the random bits r. For finite
// values; the caller rounds non-finite ones to nearest.
XMC_HOST_DEVICE inline uint16_t bf16_bits_stochastic(uint32_t u, uint32_t r) {
  return static_cast<uint16_t>(((u + (r & 0xffffu)) & 0xffff0000u) >> 16);
}
// Host: x rounded to bf16 stochastically with random bits r (non-finite: to nearest).
inline Bf16 bf16_round_stochastic(float x, uint32_t r) {
  if (!std::isfinite(x)) return bf16_round(x);
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return {bf16_bits_stochastic(u, r)};
}
using Bf16Matrix = MatrixView<Bf16>;
using ConstBf16Matrix = MatrixView<const Bf16>;
}  // namespace xmc::gpu

namespace xmc::ops {

// C [m×n] = alpha · A [m×k] · B [n×k]ᵀ + beta · C
void gemm_nt(ConstMatrix a, ConstMatrix b, Matrix c, float alpha = 1.0f, float beta = 0.0f);
// C [m×n] = alpha · A [m×k] · B [k×n] + beta · C
void gemm_nn(ConstMatrix a, ConstMatrix b, Matrix c, float alpha = 1.0f, float beta = 0.0f);
// C [m×n] = alpha · A [k×m]ᵀ · B [k×n] + beta · C
void gemm_tn(ConstMatrix a, ConstMatrix b, Matrix c, float alpha = 1.0f, float beta = 0.0f);
// out[j] = sum_i a(i, j), out has a.cols entries.
void column_sums(ConstMatrix a, float* out);
// Each row of m += bias (bias has m.cols entries).
void add_row_vector(Matrix m, const float* bias);
// m = max(m, 0) element-wise (the CPU ReLU of affine_* and csr_dense_forward).
void relu_inplace(Matrix m);
// dst = src widened exactly to fp32 (the CPU form of bf16 weights: a chunk is widened just
// before its sgemm).
void widen_bf16(gpu::ConstBf16Matrix src, Matrix dst);

void gemm_nt(const Context& ctx, ConstMatrix a, ConstMatrix b, Matrix c, float alpha = 1.0f,
             float beta = 0.0f);
void gemm_nn(const Context& ctx, ConstMatrix a, ConstMatrix b, Matrix c, float alpha = 1.0f,
             float beta = 0.0f);
void gemm_tn(const Context& ctx, ConstMatrix a, ConstMatrix b, Matrix c, float alpha = 1.0f,
             float beta = 0.0f);
void column_sums(const Context& ctx, ConstMatrix a, float* out);
void add_row_vector(const Context& ctx, Matrix m, const float* bias);
// The GPU context of a CUDA Context for a bf16 op: the bf16 GEMMs exist only on the GPU, so
// a CPU Context throws xmc::Error "<what>: bf16 exists only on device cuda".
const gpu::CudaContext& bf16_device(const Context& ctx, const char* what);
// bf16 operands with fp32 accumulation, and the rounding into bf16: CUDA only (a CPU
// Context throws xmc::Error; the CPU keeps bf16 weights but widens them: widen_bf16).
void gemm_nt(const Context& ctx, gpu::ConstBf16Matrix a, gpu::ConstBf16Matrix b, Matrix c,
             float alpha = 1.0f, float beta = 0.0f);
void gemm_nn(const Context& ctx, gpu::ConstBf16Matrix a, gpu::ConstBf16Matrix b, Matrix c,
             float alpha = 1.0f, float beta = 0.0f);
void gemm_tn(const Context& ctx, gpu::ConstBf16Matrix a, gpu::ConstBf16Matrix b, Matrix c,
             float alpha = 1.0f, float beta = 0.0f);
void to_bf16(const Context& ctx, ConstMatrix src, gpu::Bf16Matrix dst);

// m = 0, on the Context's device.
void set_zero(const Context& ctx, Matrix m);
// dst = src, src a HOST array [dst.rows×dst.cols] (ld = cols); complete on return.
void copy_from_host(const Context& ctx, const float* src, Matrix dst);

}  // namespace xmc::ops

// The CUDA half (cuda/dense.cu), called by lib/ops/dense.cpp after its shape checks: the
// same operations on device memory and the context's stream, nothing synchronises; stubs
// that throw in a build without CUDA (XMC_GPU_STUB, core/gpu.h).
XMC_GPU_STUBS_BEGIN
namespace xmc::gpu {
// cuBLAS; fp32: sgemm without TF32, bf16: GemmEx with fp32 accumulation.
XMC_GPU_FN void gemm_nt(const CudaContext& ctx, ConstMatrix a, ConstMatrix b, Matrix c,
                        float alpha = 1.0f, float beta = 0.0f) XMC_GPU_STUB;
XMC_GPU_FN void gemm_nt(const CudaContext& ctx, ConstBf16Matrix a, ConstBf16Matrix b, Matrix c,
                        float alpha = 1.0f, float beta = 0.0f) XMC_GPU_STUB;
XMC_GPU_FN void gemm_nn(const CudaContext& ctx, ConstMatrix a, ConstMatrix b, Matrix c,
                        float alpha = 1.0f, float beta = 0.0f) XMC_GPU_STUB;
XMC_GPU_FN void gemm_nn(const CudaContext& ctx, ConstBf16Matrix a, ConstBf16Matrix b, Matrix c,
                        float alpha = 1.0f, float beta = 0.0f) XMC_GPU_STUB;
XMC_GPU_FN void gemm_tn(const CudaContext& ctx, ConstMatrix a, ConstMatrix b, Matrix c,
                        float alpha = 1.0f, float beta = 0.0f) XMC_GPU_STUB;
XMC_GPU_FN void gemm_tn(const CudaContext& ctx, ConstBf16Matrix a, ConstBf16Matrix b, Matrix c,
                        float alpha = 1.0f, float beta = 0.0f) XMC_GPU_STUB;
// out (device, a.cols entries); bias (device, m.cols entries).
XMC_GPU_FN void column_sums(const CudaContext& ctx, ConstMatrix a, float* out) XMC_GPU_STUB;
XMC_GPU_FN void add_row_vector(const CudaContext& ctx, Matrix m, const float* bias) XMC_GPU_STUB;
XMC_GPU_FN void to_bf16(const CudaContext& ctx, ConstMatrix src, Bf16Matrix dst) XMC_GPU_STUB;
}  // namespace xmc::gpu
XMC_GPU_STUBS_END
