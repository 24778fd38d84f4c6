#pragma once
// Ledger-recorded optimizer state arrays.
#include <cstddef>

#include "core/buffer.h"
#include "core/memory_ledger.h"
#include "model/optimizer.h"

namespace xmc {

// State array `which` (1 or 2) of an optimizer over n parameters on the Context's device,
// zero, recorded under MemTag::optimizer; empty when the optimizer needs fewer arrays.
inline Buffer<float> optimizer_state_buffer(Context& ctx, const OptimizerConfig& optim, int which,
                                            size_t n) {
  if (optimizer_state_arrays(optim) < which) return {};
  return Buffer<float>(ctx, MemTag::optimizer, n);
}

}  // namespace xmc
