// libFuzzer target: the XC text parser (combined "N D L" and sparse "N C" files) on
// arbitrary bytes. Every malformed input must end in xmc::InputError; any other exception,
// a crash, a sanitizer report, a hang or an allocation past -malloc_limit_mb is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "io/io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  xmc::io::ReadOptions opt;
  opt.threads = 1;
  opt.use_cache = false;
  // The first byte picks the index base, so both are explored from one corpus.
  opt.index_base = size > 0 && (data[0] & 1) ? 1 : 0;
  try {
    xmc::io::parse_xc_combined(text, "fuzz.txt", opt);
  } catch (const xmc::InputError&) {
  }
  try {
    xmc::io::parse_xc_sparse(text, "fuzz.txt", opt);
  } catch (const xmc::InputError&) {
  }
  return 0;
}
