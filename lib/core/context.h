#pragma once
// Context: where work runs (device, thread count) and the memory ledger through which
// every long-lived buffer is recorded.
#include "core/memory_ledger.h"

#include <string>
#include <string_view>

namespace xmc {

enum class Device { cpu, cuda };
std::string_view to_string(Device d);

// "cpu" | "cuda" | "auto" -> Device. auto = cuda when built with CUDA and a GPU is
// visible, else cpu. "cuda" without a GPU or without CUDA support throws InputError.
Device resolve_device(std::string_view requested);

class Context {
 public:
  // threads <= 0: all hardware threads (OpenMP default).
  explicit Context(Device device = Device::cpu, int threads = 0);

  Device device() const { return device_; }
  int threads() const { return threads_; }
  MemoryLedger& ledger() { return ledger_; }
  const MemoryLedger& ledger() const { return ledger_; }

 private:
  Device device_;
  int threads_;
  MemoryLedger ledger_;
};

}  // namespace xmc
