// The LSH ops (ops/lsh.h, issue 39 §3) on every device against the host hasher and tables
// of sampling/lsh.h: rows hashed into bucket ids (dense and sparse simhash, dwta with empty
// bins), and the tables' bucket writes (a build, then a re-insertion) for FIFO and the
// reservoir — the device's buckets, sizes, counts, label buckets and generator states
// equal to the host tables'.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/context.h"
#include "core/error.h"
#include "core/rng.h"
#include "ops/lsh.h"
#include "sampling/lsh.h"
#include "sampling/lsh_candidates.h"
#include "support/device_test.h"

using namespace xmc;
using namespace xmc::test;

namespace {

// Device copies of a hasher's arrays and a view of them.
struct DeviceHasher {
  Buffer<float> proj, sign;
  Buffer<int64_t> ptr;
  Buffer<uint32_t> idx, bins;
  ops::LshHashView view;
  DeviceHasher(Context& ctx, const LshHasher& hasher) {
    view = hasher.view();
    const LshHasher::Arrays a = hasher.arrays();
    proj = put(ctx, std::vector(a.proj.begin(), a.proj.end()));
    sign = put(ctx, std::vector(a.sp_sign.begin(), a.sp_sign.end()));
    ptr = put(ctx, std::vector(a.sp_ptr.begin(), a.sp_ptr.end()));
    idx = put(ctx, std::vector(a.sp_idx.begin(), a.sp_idx.end()));
    bins = put(ctx, std::vector(a.bin_idx.begin(), a.bin_idx.end()));
    view.proj = proj.data();
    view.sp_sign = sign.data();
    view.sp_ptr = ptr.data();
    view.sp_idx = idx.data();
    view.bin_idx = bins.data();
  }
};

// Rows of x with some coordinates zero (every 5th row entirely, so that dwta's bins are
// empty and borrow codes) on the host.
std::vector<float> lsh_rows(Rng& rng, int64_t n, int64_t d) {
  std::vector<float> x(static_cast<size_t>(n * d));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j)
      x[i * d + j] =
          (i % 5 == 0 && j % 3 != 0) || rng.below(4) == 0 ? 0.0f : static_cast<float>(rng.normal());
  return x;
}

}  // namespace

// Each family: the device's codes of 301 rows (dense simhash in GEMM blocks of 64 rows)
// against the host hasher's hash_rows: equal on the CPU; on CUDA but for a few dense
// simhash codes whose projection is within rounding of 0 (cuBLAS sums in another order).
// Without the GEMM (queries, re-insertions) every family equals the host's single-vector
// hash exactly on both devices.
DEVICE_TEST("LSH hashing of rows on the device equals the host hasher", "[sampled][lsh]") {
  const int64_t d = 40, n = 301;
  struct Family {
    std::string name;
    LshParams p;
  };
  std::vector<Family> families(3);
  families[0] = {"simhash dense", LshParams{.k = 7, .tables = 5, .seed = 3}};
  families[1] = {
      "simhash sparse",
      LshParams{.k = 6, .tables = 4, .sparse_projection = true, .density = 0.25, .seed = 4}};
  families[2] = {"dwta",
                 LshParams{.family = LshFamily::dwta, .k = 3, .tables = 6, .bin = 8, .seed = 5}};
  for (const Family& f : families) {
    DYNAMIC_SECTION(f.name) {
      const LshHasher hasher(d, f.p);
      Rng rng(17);
      const auto x = lsh_rows(rng, n, d);
      const auto nt = static_cast<size_t>(f.p.tables);
      std::vector<uint32_t> want(static_cast<size_t>(n) * nt), single(nt);
      hasher.hash_rows(ConstMatrix(x.data(), n, d), want.data());
      for (int64_t i = 0; i < n; ++i) {
        hasher.hash(x.data() + i * d, single.data());
        if (f.p.family == LshFamily::dwta || f.p.sparse_projection)  // the same sums
          for (size_t t = 0; t < nt; ++t) REQUIRE(single[t] == want[i * nt + t]);
      }
      DeviceHasher dev(ctx, hasher);
      auto dx = put(ctx, x);
      Buffer<uint32_t> codes(ctx, MemTag::workspace, want.size());
      const int64_t block = 64;
      Buffer<float> scratch(ctx, MemTag::workspace,
                            static_cast<size_t>(block * f.p.k * f.p.tables));
      ops::lsh_hash_rows(ctx, dev.view, ConstMatrix(dx.data(), n, d), codes.data(), scratch.data(),
                         block);
      const auto got = get(codes, want.size());
      int64_t differ = 0;
      for (size_t i = 0; i < got.size(); ++i) differ += got[i] != want[i];
      INFO(differ << " of " << got.size() << " codes differ");
      if (!ctx.on_gpu() || f.p.family == LshFamily::dwta)
        CHECK(differ == 0);
      else
        CHECK(differ <= 1 + static_cast<int64_t>(got.size()) / 200);
      // Row by row (queries, re-insertions: no GEMM), every family equals the host's
      // single-vector hash exactly on both devices (the same fused multiply-adds).
      std::vector<uint32_t> each(want.size());
      for (int64_t i = 0; i < n; ++i) hasher.hash(x.data() + i * d, each.data() + i * nt);
      ops::lsh_hash_rows(ctx, dev.view, ConstMatrix(dx.data(), n, d), codes.data(), nullptr, 0,
                         /*by_gemm=*/false);
      CHECK(get(codes, want.size()) == each);
    }
  }
}

