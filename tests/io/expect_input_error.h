#pragma once
// Runs f, requires it to throw xmc::InputError (not another exception), returns the message.
#include <catch2/catch.hpp>
#include <string>

#include "core/error.h"

namespace xmc::test {

template <class F>
std::string input_error_message(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  FAIL("expected xmc::InputError, nothing was thrown");
  return {};
}

}  // namespace xmc::test
