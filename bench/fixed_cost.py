#!/usr/bin/env python3
"""Split each row's time into a per-layer fixed cost and a per-token rate: a least-squares line through
the row's times over contexts (time = F + s * context), for `pagedattn bench` JSON (seed, batch) and
bench/peers run_peers.py JSON (pagedattn and FlashInfer rows), .json or .json.gz.

Per (system, seqs, D, G, tree, T): F per layer (us), the marginal rate's bytes per second and % of the
read ceiling of the file it came from, and the worst residual of the fit. Then:
  --pair A:B[:R]   rows of system A over the same rows of B (suffixes: fp8:f16 is pagedattn-fp8 over
                   pagedattn-f16): the time ratio at --at-context, the marginal ratio s_A / s_B, the fixed
                   costs, and with R the F_A (us per layer) that a time ratio of R there would allow;
  --vs-ceiling PCT rows below PCT% of the ceiling at their longest fitted context: "loop" where the
                   marginal rate is below PCT too, else "fixed" (F's share of the row's time).
  --vs-t1 KV=R,... each row of T > 1 over T = 1 of the same (system, seqs, D, G) whose time ratio at a
                   fitted context exceeds R (kv f16 -> pagedattn-f16 and FlashInfer's f16 rows): its
                   ratios and which part misses: "loop" where the marginal ratio s_T / s_1 alone exceeds
                   R (the per-key work grows with the rows), else "fixed" (the per-layer cost).
A time ratio meets a target only where both the marginal ratio and the fixed costs allow it; these
tables tell which one does not.
  usage: bench/fixed_cost.py FILE... [--min-context 32768] [--pair fp8:f16:0.55] [--vs-t1 f16=1.10,u8=1.20] [--max-rows 128]
"""
import argparse
import gzip
import json
from collections import defaultdict