// Tables of 400 labels (and 20 000 for FIFO), d 24, 3 tables × 2^3 buckets × capacity 4
// (most buckets overflow), FIFO and reservoir: the device builds its buckets from the host's label
// buckets (where) and then re-inserts every third label with new vectors; after each, every array
// equals the host LshTables' (build, reinsert_rows).
DEVICE_TEST("LSH table writes on the device equal the host tables", "[sampled][lsh]") {
  const int64_t d = 24;
  struct Case {
    BucketPolicy policy;
    int64_t max_entries;  // CUDA's FIFO passes: one, or many (chunks of tables and labels)
    int64_t labels;       // 20 000: passes of 13 000-16 000 entries, CUB's multi-tile sort
  };
  for (const Case c : {Case{BucketPolicy::fifo, ops::kLshWriteEntries, 400},
                       Case{BucketPolicy::fifo, 50, 400}, Case{BucketPolicy::fifo, 16384, 20000},
                       Case{BucketPolicy::reservoir, ops::kLshWriteEntries, 400}}) {
    const BucketPolicy policy = c.policy;
    const int64_t labels = c.labels;
    DYNAMIC_SECTION(to_string(policy) << ", " << labels << " labels, passes of at most "
                                      << c.max_entries << " writes") {
      Buffer<uint8_t> scratch;
      const LshParams p{.k = 3, .tables = 3, .capacity = 4, .policy = policy, .seed = 8};
      MemoryLedger ledger;
      LshTables host(ledger, d, labels, p);
      // The device's arrays start as the host tables' do (the reservoir's generators too).
      auto arrays = [](LshTables& t) {
        std::vector<std::vector<uint32_t>> u;
        std::vector<int64_t> rng;
        for (const TensorRef& r : t.state("")) {
          if (const auto* p32 = std::get_if<uint32_t*>(&r.data))
            u.emplace_back(*p32, *p32 + r.numel());
          else
            rng.assign(std::get<int64_t*>(r.data), std::get<int64_t*>(r.data) + r.numel());
        }
        return std::make_pair(u, rng);
      };
      auto [a0, rng0] = arrays(host);
      REQUIRE(a0.size() == 4);  // buckets, bucket_size, bucket_seen, label_bucket
      Buffer<uint32_t> slots = put(ctx, a0[0]), size = put(ctx, a0[1]), seen = put(ctx, a0[2]),
                       where = put(ctx, a0[3]);
      Buffer<int64_t> rng_state = put(ctx, rng0);
      const ops::LshTablesView v{.slots = slots.data(),
                                 .size = size.data(),
                                 .seen = seen.data(),
                                 .where = where.data(),
                                 .rng = rng_state.data(),
                                 .tables = p.tables,
                                 .nb = host.buckets_per_table(),
                                 .capacity = p.capacity,
                                 .reservoir = policy == BucketPolicy::reservoir,
                                 .labels = labels};
      auto compare = [&](const std::string& when) {
        auto [a, r] = arrays(host);
        INFO(when);
        CHECK(get(slots, a[0].size()) == a[0]);
        CHECK(get(size, a[1].size()) == a[1]);
        CHECK(get(seen, a[2].size()) == a[2]);
        CHECK(get(where, a[3].size()) == a[3]);
        CHECK(get(rng_state, r.size()) == r);
      };
      Rng rng(23);
      std::vector<float> w(static_cast<size_t>(labels * d));
      for (auto& x : w) x = static_cast<float>(rng.normal());
      host.build(ConstMatrix(w.data(), labels, d));
      // The device build: the host's label buckets as where, every label in order.
      auto built = arrays(host).first;
      where.copy_from_host(built[3].data(), built[3].size());
      ops::lsh_table_writes(ctx, v, nullptr, labels, nullptr, scratch, c.max_entries);
      compare("after the build");
      // A re-insertion of every third label with new vectors.
      std::vector<uint32_t> moved;
      for (uint32_t l = 0; l < labels; l += 3) moved.push_back(l);
      std::vector<float> rows(moved.size() * static_cast<size_t>(d));
      for (auto& x : rows) x = static_cast<float>(rng.normal());
      std::vector<uint32_t> fresh(moved.size() * static_cast<size_t>(p.tables));
      for (size_t i = 0; i < moved.size(); ++i)
        host.hasher().hash(rows.data() + i * d, fresh.data() + i * p.tables);
      host.reinsert_rows(moved, ConstMatrix(rows.data(), static_cast<int64_t>(moved.size()), d));
      auto dm = put(ctx, moved), df = put(ctx, fresh);
      ops::lsh_table_writes(ctx, v, dm.data(), static_cast<int64_t>(moved.size()), df.data(),
                            scratch, c.max_entries);
      compare("after a re-insertion");
    }
  }
}

