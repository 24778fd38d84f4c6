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
// The bits of an fp32 value and back (host and device).
XMC_HOST_DEVICE inline uint32_t float_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}
XMC_HOST_DEVICE inline float bits_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}
// The bf16 bits of the fp32 value with bits u, rounded to nearest even as the device's
// __float2bfloat16_rn (NaN stays a quiet NaN).
XMC_HOST_DEVICE inline uint16_t bf16_bits_nearest(uint32_t u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
// Host conversions: round to nearest even, and the exact widening back.
inline Bf16 bf16_round(float f) { return {bf16_bits_nearest(float_bits(f))}; }
inline float bf16_widen(Bf16 v) { return bits_float(static_cast<uint32_t>(v.bits) << 16); }
// Kahan compensation of low-precision weights (OptimizerConfig::kahan): x the updated fp32
// value, stored the value its rounding kept (bf16, or fp8 times the row's scale). x −
// stored is exact in fp32 (the two share their leading bits); it is kept in bf16, rounded
// to nearest, and added back to the weight at its next update. Non-finite: 0.
XMC_HOST_DEVICE inline uint16_t kahan_residual_bits(float x, float stored) {
  const uint32_t u = float_bits(x - stored);
  return (u & 0x7f800000u) == 0x7f800000u ? uint16_t{0} : bf16_bits_nearest(u);
}
inline Bf16 kahan_residual(float x, float stored) { return {kahan_residual_bits(x, stored)}; }
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
  return {bf16_bits_stochastic(float_bits(x), r)};
}
using Bf16Matrix = MatrixView<Bf16>;
using ConstBf16Matrix = MatrixView<const Bf16>;

// fp8 storage: OCP E4M3 ("e4m3fn": 1 sign, 4 exponent bits with bias 7, 3 mantissa bits,
// no infinities, S.1111.111 is NaN; largest finite 448, smallest normal 2^-6, subnormals
// m·2^-9). A row of fp8 weights keeps one power-of-two fp32 scale: w = value(code)·scale,
// the scale chosen from the row's largest |w| (fp8_row_scale) so that it maps into
// (224, 448]. Scaling by a power of two is exact, so the widening is exact (into fp32, and
// into bf16 on the GPU), and the rules below are integer operations, one on both devices.
struct Fp8 {
  uint8_t bits;
};
inline constexpr float kFp8Max = 448.0f;
// The value of an e4m3 code (exact; NaN for the NaN codes).
XMC_HOST_DEVICE inline float fp8_value(uint8_t code) {
  const uint32_t e = (code >> 3) & 15u, m = code & 7u;
  const uint32_t sign = static_cast<uint32_t>(code & 0x80u) << 24;
  uint32_t u;
  if (e == 15u && m == 7u)
    u = 0x7fc00000u;  // NaN
  else if (e == 0u)
    u = float_bits(static_cast<float>(m) * 0.001953125f);  // subnormal: m·2^-9, exact
  else
    u = ((e - 7u + 127u) << 23) | (m << 20);
  return bits_float(u | sign);
}
// The e4m3 code of x (already divided by its row's scale): to nearest (ties to even) or,
// when stochastic, up with probability the dropped fraction (the low 20 of the random bits
// r). Saturates at ±448; NaN gives the NaN code. In the subnormal range the stochastic
// rounding sees x·2^29's fraction truncated to 20 bits (parts below 2^-29 ignored).
XMC_HOST_DEVICE inline uint8_t fp8_code(float x, uint32_t r, bool stochastic) {
  const uint32_t u = float_bits(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7f;                                // NaN
  if (a >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7e);  // ≥ 448 (and ±inf)
  const int e = static_cast<int>(a >> 23) - 127;
  if (e >= -6) {  // normal: drop the low 20 bits of the fp32 mantissa
    const uint32_t add = stochastic ? (r & 0xfffffu) : (0x7ffffu + ((a >> 20) & 1u));
    const uint32_t v = (a + add) & ~0xfffffu;  // < 448 rounds to at most 448: no overflow
    const uint32_t ev = (v >> 23) - 127u + 7u, mv = (v >> 20) & 7u;
    return static_cast<uint8_t>(sign | (ev << 3) | mv);
  }
  // Subnormal (|x| < 2^-6): units of 2^-9, F = |x|·2^29 = units with 20 fraction bits.
  const float scaled = bits_float(a) * 536870912.0f;                  // exact (a power of two)
  const auto f = static_cast<uint32_t>(scaled);                       // truncated
  const uint32_t sticky = static_cast<float>(f) != scaled ? 1u : 0u;  // bits below 2^-29
  const uint32_t add = stochastic ? (r & 0xfffffu) : (0x7ffffu + (((f >> 20) & 1u) | sticky));
  const uint32_t q = (f + add) >> 20;  // 0..8; 8 is the smallest normal's code
  return static_cast<uint8_t>(sign | q);
}
// The power-of-two scale of a row whose largest |w| is max_abs: the smallest 2^k with
// max_abs / 2^k ≤ 448 (so max_abs / 2^k is in (224, 448]), k in [-126, 126] (2^-k normal
// too); 1 for a row of zeros (or a non-finite max_abs).
XMC_HOST_DEVICE inline float fp8_row_scale(float max_abs) {
  const uint32_t u = float_bits(max_abs) & 0x7fffffffu;
  int k = 0;
  if (u != 0u && u < 0x7f800000u) {
    const int e = static_cast<int>(u >> 23) - 127;     // fp32 denormals: e = -127
    k = (u & 0x7fffffu) <= 0x600000u ? e - 8 : e - 7;  // 448 = 1.75·2^8
    k = k < -126 ? -126 : (k > 126 ? 126 : k);
  }
  return bits_float(static_cast<uint32_t>(k + 127) << 23);
}
// 1 / a power-of-two scale, exactly.
XMC_HOST_DEVICE inline float fp8_inverse_scale(float scale) {
  const int k = static_cast<int>(float_bits(scale) >> 23) - 127;
  return bits_float(static_cast<uint32_t>(127 - k) << 23);
}
using Fp8Matrix = MatrixView<Fp8>;
using ConstFp8Matrix = MatrixView<const Fp8>;
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
// dst = src widened exactly to fp32, row r times row_scale[r] (the CPU form of fp8 weights,
// as widen_bf16).
void widen_fp8(gpu::ConstFp8Matrix src, const float* row_scale, Matrix dst);

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
// dst = src · row_scale (row by row) in bf16, exactly (4 significant bits fit bf16's 8):
// the GPU form of fp8 weights, whose GEMMs then run in bf16. CUDA only (DEVICE arrays); a
// CPU Context throws xmc::Error (the CPU widens into fp32: widen_fp8 above).
void widen_fp8(const Context& ctx, gpu::ConstFp8Matrix src, const float* row_scale,
               gpu::Bf16Matrix dst);

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
XMC_GPU_FN void widen_fp8(const CudaContext& ctx, ConstFp8Matrix src, const float* row_scale,
                          Bf16Matrix dst) XMC_GPU_STUB;
}  // namespace xmc::gpu
XMC_GPU_STUBS_END