def load(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return json.load(f)


def rows_of(doc, max_rows=None):
    """(key, context, us, bytes, layers, ceiling) of every timed row; key = (system, seqs, D, G, tree, T)."""
    ceiling = doc.get("ceiling_gbs")
    cfg = doc.get("config", {})
    peers = "flashinfer" in doc or "merged" in doc
    for r in doc.get("rows", []):
        if r.get("status", "ok") != "ok" or not isinstance(r.get("us"), (int, float)):
            continue
        system = r["system"] if peers else "pagedattn-" + r["kv"]
        d = r.get("head_size", cfg.get("head_size", 0))
        g = r.get("group", cfg.get("heads", 0) // max(1, cfg.get("kv_heads", 1)))
        if max_rows and r.get("rows_per_kv_head", g * r["T"]) > max_rows:
            continue
        key = (system, r.get("seqs", 1), d, g, bool(r.get("tree")), r["T"])
        yield key, r["context"], r["us"], r.get("bytes"), r.get("layers", 1), ceiling


def fit(points):
    """Least squares of us on context; returns (F, s, worst |residual| / us)."""
    n = len(points)
    mx = sum(c for c, _ in points) / n
    my = sum(u for _, u in points) / n
    sxx = sum((c - mx) ** 2 for c, _ in points)
    s = sum((c - mx) * (u - my) for c, u in points) / sxx
    f = my - s * mx
    worst = max(abs(u - (f + s * c)) / u for c, u in points)
    return f, s, worst


def name(key):
    system, seqs, d, g, tree, t = key
    return f"{system:24} {seqs:>4} {d:>3} {g:>2} {'tree' if tree else 'chain':>5} {t:>2}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--min-context", type=int, default=32768, help="fit over contexts >= this (default 32768)")
    ap.add_argument("--pair", action="append", default=[], metavar="A:B[:R]")
    ap.add_argument("--at-context", type=int, default=32768, help="context of --pair's time ratio (default 32768)")
    ap.add_argument("--vs-t1", metavar="KV=R,...", help="T / T1 targets per kv, e.g. f16=1.10,u8=1.20")
    ap.add_argument("--vs-ceiling", type=float, metavar="PCT",
                    help="rows below PCT%% of the read ceiling at their longest fitted context: loop or fixed")
    ap.add_argument("--quiet", action="store_true", help="no per-row table")
    ap.add_argument("--max-rows", type=int, help="only rows of at most this many query rows per kv head")
    args = ap.parse_args()

    pts = defaultdict(dict)  # key -> context -> (us, bytes, layers, ceiling); later files win
    for path in args.files:
        for key, ctx, us, nbytes, layers, ceiling in rows_of(load(path), args.max_rows):
            pts[key][ctx] = (us, nbytes, layers, ceiling)

    lines = {}
    if not args.quiet:
        print(f"fit over contexts >= {args.min_context}: F = fixed us per layer; marginal = the extra tokens' bytes "
              "over their time (GB/s, % of the file's read ceiling); resid = worst |residual| / time")
        print(f"{'system':24} {'seqs':>4} {'D':>3} {'G':>2} {'form':>5} {'T':>2} {'contexts':>18} {'F us/layer':>10} "
              f"{'us/1k tok/layer':>15} {'marginal GB/s':>13} {'%ceil':>6} {'resid':>6}")
    for key in sorted(pts):
        by = {c: v for c, v in pts[key].items() if c >= args.min_context}
        if len(by) < 2:
            continue
        layers = next(iter(by.values()))[2]
        f, s, worst = fit([(c, v[0]) for c, v in by.items()])
        cs = sorted(by)
        lo, hi = by[cs[0]], by[cs[-1]]
        gbs = pct = float("nan")
        if lo[1] and hi[1]:
            gbs = (hi[1] - lo[1]) / (s * (cs[-1] - cs[0])) / 1e3
            pct = 100 * gbs / hi[3] if hi[3] else float("nan")
        lines[key] = (f, s, layers, by, pct)
        if not args.quiet:
            ctxs = ",".join(f"{c // 1024}k" for c in cs)
            print(f"{name(key)} {ctxs:>18} {f / layers:>10.2f} {1024 * s / layers:>15.3f} {gbs:>13.0f} {pct:>6.1f} "
                  f"{100 * worst:>5.1f}%")

    for pair in args.pair:
        a, b, *target = pair.split(":")
        print(f"\n{a} over {b}: the lines' time ratio at {args.at_context // 1024}k (or the longest fitted context), "
              "marginal ratio s_A / s_B, fixed us per layer"
              + (f", and the F_A that a time ratio of {target[0]} there allows" if target else ""))
        for key, (fa, sa, la, _, _) in sorted(lines.items()):
            if not key[0].endswith(a):
                continue
            other = (key[0][: len(key[0]) - len(a)] + b,) + key[1:]
            if other not in lines:
                continue
            fb, sb, _, by, _ = lines[other]
            c = args.at_context if args.at_context in by else max(by)  # the batch's contexts are shorter
            ta, tb = fa + sa * c, fb + sb * c
            allowed = f"  allowed F_A {(float(target[0]) * tb - sa * c) / la:.2f}" if target else ""
            print(f"  {name(key)} at {c // 1024:>3}k: time {ta / tb:.3f}  marginal {sa / sb:.3f}  fixed {fa / la:.2f} vs {fb / la:.2f}"
                  + allowed)

    if args.vs_t1:
        targets = dict((k, float(v)) for k, v in (x.split("=") for x in args.vs_t1.split(",")))
        print("\nT / T1 misses: measured at each fitted context, marginal ratio s_T / s_1, fixed us per layer "
              "(T vs T = 1), the part that misses")
        counts = defaultdict(lambda: defaultdict(int))
        for key, (ft, st, la, by, _) in sorted(lines.items()):
            kv = key[0].split("-")[1] if key[0].startswith("pagedattn-") else \
                ("fp8" if key[0].endswith("fp8") else "f16")
            if key[5] == 1 or kv not in targets:
                continue
            one = key[:4] + (False, 1)
            if one not in lines:
                continue
            f1, s1, _, by1, _ = lines[one]
            r = targets[kv]
            measured = {cx: by[cx][0] / by1[cx][0] for cx in by if cx in by1}
            if max(measured.values()) <= r:
                continue
            part = "loop" if st / s1 > r else "fixed"
            counts[key[0]][part] += 1
            ms = " ".join(f"{cx // 1024}k {v:.2f}" for cx, v in sorted(measured.items()))
            print(f"  {name(key)}: {ms}  marginal {st / s1:.3f}  fixed {ft / la:.2f} vs {f1 / la:.2f}  {part}")
        for system, c in sorted(counts.items()):
            print(f"  {system}: " + ", ".join(f"{v} {k}" for k, v in sorted(c.items())))

    if args.vs_ceiling:
        r = args.vs_ceiling
        print(f"\nrows below {r}% of the read ceiling at their longest fitted context: whole row %, marginal %, "
              f"the part that misses (loop: the marginal rate below {r}%; fixed: F's share)")
        counts = defaultdict(lambda: defaultdict(int))
        for key, (f, s, la, by, marginal) in sorted(lines.items()):
            c = max(by)
            us, nbytes, _, ceiling = by[c]
            if not nbytes or not ceiling:
                continue
            whole = 100 * nbytes / us / 1e3 / ceiling
            if whole >= r:
                continue
            part = "loop" if marginal < r else "fixed"
            counts[key[0]][part] += 1
            print(f"  {name(key)} at {c // 1024}k: {whole:.1f}%  marginal {marginal:.1f}%  F {f / la:.2f} us/layer  {part}")
        for system, cnt in sorted(counts.items()):
            print(f"  {system}: " + ", ".join(f"{v} {k}" for k, v in sorted(cnt.items())))


if __name__ == "__main__":
    main()
