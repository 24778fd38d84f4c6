#include "ops/lsh.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "ops/dense.h"

namespace xmc::ops {

namespace {

void check_hash(const LshHashView& h, ConstMatrix x) {
  XMC_CHECK(x.cols == h.dim, "LSH hash of rows of width {} with hash functions of width {}", x.cols,
            h.dim);
  XMC_CHECK(h.k >= 1 && h.k <= kLshMaxCodes && h.tables >= 1 && (!h.dwta || h.bin >= 2),
            "LSH hash functions: k {} tables {} bin {}", h.k, h.tables, h.bin);
}

}  // namespace

void lsh_hash_rows(const LshHashView& h, ConstMatrix x, uint32_t* codes, bool by_gemm) {
  check_hash(h, x);
  const int nt = h.tables;
  if (by_gemm && !h.dwta && !h.sparse) {
    // Projections of a block of rows in one GEMM: s [rows×T·K] = x·Pᵀ.
    const int64_t nproj = int64_t{h.k} * nt;
    const int64_t block = 4096;
    std::vector<float> s(static_cast<size_t>(std::min(block, x.rows) * nproj));
    for (int64_t r0 = 0; r0 < x.rows; r0 += block) {
      const int64_t rows = std::min(block, x.rows - r0);
      Matrix sm(s.data(), rows, nproj);
      gemm_nt(x.rows_range(r0, rows), ConstMatrix(h.proj, nproj, h.dim), sm);
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < rows; ++i)
        for (int t = 0; t < nt; ++t)
          codes[(r0 + i) * nt + t] = simhash_code(sm.row(i) + int64_t{t} * h.k, h.k);
    }
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < x.rows; ++i)
    for (int t = 0; t < nt; ++t) codes[i * nt + t] = lsh_code(h, x.row(i), t);
}

void lsh_hash_rows(const Context& ctx, const LshHashView& h, ConstMatrix x, uint32_t* codes,
                   float* scratch, int64_t scratch_rows, bool by_gemm) {
  if (!ctx.on_gpu()) return lsh_hash_rows(h, x, codes, by_gemm);
  check_hash(h, x);
  XMC_CHECK(!by_gemm || h.dwta || h.sparse || (scratch != nullptr && scratch_rows >= 1),
            "dense simhash on cuda needs a projection scratch ({} rows)", scratch_rows);
  if (x.rows > 0) gpu::lsh_hash_rows(ctx.cuda(), h, x, codes, scratch, scratch_rows, by_gemm);
}

void lsh_mark(const Context& ctx, uint32_t* flags, const uint32_t* ids, int64_t n) {
  XMC_CHECK(n >= 0, "marking {} labels", n);
  if (n == 0) return;
  if (ctx.on_gpu()) return gpu::lsh_mark(ctx.cuda(), flags, ids, n);
  for (int64_t i = 0; i < n; ++i) flags[ids[i]] = 1;
}

namespace {
void check_writes(const LshTablesView& v, const uint32_t* labels, int64_t n,
                  const uint32_t* fresh) {
  XMC_CHECK(v.tables >= 1 && v.nb >= 1 && v.capacity >= 1 && n >= 0 &&
                (labels == nullptr || fresh != nullptr),
            "LSH table writes: {} tables × {} buckets × {} slots, {} labels", v.tables, v.nb,
            v.capacity, n);
}
}  // namespace

void lsh_table_writes(const LshTablesView& v, const uint32_t* labels, int64_t n,
                      const uint32_t* fresh) {
  check_writes(v, labels, n, fresh);
  // One thread per table: no two threads write the same bucket, and each table's writes
  // run in the serial order, so the result does not depend on the thread count.
#pragma omp parallel for schedule(dynamic, 1)
  for (int t = 0; t < v.tables; ++t) lsh_table_writes_one(v, t, labels, n, fresh);
}

std::vector<LshWritePass> lsh_write_passes(const LshTablesView& v, int64_t n, bool build,
                                           int64_t max_entries) {
  XMC_CHECK(max_entries >= 2 && v.nb >= 1 && v.nb <= (int64_t{1} << 31),
            "LSH write passes of at most {} entries, {} buckets per table", max_entries, v.nb);
  const int writes = build ? 1 : 2;
  // Entries of a pass: list entries m (2·m + 1 < 2^32 for the values) × tables tg (tg·nb
  // keys < 2^32).
  const int64_t m = std::min({n, max_entries / writes, int64_t{1} << 30});
  const int64_t key_tables = std::max<int64_t>(1, ((int64_t{1} << 32) - 1) / v.nb);
  const auto tg =
      static_cast<int>(std::clamp<int64_t>(max_entries / (writes * std::max<int64_t>(m, 1)), 1,
                                           std::min<int64_t>(v.tables, key_tables)));
  std::vector<LshWritePass> passes;
  if (n <= 0) return passes;
  for (int t0 = 0; t0 < v.tables; t0 += tg)
    for (int64_t i0 = 0; i0 < n; i0 += m)
      passes.push_back({.t0 = t0,
                        .tg = std::min(tg, v.tables - t0),
                        .i0 = i0,
                        .m = std::min(m, n - i0),
                        .writes = writes});
  return passes;
}

