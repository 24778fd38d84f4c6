#!/usr/bin/python3
"""Tests tools/ensemble.py: the fusion on hand-written rows, and end to end on two small
runs trained here (a synthetic sparse set): the run directory it writes, its metrics equal
to `xmctrain eval --predictions` of its predictions, and bad input exiting 2 without
leaving a directory.

    test_ensemble.py XMCTRAIN_BINARY SOURCE_DIR
"""
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest

BINARY, SOURCE = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(SOURCE, "tools"))
import ensemble  # noqa: E402


def call(*args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = ensemble.main(["--binary", BINARY, *args])
    return rc, out.getvalue(), err.getvalue()


class FuseTest(unittest.TestCase):
    def test_weighted_sum_with_the_lowest_score_for_missing_labels(self):
        a = [{1: 2.0, 2: 1.0, 3: 0.0}]
        b = [{3: 4.0, 4: 1.0}]
        top = ensemble.fuse([(0.5, a), (0.5, b)], 3)
        # 1: (2 + 1)/2 = 1.5 (b's floor 1), 2: (1 + 1)/2 = 1, 3: (0 + 4)/2 = 2,
        # 4: (0 + 1)/2 = 0.5 (a's floor 0)
        self.assertEqual(top, [[(3, 2.0), (1, 1.5), (2, 1.0)]])
        # Ties broken by label id; weights scale each member.
        self.assertEqual(ensemble.fuse([(1.0, [{5: 1.0, 2: 1.0}]), (0.0, [{}])], 2),
                         [[(2, 1.0), (5, 1.0)]])


class EndToEndTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        d = cls.d = cls.tmp.name
        subprocess.run([BINARY, "synth", "--out", f"{d}/data", "--format", "sparse", "--train",
                        "600", "--test", "200", "--labels", "50", "--features", "300"],
                       check=True, capture_output=True)
        common = ["--set", f"data.train.path={d}/data/train.txt",
                  "--set", f"data.test.path={d}/data/test.txt",
                  "--set", "train.epochs=2", "--set", "threads=1"]
        for name, cfg in (("dense", "configs/wordnet_dense.yaml"),
                          ("lsh", "configs/wordnet_lsh.yaml")):
            subprocess.run([BINARY, "train", os.path.join(SOURCE, cfg), *common,
                            "--set", "model.encoder=[{type: sparse_linear, out: 16, activation: none}]",
                            "--out", f"{d}/{name}"], check=True, capture_output=True)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def args(self, out, *members):
        return ["--out", out, "--data", f"{self.d}/data/test.txt",
                "--train", f"{self.d}/data/train.txt", "--candidates", "20", *members]

    def test_run_directory_and_metrics(self):
        out = f"{self.d}/ens"
        rc, stdout, err = call(*self.args(out, f"{self.d}/dense:1", f"{self.d}/lsh:3"))
        self.assertEqual(rc, 0, err)
        self.assertIn("ensemble dense+lsh_sampled", stdout)
        self.assertEqual(sorted(os.listdir(out)), ["members.json", "predictions.txt", "results.json"])
        with open(f"{out}/results.json") as f:
            res = json.load(f)
        members = []
        for m in ("dense", "lsh"):
            with open(f"{self.d}/{m}/results.json") as f:
                members.append(json.load(f))
        self.assertEqual(res["backend"], "ensemble(dense+lsh_sampled)")
        self.assertAlmostEqual(res["train_seconds"], sum(m["train_seconds"] for m in members))
        self.assertEqual(res["output_layer_bytes"], sum(m["output_layer_bytes"] for m in members))
        direct = json.loads(subprocess.run(
            [BINARY, "eval", "--predictions", f"{out}/predictions.txt", "--data",
             f"{self.d}/data/test.txt", "--train", f"{self.d}/data/train.txt", "--json"],
            check=True, capture_output=True, text=True).stdout)["metrics"]
        self.assertEqual(res["metrics"]["P@1"], direct["P@1"])
        self.assertEqual(res["metrics"]["PSP@5"], direct["PSP@5"])
        self.assertGreater(res["metrics"]["P@1"], 0.0)
        with open(f"{out}/predictions.txt") as f:
            self.assertEqual(f.readline().split(), ["200", "50"])
            rows = f.read().splitlines()
        self.assertEqual(len(rows), 200)
        self.assertTrue(all(len(r.split()) == 5 for r in rows))

    def test_bad_input_exits_2_and_writes_nothing(self):
        out = f"{self.d}/bad"
        cases = [
            (self.args(out, f"{self.d}/dense:1"), "at least two members"),
            (self.args(out, f"{self.d}/dense", f"{self.d}/lsh:1"), "expected RUN_DIR:WEIGHT"),
            (self.args(out, f"{self.d}/dense:x", f"{self.d}/lsh:1"), "is not a number"),
            (self.args(out, f"{self.d}/dense:0", f"{self.d}/lsh:1"), "must be > 0"),
            (self.args(out, f"{self.d}/data:1", f"{self.d}/lsh:1"), "has no results.json"),
            (self.args(f"{self.d}/dense", f"{self.d}/dense:1", f"{self.d}/lsh:1"), "exists"),
        ]
        for args, expect in cases:
            with self.subTest(expect=expect):
                rc, _, err = call(*args)
                self.assertEqual(rc, 2)
                self.assertIn(expect, err)
        self.assertFalse(os.path.exists(out))
        self.assertEqual([f for f in os.listdir(self.d) if f.startswith(".ensemble.")], [])


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
