#!/usr/bin/env python3
"""Issue 21's sweep beside FlashInfer's rows of the same run: `pagedattn bench --scenario sweep --json` and
bench/sweep_peers.sh's per-(D, G) run_peers.py JSON files. One line per chain row of one sequence that both
have: rows per kv head, pagedattn us and T/T1, FlashInfer's faster system (paged prefill or tensor-core
decode with q_len_per_req = T) us and T/T1, and pagedattn / FlashInfer. Then the issue's targets: rows with
<= 128 rows per kv head at 32k and 128k missing T/T1 <= 1.10 (f16) / 1.20 (u8), f16 rows slower than
FlashInfer, and f16 128k rows under 90% of the read ceiling. Then the draft-tree rows the same way (T: the
tree's nodes; FlashInfer's paged prefill with the tree as a custom mask, run_peers.py --flashinfer-trees),
joined by (D, G, context, T, tree); T/T1 against the chain of T = 1 of each.

    python3 bench/sweep_table.py SWEEP_JSON[.gz] [FI_DIR ...] [--kv f16] [--misses [--mma-tflops R]]

FI_DIRs: sweep_peers.sh's output directories (fi_D*_G*.json, or .json.gz as committed under bench/results; e.g. a
chain run and a tree run); per key the fastest row of all.
Without them, the pagedattn columns alone. Last, per KV precision and band of rows per kv head, the T/T1
range of the rows of one sequence (chains and trees) at 32k and 128k and how many miss the target (f16 and
fp8 1.10, u8 1.20). --misses adds, per target, every missed row (chains and trees), one per line.
--mma-tflops R (or D:R,D:R per head size) gives each T/T1 miss its MMA floor: the time the row's S and P V
MMAs alone take at R TFLOP/s (4 x rows x keys x D x Hk x layers FLOP, the rows themselves, no tile padding),
as a multiple of its T = 1 row's time. Where that floor exceeds the target, no kernel that runs f16/bf16
MMAs at R meets it, whatever it overlaps: the row is past the compute/memory ridge. R: the rate the same
build reaches on the same GPU where the MMAs are the bound, e.g. the prefill scenario's TFLOP/s at that D
in the same run.
"""
import argparse
import glob
import gzip
import json
import os
import re


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sweep")
    ap.add_argument("fi_dir", nargs="*")
    ap.add_argument("--kv", default="f16,u8")
    ap.add_argument("--misses", action="store_true",
                    help="last, every row (chains and trees) that misses one of the three targets, one per line")
    ap.add_argument("--mma-tflops", default="",
                    help="with --misses: each T/T1 miss's MMA floor at this rate (R, or D:R,D:R per head size), as a "
                         "multiple of its T = 1 time")
    a = ap.parse_args()
    sw = json.load(gzip.open(a.sweep) if a.sweep.endswith(".gz") else open(a.sweep))
    pa = {}
    for r in sw["rows"]:
        if r["seqs"] == 1:
            pa[(r["kv"], r["head_size"], r["group"], r["context"], r["tree"], r["T"])] = r
    fi = {}  # (D, G, context, T, tree) -> (us, system)
    for f in [f for d in a.fi_dir for f in sorted(glob.glob(os.path.join(d, "fi_D*_G*.json*")))]:
        m = re.search(r"fi_D(\d+)_G(\d+)\.json(\.gz)?$", f)
        if not m:
            continue
        D, G = int(m.group(1)), int(m.group(2))
        for r in json.load(gzip.open(f) if f.endswith(".gz") else open(f))["rows"]:
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
        if rows <= 128 and ctx >= 32768 and r["t_over_t1"] > TARGET[kv]:
            misses["t_over_t1"].append(key)
        if kv == "f16" and f and r["us"] > f[0]:
            misses["slower"].append(key)
        if kv == "f16" and ctx >= 131072 and rows <= 128 and r["pct_ceiling"] < 90:
            misses["ceiling"].append(key)
    total = sum(1 for k in pa if k[0] in a.kv.split(",") and not k[4])
    print("\nchain rows: %d; misses: T/T1 (<= 128 rows, 32k/128k) %d, f16 slower than FlashInfer %d, f16 128k under "
          "90%% of the ceiling %d" % (total, len(misses["t_over_t1"]), len(misses["slower"]), len(misses["ceiling"])))
    trees = [k for k in sorted(pa) if k[4] and k[0] in a.kv.split(",")]
    if trees:
        print_trees(pa, fi, trees)
    print_bands(pa, a.kv.split(","))
    if a.misses:
        rates = {}
        for part in filter(None, a.mma_tflops.split(",")):
            d, _, r = part.rpartition(":")
            rates[int(d) if d else 0] = float(r)
        print_misses(pa, fi, a.kv.split(","), rates, sw["config"])


def print_trees(pa, fi, trees):
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


