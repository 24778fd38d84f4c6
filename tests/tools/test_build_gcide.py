#!/usr/bin/python3
"""Tests tools/build_gcide.py on the hand-written fixture fixtures/gcide/gcide.dict.

    test_build_gcide.py XMCTRAIN_BINARY SOURCE_DIR

The dictd index is made here from the sample (an entry starts at a line without indent
after a blank line; one index line for its headword and one for each braced term in it,
as GCIDE's index has), so the sample can be edited by hand.

Checks: two builds are byte-identical (and gcide.json's checksums are those of the files);
a build from the gzip-compressed sample (dict.dz) writes the same data files; the counts
and the label sets are the hand-derived ones (braced links and Syn: items that are another
headword, labels linked from at least 2 points, two entries of one headword merged, a
point whose text is all label words dropped); no label word among a point's features
(leak-freedom, on every row, and the words around them kept); the markup is gone from the
features (pronunciations, source notes, character codes, syllable marks); the XC and npy
files are read by `xmctrain info` with the builder's counts; bad index lines exit 2 naming
file:line and write nothing.
"""
import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

binary, source = sys.argv[1], sys.argv[2]
builder = os.path.join(source, "tools", "build_gcide.py")
fixture = os.path.join(source, "tests", "tools", "fixtures", "gcide", "gcide.dict")
TOKEN = re.compile(r"(?u)\b\w\w+\b")  # the tf-idf's tokens (sklearn's default pattern)
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAILED:", what, file=sys.stderr)


def b64(v):
    s = ""
    while True:
        s = B64[v % 64] + s
        v //= 64
        if v == 0:
            return s


def make_index(dict_path, index_path):
    data = read(dict_path).decode("latin-1")
    lines, entries, offset, prev_blank = data.split("\n"), [], 0, True
    for line in lines:
        if line and not line[0].isspace() and prev_blank:
            entries.append([offset, offset])
        if entries and line.strip():
            entries[-1][1] = offset + len(line) + 1
        prev_blank = not line.strip()
        offset += len(line) + 1
    rows = []
    for start, end in entries:
        text = data[start:end]
        first = text.split("\n", 1)[0]
        words = [first.split(" \\", 1)[0]] + re.findall(r"\{([^{}]*)\}", text)
        for w in dict.fromkeys(" ".join(w.split()) for w in words):
            rows.append((w.lower(), w, start, f"{w}\t{b64(start)}\t{b64(end - start)}\n"))
    with open(index_path, "w", encoding="latin-1") as f:
        f.writelines(r[3] for r in sorted(rows))


def build(out, dict_path, index_path, *extra):
    return subprocess.run([sys.executable, builder, "--dict", dict_path, "--index", index_path,
                           "--out", out, "--min-df", "1", "--lsa-dim", "4", *extra],
                          capture_output=True, text=True)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def names(path):
    """The headwords of an ids/labels file (offset, blank, headword per line)."""
    return [line.split(" ", 1)[1] for line in read(path).decode().splitlines()]


def xc_rows(path):
    """(header, [(labels, feature ids)]) of an XC combined file."""
    with open(path) as f:
        header = [int(x) for x in f.readline().split()]
        rows = []
        for line in f:
            labs, _, feats = line.rstrip("\n").partition(" ")
            rows.append(([int(l) for l in labs.split(",") if l],
                         [int(x.split(":")[0]) for x in feats.split()]))
    return header, rows


