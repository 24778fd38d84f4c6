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


def epoch(n, seconds, p1=None, psp5=None):
    x = {"epoch": n, "epoch_seconds": seconds}
    if p1 is not None:
        x["metrics"] = {"P@1": p1}
        if psp5 is not None:
            x["metrics"]["PSP@5"] = psp5
    return x


class TimeToReachTest(unittest.TestCase):
    def test_sums_epoch_seconds_up_to_the_first_epoch_at_the_target(self):
        lines = [epoch(1, 10.0, 0.5), {"config_change": {"lr": 1}}, epoch(2, 12.0),
                 epoch(3, 11.0, 0.70), epoch(4, 9.0, 0.72)]
        self.assertEqual(peers.time_to_reach(lines, {"P@1": 0.70}), (33.0, 3))
        self.assertEqual(peers.time_to_reach(lines, {"P@1": 0.71}), (42.0, 4))
        self.assertIsNone(peers.time_to_reach(lines, {"P@1": 0.73}))
        self.assertIsNone(peers.time_to_reach([], {"P@1": 0.1}))
        # Every target at once: the first epoch that reaches both.
        both = [epoch(1, 5.0, 0.8, 0.1), epoch(2, 5.0, 0.6, 0.3), epoch(3, 5.0, 0.8, 0.3)]
        self.assertEqual(peers.time_to_reach(both, {"P@1": 0.7, "PSP@5": 0.2}), (15.0, 3))


class TimeToPeerTest(unittest.TestCase):
    def test_ratio_to_the_best_peer_and_runs_that_never_reach_it(self):
        with tempfile.TemporaryDirectory() as d:
            runs = []
            for name, lines in (("fast", [epoch(1, 20.0, 0.60, 0.30), epoch(2, 20.0, 0.75, 0.31),
                                          epoch(3, 10.0, 0.76, 0.36)]),
                                ("slow", [epoch(1, 30.0, 0.65, 0.40)])):
                os.makedirs(os.path.join(d, name))
                with open(os.path.join(d, name, "metrics.jsonl"), "w") as f:
                    f.write("".join(json.dumps(x) + "\n" for x in lines))
                runs.append({"name": name, "kind": "xmctrain", "run_dir": os.path.join(d, name),
                             "status": "ok"})
            # B has the highest P@1 (the yardstick), A the highest PSP@5.
            rows = [{"name": "A", "kind": "peer", "status": "ok",
                     "metrics": {"P@1": 0.70, "PSP@5": 0.35}, "train_seconds": 8.0},
                    {"name": "B", "kind": "peer", "status": "ok",
                     "metrics": {"P@1": 0.72, "PSP@5": 0.33}, "train_seconds": 10.0},
                    {"name": "C", "kind": "peer", "status": "failed"}] + runs
            table = peers.time_to_peer(rows)
            self.assertIn("P@1 (B: 72.00), PSP@5 (A: 35.00)", table)
            self.assertIn("(B, 10.0 s)", table)
            self.assertIn("| fast | 2, 40.0 | 3, 50.0 | 3, 50.0 | 5.0x |", table)
            self.assertIn("| slow | not reached (best 65.00) | 1, 30.0 | – | – |", table)
            self.assertEqual(runs[0]["time_to_best_peer"]["ratio"], 5.0)
            self.assertEqual(runs[0]["time_to_best_peer"]["seconds"]["P@1"], 40.0)
            self.assertIsNone(runs[1]["time_to_best_peer"]["all_seconds"])
            # Without a peer or a run there is nothing to compare.
            self.assertEqual(peers.time_to_peer(runs), "")


if __name__ == "__main__":
    unittest.main()
