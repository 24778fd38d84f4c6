#include "layers/sampled_params.h"

#include <algorithm>

namespace xmc {

std::vector<uint32_t> SampledHostParams::train_step(const kernels::CandidateCsr& cand,
                                                    const float* g, ConstMatrix h, Matrix dh,
                                                    const SampledRowStep& step) {
  const int64_t d = h.cols;
  for (int64_t i = 0; i < dh.rows; ++i) std::fill(dh.row(i), dh.row(i) + dh.cols, 0.0f);
  kernels::sampled_input_grad(w.data(), d, cand, g, dh);
  const auto num_labels = static_cast<int64_t>(b.size());
  kernels::EntryGroupsBuffers groups = kernels::group_entries_by_label(cand, num_labels);
  const kernels::EntryGroups all = groups.view();
  // The touched rows' gradients kBlock labels at a time (a [kBlock×d] scratch instead of
  // [touched×d]); each row is summed by one thread in a fixed order, so the result does not
  // depend on the thread count.
  constexpr int64_t kBlock = 1024;
  std::vector<float> dw(static_cast<size_t>(std::min(kBlock, all.groups) * d));
  std::vector<float> db(static_cast<size_t>(std::min(kBlock, all.groups)));
  for (int64_t u0 = 0; u0 < all.groups; u0 += kBlock) {
    const int64_t n = std::min(kBlock, all.groups - u0);
    const kernels::EntryGroups part{all.labels + u0, all.ptr + u0, all.entry, all.row, n, all.nnz};
    kernels::sampled_weight_grad(part, g, h, Matrix(dw.data(), n, d), db.data());
    // update_row opens no OpenMP region, so per-row calls are cheap.
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t u = 0; u < n; ++u)
      update_row(part.labels[u], d, dw.data() + u * d, db[static_cast<size_t>(u)], step);
  }
  return std::move(groups.labels);
}

}  // namespace xmc
