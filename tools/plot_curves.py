#!/usr/bin/env python3
"""Time-to-accuracy curves from training runs, as an SVG plot and a Markdown table.

    tools/plot_curves.py --out curves.svg [--metric P@1] [--title T] NAME=RUN_DIR ...

RUN_DIR is a `xmctrain train --out` directory: its metrics.jsonl has one record per
evaluated epoch (epoch_seconds = training time of that epoch, evaluation excluded). The
x axis is cumulative training seconds. Standard library only (no matplotlib needed).
"""
import argparse
import json
import os
import sys
from xml.sax.saxutils import escape

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf"]


def load(run_dir, metric):
    path = os.path.join(run_dir, "metrics.jsonl")
    points, t = [], 0.0
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                if "config_change" in rec:  # --resume --allow-config-change, not an epoch
                    continue
                t += float(rec["epoch_seconds"])
                if metric in rec.get("metrics", {}):
                    points.append((rec["epoch"], t, float(rec["metrics"][metric])))
            except (ValueError, KeyError) as e:
                sys.exit(f"{path}:{line_no}: expected a JSON record with epoch, epoch_seconds, "
                         f"metrics: {e}")
    if not points:
        sys.exit(f"{path}: no record has metric {metric}")
    return points


def svg(curves, metric, title, width=720, height=420):
    left, right, top, bottom = 70, 170, 40, 50
    xmax = max(t for _, pts in curves for _, t, _ in pts) * 1.05
    ymax = max(v for _, pts in curves for _, _, v in pts) * 1.1
    sx = lambda t: left + (width - left - right) * t / xmax
    sy = lambda v: height - bottom - (height - top - bottom) * v / ymax
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="22" text-anchor="middle" font-size="14">{escape(title)}</text>']
    for i in range(6):  # grid and tick labels
        t, v = xmax * i / 5, ymax * i / 5
        out.append(f'<line x1="{sx(t):.1f}" y1="{top}" x2="{sx(t):.1f}" y2="{height - bottom}" '
                   'stroke="#ddd"/>')
        out.append(f'<text x="{sx(t):.1f}" y="{height - bottom + 16}" text-anchor="middle">'
                   f'{t:.0f}</text>')
        out.append(f'<line x1="{left}" y1="{sy(v):.1f}" x2="{width - right}" y2="{sy(v):.1f}" '
                   'stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{sy(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
    out.append(f'<text x="{(left + width - right) / 2}" y="{height - 12}" text-anchor="middle">'
               'cumulative training time (s)</text>')
    out.append(f'<text x="18" y="{(top + height - bottom) / 2}" text-anchor="middle" '
               f'transform="rotate(-90 18 {(top + height - bottom) / 2})">{escape(metric)}</text>')
    for k, (name, pts) in enumerate(curves):
        c = COLORS[k % len(COLORS)]
        path = " ".join(f"{sx(t):.1f},{sy(v):.1f}" for _, t, v in [(0, 0.0, 0.0)] + pts)
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" points="{path}"/>')
        for _, t, v in pts:
            out.append(f'<circle cx="{sx(t):.1f}" cy="{sy(v):.1f}" r="3" fill="{c}"/>')
        y = top + 18 * k + 10
        out.append(f'<line x1="{width - right + 12}" y1="{y}" x2="{width - right + 32}" y2="{y}" '
                   f'stroke="{c}" stroke-width="2"/>')
        out.append(f'<text x="{width - right + 38}" y="{y + 4}">{escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="SVG file to write")
    ap.add_argument("--metric", default="P@1")
    ap.add_argument("--title", default="")
    ap.add_argument("runs", nargs="+", metavar="NAME=RUN_DIR")
    a = ap.parse_args()
    curves = []
    for spec in a.runs:
        name, sep, run_dir = spec.partition("=")
        if not sep:
            sys.exit(f"expected NAME=RUN_DIR, got '{spec}'")
        curves.append((name, load(run_dir, a.metric)))
    tmp = a.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(svg(curves, a.metric, a.title or f"{a.metric} against training time"))
    os.replace(tmp, a.out)
    print(f"| run | epoch | cumulative train s | {a.metric} |")
    print("|---|---:|---:|---:|")
    for name, pts in curves:
        for e, t, v in pts:
            print(f"| {name} | {e} | {t:.1f} | {v:.4f} |")


if __name__ == "__main__":
    main()
