#pragma once
// CandidateStaging: where the sampled ops (ops/sampled.h) read a step's candidate
// lists. Host code only (implementation in ops/sampled.cpp).
#include <cstdint>
#include <vector>

#include "core/buffer.h"
#include "core/context.h"
#include "ops/sampled.h"

namespace xmc::ops {

// A step's candidates (and their grouping by label) where the sampled ops read them: on a
// CPU Context the host arrays themselves; on a CUDA Context one packed device copy (one
// transfer per step; the buffer grows geometrically, in the ledger as workspace).
class CandidateStaging {
 public:
  CandidateStaging() = default;
  // Reserves room for rows / nnz entries / groups touched labels (CUDA; nothing on the CPU).
  CandidateStaging(Context& ctx, int64_t rows, int64_t nnz, int64_t groups);
  // Views of cand (and of *groups into *out_groups when groups is not null) on the
  // Context's device, valid until the next stage() (host arrays: while they live).
  CandidateCsr stage(const CandidateCsr& cand, const EntryGroupsBuffers* groups,
                     EntryGroups* out_groups);
  int64_t bytes() const { return static_cast<int64_t>(pack_.bytes()); }

 private:
  Context* ctx_ = nullptr;
  std::vector<int64_t> host_;  // CUDA: the packed arrays before their upload
  Buffer<int64_t> pack_;       // CUDA
};

}  // namespace xmc::ops
