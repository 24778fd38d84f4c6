#pragma once
// .npy reader from a stream, so tests can feed bytes directly.
#include <istream>
#include <string>

#include "core/matrix.h"

namespace xmc::io {

// `name` is used in messages.
DenseMatrix read_npy(std::istream& in, const std::string& name);

}  // namespace xmc::io
