#!/usr/bin/python3
"""Build the GCIDE cross-reference dataset (a real XC dataset) from Debian's dict-gcide.

    /usr/bin/python3 tools/build_gcide.py              # writes datasets/gcide/ (~1 minute)

GCIDE (the Collaborative International Dictionary of English: Webster's 1913 with WordNet
1.5 and later additions) as packaged for dictd: gcide.dict.dz holds the entries, gcide.index
one line per indexed word (word, base-64 offset, base-64 length of its entry). Every entry
(a distinct offset in the index) whose first line starts with a headword and its
pronunciation (`Abduce \\Ab*duce"\\, v. t.`) belongs to that headword; the entries of one
headword (case and blanks folded) make one point, whose text is theirs.

Labels are cross-references: the headwords that a point's entries link to, where a link is
  - a braced term, `{Duke}` (GCIDE marks "See {Duke}", "cf. {Abduct}", "called also
    {inguinal ring}", inflections, sub-entries ... this way), and
  - an item of a `Syn:` list (`Syn: To beg; request; seek.`, a leading "To" dropped),
that equals another point's headword (after the folding above; a term that is no
headword, such as most inflections and sub-entries, is no link). A headword linked from
fewer than --min-label-points points is not a label; points left without a label are
dropped. Label ids are the labels in the order of their first entry in the file.

No label appears in its point's features: the text of a point is its entries without the
pronunciations (`\\...\\` and a parenthesised respelling after it), the bracketed source
notes ([1913 Webster], [WordNet 1.5], [Webster 1913 Suppl. +PJC], ...), the braces, the
sense markers (`cot[3]`) and the syllable and accent marks inside words of derived forms
(`{Fic*ti"tious*ly}`), with GCIDE's character codes (`[ae]`, `[=a]`, `[imac]`, ...)
replaced by plain letters; it is cut into the tf-idf's tokens (lowercase runs of at least
two word characters) and every token of any of the point's labels' headwords is removed,
wherever it stands (not only inside the links). Points left without a token are dropped.

A fixed-seed permutation splits the points 70/30 (each split in file order). The tf-idf
vocabulary and idf are fitted on the training split only (words in at least --min-df
training texts; rows L2-normalised); LSA is a TruncatedSVD of the training tf-idf with a
fixed random_state, rows L2-normalised, float32 (tools/xcbuild.py, shared with
tools/build_wordnet.py).

Outputs (in --out; written to a temporary folder and moved into place, so a failed build
leaves no partial dataset):
  train.txt, test.txt           XC combined format (tf-idf features + labels)
  trn_X.npy, tst_X.npy          LSA embeddings (float32, N x --lsa-dim)
  trn_X_Y.txt, tst_X_Y.txt      XC label files for the .npy features
  trn_ids.txt, tst_ids.txt      offset of the first entry (in the uncompressed
                                gcide.dict) and headword of each row
  labels.txt                    the same for each label id
  features.txt                  the word of each tf-idf feature id (one per line)
  gcide.json                    parameters, counts and the sha256 of every file above

Deterministic: the same inputs and options give byte-identical files (BLAS runs on one
thread so that the SVD does not depend on the thread count). Needs python3-numpy,
python3-scipy, python3-sklearn and dict-gcide (tools/setup.sh installs them). Exit status 2
for bad input (a malformed index line, or one pointing outside the dictionary, names
file:line).
"""

import argparse
import gzip
import os
import re
import sys
import time

import xcbuild  # first: it pins BLAS to one thread before numpy is imported
from xcbuild import InputError

B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
TOKEN = re.compile(xcbuild.TOKEN_PATTERN)
HEADWORD = re.compile(r"(\S[^\\\n]*?) \\")
PRONUNCIATION = re.compile(r"\\[^\\\n]*\\(?:\s*\((?=[^()]*[*\[\"`])[^()]*\))?")
BRACED = re.compile(r"\{([^{}]*)\}")
SENSE = re.compile(r"\[\d+\]")
SOURCE_NOTE = re.compile(r"\[[^\[\]\n]*\b(?:Webster|WordNet|PJC|Century Dict)\b[^\[\]\n]*\]"
                         r"|\[(?:AS|RDH)\]")  # [1913 Webster], [WordNet 1.5 +PJC], ...
SYLLABLE = re.compile(r"(?<=\w)[*\"`](?=\w)")  # Fic*ti"tious*ly: syllable and accent marks
# GCIDE's character codes next to a letter: a mark and one or two letters ([=a], [a^],
# ['e], [ae], [oe], [AE]), or a named letter.
CHAR_NAMES = {"imac": "i", "aum": "a", "add": "a", "asl": "a", "udd": "u", "eth": "th",
              "thorn": "th", "yogh": "y"}
CHAR_CODE = re.compile(r"(?<=[A-Za-z])\[(?:[-=~'`\".^,*]?([A-Za-z]{1,2})\^?|(" +
                       "|".join(CHAR_NAMES) + r"))\]|\[(?:[-=~'`\".^,*]?([A-Za-z]{1,2})\^?|(" +
                       "|".join(CHAR_NAMES) + r"))\](?=[A-Za-z])")


