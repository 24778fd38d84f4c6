#include "sampling/lsh.h"

#include <algorithm>

#include "core/error.h"

namespace xmc {

namespace {

int ceil_log2(int n) {
  int b = 0;
  while ((1 << b) < n) ++b;
  return b;
}

constexpr int kMaxBits = 24;

// Coordinates a sparse ±1 projection reads.
int64_t sparse_nnz(int64_t dim, const LshParams& p) {
  return std::max<int64_t>(1, static_cast<int64_t>(p.density * static_cast<double>(dim) + 0.5));
}

}  // namespace

double LshHasher::planned_bytes(int64_t dim, const LshParams& p) {
  const double nproj = static_cast<double>(p.k) * p.tables;
  if (p.family == LshFamily::dwta) return 4.0 * nproj * p.bin;
  if (p.sparse_projection)
    return 8.0 * (nproj + 1.0) + 8.0 * nproj * static_cast<double>(sparse_nnz(dim, p));
  return 4.0 * nproj * static_cast<double>(dim);
}

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
      const int64_t nnz = sparse_nnz(dim, p);
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

ops::LshHashView LshHasher::view() const {
  return {.dwta = p_.family == LshFamily::dwta,
          .sparse = p_.family == LshFamily::simhash && p_.sparse_projection,
          .k = p_.k,
          .tables = p_.tables,
          .dim = dim_,
          .proj = proj_.data(),
          .sp_ptr = sp_ptr_.data(),
          .sp_idx = sp_idx_.data(),
          .sp_sign = sp_sign_.data(),
          .bin_idx = bin_idx_.data(),
          .bin = p_.bin,
          .code_bits = code_bits_,
          .seed = p_.seed};
}

void LshHasher::hash(const float* x, uint32_t* out) const {
  const ops::LshHashView h = view();
  for (int t = 0; t < p_.tables; ++t) out[t] = ops::lsh_code(h, x, t);
}

void LshHasher::hash_rows(ConstMatrix x, uint32_t* out) const {
  XMC_CHECK(x.cols == dim_, "hash_rows of width {} with a hasher of width {}", x.cols, dim_);
  ops::lsh_hash_rows(view(), x, out);
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

ops::LshTablesView LshTables::view() const {
  // The view type is the writers' too (ops::lsh_table_writes); the const methods hand it
  // to readers only.
  auto* self = const_cast<LshTables*>(this);
  return {.slots = self->slots_.data(),
          .size = self->size_.data(),
          .seen = self->seen_.data(),
          .where = self->where_.data(),
          .rng = self->rng_state_.data(),
          .tables = p_.tables,
          .nb = nb_,
          .capacity = p_.capacity,
          .reservoir = p_.policy == BucketPolicy::reservoir,
          .labels = num_labels_};
}

void LshTables::build(ConstMatrix w) { ops::lsh_build(hasher_.view(), view(), w); }

void LshTables::reinsert(std::span<const uint32_t> labels, ConstMatrix w) {
  XMC_CHECK(w.rows == num_labels_, "LSH reinsert over {} rows, tables sized for {} labels",
            w.rows, num_labels_);
  std::vector<float> rows(labels.size() * static_cast<size_t>(w.cols));
  for (size_t i = 0; i < labels.size(); ++i) {
    XMC_CHECK(labels[i] < num_labels_, "reinsert of label {} >= {}", labels[i], num_labels_);
    std::copy_n(w.row(labels[i]), w.cols, rows.data() + i * static_cast<size_t>(w.cols));
  }
  reinsert_rows(labels, ConstMatrix(rows.data(), static_cast<int64_t>(labels.size()), w.cols));
}

void LshTables::reinsert_rows(std::span<const uint32_t> labels, ConstMatrix rows) {
  XMC_CHECK(rows.rows == static_cast<int64_t>(labels.size()) && rows.cols == hasher_.dim(),
            "LSH reinsert of {} labels from rows [{}×{}], dim {}", labels.size(), rows.rows,
            rows.cols, hasher_.dim());
  for (uint32_t l : labels)
    XMC_CHECK(l < num_labels_, "reinsert of label {} >= {}", l, num_labels_);
  std::vector<uint32_t> fresh(labels.size() * static_cast<size_t>(tables()));
  ops::lsh_reinsert(hasher_.view(), view(), labels.data(), rows, fresh.data());
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
