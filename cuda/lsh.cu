// LSH ops on the GPU (ops/lsh.h; checks there): hashing rows into bucket ids, and the
// tables' bucket writes.
// - hash: a build's dense simhash projects a block of rows with one cuBLAS GEMM (x·Pᵀ into
//   the scratch), then a thread per (row, table) takes the K signs (simhash_code);
//   queries, re-insertions, sparse simhash and dwta run the host's lsh_code, a thread per
//   (row, table).
// - table writes: FIFO tables in passes (ops::lsh_write_passes): the writes as (bucket,
//   order) entries (ops::lsh_pass_entries, a thread per table and list entry), CUB's stable
//   radix sort by bucket, then a thread per bucket applying its writes in order
//   (ops::lsh_bucket_writes); the reservoir a thread per table running the host's
//   lsh_table_writes_one (its generator's draws follow the table's insertion order).
// - candidate draw: a block per batch row (reach <= ops::kLshBlockDrawReach): one thread
//   takes the positives, every thread inserts bucket entries into the row's map (its slice
//   of the global scratch) with atomics, the retrieved labels are ranked by a block radix
//   sort (equal keys then put in label order, as the host's heap pops them), the first
//   `room` taken and the rest marked cut in parallel, one thread pads; a larger reach runs
//   a thread per row through the host's lsh_draw_row.
#include <cub/block/block_radix_sort.cuh>
#include <cub/device/device_radix_sort.cuh>

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

__global__ void lsh_pass_entries_kernel(ops::LshTablesView v, ops::LshWritePass p,
                                        const uint32_t* __restrict__ labels,
                                        const uint32_t* __restrict__ fresh,
                                        uint32_t* __restrict__ keys, uint32_t* __restrict__ vals) {
  const int64_t n = int64_t{p.tg} * p.m;
  for (int64_t x = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; x < n;
       x += static_cast<int64_t>(gridDim.x) * blockDim.x)
    ops::lsh_pass_entries(v, p, labels, fresh, x, keys, vals);
}

// A thread per bucket of the sorted entries: the one at its first entry applies them all.
__global__ void lsh_bucket_writes_kernel(ops::LshTablesView v, ops::LshWritePass p,
                                         const uint32_t* __restrict__ labels,
                                         const uint32_t* __restrict__ keys,
                                         const uint32_t* __restrict__ vals, int64_t n) {
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (e > 0 && keys[e] == keys[e - 1]) continue;
    int64_t lo = e + 1, hi = n;  // the bucket's end: the first later key, by bisection
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (keys[mid] == keys[e])
        lo = mid + 1;
      else
        hi = mid;
    }
    ops::lsh_bucket_writes(v, p, labels, keys[e], vals, e, lo);
  }
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

constexpr int kDrawThreads = 256;
constexpr int kDrawItems = static_cast<int>(ops::kLshBlockDrawReach / kDrawThreads);
static_assert(int64_t{kDrawThreads} * kDrawItems == ops::kLshBlockDrawReach);
using DrawSort = cub::BlockRadixSort<uint64_t, kDrawThreads, kDrawItems, uint32_t>;

