#!/usr/bin/env python3
"""Host check of s10_copy_paths.patch's address rule (no GPU): for random block sizes (16-128), slice
sizes (16/32/64 keys), tables, slice starts and partition ends, the row each copied key gets from
'one lookup per block + offset in the block' equals the per-row lookup it replaces (cache_row of the
key), for every key below kv_end. Run: python3 bench/experiments/s10_copy_paths_check.py"""
import random


def cache_row(table, pos, hk, n_kv_heads, lbs):  # as kernel.cuh's cache_row
    return ((table[pos >> lbs] * n_kv_heads + hk) << lbs) | (pos & ((1 << lbs) - 1))


def main(trials=20000, seed=1):
    rng = random.Random(seed)
    checked = bad = 0
    for _ in range(trials):
        kpw, lbs = rng.choice([16, 32, 64]), rng.choice([4, 5, 6, 7])
        hkn = rng.randint(1, 4)
        hk, nkeys = rng.randrange(hkn), rng.randint(1, 2000)
        table = [rng.randrange(10000) for _ in range((nkeys >> lbs) + 1)]
        js = (rng.randrange(0, nkeys, 64) if nkeys > 64 else 0) + rng.randrange(8) * kpw  # kv_begin: multiple of 64
        if js >= nkeys:
            continue
        kv_end = min(nkeys, js + rng.randint(1, 2 * kpw))
        max_blocks = kpw // 16
        rowb = [cache_row(table, js + (k << lbs), hk, hkn, lbs)
                if (k == 0 or (k << lbs) < kpw) and js + (k << lbs) < kv_end else None for k in range(max_blocks)]
        for r in range(min(kpw, kv_end - js)):
            checked += 1
            b = rowb[r >> lbs] if (r >> lbs) < max_blocks else None
            bad += b is None or b + (r & ((1 << lbs) - 1)) != cache_row(table, js + r, hk, hkn, lbs)
    print("seed %d: %d keys checked, %d mismatches" % (seed, checked, bad))
    return bad


if __name__ == "__main__":
    raise SystemExit(1 if main() else 0)
