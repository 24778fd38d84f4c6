#!/usr/bin/python3
"""Curves of training runs: P@k against training time, one curve per run (matplotlib).

    tools/plot_curves.py --out FILE.png [--metric P@1[,P@3,...]] [--points FILE]
                         [--title T] [--logx] RUN [RUN ...]

RUN takes what `xmctrain report` takes: a run directory (written by `xmctrain train`), a
directory holding run directories (searched one level down), or a glob pattern; NAME=RUN_DIR
names the curve (default: the run directory's path below the runs' common parent). Each
run's metrics.jsonl has one record per epoch; the x axis is cumulative training seconds
(each record's epoch_seconds: evaluation excluded), and a point is drawn for every evaluated
epoch. Runs without results.json are drawn as far as they got and labelled "(incomplete)" or
"(failed)". A run with no evaluated epoch is reported on stderr and not drawn.

The image format follows the name: .png (150 dpi) or .svg. Several metrics (--metric
P@1,P@5) give one panel each. A Markdown table of every plotted point goes to stdout.

--points FILE adds labelled reference points (e.g. published results of other methods),
drawn as markers with their label, in every panel whose metric they give:
  JSON: [{"label": "Method X", "seconds": 5400, "P@1": 0.47, "P@5": 0.39}, ...]
        (or {"points": [...]}); "seconds" is the training time (x), optional "note" is
        appended to the label. A `tools/peers.py --json` file is read as it is: each
        peer that ran is a point (its name, training seconds and scored metrics).
  CSV:  a header row "label,seconds,P@1,P@5" (metric columns as wanted), one point per
        row; an empty cell means the point has no value for that metric.

Needs Debian's python3-matplotlib (tools/setup.sh installs it). Exit codes: 0 done, 2 bad
arguments or input files (the message names the file, and the line or entry).
"""
import argparse
import csv
import glob
import json
import math
import os
import sys

RUN_FILES = ("config.resolved.yaml", "metrics.jsonl", "results.json", "checkpoint.h5",
             "failed.txt")
SUFFIXES = {".png": "png", ".svg": "svg"}


class InputError(Exception):
    """Bad arguments or input files: exit code 2."""


def is_run_dir(path):
    return any(os.path.exists(os.path.join(path, f)) for f in RUN_FILES)


def find_runs(specs):
    """(name or None, run dir) in argument order; same rules as `xmctrain report`."""
    runs, seen = [], {}

    def add(name, path):
        key = os.path.realpath(path)
        if key not in seen:
            seen[key] = len(runs)
            runs.append((name, path))
        elif name:  # NAME=RUN_DIR names a run that a glob or parent already listed
            runs[seen[key]] = (name, runs[seen[key]][1])

    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or os.path.exists(spec):
            name, path = None, spec
        if any(c in path for c in "*?["):
            matches = sorted(glob.glob(path))
            if not matches:
                raise InputError(f"no file matches '{path}'")
        elif not os.path.exists(path):
            raise InputError(f"'{path}' does not exist")
        else:
            matches = [path]
        for m in matches:
            if not os.path.isdir(m):
                warn(f"'{m}' is not a directory; skipped")
            elif is_run_dir(m):
                add(name, m)
            else:
                children = [os.path.join(m, c) for c in sorted(os.listdir(m))]
                found = [c for c in children if os.path.isdir(c) and is_run_dir(c)]
                if not found:
                    warn(f"'{m}' holds no run files and no run directories; skipped")
                for c in found:
                    add(None, c)
    if not runs:
        raise InputError("no run directory found in " + " ".join(specs))
    return runs


def warn(msg):
    print(f"warning: {msg}", file=sys.stderr)


def load_curve(run_dir, metrics):
    """[(epoch, cumulative train seconds, {metric: value})] of the evaluated epochs."""
    path = os.path.join(run_dir, "metrics.jsonl")
    points, t = [], 0.0
    if not os.path.exists(path):
        return points
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for line_no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            if "config_change" in rec:  # --resume --allow-config-change, not an epoch
                continue
            t += float(rec["epoch_seconds"])
            values = rec.get("metrics", {})
            got = {m: float(values[m]) for m in metrics if m in values}
            if got:
                points.append((int(rec["epoch"]), t, got))
        except (ValueError, KeyError, TypeError) as e:
            if line_no >= len(lines) - 1:  # a killed run's cut last line
                warn(f"{path}:{line_no}: incomplete last record skipped")
                continue
            raise InputError(f"{path}:{line_no}: expected a JSON record with epoch, "
                             f"epoch_seconds, metrics: {e}") from e
    return points


def run_state(run_dir):
    if os.path.exists(os.path.join(run_dir, "failed.txt")):
        return "failed"
    if not os.path.exists(os.path.join(run_dir, "results.json")):
        return "incomplete"
    return "complete"


def default_names(runs):
    dirs = [os.path.abspath(d) for _, d in runs]
    if len(dirs) == 1:
        return [os.path.basename(dirs[0].rstrip(os.sep)) or dirs[0]]
    common = os.path.commonpath(dirs)
    return [os.path.relpath(d, common) for d in dirs]


def number(value, where):
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{where}: '{value}' is not a number") from None
    if not math.isfinite(x):
        raise InputError(f"{where}: '{value}' is not a finite number")
    return x


def peer_points(rows, path):
    """The peers' rows of a `tools/peers.py --json` file as points: label = the peer's name,
    seconds = its training time, its metrics as scored by `xmctrain eval --predictions`.
    xmctrain rows are left out (draw their run directories as curves instead), and so are
    peers that failed (no metrics)."""
    points = []
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise InputError(f"{path}: row {i}: expected an object")
        if r.get("kind") != "peer" or r.get("status") != "ok":
            continue
        if "name" not in r or "train_seconds" not in r or not isinstance(r.get("metrics"), dict):
            raise InputError(f"{path}: row {i}: a peer row needs name, train_seconds and metrics")
        points.append({"label": r["name"], "seconds": r["train_seconds"], **r["metrics"]})
    return points


