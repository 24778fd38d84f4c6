#!/usr/bin/python3
"""Tests tools/peers.py's time to the best peer's P@1 on hand-written rows and run
directories (the peers themselves are opt-in, never installed by the tests)."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import peers  # noqa: E402


def epoch(n, seconds, p1=None):
    x = {"epoch": n, "epoch_seconds": seconds}
    if p1 is not None:
        x["metrics"] = {"P@1": p1}
    return x


class TimeToReachTest(unittest.TestCase):
    def test_sums_epoch_seconds_up_to_the_first_epoch_at_the_target(self):
        lines = [epoch(1, 10.0, 0.5), {"config_change": {"lr": 1}}, epoch(2, 12.0),
                 epoch(3, 11.0, 0.70), epoch(4, 9.0, 0.72)]
        self.assertEqual(peers.time_to_reach(lines, "P@1", 0.70), (33.0, 3))
        self.assertEqual(peers.time_to_reach(lines, "P@1", 0.71), (42.0, 4))
        self.assertIsNone(peers.time_to_reach(lines, "P@1", 0.73))
        self.assertIsNone(peers.time_to_reach([], "P@1", 0.1))


class TimeToPeerTest(unittest.TestCase):
    def test_ratio_to_the_best_peer_and_runs_that_never_reach_it(self):
        with tempfile.TemporaryDirectory() as d:
            runs = []
            for name, lines in (("fast", [epoch(1, 20.0, 0.60), epoch(2, 20.0, 0.75)]),
                                ("slow", [epoch(1, 30.0, 0.65)])):
                os.makedirs(os.path.join(d, name))
                with open(os.path.join(d, name, "metrics.jsonl"), "w") as f:
                    f.write("".join(json.dumps(x) + "\n" for x in lines))
                runs.append({"name": name, "kind": "xmctrain", "run_dir": os.path.join(d, name),
                             "status": "ok"})
            rows = [{"name": "A", "kind": "peer", "status": "ok", "metrics": {"P@1": 0.70},
                     "train_seconds": 8.0},
                    {"name": "B", "kind": "peer", "status": "ok", "metrics": {"P@1": 0.72},
                     "train_seconds": 10.0},
                    {"name": "C", "kind": "peer", "status": "failed"}] + runs
            table = peers.time_to_peer(rows)
            self.assertIn("B: 72.00, trained in 10.0 s", table)
            self.assertIn("| fast | 2 | 40.0 | 4.0x |", table)
            self.assertIn("| slow | not reached (best 65.00) | – | – |", table)
            self.assertEqual(runs[0]["time_to_best_peer"]["ratio"], 4.0)
            self.assertIsNone(runs[1]["time_to_best_peer"]["seconds"])
            # Without a peer or a run there is nothing to compare.
            self.assertEqual(peers.time_to_peer(runs), "")


if __name__ == "__main__":
    unittest.main()