void lsh_table_writes_by_bucket(const LshTablesView& v, const uint32_t* labels, int64_t n,
                                const uint32_t* fresh, int64_t max_entries) {
  check_writes(v, labels, n, fresh);
  XMC_CHECK(!v.reservoir, "the LSH writes by bucket are FIFO's (the reservoir's are by table)");
  std::vector<uint32_t> keys, vals;
  std::vector<int64_t> order;
  for (const LshWritePass& p : lsh_write_passes(v, n, labels == nullptr, max_entries)) {
    const int64_t e = p.entries();
    keys.assign(static_cast<size_t>(e), 0u);
    vals.assign(static_cast<size_t>(e), 0u);
    for (int64_t x = 0; x < int64_t{p.tg} * p.m; ++x)
      lsh_pass_entries(v, p, labels, fresh, x, keys.data(), vals.data());
    order.resize(static_cast<size_t>(e));
    for (int64_t i = 0; i < e; ++i) order[static_cast<size_t>(i)] = i;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return keys[static_cast<size_t>(a)] < keys[static_cast<size_t>(b)];
    });
    std::vector<uint32_t> sk(static_cast<size_t>(e)), sv(static_cast<size_t>(e));
    for (int64_t i = 0; i < e; ++i) {
      sk[static_cast<size_t>(i)] = keys[static_cast<size_t>(order[static_cast<size_t>(i)])];
      sv[static_cast<size_t>(i)] = vals[static_cast<size_t>(order[static_cast<size_t>(i)])];
    }
    for (int64_t b = 0; b < e;) {
      int64_t f = b + 1;
      while (f < e && sk[static_cast<size_t>(f)] == sk[static_cast<size_t>(b)]) ++f;
      lsh_bucket_writes(v, p, labels, sk[static_cast<size_t>(b)], sv.data(), b, f);
      b = f;
    }
  }
}

size_t lsh_write_scratch_bytes(const Context& ctx, int64_t entries) {
  if (!ctx.on_gpu() || entries <= 0) return 0;
  size_t bytes = 0;
  gpu::lsh_write_scratch_bytes(entries, &bytes);
  return bytes;
}

void lsh_table_writes(Context& ctx, const LshTablesView& v, const uint32_t* labels, int64_t n,
                      const uint32_t* fresh, Buffer<uint8_t>& scratch, int64_t max_entries) {
  if (!ctx.on_gpu()) return lsh_table_writes(v, labels, n, fresh);
  check_writes(v, labels, n, fresh);
  if (v.reservoir) return gpu::lsh_table_writes(ctx.cuda(), v, labels, n, fresh);
  const std::vector<LshWritePass> passes = lsh_write_passes(v, n, labels == nullptr, max_entries);
  int64_t most = 0;
  for (const LshWritePass& p : passes) most = std::max(most, p.entries());
  const size_t bytes = lsh_write_scratch_bytes(ctx, most);
  if (scratch.size() < bytes) scratch = Buffer<uint8_t>(ctx, MemTag::workspace, bytes);
  for (const LshWritePass& p : passes)
    gpu::lsh_write_pass(ctx.cuda(), v, p, labels, fresh, scratch.data(), scratch.size());
}

