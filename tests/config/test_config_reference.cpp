#include <catch2/catch.hpp>
#include <cstdlib>

#include "config/config_reference.h"
#include "fake_output_types.h"
#include "support/test_support.h"

using namespace xmc;

TEST_CASE("the reference lists every key with type, default, bounds and description") {
  std::string md = config_reference_markdown(xmc::test::fake_output_types());
  INFO(md);
  for (const char* s : {
           "## Top level",
           "## `data`",
           "## `model`",
           "## `optim`",
           "## `train`",
           "## `eval`",
           "| `name` | string | `\"run\"` |  | Run name |",
           "| `device` | string | `auto` | cpu, cuda, auto | Where to run; auto = cuda when "
           "available |",
           "| `out` | path | (unset) |  | Run directory; empty = runs/\\<name> |",
           "| `train.batch_size` | int | `256` | [1, 1048576] | Points per mini-batch |",
           "| `data.train.format` | string | `auto` | auto, xc, split, npy, hdf5 |",
           "| `data.synth.seed` | uint64 | `0` | >= 0 |",
           "| `model.encoder` | list | `[]` |",
           "| `model.encoder[].dropout` | float | `0.0` | [0, 1) | Input dropout probability |",
           "| `optim.output.lr` | float | `0.001` | > 0 | Base learning rate |",
           "| `model.output.type` | string | `dense` | dense, fake_sparse |",
           "### `type: dense`",
           "Fake dense layer",
           "| `model.output.loss` | string | `bce` | bce, squared_hinge, softmax | Loss |",
           "### `type: fake_sparse`",
           "| `model.output.rewire.fraction` | float | `0.1` | [0, 1) | Fraction of weights "
           "rewired |",
           "| `model.output.extra[].interval` | int | `1000` | [1, 1000000000] |",
       })
    CHECK(md.find(s) != std::string::npos);
  // Every leaf key of the resolved dump appears in the reference (nothing is hand-listed).
  for (const char* key :
       {"`data.test.hdf5_dataset`", "`data.propensity.family`", "`optim.schedule.patience`",
        "`train.checkpoint_every`", "`eval.ef`", "`seed`", "`threads`", "`data.filter`"})
    CHECK(md.find(key) != std::string::npos);
  std::string none = config_reference_markdown({});
  CHECK(none.find("No output types are registered.") != std::string::npos);
}

// docs/config-reference.md must be what `xmctrain train --config-reference` generates from
// the config structs and the registered backends. Regenerate it with
//   build/app/xmctrain train --config-reference > docs/config-reference.md
TEST_CASE("docs/config-reference.md is current") {
  auto r = xmc::test::run_cli({"train", "--config-reference"});
  REQUIRE(r.exit_code == 0);
  REQUIRE_FALSE(r.out.empty());
  std::string have =
      xmc::test::read_file(std::string(XMC_SOURCE_DIR) + "/docs/config-reference.md");
  CHECK(have == r.out);
}
