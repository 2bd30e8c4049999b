#!/usr/bin/env python3
"""Issue 21's sweep beside FlashInfer's rows of the same run: `pagedattn bench --scenario sweep --json` and
bench/sweep_peers.sh's per-(D, G) run_peers.py JSON files. One line per chain row of one sequence that both
have: rows per kv head, pagedattn us and T/T1, FlashInfer's faster system (paged prefill or tensor-core
decode with q_len_per_req = T) us and T/T1, and pagedattn / FlashInfer. Then the issue's targets: rows with
<= 128 rows per kv head at 32k and 128k missing T/T1 <= 1.10 (f16) / 1.20 (u8), f16 rows slower than
FlashInfer, and f16 128k rows under 90% of the read ceiling. Then the draft-tree rows the same way (T: the
tree's nodes; FlashInfer's paged prefill with the tree as a custom mask, run_peers.py --flashinfer-trees),
joined by (D, G, context, T, tree); T/T1 against the chain of T = 1 of each.

    python3 bench/sweep_table.py SWEEP_JSON FI_DIR [FI_DIR ...] [--kv f16]

FI_DIRs: sweep_peers.sh's output directories (e.g. a chain run and a tree run); per key the fastest row of all.
"""
import argparse
import glob
import json
import os
import re


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sweep")
    ap.add_argument("fi_dir", nargs="+")
    ap.add_argument("--kv", default="f16,u8")
    a = ap.parse_args()
    sw = json.load(open(a.sweep))
    pa = {}
    for r in sw["rows"]:
        if r["seqs"] == 1:
            pa[(r["kv"], r["head_size"], r["group"], r["context"], r["tree"], r["T"])] = r
    fi = {}  # (D, G, context, T, tree) -> (us, system)
    for f in [f for d in a.fi_dir for f in glob.glob(os.path.join(d, "fi_D*_G*.json"))]:
        m = re.search(r"fi_D(\d+)_G(\d+)\.json$", f)
        D, G = int(m.group(1)), int(m.group(2))
        for r in json.load(open(f))["rows"]:
            # (FlashInfer over an fp8 cache reads half the bytes: not a peer of the f16 and u8 rows)
            if r.get("status") != "ok" or r.get("seqs") != 1 or "fp8" in r["system"]:
                continue
            k = (D, G, r["context"], r["T"], r.get("tree", False))
            if k not in fi or r["us"] < fi[k][0]:
                fi[k] = (r["us"], r["system"])
    print("%-4s %4s %3s %7s %3s %5s %10s %6s %10s %6s %8s  %s" % ("kv", "D", "G", "context", "T", "rows", "pagedattn",
                                                             "T/T1", "flashinfer", "T/T1", "pa/fi", "fi system"))
    misses = {"t_over_t1": [], "slower": [], "ceiling": []}
    for key in sorted(pa):
        kv, D, G, ctx, tree, T = key
        if kv not in a.kv.split(",") or tree:
            continue
        r = pa[key]
        f = fi.get((D, G, ctx, T, False))
        f1 = fi.get((D, G, ctx, 1, False))
        rows = T * G
        cells = ("%10.1f %6s" % (f[0], "%.2f" % (f[0] / f1[0]) if f1 else "-")) if f else "%10s %6s" % ("-", "-")
        ratio = "%8.3f" % (r["us"] / f[0]) if f and kv == "f16" else "%8s" % "-"
        print("%-4s %4d %3d %7d %3d %5d %10.1f %6.2f %s %s  %s" % (kv, D, G, ctx, T, rows, r["us"], r["t_over_t1"], cells,
                                                              ratio, f[1] if f else "not run"))
        if rows <= 128 and ctx >= 32768 and r["t_over_t1"] > (1.10 if kv == "f16" else 1.20):
            misses["t_over_t1"].append(key)
        if kv == "f16" and f and r["us"] > f[0]:
            misses["slower"].append(key)
        if kv == "f16" and ctx >= 131072 and rows <= 128 and r["pct_ceiling"] < 90:
            misses["ceiling"].append(key)
    total = sum(1 for k in pa if k[0] in a.kv.split(",") and not k[4])
    print("\nchain rows: %d; misses: T/T1 (<= 128 rows, 32k/128k) %d, f16 slower than FlashInfer %d, f16 128k under "
          "90%% of the ceiling %d" % (total, len(misses["t_over_t1"]), len(misses["slower"]), len(misses["ceiling"])))
    trees = [k for k in sorted(pa) if k[4] and k[0] in a.kv.split(",")]
    if not trees:
        return
    print("\ndraft trees (node i's parent (i - 1) / 2; T = nodes, rows = T * G; T/T1 against each one's chain T = 1)")
    print("%-4s %4s %3s %7s %3s %5s %10s %6s %10s %6s %8s  %s" % ("kv", "D", "G", "context", "T", "rows", "pagedattn",
                                                             "T/T1", "flashinfer", "T/T1", "pa/fi", "fi system"))
    slower, joined = [], 0
    for key in trees:
        kv, D, G, ctx, _, T = key
        r = pa[key]
        f = fi.get((D, G, ctx, T, True))
        f1 = fi.get((D, G, ctx, 1, False))
        cells = ("%10.1f %6s" % (f[0], "%.2f" % (f[0] / f1[0]) if f1 else "-")) if f else "%10s %6s" % ("-", "-")
        ratio = "%8.3f" % (r["us"] / f[0]) if f and kv == "f16" else "%8s" % "-"
        print("%-4s %4d %3d %7d %3d %5d %10.1f %6.2f %s %s  %s" % (kv, D, G, ctx, T, T * G, r["us"], r["t_over_t1"],
                                                              cells, ratio, f[1] if f else "not run"))
        if kv == "f16" and f:
            joined += 1
            if r["us"] > f[0]:
                slower.append(key)
    print("\ntree rows: %d; f16 with a FlashInfer row %d, slower than FlashInfer %d"
          % (len(trees), joined, len(slower)))


if __name__ == "__main__":
    main()
