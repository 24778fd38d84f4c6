#pragma once
// Sampled scoring ops (CPU in ops/sampled.cpp, CUDA in cuda/sampled.cu; each takes the
// Context, checks the shapes and dispatches): the gathered dot products lsh_sampled and
// anns_sampled train with on both devices. Each batch row b has a list of candidate
// labels (global ids, CSR over the batch); w [L×d] holds one weight row per label.
//   scores  z[e] = h_b·w[label e] + bias[label e]        for the entries e of row b
//   input   dh_b += sum_e g[e]·w[label e]                 (zero g skipped)
//   weight  dw_l  = sum_{e: label e = l} g[e]·h_row(e),  db_l = sum g[e]
// The weight gradient is sparse: only touched labels get a row, computed by a segmented
// reduction over the entries grouped by label (group_entries_by_label), each row summed in
// a fixed order (entries sorted by label, then row) by one thread, so no L×d array and no
// atomics. The loss gradients and the optimizer updates stay with the layers.
#include <cstdint>
#include <vector>

#include "core/context.h"
#include "core/cuda_context.h"
#include "core/host_device.h"
#include "core/matrix.h"
#include "core/rng.h"

namespace xmc::ops {

// Candidate lists: row b's entries are [indptr[b], indptr[b+1]) of labels.
struct CandidateCsr {
  const int64_t* indptr = nullptr;   // [rows + 1]
  const uint32_t* labels = nullptr;  // [nnz] the layer's label ids (its shard's, from 0)
  int64_t rows = 0;
  int64_t nnz = 0;
};

// The entries grouped by label: touched label u = labels[u] (ascending) owns
// entry[ptr[u] .. ptr[u+1]) (entry ids, ascending row order) whose rows are row[...].
struct EntryGroups {
  const uint32_t* labels = nullptr;  // [groups]
  const int64_t* ptr = nullptr;      // [groups + 1]
  const int64_t* entry = nullptr;    // [nnz]
  const uint32_t* row = nullptr;     // [nnz] batch row of entry[i]
  int64_t groups = 0;
  int64_t nnz = 0;
};

// Owning host arrays of an EntryGroups (upload them for the GPU op).
struct EntryGroupsBuffers {
  std::vector<uint32_t> labels;
  std::vector<int64_t> ptr{0};
  std::vector<int64_t> entry;
  std::vector<uint32_t> row;
  EntryGroups view() const {
    return {labels.data(),
            ptr.data(),
            entry.data(),
            row.data(),
            static_cast<int64_t>(labels.size()),
            static_cast<int64_t>(entry.size())};
  }
};

// anns_sampled's candidate draw, one point at a time, written once for both devices
// (draw_point_candidates; ops::draw_candidates runs it over a batch on the Context's
// device, so both devices draw the same candidates).
inline constexpr uint32_t kNoCandidate = 0xffffffffu;  // an empty slot of a hard-negative table

struct CandidateDraw {
  int64_t labels = 0;              // n: the layer's labels (local ids 0..n-1)
  const uint32_t* hard = nullptr;  // [points×k_h] stale hard negatives (kNoCandidate: none);
                                   // nullptr: no hard negatives this step
  int64_t points = 0;              // rows of `hard` (the training points)
  int64_t k_h = 0;
  int64_t k_r = 0;           // uniform negatives per point
  uint64_t seed = 0;         // the uniform draws' seed
  int64_t step = 0;          // the optimizer step (a new draw every step)
  float hard_weight = 1.0f;  // loss weight of a hard negative
  bool unbiased = false;     // uniform weight (labels left)/k_r instead of 1
};

// The slots a point with np positives may fill: np + k_h + min(k_r, n).
XMC_HOST_DEVICE inline int64_t candidate_slots(const CandidateDraw& c, int64_t np) {
  return np + (c.hard != nullptr ? c.k_h : 0) + (c.k_r < c.labels ? c.k_r : c.labels);
}

// The candidates of the point with dataset row `id` and positives pos[0..np) (local ids,
// any order, repeats allowed) into label/positive/weight [0..count), count returned
// (<= candidate_slots(c, np)):
//   1. its positives, ascending and distinct (weight 1);
//   2. its hard negatives c.hard[id·k_h ..] in table order, minus empty slots and labels
//      already taken (weight hard_weight; none when c.hard is null or id is outside the table);
//   3. min(k_r, left) distinct uniform labels not yet taken, drawn by rejection from
//      Rng::stream(seed ^ step·K, id) (all of those left when k_r >= left); weight 1, or
//      left/k_r when unbiased and left > k_r (left: the labels not taken after 2).
// "Taken" is a linear scan of the point's entries so far: O(count²) per point, for the
// few hundred candidates a point has.
XMC_HOST_DEVICE inline int64_t draw_point_candidates(const CandidateDraw& c, int64_t id,
                                                     const uint32_t* pos, int64_t np,
                                                     uint32_t* label, uint8_t* positive,
                                                     float* weight) {
  int64_t count = 0;
  auto taken = [&](uint32_t l) {
    for (int64_t j = 0; j < count; ++j)
      if (label[j] == l) return true;
    return false;
  };
  // 1. Positives: insertion sort, repeats dropped.
  for (int64_t j = 0; j < np; ++j) {
    const uint32_t l = pos[j];
    int64_t at = count;
    while (at > 0 && label[at - 1] > l) --at;
    if (at > 0 && label[at - 1] == l) continue;
    for (int64_t m = count; m > at; --m) label[m] = label[m - 1];
    label[at] = l;
    ++count;
  }
  for (int64_t j = 0; j < count; ++j) {
    positive[j] = 1;
    weight[j] = 1.0f;
  }
  // 2. Stale hard negatives.
  if (c.hard != nullptr && id >= 0 && id < c.points) {
    const uint32_t* hard = c.hard + id * c.k_h;
    for (int64_t j = 0; j < c.k_h; ++j) {
      const uint32_t l = hard[j];
      if (l == kNoCandidate || taken(l)) continue;
      label[count] = l;
      positive[count] = 0;
      weight[count] = c.hard_weight;
      ++count;
    }
  }
  // 3. Uniform negatives.
  const auto nlab = static_cast<uint64_t>(c.labels);
  const uint64_t left = nlab - static_cast<uint64_t>(count);
  const auto k_r = static_cast<uint64_t>(c.k_r);
  const float rweight =
      c.unbiased && k_r > 0 && left > k_r
          ? static_cast<float>(static_cast<double>(left) / static_cast<double>(k_r))
          : 1.0f;
  const int64_t fixed = count;
  if (k_r >= left) {
    for (uint32_t l = 0; l < nlab; ++l) {
      bool seen = false;
      for (int64_t j = 0; j < fixed && !seen; ++j) seen = label[j] == l;
      if (!seen) label[count++] = l;
    }
  } else {
    Rng rng = Rng::stream(c.seed ^ (static_cast<uint64_t>(c.step) * 0xA24BAED4963EE407ULL),
                          static_cast<uint64_t>(id));
    for (uint64_t drawn = 0; drawn < k_r;) {
      const auto l = static_cast<uint32_t>(rng.below(nlab));
      if (taken(l)) continue;
      label[count++] = l;
      ++drawn;
    }
  }
  for (int64_t j = fixed; j < count; ++j) {
    positive[j] = 0;
    weight[j] = rweight;
  }
  return count;
}

// The batch's candidates on the Context's device (CUDA: every pointer a device pointer,
// c.hard too): row b (dataset row ids[b], positives pos[pos_ptr[b] .. pos_ptr[b+1])) fills
// slots [b·cap, b·cap + count[b]) of label / positive / weight by draw_point_candidates;
// cap >= candidate_slots(c, that row's positives) for every row (the CPU checks it; on the
// GPU a row that would need more gets count -1 and no entries).
void draw_candidates(const Context& ctx, const CandidateDraw& c, const int64_t* ids,
                     const int64_t* pos_ptr, const uint32_t* pos, int64_t rows, int64_t cap,
                     uint32_t* label, uint8_t* positive, float* weight, int64_t* count);

// Groups the entries of cand (host arrays) by label; num_labels bounds the ids (checked).
EntryGroupsBuffers group_entries_by_label(const CandidateCsr& cand, int64_t num_labels);

// Where a grouping on the Context's device is written: labels [nnz], ptr [nnz + 1], entry
// [nnz], row [nnz] (room for nnz groups, the most there can be).
struct EntryGroupsOut {
  uint32_t* labels = nullptr;
  int64_t* ptr = nullptr;
  int64_t* entry = nullptr;
  uint32_t* row = nullptr;
};

// The ops on the Context's device (CUDA: the gpu:: half below, every pointer a DEVICE
// pointer, e.g. the views of CandidateStaging).
// scores [nnz]; h [B×d] with B = cand.rows; bias nullable.
void sampled_scores(const Context& ctx, const float* w, const float* bias, int64_t d,
                    const CandidateCsr& cand, ConstMatrix h, float* scores);
// dh [B×d] += sum over row b's entries of g[e]·w[label e]; entries with g[e] == 0 skipped.
void sampled_input_grad(const Context& ctx, const float* w, int64_t d, const CandidateCsr& cand,
                        const float* g, Matrix dh);
// dw [U×d] (U = groups.groups; overwritten), db [U] (nullable, overwritten).
void sampled_weight_grad(const Context& ctx, const EntryGroups& groups, const float* g,
                         ConstMatrix h, Matrix dw, float* db);
// dst [count×width] = rows rows[0..count) of src [*×width].
void gather_rows(const Context& ctx, const float* src, const uint32_t* rows, int64_t count,
                 int64_t width, float* dst);

}  // namespace xmc::ops