// The decomposition CUDA runs for FIFO tables (ops::lsh_table_writes_by_bucket: passes
// over tables × list entries, the writes sorted by bucket, each bucket's in order with runs
// of insertions at once) against the serial writes of every table (lsh_table_writes_one):
// the same buckets, sizes, counts and label buckets after a build and after re-insertions
// that move labels within and between buckets, for capacities 1, 3 and 16 (full buckets,
// runs longer and shorter than a bucket), 2^1 and 2^4 buckets per table, and passes of one
// table and a few labels up to everything at once.
TEST_CASE("LSH FIFO writes bucket by bucket equal the serial writes", "[sampled][lsh]") {
  const int tables = 3;
  const int64_t labels = 300;
  for (int capacity : {1, 3, 16})
    for (int64_t nb : {2, 16})
      for (int64_t max_entries : {int64_t{2}, int64_t{7}, int64_t{64}, ops::kLshWriteEntries}) {
        DYNAMIC_SECTION("capacity " << capacity << ", " << nb << " buckets, passes of "
                                    << max_entries) {
          const auto cells = static_cast<size_t>(tables * nb);
          struct Arrays {
            std::vector<uint32_t> slots, size, seen, where;
            ops::LshTablesView view(int cap, int64_t buckets) {
              return {.slots = slots.data(),
                      .size = size.data(),
                      .seen = seen.data(),
                      .where = where.data(),
                      .tables = tables,
                      .nb = buckets,
                      .capacity = cap,
                      .labels = labels};
            }
          };
          Rng rng(static_cast<uint64_t>(capacity * 131 + nb * 7 + max_entries));
          Arrays a{std::vector<uint32_t>(cells * static_cast<size_t>(capacity), 0u),
                   std::vector<uint32_t>(cells, 0u), std::vector<uint32_t>(cells, 0u),
                   std::vector<uint32_t>(static_cast<size_t>(labels * tables))};
          for (auto& w : a.where) w = static_cast<uint32_t>(rng.below(static_cast<uint64_t>(nb)));
          Arrays b = a;
          const ops::LshTablesView va = a.view(capacity, nb), vb = b.view(capacity, nb);
          for (int t = 0; t < tables; ++t)
            ops::lsh_table_writes_one(va, t, nullptr, labels, nullptr);
          ops::lsh_table_writes_by_bucket(vb, nullptr, labels, nullptr, max_entries);
          CHECK(b.slots == a.slots);
          CHECK(b.size == a.size);
          CHECK(b.seen == a.seen);
          for (int round = 0; round < 3; ++round) {
            // Distinct labels in a random order, each to a random bucket (often its own).
            std::vector<uint32_t> moved;
            for (uint32_t l = 0; l < labels; ++l)
              if (rng.below(3) != 0) moved.push_back(l);
            for (size_t i = moved.size(); i > 1; --i) std::swap(moved[i - 1], moved[rng.below(i)]);
            std::vector<uint32_t> fresh(moved.size() * tables);
            for (size_t i = 0; i < moved.size(); ++i)
              for (int t = 0; t < tables; ++t)
                fresh[i * tables + t] =
                    rng.below(2) == 0 ? a.where[moved[i] * tables + t]
                                      : static_cast<uint32_t>(rng.below(static_cast<uint64_t>(nb)));
            const auto n = static_cast<int64_t>(moved.size());
            for (int t = 0; t < tables; ++t)
              ops::lsh_table_writes_one(va, t, moved.data(), n, fresh.data());
            ops::lsh_table_writes_by_bucket(vb, moved.data(), n, fresh.data(), max_entries);
            INFO("round " << round);
            CHECK(b.slots == a.slots);
            CHECK(b.size == a.size);
            CHECK(b.seen == a.seen);
            CHECK(b.where == a.where);
          }
        }
      }
  // The passes cover every (table, entry) once, in order within a table.
  ops::LshTablesView v{.tables = 5, .nb = 8};
  int64_t covered = 0;
  for (const auto& p : ops::lsh_write_passes(v, 11, false, 6)) {
    CHECK(p.entries() <= 6);
    covered += int64_t{p.tg} * p.m;
  }
  CHECK(covered == 55);
  CHECK_THROWS_AS(ops::lsh_write_passes(v, 11, false, 1), Error);
}

