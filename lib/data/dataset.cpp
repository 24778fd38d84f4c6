#include "data/dataset.h"

#include "core/error.h"

namespace xmc {

std::vector<int64_t> label_frequencies(const CsrMatrix& labels) {
  std::vector<int64_t> freq(static_cast<size_t>(labels.cols), 0);
  for (uint32_t l : labels.indices) {
    XMC_CHECK(l < freq.size(), "label {} >= L = {}", l, labels.cols);
    ++freq[l];
  }
  return freq;
}

}  // namespace xmc
