#include <catch2/catch.hpp>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "eval/filter.h"
#include "ops/topk.h"

using namespace xmc;
using Catch::Matchers::Contains;

namespace {

FilterSet parse(const std::string& text) {
  std::istringstream in(text);
  return read_filter(in, "filter.txt");
}

}  // namespace

TEST_CASE("filter file: pairs, blank lines, comments, duplicates") {
  FilterSet f = parse("# point label\n0 5\n\n3\t7\n0 2  \n0 5\n  12 0\r\n");
  CHECK(f.size() == 4);  // (0,5) twice is kept once
  CHECK(f.contains(0, 5));
  CHECK(f.contains(0, 2));
  CHECK(f.contains(3, 7));
  CHECK(f.contains(12, 0));
  CHECK_FALSE(f.contains(3, 5));
  CHECK_FALSE(f.contains(1, 2));
  CHECK(f.max_per_point() == 2);
  CHECK(f.max_point() == 12);
  CHECK(f.max_label() == 7);
  CHECK(f.labels_of(0) == std::vector<uint32_t>{2, 5});
  CHECK(f.labels_of(99).empty());
  CHECK(parse("").empty());
}

TEST_CASE("filter file: bad lines name the file, the line and the token") {
  CHECK_THROWS_AS(parse("0 1\n3 x\n"), InputError);
  CHECK_THROWS_WITH(parse("0 1\n3 x\n"),
                    Contains("filter.txt:2") && Contains("'x'") && Contains("label id"));
  CHECK_THROWS_WITH(parse("-1 2\n"),
                    Contains("filter.txt:1") && Contains("'-1'") && Contains("point id"));
  CHECK_THROWS_WITH(parse("\n\n7\n"), Contains("filter.txt:3") && Contains("'point label'"));
  CHECK_THROWS_WITH(parse("1 2 3\n"), Contains("filter.txt:1") && Contains("extra field '3'"));
  CHECK_THROWS_WITH(parse("1 4294967295\n"), Contains("filter.txt:1"));  // the padding id
  CHECK_THROWS_WITH(parse("1 2.5\n"), Contains("'2.5'"));
  CHECK_THROWS_WITH(read_filter_file("/nonexistent/dir/filter.txt"),
                    Contains("/nonexistent/dir/filter.txt"));
}

TEST_CASE("apply_filter drops filtered labels, moves the rest up and pads") {
  const float ninf = -std::numeric_limits<float>::infinity();
  // Row 0: [4, 2, 9, 1] with (0,2) and (0,1) filtered -> [4, 9, pad, pad].
  // Row 1: [2, 3, pad, pad], nothing filtered for point 1 -> unchanged.
  // Row 2: [5, 6, 7, 8] with (2,5) filtered -> [6, 7, 8, pad].
  TopK t{3,
         4,
         {4, 2, 9, 1, 2, 3, TopK::kNoLabel, TopK::kNoLabel, 5, 6, 7, 8},
         {0.9f, 0.8f, 0.7f, 0.6f, 0.5f, 0.4f, ninf, ninf, 4.f, 3.f, 2.f, 1.f}};
  FilterSet f = parse("0 2\n0 1\n2 5\n7 6\n");
  apply_filter(t, f);
  CHECK(t.labels == std::vector<uint32_t>{4, 9, TopK::kNoLabel, TopK::kNoLabel,  //
                                          2, 3, TopK::kNoLabel, TopK::kNoLabel,  //
                                          6, 7, 8, TopK::kNoLabel});
  CHECK(t.scores == std::vector<float>{0.9f, 0.7f, ninf, ninf,  //
                                       0.5f, 0.4f, ninf, ninf,  //
                                       3.f, 2.f, 1.f, ninf});
}
