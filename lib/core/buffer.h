#pragma once
// Buffer<T>: an owning array of n T's on the Context's device — host memory (64-byte
// aligned) on a CPU Context, device memory on a CUDA Context — recorded in the Context's
// ledger under a tag (MemSpace host or device), zero on creation on both devices. Layers
// hold their parameters, optimizer state and workspaces in Buffers and pass data() to the
// ops, which take the Context and dispatch (ops/): the layer code is the same on both
// devices.
//
// Host access for rare work (checkpoints, rewiring, regrouping) and for the few arrays the
// host fills (dropout masks): stage() makes host_data() valid — the buffer itself on the
// CPU (no copy), a downloaded copy on the GPU —, commit() writes a staged copy back
// (GPU: upload) and drops it, release() drops it without writing. A CPU buffer is always
// "staged": host_data() is data().
#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "core/context.h"
#include "core/cuda_context.h"
#include "core/error.h"
#include "core/matrix.h"
#include "core/memory_ledger.h"
#include "core/tensor_ref.h"

namespace xmc {

template <class T>
class Buffer {
 public:
  Buffer() = default;
  // n = 0 gives an empty buffer (data() nullptr) on either device.
  Buffer(Context& ctx, MemTag tag, size_t n) {
    MemoryLedger& ledger = ctx.ledger();
    if (ctx.on_gpu()) {
      cuda_ = &ctx.cuda();
      dev_ = gpu::DeviceBuffer<T>(ledger, tag, n);
      if (n) dev_.zero(cuda_->stream());
    } else {
      host_ = HostBuffer<T>(ledger, tag, n);
    }
  }

  T* data() { return cuda_ ? dev_.data() : host_.data(); }
  const T* data() const { return cuda_ ? dev_.data() : host_.data(); }
  size_t size() const { return cuda_ ? dev_.size() : host_.size(); }
  bool empty() const { return size() == 0; }
  size_t bytes() const { return size() * sizeof(T); }

  // The first n elements = src[0..n), src in pageable host memory (never a PinnedBuffer):
  // src may be reused as soon as this returns. GPU: queued on the stream without waiting —
  // CUDA stages a pageable source before cudaMemcpyAsync returns.
  void copy_from_host(const T* src, size_t n) {
    XMC_CHECK(n <= size(), "buffer copy of {} elements into {}", n, size());
    if (n == 0) return;
    if (cuda_) {
      gpu::copy_to_device(dev_.data(), src, n * sizeof(T), cuda_->stream());
    } else {
      std::copy(src, src + n, host_.data());
    }
  }
  // dst[0..n) = the first n elements (host memory), complete on return.
  void copy_to_host(T* dst, size_t n) const {
    XMC_CHECK(n <= size(), "buffer copy of {} elements out of {}", n, size());
    if (n == 0) return;
    if (cuda_) {
      gpu::copy_to_host(dst, dev_.data(), n * sizeof(T), cuda_->stream());
      cuda_->synchronize();
    } else {
      std::copy(host_.data(), host_.data() + n, dst);
    }
  }

  // Host access (see the header comment). stage(n) / commit(n): only the first n
  // elements travel (the rest of a staged copy is unspecified).
  T* stage() { return stage(size()); }
  T* stage(size_t n) {
    if (cuda_ && !staged_) {
      copy_.resize(size());
      copy_to_host(copy_.data(), n);
      staged_ = true;
    }
    return host_data();
  }
  T* host_data() {
    if (!cuda_) return host_.data();
    XMC_CHECK(staged_ || size() == 0, "host access to a device buffer before stage()");
    return copy_.data();
  }
  void commit() { commit(size()); }
  void commit(size_t n) {
    if (!cuda_) return;
    XMC_CHECK(staged_ || size() == 0, "commit() of a device buffer that was not staged");
    copy_from_host(copy_.data(), std::min(n, copy_.size()));
    release();
  }
  void release() {
    if (!cuda_) return;
    std::vector<T>().swap(copy_);
    staged_ = false;
  }
  // A buffer whose host copy the host fills from scratch (no download first).
  T* stage_for_write() { return stage(0); }
  // OutputLayer::sync_state (core/tensor_ref.h): to_host stages, to_device commits,
  // release drops the copy.
  void sync(StateSync s) {
    switch (s) {
      case StateSync::to_host: stage(); return;
      case StateSync::to_device: commit(); return;
      case StateSync::release: release(); return;
    }
  }

 private:
  gpu::CudaContext* cuda_ = nullptr;  // set on a CUDA Context
  HostBuffer<T> host_;
  gpu::DeviceBuffer<T> dev_;
  std::vector<T> copy_;  // GPU: the staged host copy
  bool staged_ = false;
};

// b holds at least max(n, 1) elements: a new zeroed Buffer of twice that when it is
// smaller (contents not kept; on the GPU freeing the old one waits for the work that may
// still read it).
template <class T>
T* ensure_size(Buffer<T>& b, Context& ctx, MemTag tag, int64_t n) {
  const auto want = static_cast<size_t>(std::max<int64_t>(n, 1));
  if (b.size() < want) b = Buffer<T>(ctx, tag, std::max(want, 2 * b.size()));
  return b.data();
}

// A host view of a matrix on the Context's device: the matrix itself on the CPU (no copy),
// a copy downloaded on construction (complete) on the GPU. A view without data (a shape
// only) stays one on both devices.
class HostView {
 public:
  HostView(const Context& ctx, ConstMatrix m) : view_(m) {
    if (!ctx.on_gpu() || m.data == nullptr) return;
    copy_.resize(static_cast<size_t>(m.rows * m.cols));
    for (int64_t r = 0; r < m.rows; ++r)
      gpu::copy_to_host(copy_.data() + r * m.cols, m.row(r),
                        static_cast<size_t>(m.cols) * sizeof(float), ctx.cuda().stream());
    ctx.synchronize();
    view_ = ConstMatrix(copy_.data(), m.rows, m.cols);
  }
  ConstMatrix view() const { return view_; }

 private:
  std::vector<float> copy_;
  ConstMatrix view_;
};

}  // namespace xmc
