// The MPI collectives under mpirun (CTest runs it with -np 2): each rank checks what it
// got against what every rank contributed. Exit 0 when every check held on this rank.
#include <cstdio>
#include <vector>

#include "dist/comm.h"

using namespace xmc;

namespace {
int failures = 0;
void check(bool ok, const char* what, int rank) {
  if (!ok) {
    std::fprintf(stderr, "rank %d: FAILED %s\n", rank, what);
    ++failures;
  }
}
}  // namespace

int main() {
  auto comm = world_comm();
  const int r = comm->rank(), n = comm->size();
  check(n == 2, "started with 2 ranks", r);
  std::vector<float> x{static_cast<float>(r + 1), static_cast<float>(-r)};
  comm->allreduce_sum(std::span<float>(x));
  check(x[0] == 3.0f && x[1] == -1.0f, "allreduce_sum float", r);
  std::vector<double> d{0.5 * r};
  comm->allreduce_sum(std::span<double>(d));
  check(d[0] == 0.5, "allreduce_sum double", r);
  std::vector<float> m{static_cast<float>(r), static_cast<float>(-r)};
  comm->allreduce_max(std::span<float>(m));
  check(m[0] == 1.0f && m[1] == 0.0f, "allreduce_max", r);
  std::vector<double> md{0.25 * r, -0.25 * r - 1e300};
  comm->allreduce_max(std::span<double>(md));
  check(md[0] == 0.25 && md[1] == -1e300, "allreduce_max double", r);
  std::vector<std::byte> b(3, std::byte{static_cast<unsigned char>(r == 1 ? 7 : 0)});
  comm->broadcast(std::span<std::byte>(b), 1);
  check(b[2] == std::byte{7}, "broadcast from rank 1", r);
  const std::vector<uint32_t> mine{static_cast<uint32_t>(10 * r), static_cast<uint32_t>(10 * r + 1)};
  const std::vector<uint32_t> all = comm->gather(std::span<const uint32_t>(mine), 0);
  check(r == 0 ? all == std::vector<uint32_t>{0, 1, 10, 11} : all.empty(), "gather", r);

  // Two label shards of 2 rows × 6 labels: each rank ranks its own range, root merges.
  const LabelRange own = shard_labels(6, r, n);
  TopKAccumulator acc(2, 2), full(2, 2);
  for (int64_t row = 0; row < 2; ++row)
    for (int64_t l = 0; l < 6; ++l) {
      const float score = static_cast<float>((l * 7 + row * 3) % 5);  // ties across shards
      full.add(row, static_cast<uint32_t>(l), score);
      if (l >= own.lo && l < own.hi) acc.add(row, static_cast<uint32_t>(l), score);
    }
  const TopK merged = gather_topk(*comm, acc.result());
  if (r == 0) {
    const TopK want = full.result();
    check(merged.labels == want.labels && merged.scores == want.scores, "gather_topk", r);
  } else {
    check(merged.labels.empty(), "gather_topk is empty off the root", r);
  }
  comm->barrier();
  check(comm->comm_seconds() > 0.0, "collective time is counted", r);
  if (failures == 0) std::printf("rank %d of %d: all collective checks passed\n", r, n);
  return failures == 0 ? 0 : 1;
}
