#!/usr/bin/python3
"""Tests tools/holdout.py: every point line lands byte for byte in exactly one part, the
share and the headers, determinism, files that `xmctrain info` reads, and bad input
exiting 2 naming file:line without leaving a folder.

    test_holdout.py XMCTRAIN_BINARY SOURCE_DIR
"""
import contextlib
import io
import os
import subprocess
import sys
import tempfile
import unittest

BINARY, SOURCE = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(SOURCE, "tools"))
import holdout  # noqa: E402

LINES = [f"{i % 7},{(i * 3) % 11} {i % 5}:0.5 {5 + i % 3}:{i / 10:g}\n" for i in range(50)]


def call(*args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = holdout.main(list(args))
    return rc, out.getvalue(), err.getvalue()


class HoldoutTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.train = os.path.join(self.dir, "train.txt")
        with open(self.train, "w") as f:
            f.write("50 8 11\n")
            f.writelines(LINES)

    def tearDown(self):
        self.tmp.cleanup()

    def read(self, path):
        with open(path) as f:
            return f.readline(), f.readlines()

    def test_every_point_in_one_part_with_its_header(self):
        out = os.path.join(self.dir, "h")
        rc, msg, err = call(self.train, "--out", out, "--share", "0.2", "--seed", "3")
        self.assertEqual(rc, 0, err)
        self.assertIn("40 training / 10 validation points", msg)
        head_t, kept = self.read(os.path.join(out, "train.txt"))
        head_v, held = self.read(os.path.join(out, "valid.txt"))
        self.assertEqual((head_t, head_v), ("40 8 11\n", "10 8 11\n"))
        self.assertEqual(sorted(kept + held), sorted(LINES))
        # Each part keeps the input's order (the split's indices ascend).
        self.assertEqual(kept, [l for l in LINES if l in set(kept)])
        # Deterministic; another seed gives another split.
        again = os.path.join(self.dir, "again")
        call(self.train, "--out", again, "--share", "0.2", "--seed", "3")
        self.assertEqual(self.read(os.path.join(again, "valid.txt"))[1], held)
        other = os.path.join(self.dir, "other")
        call(self.train, "--out", other, "--share", "0.2", "--seed", "4")
        self.assertNotEqual(self.read(os.path.join(other, "valid.txt"))[1], held)
        # The parts are XC files the binary reads, with the input's label and feature counts.
        for name, n in (("train.txt", 40), ("valid.txt", 10)):
            r = subprocess.run([BINARY, "info", os.path.join(out, name)], capture_output=True,
                               text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stdout, rf"points \(N\):\s+{n}\n")
            self.assertRegex(r.stdout, r"labels \(L\):\s+11\n")
        self.assertFalse([p for p in os.listdir(self.dir) if ".tmp." in p])

    def test_bad_input_exits_2_naming_the_line_and_leaves_nothing(self):
        bad = os.path.join(self.dir, "bad.txt")
        for content, where in (("50 8\n" + "".join(LINES), "bad.txt:1"),
                               ("51 8 11\n" + "".join(LINES), "bad.txt:51"),
                               ("49 8 11\n" + "".join(LINES), "bad.txt:51")):
            with open(bad, "w") as f:
                f.write(content)
            out = os.path.join(self.dir, "nothing")
            rc, _, err = call(bad, "--out", out)
            self.assertEqual(rc, 2)
            self.assertIn(where, err)
            self.assertFalse(os.path.exists(out))
        rc, _, err = call(self.train, "--out", os.path.join(self.dir, "x"), "--share", "1.5")
        self.assertEqual(rc, 2)
        self.assertIn("--share", err)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "x")))
        self.assertFalse([p for p in os.listdir(self.dir) if ".tmp." in p])


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
