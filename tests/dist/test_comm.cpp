// The single-process communicator, label shards and the top-k merge across shards (the
// multi-process collectives: mpi_comm_check.cpp under mpirun).
#include <catch2/catch.hpp>

#include "dist/comm.h"

using namespace xmc;

TEST_CASE("one process: rank 0 of 1, collectives are the identity") {
  auto comm = world_comm();  // not started by mpirun: single process, with or without MPI
  CHECK(comm->rank() == 0);
  CHECK(comm->size() == 1);
  CHECK(comm->is_root());
  std::vector<float> x{1.0f, -2.0f};
  comm->allreduce_sum(std::span<float>(x));
  comm->allreduce_max(std::span<float>(x));
  CHECK(x == std::vector<float>{1.0f, -2.0f});
  const std::vector<uint32_t> ids{3, 4, 5};
  CHECK(comm->gather(std::span<const uint32_t>(ids), 0) == ids);
  CHECK_THROWS(comm->gather(std::span<const uint32_t>(ids), 1));
}

TEST_CASE("label shards are contiguous, cover every label once and are balanced") {
  for (int64_t labels : {0, 1, 7, 100, 1001}) {
    for (int size : {1, 2, 3, 8}) {
      for (int64_t align : {1, 16}) {
        INFO("labels " << labels << " size " << size << " align " << align);
        int64_t next = 0, smallest = labels, largest = 0;
        for (int r = 0; r < size; ++r) {
          const LabelRange s = shard_labels(labels, r, size, align);
          CHECK(s.lo == next);
          CHECK(s.hi >= s.lo);
          if (r + 1 < size) CHECK(s.hi % align == 0);
          next = s.hi;
          smallest = std::min(smallest, s.size());
          largest = std::max(largest, s.size());
        }
        CHECK(next == labels);
        CHECK(largest - smallest <= align);
      }
    }
  }
  CHECK_THROWS(shard_labels(10, 2, 2));
}

TEST_CASE("the top-k merged over shards equals the top-k over all labels") {
  // 3 rows, 10 labels, scores with ties; shards [0,4) [4,10) each keep their own top-3.
  const int k = 3;
  const std::vector<float> s = {0.5f, 0.9f, 0.9f, 0.1f, 0.9f, 0.2f, 0.3f, 0.4f, 0.0f, 0.6f,
                                -1.0f, -2.0f, -3.0f, -4.0f, -5.0f, -6.0f, -7.0f, -8.0f, -9.0f, 0.0f,
                                1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
  auto topk_of = [&](int64_t lo, int64_t hi) {
    TopKAccumulator acc(3, k);
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t l = lo; l < hi; ++l) acc.add(r, static_cast<uint32_t>(l), s[static_cast<size_t>(r * 10 + l)]);
    return acc.result();
  };
  const TopK all = topk_of(0, 10);
  auto comm = single_process_comm();
  const TopK merged = merge_topk(topk_of(0, 4), topk_of(4, 10));
  CHECK(merged.labels == all.labels);
  CHECK(merged.scores == all.scores);
  // One process: gather_topk returns its own list.
  const TopK mine = gather_topk(*comm, all);
  CHECK(mine.labels == all.labels);
  CHECK(mine.scores == all.scores);
}
