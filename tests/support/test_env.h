#pragma once
// Test helpers for the input checks: environment variables set for a scope (the memory
// budget's XMC_MEMORY_LIMIT), and a check that messages show no raw binary bytes.
// Implemented in test_support.cpp.
#include <string>

namespace xmc::test {

// Whether a message holds a raw byte that is not printable text (a control byte other
// than newline, DEL, or a byte >= 0x80): messages must show such bytes escaped.
bool has_raw_binary(const std::string& message);

// Sets an environment variable for its lifetime (the tests and the binaries they run
// see it), restoring the previous value, or its absence, on destruction.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, const std::string& value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  bool had_ = false;
  std::string old_;
};

}  // namespace xmc::test
