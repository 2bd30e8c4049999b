"""The u8 value path's f16 rounding of P * vscale, emulated in NumPy (no GPU): how far the kernel's
o = (sum_j f16(p_j vscale_j) (code_j - 128) + sum_j p_j (vmin_j + 128 vscale_j)) / sum_j p_j lands from
the exact weighted mean as the value rows' range shrinks (p_j * vscale_j falls into f16 subnormals).
Rows straddle zero as the GPU suites' rows do; p_j = 2^(s_j - max) * 2^stale with s_j ~ N(0, 2^2) in log2
units; stale = 0 (the exact max: worst case) and 6 (the few-query kernel's largest stale reference).
The f32 sums here are exact-order sums (the tensor cores' accumulation is not modelled).
    usage: python3 bench/u8_pv_rounding.py   (prints: range, stale, share of subnormal products, rel_l2;
    the same with the kernels' power of two per 32-key slice, u8_value_exp)"""
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
