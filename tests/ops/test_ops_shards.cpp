// Label shards on each device: what the processes of a label-sharded run do, with the ranks
// emulated by threads (support/thread_comm.h), so that the GPU kit checks GPU ranks
// without mpirun: the collectives on device memory (Comm::allreduce_sum_in: through pinned
// host buffers when the ranks share a GPU, as on the one-GPU machines; on NCCL where each
// rank has its own GPU and libnccl is there) and the sharded softmax of a DenseBlock
// (SoftmaxState::merge) against one unsharded block on the same device.
#include <catch2/catch.hpp>
#include <cmath>
#include <thread>
#include <vector>

#include "core/buffer.h"
#include "core/context.h"
#include "core/rng.h"
#include "dist/comm.h"
#include "layers/dense_block.h"
#include "support/device_test.h"
#include "support/thread_comm.h"

using namespace xmc;
using namespace xmc::test;

namespace {

// f(rank) on `ranks` threads, each with its ThreadComm; the first exception is rethrown.
template <class F>
void on_ranks(int ranks, F f) {
  testing::ThreadComm::Shared shared(ranks);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      testing::ThreadComm comm(shared, r);
      try {
        f(comm);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace

DEVICE_TEST("label shards: allreduce_sum_in sums a buffer in each rank's device memory",
            "[shards]") {
  const Device dev = ctx.device();
  constexpr size_t kN = 1000;
  std::vector<std::vector<float>> got(3);
  on_ranks(3, [&](Comm& comm) {
    Context rank_ctx(dev, 1, dev == Device::cuda ? rank_gpu(&comm) : 0);
    const GpuAttachment attached(&comm, rank_ctx);
    std::vector<float> mine(kN);
    for (size_t i = 0; i < kN; ++i) mine[i] = static_cast<float>(i) * (comm.rank() + 1);
    Buffer<float> b = put(rank_ctx, mine);
    for (int round = 0; round < 2; ++round)  // the second reuses the staging buffer
      comm.allreduce_sum_in(rank_ctx, std::span<float>(b.data(), kN));
    got[static_cast<size_t>(comm.rank())] = get(b, kN);
  });
  for (const auto& g : got)
    for (size_t i = 0; i < kN; ++i) {
      // Round 1: i·(1+2+3) = 6i on every rank; round 2 sums three of those: 18i.
      REQUIRE(g[i] == static_cast<float>(18 * i));
    }
}

DEVICE_TEST("label shards: a softmax DenseBlock split over two ranks equals one block",
            "[shards]") {
  constexpr int64_t kD = 24, kL = 70, kB = 9, kChunk = 16;
  constexpr int kSteps = 3;
  OptimizerConfig optim;
  optim.type = OptimizerType::adam;
  Rng rng(5);
  std::vector<std::vector<float>> hs;
  std::vector<CsrMatrix> targets;
  for (int s = 0; s < kSteps; ++s) {
    hs.push_back(random_floats(rng, static_cast<size_t>(kB * kD)));
    CsrMatrix t;  // 1-3 positives per row, one row without any
    t.rows = kB;
    t.cols = kL;
    for (int64_t r = 0; r < kB; ++r) {
      if (r != 4)
        for (int64_t j = 0; j <= r % 3; ++j)
          t.indices.push_back(static_cast<uint32_t>((r * 13 + j * 29 + s * 7) % kL));
      std::sort(t.indices.begin() + t.indptr.back(), t.indices.end());
      t.indptr.push_back(static_cast<int64_t>(t.indices.size()));
    }
    targets.push_back(std::move(t));
  }
  const int64_t half = 33;  // uneven shards: [0, 33) and [33, 70)
  const Device dev = ctx.device();

  // One block over all labels.
  std::vector<double> loss_one;
  std::vector<std::vector<float>> dh_one;
  std::vector<float> scores_one;
  {
    Context one(dev, 1);
    DenseBlock block(one, kD, 0, kL, kB, kChunk, LossType::softmax, optim, 11);
    Buffer<float> dh(one, MemTag::workspace, static_cast<size_t>(kB * kD));
    for (int s = 0; s < kSteps; ++s) {
      Buffer<float> h = put(one, hs[static_cast<size_t>(s)]);
      loss_one.push_back(block
                             .train_step(targets[static_cast<size_t>(s)],
                                         ConstMatrix(h.data(), kB, kD), Matrix(dh.data(), kB, kD),
                                         {0.05, s + 1})
                             .loss);
      dh_one.push_back(get(dh, static_cast<size_t>(kB * kD)));
    }
    Buffer<float> h = put(one, hs[0]);
    Buffer<float> out(one, MemTag::workspace, static_cast<size_t>(kB * kL));
    block.scores(ConstMatrix(h.data(), kB, kD), 0, Matrix(out.data(), kB, kL));
    scores_one = get(out, static_cast<size_t>(kB * kL));
  }
  // Two ranks, each a block over its labels; dh and the loss summed over the ranks.
  std::vector<double> loss_two(kSteps);
  std::vector<std::vector<float>> dh_two(kSteps);
  std::vector<float> scores_two(static_cast<size_t>(kB * kL));
  on_ranks(2, [&](Comm& comm) {
    Context rank_ctx(dev, 1, dev == Device::cuda ? rank_gpu(&comm) : 0);
    const GpuAttachment attached(&comm, rank_ctx);
    const int64_t lo = comm.rank() == 0 ? 0 : half, n = comm.rank() == 0 ? half : kL - half;
    DenseBlock block(rank_ctx, kD, lo, n, kB, kChunk, LossType::softmax, optim, 11);
    block.set_comm(&comm);
    Buffer<float> dh(rank_ctx, MemTag::workspace, static_cast<size_t>(kB * kD));
    for (int s = 0; s < kSteps; ++s) {
      Buffer<float> h = put(rank_ctx, hs[static_cast<size_t>(s)]);
      double loss = block
                        .train_step(targets[static_cast<size_t>(s)], ConstMatrix(h.data(), kB, kD),
                                    Matrix(dh.data(), kB, kD), {0.05, s + 1})
                        .loss;
      comm.allreduce_sum_in(rank_ctx, std::span<float>(dh.data(), static_cast<size_t>(kB * kD)));
      comm.allreduce_sum(std::span<double>(&loss, 1));
      if (comm.rank() == 0) {
        loss_two[static_cast<size_t>(s)] = loss;
        dh_two[static_cast<size_t>(s)] = get(dh, static_cast<size_t>(kB * kD));
      }
    }
    Buffer<float> h = put(rank_ctx, hs[0]);
    Buffer<float> out(rank_ctx, MemTag::workspace, static_cast<size_t>(kB * n));
    block.scores(ConstMatrix(h.data(), kB, kD), lo, Matrix(out.data(), kB, n));
    const std::vector<float> part = get(out, static_cast<size_t>(kB * n));
    for (int64_t r = 0; r < kB; ++r)  // disjoint columns: no race
      std::copy(part.begin() + r * n, part.begin() + (r + 1) * n, scores_two.begin() + r * kL + lo);
  });
  for (int s = 0; s < kSteps; ++s) {
    INFO("step " << s + 1);
    CHECK(loss_two[static_cast<size_t>(s)] ==
          Approx(loss_one[static_cast<size_t>(s)]).epsilon(1e-5));
    expect_close("dh", dh_two[static_cast<size_t>(s)], dh_one[static_cast<size_t>(s)], 1e-6, 1e-4);
  }
  // After three updates the weights (the scores) are those of the one block.
  expect_close("scores", scores_two, scores_one, 1e-5, 1e-4);
}
