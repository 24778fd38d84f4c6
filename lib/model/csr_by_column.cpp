#include "model/csr_by_column.h"

#include <algorithm>

#include "core/error.h"

namespace xmc {

void group_by_column(const CsrMatrix& x, CsrByColumn& out) {
  const int64_t nnz = x.nnz();
  XMC_CHECK(nnz <= 0xffffffffLL, "batch has {} non-zeros", nnz);
  // (column << 32 | position) keys, sorted: by column, then by position.
  std::vector<uint64_t> keys(static_cast<size_t>(nnz));
  for (int64_t k = 0; k < nnz; ++k)
    keys[static_cast<size_t>(k)] =
        (static_cast<uint64_t>(x.indices[static_cast<size_t>(k)]) << 32) | static_cast<uint64_t>(k);
  std::sort(keys.begin(), keys.end());
  std::vector<uint32_t> row_of(static_cast<size_t>(nnz));
  for (int64_t r = 0; r < x.rows; ++r)
    for (int64_t k = x.indptr[static_cast<size_t>(r)]; k < x.indptr[static_cast<size_t>(r) + 1]; ++k)
      row_of[static_cast<size_t>(k)] = static_cast<uint32_t>(r);
  out.cols.clear();
  out.start.clear();
  out.rows.resize(static_cast<size_t>(nnz));
  out.values.resize(static_cast<size_t>(nnz));
  for (int64_t e = 0; e < nnz; ++e) {
    const uint64_t key = keys[static_cast<size_t>(e)];
    const auto col = static_cast<uint32_t>(key >> 32);
    const auto pos = static_cast<size_t>(key & 0xffffffffu);
    if (out.cols.empty() || out.cols.back() != col) {
      out.cols.push_back(col);
      out.start.push_back(e);
    }
    out.rows[static_cast<size_t>(e)] = row_of[pos];
    out.values[static_cast<size_t>(e)] = x.has_values() ? x.values[pos] : 1.0f;
  }
  out.start.push_back(nnz);
}

}  // namespace xmc
