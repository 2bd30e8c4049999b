"""Per row (kv, seqs, context, T) of a bench/cpu_ab.sh run: each side's median over the rounds, new / base,
the per-round ratios' range and each side's T/T1.
    usage: python3 bench/cpu_ab_table.py LOGS_DIR     (LOGS_DIR/{base,new}_r<i>.json, or .json.gz as committed)"""
import glob
import gzip
import json
import os
import statistics
import sys


def load(logs, side):
    runs = []
    files = glob.glob(os.path.join(logs, f"{side}_r*.json")) or glob.glob(os.path.join(logs, f"{side}_r*.json.gz"))
    for f in sorted(files):
        with (gzip.open(f, "rt") if f.endswith(".gz") else open(f)) as fh:
            rows = json.load(fh)["rows"]
        runs.append({(r["kv"], r["seqs"], r["context"], r["T"]): r["us"] for r in rows})
    return runs


def main():
    B, N = load(sys.argv[1], "base"), load(sys.argv[1], "new")
    med = lambda runs, key: statistics.median(r[key] for r in runs)
    print(f"{'kv':5} {'seqs':>4} {'context':>7} {'T':>2} {'base us':>12} {'new us':>12} {'new/base':>8} "
          f"{'per-round':>13} {'T/T1 base':>9} {'T/T1 new':>8}")
    for key in B[0]:
        b, n = med(B, key), med(N, key)
        rr = [N[i][key] / B[i][key] for i in range(min(len(B), len(N)))]
        k1 = key[:3] + (1,)
        tb = b / med(B, k1) if k1 in B[0] else 1
        tn = n / med(N, k1) if k1 in N[0] else 1
        print(f"{key[0]:5} {key[1]:>4} {key[2]:>7} {key[3]:>2} {b:12.1f} {n:12.1f} {n / b:8.3f} "
              f"{min(rr):6.3f}-{max(rr):5.3f} {tb:9.2f} {tn:8.2f}")


if __name__ == "__main__":
    main()
