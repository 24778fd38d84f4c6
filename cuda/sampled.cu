// Sampled scoring on the GPU (ops/sampled.h; shapes checked there): the gathered dot
// products of lsh_sampled / anns_sampled, the row gather, and anns_sampled's candidate
// draw (one thread per batch row running the CPU's draw_point_candidates). The scoring
// ops take their candidates as given (CSR over the batch, and for the weight gradient the
// entries grouped by label), so no sorting happens here.
// - draw: a thread per row, its cap slots padded; the draws of Rng (core/rng.h) as on the
//   host.
// - scores: a warp per entry, lanes over d (coalesced reads of the weight row), one
//   warp reduction; the row of an entry by binary search in indptr.
// - input gradient: a block per (batch row, 128 columns), each thread one column, the
//   row's entries in order (unrolled by 4 for memory-level parallelism): deterministic,
//   no atomics.
// - weight gradient: a segmented reduction over the entries grouped by label; a block per
//   (touched label, 128 columns), entries in order: deterministic, no atomics, and no
//   L×d buffer (dw is [U×d] over the U touched labels).
#include <algorithm>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>

#include "core/launch_shape.h"
#include "ops/sampled.h"
#include "runtime.h"

namespace xmc::gpu {
namespace {

constexpr int kSmpThreads = 256;
constexpr int kSmpCols = 128;  // columns per block of the gradient kernels

__device__ __forceinline__ int64_t smp_row_of(const int64_t* __restrict__ indptr, int64_t rows,
                                              int64_t e) {
  int64_t lo = 0, hi = rows;  // indptr[lo] <= e < indptr[hi]
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) >> 1;
    if (indptr[mid] <= e) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

__global__ void __launch_bounds__(kSmpThreads)
    smp_scores_kernel(const float* __restrict__ w, const float* __restrict__ bias, int64_t d,
                      const int64_t* __restrict__ indptr, const uint32_t* __restrict__ labels,
                      int64_t rows, int64_t nnz, const float* __restrict__ h, int64_t ldh,
                      float* __restrict__ scores) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kSmpThreads / 32);
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * (kSmpThreads / 32) + (threadIdx.x >> 5);
       e < nnz; e += warps) {
    const int64_t b = smp_row_of(indptr, rows, e);
    const uint32_t l = labels[e];
    const float* wl = w + static_cast<int64_t>(l) * d;
    const float* hb = h + b * ldh;
    float s = 0.0f;
    for (int64_t j = lane; j < d; j += 32) s = fmaf(__ldg(wl + j), __ldg(hb + j), s);
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) scores[e] = s + (bias != nullptr ? bias[l] : 0.0f);
  }
}

// grid (rows, column blocks).
__global__ void __launch_bounds__(kSmpCols)
    smp_input_grad_kernel(const float* __restrict__ w, int64_t d,
                          const int64_t* __restrict__ indptr, const uint32_t* __restrict__ labels,
                          const float* __restrict__ g, float* __restrict__ dh, int64_t ldh) {
  const int64_t b = blockIdx.x;
  const int64_t e0 = indptr[b], e1 = indptr[b + 1];
  for (int64_t j = static_cast<int64_t>(blockIdx.y) * kSmpCols + threadIdx.x; j < d;
       j += static_cast<int64_t>(gridDim.y) * kSmpCols) {
    float acc = 0.0f;
    int64_t e = e0;
    for (; e + 4 <= e1; e += 4) {
      float gv[4], wv[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) gv[q] = __ldg(g + e + q);
#pragma unroll
      for (int q = 0; q < 4; ++q)
        wv[q] = gv[q] != 0.0f ? __ldg(w + static_cast<int64_t>(labels[e + q]) * d + j) : 0.0f;
#pragma unroll
      for (int q = 0; q < 4; ++q)
        if (gv[q] != 0.0f) acc = fmaf(gv[q], wv[q], acc);
    }
    for (; e < e1; ++e) {
      const float gv = __ldg(g + e);
      if (gv != 0.0f) acc = fmaf(gv, __ldg(w + static_cast<int64_t>(labels[e]) * d + j), acc);
    }
    dh[b * ldh + j] += acc;
  }
}

// grid (touched labels, column blocks).
__global__ void __launch_bounds__(kSmpCols)
    smp_weight_grad_kernel(const int64_t* __restrict__ ptr, const int64_t* __restrict__ entry,
                           const uint32_t* __restrict__ row, const float* __restrict__ g,
                           const float* __restrict__ h, int64_t ldh, int64_t d,
                           float* __restrict__ dw, int64_t ldw, float* __restrict__ db) {
  const int64_t u = blockIdx.x;
  const int64_t i0 = ptr[u], i1 = ptr[u + 1];
  if (db != nullptr && blockIdx.y == 0 && threadIdx.x == 0) {
    float s = 0.0f;
    for (int64_t i = i0; i < i1; ++i) s += g[entry[i]];
    db[u] = s;
  }
  for (int64_t j = static_cast<int64_t>(blockIdx.y) * kSmpCols + threadIdx.x; j < d;
       j += static_cast<int64_t>(gridDim.y) * kSmpCols) {
    float acc = 0.0f;
    for (int64_t i = i0; i < i1; ++i) {
      const float gv = __ldg(g + entry[i]);
      if (gv != 0.0f) acc = fmaf(gv, __ldg(h + static_cast<int64_t>(row[i]) * ldh + j), acc);
    }
    dw[u * ldw + j] = acc;
  }
}

