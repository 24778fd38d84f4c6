#pragma once
// LSH tables over label weight vectors (LNS / SLIDE): T tables, each hashing a vector of
// width d to one of 2^bits buckets; a bucket holds up to `capacity` label ids (uint32).
// Families:
//   simhash — K signed random projections, bit k = [r_k·x >= 0]; r_k dense Gaussian or
//             sparse ±1 on a random fraction of the coordinates. bits = K.
//   dwta    — densified winner-take-all: K bins of `bin` random coordinates each, code k =
//             argmax of x over bin k (⌈log2 bin⌉ bits); an empty bin (all zero) borrows the
//             code of another bin chosen by a seeded probe sequence. bits = K·⌈log2 bin⌉, so
//             the bucket index is the concatenation of the codes and every bucket is
//             reachable when bin is a power of two.
// Buckets keep their entries oldest first: FIFO drops the oldest when full, reservoir keeps
// a uniform sample of everything inserted since the bucket was last emptied.
// Each table is written by one thread at a time (build and insert parallelise over
// tables), so a parallel build gives exactly the tables of a serial build.
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/enum_names.h"
#include "core/matrix.h"
#include "core/memory_ledger.h"
#include "core/rng.h"
#include "core/tensor_ref.h"
#include "ops/lsh.h"

namespace xmc {

XMC_NAMED_ENUM(LshFamily, simhash, dwta);
XMC_NAMED_ENUM(BucketPolicy, fifo, reservoir);

struct LshParams {
  LshFamily family = LshFamily::simhash;
  int k = 8;                 // projections (simhash) or WTA codes (dwta) per table
  int tables = 16;           // T
  int capacity = 64;         // labels per bucket
  BucketPolicy policy = BucketPolicy::fifo;
  bool sparse_projection = false;  // simhash: ±1 on a fraction `density` of coordinates
  double density = 1.0 / 3.0;
  int bin = 8;               // dwta: coordinates per bin
  uint64_t seed = 0;
};

// The hash functions alone: bucket ids of a vector in every table.
class LshHasher {
 public:
  LshHasher(int64_t dim, const LshParams& p);
  // x [dim] -> out [tables] bucket ids in [0, 2^bits).
  void hash(const float* x, uint32_t* out) const;
  // rows of x [n×dim] -> out [n×tables] (OpenMP over rows).
  void hash_rows(ConstMatrix x, uint32_t* out) const;
  int bits() const { return bits_; }
  // The hash functions as views of the host arrays (ops/lsh.h; a device layer uploads
  // copies of arrays() and points a view at them).
  ops::LshHashView view() const;
  // The arrays themselves (those of the family; the others empty).
  struct Arrays {
    std::span<const float> proj, sp_sign;
    std::span<const int64_t> sp_ptr;
    std::span<const uint32_t> sp_idx, bin_idx;
  };
  Arrays arrays() const { return {proj_, sp_sign_, sp_ptr_, sp_idx_, bin_idx_}; }
  // Bytes of those arrays for these parameters, before any is allocated.
  static double planned_bytes(int64_t dim, const LshParams& p);
  // Bits of the bucket id for these parameters (what bits() will be), before any check.
  static int64_t bits_for(const LshParams& p);
  int64_t dim() const { return dim_; }

 private:
  int64_t dim_;
  LshParams p_;
  int bits_ = 0;
  int code_bits_ = 0;  // dwta: ⌈log2 bin⌉
  // simhash dense: proj_ [T·K × dim]; sparse: per projection, coordinates + signs.
  std::vector<float> proj_;
  std::vector<int64_t> sp_ptr_;
  std::vector<uint32_t> sp_idx_;
  std::vector<float> sp_sign_;
  // dwta: bin coordinates [T·K × bin].
  std::vector<uint32_t> bin_idx_;
};

class LshTables {
 public:
  // Labels are ids in [0, num_labels). Tables are recorded in the ledger as MemTag::index.
  LshTables(MemoryLedger& ledger, int64_t dim, int64_t num_labels, const LshParams& p);

  int tables() const { return p_.tables; }
  int64_t buckets_per_table() const { return nb_; }

  // Empty every bucket, then insert every label l with vector w.row(l), in label order.
  void build(ConstMatrix w);
  // Re-insert the given labels (distinct ids): each leaves the bucket it was last put in
  // (when still there) and enters the bucket of its current vector w.row(l).
  void reinsert(std::span<const uint32_t> labels, ConstMatrix w);
  // The same with the vectors given per label: rows.row(i) is labels[i]'s current vector
  // (a device-resident layer downloads only the rows it re-inserts).
  void reinsert_rows(std::span<const uint32_t> labels, ConstMatrix rows);

  // Contents of bucket b of table t, oldest first.
  std::span<const uint32_t> bucket(int t, uint32_t b) const;
  // Bucket ids of x in every table -> codes [tables].
  void hash(const float* x, uint32_t* codes) const { hasher_.hash(x, codes); }
  // Bucket of table t that label l was last inserted into.
  uint32_t label_bucket(uint32_t l, int t) const { return where_[l * tables() + t]; }
  const LshHasher& hasher() const { return hasher_; }
  // The tables as views of their host arrays (ops/lsh.h), for the candidate draw, which
  // only reads them (slots, size).
  ops::LshTablesView view() const;

  // Everything needed to continue: buckets, sizes, inserted counts, last bucket per label,
  // per-table RNG state (reservoir). Shapes are fixed at construction.
  std::vector<TensorRef> state(const std::string& prefix);
  int64_t bytes() const;
  // What bytes() will be for these parameters, computed before anything is allocated
  // (T·2^bits buckets of `capacity` slots, their sizes and counts, the label -> bucket map).
  // A double: hostile parameters must not overflow the plan.
  static double planned_bytes(int64_t num_labels, const LshParams& p);

 private:
  // labels[i] (checked < num_labels) re-enters the buckets of vector vec(i) [dim].

  LshParams p_;
  LshHasher hasher_;
  int64_t num_labels_;
  int64_t nb_;                      // buckets per table = 2^bits
  HostBuffer<uint32_t> slots_;      // [T×nb×capacity]
  HostBuffer<uint32_t> size_;       // [T×nb]
  HostBuffer<uint32_t> seen_;       // [T×nb] inserted since the bucket was emptied
  HostBuffer<uint32_t> where_;      // [num_labels×T]
  HostBuffer<int64_t> rng_state_;   // [T×4] reservoir RNG per table
};

}  // namespace xmc
