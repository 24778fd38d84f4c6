#include "commands.h"
#include "core/error.h"

namespace xmc::app {

Command register_bench(CLI::App& app) {
  auto* sub = app.add_subcommand("bench", "(not yet implemented)");
  sub->allow_extras();
  return {sub, []() -> int { throw Error("'xmctrain bench' is not implemented yet"); }};
}

}  // namespace xmc::app