// The CUDA half (cuda/sampled.cu), called by lib/ops/sampled.cpp after its shape checks;
// one thread per (row or touched label, column), entries in order: deterministic, no
// atomics. Stubs that throw in a build without CUDA (core/gpu.h).
XMC_GPU_STUBS_BEGIN
namespace xmc::gpu {
XMC_GPU_FN void sampled_scores(const CudaContext& ctx, const float* w, const float* bias, int64_t d,
                               const ops::CandidateCsr& cand, ConstMatrix h,
                               float* scores) XMC_GPU_STUB;
XMC_GPU_FN void sampled_input_grad(const CudaContext& ctx, const float* w, int64_t d,
                                   const ops::CandidateCsr& cand, const float* g,
                                   Matrix dh) XMC_GPU_STUB;
XMC_GPU_FN void sampled_weight_grad(const CudaContext& ctx, const ops::EntryGroups& groups,
                                    const float* g, ConstMatrix h, Matrix dw,
                                    float* db) XMC_GPU_STUB;
XMC_GPU_FN void gather_rows(const CudaContext& ctx, const float* src, const uint32_t* rows,
                            int64_t count, int64_t width, float* dst) XMC_GPU_STUB;
// group_entries_by_label on the device (cand a device view, labels < num_labels; the
// caller checks): a stable radix sort of (label, entry) pairs (entries of one label stay
// in ascending order, hence rows too), the runs' labels and lengths, their exclusive sum
// as ptr, each entry's row by binary search in cand.indptr. *groups (host) receives the
// number of groups: read back, one synchronisation. scratch: group_scratch_bytes(nnz,
// num_labels) bytes of device memory.
XMC_GPU_FN void group_scratch_bytes(int64_t nnz, int64_t num_labels, size_t* bytes) XMC_GPU_STUB;
XMC_GPU_FN void group_entries_by_label(const CudaContext& ctx, const ops::CandidateCsr& cand,
                                       int64_t num_labels, void* scratch, size_t scratch_bytes,
                                       const ops::EntryGroupsOut& out,
                                       int64_t* groups) XMC_GPU_STUB;
// compact_candidates on the device: lengths max(count, 0), their exclusive sum as indptr
// (CUB), a block per row copying its entries; *nnz (host) = indptr[rows], read back (one
// synchronisation). scratch: compact_scratch_bytes(rows) bytes of device memory.
XMC_GPU_FN void compact_scratch_bytes(int64_t rows, size_t* bytes) XMC_GPU_STUB;
XMC_GPU_FN void compact_candidates(const CudaContext& ctx, int64_t rows, int64_t cap,
                                   const uint32_t* label, const uint8_t* positive,
                                   const float* weight, const int64_t* count, void* scratch,
                                   size_t scratch_bytes, int64_t* indptr, uint32_t* out_label,
                                   uint8_t* out_positive, float* out_weight,
                                   int64_t* nnz) XMC_GPU_STUB;
// One thread per row, draw_point_candidates into its cap slots.
XMC_GPU_FN void draw_candidates(const CudaContext& ctx, const ops::CandidateDraw& c,
                                const int64_t* ids, const int64_t* pos_ptr, const uint32_t* pos,
                                int64_t rows, int64_t cap, uint32_t* label, uint8_t* positive,
                                float* weight, int64_t* count) XMC_GPU_STUB;
}  // namespace xmc::gpu
XMC_GPU_STUBS_END

