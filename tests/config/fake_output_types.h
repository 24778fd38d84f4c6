#pragma once
// Two fake output types standing in for the backends of lib/layers, registered the way the
// real registry does it (one make_output_type line each).
#include <cstdint>
#include <string>
#include <vector>

#include "config/output_types.h"
#include "ops/loss.h"

namespace xmc::test {

XMC_NAMED_ENUM(FakePrecision, fp32, bf16, fp8);

struct FakeDenseConfig {
  LossType loss = LossType::bce;
  int64_t chunk_size = 8192;
  FakePrecision precision = FakePrecision::fp32;

  template <class V>
  void visit(V& v) {
    v.field("loss", loss, "Loss");
    v.field("chunk_size", chunk_size, "Labels per chunk", Range{1, 1 << 24});
    v.field("precision", precision, "Weight precision",
            Choices{FakePrecision::fp32, FakePrecision::bf16});
  }
};

struct FakeRewireConfig {
  int64_t interval = 1000;
  double fraction = 0.1;

  template <class V>
  void visit(V& v) {
    v.field("interval", interval, "Steps between rewirings", Range{1, 1e9});
    v.field("fraction", fraction, "Fraction of weights rewired", Range::half_open(0, 1));
  }
};

struct FakeSparseConfig {
  int64_t fan_in = 64;
  FakeRewireConfig rewire;
  std::vector<FakeRewireConfig> extra;

  template <class V>
  void visit(V& v) {
    v.field("fan_in", fan_in, "Inputs per label", Range{1, 65536});
    v.field("rewire", rewire, "Rewiring");
    v.field("extra", extra, "Extra rewiring phases");
  }
};

inline std::vector<OutputTypeInfo> fake_output_types() {
  return {make_output_type<FakeDenseConfig>("dense", "Fake dense layer"),
          make_output_type<FakeSparseConfig>("fake_sparse", "Fake sparse layer")};
}

}  // namespace xmc::test
