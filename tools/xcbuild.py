"""Shared parts of the real-dataset builders (tools/build_wordnet.py, tools/build_gcide.py).

A builder parses its source into points (a text and a sorted list of label ids each), then
calls, in this order:

    trn, tst = split(n_points, train_share, seed)        fixed-seed 70/30 split
    feats = tfidf_lsa(train_texts, test_texts, ...)       tf-idf fitted on train, LSA
    with Output(out) as o:                                a temporary folder
        o.write_xc(feats, Ytr, Yte, n_labels)             the XC and npy files
        o.write_lines("labels.txt", lines)                the builder's own text files
        o.finish("name.json", meta)                       sha256 of every file, then moved

Output writes into `<out>.tmp.<pid>` and moves the files into `out` only in finish(), so a
build that fails leaves no partial dataset (and no temporary folder).

Deterministic: the same inputs give byte-identical files. Importing this module pins BLAS
to one thread (before numpy is imported) so that the SVD's floating-point sums do not
depend on the thread count; a builder imports it before numpy.
"""

import os

# One BLAS thread: the SVD's floating-point sums then do not depend on the thread count.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import hashlib  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402

# The tokens of sklearn's TfidfVectorizer (its default token_pattern, after lowercasing):
# the builders that strip words from a text tokenise it with this same pattern.
TOKEN_PATTERN = r"(?u)\b\w\w+\b"


class InputError(Exception):
    """Bad input data: the builders print it and exit with status 2."""


def fmt(v):
    return format(float(v), ".6g")


def write_xc_combined(path, X, Y, n_labels):
    X = X.tocsr()
    X.sort_indices()
    with open(path, "w", encoding="ascii", newline="\n") as f:
        f.write(f"{X.shape[0]} {X.shape[1]} {n_labels}\n")
        for r in range(X.shape[0]):
            lo, hi = X.indptr[r], X.indptr[r + 1]
            feats = " ".join(f"{j}:{fmt(v)}" for j, v in zip(X.indices[lo:hi], X.data[lo:hi]))
            f.write(",".join(map(str, Y[r])) + " " + feats + "\n")


def write_xc_labels(path, Y, n_labels):
    with open(path, "w", encoding="ascii", newline="\n") as f:
        f.write(f"{len(Y)} {n_labels}\n")
        for row in Y:
            f.write(" ".join(f"{l}:1" for l in row) + "\n")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def split(n_points, train_share, seed):
    """A fixed-seed permutation split: (train indices, test indices), each ascending."""
    import numpy as np

    rng = np.random.default_rng(seed)
    perm = rng.permutation(n_points)
    n_train = int(round(train_share * n_points))
    if n_train == 0 or n_train == n_points:
        raise InputError(f"{n_points} labelled points cannot be split {train_share}")
    return sorted(perm[:n_train]), sorted(perm[n_train:])


class Features:
    """tf-idf (Xtr, Xte: CSR, rows L2-normalised) and LSA (Ztr, Zte: float32) of a split."""

    def __init__(self, vectorizer, svd, Xtr, Xte, Ztr, Zte):
        self.vectorizer, self.svd = vectorizer, svd
        self.Xtr, self.Xte, self.Ztr, self.Zte = Xtr, Xte, Ztr, Zte

    @property
    def n_features(self):
        return int(self.Xtr.shape[1])

    @property
    def lsa_dim(self):
        return int(self.Ztr.shape[1])


def tfidf_lsa(train_texts, test_texts, min_df, lsa_dim, seed):
    """tf-idf with vocabulary and idf fitted on the training texts only (words in at least
    min_df of them, rows L2-normalised); LSA: a TruncatedSVD of the training tf-idf with a
    fixed random_state (min(lsa_dim, features - 1) components), rows L2-normalised, float32."""
    import numpy as np
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.preprocessing import normalize

    vec = TfidfVectorizer(min_df=min_df, dtype=np.float64, sublinear_tf=False, norm="l2",
                          token_pattern=TOKEN_PATTERN)
    Xtr = vec.fit_transform(train_texts)
    Xte = vec.transform(test_texts)
    n_comp = min(lsa_dim, Xtr.shape[1] - 1)
    if n_comp < 1:
        raise InputError(f"{Xtr.shape[1]} features: too few for an LSA embedding")
    svd = TruncatedSVD(n_components=n_comp, algorithm="randomized", n_iter=7,
                       random_state=seed)
    Ztr = normalize(svd.fit_transform(Xtr)).astype("<f4")
    Zte = normalize(svd.transform(Xte)).astype("<f4")
    return Features(vec, svd, Xtr, Xte, Ztr, Zte)


def label_stats(Ytr, Yte, n_labels):
    """Counts for a builder's JSON: labels per point (both splits), the share of labels
    with at most 5 training points, and the number of labels without a training point."""
    import numpy as np

    train_counts = np.bincount([l for row in Ytr for l in row], minlength=n_labels)
    return {
        "labels_per_point": round(sum(map(len, Ytr + Yte)) / (len(Ytr) + len(Yte)), 4),
        "labels_with_at_most_5_train_points": round(float(np.mean(train_counts <= 5)), 4),
        "labels_without_train_point": int(np.sum(train_counts == 0)),
    }


class Output:
    """A dataset folder written as a unit (see the module docstring)."""

    def __init__(self, out):
        self.out = os.path.abspath(out)
        self.tmp = f"{self.out}.tmp.{os.getpid()}"
        self.names = []

    def __enter__(self):
        os.makedirs(os.path.dirname(self.out) or ".", exist_ok=True)
        shutil.rmtree(self.tmp, ignore_errors=True)
        os.makedirs(self.tmp)
        return self

    def __exit__(self, *exc):
        shutil.rmtree(self.tmp, ignore_errors=True)
        return False

    def path(self, name):
        if name not in self.names:
            self.names.append(name)
        return os.path.join(self.tmp, name)

    def write_xc(self, feats, Ytr, Yte, n_labels):
        """train.txt / test.txt (XC combined, tf-idf), trn_X.npy / tst_X.npy (LSA) and
        trn_X_Y.txt / tst_X_Y.txt (their labels)."""
        import numpy as np

        write_xc_combined(self.path("train.txt"), feats.Xtr, Ytr, n_labels)
        write_xc_combined(self.path("test.txt"), feats.Xte, Yte, n_labels)
        np.save(self.path("trn_X.npy"), feats.Ztr)
        np.save(self.path("tst_X.npy"), feats.Zte)
        write_xc_labels(self.path("trn_X_Y.txt"), Ytr, n_labels)
        write_xc_labels(self.path("tst_X_Y.txt"), Yte, n_labels)

    def write_lines(self, name, lines):
        """A UTF-8 text file, one line per item (each item without its newline)."""
        with open(self.path(name), "w", encoding="utf-8", newline="\n") as f:
            f.writelines(f"{line}\n" for line in lines)

    def finish(self, meta_name, meta):
        """Adds meta["sha256"] (every file written so far, by name), writes meta as
        meta_name and moves every file into the output folder."""
        files = sorted(self.names)
        meta["sha256"] = {name: sha256(os.path.join(self.tmp, name)) for name in files}
        with open(os.path.join(self.tmp, meta_name), "w", encoding="utf-8", newline="\n") as f:
            json.dump(meta, f, indent=1)
            f.write("\n")
        os.makedirs(self.out, exist_ok=True)
        for name in files + [meta_name]:
            os.replace(os.path.join(self.tmp, name), os.path.join(self.out, name))
        return meta