// CandidateStaging holds a Buffer (core/buffer.h, which brings fmt): host code only, not
// for nvcc, which compiles cuda/sampled.cu against the part above.
#ifndef __CUDACC__
#include "core/buffer.h"

namespace xmc::ops {

// group_entries_by_label on the Context's device: cand's arrays and out's on that device;
// returns the number of groups (on the GPU read back: one synchronisation). scratch: the
// GPU sort's workspace, grown here as needed (MemTag::workspace; unused on the CPU).
int64_t group_entries_by_label(Context& ctx, const CandidateCsr& cand, int64_t num_labels,
                               Buffer<uint8_t>& scratch, const EntryGroupsOut& out);

// The padded rows of draw_candidates packed into one CSR on the Context's device: indptr
// [rows + 1], out_label / out_positive / out_weight [nnz] (room for rows × cap; weight null:
// no weights, out_weight untouched and may be null); returns
// nnz (read back on the GPU: one synchronisation). A row whose count is negative (the
// GPU draw's "did not fit") contributes nothing; the CPU refuses it. scratch: the GPU
// scan's workspace, grown here as needed (unused on the CPU).
int64_t compact_candidates(Context& ctx, int64_t rows, int64_t cap, const uint32_t* label,
                           const uint8_t* positive, const float* weight, const int64_t* count,
                           Buffer<uint8_t>& scratch, int64_t* indptr, uint32_t* out_label,
                           uint8_t* out_positive, float* out_weight);

// A step's candidates (and their grouping by label) where the sampled ops read them: on a
// CPU Context the host arrays themselves; on a CUDA Context one packed device copy (one
// transfer per step; the buffer grows geometrically, in the ledger as workspace).
class CandidateStaging {
 public:
  CandidateStaging() = default;
  // Reserves room for rows / nnz entries / groups touched labels (CUDA; nothing on the CPU).
  CandidateStaging(Context& ctx, int64_t rows, int64_t nnz, int64_t groups);
  // Views of cand (and of *groups into *out_groups when groups is not null) on the
  // Context's device, valid until the next stage() (host arrays: while they live).
  CandidateCsr stage(const CandidateCsr& cand, const EntryGroupsBuffers* groups,
                     EntryGroups* out_groups);
  int64_t bytes() const { return static_cast<int64_t>(pack_.bytes()); }
  // bytes() right after construction with these sizes (gpu: on a CUDA Context).
  static double planned_bytes(bool gpu, int64_t rows, int64_t nnz, int64_t groups);

 private:
  Context* ctx_ = nullptr;
  std::vector<int64_t> host_;  // CUDA: the packed arrays before their upload
  Buffer<int64_t> pack_;       // CUDA
};

}  // namespace xmc::ops
#endif  // __CUDACC__
