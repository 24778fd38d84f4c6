#include <catch2/catch.hpp>

#include "core/field_constraints.h"
#include "core/enum_names.h"
#include "model/schedule.h"
#include "ops/loss.h"

using namespace xmc;

namespace {
XMC_NAMED_ENUM(Fruit, apple, pear, plum);
enum class Odd { automatic, manual };
constexpr std::string_view enum_name_list(Odd) { return "auto,manual"; }
}  // namespace

TEST_CASE("a named enum reads its one list of names both ways") {
  CHECK(parse_enum<Fruit>("pear", "fruit") == Fruit::pear);
  CHECK(to_string(Fruit::apple) == "apple");
  CHECK(to_string(Fruit::plum) == "plum");
  CHECK(to_string(static_cast<Fruit>(3)) == "?");
  CHECK_THROWS_WITH(parse_enum<Fruit>("Pear", "fruit"),
                    "unknown fruit 'Pear': expected one of apple, pear, plum");
  // Names that are not identifiers, and a list without spaces.
  CHECK(parse_enum<Odd>("auto", "mode") == Odd::automatic);
  CHECK(to_string(Odd::manual) == "manual");
  CHECK(Choices::of<Odd>().str() == "auto, manual");
  CHECK(Choices{Fruit::plum, Fruit::apple}.str() == "plum, apple");
  // The lists behind the config enums round-trip every value.
  for (LossType t : {LossType::bce, LossType::squared_hinge, LossType::softmax})
    CHECK(parse_enum<LossType>(to_string(t), "loss") == t);
  for (ScheduleType t : {ScheduleType::constant, ScheduleType::cosine, ScheduleType::plateau})
    CHECK(parse_enum<ScheduleType>(to_string(t), "schedule") == t);
  CHECK_THROWS_WITH(parse_enum<LossType>("hinge", "loss"),
                    "unknown loss 'hinge': expected one of bce, squared_hinge, softmax");
}
