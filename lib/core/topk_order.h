#pragma once
// The ranking order of every top-k in the project, host and device alike: score
// descending, equal scores -> the lower label first; a NaN score ranks as -inf. Pads
// (label UINT32_MAX, score -inf) therefore rank after every real candidate.
//
// Also the merge of two sorted top-k lists by ranks ("merge path"): the position of each
// element in the merged order is computed independently, so a GPU thread per element
// can place it, for any k. The CPU tests check these functions against std::merge.
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define XMC_HOST_DEVICE __host__ __device__
#else
#define XMC_HOST_DEVICE
#endif

namespace xmc {

// True when (score a, label a) ranks strictly before (score b, label b).
XMC_HOST_DEVICE inline bool ranks_before(float score_a, uint32_t label_a, float score_b,
                                         uint32_t label_b) {
  if (score_a != score_a) score_a = -INFINITY;  // NaN
  if (score_b != score_b) score_b = -INFINITY;
  if (score_a != score_b) return score_a > score_b;
  return label_a < label_b;
}

// a and b: k (score, label) pairs each, sorted by ranks_before (best first).
// Position of a[i] in the merge of a and b: i + #{b[j] ranking strictly before a[i]}.
// Position of b[i]: i + #{a[j] not ranking after... i.e. with !ranks_before(b[i], a[j])}.
// Equal elements of a go before those of b, so the positions of a and b together are
// 0 .. 2k-1, each once.
XMC_HOST_DEVICE inline int merged_position_a(int i, const float* as, const uint32_t* al,
                                             const float* bs, const uint32_t* bl, int k) {
  int lo = 0, hi = k;  // first j with !ranks_before(b[j], a[i])
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (ranks_before(bs[mid], bl[mid], as[i], al[i])) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return i + lo;
}

XMC_HOST_DEVICE inline int merged_position_b(int i, const float* as, const uint32_t* al,
                                             const float* bs, const uint32_t* bl, int k) {
  int lo = 0, hi = k;  // first j with ranks_before(b[i], a[j])
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (!ranks_before(bs[i], bl[i], as[mid], al[mid])) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return i + lo;
}

}  // namespace xmc
