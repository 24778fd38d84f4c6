#pragma once
// A host array that grows to the largest batch seen and records its size in the ledger
// (activations and gradient workspaces, whose size follows the batch).
#include <cstddef>
#include <vector>

#include "core/memory_ledger.h"

namespace xmc {

template <class T>
class GrowBuffer {
 public:
  GrowBuffer(MemoryLedger& ledger, MemTag tag) : entry_(ledger, tag, 0) {}
  // At least n elements; contents are kept up to the old size.
  T* ensure(size_t n) {
    if (n > buf_.size()) {
      buf_.resize(n);
      entry_.resize(static_cast<int64_t>(buf_.size() * sizeof(T)));
    }
    return buf_.data();
  }
  T* data() { return buf_.data(); }
  const T* data() const { return buf_.data(); }
  size_t size() const { return buf_.size(); }

 private:
  std::vector<T> buf_;
  LedgerEntry entry_;
};

}  // namespace xmc