__global__ void smp_gather_kernel(const float* __restrict__ src, const uint32_t* __restrict__ rows,
                                  int64_t width, float* __restrict__ dst) {
  const int64_t u = blockIdx.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; j < width;
       j += static_cast<int64_t>(gridDim.y) * blockDim.x) {
    dst[u * width + j] = src[static_cast<int64_t>(rows[u]) * width + j];
  }
}

// Column blocks on grid.y, capped at 65535 (core/launch_shape.h): the kernels stride.
unsigned smp_col_blocks(int64_t d) { return launch::grid_yz(launch::ceil_div(d, kSmpCols)); }

__global__ void __launch_bounds__(kSmpThreads) smp_iota_kernel(int64_t* __restrict__ v, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kSmpThreads + threadIdx.x;
  if (i < n) v[i] = i;
}

// Each grouped entry's batch row (binary search of its entry id in indptr).
__global__ void __launch_bounds__(kSmpThreads)
    smp_rows_kernel(const int64_t* __restrict__ indptr, int64_t rows,
                    const int64_t* __restrict__ entry, uint32_t* __restrict__ row, int64_t nnz) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kSmpThreads + threadIdx.x;
  if (i < nnz) row[i] = static_cast<uint32_t>(smp_row_of(indptr, rows, entry[i]));
}

// The grouping's scratch: sorted keys [nnz] (uint32), entry ids [nnz] (int64), run lengths
// [nnz + 1] (int64), the run count (int64), then CUB's temporary storage; each part
// 256-byte aligned.
struct GroupScratch {
  size_t keys = 0, ids = 0, counts = 0, runs = 0, temp = 0, temp_bytes = 0, total = 0;
};

size_t align256(size_t x) { return (x + 255) / 256 * 256; }

int label_bits(int64_t num_labels) {
  int bits = 1;
  while (bits < 32 && (int64_t{1} << bits) < num_labels) ++bits;
  return bits;
}

GroupScratch group_scratch(int64_t nnz, int64_t num_labels) {
  const auto n = static_cast<size_t>(nnz);
  const int bits = label_bits(num_labels);
  size_t sort = 0, rle = 0, scan = 0;
  XMC_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, sort, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const int64_t*>(nullptr), static_cast<int64_t*>(nullptr), nnz, 0, bits));
  XMC_CUDA_CHECK(cub::DeviceRunLengthEncode::Encode(
      nullptr, rle, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<int64_t*>(nullptr), static_cast<int64_t*>(nullptr), nnz));
  XMC_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, scan, static_cast<const int64_t*>(nullptr),
                                               static_cast<int64_t*>(nullptr), nnz + 1));
  GroupScratch g;
  g.keys = 0;
  g.ids = g.keys + align256(n * sizeof(uint32_t));
  g.counts = g.ids + align256(n * sizeof(int64_t));
  g.runs = g.counts + align256((n + 1) * sizeof(int64_t));
  g.temp = g.runs + align256(sizeof(int64_t));
  g.temp_bytes = std::max(sort, std::max(rle, scan));
  g.total = g.temp + align256(g.temp_bytes);
  return g;
}

// lengths [rows + 1]: max(count, 0), then 0 (the exclusive sum's last entry is nnz).
__global__ void __launch_bounds__(kSmpThreads)
    smp_lengths_kernel(const int64_t* __restrict__ count, int64_t rows,
                       int64_t* __restrict__ lengths) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * kSmpThreads + threadIdx.x;
  if (b <= rows) lengths[b] = b < rows && count[b] > 0 ? count[b] : 0;
}

// A block per row: its count[b] entries from slot b·cap to indptr[b].
__global__ void __launch_bounds__(kSmpThreads)
    smp_compact_kernel(int64_t cap, const uint32_t* __restrict__ label,
                       const uint8_t* __restrict__ positive, const float* __restrict__ weight,
                       const int64_t* __restrict__ count, const int64_t* __restrict__ indptr,
                       uint32_t* __restrict__ out_label, uint8_t* __restrict__ out_positive,
                       float* __restrict__ out_weight) {
  const int64_t b = blockIdx.x;
  const int64_t n = count[b] > 0 ? count[b] : 0, at = b * cap, to = indptr[b];
  for (int64_t j = threadIdx.x; j < n; j += kSmpThreads) {
    out_label[to + j] = label[at + j];
    out_positive[to + j] = positive[at + j];
    if (weight != nullptr) out_weight[to + j] = weight[at + j];
  }
}

