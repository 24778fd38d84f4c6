// The single-process communicator, label shards and the top-k merge across shards (the
// multi-process collectives: mpi_comm_check.cpp under mpirun).
#include <dlfcn.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "dist/comm.h"
#include "dist/nccl.h"
#include "support/test_support.h"
#include "train/checkpoint.h"

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
  const std::vector<float> s = {0.5f,  0.9f,  0.9f,  0.1f,  0.9f,  0.2f,  0.3f,  0.4f,
                                0.0f,  0.6f,  -1.0f, -2.0f, -3.0f, -4.0f, -5.0f, -6.0f,
                                -7.0f, -8.0f, -9.0f, 0.0f,  1.0f,  1.0f,  1.0f,  1.0f,
                                1.0f,  1.0f,  1.0f,  1.0f,  1.0f,  1.0f};
  auto topk_of = [&](int64_t lo, int64_t hi) {
    TopKAccumulator acc(3, k);
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t l = lo; l < hi; ++l)
        acc.add(r, static_cast<uint32_t>(l), s[static_cast<size_t>(r * 10 + l)]);
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

TEST_CASE(
    "a checkpoint's shard index: read back, and refused when its ranges do not tile the labels") {
  xmc::test::TempDir tmp;
  auto write = [&](const std::string& name, const ShardIndex* idx) {
    const std::string path = (tmp / name).string();
    CheckpointWriter w(path);
    w.write_i64("meta/step", {1});
    if (idx) write_shard_index(w, *idx);
    w.commit();
    return path;
  };
  // No index: one process over every label.
  const ShardIndex one = read_shard_index(CheckpointReader(write("one.h5", nullptr)), 10);
  CHECK(one.processes == 1);
  REQUIRE(one.ranges.size() == 1);
  CHECK((one.ranges[0].lo == 0 && one.ranges[0].hi == 10));
  ShardIndex good;
  good.processes = 2;
  good.step = 7;
  good.ranges = {{0, 4}, {4, 10}};
  const ShardIndex back = read_shard_index(CheckpointReader(write("good.h5", &good)), 10);
  CHECK(back.processes == 2);
  CHECK(back.step == 7);
  REQUIRE(back.ranges.size() == 2);
  CHECK((back.ranges[1].lo == 4 && back.ranges[1].hi == 10));
  // A gap, an overlap, an empty shard, a set short of the labels: InputError naming the
  // file and the shard.
  const std::vector<std::vector<LabelRange>> bad = {
      {{0, 4}, {5, 10}}, {{0, 5}, {4, 10}}, {{0, 0}, {0, 10}}, {{0, 4}, {4, 9}}};
  for (size_t b = 0; b < bad.size(); ++b) {
    ShardIndex idx = good;
    idx.ranges = bad[b];
    const std::string path = write("bad" + std::to_string(b) + ".h5", &idx);
    INFO("case " << b);
    try {
      read_shard_index(CheckpointReader(path), 10);
      FAIL("no error");
    } catch (const InputError& e) {
      CHECK(std::string(e.what()).find(path + ": malformed shard index: shard ") !=
            std::string::npos);
    }
  }
}

TEST_CASE("nccl: usable exactly when built with it and libnccl.so.2 loads with every entry point") {
  // The GPU ranks' NCCL path cannot run without two GPUs, but what decides whether it is
  // taken can be checked anywhere: the library is opened at run time and its five entry
  // points bound by name (a wrong name would make a present library "unusable").
  std::string why;
  const bool usable = nccl::available(&why);
  INFO("nccl::available: " << usable << " (" << why << ")");
  if (why.find("built without NCCL") != std::string::npos) {
    CHECK_FALSE(usable);
  } else if (void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL); lib == nullptr) {
    CHECK_FALSE(usable);
    CHECK_FALSE(why.empty());
  } else {
    CHECK(usable);
    CHECK(why.empty());
    dlclose(lib);
  }
}
