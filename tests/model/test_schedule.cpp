// Learning-rate schedules: warmup values, cosine end value, plateau halving and floor.
#include <catch2/catch.hpp>

#include "core/error.h"
#include "model/schedule.h"

using namespace xmc;

TEST_CASE("constant schedule is 1") {
  LrSchedule s(ScheduleConfig{}, 100);
  CHECK(s.factor(0) == 1.0);
  CHECK(s.factor(99) == 1.0);
}

TEST_CASE("cosine: linear warmup, then decay to min_factor at total_steps") {
  ScheduleConfig cfg{.type = ScheduleType::cosine, .warmup_steps = 4, .min_factor = 0.1};
  LrSchedule s(cfg, 14);
  CHECK(s.factor(0) == Approx(0.25));
  CHECK(s.factor(1) == Approx(0.5));
  CHECK(s.factor(3) == Approx(1.0));
  CHECK(s.factor(4) == Approx(1.0));     // decay starts at 1
  CHECK(s.factor(9) == Approx(0.55));    // halfway: 0.1 + 0.9·0.5
  CHECK(s.factor(14) == Approx(0.1));    // end value
  CHECK(s.factor(1000) == Approx(0.1));  // stays at the floor
  CHECK(s.factor(6) < s.factor(5));      // monotone decay
  ScheduleConfig no_warm{.type = ScheduleType::cosine};
  LrSchedule s0(no_warm, 10);
  CHECK(s0.factor(0) == Approx(1.0));
  CHECK(s0.factor(10) == Approx(0.0).margin(1e-12));
}

TEST_CASE("plateau: multiply by factor after patience bad evaluations, never below the floor") {
  ScheduleConfig cfg{
      .type = ScheduleType::plateau, .min_factor = 0.2, .patience = 2, .factor = 0.5};
  LrSchedule s(cfg, 0);
  s.report_metric(1.0);  // best
  s.report_metric(0.9);
  CHECK(s.factor(0) == 1.0);
  s.report_metric(0.9);  // second bad evaluation: halve
  CHECK(s.factor(0) == 0.5);
  s.report_metric(1.1);  // improvement resets the count
  s.report_metric(1.0);
  CHECK(s.factor(0) == 0.5);
  s.report_metric(1.1);  // equal is not an improvement
  CHECK(s.factor(0) == 0.25);
  s.report_metric(0.0);
  s.report_metric(0.0);
  CHECK(s.factor(0) == 0.2);  // 0.125 floored at 0.2
  s.report_metric(0.0);
  s.report_metric(0.0);
  CHECK(s.factor(0) == 0.2);

  LrSchedule r(cfg, 0);
  r.restore(s.plateau_factor(), s.best_metric(), s.bad_evals());
  CHECK(r.factor(0) == 0.2);
  CHECK(r.best_metric() == 1.1);
}

TEST_CASE("schedule config is validated and names parse") {
  CHECK(parse_enum<ScheduleType>("cosine", "schedule") == ScheduleType::cosine);
  CHECK(to_string(ScheduleType::plateau) == "plateau");
  CHECK_THROWS_AS(parse_enum<ScheduleType>("step", "schedule"), InputError);
  CHECK_THROWS_WITH(parse_enum<ScheduleType>("step", "schedule"), Catch::Matchers::Contains("constant, cosine, plateau"));
  CHECK_THROWS_AS(LrSchedule(ScheduleConfig{.type = ScheduleType::plateau, .factor = 1.5}, 10),
                  InputError);
  CHECK_THROWS_AS(LrSchedule(ScheduleConfig{.type = ScheduleType::plateau, .patience = 0}, 10),
                  InputError);
  CHECK_THROWS_AS(LrSchedule(ScheduleConfig{.type = ScheduleType::cosine, .warmup_steps = -1}, 10),
                  InputError);
}
