#pragma once
// GroupSharedTailCuda: the sparse tail of the group_shared backend (layers/group_shared.h)
// on the GPU — the device twin of GroupSharedLayer's tail arrays and of its chunk loop.
// Tail labels r = 0..T-1 in internal (grouped) order, group k = r / G. Device buffers,
// all through the ledger: indices [K×F] uint32 (indices), weights [T×F] (weights; fp32,
// or bf16 ONLY — no fp32 master copy, as the dense backends' bf16 mode), biases [T]
// (weights, fp32), optimizer state [T×F] and [T] per state array (optimizer, fp32), and
// the workspaces: the transposed input ut [m×B] (fp32, or bf16 in bf16 mode), logits /
// gradients z [B×chunk], dw [chunk×F], db [chunk], the loss accumulator and the batch
// targets' row pointers.
//
// Per step, on the context's stream, chunk by chunk (as the CPU layer): z = forward (no
// bias), bias + loss gradient in one kernel (gpu::elementwise_loss_grad, same losses and
// exact-zero counts as the CPU), du += input gradient (weights before the update),
// dw/db = weight gradient, then gpu::optimizer_update of the chunk's weights (bf16: the
// bf16 overload, rounding to nearest or stochastically) and biases (no weight decay).
// bf16 mode: ut and w in bf16 for the wmma kernels (fp32 accumulation); g, biases and
// optimizer state stay fp32.
//
// Rare work (checkpoints, rewiring, semantic grouping) goes through host copies in the
// CPU layer's layout: download() / upload().
#include <cstdint>
#include <vector>

#include "core/cuda_context.h"
#include "core/matrix.h"
#include "layers/dense_block_cuda.h"  // DenseCudaOptions, WeightPrecision
#include "kernels/dense_ops_cuda.h"
#include "layers/output_layer.h"
#include "model/loss.h"
#include "model/optimizer.h"

namespace xmc {

class GroupSharedTailCuda {
 public:
  // tail T >= 1 labels in groups of `group`, fan-in F <= m, input width m, batches of at
  // most max_batch rows, chunk labels per block (a multiple of G). Biases and optimizer
  // state start at zero; indices and weights are the caller's (upload()). seed: the
  // stochastic-rounding stream (bf16 with opts.stochastic_rounding only).
  GroupSharedTailCuda(gpu::CudaContext& ctx, int64_t tail, int64_t group, int64_t fan_in, int64_t m,
                      int64_t max_batch, int64_t chunk, LossType loss, const OptimizerConfig& optim,
                      gpu::DenseCudaOptions opts, uint64_t seed);

  // Host copies in GroupSharedLayer's layout: idx [K×F], w [T×F] (fp32; bf16 weights
  // widened), b [T], w_s1/w_s2 [T×F] and b_s1/b_s2 [T] (empty when the optimizer has no
  // such state).
  struct HostState {
    std::vector<uint32_t> idx;
    std::vector<float> w, b, w_s1, w_s2, b_s1, b_s2;
  };
  // Every array (the biases and their state only when `bias`). Synchronises.
  HostState download(bool bias = true) const;
  // The reverse: each non-empty array must have download()'s size and replaces the
  // device copy (weights rounded to nearest-even bf16 in bf16 mode); empty arrays leave
  // the device copy as it is. Synchronises.
  void upload(const HostState& st);

  // The input of the next train_step / scores: ut = transpose of u [rows×m] (DEVICE view,
  // rows <= max_batch), rounded to bf16 in bf16 mode.
  void set_input(ConstMatrix u);
  // One step on the input of set_input: targets = the batch positives at internal
  // positions (host CSR [B×L], sorted rows), the tail's first position `lo` (= the head
  // size); du [B×m] (DEVICE) += dL/du. Loss summed over the tail's labels, averaged over
  // the batch. Synchronises once (to read the loss back).
  StepStats train_step(const CsrMatrix& targets, int64_t lo, Matrix du, const LrState& lr);
  // out [rows×n] (DEVICE, ld >= n) = scores (bias included) of tail labels [r0, r0+n) for
  // the input of set_input; r0 on a group boundary.
  void scores(int64_t r0, Matrix out);

  // Analytic size in bytes of the long-lived device buffers above (the batch's target
  // indices, which grow with its nnz, excluded — as DenseBlockCuda).
  int64_t analytic_bytes() const;
  int64_t chunk() const { return chunk_; }
  bool bf16() const { return opts_.precision == gpu::WeightPrecision::bf16; }

 private:
  void upload_targets(const CsrMatrix& targets);

  gpu::CudaContext* ctx_;
  int64_t t_, g_, f_, m_, groups_, max_batch_, chunk_;
  LossType loss_;
  OptimizerConfig optim_;
  gpu::DenseCudaOptions opts_;
  uint64_t seed_;
  int64_t rows_ = 0;                  // rows of the current input
  gpu::DeviceBuffer<uint32_t> idx_;   // [K×F]
  gpu::DeviceBuffer<float> w_;        // [T×F] (fp32 mode)
  gpu::DeviceBuffer<gpu::Bf16> w16_;  // [T×F] (bf16 mode)
  gpu::DeviceBuffer<float> b_;        // [T]
  gpu::DeviceBuffer<float> w_s1_, w_s2_, b_s1_, b_s2_;
  gpu::DeviceBuffer<float> ut_;            // [m×B] (fp32 mode)
  gpu::DeviceBuffer<gpu::Bf16> ut16_;      // [m×B] (bf16 mode)
  gpu::DeviceBuffer<float> z_;             // [B×chunk]
  gpu::DeviceBuffer<float> dw_, db_;       // [chunk×F], [chunk]
  gpu::DeviceBuffer<gpu::LossAccum> acc_;  // [1]
  gpu::DeviceBuffer<int64_t> t_indptr_;    // [B+1]
  gpu::DeviceBuffer<uint32_t> t_indices_;  // grows with the batch's nnz
};

}  // namespace xmc
