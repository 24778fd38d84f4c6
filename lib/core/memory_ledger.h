#pragma once
// Memory ledger: tagged accounting of every long-lived buffer (host and device), with
// current and peak bytes per tag and in total. Thread-safe.
#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>

namespace xmc {

enum class MemTag : int { weights, indices, optimizer, activations, workspace, index, data };
inline constexpr int kNumMemTags = 7;
std::string_view to_string(MemTag tag);

enum class MemSpace : int { host, device };
inline constexpr int kNumMemSpaces = 2;

class MemoryLedger {
 public:
  void add(MemTag tag, MemSpace space, int64_t bytes);
  void sub(MemTag tag, MemSpace space, int64_t bytes);

  int64_t current(MemTag tag, MemSpace space = MemSpace::host) const;
  int64_t peak(MemTag tag, MemSpace space = MemSpace::host) const;
  // Sum over tags; the total's peak is the peak of the sum, not the sum of peaks.
  int64_t total_current(MemSpace space = MemSpace::host) const;
  int64_t total_peak(MemSpace space = MemSpace::host) const;
  // Forget peaks (keeps current values), e.g. to measure one phase.
  void reset_peaks();

  // {"host": {"weights": {"current": .., "peak": ..}, ..., "total": {...}}, "device": ...}
  // Tags with zero peak are left out.
  nlohmann::json report() const;

 private:
  mutable std::mutex mu_;
  // Per space, the bytes of each tag and, at index kNumMemTags, of all of them.
  std::array<std::array<int64_t, kNumMemTags + 1>, kNumMemSpaces> cur_{}, peak_{};
};

// RAII record of `bytes` under a tag for a buffer owned elsewhere (a std::vector, a
// library's index).
class LedgerEntry {
 public:
  LedgerEntry() = default;
  LedgerEntry(MemoryLedger& ledger, MemTag tag, int64_t bytes, MemSpace space = MemSpace::host);

 private:
  // Takes the bytes out of the ledger again when the entry goes (a move hands them on).
  struct Release {
    MemTag tag;
    MemSpace space;
    int64_t bytes;
    void operator()(MemoryLedger* ledger) const { ledger->sub(tag, space, bytes); }
  };
  std::unique_ptr<MemoryLedger, Release> ledger_;
};

// Owning, 64-byte aligned, zero-initialised host array of n T's, recorded in a ledger.
template <class T>
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(MemoryLedger& ledger, MemTag tag, size_t n)
      : data_(allocate(n)), size_(n), entry_(ledger, tag, static_cast<int64_t>(n * sizeof(T))) {}

  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  std::span<T> span() { return {data_.get(), size_}; }
  std::span<const T> span() const { return {data_.get(), size_}; }
  size_t bytes() const { return size_ * sizeof(T); }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  static T* allocate(size_t n) {
    if (n == 0) return nullptr;
    size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, bytes);
    return static_cast<T*>(p);
  }
  std::unique_ptr<T[], Free> data_;
  size_t size_ = 0;
  LedgerEntry entry_;
};

}  // namespace xmc
