#pragma once
// ThreadComm: the ranks of a label-sharded job emulated by threads of one test process,
// for tests that must run where mpirun cannot (the GPU kit). Rank r's Comm is
// ThreadComm(shared, r); every collective meets at a barrier, and sums are taken in rank
// order (double), as deterministic as MPI's. All ranks are on one "node".
#include <algorithm>
#include <barrier>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "dist/comm.h"

namespace xmc::testing {

class ThreadComm final : public Comm {
 public:
  struct Shared {
    explicit Shared(int n) : ranks(n), meet(n), slots(static_cast<size_t>(n)) {}
    int ranks;
    std::barrier<> meet;
    std::vector<std::vector<double>> slots;
    std::vector<std::byte> bytes;
  };
  ThreadComm(Shared& s, int rank) : s_(s), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return s_.ranks; }
  int local_rank() const override { return rank_; }
  int local_size() const override { return s_.ranks; }
  void allreduce_sum(std::span<float> x) override { reduce(x, false); }
  void allreduce_sum(std::span<double> x) override { reduce(x, false); }
  void allreduce_max(std::span<float> x) override { reduce(x, true); }
  void allreduce_max(std::span<double> x) override { reduce(x, true); }
  void broadcast(std::span<std::byte> x, int root) override {
    if (rank_ == root) s_.bytes.assign(x.begin(), x.end());
    s_.meet.arrive_and_wait();
    if (rank_ != root) std::memcpy(x.data(), s_.bytes.data(), x.size());
    s_.meet.arrive_and_wait();
  }
  std::vector<float> gather(std::span<const float> mine, int root) override {
    return gather_as(mine, root);
  }
  std::vector<uint32_t> gather(std::span<const uint32_t> mine, int root) override {
    return gather_as(mine, root);
  }
  void barrier() override { s_.meet.arrive_and_wait(); }
  void abort(int) override { throw std::runtime_error("ThreadComm::abort"); }

 private:
  template <class T>
  void reduce(std::span<T> x, bool max) {
    s_.slots[static_cast<size_t>(rank_)].assign(x.begin(), x.end());
    s_.meet.arrive_and_wait();
    for (size_t i = 0; i < x.size(); ++i) {
      double v = s_.slots[0][i];
      for (int r = 1; r < s_.ranks; ++r) {
        const double o = s_.slots[static_cast<size_t>(r)][i];
        v = max ? std::max(v, o) : v + o;
      }
      x[i] = static_cast<T>(v);
    }
    s_.meet.arrive_and_wait();
  }
  template <class T>
  std::vector<T> gather_as(std::span<const T> mine, int root) {
    s_.slots[static_cast<size_t>(rank_)].assign(mine.begin(), mine.end());
    s_.meet.arrive_and_wait();
    std::vector<T> all;
    if (rank_ == root)
      for (const auto& slot : s_.slots)
        for (double v : slot) all.push_back(static_cast<T>(v));
    s_.meet.arrive_and_wait();
    return all;
  }

  Shared& s_;
  int rank_;
};

}  // namespace xmc::testing
