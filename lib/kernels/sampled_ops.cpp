#include "kernels/sampled_ops.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace xmc::kernels {

EntryGroupsBuffers group_entries_by_label(const CandidateCsr& cand, int64_t num_labels) {
  XMC_CHECK(cand.indptr[cand.rows] == cand.nnz, "candidates: indptr ends at {}, nnz {}",
            cand.indptr[cand.rows], cand.nnz);
  std::vector<uint32_t> row_of(static_cast<size_t>(cand.nnz));
  for (int64_t b = 0; b < cand.rows; ++b)
    for (int64_t e = cand.indptr[b]; e < cand.indptr[b + 1]; ++e) {
      XMC_CHECK(cand.labels[e] < num_labels, "candidate label {} of row {} >= {} labels",
                cand.labels[e], b, num_labels);
      row_of[static_cast<size_t>(e)] = static_cast<uint32_t>(b);
    }
  EntryGroupsBuffers out;
  out.entry.resize(static_cast<size_t>(cand.nnz));
  std::iota(out.entry.begin(), out.entry.end(), int64_t{0});
  // Entries of a row are ascending, so a stable sort by label keeps rows ascending.
  std::stable_sort(out.entry.begin(), out.entry.end(),
                   [&](int64_t a, int64_t b) { return cand.labels[a] < cand.labels[b]; });
  out.row.resize(out.entry.size());
  for (size_t i = 0; i < out.entry.size(); ++i) {
    const int64_t e = out.entry[i];
    out.row[i] = row_of[static_cast<size_t>(e)];
    if (i == 0 || cand.labels[e] != cand.labels[out.entry[i - 1]]) {
      if (i > 0) out.ptr.push_back(static_cast<int64_t>(i));
      out.labels.push_back(cand.labels[e]);
    }
  }
  if (!out.entry.empty()) out.ptr.push_back(static_cast<int64_t>(out.entry.size()));
  return out;
}

void sampled_scores(const float* w, const float* bias, int64_t d, const CandidateCsr& cand,
                    ConstMatrix h, float* scores) {
  XMC_CHECK(h.rows == cand.rows && h.cols == d, "sampled scores: h [{}×{}], {} rows, d={}", h.rows,
            h.cols, cand.rows, d);
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t b = 0; b < cand.rows; ++b) {
    const float* hb = h.row(b);
    for (int64_t e = cand.indptr[b]; e < cand.indptr[b + 1]; ++e) {
      const uint32_t l = cand.labels[e];
      const float* wl = w + int64_t{l} * d;
      float s = 0.0f;
      for (int64_t j = 0; j < d; ++j) s += wl[j] * hb[j];
      scores[e] = s + (bias ? bias[l] : 0.0f);
    }
  }
}

void sampled_input_grad(const float* w, int64_t d, const CandidateCsr& cand, const float* g,
                        Matrix dh) {
  XMC_CHECK(dh.rows == cand.rows && dh.cols == d,
            "sampled input gradient: dh [{}×{}], {} rows, d={}", dh.rows, dh.cols, cand.rows, d);
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t b = 0; b < cand.rows; ++b) {
    float* db = dh.row(b);
    for (int64_t e = cand.indptr[b]; e < cand.indptr[b + 1]; ++e) {
      const float ge = g[e];
      if (ge == 0.0f) continue;
      const float* wl = w + int64_t{cand.labels[e]} * d;
      for (int64_t j = 0; j < d; ++j) db[j] += ge * wl[j];
    }
  }
}

void sampled_weight_grad(const EntryGroups& groups, const float* g, ConstMatrix h, Matrix dw,
                         float* db) {
  XMC_CHECK(dw.rows == groups.groups && dw.cols == h.cols,
            "sampled weight gradient: dw [{}×{}], {} touched labels, h [{}×{}]", dw.rows, dw.cols,
            groups.groups, h.rows, h.cols);
  const int64_t d = h.cols;
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t u = 0; u < groups.groups; ++u) {
    float* out = dw.row(u);
    std::fill(out, out + d, 0.0f);
    float sb = 0.0f;
    for (int64_t i = groups.ptr[u]; i < groups.ptr[u + 1]; ++i) {
      const float ge = g[groups.entry[i]];
      sb += ge;
      if (ge == 0.0f) continue;
      const float* hr = h.row(groups.row[i]);
      for (int64_t j = 0; j < d; ++j) out[j] += ge * hr[j];
    }
    if (db) db[u] = sb;
  }
}

}  // namespace xmc::kernels
