#pragma once
// Sampled scoring ops (CPU here, CUDA in cuda/sampled.cu; each takes the Context and
// dispatches): the gathered dot products lsh_sampled and anns_sampled train with on both
// devices. Each batch row b has a list of candidate
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

// The ops on the Context's device (CUDA: the gpu:: ops of ops/sparse_ops_cuda.h, every
// pointer a DEVICE pointer, e.g. the views of ops/candidate_staging.h).
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
