#include "sampling/lsh.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "ops/dense.h"

namespace xmc {

namespace {

int ceil_log2(int n) {
  int b = 0;
  while ((1 << b) < n) ++b;
  return b;
}

constexpr int kMaxBits = 24;

}  // namespace

int64_t LshHasher::bits_for(const LshParams& p) {
  return p.family == LshFamily::simhash ? int64_t{p.k} : int64_t{p.k} * ceil_log2(p.bin);
}

LshHasher::LshHasher(int64_t dim, const LshParams& p) : dim_(dim), p_(p) {
  if (dim <= 0 || p.k < 1 || p.tables < 1)
    throw_input("LSH needs dim > 0, k >= 1 and tables >= 1; got dim={} k={} tables={}", dim,
                p.k, p.tables);
  const int64_t nproj = int64_t{p.k} * p.tables;
  Rng rng = Rng::stream(p.seed, 0x15A);
  if (p.family == LshFamily::simhash) {
    bits_ = p.k;
    if (p.sparse_projection) {
      if (!(p.density > 0.0 && p.density <= 1.0))
        throw_input("simhash projection density must be in (0, 1]; got {}", p.density);
      const int64_t nnz = std::max<int64_t>(1, static_cast<int64_t>(p.density * dim + 0.5));
      sp_ptr_.push_back(0);
      std::vector<uint32_t> perm(static_cast<size_t>(dim));
      for (int64_t r = 0; r < nproj; ++r) {
        // Partial Fisher-Yates: nnz distinct coordinates.
        for (int64_t j = 0; j < dim; ++j) perm[j] = static_cast<uint32_t>(j);
        for (int64_t j = 0; j < nnz; ++j) {
          const auto s = j + static_cast<int64_t>(rng.below(static_cast<uint64_t>(dim - j)));
          std::swap(perm[j], perm[s]);
          sp_idx_.push_back(perm[j]);
          sp_sign_.push_back(rng.next() & 1 ? 1.0f : -1.0f);
        }
        sp_ptr_.push_back(static_cast<int64_t>(sp_idx_.size()));
      }
    } else {
      proj_.resize(static_cast<size_t>(nproj * dim));
      for (auto& v : proj_) v = static_cast<float>(rng.normal());
    }
  } else {
    if (p.bin < 2) throw_input("dwta bin must be >= 2; got {}", p.bin);
    code_bits_ = ceil_log2(p.bin);
    bits_ = p.k * code_bits_;
    bin_idx_.resize(static_cast<size_t>(nproj * p.bin));
    for (auto& v : bin_idx_) v = static_cast<uint32_t>(rng.below(static_cast<uint64_t>(dim)));
  }
  if (bits_ > kMaxBits)
    throw_input("LSH tables of {} bits (k={}, {} bits per code) exceed the limit of {} bits",
                bits_, p.k, p.family == LshFamily::dwta ? code_bits_ : 1, kMaxBits);
}

void LshHasher::hash(const float* x, uint32_t* out) const {
  const int k = p_.k;
  if (p_.family == LshFamily::simhash) {
    for (int t = 0; t < p_.tables; ++t) {
      uint32_t code = 0;
      for (int j = 0; j < k; ++j) {
        const int64_t r = int64_t{t} * k + j;
        float s = 0.0f;
        if (p_.sparse_projection) {
          for (int64_t q = sp_ptr_[r]; q < sp_ptr_[r + 1]; ++q) s += sp_sign_[q] * x[sp_idx_[q]];
        } else {
          const float* pr = proj_.data() + r * dim_;
          for (int64_t c = 0; c < dim_; ++c) s += pr[c] * x[c];
        }
        code = (code << 1) | (s >= 0.0f ? 1u : 0u);
      }
      out[t] = code;
    }
    return;
  }
  // dwta
  const int bin = p_.bin;
  std::vector<int> codes(static_cast<size_t>(k));
  std::vector<char> empty(static_cast<size_t>(k));
  for (int t = 0; t < p_.tables; ++t) {
    for (int j = 0; j < k; ++j) {
      const uint32_t* idx = bin_idx_.data() + (int64_t{t} * k + j) * bin;
      int best = 0;
      float bv = x[idx[0]];
      bool nonzero = bv != 0.0f;
      for (int q = 1; q < bin; ++q) {
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
        // Densification: borrow the code of the first non-empty bin on a seeded probe path.
        c = 0;
        for (uint64_t a = 1; a <= 64; ++a) {
          const auto o = static_cast<int>(mix64(p_.seed ^ (static_cast<uint64_t>(t) << 40) ^
                                                (static_cast<uint64_t>(j) << 20) ^ a) %
                                          static_cast<uint64_t>(k));
          if (!empty[o]) {
            c = codes[o];
            break;
          }
        }
      }
      code = (code << code_bits_) | static_cast<uint32_t>(c);
    }
    out[t] = code;
  }
}

void LshHasher::hash_rows(ConstMatrix x, uint32_t* out) const {
  XMC_CHECK(x.cols == dim_, "hash_rows of width {} with a hasher of width {}", x.cols, dim_);
  const int nt = p_.tables;
  if (p_.family == LshFamily::simhash && !p_.sparse_projection) {
    // Projections of a block of rows in one GEMM: s [rows×T·K] = x·Pᵀ.
    const int64_t nproj = int64_t{p_.k} * nt;
    const int64_t block = 4096;
    std::vector<float> s(static_cast<size_t>(std::min(block, x.rows) * nproj));
    for (int64_t r0 = 0; r0 < x.rows; r0 += block) {
      const int64_t rows = std::min(block, x.rows - r0);
      Matrix sm(s.data(), rows, nproj);
      ops::gemm_nt(x.rows_range(r0, rows), ConstMatrix(proj_.data(), nproj, dim_), sm);
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < rows; ++i) {
        const float* si = sm.row(i);
        for (int t = 0; t < nt; ++t) {
          uint32_t code = 0;
          for (int j = 0; j < p_.k; ++j) code = (code << 1) | (si[t * p_.k + j] >= 0.0f ? 1u : 0u);
          out[(r0 + i) * nt + t] = code;
        }
      }
    }
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < x.rows; ++i) hash(x.row(i), out + i * nt);
}

