#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/memory_ledger.h"

using namespace xmc;

TEST_CASE("ledger tracks current and peak per tag and in total") {
  MemoryLedger ledger;
  {
    HostBuffer<float> w(ledger, MemTag::weights, 1000);
    CHECK(ledger.current(MemTag::weights) == 4000);
    {
      HostBuffer<uint32_t> idx(ledger, MemTag::indices, 500);
      CHECK(ledger.total_current() == 6000);
    }
    CHECK(ledger.current(MemTag::indices) == 0);
    CHECK(ledger.peak(MemTag::indices) == 2000);
    LedgerEntry e(ledger, MemTag::workspace, 3000);
    CHECK(ledger.current(MemTag::workspace) == 3000);
    CHECK(ledger.total_peak() == 7000);
  }
  CHECK(ledger.total_current() == 0);
  CHECK(ledger.total_peak() == 7000);
  auto rep = ledger.report();
  CHECK(rep["host"]["weights"]["peak"] == 4000);
  CHECK(rep["host"]["total"]["peak"] == 7000);
  CHECK_FALSE(rep.contains("device"));
  ledger.reset_peaks();
  CHECK(ledger.total_peak() == 0);
}

TEST_CASE("host buffers are zeroed and aligned") {
  MemoryLedger ledger;
  HostBuffer<double> b(ledger, MemTag::optimizer, 17);
  CHECK(reinterpret_cast<uintptr_t>(b.data()) % 64 == 0);
  for (size_t i = 0; i < b.size(); ++i) CHECK(b[i] == 0.0);
  HostBuffer<double> moved = std::move(b);
  CHECK(ledger.current(MemTag::optimizer) == 17 * 8);
}
