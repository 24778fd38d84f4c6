#!/usr/bin/python3
"""Tests tools/build_wordnet.py on the hand-written fixture fixtures/wordnet/data.noun.

    test_build_wordnet.py XMCTRAIN_BINARY SOURCE_DIR

Checks: two builds are byte-identical (and wordnet.json's checksums are those of the
files); the label sets are the transitive closure over @ and @i minus the ancestors of more
than --max-label-share of the synsets (hand-derived for dog, cat and Darwin, and closed for
every point); no point without a label; the split sizes; the XC and npy files are read by
`xmctrain info` with the builder's counts; bad input exits 2 and writes nothing.
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

binary, source = sys.argv[1], sys.argv[2]
builder = os.path.join(source, "tools", "build_wordnet.py")
fixture = os.path.join(source, "tests", "tools", "fixtures", "wordnet", "data.noun")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAILED:", what, file=sys.stderr)


def build(out, data_noun=fixture):
    return subprocess.run([sys.executable, builder, "--data-noun", data_noun, "--out", out,
                           "--max-label-share", "0.4", "--min-df", "1", "--lsa-dim", "4"],
                          capture_output=True, text=True)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def xc_labels(path):
    """Label rows of an XC combined file (first token of each row)."""
    with open(path) as f:
        header = f.readline().split()
        rows = [line.split(" ", 1)[0] for line in f if line.strip()]
    return [int(x) for x in header], [[int(l) for l in r.split(",") if l] for r in rows]


with tempfile.TemporaryDirectory() as tmp:
    a, b = os.path.join(tmp, "a"), os.path.join(tmp, "b")
    for out in (a, b):
        r = build(out)
        check(r.returncode == 0, f"build into {out} exits 0 (got {r.returncode}: {r.stderr})")
    files = sorted(os.listdir(a))
    check(files == sorted(os.listdir(b)), "both builds write the same files")
    for name in ["train.txt", "test.txt", "trn_X.npy", "tst_X.npy", "trn_X_Y.txt",
                 "tst_X_Y.txt", "trn_ids.txt", "tst_ids.txt", "labels.txt", "wordnet.json"]:
        check(name in files, f"{name} written")
    for name in files:
        check(read(os.path.join(a, name)) == read(os.path.join(b, name)),
              f"{name} identical in two builds")
    meta = json.loads(read(os.path.join(a, "wordnet.json")))
    for name, digest in meta["sha256"].items():
        check(hashlib.sha256(read(os.path.join(a, name))).hexdigest() == digest,
              f"wordnet.json's sha256 of {name}")

    # 26 synsets; limit 0.4 * 26 = 10.4: entity (25), physical_entity (19), object (18) and
    # organism (13) are too general; entity, physical_entity, object, organism, animal,
    # abstraction, artifact and person have no other ancestor and are dropped: 18 points,
    # round(0.7 * 18) = 13 train / 5 test.
    check([n for n, _ in meta["removed_general_ancestors"]] ==
          ["entity", "physical_entity", "object", "organism"], "removed ancestors")
    check(meta["points"] == {"train": 13, "test": 5, "without_label_dropped": 8},
          f"point counts {meta['points']}")
    names = [line.split()[1] for line in read(os.path.join(a, "labels.txt")).decode().splitlines()]
    check("organism" not in names and "animal" in names and "person" in names, "label names")
    check(len(names) == meta["labels"], "labels.txt has one line per label")

    labels_of = {}
    for split, xc in (("trn", "train.txt"), ("tst", "test.txt")):
        header, rows = xc_labels(os.path.join(a, xc))
        ids = [line.split()[1] for line in read(os.path.join(a, f"{split}_ids.txt")).decode().splitlines()]
        check(header[0] == len(rows) == len(ids), f"{xc}: header N = rows = ids")
        check(header[2] == len(names), f"{xc}: header L")
        for name, row in zip(ids, rows):
            check(len(row) > 0, f"{xc}: {name} has a label")
            labels_of[name] = {names[l] for l in row}
    check(set(labels_of) == {"mammal", "carnivore", "canine", "dog", "domestic_animal",
                             "feline", "cat", "wolf", "vehicle", "car", "bicycle", "scientist",
                             "Darwin", "Curie", "idea", "plan", "theory", "evolution"},
          f"the points are the labelled synsets: {sorted(labels_of)}")
    expected = {
        "dog": {"canine", "carnivore", "mammal", "animal", "domestic_animal"},
        "cat": {"feline", "carnivore", "mammal", "animal", "domestic_animal"},
        "Darwin": {"scientist", "person"},  # over an instance-hypernym pointer
        "evolution": {"theory", "idea", "abstraction"},
        "car": {"vehicle", "artifact"},
    }
    for name, want in expected.items():
        check(labels_of.get(name) == want, f"labels of {name}: {labels_of.get(name)} != {want}")
    # Closure: a label that is itself a point brings all of its own labels.
    for name, labs in labels_of.items():
        for l in labs:
            if l in labels_of:
                check(labels_of[l] <= labs, f"closure: labels of {l} within those of {name}")

    # xmctrain info reads every file with the builder's counts.
    def info(*args):
        r = subprocess.run([binary, "info", *args, "--json", "--no-cache"], capture_output=True,
                           text=True)
        check(r.returncode == 0, f"xmctrain info {args}: exit {r.returncode} {r.stderr}")
        return json.loads(r.stdout) if r.returncode == 0 else {}

    for xc, npy, lab, n in (("train.txt", "trn_X.npy", "trn_X_Y.txt", 13),
                            ("test.txt", "tst_X.npy", "tst_X_Y.txt", 5)):
        s = info(os.path.join(a, xc))
        check(s.get("points") == n and s.get("features") == meta["features"]
              and s.get("labels") == meta["labels"] and s.get("feature_kind") == "sparse"
              and s.get("empty_rows") == 0, f"info {xc}: {s}")
        s = info(os.path.join(a, npy), "--labels", os.path.join(a, lab))
        check(s.get("points") == n and s.get("features") == 4 and s.get("labels") == meta["labels"]
              and s.get("feature_kind") == "dense" and s.get("empty_rows") == 0, f"info {npy}: {s}")

    # Bad input: a truncated line exits 2 naming file:line, and leaves no output folder.
    bad = os.path.join(tmp, "bad.noun")
    with open(bad, "w") as f:
        f.write(read(fixture).decode().replace(
            "00000013 05 n 01 wolf 0 001 @ 00000008 n 0000", "00000013 05 n 01 wolf 0 001 @"))
    c = os.path.join(tmp, "c")
    r = build(c, bad)
    check(r.returncode == 2 and "bad.noun:15" in r.stderr, f"bad input: exit 2 with file:line ({r.returncode}, {r.stderr})")
    check(not os.path.exists(c), "bad input writes no output folder")
    check([x for x in os.listdir(tmp) if ".tmp." in x] == [], "no temporary folder left")

print(f"test_build_wordnet: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
