#pragma once
// Ledger-recorded optimizer state arrays, and the optional-array pointer (null where the
// optimizer keeps no state) every layer passes on.
#include <cstddef>
#include <cstdint>

#include "core/buffer.h"
#include "core/memory_ledger.h"
#include "ops/optimizer.h"

namespace xmc {

// An optional array (a Buffer, std::vector or HostBuffer) at offset o, or null where it is
// empty (e.g. optimizer state the optimizer does not keep).
template <class Buf>
auto* data_or_null(Buf& b, int64_t o = 0) {
  return b.size() ? b.data() + o : nullptr;
}

// State array `which` (1 or 2) of an optimizer over n parameters on the Context's device,
// zero, recorded under MemTag::optimizer; empty when the optimizer needs fewer arrays.
inline Buffer<float> optimizer_state_buffer(Context& ctx, const OptimizerConfig& optim, int which,
                                            size_t n) {
  if (optimizer_state_arrays(optim) < which) return {};
  return Buffer<float>(ctx, MemTag::optimizer, n);
}

}  // namespace xmc
