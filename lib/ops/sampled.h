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
#include "core/matrix.h"

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

// Groups the entries of cand (host arrays) by label; num_labels bounds the ids (checked).
EntryGroupsBuffers group_entries_by_label(const CandidateCsr& cand, int64_t num_labels);

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
}  // namespace xmc::gpu
XMC_GPU_STUBS_END

// CandidateStaging holds a Buffer (core/buffer.h, which brings fmt): host code only, not
// for nvcc, which compiles cuda/sampled.cu against the part above.
#ifndef __CUDACC__
#include "core/buffer.h"

namespace xmc::ops {

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
