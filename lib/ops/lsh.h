#pragma once
// LSH ops of lsh_sampled (issue 39 §3): the bucket ids of vectors in every table, and the
// tables' bucket writes, written once for both devices (XMC_HOST_DEVICE row functions; CPU
// in ops/lsh.cpp, CUDA in cuda/lsh.cu). sampling/lsh.h keeps the hash functions' arrays and
// the tables and calls these on its host arrays; a device-resident layer calls the
// Context forms on device copies.
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/context.h"
#include "core/cuda_context.h"
#include "core/host_device.h"
#include "core/matrix.h"
#include "core/rng.h"

namespace xmc::ops {

inline constexpr int kLshMaxCodes = 24;  // codes per table: a bucket id has at most 24 bits
// The most bucket entries a row's queries may reach for CUDA's block-per-row draw
// (lsh_draw_candidates: 256 threads × 16 ranked entries each).
inline constexpr int64_t kLshBlockDrawReach = 4096;
// The most writes one pass of the CUDA table writes sorts (lsh_table_writes).
inline constexpr int64_t kLshWriteEntries = int64_t{1} << 22;

// The hash functions (sampling/lsh.h, LshHasher) as views of their arrays on one device.
//   simhash: bit j of table t's id (most significant first) = [r_{tK+j}·x >= 0], r dense
//            ([T·K × dim], `proj`) or sparse ±1 (CSR sp_ptr / sp_idx / sp_sign);
//   dwta:    code j of table t = argmax over bin tK+j's coordinates bin_idx[(tK+j)·bin ..]
//            (first maximum), an all-zero bin borrowing the code of the first non-empty bin
//            on a probe path seeded by (seed, t, j); the id is the codes concatenated,
//            code_bits each.
struct LshHashView {
  bool dwta = false;
  bool sparse = false;  // simhash: sparse projections
  int k = 0;
  int tables = 0;
  int64_t dim = 0;
  const float* proj = nullptr;
  const int64_t* sp_ptr = nullptr;
  const uint32_t* sp_idx = nullptr;
  const float* sp_sign = nullptr;
  const uint32_t* bin_idx = nullptr;
  int bin = 0;
  int code_bits = 0;
  uint64_t seed = 0;
};

// Projection r of x, summed in coordinate order with one fused multiply-add a term, spelled
// out so that both devices round alike whatever the compiler would contract (GCC compiled
// the plain dense loop into vectorised products summed in order, with fused tails): the
// single-vector form (queries, re-insertions); a build's dense rows use a GEMM instead.
XMC_HOST_DEVICE inline float lsh_projection(const LshHashView& h, int64_t r, const float* x) {
  float s = 0.0f;
  if (h.sparse) {
    for (int64_t q = h.sp_ptr[r]; q < h.sp_ptr[r + 1]; ++q)
      s = fmaf(h.sp_sign[q], x[h.sp_idx[q]], s);
  } else {
    const float* pr = h.proj + r * h.dim;
    for (int64_t c = 0; c < h.dim; ++c) s = fmaf(pr[c], x[c], s);
  }
  return s;
}

// Table t's simhash id from its K projections s[0..K) (stride 1).
XMC_HOST_DEVICE inline uint32_t simhash_code(const float* s, int k) {
  uint32_t code = 0;
  for (int j = 0; j < k; ++j) code = (code << 1) | (s[j] >= 0.0f ? 1u : 0u);
  return code;
}

// The bucket id of x [dim] in table t.
XMC_HOST_DEVICE inline uint32_t lsh_code(const LshHashView& h, const float* x, int t) {
  const int k = h.k;
  if (!h.dwta) {
    uint32_t code = 0;
    for (int j = 0; j < k; ++j)
      code = (code << 1) | (lsh_projection(h, int64_t{t} * k + j, x) >= 0.0f ? 1u : 0u);
    return code;
  }
  int codes[kLshMaxCodes];
  bool empty[kLshMaxCodes];
  for (int j = 0; j < k; ++j) {
    const uint32_t* idx = h.bin_idx + (int64_t{t} * k + j) * h.bin;
    int best = 0;
    float bv = x[idx[0]];
    bool nonzero = bv != 0.0f;
    for (int q = 1; q < h.bin; ++q) {
      const float v = x[idx[q]];
      nonzero = nonzero || v != 0.0f;
      if (v > bv) {
        bv = v;
        best = q;
      }
    }
    codes[j] = best;
    empty[j] = !nonzero;
  }
  uint32_t code = 0;
  for (int j = 0; j < k; ++j) {
    int c = codes[j];
    if (empty[j]) {
      // Densification: the code of the first non-empty bin on a seeded probe path.
      c = 0;
      for (uint64_t a = 1; a <= 64; ++a) {
        const auto o = static_cast<int>(mix64(h.seed ^ (static_cast<uint64_t>(t) << 40) ^
                                              (static_cast<uint64_t>(j) << 20) ^ a) %
                                        static_cast<uint64_t>(k));
        if (!empty[o]) {
          c = codes[o];
          break;
        }
      }
    }
    code = (code << h.code_bits) | static_cast<uint32_t>(c);
  }
  return code;
}

// codes [n×T] = the bucket ids of the rows of x [n×dim] on the host: with by_gemm, dense
// simhash by sgemm in blocks of 4096 rows (x·Pᵀ, then the signs: the tables' builds); else,
// and for the other families, lsh_code per row (OpenMP over the rows: queries and
// re-insertions, as LshHasher::hash).
void lsh_hash_rows(const LshHashView& h, ConstMatrix x, uint32_t* codes, bool by_gemm = true);
// The same on the Context's device (CUDA: h's arrays, x and codes DEVICE memory): dense
// simhash with by_gemm by a GEMM of x against the projections in blocks of scratch_rows
// rows into scratch [scratch_rows × T·K] (device; unused otherwise and on the CPU), then a
// thread per (row, table) for the signs; otherwise a thread per (row, table) running
// lsh_code. A GPU GEMM sums in another order than the CPU's: a projection within rounding
// of 0 may take the other sign (the parity tests allow a few such codes).
void lsh_hash_rows(const Context& ctx, const LshHashView& h, ConstMatrix x, uint32_t* codes,
                   float* scratch, int64_t scratch_rows, bool by_gemm = true);
// flags[ids[i]] = 1 for i in [0, n) on the Context's device (lsh_sampled's labels updated
// since the last refresh).
void lsh_mark(const Context& ctx, uint32_t* flags, const uint32_t* ids, int64_t n);

// The tables' buckets (sampling/lsh.h, LshTables) as views of their arrays on one device:
// bucket b of table t holds size[t·nb + b] labels at slots[(t·nb + b)·capacity ..], oldest
// first; seen counts the labels inserted since it was emptied; where[l·T + t] is the bucket
// label l was last put in; rng [T×4] the reservoir policy's generator state per table.
struct LshTablesView {
  uint32_t* slots = nullptr;
  uint32_t* size = nullptr;
  uint32_t* seen = nullptr;
  uint32_t* where = nullptr;
  int64_t* rng = nullptr;
  int tables = 0;
  int64_t nb = 0;
  int capacity = 0;
  bool reservoir = false;  // else FIFO
  int64_t labels = 0;
};

// label enters bucket b of table t: appended while there is room; when full, FIFO drops the
// oldest, the reservoir (algorithm R) replaces a random slot with probability
// capacity/seen, keeping the others' order.
XMC_HOST_DEVICE inline void lsh_insert(const LshTablesView& v, int t, uint32_t b, uint32_t label) {
  const int64_t cell = int64_t{t} * v.nb + b;
  uint32_t* s = v.slots + cell * v.capacity;
  uint32_t& n = v.size[cell];
  const auto cap = static_cast<uint32_t>(v.capacity);
  ++v.seen[cell];
  if (n < cap) {
    s[n++] = label;
    return;
  }
  uint64_t drop = 0;  // FIFO: the oldest
  if (v.reservoir) {
    uint64_t st[4];
    for (int q = 0; q < 4; ++q) st[q] = static_cast<uint64_t>(v.rng[t * 4 + q]);
    Rng rng;
    rng.set_state(st);
    drop = rng.below(v.seen[cell]);
    rng.get_state(st);
    for (int q = 0; q < 4; ++q) v.rng[t * 4 + q] = static_cast<int64_t>(st[q]);
    if (drop >= cap) return;
  }
  for (uint32_t q = static_cast<uint32_t>(drop); q + 1 < cap; ++q) s[q] = s[q + 1];
  s[cap - 1] = label;
}

// label leaves bucket b of table t (when it is still there), the others keep their order.
XMC_HOST_DEVICE inline void lsh_remove(const LshTablesView& v, int t, uint32_t b, uint32_t label) {
  const int64_t cell = int64_t{t} * v.nb + b;
  uint32_t* s = v.slots + cell * v.capacity;
  uint32_t& n = v.size[cell];
  for (uint32_t q = 0; q < n; ++q) {
    if (s[q] != label) continue;
    for (uint32_t m = q; m + 1 < n; ++m) s[m] = s[m + 1];
    --n;
    return;
  }
}

// Bucket writes of one table, in order (what build and reinsert do with each table):
// every label 0..L-1 into where's bucket (labels null: a build, the caller has emptied the
// buckets and filled where), or each labels[i] leaving its last bucket and entering
// fresh[i·T + t] (where updated).
XMC_HOST_DEVICE inline void lsh_table_writes_one(const LshTablesView& v, int t,
                                                 const uint32_t* labels, int64_t n,
                                                 const uint32_t* fresh) {
  const int nt = v.tables;
  if (labels == nullptr) {
    for (int64_t l = 0; l < v.labels; ++l)
      lsh_insert(v, t, v.where[l * nt + t], static_cast<uint32_t>(l));
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t l = labels[i];
    uint32_t& old = v.where[int64_t{l} * nt + t];
    lsh_remove(v, t, old, l);
    old = fresh[i * nt + t];
    lsh_insert(v, t, old, l);
  }
}

// --- FIFO tables' writes bucket by bucket (the CUDA path) -------------------------------
// A FIFO bucket's contents follow from the writes that name it, in their order, whatever
// the other buckets get. CUDA runs a table's writes (lsh_table_writes_one's sequence) in
// passes over tables [t0, t0 + tg) × write-list entries [i0, i0 + m): each write becomes an
// entry (key: its bucket among the pass's tables' buckets; value: 2·i + 1 for entry i's
// insertion, 2·i for its removal, ascending within a table), a stable radix sort groups
// the entries by bucket keeping their order, and a thread per bucket applies its writes
// (a run of insertions at once: the newest `capacity` of the bucket and the run stay). The
// reservoir, whose generator a table's buckets share, keeps a thread per table.
struct LshWritePass {
  int t0 = 0;
  int tg = 1;
  int64_t i0 = 0;
  int64_t m = 0;
  int writes = 2;  // per entry and table: 2 (removal, insertion); 1 (a build's insertion)
  int64_t entries() const { return int64_t{tg} * m * writes; }
};
// The passes of n write-list entries (labels[0..n) or, for a build, labels 0..n-1) over
// every table, each at most max_entries (>= 2) entries and tg·nb < 2^32 keys: tables in the
// outer loop, entries in order within a table.
std::vector<LshWritePass> lsh_write_passes(const LshTablesView& v, int64_t n, bool build,
                                           int64_t max_entries);

// Entry x in [0, tg·m) of pass p (table t0 + x / m, list entry i0 + x % m): its writes'
// keys and values at [(x / m)·m·writes + (x % m)·writes ..); a removal reads the label's
// bucket from where and sets where to the label's new one (fresh).
XMC_HOST_DEVICE inline void lsh_pass_entries(const LshTablesView& v, const LshWritePass& p,
                                             const uint32_t* labels, const uint32_t* fresh,
                                             int64_t x, uint32_t* keys, uint32_t* vals) {
  const int64_t tt = x / p.m, i = x - tt * p.m, g = p.i0 + i;
  const int t = p.t0 + static_cast<int>(tt), nt = v.tables;
  const uint64_t base = static_cast<uint64_t>(tt) * static_cast<uint64_t>(v.nb);
  const int64_t e = (tt * p.m + i) * p.writes;
  if (p.writes == 1) {
    keys[e] = static_cast<uint32_t>(base + v.where[g * nt + t]);
    vals[e] = static_cast<uint32_t>(2 * i + 1);
    return;
  }
  uint32_t& where = v.where[int64_t{labels[g]} * nt + t];
  keys[e] = static_cast<uint32_t>(base + where);
  vals[e] = static_cast<uint32_t>(2 * i);
  where = fresh[g * nt + t];
  keys[e + 1] = static_cast<uint32_t>(base + where);
  vals[e + 1] = static_cast<uint32_t>(2 * i + 1);
}

// The label of a pass's entry value.
XMC_HOST_DEVICE inline uint32_t lsh_pass_label(const LshWritePass& p, const uint32_t* labels,
                                               uint32_t val) {
  const int64_t g = p.i0 + (val >> 1);
  return labels != nullptr ? labels[g] : static_cast<uint32_t>(g);
}

// The writes of one FIFO bucket, key `key` of pass p, in order: vals[begin, end) (sorted
// by key, stably). The same buckets, sizes and counts as lsh_insert / lsh_remove one by one.
XMC_HOST_DEVICE inline void lsh_bucket_writes(const LshTablesView& v, const LshWritePass& p,
                                              const uint32_t* labels, uint32_t key,
                                              const uint32_t* vals, int64_t begin, int64_t end) {
  const int64_t tt = static_cast<int64_t>(key) / v.nb;
  const int t = p.t0 + static_cast<int>(tt);
  const auto b = static_cast<uint32_t>(key - tt * v.nb);
  const int64_t cell = int64_t{t} * v.nb + b, cap = v.capacity;
  uint32_t* s = v.slots + cell * cap;
  for (int64_t e = begin; e < end;) {
    if ((vals[e] & 1u) == 0) {
      lsh_remove(v, t, b, lsh_pass_label(p, labels, vals[e]));
      ++e;
      continue;
    }
    int64_t f = e;
    if (p.writes == 1)
      f = end;  // a build: insertions only
    else
      while (f < end && (vals[f] & 1u) != 0) ++f;
    // Insertions e..f: FIFO keeps the newest cap of the bucket's n labels and the run's.
    const int64_t run = f - e, n = v.size[cell];
    v.seen[cell] += static_cast<uint32_t>(run);
    if (n + run <= cap) {
      for (int64_t k = 0; k < run; ++k) s[n + k] = lsh_pass_label(p, labels, vals[e + k]);
      v.size[cell] = static_cast<uint32_t>(n + run);
    } else {
      const int64_t keep = cap > run ? cap - run : 0, from = run > cap ? run - cap : 0;
      for (int64_t q = 0; q < keep; ++q) s[q] = s[n - keep + q];
      for (int64_t k = from; k < run; ++k)
        s[keep + k - from] = lsh_pass_label(p, labels, vals[e + k]);
      v.size[cell] = static_cast<uint32_t>(cap);
    }
    e = f;
  }
}

// lsh_table_writes_one of every table on the host, a thread per table (OpenMP; no two
// threads write one bucket), so the result is that of a serial run whatever the threads.
void lsh_table_writes(const LshTablesView& v, const uint32_t* labels, int64_t n,
                      const uint32_t* fresh);
// The same on the Context's device: the host-only part at the end of this header.
// The CUDA path's decomposition run on the host (passes, a stable sort by bucket, each
// bucket's writes): FIFO tables only. The tests check it against lsh_table_writes without a
// GPU; training uses lsh_table_writes.
void lsh_table_writes_by_bucket(const LshTablesView& v, const uint32_t* labels, int64_t n,
                                const uint32_t* fresh, int64_t max_entries);

// A build of the tables from every label's vector, w.row(l) for l in [0, v.labels): their
// bucket ids into v.where (lsh_hash_rows, by GEMM for dense simhash), the buckets emptied,
// then every label inserted in order. The Context form: at the end of this header.
void lsh_build(const LshHashView& h, const LshTablesView& v, ConstMatrix w);
// A re-insertion of labels[0..n) (distinct, n = rows.rows), rows.row(i) label i's current
// vector: their bucket ids row by row into fresh [n×T] (lsh_hash_rows without the GEMM, as
// the queries), then each leaves its last bucket and enters the new one (lsh_table_writes).
// The Context form: at the end of this header.
void lsh_reinsert(const LshHashView& h, const LshTablesView& v, const uint32_t* labels,
                  ConstMatrix rows, uint32_t* fresh);

// --- the candidate sets of lsh_sampled (sampling/lsh_candidates.h) ----------------------
// One point's set, written once for both devices: its positives (distinct, in their order),
// then the labels its query vectors' buckets hold, ranked by the number of (query, table)
// buckets they sit in (ties by a hash of the label salted from the point's generator, then
// the label), cut to max_candidates in all, then uniform random labels up to
// min(min_candidates, L) (labels cut by the cap may come back as padding).
inline constexpr uint32_t kLshPositive = 0xffffffffu;  // a taken label's map value
inline constexpr uint32_t kLshCut = 0xfffffffeu;       // retrieved, cut by the cap

// One point's scratch (host vectors on the CPU, slices of one device buffer on the GPU):
// an open-addressing map label -> collisions (keys label + 1, 0 empty; map_size a power of
// two above twice the labels it takes; keys and values zero on entry and left zero: CUDA's
// parallel retrieval counts from a zero value), the map slots used
// (to clear them), the retrieved labels and their rank keys (room for every bucket entry
// the queries reach), and `rest` (room for L labels; the dense padding of a small L only).
struct LshDrawScratch {
  uint32_t* keys = nullptr;
  uint32_t* vals = nullptr;
  uint32_t* used = nullptr;
  int64_t map_size = 0;
  uint32_t* retrieved = nullptr;
  uint64_t* rank = nullptr;
  uint32_t* rank_label = nullptr;
  uint32_t* rest = nullptr;
};

// The map's value slot of label, or null when absent.
XMC_HOST_DEVICE inline uint32_t* lsh_map_find(const LshDrawScratch& s, uint32_t label) {
  const auto mask = static_cast<uint64_t>(s.map_size - 1);
  for (uint64_t u = mix64(label) & mask;; u = (u + 1) & mask) {
    if (s.keys[u] == label + 1) return &s.vals[u];
    if (s.keys[u] == 0) return nullptr;
  }
}
// The value slot of label, inserted with v when absent (*inserted says which); nused counts
// the slots used.
XMC_HOST_DEVICE inline uint32_t& lsh_map_insert(const LshDrawScratch& s, int64_t& nused,
                                                uint32_t label, uint32_t v, bool* inserted) {
  const auto mask = static_cast<uint64_t>(s.map_size - 1);
  for (uint64_t u = mix64(label) & mask;; u = (u + 1) & mask) {
    if (s.keys[u] == label + 1) {
      *inserted = false;
      return s.vals[u];
    }
    if (s.keys[u] == 0) {
      s.keys[u] = label + 1;
      s.vals[u] = v;
      s.used[nused++] = static_cast<uint32_t>(u);
      *inserted = true;
      return s.vals[u];
    }
  }
}

// Whether (key a, label la) ranks before (key b, label lb): the larger key, then the smaller
// label.
XMC_HOST_DEVICE inline bool lsh_ranks_before(uint64_t a, uint32_t la, uint64_t b, uint32_t lb) {
  return a != b ? a > b : la < lb;
}
// Sift-down of a heap over [0, n) whose top ranks first.
XMC_HOST_DEVICE inline void lsh_sift_down(uint64_t* key, uint32_t* lab, int64_t i, int64_t n) {
  for (;;) {
    int64_t best = i;
    const int64_t a = 2 * i + 1, b = a + 1;
    if (a < n && lsh_ranks_before(key[a], lab[a], key[best], lab[best])) best = a;
    if (b < n && lsh_ranks_before(key[b], lab[b], key[best], lab[best])) best = b;
    if (best == i) return;
    const uint64_t tk = key[i];
    key[i] = key[best];
    key[best] = tk;
    const uint32_t tl = lab[i];
    lab[i] = lab[best];
    lab[best] = tl;
    i = best;
  }
}

// The most entries a set takes: max(npos, max_candidates, min(min_candidates, L)).
XMC_HOST_DEVICE inline int64_t lsh_candidate_slots(int64_t npos, int64_t max_candidates,
                                                   int64_t min_candidates, int64_t labels) {
  int64_t n = npos > max_candidates ? npos : max_candidates;
  const int64_t target = min_candidates < labels ? min_candidates : labels;
  return n > target ? n : target;
}

// A set's phases (lsh_point_candidates runs them in turn; CUDA's block per row runs the
// retrieval and the ranking with its threads, these serial parts with one):
// its positives (distinct, in their order) into out [0..count) and the map, count returned;
XMC_HOST_DEVICE inline int64_t lsh_take_positives(const LshDrawScratch& s, int64_t& nused,
                                                  const uint32_t* pos, int64_t npos,
                                                  uint32_t* out) {
  int64_t count = 0;
  bool inserted = false;
  for (int64_t q = 0; q < npos; ++q) {
    lsh_map_insert(s, nused, pos[q], kLshPositive, &inserted);
    if (inserted) out[count++] = pos[q];
  }
  return count;
}
// the uniform padding after out [0..count): labels not yet in the set (a cut label may come
// back) up to min(min_candidates, L), drawn from rng; the new count returned;
XMC_HOST_DEVICE inline void lsh_take_padding(const LshDrawScratch& s, int64_t& nused, uint32_t l,
                                             int64_t& count, uint32_t* out) {
  bool inserted = false;
  uint32_t& c = lsh_map_insert(s, nused, l, kLshPositive, &inserted);
  if (!inserted && c != kLshCut) return;
  c = kLshPositive;
  out[count++] = l;
}
XMC_HOST_DEVICE inline int64_t lsh_pad_candidates(const LshDrawScratch& s, int64_t& nused,
                                                  int64_t count, int64_t min_candidates,
                                                  int64_t labels, Rng& rng, uint32_t* out) {
  const int64_t target = min_candidates < labels ? min_candidates : labels;
  if (count >= target) return count;
  if (2 * target > labels) {
    // Dense padding (small L): a random subset of the labels not yet taken.
    int64_t nrest = 0;
    for (int64_t l = 0; l < labels; ++l) {
      const uint32_t* c = lsh_map_find(s, static_cast<uint32_t>(l));
      if (c == nullptr || *c == kLshCut) s.rest[nrest++] = static_cast<uint32_t>(l);
    }
    const int64_t need = target - count;
    for (int64_t q = 0; q < need; ++q) {
      const int64_t r = q + static_cast<int64_t>(rng.below(static_cast<uint64_t>(nrest - q)));
      const uint32_t tmp = s.rest[q];
      s.rest[q] = s.rest[r];
      s.rest[r] = tmp;
      lsh_take_padding(s, nused, s.rest[q], count, out);
    }
  } else {
    while (count < target)
      lsh_take_padding(s, nused, static_cast<uint32_t>(rng.below(static_cast<uint64_t>(labels))),
                       count, out);
  }
  return count;
}
// a retrieved label's rank key: (collisions << 32) | a hash of the label salted by the
// set's first draw (lsh_ranks_before orders by it, then by the label);
XMC_HOST_DEVICE inline uint64_t lsh_rank_key(uint32_t collisions, uint64_t salt, uint32_t label) {
  return (uint64_t{collisions} << 32) | (mix64(salt ^ label) >> 32);
}
// the map left empty (keys and values zero) for the next set.
XMC_HOST_DEVICE inline void lsh_clear_map(const LshDrawScratch& s, int64_t nused) {
  for (int64_t i = 0; i < nused; ++i) {
    s.keys[s.used[i]] = 0;
    s.vals[s.used[i]] = 0;
  }
}

// The set of one point into out [0..count), count returned (<= lsh_candidate_slots):
// pos [npos] its positives (local ids), codes [nq×T] the bucket ids of its nq query vectors
// in the tables v (only slots, size, tables, nb and capacity read; nq = 0: no retrieval),
// rng the point's generator (its first draw salts the ranking, the padding draws follow).
// *positives (when not null): how many of the set's first entries are its positives.
XMC_HOST_DEVICE inline int64_t lsh_point_candidates(const LshTablesView& v, const uint32_t* codes,
                                                    int64_t nq, const uint32_t* pos, int64_t npos,
                                                    int64_t max_candidates, int64_t min_candidates,
                                                    int64_t labels, Rng& rng,
                                                    const LshDrawScratch& s, uint32_t* out,
                                                    int64_t* positives = nullptr) {
  int64_t nused = 0, nret = 0;
  bool inserted = false;
  int64_t count = lsh_take_positives(s, nused, pos, npos, out);
  if (positives != nullptr) *positives = count;
  for (int64_t q = 0; q < nq; ++q)
    for (int t = 0; t < v.tables; ++t) {
      const int64_t cell = int64_t{t} * v.nb + codes[q * v.tables + t];
      const uint32_t* b = v.slots + cell * v.capacity;
      for (uint32_t j = 0; j < v.size[cell]; ++j) {
        uint32_t& c = lsh_map_insert(s, nused, b[j], 0u, &inserted);
        if (inserted) s.retrieved[nret++] = b[j];
        if (c != kLshPositive) ++c;
      }
    }
  const int64_t room = max_candidates - count > 0 ? max_candidates - count : 0;
  const uint64_t salt = rng.next();
  // The best `room` popped from a heap in rank order, the rest cut.
  for (int64_t i = 0; i < nret; ++i) {
    const uint32_t l = s.retrieved[i];
    s.rank[i] = lsh_rank_key(*lsh_map_find(s, l), salt, l);
    s.rank_label[i] = l;
  }
  for (int64_t i = nret / 2 - 1; i >= 0; --i) lsh_sift_down(s.rank, s.rank_label, i, nret);
  int64_t heap = nret;
  for (int64_t taken = 0; taken < room && heap > 0; ++taken) {
    out[count++] = s.rank_label[0];
    --heap;
    s.rank[0] = s.rank[heap];
    s.rank_label[0] = s.rank_label[heap];
    lsh_sift_down(s.rank, s.rank_label, 0, heap);
  }
  for (int64_t i = 0; i < heap; ++i) *lsh_map_find(s, s.rank_label[i]) = kLshCut;
  count = lsh_pad_candidates(s, nused, count, min_candidates, labels, rng, out);
  lsh_clear_map(s, nused);
  return count;
}

// Whether row r of a batch draw fits its cap slots, the scratch's reach and map (else its
// count is -1 on the GPU; the CPU refuses the batch).
XMC_HOST_DEVICE inline bool lsh_draw_row_fits(const LshTablesView& v, const int64_t* qptr,
                                              const int64_t* pos_ptr, int64_t r,
                                              int64_t max_candidates, int64_t min_candidates,
                                              int64_t labels, int64_t reach_room, int64_t map_size,
                                              int64_t cap) {
  const int64_t np = pos_ptr[r + 1] - pos_ptr[r], nq = qptr[r + 1] - qptr[r];
  const int64_t reach = nq * v.tables * v.capacity;
  const int64_t target = min_candidates < labels ? min_candidates : labels;
  return lsh_candidate_slots(np, max_candidates, min_candidates, labels) <= cap &&
         reach <= reach_room && 2 * (np + reach + target) + 2 <= map_size;
}

// The scratch of a batch's draw on one device, slice s at s·map_size (keys, vals, used),
// s·reach (retrieved, rank, rank_label) and s·rest_size (rest); keys and vals zero on the
// first call (each row leaves its map empty). A slice per row on the GPU, per OpenMP thread on the
// CPU.
struct LshDrawWork {
  int64_t slices = 0;
  uint32_t* keys = nullptr;
  uint32_t* vals = nullptr;
  uint32_t* used = nullptr;
  int64_t map_size = 0;  // a power of two >= 2·(max positives + reach + min_candidates) + 2
  uint32_t* retrieved = nullptr;
  uint64_t* rank = nullptr;
  uint32_t* rank_label = nullptr;
  int64_t reach = 0;  // the most bucket entries a row's queries reach: max queries × T × capacity
  uint32_t* rest = nullptr;
  int64_t rest_size = 0;  // L when 2·min(min_candidates, L) > L (the dense padding), else 0
  XMC_HOST_DEVICE LshDrawScratch row(int64_t r) const {
    return {
        keys + r * map_size,   vals + r * map_size, used + r * map_size,    map_size,
        retrieved + r * reach, rank + r * reach,    rank_label + r * reach, rest + r * rest_size};
  }
};

// Row r of lsh_draw_candidates in scratch slice `slice` (both devices' row body): count[r]
// = -1 when the row needs more than its cap slots, scratch entries or map.
XMC_HOST_DEVICE inline void lsh_draw_row(const LshTablesView& v, const uint32_t* codes,
                                         const int64_t* qptr, const int64_t* pos_ptr,
                                         const uint32_t* pos, int64_t r, int64_t slice,
                                         int64_t max_candidates, int64_t min_candidates,
                                         int64_t labels, uint64_t step_seed,
                                         const LshDrawWork& work, int64_t cap, uint32_t* label,
                                         uint8_t* positive, int64_t* count) {
  if (!lsh_draw_row_fits(v, qptr, pos_ptr, r, max_candidates, min_candidates, labels, work.reach,
                         work.map_size, cap)) {
    count[r] = -1;
    return;
  }
  const int64_t np = pos_ptr[r + 1] - pos_ptr[r], nq = qptr[r + 1] - qptr[r];
  Rng rng = Rng::stream(step_seed, static_cast<uint64_t>(r));
  int64_t npos = 0;
  const int64_t n =
      lsh_point_candidates(v, codes + qptr[r] * v.tables, nq, pos + pos_ptr[r], np, max_candidates,
                           min_candidates, labels, rng, work.row(slice), label + r * cap, &npos);
  for (int64_t j = 0; j < n; ++j) positive[r * cap + j] = j < npos ? 1 : 0;
  count[r] = n;
}

// The batch's sets on the Context's device: row r (positives pos[pos_ptr[r] ..
// pos_ptr[r+1]), query codes codes[qptr[r]·T .. qptr[r+1]·T)) by lsh_point_candidates with
// Rng::stream(step_seed, r) into slots [r·cap, r·cap + count[r]) of label, positive[e] = 1
// for its positives; cap >= lsh_candidate_slots of every row (the CPU checks it; on the GPU
// a row that would need more gets count -1 and no entries, for compact_candidates). CPU:
// rows in parallel (OpenMP), work.slices >= the threads; CUDA: every array DEVICE memory,
// work.slices >= rows, a block per row when work.reach <= kLshBlockDrawReach (its threads
// insert the bucket entries into the map with atomics and rank them with a block radix
// sort, equal keys then ordered by label; one thread takes the positives and the padding),
// else a thread per row (lsh_draw_row).
void lsh_draw_candidates(const Context& ctx, const LshTablesView& v, const uint32_t* codes,
                         const int64_t* qptr, const int64_t* pos_ptr, const uint32_t* pos,
                         int64_t rows, int64_t max_candidates, int64_t min_candidates,
                         int64_t labels, uint64_t step_seed, const LshDrawWork& work, int64_t cap,
                         uint32_t* label, uint8_t* positive, int64_t* count);

}  // namespace xmc::ops

