#!/usr/bin/env python3
"""Summarises the per-CTA timeline lines of a -DPAGEDATTN_TIMELINE=1 build (bench/timeline.sh).

Input lines: "TL <kernel> <grid x> <grid y> <bx> <by> <smid> <g0 ns> <g1 ns> <d1..d9 cycles from the first
stamp, -1 unset>" (d9 of fwd_kernel: its partition flushes' summed cycles, where it flushed). Takes the
last launch of each kernel (the last replay of a --layers 1 run: the last
line's grid shape, its latest grid-size lines by start) and prints, relative to the
earliest attention-CTA start of that replay: start and end spread, and each phase's duration
(min / median / max over CTAs). Cycles become us at the SM clock the CTAs themselves measured (their
last stamp in cycles against their global-timer span, median); SM_CLOCK_MHZ is the fallback.
usage: timeline.py LOG SM_CLOCK_MHZ
"""
import statistics
import sys

FWD_PHASES = ["pdl wait", "write-in", "prologue issued", "Q staged", "first K", "loop", "epilogue: groups",
              "epilogue: rows out"]
MERGE_PHASES = ["pdl wait", "fold", "store"]


def last_launch(rows):
    gx, gy = rows[-1][0], rows[-1][1]
    same = sorted((r[2:] for r in rows if r[0] == gx and r[1] == gy), key=lambda r: r[3])
    return same[-gx * gy:]


def q(vals):
    vals = sorted(vals)
    return "%7.2f %7.2f %7.2f" % (vals[0], statistics.median(vals), vals[-1])


def attention(fwd, kernel, mhz, t0):
    """Prints one attention kernel's phases (its last launch's CTAs, times from t0 ns); returns the SM
    clock its CTAs measured (MHz; `mhz` where they measured none)."""
    spans = [max(r[5:]) / ((r[4] - r[3]) / 1000.0) for r in fwd if r[4] > r[3] and max(r[5:]) > 0]
    if spans:
        measured = statistics.median(spans)
        print("SM clock from %s_kernel's own stamps: %.0f MHz (nvidia-smi maximum %.0f)" % (kernel, measured, mhz))
        mhz = measured
    us = lambda ns: (ns - t0) / 1000.0
    cyc = lambda c: c / mhz
    print("%d attention CTAs (%s_kernel) on %d SMs; times in us (min / median / max over CTAs)" %
          (len(fwd), kernel, len({r[2] for r in fwd})))
    print("  %-22s %s" % ("attention start", q([us(r[3]) for r in fwd])))
    prev = [0] * len(fwd)
    for i, name in enumerate(FWD_PHASES):
        cur = [r[5 + i] for r in fwd]
        if all(c < 0 for c in cur):
            continue
        print("  %-22s %s" % ("+ " + name, q([cyc(c - p) for c, p in zip(cur, prev) if c >= 0])))
        prev = [c if c >= 0 else p for c, p in zip(cur, prev)]
    print("  %-22s %s" % ("attention end", q([us(r[4]) for r in fwd])))
    # field 9: the summed duration of the CTA's partition flushes (fwd_kernel in deterministic mode, a run of
    # partitions per CTA), inside "loop"; absent (-1) where the CTA flushed nothing
    flush = [cyc(r[13]) for r in fwd if r[13] >= 0]
    if flush:
        print("  %-22s %s  (%d of %d CTAs flushed; inside loop)" %
              ("flushes, summed", q(flush), len(flush), len(fwd)))
    return mhz


def main():
    log, mhz = sys.argv[1], float(sys.argv[2])
    rows = {}
    for line in open(log, errors="replace"):
        f = line.split()
        if len(f) == 18 and f[0] == "TL":
            rows.setdefault(f[1], []).append([int(x) for x in f[2:]])
    kernels = [k for k in ("fwd", "wg") if k in rows]  # fwd_kernel, wg_kernel (the Hopper kernel)
    if not kernels:
        print("no timeline lines in", log)
        return
    launches = {k: last_launch(rows[k]) for k in kernels}
    t0 = min(r[3] for k in kernels for r in launches[k])  # the earliest attention-CTA start of any kernel
    clock = [attention(launches[k], k, mhz, t0) for k in kernels][0]
    us = lambda ns: (ns - t0) / 1000.0
    cyc = lambda c: c / clock
    if "merge" in rows:
        mg = last_launch(rows["merge"])
        print("%d merge CTAs" % len(mg))
        print("  %-22s %s" % ("merge start", q([us(r[3]) for r in mg])))
        prev = [0] * len(mg)
        for i, name in enumerate(MERGE_PHASES):
            cur = [r[5 + i] for r in mg]
            print("  %-22s %s" % ("+ " + name, q([cyc(c - p) for c, p in zip(cur, prev)])))
            prev = cur
        print("  %-22s %s" % ("merge end", q([us(r[4]) for r in mg])))


if __name__ == "__main__":
    main()