def load_points(path, metrics):
    """[(label, seconds, {metric: value})] from a JSON or CSV file (see --help)."""
    if not os.path.exists(path):
        raise InputError(f"--points: '{path}' does not exist")
    out = []
    if path.endswith(".json"):
        with open(path, encoding="utf-8") as f:
            try:
                data = json.load(f)
            except ValueError as e:
                raise InputError(f"{path}: {e}") from e
        if isinstance(data, dict) and isinstance(data.get("rows"), list):
            data = peer_points(data["rows"], path)
        elif isinstance(data, dict):
            data = data.get("points")
        if not isinstance(data, list):
            raise InputError(f"{path}: expected a list of points or {{\"points\": [...]}}")
        for i, p in enumerate(data):
            where = f"{path}: point {i}"
            if not isinstance(p, dict) or "label" not in p or "seconds" not in p:
                raise InputError(f"{where}: expected an object with label and seconds")
            label = str(p["label"]) + (f" ({p['note']})" if p.get("note") else "")
            values = {m: number(p[m], f"{where} {m}") for m in metrics if p.get(m) is not None}
            out.append((label, number(p["seconds"], f"{where} seconds"), values))
    elif path.endswith(".csv"):
        with open(path, encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            if not reader.fieldnames or not {"label", "seconds"} <= set(reader.fieldnames):
                raise InputError(f"{path}:1: the header must name label and seconds")
            for row in reader:
                where = f"{path}:{reader.line_num}"
                values = {m: number(row[m], f"{where} {m}") for m in metrics
                          if (row.get(m) or "").strip()}
                out.append((row["label"], number(row["seconds"], f"{where} seconds"), values))
    else:
        raise InputError(f"--points: '{path}' must end in .json or .csv")
    for label, _, values in out:
        if not values:
            warn(f"{path}: point '{label}' has none of {', '.join(metrics)}; not drawn")
    return out


def plot(curves, points, metrics, title, logx, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(metrics), figsize=(6.4 * len(metrics), 4.4), squeeze=False)
    markers = "osD^vP*Xh"
    for ax, metric in zip(axes[0], metrics):
        for name, pts in curves:
            xs = [t for _, t, v in pts if metric in v]
            ys = [v[metric] for _, t, v in pts if metric in v]
            if xs:
                ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.5, label=name)
        for i, (label, seconds, values) in enumerate(points):
            if metric in values:
                ax.plot([seconds], [values[metric]], linestyle="none", color="black",
                        marker=markers[i % len(markers)], markersize=7, label=label)
                ax.annotate(label, (seconds, values[metric]), textcoords="offset points",
                            xytext=(6, 4), fontsize="small")
        ax.set_xlabel("cumulative training time (s)")
        ax.set_ylabel(metric)
        if logx:
            ax.set_xscale("log")
        ax.grid(True, alpha=0.3)
        ax.set_title(f"{metric} against training time" if not title else
                     (title if len(metrics) == 1 else f"{title}: {metric}"))
        ax.legend(fontsize="small")
    fig.tight_layout()
    fmt = SUFFIXES[os.path.splitext(out)[1].lower()]
    tmp = f"{out}.tmp.{os.getpid()}"
    try:
        fig.savefig(tmp, format=fmt, dpi=150)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
        plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="image to write: FILE.png or FILE.svg")
    ap.add_argument("--metric", default="P@1",
                    help="metric(s) of metrics.jsonl to plot, comma-separated (default P@1)")
    ap.add_argument("--points", help="labelled reference points, JSON or CSV (see above)")
    ap.add_argument("--title", default="")
    ap.add_argument("--logx", action="store_true", help="logarithmic time axis")
    ap.add_argument("runs", nargs="+", metavar="RUN")
    a = ap.parse_args(argv)
    try:
        if os.path.splitext(a.out)[1].lower() not in SUFFIXES:
            raise InputError(f"--out: '{a.out}' must end in .png or .svg")
        out_dir = os.path.dirname(os.path.abspath(a.out))
        if not os.path.isdir(out_dir):
            raise InputError(f"--out: directory '{out_dir}' does not exist")
        metrics = [m.strip() for m in a.metric.split(",") if m.strip()]
        if not metrics:
            raise InputError("--metric: no metric given")
        runs = find_runs(a.runs)
        names = default_names(runs)
        curves = []
        for (given, run_dir), default in zip(runs, names):
            name = given or default
            state = run_state(run_dir)
            if state != "complete":
                name += f" ({state})"
            pts = load_curve(run_dir, metrics)
            if not pts:
                warn(f"{run_dir}: no evaluated epoch with {', '.join(metrics)}; not plotted")
                continue
            curves.append((name, pts))
        points = load_points(a.points, metrics) if a.points else []
        if not curves and not any(v for _, _, v in points):
            raise InputError("nothing to plot: no run has an evaluated epoch with "
                             + ", ".join(metrics))
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        plot(curves, points, metrics, a.title, a.logx, a.out)
    except ImportError as e:
        print(f"error: {e}: install Debian's python3-matplotlib (tools/setup.sh)",
              file=sys.stderr)
        return 1
    print("| run | epoch | cumulative train s | " + " | ".join(metrics) + " |")
    print("|---|---:|---:|" + "---:|" * len(metrics))
    for name, pts in curves:
        for e, t, v in pts:
            cells = " | ".join(f"{v[m]:.4f}" if m in v else "" for m in metrics)
            print(f"| {name} | {e} | {t:.1f} | {cells} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
