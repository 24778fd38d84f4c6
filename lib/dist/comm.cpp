#include "dist/comm.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "core/resources.h"
#include "ops/loss.h"

#if defined(XMC_WITH_MPI)
#include <mpi.h>
#endif

namespace xmc {
namespace {

class SingleComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  void allreduce_sum(std::span<float>) override {}
  void allreduce_sum(std::span<double>) override {}
  void allreduce_max(std::span<float>) override {}
  void allreduce_max(std::span<double>) override {}
  void broadcast(std::span<std::byte>, int root) override {
    XMC_CHECK(root == 0, "broadcast from rank {} of 1", root);
  }
  std::vector<float> gather(std::span<const float> mine, int root) override {
    XMC_CHECK(root == 0, "gather to rank {} of 1", root);
    return {mine.begin(), mine.end()};
  }
  std::vector<uint32_t> gather(std::span<const uint32_t> mine, int root) override {
    XMC_CHECK(root == 0, "gather to rank {} of 1", root);
    return {mine.begin(), mine.end()};
  }
  void barrier() override {}
  void abort(int) override {}
};

#if defined(XMC_WITH_MPI)

// Times one collective into Comm::seconds_.
class Timed {
 public:
  explicit Timed(double& total) : total_(total) {}
  ~Timed() { total_ += sw_.seconds(); }

 private:
  double& total_;
  Stopwatch sw_;
};

int to_count(size_t n) {
  XMC_CHECK(n <= static_cast<size_t>(INT32_MAX), "MPI message of {} elements (> 2^31)", n);
  return static_cast<int>(n);
}

class MpiComm final : public Comm {
 public:
  MpiComm() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm node = MPI_COMM_NULL;  // the processes sharing this machine
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local_rank_);
    MPI_Comm_size(node, &local_size_);
    MPI_Comm_free(&node);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  void allreduce_sum(std::span<float> x) override { reduce(x.data(), x.size(), MPI_FLOAT, MPI_SUM); }
  void allreduce_sum(std::span<double> x) override {
    reduce(x.data(), x.size(), MPI_DOUBLE, MPI_SUM);
  }
  void allreduce_max(std::span<float> x) override { reduce(x.data(), x.size(), MPI_FLOAT, MPI_MAX); }
  void allreduce_max(std::span<double> x) override {
    reduce(x.data(), x.size(), MPI_DOUBLE, MPI_MAX);
  }
  void broadcast(std::span<std::byte> x, int root) override {
    Timed t(seconds_);
    MPI_Bcast(x.data(), to_count(x.size()), MPI_BYTE, root, MPI_COMM_WORLD);
  }
  std::vector<float> gather(std::span<const float> mine, int root) override {
    return gather_as(mine, root, MPI_FLOAT);
  }
  std::vector<uint32_t> gather(std::span<const uint32_t> mine, int root) override {
    return gather_as(mine, root, MPI_UINT32_T);
  }
  void barrier() override {
    Timed t(seconds_);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  void abort(int code) override { MPI_Abort(MPI_COMM_WORLD, code); }

 private:
  void reduce(void* x, size_t n, MPI_Datatype type, MPI_Op op) {
    Timed t(seconds_);
    MPI_Allreduce(MPI_IN_PLACE, x, to_count(n), type, op, MPI_COMM_WORLD);
  }
  template <class T>
  std::vector<T> gather_as(std::span<const T> mine, int root, MPI_Datatype type) {
    Timed t(seconds_);
    std::vector<T> all(rank_ == root ? mine.size() * static_cast<size_t>(size_) : 0);
    MPI_Gather(mine.data(), to_count(mine.size()), type, all.data(), to_count(mine.size()), type,
               root, MPI_COMM_WORLD);
    return all;
  }

  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
};

// Whether an MPI launcher started this process (Open MPI, PMIx, Hydra/Slurm PMI).
bool under_mpi_launcher() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

void finalize_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

#endif

}  // namespace

std::unique_ptr<Comm> single_process_comm() { return std::make_unique<SingleComm>(); }

std::unique_ptr<Comm> world_comm() {
#if defined(XMC_WITH_MPI)
  if (under_mpi_launcher()) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
      std::atexit(finalize_mpi);
    }
    return std::make_unique<MpiComm>();
  }
#endif
  return single_process_comm();
}

void run_in_job(const std::function<void(Comm*)>& f) {
  const std::unique_ptr<Comm> world = world_comm();
  if (!world->is_root()) spdlog::set_level(spdlog::level::warn);
  try {
    f(world->size() > 1 ? world.get() : nullptr);
  } catch (const std::exception& e) {
    if (world->size() > 1) {
      spdlog::error("rank {} of {}: {}", world->rank(), world->size(), e.what());
      world->abort(dynamic_cast<const InputError*>(&e) != nullptr ? 2 : 1);
    }
    throw;
  }
}

RowReductions row_reductions(Comm& comm) {
  return {[&comm](std::span<double> x) { comm.allreduce_max(x); },
          [&comm](std::span<double> x) { comm.allreduce_sum(x); }};
}

LabelRange shard_labels(int64_t num_labels, int rank, int size, int64_t align) {
  XMC_CHECK(num_labels >= 0 && size >= 1 && rank >= 0 && rank < size && align >= 1,
            "shard_labels: {} labels, rank {} of {}, align {}", num_labels, rank, size, align);
  const int64_t units = (num_labels + align - 1) / align;  // whole aligned blocks
  auto start = [&](int64_t r) {
    return std::min(num_labels, (units * r / size) * align);
  };
  return {start(rank), rank + 1 == size ? num_labels : start(rank + 1)};
}

TopK gather_topk(Comm& comm, const TopK& local) {
  const auto n = local.labels.size();
  std::vector<float> scores = comm.gather(std::span<const float>(local.scores), 0);
  std::vector<uint32_t> labels = comm.gather(std::span<const uint32_t>(local.labels), 0);
  if (!comm.is_root()) return {};
  TopK merged = local, part = local;  // part: rank r's lists in turn
  for (int r = 1; r < comm.size(); ++r) {
    std::copy_n(scores.begin() + static_cast<std::ptrdiff_t>(r * n), n, part.scores.begin());
    std::copy_n(labels.begin() + static_cast<std::ptrdiff_t>(r * n), n, part.labels.begin());
    merged = merge_topk(merged, part);
  }
  return merged;
}

}  // namespace xmc
