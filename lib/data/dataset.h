#pragma once
// Dataset: features (sparse CSR or dense) and labels (CSR pattern, global label ids).
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "core/matrix.h"

namespace xmc {

struct Dataset {
  std::string source;                              // file(s) it was read from, for messages
  std::variant<CsrMatrix, DenseMatrix> features;   // [N×D]
  CsrMatrix labels;                                // [N×L], pattern only (values empty)

  bool sparse() const { return std::holds_alternative<CsrMatrix>(features); }
  const CsrMatrix& sparse_features() const { return std::get<CsrMatrix>(features); }
  const DenseMatrix& dense_features() const { return std::get<DenseMatrix>(features); }
  int64_t num_points() const { return labels.rows; }
  int64_t num_features() const {
    return sparse() ? sparse_features().cols : dense_features().cols;
  }
  int64_t num_labels() const { return labels.cols; }
  size_t bytes() const {
    return labels.bytes() + (sparse() ? sparse_features().bytes() : dense_features().bytes());
  }
};

// Number of training points per label, [L].
std::vector<int64_t> label_frequencies(const CsrMatrix& labels);

}  // namespace xmc
