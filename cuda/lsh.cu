// LSH ops on the GPU (ops/lsh.h; checks there): hashing rows into bucket ids, and the
// tables' bucket writes.
// - hash: a build's dense simhash projects a block of rows with one cuBLAS GEMM (x·Pᵀ into
//   the scratch), then a thread per (row, table) takes the K signs (simhash_code);
//   queries, re-insertions, sparse simhash and dwta run the host's lsh_code, a thread per
//   (row, table).
// - table writes: a thread per table running the host's lsh_table_writes_one: each table's
//   inserts and removals stay in the serial order that FIFO and the reservoir depend on.
// - candidate draw: a thread per batch row running the host's lsh_draw_row (its map and
//   heap in its slice of the global scratch). Written for parity, not yet for speed: a
//   block per row with the map in shared memory is the next step once a GPU measures it.
#include "core/launch_shape.h"
#include "ops/dense.h"
#include "ops/lsh.h"
#include "runtime.h"

namespace xmc::gpu {
namespace {

constexpr int kLshThreads = 256;

__global__ void lsh_signs_kernel(const float* __restrict__ s, int64_t rows, int tables, int k,
                                 uint32_t* __restrict__ codes) {
  const int64_t n = rows * tables;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / tables;
    const int t = static_cast<int>(i - r * tables);
    codes[i] = ops::simhash_code(s + r * (int64_t{tables} * k) + int64_t{t} * k, k);
  }
}

__global__ void lsh_codes_kernel(ops::LshHashView h, const float* __restrict__ x, int64_t rows,
                                 int64_t ld, uint32_t* __restrict__ codes) {
  const int64_t n = rows * h.tables;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / h.tables;
    codes[i] = ops::lsh_code(h, x + r * ld, static_cast<int>(i - r * h.tables));
  }
}

__global__ void lsh_table_writes_kernel(ops::LshTablesView v, const uint32_t* __restrict__ labels,
                                        int64_t n, const uint32_t* __restrict__ fresh) {
  const int t = static_cast<int>(static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x);
  if (t < v.tables) ops::lsh_table_writes_one(v, t, labels, n, fresh);
}

__global__ void lsh_draw_kernel(ops::LshTablesView v, const uint32_t* __restrict__ codes,
                                const int64_t* __restrict__ qptr,
                                const int64_t* __restrict__ pos_ptr,
                                const uint32_t* __restrict__ pos, int64_t rows,
                                int64_t max_candidates, int64_t min_candidates, int64_t labels,
                                uint64_t step_seed, ops::LshDrawWork work, int64_t cap,
                                uint32_t* __restrict__ label, uint8_t* __restrict__ positive,
                                int64_t* __restrict__ count) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < rows)
    ops::lsh_draw_row(v, codes, qptr, pos_ptr, pos, r, r, max_candidates, min_candidates, labels,
                      step_seed, work, cap, label, positive, count);
}

__global__ void lsh_mark_kernel(uint32_t* __restrict__ flags, const uint32_t* __restrict__ ids,
                                int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    flags[ids[i]] = 1;
}

unsigned lsh_blocks(int64_t n) {
  return launch::grid_x(
      launch::ceil_div(n, kLshThreads) < (1 << 20) ? launch::ceil_div(n, kLshThreads) : (1 << 20));
}

}  // namespace

void lsh_hash_rows(const CudaContext& ctx, const ops::LshHashView& h, ConstMatrix x,
                   uint32_t* codes, float* scratch, int64_t scratch_rows, bool by_gemm) {
  if (by_gemm && !h.dwta && !h.sparse) {
    const int64_t nproj = int64_t{h.k} * h.tables;
    for (int64_t r0 = 0; r0 < x.rows; r0 += scratch_rows) {
      const int64_t rows = x.rows - r0 < scratch_rows ? x.rows - r0 : scratch_rows;
      gemm_nt(ctx, x.rows_range(r0, rows), ConstMatrix(h.proj, nproj, h.dim),
              Matrix(scratch, rows, nproj));
      XMC_CUDA_LAUNCH(lsh_signs_kernel, lsh_blocks(rows * h.tables), kLshThreads, 0, ctx.stream(),
                      scratch, rows, h.tables, h.k, codes + r0 * h.tables);
    }
    return;
  }
  XMC_CUDA_LAUNCH(lsh_codes_kernel, lsh_blocks(x.rows * h.tables), kLshThreads, 0, ctx.stream(), h,
                  x.data, x.rows, x.ld, codes);
}

void lsh_mark(const CudaContext& ctx, uint32_t* flags, const uint32_t* ids, int64_t n) {
  XMC_CUDA_LAUNCH(lsh_mark_kernel, lsh_blocks(n), kLshThreads, 0, ctx.stream(), flags, ids, n);
}

void lsh_table_writes(const CudaContext& ctx, const ops::LshTablesView& v, const uint32_t* labels,
                      int64_t n, const uint32_t* fresh) {
  XMC_CUDA_LAUNCH(lsh_table_writes_kernel, lsh_blocks(v.tables), kLshThreads, 0, ctx.stream(), v,
                  labels, n, fresh);
}

void lsh_draw_candidates(const CudaContext& ctx, const ops::LshTablesView& v, const uint32_t* codes,
                         const int64_t* qptr, const int64_t* pos_ptr, const uint32_t* pos,
                         int64_t rows, int64_t max_candidates, int64_t min_candidates,
                         int64_t labels, uint64_t step_seed, const ops::LshDrawWork& work,
                         int64_t cap, uint32_t* label, uint8_t* positive, int64_t* count) {
  constexpr int kRowsPerBlock = 64;
  const int64_t blocks = launch::ceil_div(rows, kRowsPerBlock);
  XMC_CUDA_REQUIRE(blocks <= launch::kMaxGridX, rows);
  XMC_CUDA_LAUNCH(lsh_draw_kernel, static_cast<unsigned>(blocks), kRowsPerBlock, 0, ctx.stream(), v,
                  codes, qptr, pos_ptr, pos, rows, max_candidates, min_candidates, labels,
                  step_seed, work, cap, label, positive, count);
}

}  // namespace xmc::gpu
