#pragma once
// Helpers shared by the output-layer tests: tiny batches and access to a layer's state.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor_ref.h"
#include "data/batch.h"
#include "layers/layer_init.h"

namespace xmc::test {

// The LayerInit of a one-process layer test: its Context and shape (input width d, labels,
// the largest batch); the optimizer, seed and the rest keep LayerInit's defaults.
inline LayerInit layer_init(Context& ctx, int64_t d, int64_t num_labels, int64_t batch) {
  LayerInit init;
  init.ctx = &ctx;
  init.input_dim = d;
  init.num_labels = num_labels;
  init.batch_size = batch;
  return init;
}

// A batch of pos.size() points over num_labels labels; row i's positives are pos[i]
// (sorted). No features: the layer tests pass h directly.
inline Batch make_batch(int64_t num_labels, const std::vector<std::vector<uint32_t>>& pos) {
  Batch b;
  b.sparse = false;
  b.labels = CsrMatrix::from_rows(pos, num_labels);
  for (size_t i = 0; i < pos.size(); ++i) b.ids.push_back(static_cast<int64_t>(i));
  return b;
}

// +1 when label l is a positive of row i of the batch, -1 otherwise.
inline double target(const Batch& b, int64_t i, int64_t l) {
  for (int64_t p = b.labels.indptr[i]; p < b.labels.indptr[i + 1]; ++p)
    if (b.labels.indices[p] == l) return 1.0;
  return -1.0;
}

// Loss ("bce" or "squared_hinge") of one logit z with target y = ±1 and its derivative
// dloss/dz in *grad, in double: the reference of the sparse layers' tests.
inline double ref_loss1(const std::string& loss, double y, double z, double* grad) {
  if (loss == "bce") {
    *grad = -y / (1.0 + std::exp(y * z));
    return std::log1p(std::exp(-y * z));
  }
  const double m = std::max(0.0, 1.0 - y * z);
  *grad = -2.0 * y * m;
  return m * m;
}

// The tensor named `name` of a state list (the test fails when it is missing).
inline const TensorRef& find(const std::vector<TensorRef>& ts, const std::string& name) {
  for (const auto& t : ts)
    if (t.name == name) return t;
  FAIL("no tensor " << name);
  return ts.front();
}

// A float tensor's values in double.
inline std::vector<double> to_double(const TensorRef& t) {
  const float* p = std::get<float*>(t.data);
  return {p, p + t.numel()};
}

inline std::vector<double> floats(const std::vector<TensorRef>& ts, const std::string& name) {
  return to_double(find(ts, name));
}

// Central finite difference of f with respect to x[i] (step 1e-6, in double).
inline double fd(std::vector<double>& x, size_t i, const std::function<double()>& f) {
  const double eps = 1e-6;
  const double x0 = x[i];
  x[i] = x0 + eps;
  const double fp = f();
  x[i] = x0 - eps;
  const double fm = f();
  x[i] = x0;
  return (fp - fm) / (2 * eps);
}

// An analytic gradient (from the float layer) against its finite difference.
inline void check_close(double analytic, double numeric, const std::string& what) {
  INFO(what << ": analytic " << analytic << " numeric " << numeric);
  CHECK(std::abs(analytic - numeric) <= 2e-4 + 2e-3 * std::abs(numeric));
}

}  // namespace xmc::test