// Row blockIdx.x of the batch draw; the same set as ops::lsh_draw_row (CPU).
__global__ void __launch_bounds__(kDrawThreads)
    lsh_draw_block_kernel(ops::LshTablesView v, const uint32_t* __restrict__ codes,
                          const int64_t* __restrict__ qptr, const int64_t* __restrict__ pos_ptr,
                          const uint32_t* __restrict__ pos, int64_t max_candidates,
                          int64_t min_candidates, int64_t labels, uint64_t step_seed,
                          ops::LshDrawWork work, int64_t cap, uint32_t* __restrict__ label,
                          uint8_t* __restrict__ positive, int64_t* __restrict__ count) {
  __shared__ typename DrawSort::TempStorage sort_storage;
  __shared__ unsigned long long s_nused, s_nret;
  __shared__ long long s_npos, s_count;
  const int64_t r = blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x);
  if (!ops::lsh_draw_row_fits(v, qptr, pos_ptr, r, max_candidates, min_candidates, labels,
                              work.reach, work.map_size, cap)) {
    if (tid == 0) count[r] = -1;
    return;  // the whole block
  }
  const ops::LshDrawScratch s = work.row(r);
  uint32_t* out = label + r * cap;
  Rng rng = Rng::stream(step_seed, static_cast<uint64_t>(r));
  if (tid == 0) {
    int64_t nused = 0;
    s_npos = ops::lsh_take_positives(s, nused, pos + pos_ptr[r], pos_ptr[r + 1] - pos_ptr[r], out);
    s_nused = static_cast<unsigned long long>(nused);
    s_nret = 0;
  }
  __syncthreads();
  // The bucket entries of the row's (query, table) buckets, capacity slots each.
  const int64_t nq = qptr[r + 1] - qptr[r], slots = nq * v.tables * v.capacity;
  const uint32_t* rc = codes + qptr[r] * v.tables;
  const auto mask = static_cast<uint64_t>(s.map_size - 1);
  for (int64_t e = tid; e < slots; e += kDrawThreads) {
    const int64_t qt = e / v.capacity, j = e - qt * v.capacity;
    const int64_t cell = (qt % v.tables) * v.nb + rc[qt];
    if (j >= v.size[cell]) continue;
    const uint32_t x = v.slots[cell * v.capacity + j];
    for (uint64_t u = mix64(x) & mask;; u = (u + 1) & mask) {
      const uint32_t prev = atomicCAS(&s.keys[u], 0u, x + 1);
      if (prev == 0u) {  // x enters the map: retrieved, its slot used, one collision
        s.retrieved[atomicAdd(&s_nret, 1ull)] = x;
        s.used[atomicAdd(&s_nused, 1ull)] = static_cast<uint32_t>(u);
        atomicAdd(&s.vals[u], 1u);
        break;
      }
      if (prev == x + 1) {  // there already: a positive (fixed before) or one more collision
        if (s.vals[u] != ops::kLshPositive) atomicAdd(&s.vals[u], 1u);
        break;
      }
    }
  }
  __syncthreads();
  // Rank keys, sorted descending (blocked: thread tid holds ranks tid·items ..); the padding
  // keys 0 sort last (a retrieved label has a collision: key >= 2^32).
  const auto nret = static_cast<int64_t>(s_nret);
  const uint64_t salt = rng.next();
  uint64_t key[kDrawItems];
  uint32_t lab[kDrawItems];
  for (int k = 0; k < kDrawItems; ++k) {
    const int64_t i = int64_t{tid} * kDrawItems + k;
    key[k] = 0;
    lab[k] = 0xffffffffu;
    if (i < nret) {
      lab[k] = s.retrieved[i];
      key[k] = ops::lsh_rank_key(*ops::lsh_map_find(s, lab[k]), salt, lab[k]);
    }
  }
  int end_bit = 33;  // the collisions' bits above the hash's 32
  while (end_bit < 64 && (int64_t{1} << (end_bit - 32)) <= slots) ++end_bit;
  DrawSort(sort_storage).SortDescending(key, lab, 0, end_bit);
  for (int k = 0; k < kDrawItems; ++k) {
    const int64_t i = int64_t{tid} * kDrawItems + k;
    if (i < nret) {
      s.rank[i] = key[k];
      s.rank_label[i] = lab[k];
    }
  }
  __syncthreads();
  // Equal keys (the same collisions and hash): their labels ascending, as the heap pops them.
  for (int64_t i = tid; i + 1 < nret; i += kDrawThreads) {
    if ((i > 0 && s.rank[i - 1] == s.rank[i]) || s.rank[i + 1] != s.rank[i]) continue;
    int64_t j = i + 1;
    while (j < nret && s.rank[j] == s.rank[i]) ++j;
    for (int64_t a = i + 1; a < j; ++a)
      for (int64_t b = a; b > i && s.rank_label[b - 1] > s.rank_label[b]; --b) {
        const uint32_t t = s.rank_label[b];
        s.rank_label[b] = s.rank_label[b - 1];
        s.rank_label[b - 1] = t;
      }
  }
  __syncthreads();
  // The first `room` taken after the positives, the rest cut (padding may take them back).
  const auto npos = static_cast<int64_t>(s_npos);
  const int64_t room = max_candidates - npos > 0 ? max_candidates - npos : 0;
  const int64_t taken = room < nret ? room : nret;
  for (int64_t k = tid; k < nret; k += kDrawThreads) {
    const uint32_t l = s.rank_label[k];
    if (k < taken)
      out[npos + k] = l;
    else
      *ops::lsh_map_find(s, l) = ops::kLshCut;
  }
  __syncthreads();
  if (tid == 0) {
    auto nused = static_cast<int64_t>(s_nused);
    s_count = ops::lsh_pad_candidates(s, nused, npos + taken, min_candidates, labels, rng, out);
    s_nused = static_cast<unsigned long long>(nused);
  }
  __syncthreads();
  const auto n = static_cast<int64_t>(s_count), nused = static_cast<int64_t>(s_nused);
  for (int64_t j = tid; j < n; j += kDrawThreads) positive[r * cap + j] = j < npos ? 1 : 0;
  for (int64_t i = tid; i < nused; i += kDrawThreads) {
    s.keys[s.used[i]] = 0;
    s.vals[s.used[i]] = 0;
  }
  if (tid == 0) count[r] = n;
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

