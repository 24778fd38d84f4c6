#!/usr/bin/python3
"""Build the WordNet noun-hypernym dataset (a real XC dataset) from Debian's wordnet-base.

    /usr/bin/python3 tools/build_wordnet.py            # writes datasets/wordnet/ (~1 minute)

Every WordNet 3.0 noun synset in data.noun is a point. Its text is its words (underscores
as blanks) and its gloss; its labels are all its hypernym ancestors, transitive over the
hypernym (@) and instance-hypernym (@i) pointers, minus the most general ones: an ancestor
of more than --max-label-share of all noun synsets (5%: entity, object, person, ...) is not
a label. Synsets left without a label (entity and the top of the hierarchy) are dropped.
Label ids are the kept ancestors in order of their synset offset.

A fixed-seed permutation splits the points 70/30 (each split in offset order). The tf-idf
vocabulary and idf are fitted on the training split only (words in at least --min-df
training texts; rows L2-normalised); LSA is a TruncatedSVD of the training tf-idf with a
fixed random_state, rows L2-normalised, float32.

Outputs (in --out; written to a temporary folder and moved into place, so a failed build
leaves no partial dataset):
  train.txt, test.txt           XC combined format (tf-idf features + labels)
  trn_X.npy, tst_X.npy          LSA embeddings (float32, N x --lsa-dim)
  trn_X_Y.txt, tst_X_Y.txt      XC label files for the .npy features
  trn_ids.txt, tst_ids.txt      synset offset and first word of each row
  labels.txt                    synset offset and first word of each label id
  wordnet.json                  parameters, counts and the sha256 of every file above

Deterministic: the same inputs and options give byte-identical files (BLAS runs on one
thread so that the SVD does not depend on the thread count). Needs python3-numpy,
python3-scipy, python3-sklearn and wordnet-base (tools/setup.sh installs them).
Exit status 2 for bad input (a malformed data.noun line names file:line). The split,
tf-idf, LSA, writers and the all-or-nothing output folder are tools/xcbuild.py's, shared
with tools/build_gcide.py.
"""

import argparse
import os
import sys
import time

import xcbuild  # first: it pins BLAS to one thread before numpy is imported
from xcbuild import InputError


def parse_data_noun(path):
    """Returns {offset: (words, gloss, hypernym offsets)} in file order."""
    synsets = {}
    with open(path, encoding="utf-8", errors="strict") as f:
        for lineno, line in enumerate(f, 1):
            if line.startswith("  ") or not line.strip():
                continue  # the licence header lines start with two blanks
            where = f"{path}:{lineno}"
            data, sep, gloss = line.rstrip("\r\n").partition(" | ")
            if not sep:
                data = data.rstrip()
            tok = data.split()
            try:
                offset = tok[0]
                if tok[2] not in ("n",):
                    raise InputError(f"{where}: synset type {tok[2]!r}, expected 'n'")
                nwords = int(tok[3], 16)
                words = [tok[4 + 2 * i] for i in range(nwords)]
                i = 4 + 2 * nwords
                nptr = int(tok[i])
                i += 1
                hypernyms = []
                for _ in range(nptr):
                    symbol, target, pos = tok[i], tok[i + 1], tok[i + 2]
                    i += 4
                    if symbol in ("@", "@i") and pos == "n":
                        hypernyms.append(target)
            except (IndexError, ValueError) as e:
                raise InputError(f"{where}: malformed synset line ({e})") from None
            if offset in synsets:
                raise InputError(f"{where}: synset {offset} appears twice")
            synsets[offset] = (words, gloss.strip(), hypernyms)
    for offset, (_, _, hypernyms) in synsets.items():
        for h in hypernyms:
            if h not in synsets:
                raise InputError(f"{path}: synset {offset} points to hypernym {h}, not in the file")
    return synsets


def ancestors_of(synsets):
    """Returns {offset: frozenset of all hypernym ancestors} (iterative, cycle-checked)."""
    anc = {}
    for root in synsets:
        stack = [(root, False)]
        on_path = set()
        while stack:
            node, done = stack.pop()
            if done:
                on_path.discard(node)
                s = set()
                for h in synsets[node][2]:
                    s.add(h)
                    s |= anc[h]
                anc[node] = frozenset(s)
                continue
            if node in anc:
                continue
            if node in on_path:
                raise InputError(f"hypernym cycle through synset {node}")
            on_path.add(node)
            stack.append((node, True))
            stack.extend((h, False) for h in synsets[node][2] if h not in anc)
    return anc


