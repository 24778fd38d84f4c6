#!/usr/bin/env python3
"""No #include runs from a lower floor to a higher one.

The floors come from one place: the picture under "### The layout (one line per folder)"
in docs/design-notes.md, a line "FLOOR  FOLDER  what it holds" per folder (FOLDER a path
prefix such as lib/core/, or a file pattern such as cuda/runtime.*; a file belongs to the
longest pattern it matches). Every quoted #include of a source file under lib/, cuda/ and
app/ must name a file of its own folder or of a lower floor; on one floor, a cuda/ file may
include lib/ files (it implements their gpu:: half), nothing else may. A file that no line
of the picture covers is an error too. Usage: check_floors.py REPO_ROOT
"""
import fnmatch
import os
import re
import sys

SOURCES = ("lib", "cuda", "app")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def floors(root):
    text = open(os.path.join(root, "docs", "design-notes.md"), encoding="utf-8").read()
    at = text.index("### The layout (one line per folder)")
    block = text[text.index("```", at) + 3:]
    block = block[:block.index("```")]
    table = [(m.group(2), int(m.group(1)))
             for m in re.finditer(r"^(\d+)\s+(\S+)", block, re.M)]
    if not table:
        sys.exit("check_floors: no floors found in the layout picture of docs/design-notes.md")
    return table


def entry(path, table):
    """(pattern, floor) of the longest pattern covering path, or None."""
    hits = [(pat, fl) for pat, fl in table
            if (fnmatch.fnmatch(path, pat) if "*" in pat else path.startswith(pat))]
    return max(hits, key=lambda h: len(h[0])) if hits else None


def main(root):
    table = floors(root)
    errors = []
    for top in SOURCES:
        for folder, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith((".h", ".cpp", ".cu", ".cuh")):
                    continue
                path = os.path.relpath(os.path.join(folder, name), root)
                src = entry(path, table)
                if src is None:
                    errors.append(f"{path}: no line of the layout picture covers it")
                    continue
                text = open(os.path.join(root, path), encoding="utf-8").read()
                for inc in INCLUDE.findall(text):
                    local = os.path.join(os.path.dirname(path), inc)
                    target = local if os.path.exists(os.path.join(root, local)) \
                        else os.path.join("lib", inc)
                    if not os.path.exists(os.path.join(root, target)):
                        errors.append(f'{path}: #include "{inc}" names no file of lib/ or {path}\'s folder')
                        continue
                    dst = entry(target, table)
                    if dst is None:
                        errors.append(f"{path}: #include \"{inc}\": {target} is not in the picture")
                    elif dst[0] == src[0] or dst[1] < src[1] or (
                            dst[1] == src[1] and path.startswith("cuda/")
                            and target.startswith("lib/")):
                        continue
                    else:
                        errors.append(f'{path} (floor {src[1]}, {src[0]}): #include "{inc}" '
                                      f"is on floor {dst[1]} ({dst[0]})")
    for e in errors:
        print(e)
    print(f"check_floors: {len(table)} folders, {len(errors)} violation(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
