#!/usr/bin/python3
"""tools/plot_curves.py on hand-written run directories: PNG and SVG output, run discovery
as `xmctrain report` does it, --points from JSON and CSV, and exit code 2 for bad input."""
import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import plot_curves  # noqa: E402


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def epochs(*p1s, seconds=2.0):
    return "".join(json.dumps({"epoch": i + 1, "epoch_seconds": seconds,
                               "metrics": {"P@1": p, "P@5": p / 2}}) + "\n"
                   for i, p in enumerate(p1s))


class PlotCurvesTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = self.tmp.name
        write(f"{self.d}/sweep/a/metrics.jsonl", epochs(0.3, 0.4))
        write(f"{self.d}/sweep/a/results.json", "{}")
        write(f"{self.d}/sweep/b/metrics.jsonl", epochs(0.2, 0.5, seconds=1.0))
        write(f"{self.d}/sweep/b/results.json", "{}")
        # Killed during epoch 2: its cut last line is skipped.
        write(f"{self.d}/sweep/k/metrics.jsonl", epochs(0.1) + '{"epoch": 2, "epo')
        write(f"{self.d}/sweep/k/config.resolved.yaml", "name: k\n")
        os.makedirs(f"{self.d}/sweep/data")  # not a run

    def tearDown(self):
        self.tmp.cleanup()

    def run_tool(self, *args):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = plot_curves.main(list(args))
        return rc, out.getvalue(), err.getvalue()

    def test_png_with_every_run_of_a_parent_directory(self):
        png = f"{self.d}/c.png"
        rc, out, err = self.run_tool("--out", png, f"{self.d}/sweep")
        self.assertEqual(rc, 0, err)
        with open(png, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        self.assertIn("| a | 2 | 4.0 | 0.4000 |", out)
        self.assertIn("| b | 2 | 2.0 | 0.5000 |", out)
        self.assertIn("| k (incomplete) | 1 | 2.0 | 0.1000 |", out)
        self.assertIn("incomplete last record skipped", err)
        self.assertEqual([f for f in os.listdir(self.d) if ".tmp." in f], [])

    def test_svg_with_glob_names_metrics_and_points(self):
        write(f"{self.d}/peers.json", json.dumps(
            [{"label": "PeerJ", "seconds": 3, "P@1": 0.45, "note": "paper"},
             {"label": "OnlyP3", "seconds": 1, "P@3": 0.2}]))
        write(f"{self.d}/peers.csv", "label,seconds,P@1,P@5\nPeerC,5,0.35,\nPeerD,6,,0.3\n")
        for points in ("peers.json", "peers.csv"):
            svg = f"{self.d}/c.svg"
            rc, out, err = self.run_tool("--out", svg, "--metric", "P@1,P@5", "--points",
                                         f"{self.d}/{points}", f"{self.d}/sweep/[ab]",
                                         f"Best={self.d}/sweep/b")
            self.assertEqual(rc, 0, err)
            with open(svg, encoding="utf-8") as f:
                text = f.read()
            self.assertIn("<svg", text)
            self.assertIn("| Best | 1 | 1.0 | 0.2000 | 0.1000 |", out)
            self.assertNotIn("k (incomplete)", out)
            if points == "peers.json":
                self.assertIn("PeerJ (paper)", text)
                self.assertIn("OnlyP3", err)  # neither P@1 nor P@5: reported, not drawn
            else:
                self.assertIn("PeerC", text)
                self.assertIn("PeerD", text)

    def test_points_from_a_peers_py_json_file(self):
        write(f"{self.d}/peers-run.json", json.dumps({"train": "t", "test": "s", "rows": [
            {"name": "PeerOk", "kind": "peer", "status": "ok", "train_seconds": 4,
             "metrics": {"P@1": 0.41, "P@5": 0.2}},
            {"name": "PeerFailed", "kind": "peer", "status": "failed: no wheel"},
            {"name": "xmctrain dense (a)", "kind": "xmctrain", "status": "ok",
             "train_seconds": 4, "metrics": {"P@1": 0.4}}]}))
        svg = f"{self.d}/c.svg"
        rc, _, err = self.run_tool("--out", svg, "--points", f"{self.d}/peers-run.json",
                                   f"{self.d}/sweep/a")
        self.assertEqual(rc, 0, err)
        with open(svg, encoding="utf-8") as f:
            text = f.read()
        self.assertIn("PeerOk", text)
        self.assertNotIn("PeerFailed", text)
        self.assertNotIn("xmctrain dense (a)", text)
        write(f"{self.d}/peers-bad.json", json.dumps(
            {"rows": [{"name": "P", "kind": "peer", "status": "ok"}]}))
        rc, _, err = self.run_tool("--out", svg, "--points", f"{self.d}/peers-bad.json",
                                   f"{self.d}/sweep/a")
        self.assertEqual(rc, 2)
        self.assertIn("peers-bad.json: row 0: a peer row needs name, train_seconds and metrics",
                      err)

    def test_bad_input_exits_2_naming_the_file(self):
        write(f"{self.d}/bad.csv", "label,seconds,P@1\nX,abc,0.3\n")
        write(f"{self.d}/bad.json", '{"points": [{"label": "X"}]}')
        write(f"{self.d}/sweep/z/metrics.jsonl", "not json\n" + epochs(0.1))
        cases = [
            (["--out", f"{self.d}/c.pdf", f"{self.d}/sweep/a"], "must end in .png or .svg"),
            (["--out", f"{self.d}/no/c.png", f"{self.d}/sweep/a"], "does not exist"),
            (["--out", f"{self.d}/c.png", f"{self.d}/none"], "none' does not exist"),
            (["--out", f"{self.d}/c.png", f"{self.d}/sweep/q*"], "no file matches"),
            (["--out", f"{self.d}/c.png", f"{self.d}/sweep/data"], "no run directory"),
            (["--out", f"{self.d}/c.png", "--points", f"{self.d}/bad.csv", f"{self.d}/sweep/a"],
             "bad.csv:2 seconds: 'abc' is not a number"),
            (["--out", f"{self.d}/c.png", "--points", f"{self.d}/bad.json", f"{self.d}/sweep/a"],
             "bad.json: point 0: expected an object with label and seconds"),
            (["--out", f"{self.d}/c.png", f"{self.d}/sweep/z"], "metrics.jsonl:1:"),
            (["--out", f"{self.d}/c.png", "--metric", "P@7", f"{self.d}/sweep/a"],
             "nothing to plot"),
        ]
        for args, expect in cases:
            with self.subTest(args=args):
                rc, _, err = self.run_tool(*args)
                self.assertEqual(rc, 2)
                self.assertIn(expect, err)
        self.assertFalse(os.path.exists(f"{self.d}/c.png"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
