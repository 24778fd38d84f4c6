#!/usr/bin/python3
"""Train the standard CPU peers on an XC train/test pair and score them with xmctrain's code.

    /usr/bin/python3 tools/peers.py --train datasets/wordnet/train.txt \\
        --test datasets/wordnet/test.txt [RUN_DIR ...] [--json runs/peers-wordnet.json]

Peers (installed from PyPI into a virtual environment, --venv, made with the system site
packages so that Debian's numpy/scipy serve where they fit; opt-in, never run by CI):
  napkinxc   napkinXC PLT (napkinxc.models.PLT, defaults)
  pecos      PECOS XR-Linear (PIFA label embedding, hierarchical k-means indexer,
             XLinearModel.train / predict with their defaults)
  omikuji    Omikuji (Parabel-like defaults, Model.default_hyper_param)

Each peer trains and predicts in a child process (the venv's python running this file
with --worker); train and predict times are measured there, peak RSS is the child's
ru_maxrss. Its top-k predictions are written in XC label:score format and scored by
`xmctrain eval --predictions --json` (the same metric code as xmctrain runs, propensities
from the training labels). A peer that fails to install or to run gets a row saying so.
RUN_DIRs are xmctrain run directories (results.json, metrics.jsonl): their final metrics,
train time, last evaluation time and peak RSS go into the same table; so do ensembles
written by tools/ensemble.py (train time: the members' sum).

Prints one Markdown table: P@1/3/5, PSP@1/3/5 (%), train s, predict s, peak RSS, and the
load average seen before and after (the times depend on what else the machine runs); then,
for the RUN_DIRs with a metrics.jsonl, the training time to the first evaluated epoch at or
above the peers' highest P@1, to the first at or above their highest PSP@5, and to the
first at or above both, with that last time's ratio to the training time of the peer with
the highest P@1 (give the runs train.eval_every: 1 so that every epoch is evaluated).
--json FILE writes the rows (for tools/plot_curves.py and the like).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

PEERS = {
    "napkinxc": ("napkinXC PLT", "napkinxc"),
    "pecos": ("PECOS XR-Linear", "libpecos"),
    "omikuji": ("Omikuji", "omikuji"),
}
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


# ---------------------------------------------------------------- worker (inside the venv)

def read_xc(path):
    """XC combined file -> (CSR float32 features, list of label lists, (N, D, L))."""
    import numpy as np
    import scipy.sparse as sp
    indptr, indices, data, labels = [0], [], [], []
    with open(path) as f:
        n, d, L = (int(x) for x in f.readline().split())
        for line in f:
            if not line.strip():
                continue
            head, _, rest = line.rstrip("\r\n").partition(" ")
            if ":" in head:  # a row without labels (should start with a blank)
                head, rest = "", line
            labels.append([int(x) for x in head.split(",") if x])
            for tok in rest.split():
                j, v = tok.split(":")
                indices.append(int(j))
                data.append(float(v))
            indptr.append(len(indices))
    X = sp.csr_matrix((np.asarray(data, np.float32), np.asarray(indices, np.int32),
                       np.asarray(indptr, np.int64)), shape=(n, d))
    return X, labels, (n, d, L)


def label_csr(labels, L):
    import numpy as np
    import scipy.sparse as sp
    indptr = np.cumsum([0] + [len(r) for r in labels])
    idx = np.asarray([l for r in labels for l in r], np.int32)
    return sp.csr_matrix((np.ones(len(idx), np.float32), idx, indptr), shape=(len(labels), L))


def worker(args):
    """Trains one peer, writes its top-k predictions, prints {train_s, predict_s}."""
    import numpy as np
    Xtr, Ytr, (_, d, L) = read_xc(args.train)
    Xte, _, _ = read_xc(args.test)
    k = args.k
    rows = []  # per test point: [(label, score), ...] best first
    if args.worker == "napkinxc":
        from napkinxc.models import PLT
        model_dir = tempfile.mkdtemp(prefix="napkinxc-")
        t0 = time.perf_counter()
        m = PLT(model_dir, threads=args.threads)
        m.fit(Xtr, Ytr)
        train_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        pred = m.predict_proba(Xte, top_k=k)
        predict_s = time.perf_counter() - t0
        rows = [[(int(l), float(s)) for l, s in r] for r in pred]
    elif args.worker == "pecos":
        from pecos.xmc import Indexer, LabelEmbeddingFactory
        from pecos.xmc.xlinear.model import XLinearModel
        Ycsr = label_csr(Ytr, L)
        t0 = time.perf_counter()
        feat = LabelEmbeddingFactory.create(Ycsr, Xtr, method="pifa", threads=args.threads)
        chain = Indexer.gen(feat, threads=args.threads)
        m = XLinearModel.train(Xtr, Ycsr, C=chain, threads=args.threads)
        train_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        P = m.predict(Xte, only_topk=k, threads=args.threads).tocsr()
        predict_s = time.perf_counter() - t0
        for r in range(P.shape[0]):
            lo, hi = P.indptr[r], P.indptr[r + 1]
            order = np.argsort(-P.data[lo:hi], kind="stable")
            rows.append([(int(P.indices[lo + i]), float(P.data[lo + i])) for i in order])
    elif args.worker == "omikuji":
        import omikuji
        t0 = time.perf_counter()
        hyper = omikuji.Model.default_hyper_param()
        m = omikuji.Model.train_on_data(args.train, hyper, n_threads=args.threads)
        train_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for r in range(Xte.shape[0]):
            lo, hi = Xte.indptr[r], Xte.indptr[r + 1]
            fv = list(zip(Xte.indices[lo:hi].tolist(), Xte.data[lo:hi].tolist()))
            rows.append([(int(l), float(s)) for l, s in m.predict(fv, top_k=k)])
        predict_s = time.perf_counter() - t0
    else:
        raise SystemExit(f"peers.py: unknown peer {args.worker}")
    tmp = args.pred + f".tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(f"{len(rows)} {L}\n")
        for r in rows:
            f.write(" ".join(f"{l}:{s:.6g}" for l, s in r) + "\n")
    os.replace(tmp, args.pred)
    print(json.dumps({"train_s": train_s, "predict_s": predict_s}))


# ---------------------------------------------------------------- driver (Debian python)

def ensure_venv(venv, packages, log):
    """Creates the venv if missing; installs each package; returns {package: error or None}."""
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        r = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv],
                           stdout=log, stderr=log)
        if r.returncode != 0 or not os.path.exists(py):
            # Every peer's row says why; the xmctrain rows are still scored and tabled.
            why = (f"python3 -m venv {venv} failed (exit {r.returncode}; Debian: apt-get install "
                   f"python3-venv; see {log.name})")
            print(f"peers: {why}", file=sys.stderr)
            return None, {pkg: why for pkg in packages}
    status = {}
    for pkg in packages:
        r = subprocess.run([py, "-m", "pip", "show", "-q", pkg], stdout=log, stderr=log)
        if r.returncode == 0:
            status[pkg] = None
            continue
        print(f"peers: pip install {pkg} (wheels only) ...", file=sys.stderr)
        r = subprocess.run([py, "-m", "pip", "install", "-q", "--only-binary=:all:", pkg],
                           stdout=log, stderr=log)
        status[pkg] = None if r.returncode == 0 else f"pip install {pkg} failed (see {log.name})"
    return py, status


def run_child(cmd, log):
    """Runs cmd; returns (exit status, stdout, peak RSS bytes of the child)."""
    with tempfile.TemporaryFile("w+") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=log)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        return p.returncode, out.read(), usage.ru_maxrss * 1024


def xmc_eval(binary, pred, train, test, k):
    r = subprocess.run([binary, "eval", "--predictions", pred, "--data", test, "--train", train,
                        "--k", str(k), "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"xmctrain eval --predictions failed: {r.stderr.strip()}")
    return json.loads(r.stdout)["metrics"]


def time_to_reach(lines, targets):
    """(training seconds, epoch) at the first evaluated epoch of a run's metrics.jsonl rows
    where every metric of `targets` ({metric: value}) is at least its value, summing
    epoch_seconds (evaluations excluded) up to it; None when no epoch reached them."""
    seconds = 0.0
    for x in lines:
        if "epoch_seconds" not in x:  # config_change records
            continue
        seconds += x["epoch_seconds"]
        m = x.get("metrics", {})
        if all(m.get(k, float("-inf")) >= v for k, v in targets.items()):
            return seconds, x["epoch"]
    return None


def time_to_peer(rows, metrics=("P@1", "PSP@5")):
    """Markdown table: the training time each xmctrain run took to reach the peers' highest
    value of each metric (each from its own best peer), and to reach all of them at once,
    with that time's ratio to the training time of the peer with the highest P@1 (the
    yardstick of issue 42); sets row["time_to_best_peer"]."""
    peers = [r for r in rows if r["kind"] == "peer" and r["status"] == "ok"]
    runs = [r for r in rows if r["kind"] == "xmctrain" and r.get("run_dir")
            and os.path.exists(os.path.join(r["run_dir"], "metrics.jsonl"))]
    if not peers or not runs:
        return ""
    ref = max(peers, key=lambda r: r["metrics"]["P@1"])
    best = {m: max(peers, key=lambda r: r["metrics"].get(m, float("-inf"))) for m in metrics}
    targets = {m: best[m]["metrics"][m] for m in metrics}
    out = ["Time to the peers' highest " + ", ".join(
               f"{m} ({best[m]['name']}: {100 * targets[m]:.2f})" for m in metrics) +
           f"; ratio to the training time of the peer with the highest P@1 ({ref['name']}, "
           f"{ref['train_seconds']:.1f} s):", "",
           "| run | " + " | ".join(f"{m}: epoch, train s" for m in metrics) +
           f" | all: epoch, train s | ratio to {ref['name']} |",
           "|---|" + "---:|" * (len(metrics) + 2)]
    for r in runs:
        with open(os.path.join(r["run_dir"], "metrics.jsonl")) as f:
            lines = [json.loads(x) for x in f if x.strip()]
        each = {m: time_to_reach(lines, {m: targets[m]}) for m in metrics}
        both = time_to_reach(lines, targets)
        r["time_to_best_peer"] = {
            "peer": ref["name"], "targets": targets,
            "seconds": {m: (h[0] if h else None) for m, h in each.items()},
            "all_seconds": both[0] if both else None,
            "ratio": both[0] / ref["train_seconds"] if both else None}

        def cell(m, hit):
            if hit:
                return f"{hit[1]}, {hit[0]:.1f}"
            top = max((x["metrics"].get(m, 0) for x in lines if "metrics" in x), default=0)
            return f"not reached (best {100 * top:.2f})"
        out.append(f"| {r['name']} | " + " | ".join(cell(m, each[m]) for m in metrics) + " | " +
                   (f"{both[1]}, {both[0]:.1f} | {both[0] / ref['train_seconds']:.1f}x |" if both
                    else "– | – |"))
    return "\n".join(out)


def run_row(run_dir):
    with open(os.path.join(run_dir, "results.json")) as f:
        res = json.load(f)
    predict_s = res.get("predict_seconds")  # tools/ensemble.py writes it; runs log evaluations
    mpath = os.path.join(run_dir, "metrics.jsonl")
    if os.path.exists(mpath):
        with open(mpath) as f:
            lines = [json.loads(x) for x in f if x.strip()]
        evals = [x["eval_seconds"] for x in lines if "eval_seconds" in x]
        predict_s = evals[-1] if evals else None
    return {"name": f"xmctrain {res.get('backend')} ({os.path.basename(os.path.normpath(run_dir))})",
            "kind": "xmctrain", "run_dir": run_dir, "backend": res.get("backend"),
            "metrics": res.get("metrics") or {}, "train_seconds": res.get("train_seconds"),
            "predict_seconds": predict_s, "peak_rss_bytes": res.get("peak_rss_bytes"),
            "output_layer_bytes": res.get("output_layer_bytes"),
            "epochs": res.get("epochs"), "threads": res.get("threads"), "status": "ok"}


def markdown(rows, k):
    def pct(m, key):
        return f"{100 * m[key]:.1f}" if key in m else "–"

    def num(x, f="{:.1f}"):
        return f.format(x) if isinstance(x, (int, float)) else "–"

    cols = [c for c in ("P@1", "P@3", "P@5", "PSP@1", "PSP@3", "PSP@5")
            if int(c.split("@")[1]) <= k]
    out = ["| system | " + " | ".join(cols) + " | train s | predict s | peak RSS MiB |",
           "|---|" + "---:|" * (len(cols) + 3)]
    for r in rows:
        if r["status"] != "ok":
            out.append(f"| {r['name']} | {r['status']} |" + " |" * (len(cols) + 2))
            continue
        m = r["metrics"]
        rss = r["peak_rss_bytes"] / 2**20 if r.get("peak_rss_bytes") else None
        out.append(f"| {r['name']} | " + " | ".join(pct(m, c) for c in cols) +
                   f" | {num(r['train_seconds'])} | {num(r['predict_seconds'])} | {num(rss, '{:.0f}')} |")
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 2)[2],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="*", metavar="RUN_DIR", help="xmctrain run directories")
    p.add_argument("--train", required=True, help="XC combined training file")
    p.add_argument("--test", required=True, help="XC combined test file")
    p.add_argument("--peers", default="napkinxc,pecos,omikuji",
                   help="comma-separated subset of napkinxc,pecos,omikuji ('' for none)")
    p.add_argument("--venv", default=os.path.join(ROOT, ".peers-venv"),
                   help="virtual environment for the peers (created on first use)")
    p.add_argument("--out", default=None,
                   help="folder for the peers' predictions and log (default: runs/peers-<train folder>)")
    p.add_argument("--json", default=None, help="also write the rows as JSON to this file")
    p.add_argument("--reuse", default=None, metavar="JSON",
                   help="take the peers' rows from an earlier --json file of the same "
                        "train/test pair instead of training them again (to add run dirs)")
    p.add_argument("--binary", default=None,
                   help="xmctrain binary (default: build-nocuda/app/xmctrain, else build/app/xmctrain)")
    p.add_argument("--threads", type=int, default=2, help="threads for every peer")
    p.add_argument("--k", type=int, default=5, help="top-k predicted and scored")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--pred", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)

    for path in (args.train, args.test):
        if not os.path.isfile(path):
            p.error(f"{path}: no such file")
    for run in args.runs:
        if not os.path.isfile(os.path.join(run, "results.json")):
            p.error(f"{run}: not an xmctrain run directory (no results.json)")
    peers = [x for x in args.peers.split(",") if x]
    for x in peers:
        if x not in PEERS:
            p.error(f"--peers: unknown peer {x!r} (known: {', '.join(PEERS)})")
    binary = args.binary or next(
        (b for b in (os.path.join(ROOT, "build-nocuda/app/xmctrain"),
                     os.path.join(ROOT, "build/app/xmctrain")) if os.path.exists(b)), None)
    if not binary or not os.path.exists(binary):
        p.error("no xmctrain binary: build it (tools/build.sh) or pass --binary")
    out = args.out or os.path.join(
        ROOT, "runs", "peers-" + os.path.basename(os.path.dirname(os.path.abspath(args.train))))
    os.makedirs(out, exist_ok=True)
    load_before = os.getloadavg()
    rows = []
    if args.reuse:
        with open(args.reuse) as f:
            old = json.load(f)
        if (os.path.abspath(old["train"]), os.path.abspath(old["test"])) != \
                (os.path.abspath(args.train), os.path.abspath(args.test)):
            p.error(f"--reuse {args.reuse}: rows of {old['train']} / {old['test']}")
        rows = [r for r in old["rows"] if r["kind"] == "peer"]
        load_before = old["load_before"]
        peers = []
    with open(os.path.join(out, "peers.log"), "a") as log:
        py, installed = ensure_venv(args.venv, [PEERS[x][1] for x in peers], log) if peers else (None, {})
        for x in peers:
            name = PEERS[x][0]
            if installed[PEERS[x][1]]:
                rows.append({"name": name, "kind": "peer", "status": installed[PEERS[x][1]]})
                continue
            pred = os.path.join(out, f"{x}.pred.txt")
            print(f"peers: {name} ...", file=sys.stderr)
            log.write(f"== {name}\n")
            log.flush()
            t0 = time.perf_counter()
            rc, stdout, rss = run_child([py, os.path.abspath(__file__), "--worker", x, "--train",
                                         args.train, "--test", args.test, "--pred", pred,
                                         "--k", str(args.k), "--threads", str(args.threads)], log)
            wall = time.perf_counter() - t0
            if rc != 0:
                rows.append({"name": name, "kind": "peer", "status": f"failed (exit {rc}, see {log.name})"})
                continue
            times = json.loads(stdout.strip().splitlines()[-1])
            try:
                metrics = xmc_eval(binary, pred, args.train, args.test, args.k)
            except RuntimeError as e:
                rows.append({"name": name, "kind": "peer", "status": str(e)})
                continue
            rows.append({"name": name, "kind": "peer", "metrics": metrics,
                         "train_seconds": times["train_s"], "predict_seconds": times["predict_s"],
                         "wall_seconds": wall, "peak_rss_bytes": rss, "threads": args.threads,
                         "predictions": pred, "status": "ok"})
            print(f"peers: {name}: P@1 {100 * metrics['P@1']:.1f}, train {times['train_s']:.1f} s",
                  file=sys.stderr)
    rows += [run_row(r) for r in args.runs]
    load_after = os.getloadavg()
    table = markdown(rows, args.k)
    print(table)
    to_peer = time_to_peer(rows)
    if to_peer:
        print("\n" + to_peer)
    print(f"\nLoad average (1/5/15 min) before: {' '.join(f'{x:.1f}' for x in load_before)}, "
          f"after: {' '.join(f'{x:.1f}' for x in load_after)}; {os.cpu_count()} cores; "
          f"peers with {args.threads} threads.")
    if args.json:
        tmp = args.json + f".tmp.{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump({"train": args.train, "test": args.test, "k": args.k,
                       "load_before": load_before, "load_after": load_after, "rows": rows}, f, indent=1)
            f.write("\n")
        os.replace(tmp, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
