#pragma once
// Inputs shared by the op tests (tests/ops) and the CPU-vs-CUDA parity binaries
// (tests/cuda, which include this file by relative path: they do not link the test main).
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/matrix.h"
#include "core/rng.h"
#include "ops/optimizer.h"

namespace xmc::testcases {

// Random sorted, duplicate-free positives per row over [0, labels), 1..max_pos of them;
// row 1 has none (softmax: a zero gradient row).
inline CsrMatrix random_targets(Rng& rng, int64_t rows, int64_t labels, int max_pos) {
  CsrMatrix t;
  t.rows = rows;
  t.cols = labels;
  for (int64_t r = 0; r < rows; ++r) {
    const int np = r == 1 ? 0 : 1 + static_cast<int>(rng.below(static_cast<uint64_t>(max_pos)));
    std::vector<uint32_t> row;
    for (int i = 0; i < np; ++i)
      row.push_back(static_cast<uint32_t>(rng.below(static_cast<uint64_t>(labels))));
    std::sort(row.begin(), row.end());
    row.erase(std::unique(row.begin(), row.end()), row.end());
    t.indices.insert(t.indices.end(), row.begin(), row.end());
    t.indptr.push_back(static_cast<int64_t>(t.indices.size()));
  }
  return t;
}

// An update rule's name in a section title: "adam", "sgd+momentum", "adam beta1=0".
inline std::string describe(const OptimizerConfig& o) {
  return std::string(to_string(o.type)) + (o.momentum != 0.0 ? "+momentum" : "") +
         (o.type != OptimizerType::sgd && o.beta1 == 0.0 ? " beta1=0" : "");
}

// The update rules with weight decay: sgd (momentum 0: no state), sgd + momentum, adam,
// adamw, and adam with beta1 = 0 (no first moment: only state array 2).
inline std::vector<OptimizerConfig> optimizers() {
  OptimizerConfig sgd;
  sgd.type = OptimizerType::sgd;
  sgd.lr = 0.1;
  sgd.weight_decay = 1e-3;
  OptimizerConfig mom = sgd;
  mom.momentum = 0.9;
  OptimizerConfig adam;
  adam.type = OptimizerType::adam;
  adam.lr = 1e-2;
  adam.weight_decay = 1e-4;
  OptimizerConfig adamw = adam;
  adamw.type = OptimizerType::adamw;
  adamw.weight_decay = 1e-2;
  OptimizerConfig rms = adam;
  rms.beta1 = 0.0;
  return {sgd, mom, adam, adamw, rms};
}

// One fp32 step of the rows of w [rows×width] (OptimizerStep, the CPU's formula) with
// state s1, s2 (per weight; rowwise: s2 one value per row; those the optimizer keeps): the
// reference of the low-precision updates.
inline void fp32_rows_step(const OptimizerStep& st, const OptimizerConfig& cfg,
                           std::vector<float>& w, std::vector<float>& s1, std::vector<float>& s2,
                           const std::vector<float>& g, int64_t rows, int64_t width) {
  const bool keeps1 = optimizer_keeps(cfg, 1), keeps2 = optimizer_keeps(cfg, 2);
  for (int64_t r = 0; r < rows; ++r) {
    float* wr = w.data() + r * width;
    const float* gr = g.data() + r * width;
    if (cfg.rowwise)
      st.apply_row(wr, gr, s2[static_cast<size_t>(r)], width);
    else
      st.apply(wr, gr, keeps1 ? s1.data() + r * width : nullptr,
               keeps2 ? s2.data() + r * width : nullptr, width);
  }
}

}  // namespace xmc::testcases