def b64(s, where):
    v = 0
    for c in s:
        d = B64.find(c)
        if d < 0:
            raise InputError(f"{where}: {s!r} is not a base-64 number")
        v = v * 64 + d
    return v


def plain(s):
    """GCIDE's character codes replaced by letters."""
    def letters(m):
        one, name = m.group(1) or m.group(3), m.group(2) or m.group(4)
        return one if one else CHAR_NAMES[name]
    return CHAR_CODE.sub(letters, s)


def key(term):
    """A headword or link as compared: plain letters, no sense marker, lowercase, blanks
    folded, no surrounding punctuation."""
    return " ".join(SENSE.sub(" ", plain(term)).lower().split()).strip(" .,;:")


def tokens(text):
    return TOKEN.findall(text.lower())


def read_entries(dict_path, index_path):
    """Returns [(offset, text)] of the distinct entries in the index, in offset order."""
    try:
        with open(dict_path, "rb") as f:
            raw = f.read()
        if raw[:2] == b"\x1f\x8b":  # dictzip is gzip
            raw = gzip.decompress(raw)
    except (OSError, EOFError) as e:
        raise InputError(f"{dict_path}: {e}") from None
    data = raw.decode("latin-1")  # ASCII but for a few stray bytes; offsets stay bytes
    spans = {}
    with open(index_path, encoding="latin-1") as f:
        for lineno, line in enumerate(f, 1):
            where = f"{index_path}:{lineno}"
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 3 or not fields[0]:
                raise InputError(f"{where}: expected 'word<TAB>offset<TAB>length'")
            offset, length = b64(fields[1], where), b64(fields[2], where)
            if offset + length > len(data):
                raise InputError(f"{where}: entry {offset}+{length} ends beyond the "
                                 f"{len(data)} bytes of {dict_path}")
            if offset > 0 and data[offset - 1] != "\n":
                raise InputError(f"{where}: offset {offset} is not at the start of a line "
                                 f"of {dict_path}")
            if spans.setdefault(offset, length) != length:
                raise InputError(f"{where}: entry at offset {offset} with two lengths "
                                 f"({spans[offset]} and {length})")
    return [(o, data[o:o + spans[o]]) for o in sorted(spans)]


def synonyms(lines):
    """The items of the entry's `Syn:` lists (raw strings). A list runs from `Syn:` to a
    blank line or a line starting with a bracketed note ([1913 Webster], ...), and ends
    before the first '[', '--' or sentence end ('. '): what follows is prose (`See {Beg}.`,
    usage notes, derived forms). Items are split at ';' and ','; a parenthesised remark
    and a leading "To" are dropped."""
    lists, body = [], None
    for line in lines + [""]:
        s = line.strip()
        if body is not None:
            if not s or s.startswith("[") or not line[:1].isspace():
                lists.append(" ".join(body))
                body = None
            else:
                body.append(s)
                continue
        if s.startswith("Syn:"):
            body = [s[4:]]
    out = []
    for text in lists:
        text = BRACED.sub(lambda m: m.group(1), text).strip().lstrip("-")
        text = re.split(r"\[|--|\.(?:\s|$)", text)[0]
        for item in re.split(r"[;,]", text):
            item = re.sub(r"\([^()]*\)", " ", item).strip()
            if item[:3].lower() == "to ":
                item = item[3:]
            out.append(item)
    return out


def parse(entries):
    """Returns (points, no_headword): points = {key: [offset of the first entry, headword,
    [entry texts without markup], keys of the braced terms, keys of the Syn: items]} in
    file order (the keys not yet checked against the headwords)."""
    points, no_headword = {}, 0
    for offset, text in entries:
        m = HEADWORD.match(text)
        if not m or not key(m.group(1)):
            no_headword += 1
            continue
        k = key(m.group(1))
        p = points.setdefault(k, [offset, plain(m.group(1)).strip(), [], set(), set()])
        p[3].update(key(t) for t in BRACED.findall(text))
        p[4].update(key(t) for t in synonyms(text.split("\n")))
        body = PRONUNCIATION.sub(" ", SOURCE_NOTE.sub(" ", text))
        body = SENSE.sub(" ", body.replace("{", " ").replace("}", " "))
        body = SYLLABLE.sub("", body)
        p[2].append(plain(body))
    return points, no_headword