void lsh_draw_candidates(const Context& ctx, const LshTablesView& v, const uint32_t* codes,
                         const int64_t* qptr, const int64_t* pos_ptr, const uint32_t* pos,
                         int64_t rows, int64_t max_candidates, int64_t min_candidates,
                         int64_t labels, uint64_t step_seed, const LshDrawWork& work, int64_t cap,
                         uint32_t* label, uint8_t* positive, int64_t* count) {
  XMC_CHECK(rows >= 0 && max_candidates >= 1 && min_candidates >= 0 && labels >= 1 && cap >= 1 &&
                (work.map_size & (work.map_size - 1)) == 0 && work.map_size >= 2,
            "LSH draw of {} rows: max {} min {} of {} labels, {} slots, map of {}", rows,
            max_candidates, min_candidates, labels, cap, work.map_size);
  const int64_t target = std::min(min_candidates, labels);
  XMC_CHECK(2 * target <= labels || work.rest_size >= labels,
            "LSH draw: the dense padding of {} labels needs rest_size >= L ({})", labels,
            work.rest_size);
  if (rows == 0) return;
  XMC_CHECK(work.slices >= (ctx.on_gpu() ? rows : omp_get_max_threads()),
            "LSH draw: {} scratch slices for {} rows on {}", work.slices, rows,
            ctx.on_gpu() ? "cuda" : "the CPU's threads");
  if (ctx.on_gpu())
    return gpu::lsh_draw_candidates(ctx.cuda(), v, codes, qptr, pos_ptr, pos, rows, max_candidates,
                                    min_candidates, labels, step_seed, work, cap, label, positive,
                                    count);
  for (int64_t r = 0; r < rows; ++r)
    XMC_CHECK(lsh_draw_row_fits(v, qptr, pos_ptr, r, max_candidates, min_candidates, labels,
                                work.reach, work.map_size, cap),
              "LSH draw: row {} ({} positives, {} bucket entries) exceeds its {} slots, {} "
              "entries, map of {}",
              r, pos_ptr[r + 1] - pos_ptr[r], (qptr[r + 1] - qptr[r]) * v.tables * v.capacity, cap,
              work.reach, work.map_size);
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t r = 0; r < rows; ++r)
    lsh_draw_row(v, codes, qptr, pos_ptr, pos, r, omp_get_thread_num(), max_candidates,
                 min_candidates, labels, step_seed, work, cap, label, positive, count);
}

namespace {
void check_build(const LshTablesView& v, ConstMatrix w) {
  XMC_CHECK(w.rows == v.labels, "LSH build over {} rows, tables sized for {} labels", w.rows,
            v.labels);
}
void check_reinsert(const LshTablesView& v, const uint32_t* labels, ConstMatrix rows) {
  XMC_CHECK(rows.rows >= 0 && (rows.rows == 0 || labels != nullptr),
            "LSH re-insertion of {} rows without their labels", rows.rows);
  (void)v;
}
}  // namespace

void lsh_build(const LshHashView& h, const LshTablesView& v, ConstMatrix w) {
  check_build(v, w);
  const auto cells = static_cast<size_t>(v.tables * v.nb);
  std::fill(v.size, v.size + cells, 0u);
  std::fill(v.seen, v.seen + cells, 0u);
  lsh_hash_rows(h, w, v.where);
  lsh_table_writes(v, nullptr, v.labels, nullptr);  // every label, in order
}

void lsh_build(Context& ctx, const LshHashView& h, const LshTablesView& v, ConstMatrix w,
               float* scratch, int64_t scratch_rows, Buffer<uint8_t>& write_scratch,
               int64_t max_entries) {
  if (!ctx.on_gpu()) return lsh_build(h, v, w);
  check_build(v, w);
  const size_t bytes = static_cast<size_t>(v.tables * v.nb) * sizeof(uint32_t);
  gpu::memset_device(v.size, 0, bytes, ctx.cuda().stream());
  gpu::memset_device(v.seen, 0, bytes, ctx.cuda().stream());
  lsh_hash_rows(ctx, h, w, v.where, scratch, scratch_rows);
  lsh_table_writes(ctx, v, nullptr, v.labels, nullptr, write_scratch, max_entries);
}

void lsh_reinsert(const LshHashView& h, const LshTablesView& v, const uint32_t* labels,
                  ConstMatrix rows, uint32_t* fresh) {
  check_reinsert(v, labels, rows);
  if (rows.rows == 0) return;  // (a null label list would mean a build to lsh_table_writes)
  lsh_hash_rows(h, rows, fresh, /*by_gemm=*/false);
  lsh_table_writes(v, labels, rows.rows, fresh);
}

void lsh_reinsert(Context& ctx, const LshHashView& h, const LshTablesView& v,
                  const uint32_t* labels, ConstMatrix rows, uint32_t* fresh,
                  Buffer<uint8_t>& write_scratch, int64_t max_entries) {
  if (!ctx.on_gpu()) return lsh_reinsert(h, v, labels, rows, fresh);
  check_reinsert(v, labels, rows);
  if (rows.rows == 0) return;
  lsh_hash_rows(ctx, h, rows, fresh, nullptr, 0, /*by_gemm=*/false);
  lsh_table_writes(ctx, v, labels, rows.rows, fresh, write_scratch, max_entries);
}

}  // namespace xmc::ops
