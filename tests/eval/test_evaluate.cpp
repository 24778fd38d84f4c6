#include <catch2/catch.hpp>
#include <cmath>
#include <sstream>
#include <string>

#include "core/error.h"
#include "eval/evaluate.h"
#include "eval/filter.h"
#include "support/test_support.h"

using namespace xmc;
using Catch::Matchers::Contains;

namespace {

// Minimal reader of the XC sparse text format ("N L" header, then N rows of "i:v"), for
// the fixtures only: lib/io owns the real reader.
CsrMatrix parse_sparse(const std::string& text) {
  std::istringstream in(text);
  CsrMatrix m;
  std::string line;
  REQUIRE(std::getline(in, line));
  std::istringstream header(line);
  header >> m.rows >> m.cols;
  for (int64_t r = 0; r < m.rows; ++r) {
    REQUIRE(std::getline(in, line));
    std::istringstream row(line);
    std::string tok;
    while (row >> tok) {
      const auto colon = tok.find(':');
      REQUIRE(colon != std::string::npos);
      m.indices.push_back(static_cast<uint32_t>(std::stoul(tok.substr(0, colon))));
      m.values.push_back(std::stof(tok.substr(colon + 1)));
    }
    m.indptr.push_back(static_cast<int64_t>(m.indices.size()));
  }
  return m;
}

CsrMatrix fixture(const std::string& name) {
  return parse_sparse(
      test::read_file(std::string(XMC_SOURCE_DIR) + "/tests/eval/fixtures/" + name));
}

std::vector<int64_t> frequencies(const CsrMatrix& labels) {
  std::vector<int64_t> f(static_cast<size_t>(labels.cols), 0);
  for (uint32_t l : labels.indices) ++f[l];
  return f;
}

}  // namespace

// The example reused by the CLI test of `xmctrain eval --predictions` (tests/eval/fixtures):
// train_labels.txt (N = 10, L = 5), test_labels.txt (4 points), predictions.txt; k = 3,
// default propensity parameters A = 0.55, B = 1.5 (family "other").
//
// Training counts N_l = [6, 3, 1, 0, 3]; C = (ln 10 − 1)·2.5^0.55 = 2.1561209
//   q = 1 + C·(N_l + 1.5)^−0.55 = [1.7118515, 1.9427710, ln 10 = 2.3025851, 2.7251343, 1.9427710]
//   (a label seen once has q = ln N exactly).
// Test points, true labels, and top-3 (score desc, ties -> lower id):
//   t0: y = {0, 2};    preds 0:.9 1:.8 2:.7 3:.1 -> [0, 1, 2]      hits 1 0 1
//   t1: y = {3};       preds 3:.5 1:.5 4:.2      -> [1, 3, 4]      hits 0 1 0  (tie: 1 before 3)
//   t2: y = {0, 1, 4}; preds 4:.6                -> [4, pad, pad]  hits 1 0 0
//   t3: y = {2};       no predictions            -> [pad, pad, pad]
// d_j = 1/log2(j+1): d1 = 1, d2 = 0.6309298, d3 = 0.5; I1 = 1, I2 = 1.6309298, I3 = 2.1309298
// P@1 = (1+0+1+0)/4 = 0.5;  P@2 = (1/2+1/2+1/2+0)/4 = 0.375;  P@3 = (2/3+1/3+1/3)/4 = 1/3
// nDCG@1 = (1+0+1+0)/4 = 0.5
// nDCG@2 = (1/I2 + d2/I1 + 1/I2 + 0)/4 = (0.6131472 + 0.6309298 + 0.6131472)/4 = 0.4643060
// nDCG@3 = ((1+d3)/I2 + d2/I1 + 1/I3 + 0)/4 = (0.9197208 + 0.6309298 + 0.4692787)/4 = 0.5049823
// R@1 = (1/2+0+1/3+0)/4 = 0.2083333;  R@2 = (1/2+1+1/3)/4 = 0.4583333;  R@3 = (1+1+1/3)/4 =
// 0.5833333 PSP@1 = (q0 + q4) / (max(q0,q2) + q3 + max(q0,q1,q4) + q2)
//       = 3.6546225 / (2.3025851 + 2.7251343 + 1.9427710 + 2.3025851) = 3.6546225 / 9.2730755
//       = 0.3941112
// PSP@2 = (q0 + q3 + q4)/2 / ((q2+q0) + q3 + (q1+q4) + q2)/2
//       = 6.3797569 / 12.9276981 = 0.4934952
// PSP@3 = (q0+q2 + q3 + q4)/3 / ((q2+q0) + q3 + (q1+q4+q0) + q2)/3
//       = 8.6823420 / 14.6395496 = 0.5930744
// PSnDCG@k: per point (Σ hit·q·d_j)/I_min(k,|y|), over the same for the ideal ordering of
// the point's own q (pyxclib psndcg). @1 equals PSP@1.
//   @2: num = q0/I2 + q3·d2/I1 + q4/I2 = 1.0496170 + 1.7193683 + 1.1912046 = 3.9601899
//       den = (q2 + q0·d2)/I2 + q3/I1 + (q1 + q4·d2)/I2 + q2/I1 = 9.0445486
//       -> 3.9601899 / 9.0445486 = 0.4378538
//   @3: num = (q0 + q2·d3)/I2 + q3·d2/I1 + q4/I3,  den = (q2 + q0·d2)/I2 + q3 +
//       (q1 + q4·d2 + q0·d3)/I3 + q2 -> 4.3865982 / 8.9903658 = 0.4879221
TEST_CASE("evaluate_predictions reproduces the fixture example") {
  CsrMatrix train = fixture("train_labels.txt");
  CsrMatrix test = fixture("test_labels.txt");
  CsrMatrix pred = fixture("predictions.txt");
  REQUIRE(train.rows == 10);
  REQUIRE(test.rows == 4);
  REQUIRE(pred.rows == 4);
  auto freq = frequencies(train);
  REQUIRE(freq == std::vector<int64_t>{6, 3, 1, 0, 3});

  MetricsResult m = evaluate_predictions(pred, test, freq, train.rows, 0.55, 1.5, 3, nullptr);
  REQUIRE(m.k == 3);
  CHECK(m.points == 4);
  const double tol = 1e-6;
  CHECK(m.p[0] == Approx(0.5).margin(tol));
  CHECK(m.p[1] == Approx(0.375).margin(tol));
  CHECK(m.p[2] == Approx(1.0 / 3).margin(tol));
  CHECK(m.ndcg[0] == Approx(0.5).margin(tol));
  CHECK(m.ndcg[1] == Approx(0.4643060).margin(tol));
  CHECK(m.ndcg[2] == Approx(0.5049823).margin(tol));
  CHECK(m.recall[0] == Approx(0.2083333).margin(tol));
  CHECK(m.recall[1] == Approx(0.4583333).margin(tol));
  CHECK(m.recall[2] == Approx(0.5833333).margin(tol));
  CHECK(m.psp[0] == Approx(0.3941112).margin(tol));
  CHECK(m.psp[1] == Approx(0.4934952).margin(tol));
  CHECK(m.psp[2] == Approx(0.5930744).margin(tol));
  CHECK(m.psndcg[0] == Approx(0.3941112).margin(tol));
  CHECK(m.psndcg[1] == Approx(0.4378538).margin(tol));
  CHECK(m.psndcg[2] == Approx(0.4879221).margin(tol));

  // Without training counts: the same plain metrics, no PS metrics.
  MetricsResult plain = evaluate_predictions(pred, test, {}, 0, 0, 0, 3, nullptr);
  CHECK_FALSE(plain.has_ps());
  CHECK(plain.p == m.p);
  CHECK(plain.recall == m.recall);
}

