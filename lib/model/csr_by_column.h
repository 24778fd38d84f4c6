#pragma once
// The non-zeros of a CSR batch grouped by column: what the sparse-input layer's weight
// gradient needs on the GPU (a transposed CSR over the touched columns only, built on the
// host where the batch already is; no atomics on the device).
#include <cstdint>
#include <vector>

#include "core/matrix.h"

namespace xmc {

struct CsrByColumn {
  std::vector<uint32_t> cols;    // [U] the columns present, ascending
  std::vector<int64_t> start;    // [U+1] column u's entries: [start[u], start[u+1])
  std::vector<uint32_t> rows;    // [nnz] row of each entry
  std::vector<float> values;     // [nnz] value of each entry (1 when x has no values)
  int64_t count() const { return static_cast<int64_t>(cols.size()); }
};

// Entries of a column in ascending position (= row-major) order, the order in which
// SparseLinear::backward sums them on the CPU. Reuses out's storage.
void group_by_column(const CsrMatrix& x, CsrByColumn& out);

}  // namespace xmc
