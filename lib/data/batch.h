#pragma once
// A mini-batch gathered from a Dataset: the rows' features (sparse or dense) and labels.
#include <cstdint>
#include <vector>

#include "core/matrix.h"

namespace xmc {

struct Batch {
  std::vector<int64_t> ids;  // dataset row ids, [B]
  bool sparse = true;
  CsrMatrix sparse_x;        // [B×D] when sparse (with values)
  DenseMatrix dense_x;       // [B×D] when dense
  CsrMatrix labels;          // [B×L], global label ids, pattern only
  int64_t size() const { return static_cast<int64_t>(ids.size()); }
};

}  // namespace xmc