// The CUDA half (cuda/lsh.cu), called by lib/ops/lsh.cpp after its checks; stubs that throw
// in a build without CUDA (core/gpu.h).
XMC_GPU_STUBS_BEGIN
namespace xmc::gpu {
XMC_GPU_FN void lsh_hash_rows(const CudaContext& ctx, const ops::LshHashView& h, ConstMatrix x,
                              uint32_t* codes, float* scratch, int64_t scratch_rows,
                              bool by_gemm) XMC_GPU_STUB;
XMC_GPU_FN void lsh_mark(const CudaContext& ctx, uint32_t* flags, const uint32_t* ids,
                         int64_t n) XMC_GPU_STUB;
XMC_GPU_FN void lsh_table_writes(const CudaContext& ctx, const ops::LshTablesView& v,
                                 const uint32_t* labels, int64_t n,
                                 const uint32_t* fresh) XMC_GPU_STUB;
// One pass of the FIFO writes by bucket (ops::lsh_write_passes): its entries, their stable
// radix sort in scratch (lsh_write_scratch_bytes(p.entries())), a thread per bucket.
XMC_GPU_FN void lsh_write_pass(const CudaContext& ctx, const ops::LshTablesView& v,
                               const ops::LshWritePass& p, const uint32_t* labels,
                               const uint32_t* fresh, void* scratch,
                               size_t scratch_bytes) XMC_GPU_STUB;
XMC_GPU_FN void lsh_write_scratch_bytes(int64_t entries, size_t* bytes) XMC_GPU_STUB;
XMC_GPU_FN void lsh_draw_candidates(const CudaContext& ctx, const ops::LshTablesView& v,
                                    const uint32_t* codes, const int64_t* qptr,
                                    const int64_t* pos_ptr, const uint32_t* pos, int64_t rows,
                                    int64_t max_candidates, int64_t min_candidates, int64_t labels,
                                    uint64_t step_seed, const ops::LshDrawWork& work, int64_t cap,
                                    uint32_t* label, uint8_t* positive,
                                    int64_t* count) XMC_GPU_STUB;
}  // namespace xmc::gpu
XMC_GPU_STUBS_END

