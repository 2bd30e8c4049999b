#!/usr/bin/env python3
"""Same-call ratios of two builds' sweep rows (`pagedattn bench --scenario sweep --json`, .json or .json.gz).

    bench/sweep_ratio.py [--by-context] NEW.json[.gz] REF.json[.gz] [NEW_AGAIN.json[.gz]]

Prints, per KV precision, head size and class of rows per kv head, the median, min and max of new/ref,
then every row. With a third file (the new build run again later in the same call) the same summary of
new_again/new comes first: the noise floor of the ratios. --by-context: classes per context (the batch
rows apart) and 1-16 rows split at 8 (fwd_kernel's HR variant, tuning::half_rows).
"""
import gzip
import json
import os
import statistics
import sys


def load(path):
    with (gzip.open if path.endswith(".gz") else open)(path, "rt") as f:
        j = json.load(f)
    rows = {}
    for r in j["rows"]:
        key = (r["kv"], r["head_size"], r["group"], r.get("seqs", 1), r["context"], r["T"], bool(r.get("tree")))
        rows[key] = (r["us"], r["rows_per_kv_head"])
    return rows


BY_CONTEXT = False


def classes(a, b):
    """(kv, D, rows class) -> list of b/a ratios over the rows both have."""
    out = {}
    for key, (us_a, nrows) in a.items():
        if key not in b:
            continue
        cls = "1-16" if nrows <= 16 else "17-64" if nrows <= 64 else "65-256"
        if BY_CONTEXT:
            cls = ("1-8" if nrows <= 8 else "9-16" if nrows <= 16 else cls) + (
                " batch %dx%d" % (key[3], key[4]) if key[3] > 1 else " context %d" % key[4])
        out.setdefault((key[0], key[1], cls), []).append(b[key][0] / us_a)
    return out


def summary(title, a, b):
    print(title)
    order = lambda x: (x[0][0], x[0][1], int(x[0][2].split("-")[0]), x[0][2])
    for (kv, d, cls), v in sorted(classes(a, b).items(), key=order):
        print("  %s D=%d rows %s: %d rows, median %.3f, min %.3f, max %.3f"
              % (kv, d, cls, len(v), statistics.median(v), min(v), max(v)))


def main():
    global BY_CONTEXT
    if len(sys.argv) > 1 and sys.argv[1] == "--by-context":
        BY_CONTEXT = True
        del sys.argv[1]
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    # (labels from the file names: a call's builds all carry the call's commit)
    c_new, new = os.path.basename(sys.argv[1]), load(sys.argv[1])
    c_ref, ref = os.path.basename(sys.argv[2]), load(sys.argv[2])
    if len(sys.argv) == 4:
        again = load(sys.argv[3])
        summary("noise: %s / %s, same call" % (os.path.basename(sys.argv[3]), c_new), new, again)
    summary("%s (new) / %s (ref), same call, by KV, D and rows per kv head (chains and trees):" % (c_new, c_ref), ref, new)
    print("every row: (kv, D, G, seqs, context, T, tree) new_us ref_us new/ref")
    for key in sorted(new):
        if key in ref:
            print("  %s %.1f %.1f %.3f" % (key, new[key][0], ref[key][0], new[key][0] / ref[key][0]))


if __name__ == "__main__":
    main()
