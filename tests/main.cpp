// Catch2's main for every test binary, with the GPU-only rule of support/device_test.h:
// test cases tagged [cuda] run only where a CUDA GPU is usable. Without one:
//   - XMC_TEST_REQUIRE_CUDA set (the GPU kit): the run fails (exit 1) when it selects any;
//   - a selection of [cuda] cases only: nothing runs, exit 77 (CTest: SKIP_RETURN_CODE 77,
//     reported as skipped, never as passed);
//   - a selection with other cases too: those run, the [cuda] ones are left out (and said so).
// Listing, help and selections without [cuda] cases run as Catch2 would, except that a
// selection matching no test case fails (exit 2) instead of passing with nothing run.
#define CATCH_CONFIG_RUNNER
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/gpu.h"

namespace {

bool gpu_only(const Catch::TestCase& t) {
  return std::find(t.lcaseTags.begin(), t.lcaseTags.end(), "cuda") != t.lcaseTags.end();
}

// Whether CUDA can run here; why not in *why.
bool gpu_usable(std::string* why) {
  if (!xmc::gpu::built_with_cuda()) {
    *why = "built without CUDA";
    return false;
  }
  try {
    if (xmc::resolve_device("auto") == xmc::Device::cuda) return true;
    *why = "no CUDA GPU visible";
  } catch (const std::exception& e) {
    *why = std::string("no usable CUDA GPU: ") + e.what();
  }
  return false;
}

// A test-spec pattern matching exactly the test case called `name`.
std::string exact_name(const std::string& name) {
  std::string s;
  for (char c : name) {
    if (c == '\\' || c == ',' || c == '[' || c == ']' || c == '"' || c == '*' || c == '~')
      s.push_back('\\');
    s.push_back(c);
  }
  return s;
}

}  // namespace

int main(int argc, char* argv[]) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  Catch::ConfigData data = session.configData();
  if (data.showHelp || data.listTests || data.listTestNamesOnly || data.listTags ||
      data.listReporters)
    return session.run();
  Catch::Config& config = session.config();
  const std::vector<Catch::TestCase> selected =
      Catch::filterTests(Catch::getAllTestCasesSorted(config), config.testSpec(), config);
  if (config.testSpec().hasFilters() && selected.empty()) {  // a typo, not a pass
    std::printf("no test case matches the selection\n");
    return 2;
  }
  const auto cuda_cases = std::count_if(selected.begin(), selected.end(), gpu_only);
  if (cuda_cases == 0) return session.run();
  std::string why;
  if (gpu_usable(&why)) return session.run();
  const char* require = std::getenv("XMC_TEST_REQUIRE_CUDA");
  if (require != nullptr && *require != '\0') {
    std::printf("XMC_TEST_REQUIRE_CUDA is set, but %s: %ld GPU-only test case(s) cannot run\n",
                why.c_str(), static_cast<long>(cuda_cases));
    return 1;
  }
  if (cuda_cases == static_cast<long>(selected.size())) {
    std::printf("%s: the %ld GPU-only test case(s) selected ([cuda]) are skipped (exit 77)\n",
                why.c_str(), static_cast<long>(cuda_cases));
    return 77;
  }
  // A mixed selection: the others, by name (the default selection as "not hidden, not
  // [cuda]", which reads better in the reporter's "Filters:" line).
  data.testsOrTags.clear();
  if (!config.testSpec().hasFilters()) {
    data.testsOrTags.push_back("~[.]~[cuda]");
  } else {
    for (const Catch::TestCase& t : selected)
      if (!gpu_only(t)) {
        data.testsOrTags.push_back(exact_name(t.name));
        data.testsOrTags.push_back(",");
      }
    data.testsOrTags.pop_back();
  }
  std::printf(
      "%s: %ld GPU-only test case(s) ([cuda]) left out, not run (run them alone to "
      "see them skipped)\n",
      why.c_str(), static_cast<long>(cuda_cases));
  session.useConfigData(data);
  return session.run();
}
