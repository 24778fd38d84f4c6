#!/usr/bin/python3
"""Ensemble of xmctrain runs: a weighted sum of their scores, written as a run directory.

    /usr/bin/python3 tools/ensemble.py --out runs/wordnet-ensemble \\
        --data datasets/wordnet/test.txt --train datasets/wordnet/train.txt \\
        runs/wordnet-dense:0.3 runs/wordnet-anns:0.7

Each member RUN_DIR:WEIGHT is a complete run (results.json, checkpoint.h5). `xmctrain
predict` writes each member's top --candidates labels of every --data point; the fused score
of a label is the weighted sum of the members' scores (logits), a label missing from a
member's list counting as that list's lowest score (an upper bound of its real score: with
--candidates well above --k the fused top-k rarely depends on it). The top --k fused labels
are scored by `xmctrain eval --predictions` (the same metric code as the runs).

--out becomes a run directory that `xmctrain report`-like readers and tools/peers.py take:
predictions.txt, results.json (metrics; train_seconds = the members' sum; predict_seconds =
their predict times plus the fusion; peak_rss_bytes = the largest member's or predict's;
output_layer_bytes = the members' sum; backend "ensemble(a+b)"), members.json. Written to a
temporary folder first: a failure leaves no partial run directory. Exit status 2 for bad
arguments or input (the message names the file and line).
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class InputError(Exception):
    pass


def member(spec):
    run, sep, weight = spec.rpartition(":")
    if not sep or not run:
        raise InputError(f"member '{spec}': expected RUN_DIR:WEIGHT")
    try:
        w = float(weight)
    except ValueError:
        raise InputError(f"member '{spec}': weight '{weight}' is not a number") from None
    if not w > 0:
        raise InputError(f"member '{spec}': the weight must be > 0")
    for f in ("results.json", "checkpoint.h5"):
        if not os.path.isfile(os.path.join(run, f)):
            raise InputError(f"member '{spec}': {run} has no {f} (not a complete run)")
    return run, w


def read_predictions(path):
    """XC predictions (header 'N L', rows of label:score) -> (N, L, [dict label -> score])."""
    with open(path, encoding="utf-8") as f:
        head = f.readline().split()
        if len(head) != 2:
            raise InputError(f"{path}:1: expected the header 'N L'")
        n, labels = int(head[0]), int(head[1])
        rows = []
        for line_no, line in enumerate(f, start=2):
            row = {}
            for tok in line.split():
                label, sep, score = tok.partition(":")
                try:
                    row[int(label)] = float(score)
                except ValueError:
                    raise InputError(f"{path}:{line_no}: expected label:score, got '{tok}'") from None
                if not sep:
                    raise InputError(f"{path}:{line_no}: expected label:score, got '{tok}'")
            rows.append(row)
    if len(rows) != n:
        raise InputError(f"{path}: the header says {n} rows, the file has {len(rows)}")
    return n, labels, rows


def fuse(members, k):
    """members: [(weight, rows)] with rows aligned; returns the fused top-k rows."""
    out = []
    for i in range(len(members[0][1])):
        fused = {}
        for _, rows in members:
            for label in rows[i]:
                fused[label] = 0.0
        for w, rows in members:
            row = rows[i]
            floor = min(row.values()) if row else 0.0
            for label in fused:
                fused[label] += w * row.get(label, floor)
        out.append(sorted(fused.items(), key=lambda t: (-t[1], t[0]))[:k])
    return out


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:2])} failed (exit {r.returncode}): {r.stderr.strip()}")
    return r.stdout


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("members", nargs="+", metavar="RUN_DIR:WEIGHT")
    p.add_argument("--out", required=True, help="run directory to write")
    p.add_argument("--data", required=True, help="XC combined file to predict and score (test)")
    p.add_argument("--train", required=True, help="XC combined training file (propensities)")
    p.add_argument("--k", type=int, default=5, help="labels kept and scored per point")
    p.add_argument("--candidates", type=int, default=100,
                   help="labels each member predicts per point (>= k)")
    p.add_argument("--binary", default=None,
                   help="xmctrain binary (default: build-nocuda/app/xmctrain, else build/app/xmctrain)")
    a = p.parse_args(argv)
    try:
        if a.k < 1 or a.candidates < a.k:
            raise InputError(f"--k {a.k} and --candidates {a.candidates}: need 1 <= k <= candidates")
        if len(a.members) < 2:
            raise InputError("an ensemble needs at least two members")
        members = [member(m) for m in a.members]
        for path in (a.data, a.train):
            if not os.path.isfile(path):
                raise InputError(f"{path}: no such file")
        if os.path.exists(a.out):
            raise InputError(f"--out {a.out} exists; remove it first")
        binary = a.binary or next(
            (b for b in (os.path.join(ROOT, "build-nocuda/app/xmctrain"),
                         os.path.join(ROOT, "build/app/xmctrain")) if os.path.exists(b)), None)
        if not binary:
            raise InputError("no xmctrain binary: build it (tools/build.sh) or pass --binary")
        parent = os.path.dirname(os.path.abspath(a.out))
        if not os.path.isdir(parent):
            raise InputError(f"--out: {parent} does not exist")
        tmp = tempfile.mkdtemp(prefix=".ensemble.", dir=parent)
        try:
            results, loaded, predict_s = [], [], 0.0
            for i, (run_dir, w) in enumerate(members):
                with open(os.path.join(run_dir, "results.json"), encoding="utf-8") as f:
                    results.append(json.load(f))
                pred = os.path.join(tmp, f"member{i}.txt")
                t0 = time.perf_counter()
                run([binary, "predict", "--checkpoint", os.path.join(run_dir, "checkpoint.h5"),
                     "--data", a.data, "--k", str(a.candidates), "--out", pred])
                predict_s += time.perf_counter() - t0
                loaded.append((w, read_predictions(pred)))
            shapes = {(n, labels) for _, (n, labels, _) in loaded}
            if len(shapes) != 1:
                raise InputError(f"the members' predictions differ in shape: {sorted(shapes)}")
            n, labels = shapes.pop()
            t0 = time.perf_counter()
            total = sum(w for w, _ in loaded)
            top = fuse([(w / total, rows) for w, (_, _, rows) in loaded], a.k)
            pred = os.path.join(tmp, "predictions.txt")
            with open(pred, "w", encoding="utf-8") as f:
                f.write(f"{n} {labels}\n")
                for row in top:
                    f.write(" ".join(f"{label}:{score:.7g}" for label, score in row) + "\n")
            predict_s += time.perf_counter() - t0
            metrics = json.loads(run([binary, "eval", "--predictions", pred, "--data", a.data,
                                      "--train", a.train, "--k", str(a.k), "--json"]))["metrics"]
            rss = max([r.get("peak_rss_bytes") or 0 for r in results] +
                      [resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024])
            backends = "+".join(str(r.get("backend")) for r in results)
            out = {"backend": f"ensemble({backends})", "device": "cpu", "metrics": metrics,
                   "train_seconds": sum(r.get("train_seconds") or 0.0 for r in results),
                   "predict_seconds": predict_s, "peak_rss_bytes": rss,
                   "output_layer_bytes": sum(r.get("output_layer_bytes") or 0 for r in results),
                   "epochs": None, "threads": results[0].get("threads"),
                   "test_points": n, "num_labels": labels}
            with open(os.path.join(tmp, "results.json"), "w", encoding="utf-8") as f:
                json.dump(out, f, indent=1)
                f.write("\n")
            with open(os.path.join(tmp, "members.json"), "w", encoding="utf-8") as f:
                json.dump({"members": [{"run_dir": r, "weight": w} for r, w in members],
                           "k": a.k, "candidates": a.candidates, "data": a.data}, f, indent=1)
                f.write("\n")
            for i in range(len(members)):
                os.remove(os.path.join(tmp, f"member{i}.txt"))
            os.replace(tmp, a.out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        print(f"ensemble {backends}: P@1 {100 * metrics['P@1']:.2f}, P@5 {100 * metrics['P@5']:.2f}, "
              f"PSP@5 {100 * metrics['PSP@5']:.2f}; train {out['train_seconds']:.1f} s "
              f"(members' sum), predict {predict_s:.1f} s -> {a.out}")
        return 0
    except (InputError, RuntimeError) as e:
        print(f"ensemble.py: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
