// Row-major GEMMs on cuBLAS (column-major). A row-major M [r×c] with leading dimension
// ld is the column-major Mᵀ [c×r] with the same ld, so each row-major product is issued
// as its transpose: C = op(A)·op(B) becomes Cᵀ = op(B)ᵀ·op(A)ᵀ with the operands swapped.
#include <cublas_v2.h>

#include <type_traits>

#include "core/error.h"
#include "cuda_check.h"
#include "kernels/dense_ops_cuda.h"

namespace xmc::gpu {
namespace {

int to_int(int64_t v) {
  XMC_CHECK(v >= 0 && v < (int64_t{1} << 31), "dimension {} out of cuBLAS int range", v);
  return static_cast<int>(v);
}

// Column-major call C_cm [n×m] = op(X) [n×k] · op(Y) [k×m] with X, Y, C raw pointers.
// fp32 operands go through cublasSgemm; bf16 through cublasGemmEx with fp32 compute.
template <class T>
void gemm_cm(const CudaContext& ctx, cublasOperation_t op_x, cublasOperation_t op_y, int64_t n,
             int64_t m, int64_t k, float alpha, const T* x, int64_t ldx, const T* y, int64_t ldy,
             float beta, float* c, int64_t ldc) {
  if (n == 0 || m == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    XMC_CUBLAS_CHECK(cublasSgemm(ctx.cublas(), op_x, op_y, to_int(n), to_int(m), to_int(k), &alpha,
                                 x, to_int(ldx), y, to_int(ldy), &beta, c, to_int(ldc)));
  } else {
    XMC_CUBLAS_CHECK(cublasGemmEx(ctx.cublas(), op_x, op_y, to_int(n), to_int(m), to_int(k), &alpha,
                                  x, CUDA_R_16BF, to_int(ldx), y, CUDA_R_16BF, to_int(ldy), &beta,
                                  c, CUDA_R_32F, to_int(ldc), CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
  }
}

template <class T>
void nt(const CudaContext& ctx, MatrixView<const T> a, MatrixView<const T> b, Matrix c, float alpha,
        float beta) {
  XMC_CHECK(a.cols == b.cols && c.rows == a.rows && c.cols == b.rows,
            "gpu gemm_nt shapes A[{}×{}] B[{}×{}] C[{}×{}]", a.rows, a.cols, b.rows, b.cols, c.rows,
            c.cols);
  // Cᵀ [n×m] = B [n×k] · Aᵀ [k×m]; B is stored as column-major Bᵀ -> op T.
  gemm_cm(ctx, CUBLAS_OP_T, CUBLAS_OP_N, c.cols, c.rows, a.cols, alpha, b.data, b.ld, a.data, a.ld,
          beta, c.data, c.ld);
}

template <class T>
void nn(const CudaContext& ctx, MatrixView<const T> a, MatrixView<const T> b, Matrix c, float alpha,
        float beta) {
  XMC_CHECK(a.cols == b.rows && c.rows == a.rows && c.cols == b.cols,
            "gpu gemm_nn shapes A[{}×{}] B[{}×{}] C[{}×{}]", a.rows, a.cols, b.rows, b.cols, c.rows,
            c.cols);
  // Cᵀ [n×m] = Bᵀ [n×k] · Aᵀ [k×m]; both stored as their transposes -> op N, N.
  gemm_cm(ctx, CUBLAS_OP_N, CUBLAS_OP_N, c.cols, c.rows, a.cols, alpha, b.data, b.ld, a.data, a.ld,
          beta, c.data, c.ld);
}

template <class T>
void tn(const CudaContext& ctx, MatrixView<const T> a, MatrixView<const T> b, Matrix c, float alpha,
        float beta) {
  XMC_CHECK(a.rows == b.rows && c.rows == a.cols && c.cols == b.cols,
            "gpu gemm_tn shapes A[{}×{}] B[{}×{}] C[{}×{}]", a.rows, a.cols, b.rows, b.cols, c.rows,
            c.cols);
  // Cᵀ [n×m] = Bᵀ [n×k] · A [k×m]; A is stored as column-major Aᵀ -> op T.
  gemm_cm(ctx, CUBLAS_OP_N, CUBLAS_OP_T, c.cols, c.rows, a.rows, alpha, b.data, b.ld, a.data, a.ld,
          beta, c.data, c.ld);
}

}  // namespace

void gemm_nt(const CudaContext& ctx, ConstMatrix a, ConstMatrix b, Matrix c, float alpha,
             float beta) {
  nt<float>(ctx, a, b, c, alpha, beta);
}
void gemm_nt(const CudaContext& ctx, ConstBf16Matrix a, ConstBf16Matrix b, Matrix c, float alpha,
             float beta) {
  nt<Bf16>(ctx, a, b, c, alpha, beta);
}
void gemm_nn(const CudaContext& ctx, ConstMatrix a, ConstMatrix b, Matrix c, float alpha,
             float beta) {
  nn<float>(ctx, a, b, c, alpha, beta);
}
void gemm_nn(const CudaContext& ctx, ConstBf16Matrix a, ConstBf16Matrix b, Matrix c, float alpha,
             float beta) {
  nn<Bf16>(ctx, a, b, c, alpha, beta);
}
void gemm_tn(const CudaContext& ctx, ConstMatrix a, ConstMatrix b, Matrix c, float alpha,
             float beta) {
  tn<float>(ctx, a, b, c, alpha, beta);
}
void gemm_tn(const CudaContext& ctx, ConstBf16Matrix a, ConstBf16Matrix b, Matrix c, float alpha,
             float beta) {
  tn<Bf16>(ctx, a, b, c, alpha, beta);
}

}  // namespace xmc::gpu
