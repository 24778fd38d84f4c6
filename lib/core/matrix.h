#pragma once
// Non-owning row-major matrix views and the owning containers of the data layer.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace xmc {

// Row-major view: element (r, c) at data[r * ld + c]; ld >= cols.
template <class T>
struct MatrixView {
  T* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;

  MatrixView() = default;
  MatrixView(T* d, int64_t r, int64_t c) : data(d), rows(r), cols(c), ld(c) {}
  MatrixView(T* d, int64_t r, int64_t c, int64_t l) : data(d), rows(r), cols(c), ld(l) {}
  // A mutable view converts to a const view.
  template <class U>
    requires std::is_same_v<T, const U>
  MatrixView(const MatrixView<U>& o) : data(o.data), rows(o.rows), cols(o.cols), ld(o.ld) {}

  T& operator()(int64_t r, int64_t c) const { return data[r * ld + c]; }
  T* row(int64_t r) const { return data + r * ld; }
  // Rows [r0, r0 + n).
  MatrixView rows_range(int64_t r0, int64_t n) const { return {data + r0 * ld, n, cols, ld}; }
  bool empty() const { return rows == 0 || cols == 0; }
};

using Matrix = MatrixView<float>;
using ConstMatrix = MatrixView<const float>;

// Owning dense row-major matrix [rows×cols], float32.
struct DenseMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<float> values;  // rows*cols

  DenseMatrix() = default;
  DenseMatrix(int64_t r, int64_t c) : rows(r), cols(c), values(static_cast<size_t>(r * c)) {}
  Matrix view() { return {values.data(), rows, cols}; }
  ConstMatrix view() const { return {values.data(), rows, cols}; }
  size_t bytes() const { return values.size() * sizeof(float); }
};

// Compressed sparse rows. indices uint32 (column ids < cols), sorted within a row is not
// required by the format but readers produce sorted, duplicate-free rows.
// values may be empty for a pattern-only matrix (labels): every stored entry is 1.
struct CsrMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<int64_t> indptr{0};  // rows + 1
  std::vector<uint32_t> indices;   // nnz
  std::vector<float> values;       // nnz, or empty (all ones)

  int64_t nnz() const { return static_cast<int64_t>(indices.size()); }
  bool has_values() const { return !values.empty(); }
  int64_t row_nnz(int64_t r) const { return indptr[r + 1] - indptr[r]; }
  const uint32_t* row_indices(int64_t r) const { return indices.data() + indptr[r]; }
  const float* row_values(int64_t r) const {
    return values.empty() ? nullptr : values.data() + indptr[r];
  }
  size_t bytes() const {
    return indptr.size() * sizeof(int64_t) + indices.size() * sizeof(uint32_t) +
           values.size() * sizeof(float);
  }
  // The rows one after another (no values): CSR [rows.size()×cols].
  static CsrMatrix from_rows(const std::vector<std::vector<uint32_t>>& rows, int64_t cols) {
    CsrMatrix out;
    out.rows = static_cast<int64_t>(rows.size());
    out.cols = cols;
    for (const auto& r : rows) {
      out.indices.insert(out.indices.end(), r.begin(), r.end());
      out.indptr.push_back(static_cast<int64_t>(out.indices.size()));
    }
    return out;
  }
  // The columns [lo, hi) of every row, renumbered 0..hi-lo-1 (a label shard's view of a
  // batch's labels), in their order, values kept.
  CsrMatrix column_range(int64_t lo, int64_t hi) const {
    CsrMatrix out;
    out.rows = rows;
    out.cols = hi - lo;
    out.indptr.reserve(static_cast<size_t>(rows + 1));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t e = indptr[r]; e < indptr[r + 1]; ++e) {
        const uint32_t c = indices[static_cast<size_t>(e)];
        if (c < lo || c >= hi) continue;
        out.indices.push_back(static_cast<uint32_t>(c - lo));
        if (!values.empty()) out.values.push_back(values[static_cast<size_t>(e)]);
      }
      out.indptr.push_back(static_cast<int64_t>(out.indices.size()));
    }
    return out;
  }
};

// Scales v [n] to unit L2 norm (the sum of squares in double); a zero vector stays zero.
inline void l2_normalise(float* v, int64_t n) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(v[i]) * v[i];
  if (ss <= 0) return;
  const auto inv = static_cast<float>(1.0 / std::sqrt(ss));
  for (int64_t i = 0; i < n; ++i) v[i] *= inv;
}

}  // namespace xmc
