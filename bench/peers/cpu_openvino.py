"""pagedattn's cpu backend beside OpenVINO's own PagedAttentionExtension op on the CPU, one run.

Seed shape (H=16, Hk=4, D=256), one sequence with L cached tokens and T new tokens, one layer per call,
both ops reading the same cache bytes (pagedattn read-only: key/value absent; OpenVINO with
write_kv_cache=False), f16 caches and u8 caches (OpenVINO's u8 BY_TOKEN layout holding the same codes),
f32 queries (OpenVINO's INFERENCE_PRECISION_HINT=f32; --query f16 gives pagedattn f16 queries and
--ov-precision bf16 / f16 OpenVINO's reduced-precision inference, as on a CPU with AMX). Median wall
time of N calls each; the machine's
read bandwidth over all threads is measured in the same run, and each row gives its KV bytes / time as
GB/s and % of it. Needs the pagedattn package (CPU) and openvino.
    usage: python3 bench/peers/cpu_openvino.py [--context 8192,32768] [--tokens 1,2,3,4,8] [--kv f16,u8]
                                               [--batch 8x4096x4] [--repeats 20] [--json FILE]
                                               [--query f32|f16] [--ov-precision f32|bf16|f16]
"""
import argparse
import concurrent.futures
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "python"))
import pagedattn  # noqa: E402
import test_openvino as ovt  # noqa: E402  (the OpenVINO graph, layouts and feeding of the comparison tests)

H, HK, D = 16, 4, 256


def read_bandwidth_gbs(threads: int, mib: int = 512) -> float:
    """Sum a buffer (larger than the caches) from `threads` threads at once; best of 3, GB/s."""
    a = np.ones(mib << 18, np.float32)  # mib MiB
    parts = np.array_split(a, threads)
    best = 0.0
    with concurrent.futures.ThreadPoolExecutor(threads) as ex:
        for _ in range(3):
            t0 = time.perf_counter()
            list(ex.map(np.sum, parts))
            best = max(best, a.nbytes / (time.perf_counter() - t0) / 1e9)
    return best


def make_case(L: int, T: int, kv: str, rng: np.random.Generator, seqs: int = 1, qdtype=np.float32) -> ovt.Case:
    """`seqs` sequences, each with L cached tokens and T new ones; their blocks shuffled over one pool."""
    per_seq = -(-(L + T) // ovt.BLOCK_SIZE)
    n_blocks = per_seq * seqs
    table = rng.permutation(n_blocks).astype(np.int32)
    shape = (n_blocks, HK, ovt.BLOCK_SIZE, D)
    case = ovt.Case(seed=0, kv=kv, H=H, Hk=HK, D=D, num_blocks=n_blocks, past=np.full(seqs, L, np.int32),
                    T=np.full(seqs, T), begins=np.arange(seqs + 1, dtype=np.int32) * T, block_indices=table,
                    block_indices_begins=np.arange(seqs + 1, dtype=np.int32) * per_seq,
                    query=rng.standard_normal((seqs * T, H * D)).astype(qdtype),
                    key_cache=None, value_cache=None)
    for which in ("key", "value"):
        x = rng.standard_normal(shape).astype(np.float32)
        if kv == "f16":
            setattr(case, f"{which}_cache", x.astype(np.float16))
        else:
            codes, scale, mn = ovt._quantize_rows(x, rng)
            setattr(case, f"{which}_cache", codes)
            setattr(case, f"{which}_scale", scale)
            setattr(case, f"{which}_min", mn)
    return case


def timed(fn, repeats: int) -> float:
    fn()  # warm-up (OpenVINO compiles lazily; pagedattn's pool starts)
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--context", default="8192,32768")
    ap.add_argument("--tokens", default="1,2,3,4,8")
    ap.add_argument("--kv", default="f16,u8")
    ap.add_argument("--batch", default="8x4096x4", help="batch rows SEQSxLxT, comma-separated ('' for none)")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--json")
    ap.add_argument("--query", default="f32", choices=["f32", "f16"], help="pagedattn's query dtype")
    ap.add_argument("--ov-precision", default="f32", choices=["f32", "bf16", "f16"],
                    help="OpenVINO's INFERENCE_PRECISION_HINT")
    a = ap.parse_args()
    threads = os.cpu_count() or 1
    bw = read_bandwidth_gbs(threads)
    print(f"read bandwidth, {threads} threads: {bw:.1f} GB/s; pagedattn {pagedattn.__file__}; "
          f"openvino {ovt.ov.__version__ if hasattr(ovt, 'ov') else '?'}; pagedattn query {a.query}, "
          f"OpenVINO precision {a.ov_precision}")
    print(f"{'kv':4} {'seqs':>4} {'L':>6} {'T':>2} {'pagedattn ms':>13} {'T/T1':>5} {'GB/s':>6} {'%bw':>5} "
          f"{'OpenVINO ms':>12} {'T/T1':>5} {'OV/pa':>6}")
    rows = []
    rng = np.random.default_rng(20261201)

    def row(kv, seqs, L, T, base):
        case = make_case(L, T, kv, rng, seqs, np.float16 if a.query == "f16" else np.float32)
        t_pa = timed(lambda: ovt.run_pagedattn(case, score_window=None), a.repeats)
        t_ov = timed(lambda: ovt.run_openvino(case, precision=a.ov_precision), a.repeats)
        kv_bytes = case.key_cache.nbytes + case.value_cache.nbytes
        gbs = kv_bytes / t_pa / 1e9
        rel = (lambda t, k: f"{t / base.setdefault(k, t):5.2f}") if base is not None else (lambda t, k: f"{'-':>5}")
        rows.append(dict(kv=kv, seqs=seqs, L=L, T=T, pagedattn_ms=t_pa * 1e3, openvino_ms=t_ov * 1e3,
                         kv_bytes=kv_bytes, gbs=gbs, pct_bw=100 * gbs / bw))
        print(f"{kv:4} {seqs:4d} {L:6d} {T:2d} {t_pa * 1e3:13.2f} {rel(t_pa, 'pa')} {gbs:6.1f} "
              f"{100 * gbs / bw:5.1f} {t_ov * 1e3:12.2f} {rel(t_ov, 'ov')} {t_ov / t_pa:6.2f}", flush=True)

    for kv in a.kv.split(","):
        for L in (int(x) for x in a.context.split(",")):
            base = {}
            for T in (int(x) for x in a.tokens.split(",")):
                row(kv, 1, L, T, base)
        for spec in filter(None, a.batch.split(",")):  # batch rows: no T/T1
            seqs, L, T = (int(x) for x in spec.split("x"))
            row(kv, seqs, L, T, None)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(read_bandwidth_gbs=bw, threads=threads, shape=[H, HK, D], query=a.query,
                           ov_precision=a.ov_precision, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
