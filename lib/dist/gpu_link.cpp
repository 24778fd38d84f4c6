// GPU ranks: the collectives of a label-sharded run on data in device memory (dist/comm.h
// allreduce_sum_in), and the GPU each process uses.
#include <algorithm>
#include <cstdlib>
#include <string>

#include <spdlog/spdlog.h>

#include "core/context.h"
#include "core/cuda_context.h"
#include "core/cuda_stream.h"
#include "core/error.h"
#include "core/gpu.h"
#include "core/resources.h"
#include "dist/comm.h"
#include "dist/nccl.h"

namespace xmc {

// What a rank's collectives on its GPU need: a NCCL communicator when every rank can use
// one, else a pinned host buffer (grown on demand, in the ledger) for the MPI path.
class GpuLink {
 public:
  GpuLink(Comm& comm, Context& ctx) : comm_(comm), ctx_(ctx) {
    std::string why;
    bool usable = nccl::available(&why);
    const char* env = std::getenv("XMC_NCCL");
    if (usable && env != nullptr && std::string(env) == "0") {
      usable = false;
      why = "XMC_NCCL=0";
    }
    // NCCL wants one GPU per rank: processes sharing a GPU use MPI.
    if (usable && comm.local_size() > static_cast<int>(gpu::query_devices().size())) {
      usable = false;
      why = "processes share a GPU on this node";
    }
    float refuse = usable ? 0.0f : 1.0f;  // NCCL only if every rank can
    comm.allreduce_max(std::span<float>(&refuse, 1));
    if (refuse == 0.0f) {
      nccl_ = nccl::create(comm);
      spdlog::info("GPU ranks: collectives on NCCL");
    } else {
      spdlog::info("GPU ranks: collectives through MPI from pinned host buffers{}",
                   why.empty() ? "" : " (NCCL: " + why + " on some rank)");
    }
  }
  ~GpuLink() {
    try {
      ctx_.synchronize();  // the last upload may still read host_
    } catch (const std::exception& e) {
      spdlog::warn("GPU ranks: {}", e.what());
    }
    nccl::destroy(nccl_);
  }
  GpuLink(const GpuLink&) = delete;
  GpuLink& operator=(const GpuLink&) = delete;

  const Context& context() const { return ctx_; }

  void allreduce_sum(std::span<float> x) {
    gpu::CudaContext& cuda = ctx_.cuda();
    if (nccl_ != nullptr) {
      // Queued on the stream, timed by two events read at the next reduction (the step in
      // between has waited for the stream): comm_seconds lags by the last one only.
      if (nccl_timed_) {
        nccl_stop_.synchronize();
        comm_.add_seconds(nccl_stop_.elapsed_ms_since(nccl_start_) / 1e3);
      }
      nccl_start_.record(cuda.stream());
      nccl::allreduce_sum(nccl_, x.data(), x.size(), cuda.stream());
      nccl_stop_.record(cuda.stream());
      nccl_timed_ = true;
      return;
    }
    Stopwatch sw;  // the copies (the collective times itself)
    if (host_.size() < x.size()) {
      cuda.synchronize();  // the previous upload may still read the old buffer
      host_ = gpu::PinnedBuffer<float>(ctx_.ledger(), MemTag::workspace,
                                       std::max(x.size(), 2 * host_.size()));
    }
    // The upload of the previous call is ordered before this download on the stream, and
    // the host writes host_ only after the synchronize: no other wait is needed.
    gpu::copy_to_host(host_.data(), x.data(), x.size_bytes(), cuda.stream());
    cuda.synchronize();
    const double download_s = sw.lap();
    comm_.allreduce_sum(std::span<float>(host_.data(), x.size()));
    sw.reset();
    gpu::copy_to_device(x.data(), host_.data(), x.size_bytes(), cuda.stream());
    comm_.add_seconds(download_s + sw.seconds());
  }

 private:
  Comm& comm_;
  Context& ctx_;
  nccl::Communicator* nccl_ = nullptr;
  gpu::CudaEvent nccl_start_{true}, nccl_stop_{true};  // timing of the last NCCL reduction
  bool nccl_timed_ = false;
  gpu::PinnedBuffer<float> host_;
};

Comm::Comm() = default;
Comm::~Comm() = default;

void Comm::allreduce_sum_in(const Context& ctx, std::span<float> x) {
  if (!ctx.on_gpu()) {
    allreduce_sum(x);
    return;
  }
  XMC_CHECK(gpu_ != nullptr && &gpu_->context() == &ctx,
            "a collective on GPU memory without attach_gpu on its Context");
  gpu_->allreduce_sum(x);
}

void Comm::attach_gpu(Context& ctx) {
  if (ctx.on_gpu()) gpu_ = std::make_unique<GpuLink>(*this, ctx);
}

void Comm::detach_gpu() { gpu_.reset(); }

int rank_gpu(const Comm* comm) {
  if (comm == nullptr) return 0;
  const auto gpus = static_cast<int>(gpu::query_devices().size());
  if (gpus == 0) return 0;  // the Context says that no GPU is visible
  if (comm->local_size() > gpus && comm->local_rank() == 0)
    spdlog::warn("{} processes on this node share its {} GPU{}", comm->local_size(), gpus,
                 gpus == 1 ? "" : "s");
  return comm->local_rank() % gpus;
}

}  // namespace xmc
