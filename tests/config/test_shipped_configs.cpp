// Every config shipped in configs/ loads with the real backend registry (unknown keys,
// bounds and choices checked) and its resolved dump loads back to the same config.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "config/config_loader.h"
#include "layers/registry.h"

using namespace xmc;

TEST_CASE("every config in configs/ loads and round-trips through its dump") {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(fs::path(XMC_SOURCE_DIR) / "configs"))
    if (e.path().extension() == ".yaml") files.push_back(e.path());
  REQUIRE(files.size() >= 8);
  for (const auto& f : files) {
    INFO(f.string());
    ExperimentConfig c;
    REQUIRE_NOTHROW(c = load_config(f.string(), {}, output_types()));
    CHECK(parse_config(dump_config(c), "resolved.yaml", {}, output_types()) == c);
  }
}
