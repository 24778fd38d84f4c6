#include <catch2/catch.hpp>

#include "core/enum_names.h"
#include "model/schedule.h"
#include "ops/loss.h"

using namespace xmc;

namespace {
enum class Fruit { apple, pear, plum };
constexpr std::array<EnumName<Fruit>, 2> kFruit{{{Fruit::apple, "apple"}, {Fruit::pear, "pear"}}};
}  // namespace

TEST_CASE("parse_enum and enum_name read one table both ways") {
  CHECK(parse_enum(kFruit, "pear", "fruit") == Fruit::pear);
  CHECK(enum_name(kFruit, Fruit::apple) == "apple");
  CHECK(enum_name(kFruit, Fruit::plum) == "?");
  CHECK_THROWS_WITH(parse_enum(kFruit, "Pear", "fruit"),
                    "unknown fruit 'Pear': expected one of apple, pear");
  // The tables behind the config enums round-trip every value.
  for (LossType t : {LossType::bce, LossType::squared_hinge, LossType::softmax})
    CHECK(parse_loss(to_string(t)) == t);
  for (ScheduleType t : {ScheduleType::constant, ScheduleType::cosine, ScheduleType::plateau})
    CHECK(parse_schedule(to_string(t)) == t);
  CHECK_THROWS_WITH(parse_loss("hinge"),
                    "unknown loss 'hinge': expected one of bce, squared_hinge, softmax");
}
