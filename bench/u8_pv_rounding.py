"""The u8 value path's f16 rounding of P * vscale, emulated in NumPy (no GPU): how far the kernel's
o = (sum_j f16(p_j vscale_j) (code_j - 128) + sum_j p_j (vmin_j + 128 vscale_j)) / sum_j p_j lands from
the exact weighted mean as the value rows' range shrinks (p_j * vscale_j falls into f16 subnormals).
Rows straddle zero as the GPU suites' rows do; p_j = 2^(s_j - max) * 2^stale with s_j ~ N(0, 2^2) in log2
units; stale = 0 (the exact max: worst case) and 6 (the few-query kernel's largest stale reference).
The f32 sums here are exact-order sums (the tensor cores' accumulation is not modelled).
    usage: python3 bench/u8_pv_rounding.py   (prints: range, stale, share of subnormal products, rel_l2;
    the same with the kernels' power of two per 32-key slice, u8_value_exp)
Second table: the Hopper kernel's 128-row forms dequantise instead (docs/design.md, "u8 on the Hopper
kernel"): each key and value element becomes f16(min + code * scale). Attention of 64 queries over
N(0, 1) rows quantised per row, in f64 with the exact values against the f16-rounded ones: rel_l2 of
the output for K and V rounded, and each alone, by context and value range."""
import numpy as np

rng = np.random.default_rng(20261201)
n, D = 65536, 64
print("value range  stale  subnormal  rel_l2    | with 2^E: subnormal  rel_l2")
for R in (10.0, 1.0, 0.1, 0.01, 0.001):
    for stale in (0, 6):
        s = rng.standard_normal(n) * 2.0
        p = np.exp2(s - s.max() + stale).astype(np.float32)
        vs = np.float16(R / 255 * rng.uniform(0.5, 1.0, n)).astype(np.float32)
        vmin = (-vs * rng.uniform(64, 192, n)).astype(np.float16).astype(np.float32)
        code = rng.integers(0, 256, (n, D))
        exact = (p[:, None].astype(np.float64) * (vmin[:, None].astype(np.float64) + code * vs[:, None].astype(np.float64))).sum(0)
        ph = (p * vs).astype(np.float16).astype(np.float32)
        acc = (ph[:, None] * (code - 128).astype(np.float32)).sum(0, dtype=np.float32)
        c = (p * (vmin + np.float32(128) * vs)).sum(dtype=np.float32)
        err = np.linalg.norm((acc + c) - exact) / np.linalg.norm(exact)
        # the kernels' fix: per 32-key slice, vscale * 2^E with E = 8 - floor(log2(max vscale)) (u8_value_exp)
        vmax = vs.reshape(-1, 32).max(1)
        e = np.repeat(8 - np.floor(np.log2(vmax)), 32).astype(np.float32)
        ph2 = (p * (vs * np.exp2(e))).astype(np.float16).astype(np.float32)
        acc2 = ((ph2 * np.exp2(-e))[:, None] * (code - 128).astype(np.float32)).sum(0, dtype=np.float32)
        err2 = np.linalg.norm((acc2 + c) - exact) / np.linalg.norm(exact)
        print(f"{R:11g}  {stale:5d}  {(ph < 6.1035e-5).mean():9.3f}  {err:.2e}  {(ph2 < 6.1035e-5).mean():9.3f}  {err2:.2e}")

def quantise(x):  # per row: f16 minimum (rounded down) and scale (rounded up), codes in [0, 255]
    mn = x.min(-1, keepdims=True).astype(np.float16)
    mn = np.where(mn > x.min(-1, keepdims=True), np.nextafter(mn, np.float16(-np.inf)), mn).astype(np.float64)
    sc = np.float16((x.max(-1, keepdims=True) - mn) / 255)
    sc = np.where(sc * 255 + mn < x.max(-1, keepdims=True), np.nextafter(sc, np.float16(np.inf)), sc).astype(np.float64)
    return mn + np.clip(np.round((x - mn) / np.where(sc > 0, sc, 1)), 0, 255) * sc


def attention(q, k, v):
    s = q @ k.T / np.sqrt(q.shape[1])
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


print("\ndequantised to f16 (the 128-row forms)\n  D   keys  value range  rel_l2 K and V  K only    V only")
for D, L, R in ((64, 8192, 1.0), (128, 4096, 1.0), (128, 65536, 1.0), (128, 8192, 0.01), (256, 8192, 1.0)):
    q = rng.standard_normal((64, D))
    k, v = quantise(rng.standard_normal((L, D))), quantise(rng.standard_normal((L, D)) * R)
    kh, vh = (x.astype(np.float16).astype(np.float64) for x in (k, v))
    o = attention(q, k, v)
    err = [np.linalg.norm(attention(q, a, b) - o) / np.linalg.norm(o) for a, b in ((kh, vh), (kh, v), (k, vh))]
    print(f"{D:3d}  {L:5d}  {R:11g}  {err[0]:14.2e}  {err[1]:.2e}  {err[2]:.2e}")
