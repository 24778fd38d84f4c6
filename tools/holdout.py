#!/usr/bin/python3
"""Splits an XC training file into a training part and a validation part, so that recipes
and defaults are chosen on data the test split never sees (issue 42: "tune on train splits,
report test splits").

    /usr/bin/python3 tools/holdout.py datasets/wordnet/train.txt --out datasets/wordnet/holdout
    # writes datasets/wordnet/holdout/train.txt and valid.txt (20% of the points, seed 1)

The input is XC's combined text format (a header "points features labels", then one point
a line: comma-separated labels, a space, feature:value pairs). Every point line is copied
byte for byte into one of the two files, each with its own header (the feature and label
counts of the input, so a model trained on the one part scores the other). The split is a
fixed-seed permutation (tools/xcbuild.py's split, the one the dataset builders use): the
same input, share and seed give byte-identical files. The files are written into a
temporary folder beside OUT and moved into OUT only when both are complete; bad input
(a malformed header, a point count that does not match it) exits 2 naming the file and line
and leaves nothing behind.
"""
import argparse
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import xcbuild  # noqa: E402  (pins BLAS to one thread before numpy)


def read_xc(path):
    """(header counts (points, features, labels), the point lines with their newlines)."""
    with open(path, "r", encoding="ascii", newline="") as f:
        head = f.readline()
        parts = head.split()
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            raise xcbuild.InputError(
                f"{path}:1: expected the XC header 'points features labels' (three "
                f"non-negative integers), got {head.strip()!r}")
        n, d, l = (int(p) for p in parts)
        lines = []
        for i, line in enumerate(f, start=2):
            if not line.endswith("\n"):
                line += "\n"
            lines.append(line)
            if len(lines) > n:
                raise xcbuild.InputError(
                    f"{path}:{i}: more point lines than the header's {n}")
    if len(lines) != n:
        raise xcbuild.InputError(
            f"{path}:{len(lines) + 1}: the header announces {n} points, the file has {len(lines)}")
    return (n, d, l), lines


def holdout(path, out, share, seed):
    (n, d, l), lines = read_xc(path)
    if not 0.0 < share < 1.0:
        raise xcbuild.InputError(f"--share {share}: expected a fraction in (0, 1)")
    keep, held = xcbuild.split(n, 1.0 - share, seed)
    tmp = f"{out.rstrip('/')}.tmp.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        for name, rows in (("train.txt", keep), ("valid.txt", held)):
            with open(os.path.join(tmp, name), "w", encoding="ascii", newline="") as f:
                f.write(f"{len(rows)} {d} {l}\n")
                f.writelines(lines[r] for r in rows)
        os.makedirs(out, exist_ok=True)
        for name in ("train.txt", "valid.txt"):
            os.replace(os.path.join(tmp, name), os.path.join(out, name))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return len(keep), len(held)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("train", help="an XC training file (combined text format)")
    p.add_argument("--out", required=True,
                   help="folder for train.txt (the kept part) and valid.txt (the held-out part)")
    p.add_argument("--share", type=float, default=0.2,
                   help="fraction of the points held out for validation (default 0.2)")
    p.add_argument("--seed", type=int, default=1, help="permutation seed (default 1)")
    a = p.parse_args(argv)
    try:
        kept, held = holdout(a.train, a.out, a.share, a.seed)
    except (xcbuild.InputError, OSError, UnicodeDecodeError) as e:
        print(f"holdout: {e}", file=sys.stderr)
        return 2
    print(f"holdout: {a.out}: {kept} training / {held} validation points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