def build(args):
    t0 = time.time()
    synsets = parse_data_noun(args.data_noun)
    if not synsets:
        raise InputError(f"{args.data_noun}: no synsets")
    anc = ancestors_of(synsets)
    order = list(synsets)  # file order = offset order in data.noun
    count = {}
    for o in order:
        for a in anc[o]:
            count[a] = count.get(a, 0) + 1
    limit = args.max_label_share * len(order)
    removed = sorted((a for a, c in count.items() if c > limit), key=lambda a: -count[a])
    kept = sorted((a for a, c in count.items() if c <= limit), key=int)
    label_id = {a: i for i, a in enumerate(kept)}
    points = [o for o in order if any(a in label_id for a in anc[o])]
    labels = {o: sorted(label_id[a] for a in anc[o] if a in label_id) for o in points}

    itr, ite = xcbuild.split(len(points), args.train_share, args.seed)
    trn = [points[i] for i in itr]
    tst = [points[i] for i in ite]

    def text(o):
        words, gloss, _ = synsets[o]
        return " ".join(w.replace("_", " ") for w in words) + " " + gloss

    feats = xcbuild.tfidf_lsa([text(o) for o in trn], [text(o) for o in tst],
                              args.min_df, args.lsa_dim, args.seed)
    Ytr = [labels[o] for o in trn]
    Yte = [labels[o] for o in tst]
    L = len(kept)

    with xcbuild.Output(args.out) as out:
        out.write_xc(feats, Ytr, Yte, L)
        for name, ids in (("trn_ids.txt", trn), ("tst_ids.txt", tst), ("labels.txt", kept)):
            out.write_lines(name, (f"{o} {synsets[o][0][0]}" for o in ids))
        meta = {
            "source": os.path.abspath(args.data_noun),
            "source_sha256": xcbuild.sha256(args.data_noun),
            "options": {"seed": args.seed, "train_share": args.train_share,
                        "max_label_share": args.max_label_share, "min_df": args.min_df,
                        "lsa_dim": feats.lsa_dim},
            "synsets": len(order),
            "points": {"train": len(trn), "test": len(tst),
                       "without_label_dropped": len(order) - len(points)},
            "features": feats.n_features,
            "labels": L,
            **xcbuild.label_stats(Ytr, Yte, L),
            "removed_general_ancestors": [[synsets[a][0][0], count[a]] for a in removed],
            "lsa_explained_variance": round(float(feats.svd.explained_variance_ratio_.sum()), 4),
        }
        out.finish("wordnet.json", meta)
    meta["seconds"] = round(time.time() - t0, 1)
    return meta


def main():
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="See the module docstring (head of this file) and docs/benchmarks.md.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-noun", default="/usr/share/wordnet/data.noun",
                   help="WordNet data.noun (Debian package wordnet-base)")
    p.add_argument("--out", default="datasets/wordnet", help="output folder")
    p.add_argument("--seed", type=int, default=0, help="split and SVD seed")
    p.add_argument("--train-share", type=float, default=0.7)
    p.add_argument("--max-label-share", type=float, default=0.05,
                   help="drop ancestors of more than this share of all synsets")
    p.add_argument("--min-df", type=int, default=2,
                   help="keep words in at least this many training texts")
    p.add_argument("--lsa-dim", type=int, default=256, help="LSA embedding width")
    args = p.parse_args()
    if not 0 < args.train_share < 1 or not 0 < args.max_label_share <= 1:
        p.error("--train-share must be in (0,1) and --max-label-share in (0,1]")
    if args.lsa_dim < 1 or args.min_df < 1:
        p.error("--lsa-dim and --min-df must be positive")
    if not os.path.isfile(args.data_noun):
        print(f"build_wordnet: {args.data_noun} not found (install wordnet-base: "
              "bash tools/setup.sh)", file=sys.stderr)
        return 2
    try:
        meta = build(args)
    except InputError as e:
        print(f"build_wordnet: {e}", file=sys.stderr)
        return 2
    print(f"build_wordnet: {args.out}: {meta['points']['train']} train / "
          f"{meta['points']['test']} test points, {meta['features']} features, "
          f"{meta['labels']} labels, {meta['labels_per_point']} labels per point, "
          f"{meta['labels_with_at_most_5_train_points']:.0%} of labels with <= 5 training "
          f"points ({meta['seconds']} s)")
    for name, digest in meta["sha256"].items():
        print(f"  {digest}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