// The batch draw (ops::lsh_draw_candidates) against the host sampler
// (CandidateSampler::sample, embedding queries) on the same tables, positives and step:
// every row's labels in the same order, its positives flagged. Four shapes: the cap cuts
// the retrieved labels (L 3000, max 24, min 40: cut labels may come back as padding),
// the dense padding of a small L (L 60, min 45), no retrieval (query none, uniform
// padding only), and 40 tables × 128 slots (CUDA's thread-per-row draw; the others run
// its block per row). A row given too few slots gets count -1 on CUDA; the CPU refuses it.
DEVICE_TEST("the LSH candidate draw on the device equals the host sampler", "[sampled][lsh]") {
  struct Shape {
    std::string name;
    int64_t labels, max_candidates, min_candidates;
    LshQuery query;
    int tables = 6, capacity = 16;
  };
  const std::vector<Shape> shapes = {
      {"cap", 3000, 24, 40, LshQuery::embedding},
      {"dense padding", 60, 30, 45, LshQuery::embedding},
      {"no retrieval", 3000, 64, 50, LshQuery::none},
      // 40 × 128 bucket entries a row: above CUDA's block draw, a thread per row there.
      {"reach above the block draw's", 3000, 300, 40, LshQuery::embedding, 40, 128}};
  const int64_t d = 16, rows = 37;
  for (const Shape& sh : shapes) {
    DYNAMIC_SECTION(sh.name) {
      const LshParams p{.k = 4, .tables = sh.tables, .capacity = sh.capacity, .seed = 12};
      MemoryLedger ledger;
      LshTables tables(ledger, d, sh.labels, p);
      Rng rng(31);
      std::vector<float> w(static_cast<size_t>(sh.labels * d)), h(static_cast<size_t>(rows * d));
      for (auto& x : w) x = static_cast<float>(rng.normal());
      for (auto& x : h) x = static_cast<float>(rng.normal());
      tables.build(ConstMatrix(w.data(), sh.labels, d));
      std::vector<std::vector<uint32_t>> pos_rows(static_cast<size_t>(rows));
      for (auto& r : pos_rows) {
        const auto n = rng.below(5);  // 0..4 positives, a repeat now and then
        for (uint64_t q = 0; q < n; ++q)
          r.push_back(static_cast<uint32_t>(rng.below(static_cast<uint64_t>(sh.labels))));
        if (n == 4) r.push_back(r.front());
      }
      const CsrMatrix positives = CsrMatrix::from_rows(pos_rows, sh.labels);
      const CandidateParams cp{.query = sh.query,
                               .max_candidates = sh.max_candidates,
                               .min_candidates = sh.min_candidates,
                               .seed = 77};
      CandidateSampler sampler(sh.labels, cp);
      const uint64_t step = 9;
      const CsrMatrix want =
          sampler.sample(&tables, ConstMatrix(h.data(), rows, d),
                         LabelVectors{ConstMatrix(w.data(), sh.labels, d), {}}, positives, step);
      // The device's inputs: the tables' arrays, each row's query codes, the positives.
      const int nt = p.tables;
      const bool query = sh.query != LshQuery::none;
      std::vector<uint32_t> codes(static_cast<size_t>(rows * nt));
      std::vector<int64_t> qptr(static_cast<size_t>(rows + 1), 0);
      for (int64_t r = 0; r < rows; ++r) {
        tables.hash(h.data() + r * d, codes.data() + r * nt);
        qptr[r + 1] = qptr[r] + (query ? 1 : 0);
      }
      std::vector<std::vector<uint32_t>> arrays;
      for (const TensorRef& t : tables.state(""))
        if (const auto* p32 = std::get_if<uint32_t*>(&t.data))
          arrays.emplace_back(*p32, *p32 + t.numel());
      auto slots = put(ctx, arrays[0]), size = put(ctx, arrays[1]);
      ops::LshTablesView v = tables.view();
      v.slots = slots.data();
      v.size = size.data();
      v.seen = v.where = nullptr;
      v.rng = nullptr;
      auto dcodes = put(ctx, codes);
      auto dq = put(ctx, qptr);
      auto dpp = put(ctx, positives.indptr);
      auto dpos = put(ctx, positives.indices);
      const int64_t reach = nt * p.capacity;
      int64_t map = 2;
      while (map < 2 * (5 + reach + sh.min_candidates) + 2) map *= 2;
      const bool dense = 2 * std::min(sh.min_candidates, sh.labels) > sh.labels;
      auto zeros32 = [&](int64_t n) {
        return put(ctx, std::vector<uint32_t>(static_cast<size_t>(n), 0u));
      };
      auto keys = zeros32(rows * map), vals = zeros32(rows * map), used = zeros32(rows * map);
      auto retrieved = zeros32(rows * reach), rank_label = zeros32(rows * reach);
      auto rank = put(ctx, std::vector<uint64_t>(static_cast<size_t>(rows * reach), 0));
      auto rest = zeros32(dense ? rows * sh.labels : 1);
      const ops::LshDrawWork work{.slices = rows,
                                  .keys = keys.data(),
                                  .vals = vals.data(),
                                  .used = used.data(),
                                  .map_size = map,
                                  .retrieved = retrieved.data(),
                                  .rank = rank.data(),
                                  .rank_label = rank_label.data(),
                                  .reach = reach,
                                  .rest = rest.data(),
                                  .rest_size = dense ? sh.labels : 0};
      const int64_t cap =
          ops::lsh_candidate_slots(5, sh.max_candidates, sh.min_candidates, sh.labels);
      Buffer<uint32_t> label(ctx, MemTag::workspace, static_cast<size_t>(rows * cap));
      Buffer<uint8_t> positive(ctx, MemTag::workspace, static_cast<size_t>(rows * cap));
      Buffer<int64_t> count(ctx, MemTag::workspace, static_cast<size_t>(rows));
      const uint64_t step_seed = mix64(cp.seed ^ mix64(step));
      ops::lsh_draw_candidates(ctx, v, dcodes.data(), dq.data(), dpp.data(), dpos.data(), rows,
                               sh.max_candidates, sh.min_candidates, sh.labels, step_seed, work,
                               cap, label.data(), positive.data(), count.data());
      const auto got = get(label, static_cast<size_t>(rows * cap));
      const auto flags = get(positive, static_cast<size_t>(rows * cap));
      const auto n = get(count, static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) {
        INFO("row " << r);
        const std::vector<uint32_t> w_row(want.row_indices(r),
                                          want.row_indices(r) + want.row_nnz(r));
        REQUIRE(n[r] == want.row_nnz(r));
        CHECK(std::vector<uint32_t>(got.begin() + r * cap, got.begin() + r * cap + n[r]) == w_row);
        std::vector<uint32_t> distinct;
        for (uint32_t l : pos_rows[static_cast<size_t>(r)])
          if (std::find(distinct.begin(), distinct.end(), l) == distinct.end())
            distinct.push_back(l);
        for (int64_t j = 0; j < n[r]; ++j)
          CHECK(flags[r * cap + j] == (j < static_cast<int64_t>(distinct.size()) ? 1 : 0));
      }
      // The maps are left empty (keys and values) for the next draw.
      CHECK(get(keys, static_cast<size_t>(rows * map)) ==
            std::vector<uint32_t>(static_cast<size_t>(rows * map), 0u));
      CHECK(get(vals, static_cast<size_t>(rows * map)) ==
            std::vector<uint32_t>(static_cast<size_t>(rows * map), 0u));
      // Too few slots: -1 on the device, refused on the CPU.
      if (ctx.on_gpu()) {
        ops::lsh_draw_candidates(ctx, v, dcodes.data(), dq.data(), dpp.data(), dpos.data(), rows,
                                 sh.max_candidates, sh.min_candidates, sh.labels, step_seed, work,
                                 1, label.data(), positive.data(), count.data());
        CHECK(get(count, 1)[0] == -1);
      } else {
        CHECK_THROWS_AS(ops::lsh_draw_candidates(ctx, v, dcodes.data(), dq.data(), dpp.data(),
                                                 dpos.data(), rows, sh.max_candidates,
                                                 sh.min_candidates, sh.labels, step_seed, work, 1,
                                                 label.data(), positive.data(), count.data()),
                        Error);
      }
    }
  }
}