def build(args):
    t0 = time.time()
    entries = read_entries(args.dict, args.index)
    points, no_headword = parse(entries)
    if not points:
        raise InputError(f"{args.dict}: no entry with a headword")
    # Links: to another point's headword; braced and Syn: items together.
    links, by_kind = {}, {"braced": 0, "synonym": 0}
    for k, p in points.items():
        braced = {t for t in p[3] if t != k and t in points}
        syn = {t for t in p[4] if t != k and t in points}
        by_kind["braced"] += len(braced)
        by_kind["synonym"] += len(syn - braced)
        links[k] = braced | syn
    count = {}
    for ts in links.values():
        for t in ts:
            count[t] = count.get(t, 0) + 1
    kept = sorted((t for t, c in count.items() if c >= args.min_label_points),
                  key=lambda t: points[t][0])
    label_id = {t: i for i, t in enumerate(kept)}
    words = {t: set(tokens(t)) for t in kept}
    labelled, texts, labels = [], {}, {}
    for k in points:
        ls = sorted(label_id[t] for t in links[k] if t in label_id)
        if not ls:
            continue
        labelled.append(k)
        banned = set().union(*(words[kept[l]] for l in ls))
        toks = [w for w in tokens("\n".join(points[k][2])) if w not in banned]
        if toks:
            texts[k], labels[k] = " ".join(toks), ls
    order = [k for k in labelled if k in texts]

    itr, ite = xcbuild.split(len(order), args.train_share, args.seed)
    trn = [order[i] for i in itr]
    tst = [order[i] for i in ite]
    feats = xcbuild.tfidf_lsa([texts[k] for k in trn], [texts[k] for k in tst],
                              args.min_df, args.lsa_dim, args.seed)
    Ytr = [labels[k] for k in trn]
    Yte = [labels[k] for k in tst]
    L = len(kept)

    with xcbuild.Output(args.out) as out:
        out.write_xc(feats, Ytr, Yte, L)
        for name, ks in (("trn_ids.txt", trn), ("tst_ids.txt", tst), ("labels.txt", kept)):
            out.write_lines(name, (f"{points[k][0]} {points[k][1]}" for k in ks))
        out.write_lines("features.txt", feats.vectorizer.get_feature_names_out())
        meta = {
            "source": os.path.abspath(args.dict),
            "source_sha256": xcbuild.sha256(args.dict),
            "index": os.path.abspath(args.index),
            "index_sha256": xcbuild.sha256(args.index),
            "options": {"seed": args.seed, "train_share": args.train_share,
                        "min_label_points": args.min_label_points, "min_df": args.min_df,
                        "lsa_dim": feats.lsa_dim},
            "entries": len(entries),
            "entries_without_headword": no_headword,
            "headwords": len(points),
            "links": {**by_kind, "to_labels": sum(map(len, labels.values()))},
            "points": {"train": len(trn), "test": len(tst),
                       "without_label_dropped": len(points) - len(labelled),
                       "without_text_dropped": len(labelled) - len(order)},
            "features": feats.n_features,
            "labels": L,
            **xcbuild.label_stats(Ytr, Yte, L),
            "headwords_linked_below_min_points": len(count) - L,
            "most_linked_labels": [[points[t][1], count[t]]
                                   for t in sorted(kept, key=lambda t: (-count[t], points[t][0]))[:10]],
            "lsa_explained_variance": round(float(feats.svd.explained_variance_ratio_.sum()), 4),
        }
        out.finish("gcide.json", meta)
    meta["seconds"] = round(time.time() - t0, 1)
    return meta


def main():
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="See the module docstring (head of this file) and datasets/README.md.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dict", default="/usr/share/dictd/gcide.dict.dz",
                   help="the dictionary (dictzip or plain text; Debian package dict-gcide)")
    p.add_argument("--index", default="/usr/share/dictd/gcide.index",
                   help="its dictd index")
    p.add_argument("--out", default="datasets/gcide", help="output folder")
    p.add_argument("--seed", type=int, default=0, help="split and SVD seed")
    p.add_argument("--train-share", type=float, default=0.7)
    p.add_argument("--min-label-points", type=int, default=2,
                   help="a headword is a label when at least this many points link to it")
    p.add_argument("--min-df", type=int, default=2,
                   help="keep words in at least this many training texts")
    p.add_argument("--lsa-dim", type=int, default=256, help="LSA embedding width")
    args = p.parse_args()
    if not 0 < args.train_share < 1:
        p.error("--train-share must be in (0,1)")
    if args.lsa_dim < 1 or args.min_df < 1 or args.min_label_points < 1:
        p.error("--lsa-dim, --min-df and --min-label-points must be positive")
    for path in (args.dict, args.index):
        if not os.path.isfile(path):
            print(f"build_gcide: {path} not found (install dict-gcide: bash tools/setup.sh)",
                  file=sys.stderr)
            return 2
    try:
        meta = build(args)
    except InputError as e:
        print(f"build_gcide: {e}", file=sys.stderr)
        return 2
    print(f"build_gcide: {args.out}: {meta['points']['train']} train / "
          f"{meta['points']['test']} test points, {meta['features']} features, "
          f"{meta['labels']} labels, {meta['labels_per_point']} labels per point, "
          f"{meta['labels_with_at_most_5_train_points']:.0%} of labels with <= 5 training "
          f"points ({meta['seconds']} s)")
    for name, digest in meta["sha256"].items():
        print(f"  {digest}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
