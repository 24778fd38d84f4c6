#pragma once
// The processes of one run (label-sharded training, docs/distributed.md): rank r of N.
// Without MPI, or without mpirun, one process: rank 0 of 1 and every collective the
// identity. Built with MPI (XMC_WITH_MPI) and started by mpirun: MPI_COMM_WORLD.
// Collectives are blocking; every rank calls them in the same order with the same sizes.
// A rank that dies ends the job: mpirun stops the others (MPI's default error handler),
// so no rank waits forever on a dead peer.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "ops/topk.h"

namespace xmc {

class Context;
class GpuLink;
struct RowReductions;  // ops/loss.h

class Comm {
 public:
  Comm();
  virtual ~Comm();
  virtual int rank() const = 0;
  virtual int size() const = 0;
  bool is_root() const { return rank() == 0; }
  // This process among those of its node (machine): rank and count.
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;

  // In place: every rank ends with the element-wise sum (max) over the ranks.
  virtual void allreduce_sum(std::span<float> x) = 0;
  virtual void allreduce_sum(std::span<double> x) = 0;
  virtual void allreduce_max(std::span<float> x) = 0;
  virtual void allreduce_max(std::span<double> x) = 0;
  // Rank `root`'s bytes to every rank.
  virtual void broadcast(std::span<std::byte> x, int root) = 0;
  // Every rank's `mine` (the same size on every rank), concatenated in rank order, on
  // `root`; an empty vector on the other ranks.
  virtual std::vector<float> gather(std::span<const float> mine, int root) = 0;
  virtual std::vector<uint32_t> gather(std::span<const uint32_t> mine, int root) = 0;
  virtual void barrier() = 0;
  // Ends every process of the job with `code` (MPI_Abort): after an error on one rank, so
  // that the others do not wait in a collective. One process: returns (the caller exits).
  virtual void abort(int code) = 0;

  // Wall seconds spent inside the collectives so far (results.json reports it per rank).
  double comm_seconds() const { return seconds_; }
  void add_seconds(double s) { seconds_ += s; }

  // GPU ranks (docs/distributed.md): allreduce_sum_in sums x in place over the ranks, x in
  // ctx's memory — host memory on a CPU Context (allreduce_sum), device memory on a CUDA
  // one, which needs attach_gpu(ctx) first: NCCL on ctx's stream when every rank can use
  // it, else MPI through a pinned host buffer (download, allreduce, upload). attach_gpu is
  // collective; detach_gpu releases what it made (before ctx goes).
  void allreduce_sum_in(const Context& ctx, std::span<float> x);
  void attach_gpu(Context& ctx);
  void detach_gpu();

 protected:
  double seconds_ = 0.0;

 private:
  std::unique_ptr<GpuLink> gpu_;
};

// One process: rank 0 of 1.
std::unique_ptr<Comm> single_process_comm();
// MPI_COMM_WORLD when built with MPI and started by an MPI launcher (its environment
// names a world size), initialising MPI once (finalised at exit); else single_process_comm().
std::unique_ptr<Comm> world_comm();
// f(comm) as this process of its job (train, eval, predict; comm is nullptr in one
// process): world_comm(), the ranks other than 0 logging warnings and errors only, and,
// when there are several processes, an exception logged with the rank and ending every
// process of the job (exit 2 for an InputError, else 1) before it propagates, since the
// others may wait in a collective.
void run_in_job(const std::function<void(Comm*)>& f);

// attach_gpu for a scope (declared after the Context, it is released before it); nothing
// in one process (comm nullptr) or on a CPU Context.
class GpuAttachment {
 public:
  GpuAttachment(Comm* comm, Context& ctx) : comm_(comm) {
    if (comm_ != nullptr) comm_->attach_gpu(ctx);
  }
  ~GpuAttachment() {
    if (comm_ != nullptr) comm_->detach_gpu();
  }
  GpuAttachment(const GpuAttachment&) = delete;
  GpuAttachment& operator=(const GpuAttachment&) = delete;

 private:
  Comm* comm_;
};

// comm's allreduce_max / allreduce_sum (doubles) as the reductions ops/loss.h takes
// (label-sharded softmax normalisers); comm must outlive them.
RowReductions row_reductions(Comm& comm);

// The GPU this process uses: 0 in one process, else its rank on the node modulo the GPUs
// visible there (one GPU per process when the node has enough; a warning when processes
// share one).
int rank_gpu(const Comm* comm);

// The labels rank `rank` of `size` owns: a contiguous range [lo, hi), the ranges in rank
// order covering [0, num_labels), sizes differing by at most `align` (boundaries on
// multiples of `align`, e.g. whole label groups, except the last).
struct LabelRange {
  int64_t lo = 0;
  int64_t hi = 0;
  int64_t size() const { return hi - lo; }
};
LabelRange shard_labels(int64_t num_labels, int rank, int size, int64_t align = 1);

// Every rank's top-k over its own labels (global ids, the same rows and k everywhere),
// merged on the root into the top-k over all labels (ranking of ops/topk.h, so the
// result equals one process's top-k over the union); an empty TopK on the other ranks.
TopK gather_topk(Comm& comm, const TopK& local);

}  // namespace xmc