LshTables::LshTables(MemoryLedger& lg, int64_t dim, int64_t num_labels, const LshParams& p)
    : p_(p), hasher_(dim, p), num_labels_(num_labels), nb_(int64_t{1} << hasher_.bits()) {
  if (p.capacity < 1) throw_input("LSH bucket capacity must be >= 1; got {}", p.capacity);
  if (num_labels < 1 || num_labels > (int64_t{1} << 32) - 1)
    throw_input("LSH tables over {} labels (needs 1 .. 2^32-1)", num_labels);
  const auto nt = static_cast<size_t>(p.tables);
  slots_ = HostBuffer<uint32_t>(lg, MemTag::index, nt * static_cast<size_t>(nb_) * p.capacity);
  size_ = HostBuffer<uint32_t>(lg, MemTag::index, nt * static_cast<size_t>(nb_));
  seen_ = HostBuffer<uint32_t>(lg, MemTag::index, nt * static_cast<size_t>(nb_));
  where_ = HostBuffer<uint32_t>(lg, MemTag::index, nt * static_cast<size_t>(num_labels));
  rng_state_ = HostBuffer<int64_t>(lg, MemTag::index, nt * 4);
  for (int t = 0; t < p.tables; ++t) {
    const auto s = Rng::stream(p.seed, 0x7AB1E000ULL + static_cast<uint64_t>(t)).state();
    for (int q = 0; q < 4; ++q) rng_state_[t * 4 + q] = static_cast<int64_t>(s[q]);
  }
}

std::span<const uint32_t> LshTables::bucket(int t, uint32_t b) const {
  const int64_t cell = int64_t{t} * nb_ + b;
  return {slots_.data() + cell * p_.capacity, size_[cell]};
}

void LshTables::insert_one(int t, uint32_t b, uint32_t label) {
  const int64_t cell = int64_t{t} * nb_ + b;
  uint32_t* s = slots_.data() + cell * p_.capacity;
  uint32_t& n = size_[cell];
  const auto cap = static_cast<uint32_t>(p_.capacity);
  ++seen_[cell];
  if (n < cap) {
    s[n++] = label;
    return;
  }
  if (p_.policy == BucketPolicy::fifo) {
    std::memmove(s, s + 1, (cap - 1) * sizeof(uint32_t));
    s[cap - 1] = label;
    return;
  }
  // Reservoir (algorithm R): the new label replaces a random slot with probability cap/seen.
  std::array<uint64_t, 4> st{};
  for (int q = 0; q < 4; ++q) st[q] = static_cast<uint64_t>(rng_state_[t * 4 + q]);
  Rng rng;
  rng.set_state(st);
  const uint64_t r = rng.below(seen_[cell]);
  st = rng.state();
  for (int q = 0; q < 4; ++q) rng_state_[t * 4 + q] = static_cast<int64_t>(st[q]);
  if (r < cap) {
    // Keep the oldest-first order: drop slot r, append the new label.
    std::memmove(s + r, s + r + 1, (cap - 1 - r) * sizeof(uint32_t));
    s[cap - 1] = label;
  }
}