// Filter (0, 0): t0's predictions become [1, 2, 3] (k + 1 = 4 candidates were taken, so
// label 3 moves into the top 3) -> hits 0 1 0. Others unchanged.
// P@1 = (0+0+1+0)/4 = 0.25;  P@3 = (1/3+1/3+1/3+0)/4 = 0.25;  R@3 = (1/2+1+1/3)/4 = 0.4583333
TEST_CASE("evaluate_predictions applies a filter before taking the top k") {
  CsrMatrix test = fixture("test_labels.txt");
  CsrMatrix pred = fixture("predictions.txt");
  std::istringstream in("0 0\n");
  FilterSet f = read_filter(in, "filter");
  MetricsResult m = evaluate_predictions(pred, test, {}, 0, 0, 0, 3, &f);
  CHECK(m.p[0] == Approx(0.25).margin(1e-12));
  CHECK(m.p[2] == Approx(0.25).margin(1e-12));
  CHECK(m.recall[2] == Approx(0.4583333).margin(1e-6));
}

TEST_CASE("evaluate_predictions rejects predictions that do not match the truth") {
  CsrMatrix test = fixture("test_labels.txt");
  CsrMatrix pred = fixture("predictions.txt");
  CsrMatrix fewer = pred;
  fewer.rows = 3;
  fewer.indptr.pop_back();
  CHECK_THROWS_AS(evaluate_predictions(fewer, test, {}, 0, 0, 0, 3, nullptr), InputError);
  CHECK_THROWS_WITH(evaluate_predictions(fewer, test, {}, 0, 0, 0, 3, nullptr),
                    Contains("3 rows") && Contains("4 rows"));
  CsrMatrix wider = pred;
  wider.cols = 6;
  CHECK_THROWS_WITH(evaluate_predictions(wider, test, {}, 0, 0, 0, 3, nullptr),
                    Contains("6 labels") && Contains("5 labels"));
  CHECK_THROWS_WITH(evaluate_predictions(pred, test, {1, 2}, 10, 0.55, 1.5, 3, nullptr),
                    Contains("2 labels") && Contains("5 labels"));
  std::istringstream in("4 1\n");
  FilterSet f = read_filter(in, "filter");
  CHECK_THROWS_WITH(evaluate_predictions(pred, test, {}, 0, 0, 0, 3, &f),
                    Contains("point 4") && Contains("4 test points"));
  CHECK_THROWS_AS(evaluate_predictions(pred, test, {}, 0, 0, 0, 0, nullptr), InputError);
}