// The compaction's scratch: lengths [rows + 1] (int64), then CUB's temporary storage.
size_t compact_scratch(int64_t rows, size_t* temp_bytes) {
  size_t scan = 0;
  XMC_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, scan, static_cast<const int64_t*>(nullptr),
                                               static_cast<int64_t*>(nullptr), rows + 1));
  if (temp_bytes != nullptr) *temp_bytes = scan;
  return align256(static_cast<size_t>(rows + 1) * sizeof(int64_t)) + align256(scan);
}

// One thread per batch row: its candidates into its cap slots (ops::draw_point_candidates,
// the CPU's code); a row that would need more than cap slots gets count -1 and no entries.
// A warp a block: a batch of 256 rows spreads over 8 multiprocessors, not one.
constexpr int kSmpDrawThreads = 32;
__global__ void __launch_bounds__(kSmpDrawThreads)
    smp_draw_kernel(ops::CandidateDraw c, const int64_t* __restrict__ ids,
                    const int64_t* __restrict__ pos_ptr, const uint32_t* __restrict__ pos,
                    int64_t rows, int64_t cap, uint32_t* __restrict__ label,
                    uint8_t* __restrict__ positive, float* __restrict__ weight,
                    int64_t* __restrict__ count) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * kSmpDrawThreads + threadIdx.x;
  if (b >= rows) return;
  const int64_t p0 = pos_ptr[b], np = pos_ptr[b + 1] - p0;
  if (ops::candidate_slots(c, np) > cap) {
    count[b] = -1;
    return;
  }
  const int64_t at = b * cap;
  count[b] =
      ops::draw_point_candidates(c, ids[b], pos + p0, np, label + at, positive + at, weight + at);
}

}  // namespace

void sampled_scores(const CudaContext& ctx, const float* w, const float* bias, int64_t d,
                    const ops::CandidateCsr& cand, ConstMatrix h, float* scores) {
  if (cand.nnz == 0) return;
  const int64_t warps_needed = cand.nnz;
  const int64_t blocks = std::min<int64_t>((warps_needed + 7) / 8, int64_t{1} << 20);
  XMC_CUDA_LAUNCH(smp_scores_kernel, static_cast<unsigned>(blocks), kSmpThreads, 0, ctx.stream(), w,
                  bias, d, cand.indptr, cand.labels, cand.rows, cand.nnz, h.data, h.ld, scores);
}

void sampled_input_grad(const CudaContext& ctx, const float* w, int64_t d,
                        const ops::CandidateCsr& cand, const float* g, Matrix dh) {
  XMC_CUDA_REQUIRE(cand.rows <= 2147483647, cand.rows);
  if (cand.rows == 0 || d == 0) return;
  const dim3 grid(static_cast<unsigned>(cand.rows), smp_col_blocks(d));
  XMC_CUDA_LAUNCH(smp_input_grad_kernel, grid, kSmpCols, 0, ctx.stream(), w, d, cand.indptr,
                  cand.labels, g, dh.data, dh.ld);
}

void sampled_weight_grad(const CudaContext& ctx, const ops::EntryGroups& groups, const float* g,
                         ConstMatrix h, Matrix dw, float* db) {
  XMC_CUDA_REQUIRE(groups.groups <= 2147483647, groups.groups);
  if (groups.groups == 0 || h.cols == 0) return;
  const dim3 grid(static_cast<unsigned>(groups.groups), smp_col_blocks(h.cols));
  XMC_CUDA_LAUNCH(smp_weight_grad_kernel, grid, kSmpCols, 0, ctx.stream(), groups.ptr, groups.entry,
                  groups.row, g, h.data, h.ld, h.cols, dw.data, dw.ld, db);
}

void gather_rows(const CudaContext& ctx, const float* src, const uint32_t* rows, int64_t count,
                 int64_t width, float* dst) {
  if (count == 0 || width == 0) return;
  XMC_CUDA_REQUIRE(count <= launch::kMaxGridX, count);
  const dim3 grid(static_cast<unsigned>(count), launch::grid_yz(launch::ceil_div(width, 256)));
  XMC_CUDA_LAUNCH(smp_gather_kernel, grid, 256, 0, ctx.stream(), src, rows, width, dst);
}

