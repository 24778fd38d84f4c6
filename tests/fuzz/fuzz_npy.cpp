// libFuzzer target: the .npy reader (the std::istream entry point read_npy uses for files)
// on arbitrary bytes. Every malformed input must end in xmc::InputError; any other
// exception, a crash, a sanitizer report, a hang or an allocation past -malloc_limit_mb
// (a header whose shape asks for more than the file holds) is a finding.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "core/error.h"
#include "io/io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {
    xmc::io::read_npy(in, "fuzz.npy");
  } catch (const xmc::InputError&) {
  }
  return 0;
}
