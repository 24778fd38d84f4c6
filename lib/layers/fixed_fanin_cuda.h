#pragma once
// FixedFaninCuda: the device half of FixedFaninLayer on a CUDA Context. It owns the
// parameters, optimizer state and workspaces in device memory (ledger, MemSpace::device)
// and runs train_step / scores / top-k with the GPU op families: the fixed fan-in kernels
// (kernels/sparse_ops_cuda.h), cuBLAS GEMMs, bias + ReLU and its gradient, the dropout
// mask product (kernels/encoder_ops_cuda.h), the fused loss and optimizer kernels
// (kernels/dense_ops_cuda.h) and the device top-k merge (core/gpu.h). Everything random
// (initialisation, dropout masks, rewiring) stays on the host in FixedFaninLayer, which
// moves arrays in and out through upload / download, so both devices use the same draws.
//
// Compiled in every build: without CUDA the gpu:: entry points are the throwing stubs of
// kernels/gpu_stubs.cpp, and nothing here is reached (a CUDA Context cannot be created).
#include <cstdint>
#include <memory>
#include <vector>

#include "core/cuda_context.h"
#include "core/matrix.h"
#include "data/batch.h"
#include "eval/topk.h"
#include "kernels/dense_ops_cuda.h"
#include "layers/fixed_fanin.h"
#include "layers/output_layer.h"
#include "model/loss.h"
#include "model/optimizer.h"

namespace xmc {

namespace gpu {
class CudaEvent;
}

// Host arrays in FixedFaninLayer's layout; nullptr = not transferred.
struct FixedFaninHostArrays {
  uint32_t* idx = nullptr;                           // [L×F]
  float* w = nullptr;                                // [L×F]
  float* w_s1 = nullptr;                             // [L×F] (optimizer state 1)
  float* w_s2 = nullptr;                             // [L×F]
  float* b = nullptr;                                // [L]
  float* b_s1 = nullptr;                             // [L]
  float* b_s2 = nullptr;                             // [L]
  float* p = nullptr;                                // [m×d + m] intermediate weight, bias
  float* p_s1 = nullptr;                             // [m×d + m]
  float* p_s2 = nullptr;                             // [m×d + m]
};

struct FixedFaninShape {
  int64_t d = 0;          // layer input width
  int64_t n = 0;          // labels L
  int64_t fan_in = 0;     // F
  int64_t m = 0;          // sparse-layer input width (intermediate size, or d)
  bool intermediate = false;
  int64_t max_batch = 0;
  int64_t chunk = 0;      // labels per block
  bool dropout = false;   // input dropout (masks come from the host)
};

class FixedFaninCuda {
 public:
  // Allocates every device buffer; optimizer state zeroed, parameters undefined until
  // upload().
  FixedFaninCuda(gpu::CudaContext& ctx, const FixedFaninShape& shape, LossType loss,
                 const OptimizerConfig& optim);
  ~FixedFaninCuda();
  FixedFaninCuda(const FixedFaninCuda&) = delete;
  FixedFaninCuda& operator=(const FixedFaninCuda&) = delete;

  // Copies the non-null arrays host -> device / device -> host. Synchronises.
  void upload(const FixedFaninHostArrays& a);
  void download(const FixedFaninHostArrays& a) const;

  // Page-locked [max_batch×d] host buffer the layer draws the step's dropout mask into
  // (dropout only). Free to rewrite when train_step has returned.
  float* mask_host() { return mask_host_.data(); }

  // FixedFaninLayer::train_step on the device: h, dh DEVICE views [B×d]; targets the
  // batch positives (host CSR, uploaded here); with dropout, mask_host() holds the mask.
  // Adds the zero-gradient, skipped-label and label-step counts to `tm` and, when
  // time_ops, the per-op times measured with CUDA events (no extra synchronisation: the
  // step synchronises once at the end to read the loss back).
  StepStats train_step(const CsrMatrix& targets, ConstMatrix h, Matrix dh, const LrState& lr,
                       FixedFaninTimings& tm, bool time_ops);
  // out [rows×c] = scores of labels [lo, lo+c); h, out DEVICE views. Synchronises.
  void scores(ConstMatrix h, int64_t lo, Matrix out);
  // Exact top-k (k <= gpu::kMaxTopK) of every row of h (DEVICE view), streamed over label chunks with
  // the device merge. Synchronises.
  TopK topk(ConstMatrix h, int k);

  // Bytes of the long-lived buffers (device and the pinned mask; the target array, which
  // grows with the batch's nnz, excluded).
  int64_t analytic_bytes() const;

 private:
  // ut [m×rows] of the sparse layer's input for rows of h (no dropout): relu(h·Pᵀ + c)
  // through the u_ workspace, or h itself. rows <= max_batch.
  ConstMatrix eval_input_t(ConstMatrix h);
  void upload_targets(const CsrMatrix& targets);
  void zero_rows(Matrix m);
  // Records a timing event that closes the interval since the previous mark and charges
  // it to `field` (time_ops only).
  void mark(double FixedFaninTimings::*field);

  gpu::CudaContext* ctx_;
  FixedFaninShape s_;
  LossType loss_;
  OptimizerConfig optim_;
  gpu::DeviceBuffer<uint32_t> idx_;                  // [L×F]
  gpu::DeviceBuffer<float> w_, b_;                   // [L×F], [L]
  gpu::DeviceBuffer<float> w_s1_, w_s2_, b_s1_, b_s2_;
  gpu::DeviceBuffer<float> p_, p_s1_, p_s2_, dp_;    // [m×d + m] (intermediate only)
  gpu::DeviceBuffer<float> xd_, mask_;               // [B×d] (dropout only)
  gpu::PinnedBuffer<float> mask_host_;               // [B×d] (dropout only)
  gpu::DeviceBuffer<float> u_, du_;                  // [B×m] (intermediate only)
  gpu::DeviceBuffer<float> ut_;                      // [m×B]
  gpu::DeviceBuffer<float> z_;                       // [B×chunk]
  gpu::DeviceBuffer<float> dw_, db_;                 // [chunk×F], [chunk]
  gpu::DeviceBuffer<gpu::LossAccum> acc_;            // [1]
  gpu::DeviceBuffer<unsigned long long> zero_labels_;  // [1]
  gpu::DeviceBuffer<int64_t> t_indptr_;              // [B+1]
  gpu::DeviceBuffer<uint32_t> t_indices_;            // grows with the batch's nnz
  // Timing (time_ops): events_[0] opens the step, events_[i] closes an interval charged
  // to fields_[i]; grown on demand, reused across steps.
  std::vector<std::unique_ptr<gpu::CudaEvent>> events_;
  std::vector<double FixedFaninTimings::*> fields_;
  size_t marks_ = 0;
  bool timing_ = false;
};

}  // namespace xmc