void draw_candidates(const CudaContext& ctx, const ops::CandidateDraw& c, const int64_t* ids,
                     const int64_t* pos_ptr, const uint32_t* pos, int64_t rows, int64_t cap,
                     uint32_t* label, uint8_t* positive, float* weight, int64_t* count) {
  if (rows == 0) return;
  const int64_t blocks = launch::ceil_div(rows, kSmpDrawThreads);
  XMC_CUDA_REQUIRE(blocks <= launch::kMaxGridX, rows);
  XMC_CUDA_LAUNCH(smp_draw_kernel, static_cast<unsigned>(blocks), kSmpDrawThreads, 0, ctx.stream(),
                  c, ids, pos_ptr, pos, rows, cap, label, positive, weight, count);
}

void group_scratch_bytes(int64_t nnz, int64_t num_labels, size_t* bytes) {
  *bytes = group_scratch(nnz, num_labels).total;
}

void group_entries_by_label(const CudaContext& ctx, const ops::CandidateCsr& cand,
                            int64_t num_labels, void* scratch, size_t scratch_bytes,
                            const ops::EntryGroupsOut& out, int64_t* groups) {
  const int64_t nnz = cand.nnz;
  const GroupScratch g = group_scratch(nnz, num_labels);
  XMC_CUDA_REQUIRE(scratch_bytes >= g.total, static_cast<int64_t>(scratch_bytes));
  XMC_CUDA_REQUIRE(nnz > 0 && nnz <= 2147483647, nnz);  // CUB's item counts are int
  char* base = static_cast<char*>(scratch);
  auto* keys = reinterpret_cast<uint32_t*>(base + g.keys);
  auto* ids = reinterpret_cast<int64_t*>(base + g.ids);
  auto* counts = reinterpret_cast<int64_t*>(base + g.counts);
  auto* runs = reinterpret_cast<int64_t*>(base + g.runs);
  void* temp = base + g.temp;
  const cudaStream_t stream = ctx.stream();
  const auto blocks = static_cast<unsigned>(launch::ceil_div(nnz, kSmpThreads));
  XMC_CUDA_LAUNCH(smp_iota_kernel, blocks, kSmpThreads, 0, stream, ids, nnz);
  size_t tb = g.temp_bytes;
  XMC_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, tb, cand.labels, keys, ids, out.entry, nnz,
                                                 0, label_bits(num_labels), stream));
  XMC_CUDA_CHECK(
      cudaMemsetAsync(counts, 0, static_cast<size_t>(nnz + 1) * sizeof(int64_t), stream));
  tb = g.temp_bytes;
  XMC_CUDA_CHECK(
      cub::DeviceRunLengthEncode::Encode(temp, tb, keys, out.labels, counts, runs, nnz, stream));
  tb = g.temp_bytes;
  XMC_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp, tb, counts, out.ptr, nnz + 1, stream));
  XMC_CUDA_LAUNCH(smp_rows_kernel, blocks, kSmpThreads, 0, stream, cand.indptr, cand.rows,
                  out.entry, out.row, nnz);
  XMC_CUDA_CHECK(cudaMemcpyAsync(groups, runs, sizeof(int64_t), cudaMemcpyDeviceToHost, stream));
  XMC_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void compact_scratch_bytes(int64_t rows, size_t* bytes) { *bytes = compact_scratch(rows, nullptr); }

void compact_candidates(const CudaContext& ctx, int64_t rows, int64_t cap, const uint32_t* label,
                        const uint8_t* positive, const float* weight, const int64_t* count,
                        void* scratch, size_t scratch_bytes, int64_t* indptr, uint32_t* out_label,
                        uint8_t* out_positive, float* out_weight, int64_t* nnz) {
  size_t temp_bytes = 0;
  const size_t total = compact_scratch(rows, &temp_bytes);
  XMC_CUDA_REQUIRE(scratch_bytes >= total, static_cast<int64_t>(scratch_bytes));
  XMC_CUDA_REQUIRE(rows > 0 && rows < 2147483647 && rows <= launch::kMaxGridX, rows);
  auto* lengths = static_cast<int64_t*>(scratch);
  void* temp =
      static_cast<char*>(scratch) + align256(static_cast<size_t>(rows + 1) * sizeof(int64_t));
  const cudaStream_t stream = ctx.stream();
  XMC_CUDA_LAUNCH(smp_lengths_kernel,
                  static_cast<unsigned>(launch::ceil_div(rows + 1, kSmpThreads)), kSmpThreads, 0,
                  stream, count, rows, lengths);
  XMC_CUDA_CHECK(
      cub::DeviceScan::ExclusiveSum(temp, temp_bytes, lengths, indptr, rows + 1, stream));
  XMC_CUDA_LAUNCH(smp_compact_kernel, static_cast<unsigned>(rows), kSmpThreads, 0, stream, cap,
                  label, positive, weight, count, indptr, out_label, out_positive, out_weight);
  XMC_CUDA_CHECK(
      cudaMemcpyAsync(nnz, indptr + rows, sizeof(int64_t), cudaMemcpyDeviceToHost, stream));
  XMC_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace xmc::gpu
