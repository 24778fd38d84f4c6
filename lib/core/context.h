#pragma once
// Context: where work runs (device, thread count) and the memory ledger through which
// every long-lived buffer is recorded.
#include "core/memory_ledger.h"

#include <memory>
#include <string>
#include <string_view>

namespace xmc {
namespace gpu {
class CudaContext;
}

enum class Device { cpu, cuda };
std::string_view to_string(Device d);

// "cpu" | "cuda" | "auto" -> Device. auto = cuda when built with CUDA and a GPU is
// visible, else cpu. "cuda" without a GPU or without CUDA support throws InputError.
Device resolve_device(std::string_view requested);

class Context {
 public:
  // threads <= 0: all hardware threads (OpenMP default). Device::cuda creates the GPU
  // context on GPU `gpu` (stream, cuBLAS handles; its workspace recorded in this ledger);
  // a label-sharded run gives each process of a node its own (dist/comm.h rank_gpu).
  explicit Context(Device device = Device::cpu, int threads = 0, int gpu = 0);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  Device device() const { return device_; }
  bool on_gpu() const { return device_ == Device::cuda; }
  // The GPU context of a CUDA Context; xmc::Error on a CPU one.
  gpu::CudaContext& cuda() const;
  // Waits for the work queued on the device (CUDA: the stream); nothing on the CPU.
  void synchronize() const;
  int threads() const { return threads_; }
  MemoryLedger& ledger() { return ledger_; }
  const MemoryLedger& ledger() const { return ledger_; }

 private:
  Device device_;
  int threads_;
  MemoryLedger ledger_;
  std::unique_ptr<gpu::CudaContext> cuda_;  // after ledger_: released before it
};

}  // namespace xmc
