#!/usr/bin/python3
"""Tests tools/scale_tables.sh end to end at a small shape (the plumbing of issue 41's
table): every backend trains, `plan` runs beside it, and the table has a row per backend
with the ledger's peak within 10% of plan's, a positive step on both sides, and the
"host (measured)" column filled exactly for the two sampled backends. An unknown argument
exits 2.

    test_scale_tables.py XMCTRAIN_BINARY SOURCE_DIR
"""
import os
import subprocess
import sys
import tempfile
import unittest

BINARY, SOURCE = sys.argv[1], sys.argv[2]
SCRIPT = os.path.join(SOURCE, "tools", "scale_tables.sh")
BACKENDS = ["dense", "bottleneck", "fixed_fanin", "group_shared", "lsh_sampled", "anns_sampled"]


class ScaleTablesTest(unittest.TestCase):
    def test_small_table(self):
        with tempfile.TemporaryDirectory() as out:
            r = subprocess.run(["bash", SCRIPT, "--bin", BINARY, "--out", out, "--labels", "3000",
                                "--dim", "64", "--steps", "4", "--epoch-points", "2048"],
                               capture_output=True, text=True, timeout=900)
            self.assertEqual(r.returncode, 0, r.stderr[-3000:])
            with open(os.path.join(out, "table.md")) as f:
                table = f.read()
            rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
                    for line in table.splitlines() if line.startswith("| ") and
                    line.split("|")[1].strip() in BACKENDS}
            self.assertEqual(sorted(rows), sorted(BACKENDS), table)
            for b, cells in rows.items():
                # peak, plan, plan/ledger, step, plan, plan/step, host, epoch, plan, P@1, P@5
                self.assertEqual(len(cells), 11, (b, cells))
                self.assertTrue(0.9 <= float(cells[2]) <= 1.1, (b, cells))
                self.assertGreater(float(cells[3].split()[0]), 0.0, (b, cells))
                self.assertGreater(float(cells[4].split()[0]), 0.0, (b, cells))
                if b.endswith("_sampled"):
                    self.assertTrue(cells[6].endswith(" ms"), (b, cells))
                else:
                    self.assertEqual(cells[6], "-", (b, cells))

    def test_unknown_argument(self):
        r = subprocess.run(["bash", SCRIPT, "--bin", BINARY, "--colour", "red"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown argument", r.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
