#pragma once
// DenseBlockCuda: the GPU twin of layers/dense_block.h — W [n×d] + bias [n] over labels
// [lo, lo+n), trained in label chunks so that neither a B×n logit matrix nor a full dW
// ever exists. Per chunk c on the context's stream: Z = h·W_cᵀ (cuBLAS), bias + loss
// gradient in one kernel, dh (+)= G·W_c, dW_c = Gᵀ·h, db_c = column sums of G, then the
// fused optimizer update of W_c and b_c. Same initial weights as DenseBlock for the same
// seed (drawn on the host per label row, then uploaded), so the two can be compared.
//
// Weights fp32, or bf16 (stored only in bf16: half the memory; GEMMs in bf16 with fp32
// accumulation, h and G rounded to bf16 for them; optimizer state and bias fp32; the
// update rounds to nearest or stochastically). Device buffers go through the ledger
// (MemSpace::device): weights, optimizer, workspace.
#include <cstdint>
#include <vector>

#include "core/cuda_context.h"
#include "core/matrix.h"
#include "eval/topk.h"
#include "kernels/dense_ops_cuda.h"
#include "layers/output_layer.h"
#include "model/loss.h"
#include "model/optimizer.h"

namespace xmc::gpu {

enum class WeightPrecision { fp32, bf16 };

struct DenseCudaOptions {
  WeightPrecision precision = WeightPrecision::fp32;
  bool stochastic_rounding = false;  // bf16 weights only
};

class DenseBlockCuda {
 public:
  // Same arguments as DenseBlock, plus the CUDA context and the precision.
  DenseBlockCuda(CudaContext& ctx, int64_t d, int64_t lo, int64_t n, int64_t max_batch,
                 int64_t chunk, LossType loss, const OptimizerConfig& optim, uint64_t seed,
                 DenseCudaOptions opts = {});

  // h [B×d], dh [B×d]: DEVICE views. targets: the batch positives (host CSR, global ids,
  // sorted rows), uploaded here. Overwrites dh with dL/dh. Synchronises once at the end
  // (to read the loss back).
  StepStats train_step(const CsrMatrix& targets, ConstMatrix h, Matrix dh, const LrState& lr);
  // The same with HOST views h, dh (copies through device workspaces; tests, benchmarks).
  StepStats train_step_host(const CsrMatrix& targets, ConstMatrix h, Matrix dh, const LrState& lr);

  // out [B×c] = scores of labels [lo, lo+c) (global lo within this block's range);
  // h and out are DEVICE views. Not const: the bf16 path rounds h into a workspace.
  void scores(ConstMatrix h, int64_t lo, Matrix out);
  // Exact top-k (k <= gpu::kMaxTopK) over the block's labels of every row of h [rows×d] (DEVICE
  // view, any number of rows), streamed over label chunks with a running merge on the
  // device. Labels are global ids; pads as in eval/topk.h (kNoLabel, -inf).
  TopK topk(ConstMatrix h, int k);

  // Copies of the parameters and optimizer state to the host, as fp32, in DenseBlock's
  // layout: weight [n×d], bias [n], weight_opt1/2 [n×d], bias_opt1/2 [n] (empty when the
  // optimizer has no such state). Synchronises.
  struct HostState {
    std::vector<float> weight, bias, weight_opt1, weight_opt2, bias_opt1, bias_opt2;
  };
  HostState download() const;
  // The reverse of download(): every array of `st` must have download()'s size (weights
  // rounded to bf16 in bf16 mode). Synchronises.
  void upload(const HostState& st);

  // Analytic size in bytes of the long-lived device buffers (weights, optimizer state,
  // workspaces; the per-batch target arrays, which grow with the batch's nnz, excluded).
  int64_t analytic_bytes() const;
  int64_t chunk() const { return chunk_; }
  int64_t dim() const { return d_; }
  int64_t labels() const { return n_; }
  WeightPrecision precision() const { return opts_.precision; }

 private:
  bool bf16() const { return opts_.precision == WeightPrecision::bf16; }
  void upload_targets(const CsrMatrix& targets);
  // Z [B×c] = h·W_cᵀ (no bias) for labels [row0, row0+c) of the block; in bf16 mode h16
  // must already hold h rounded.
  void logits(ConstMatrix h, int64_t row0, Matrix z);
  void round_h(ConstMatrix h);

  CudaContext* ctx_;
  int64_t d_, lo_, n_, max_batch_, chunk_;
  LossType loss_;
  OptimizerConfig optim_;
  DenseCudaOptions opts_;
  uint64_t seed_;
  DeviceBuffer<float> w_;   // [n×d] (fp32 mode)
  DeviceBuffer<Bf16> w16_;  // [n×d] (bf16 mode)
  DeviceBuffer<float> b_;   // [n]
  DeviceBuffer<float> w_s1_, w_s2_, b_s1_, b_s2_;
  DeviceBuffer<float> z_;                       // [max_batch×chunk] logits / gradients
  DeviceBuffer<Bf16> g16_;                      // [max_batch×chunk] bf16 copy of G (bf16 mode)
  DeviceBuffer<Bf16> h16_;                      // [max_batch×d] bf16 copy of h (bf16 mode)
  DeviceBuffer<float> dw_, db_;                 // [chunk×d], [chunk]
  DeviceBuffer<float> smax_max_, smax_sum_;     // [max_batch] softmax running stats
  DeviceBuffer<LossAccum> acc_;                 // [1]
  DeviceBuffer<int64_t> t_indptr_;              // [max_batch+1]
  DeviceBuffer<uint32_t> t_indices_;            // [capacity], grows with the batch's nnz
  DeviceBuffer<float> h_host_io_, dh_host_io_;  // [max_batch×d], train_step_host only
};

}  // namespace xmc::gpu