with tempfile.TemporaryDirectory() as tmp:
    index = os.path.join(tmp, "gcide.index")
    make_index(fixture, index)
    a, b = os.path.join(tmp, "a"), os.path.join(tmp, "b")
    for out in (a, b):
        r = build(out, fixture, index)
        check(r.returncode == 0, f"build into {out} exits 0 (got {r.returncode}: {r.stderr})")
    files = sorted(os.listdir(a))
    check(files == sorted(os.listdir(b)), "both builds write the same files")
    data_files = ["train.txt", "test.txt", "trn_X.npy", "tst_X.npy", "trn_X_Y.txt",
                  "tst_X_Y.txt", "trn_ids.txt", "tst_ids.txt", "labels.txt", "features.txt"]
    for name in data_files + ["gcide.json"]:
        check(name in files, f"{name} written")
    for name in files:
        check(read(os.path.join(a, name)) == read(os.path.join(b, name)),
              f"{name} identical in two builds")
    meta = json.loads(read(os.path.join(a, "gcide.json")))
    check(sorted(meta["sha256"]) == sorted(data_files) and all(
        hashlib.sha256(read(os.path.join(a, n))).hexdigest() == d
        for n, d in meta["sha256"].items()), "gcide.json's sha256 of every data file")

    # The dictzip'd (gzip) dictionary gives the same data files.
    dz = os.path.join(tmp, "gcide.dict.dz")
    with open(dz, "wb") as f:
        f.write(gzip.compress(read(fixture), mtime=0))
    z = os.path.join(tmp, "z")
    r = build(z, dz, index)
    check(r.returncode == 0, f"build from dict.dz exits 0 ({r.stderr})")
    for name in data_files:
        check(r.returncode == 0 and read(os.path.join(a, name)) == read(os.path.join(z, name)),
              f"{name} identical from the .dz")

    # 28 entries (the 00-database one has no headword), 26 headwords (Ask twice). Cot,
    # Fiction and Zebra link to no label; Ask-beg's text is all label words: 22 points,
    # round(0.7 * 22) = 15 train / 7 test.
    check(meta["entries"] == 28 and meta["entries_without_headword"] == 1
          and meta["headwords"] == 26, f"entries {meta['entries']}, without headword "
          f"{meta['entries_without_headword']}, headwords {meta['headwords']}")
    check(meta["points"] == {"train": 15, "test": 7, "without_label_dropped": 3,
                             "without_text_dropped": 1}, f"point counts {meta['points']}")
    labels = names(os.path.join(a, "labels.txt"))
    check(labels == ["Abdominal", "Abduct", "Ask", "Beg", "Beseech", "Cot", "Dictionary",
                     "Duct", "Entreat", "Fiction", "Implore", "Inguinal ring", "Lexicon"],
          f"labels (linked from at least 2 points, in file order): {labels}")
    check(meta["labels"] == len(labels), "labels.txt has one line per label")
    features = read(os.path.join(a, "features.txt")).decode().splitlines()
    check(len(features) == meta["features"], "features.txt has one line per feature")

    labels_of, words_of, test_points = {}, {}, set()
    for split, xc in (("trn", "train.txt"), ("tst", "test.txt")):
        header, rows = xc_rows(os.path.join(a, xc))
        ids = names(os.path.join(a, f"{split}_ids.txt"))
        check(header[0] == len(rows) == len(ids), f"{xc}: header N = rows = ids")
        check(header[1] == len(features) and header[2] == len(labels), f"{xc}: header D, L")
        for name, (labs, feats) in zip(ids, rows):
            check(len(labs) > 0 and len(feats) > 0, f"{xc}: {name} has labels and features")
            labels_of[name] = {labels[l] for l in labs}
            if split == "tst":
                test_points.add(name)
            words_of[name] = {features[j] for j in feats}
            # Leak-freedom: no token of a label's headword among the point's features.
            leaked = words_of[name] & {w for l in labs for w in TOKEN.findall(labels[l].lower())}
            check(not leaked, f"{xc}: {name}'s features hold its label words {sorted(leaked)}")
    expected = {
        "Abdominal": {"Inguinal ring"},                 # {Abdominal ring} is no headword
        "Abduct": {"Duct"},
        "Ask": {"Beg"},                                 # two entries; Inquire: 1 point only
        "Bed": {"Cot"},                                 # Syn: cot[3]
        "Beg": {"Ask", "Entreat", "Implore"},           # braced and Syn: (Pray: 1 point)
        "Beseech": {"Beg", "Entreat", "Implore"},       # a WordNet-style Syn: list
        "Conduct": {"Duct", "Abduct"},
        "Crib": {"Cot"},
        "Dictionary": {"Lexicon"},                      # {Encyclop[ae]dia}: 1 point only
        "Duct": {"Abduct"},
        "Encyclopaedia": {"Dictionary"},
        "Entreat": {"Beg", "Beseech", "Implore"},
        "Feign": {"Fiction"},
        "Fictitious": {"Fiction"},
        "Groin": {"Inguinal ring", "Abdominal"},
        "Implore": {"Entreat", "Beseech", "Beg"},
        "Inguinal ring": {"Abdominal"},
        "Inquire": {"Ask"},
        "Lexicon": {"Dictionary"},
        "Pray": {"Beg", "Entreat"},
        "Vocabulary": {"Dictionary"},
        "Wordbook": {"Lexicon"},
    }
    check(set(labels_of) == set(expected), f"the points: {sorted(labels_of)}")
    for name, want in expected.items():
        check(labels_of.get(name) == want, f"labels of {name}: {labels_of.get(name)} != {want}")
    # Label words go wherever they stand in the text, the words around them stay (those in
    # the training vocabulary, for a test point: Beg, Abdominal and Bed are training points).
    for name, kept, gone in (("Abduct", {"gland", "force", "abductus"}, {"duct"}),
                             ("Beg", {"earnestly", "humility"}, {"ask", "entreat"}),
                             ("Groin", {"belly", "thigh", "fold"}, {"inguinal", "ring"}),
                             ("Abdominal", {"abdominal", "ventral", "belly"}, {"ring"}),
                             ("Bed", {"chamber", "couch"}, {"cot"})):
        w = words_of.get(name, set())
        if name in test_points:
            kept &= set(features)
        check(kept <= w and not (gone & w), f"{name}: features {sorted(w)} keep {kept}, not {gone}")
    # Markup: no source notes, pronunciations or character codes; syllable marks joined.
    for token in ("webster", "pjc", "wordnet", "dom", "nal", "ae", "fiktishus", "tious"):
        check(token not in features, f"no feature {token!r}")
    for token in ("encyclopaedia", "fictitiously", "imaginary"):
        check(token in features, f"feature {token!r}")

    # xmctrain info reads every file with the builder's counts.
    def info(*args):
        r = subprocess.run([binary, "info", *args, "--json", "--no-cache"], capture_output=True,
                           text=True)
        check(r.returncode == 0, f"xmctrain info {args}: exit {r.returncode} {r.stderr}")
        return json.loads(r.stdout) if r.returncode == 0 else {}

    for xc, npy, lab, n in (("train.txt", "trn_X.npy", "trn_X_Y.txt", 15),
                            ("test.txt", "tst_X.npy", "tst_X_Y.txt", 7)):
        s = info(os.path.join(a, xc))
        check(s.get("points") == n and s.get("features") == meta["features"]
              and s.get("labels") == meta["labels"] and s.get("feature_kind") == "sparse"
              and s.get("empty_rows") == 0, f"info {xc}: {s}")
        s = info(os.path.join(a, npy), "--labels", os.path.join(a, lab))
        check(s.get("points") == n and s.get("features") == 4 and s.get("labels") == meta["labels"]
              and s.get("feature_kind") == "dense" and s.get("empty_rows") == 0, f"info {npy}: {s}")

    # Bad input: an index line that is no base-64 offset, or one pointing past the end of
    # the dictionary, exits 2 naming file:line and leaves no output folder.
    lines = read(index).decode("latin-1").splitlines(keepends=True)
    for what, lineno, bad_line in (
            ("bad base-64", 5, lines[4].replace("\t", "\t!", 1)),
            ("past the end", 7, lines[6].split("\t")[0] + "\tzzzz\tB\n")):
        bad = os.path.join(tmp, "bad.index")
        with open(bad, "w", encoding="latin-1") as f:
            f.writelines(lines[:lineno - 1] + [bad_line] + lines[lineno:])
        c = os.path.join(tmp, "c")
        r = build(c, fixture, bad)
        check(r.returncode == 2 and f"bad.index:{lineno}:" in r.stderr,
              f"{what}: exit 2 naming bad.index:{lineno} ({r.returncode}, {r.stderr})")
        check(not os.path.exists(c), f"{what}: no output folder")
    check([x for x in os.listdir(tmp) if ".tmp." in x] == [], "no temporary folder left")

print(f"test_build_gcide: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