// The Context forms that take a Buffer (core/buffer.h, which brings fmt): host code only,
// not for nvcc, which compiles cuda/lsh.cu against the part above.
#ifndef __CUDACC__
#include "core/buffer.h"

namespace xmc::ops {

// lsh_table_writes on the Context's device; v's arrays, labels and fresh DEVICE memory;
// labels distinct (a pass reads and sets each label's bucket in `where` once).
// CUDA: FIFO tables bucket by bucket in passes of at most max_entries writes
// (lsh_write_passes; the radix sort's arrays and CUB's storage in scratch, grown here to
// lsh_write_scratch_bytes, MemTag::workspace), the reservoir a thread per table (a table's
// writes in sequence: its generator's draws follow the insertion order). The CPU runs the
// host form and leaves scratch alone.
void lsh_table_writes(Context& ctx, const LshTablesView& v, const uint32_t* labels, int64_t n,
                      const uint32_t* fresh, Buffer<uint8_t>& scratch,
                      int64_t max_entries = kLshWriteEntries);
// Bytes of the CUDA writes' scratch for passes of up to `entries` writes (0 on the CPU).
size_t lsh_write_scratch_bytes(const Context& ctx, int64_t entries);
// lsh_build on the Context's device: dense simhash's GEMM in blocks of scratch_rows rows
// into scratch [scratch_rows × T·K] (lsh_hash_rows), the writes as lsh_table_writes
// (write_scratch, max_entries).
void lsh_build(Context& ctx, const LshHashView& h, const LshTablesView& v, ConstMatrix w,
               float* scratch, int64_t scratch_rows, Buffer<uint8_t>& write_scratch,
               int64_t max_entries = kLshWriteEntries);
// lsh_reinsert on the Context's device (rows, labels, fresh DEVICE memory).
void lsh_reinsert(Context& ctx, const LshHashView& h, const LshTablesView& v,
                  const uint32_t* labels, ConstMatrix rows, uint32_t* fresh,
                  Buffer<uint8_t>& write_scratch, int64_t max_entries = kLshWriteEntries);

}  // namespace xmc::ops
#endif