size_t align256(size_t x) { return (x + 255) / 256 * 256; }

// The writes' scratch for a pass of `entries`: keys and values twice (the sort's double
// buffers), then CUB's temporary storage; each part 256-byte aligned.
size_t write_temp_bytes(int64_t entries) {
  size_t temp = 0;
  cub::DoubleBuffer<uint32_t> keys(nullptr, nullptr), vals(nullptr, nullptr);
  XMC_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp, keys, vals, entries, 0, 32));
  return temp;
}
size_t write_array_bytes(int64_t entries) {
  return align256(static_cast<size_t>(entries) * sizeof(uint32_t));
}

}  // namespace

void lsh_write_scratch_bytes(int64_t entries, size_t* bytes) {
  *bytes = 4 * write_array_bytes(entries) + align256(write_temp_bytes(entries));
}

void lsh_write_pass(const CudaContext& ctx, const ops::LshTablesView& v, const ops::LshWritePass& p,
                    const uint32_t* labels, const uint32_t* fresh, void* scratch,
                    size_t scratch_bytes) {
  const int64_t n = p.entries();
  if (n == 0) return;
  size_t need = 0;
  lsh_write_scratch_bytes(n, &need);
  XMC_CUDA_REQUIRE(need <= scratch_bytes, n);
  auto* base = static_cast<unsigned char*>(scratch);
  const size_t part = write_array_bytes(n);
  auto* k0 = reinterpret_cast<uint32_t*>(base);
  auto* k1 = reinterpret_cast<uint32_t*>(base + part);
  auto* v0 = reinterpret_cast<uint32_t*>(base + 2 * part);
  auto* v1 = reinterpret_cast<uint32_t*>(base + 3 * part);
  void* temp = base + 4 * part;
  size_t temp_bytes = scratch_bytes - 4 * part;
  XMC_CUDA_LAUNCH(lsh_pass_entries_kernel, lsh_blocks(int64_t{p.tg} * p.m), kLshThreads, 0,
                  ctx.stream(), v, p, labels, fresh, k0, v0);
  int bits = 1;
  while (bits < 32 && (int64_t{1} << bits) < int64_t{p.tg} * v.nb) ++bits;
  cub::DoubleBuffer<uint32_t> keys(k0, k1), vals(v0, v1);
  XMC_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, vals, n, 0, bits, ctx.stream()));
  XMC_CUDA_LAUNCH(lsh_bucket_writes_kernel, lsh_blocks(n), kLshThreads, 0, ctx.stream(), v, p,
                  labels, keys.Current(), vals.Current(), n);
}

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
  if (work.reach <= ops::kLshBlockDrawReach) {
    XMC_CUDA_REQUIRE(rows <= launch::kMaxGridX, rows);
    XMC_CUDA_LAUNCH(lsh_draw_block_kernel, static_cast<unsigned>(rows), kDrawThreads, 0,
                    ctx.stream(), v, codes, qptr, pos_ptr, pos, max_candidates, min_candidates,
                    labels, step_seed, work, cap, label, positive, count);
    return;
  }
  constexpr int kRowsPerBlock = 64;
  const int64_t blocks = launch::ceil_div(rows, kRowsPerBlock);
  XMC_CUDA_REQUIRE(blocks <= launch::kMaxGridX, rows);
  XMC_CUDA_LAUNCH(lsh_draw_kernel, static_cast<unsigned>(blocks), kRowsPerBlock, 0, ctx.stream(), v,
                  codes, qptr, pos_ptr, pos, rows, max_candidates, min_candidates, labels,
                  step_seed, work, cap, label, positive, count);
}

}  // namespace xmc::gpu