def print_bands(pa, kvs):
    """The T/T1 target by band of rows per kv head: one sequence, 32k and 128k, chains and trees."""
    bands = [(1, 16), (17, 32), (33, 64), (65, 128)]
    print("\nT/T1 at 32k and 128k, one sequence, chains and trees, by rows per kv head (target: f16 and fp8 "
          "<= 1.10, u8 <= 1.20)")
    for kv in kvs:
        picked = [r for k, r in pa.items() if k[0] == kv and k[3] >= 32768 and k[5] * k[2] <= 128]
        if not picked:
            continue
        miss = sum(1 for r in picked if r["t_over_t1"] > TARGET[kv])
        print("%s: %d rows, %d miss" % (kv, len(picked), miss))
        for lo, hi in bands:
            v = [r["t_over_t1"] for r in picked if lo <= r["T"] * r["group"] <= hi]
            if v:
                print("  rows %3d-%3d: %3d rows, T/T1 %.2f-%.2f, %d miss" % (lo, hi, len(v), min(v), max(v),
                                                                           sum(1 for x in v if x > TARGET[kv])))


def mma_floor(k, r, cfg, rates):
    """The row's S = Q K^T and O += P V MMA time at its head size's rate (`rates`: D -> TFLOP/s, 0: any
    other D), over its T = 1 row's time; None without a rate."""
    kv, D, G, ctx, tree, T = k
    tflops = rates.get(D, rates.get(0))
    if not tflops:
        return None
    flop = 2.0 * T * G * (ctx + T) * (D + r.get("value_head_size", D)) * cfg["kv_heads"] * r["layers"]
    return flop / (tflops * 1e12) * 1e6 / (r["us"] / r["t_over_t1"])


def print_misses(pa, fi, kvs, rates=None, cfg=None):
    """Every row of one sequence, chains and trees, that misses a target of issue 21: T/T1 at 32k and 128k
    with <= 128 rows per kv head, f16 slower than FlashInfer's row of the same shape, f16 at 128k with
    <= 128 rows per kv head under 90% of the read ceiling. Sorted by rows per kv head, D, G, context.
    With `rates`, each T/T1 miss also gets its MMA floor (mma_floor), and the count past the ridge."""
    rates = rates or {}

    def t_value(k):
        s = "T/T1 %.2f" % pa[k]["t_over_t1"]
        f = mma_floor(k, pa[k], cfg, rates)
        if f is not None:
            s += "  MMA floor %.2f%s" % (f, " (past the ridge)" if f > TARGET[k[0]] else "")
        return s

    def name(k):
        kv, D, G, ctx, tree, T = k
        return "%-4s D=%-3d G=%-2d %6d %s T=%-2d rows=%-3d" % (kv, D, G, ctx, "tree " if tree else "chain", T, T * G)
    keys = sorted((k for k in pa if k[0] in kvs), key=lambda k: (k[0], k[5] * k[2], k[1], k[2], k[3], k[4]))
    peer = {k: fi.get((k[1], k[2], k[3], k[5], k[4])) for k in keys}  # FlashInfer's (us, system) or None
    long_ctx = [k for k in keys if k[5] * k[2] <= 128 and k[3] >= 32768]
    lists = [
        ("T/T1 over the target (f16 1.10, u8 1.20)", [k for k in long_ctx if pa[k]["t_over_t1"] > TARGET[k[0]]],
         t_value),
        ("f16 slower than FlashInfer", [k for k in keys if k[0] == "f16" and peer[k] and pa[k]["us"] > peer[k][0]],
         lambda k: "%.1f vs %.1f us (%.3fx, %s)" % (pa[k]["us"], peer[k][0], pa[k]["us"] / peer[k][0], peer[k][1])),
        ("f16 at 128k under 90% of the read ceiling",
         [k for k in long_ctx if k[0] == "f16" and k[3] >= 131072 and pa[k]["pct_ceiling"] < 90],
         lambda k: "%.1f%%" % pa[k]["pct_ceiling"]),
    ]
    for title, miss, value in lists:
        print("\nmisses: %s, %d rows" % (title, len(miss)))
        if rates and value is t_value:
            floors = [mma_floor(k, pa[k], cfg, rates) for k in miss]
            past = sum(1 for k, f in zip(miss, floors) if f is not None and f > TARGET[k[0]])
            print("  (MMA floor at %s TFLOP/s, a multiple of the T = 1 time: %d of them past the ridge)"
                  % (", ".join("D = %d %.0f" % (d, r) if d else "%.0f" % r for d, r in sorted(rates.items())), past))
        for k in miss:
            print("  %s  %s" % (name(k), value(k)))


TARGET = {"f16": 1.10, "bf16": 1.10, "fp8": 1.10, "u8": 1.20}

if __name__ == "__main__":
    main()
