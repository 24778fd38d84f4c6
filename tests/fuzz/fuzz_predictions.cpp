// libFuzzer target: a predictions file ("N L" header, rows of label:score pairs) read as
// `xmctrain eval --predictions` reads it, then scored: top-k of each row, P@k, nDCG@k,
// PSP@k against a fixed truth (label r mod L for point r, every label seen once in
// training). Bad files must end in xmc::InputError; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "eval/evaluate.h"
#include "io/io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  xmc::io::ReadOptions opt;
  opt.threads = 1;
  opt.use_cache = false;
  xmc::CsrMatrix pred;
  try {
    pred = xmc::io::parse_xc_sparse(text, "pred.txt", opt);
  } catch (const xmc::InputError&) {
    return 0;
  }
  // The truth and the frequencies are [L]-sized: keep them small (the header's L is only
  // bounded by the memory budget).
  if (pred.cols < 1 || pred.cols > (1 << 16)) return 0;
  xmc::CsrMatrix truth;
  truth.rows = pred.rows;
  truth.cols = pred.cols;
  truth.indptr.resize(static_cast<size_t>(pred.rows) + 1);
  for (int64_t r = 0; r < pred.rows; ++r) {
    truth.indptr[static_cast<size_t>(r) + 1] = r + 1;
    truth.indices.push_back(static_cast<uint32_t>(r % pred.cols));
  }
  const std::vector<int64_t> freq(static_cast<size_t>(pred.cols), 1);
  try {
    xmc::evaluate_predictions(pred, truth, freq, pred.cols, 0.55, 1.5, 5, nullptr);
  } catch (const xmc::InputError&) {
  }
  return 0;
}