void LshTables::remove_one(int t, uint32_t b, uint32_t label) {
  const int64_t cell = int64_t{t} * nb_ + b;
  uint32_t* s = slots_.data() + cell * p_.capacity;
  uint32_t& n = size_[cell];
  for (uint32_t q = 0; q < n; ++q) {
    if (s[q] != label) continue;
    std::memmove(s + q, s + q + 1, (n - 1 - q) * sizeof(uint32_t));
    --n;
    return;
  }
}

void LshTables::build(ConstMatrix w) {
  XMC_CHECK(w.rows == num_labels_, "LSH build over {} rows, tables sized for {} labels", w.rows,
            num_labels_);
  std::fill(size_.data(), size_.data() + size_.size(), 0u);
  std::fill(seen_.data(), seen_.data() + seen_.size(), 0u);
  hasher_.hash_rows(w, where_.data());
  const int nt = tables();
  // One thread per table: no two threads write the same bucket; label order within a
  // table is the serial order, so the result does not depend on the thread count.
#pragma omp parallel for schedule(dynamic, 1)
  for (int t = 0; t < nt; ++t)
    for (int64_t l = 0; l < num_labels_; ++l)
      insert_one(t, where_[l * nt + t], static_cast<uint32_t>(l));
}

void LshTables::reinsert(std::span<const uint32_t> labels, ConstMatrix w) {
  XMC_CHECK(w.rows == num_labels_, "LSH reinsert over {} rows, tables sized for {} labels",
            w.rows, num_labels_);
  reinsert_vectors(labels, [&](int64_t i) { return w.row(labels[i]); });
}

void LshTables::reinsert_rows(std::span<const uint32_t> labels, ConstMatrix rows) {
  XMC_CHECK(rows.rows == static_cast<int64_t>(labels.size()) && rows.cols == hasher_.dim(),
            "LSH reinsert of {} labels from rows [{}×{}], dim {}", labels.size(), rows.rows,
            rows.cols, hasher_.dim());
  reinsert_vectors(labels, [&](int64_t i) { return rows.row(i); });
}

template <class Vec>
void LshTables::reinsert_vectors(std::span<const uint32_t> labels, Vec vec) {
  for (uint32_t l : labels)
    XMC_CHECK(l < num_labels_, "reinsert of label {} >= {}", l, num_labels_);
  const int nt = tables();
  const auto n = static_cast<int64_t>(labels.size());
  std::vector<uint32_t> fresh(static_cast<size_t>(n * nt));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) hasher_.hash(vec(i), fresh.data() + i * nt);
#pragma omp parallel for schedule(dynamic, 1)
  for (int t = 0; t < nt; ++t) {
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t l = labels[i];
      uint32_t& old = where_[int64_t{l} * nt + t];
      remove_one(t, old, l);
      old = fresh[i * nt + t];
      insert_one(t, old, l);
    }
  }
}

std::vector<TensorRef> LshTables::state(const std::string& prefix) {
  const int64_t nt = tables();
  return {{prefix + "buckets", {nt, nb_, p_.capacity}, slots_.data()},
          {prefix + "bucket_size", {nt, nb_}, size_.data()},
          {prefix + "bucket_seen", {nt, nb_}, seen_.data()},
          {prefix + "label_bucket", {num_labels_, nt}, where_.data()},
          {prefix + "rng", {nt, 4}, rng_state_.data()}};
}

int64_t LshTables::bytes() const {
  return static_cast<int64_t>(slots_.bytes() + size_.bytes() + seen_.bytes() + where_.bytes() +
                              rng_state_.bytes());
}

double LshTables::planned_bytes(int64_t num_labels, const LshParams& p) {
  const double tables = p.tables;
  const double buckets = tables * std::ldexp(1.0, static_cast<int>(LshHasher::bits_for(p)));
  return 4.0 * buckets * (static_cast<double>(p.capacity) + 2.0) +
         4.0 * tables * static_cast<double>(num_labels) + 32.0 * tables;
}

}  // namespace xmc
