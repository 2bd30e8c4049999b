# Host model of S = Q K^T on e4m3 tensor cores with the f16 query as a sum of e4m3 terms (bench/NOTES.md,
# "Issue 23: fp8"): rel_l2 of the attention output against the exact scores on the same K / V codes, for 1-3
# terms, with an f32 sum per k32 MMA or one truncated to 13 mantissa bits. Needs numpy and ml_dtypes.
import numpy as np, ml_dtypes
E4 = ml_dtypes.float8_e4m3fn
rng = np.random.default_rng(7)
def e4(x): return np.clip(x, -448, 448).astype(E4).astype(np.float64)
def pow2scale(x):  # per-row power of two mapping max|x| under 448
    m = np.max(np.abs(x), axis=-1, keepdims=True); m[m == 0] = 1
    return 2.0 ** np.floor(np.log2(448 / m))
def split(q, n):
    terms, r = [], q.copy()
    for _ in range(n):
        s = pow2scale(r); t = e4(r * s) / s; terms.append(t); r = r - t
    return terms
def trunc(x, bits):  # round-toward-zero to `bits` mantissa bits (reduced-precision accumulation model)
    m, e = np.frexp(x); return np.ldexp(np.trunc(m * 2**bits) / 2**bits, e)
def scores(terms, K, acc_bits):
    D = K.shape[1]; s = np.zeros((terms[0].shape[0], K.shape[0]))
    for t in terms:
        for c in range(0, D, 32):  # one k32 MMA per chunk, its sum at acc_bits, added to an f32 accumulator
            part = t[:, c:c+32] @ K[:, c:c+32].T
            s = s + (trunc(part, acc_bits) if acc_bits else part)
    return s
def attn(S, V, scale):
    S = S * scale; S = S - S.max(1, keepdims=True); P = np.exp(S); return (P @ V) / P.sum(1, keepdims=True)
for D in (64, 128, 256):
  for ctx in (1000, 8000):
    worst = {}
    for trial in range(4):
        q = rng.standard_normal((8, D)).astype(np.float16).astype(np.float64) * rng.choice([0.3, 1, 3])
        K = e4(rng.standard_normal((ctx, D))); V = e4(rng.standard_normal((ctx, D)))
        sc = 1 / np.sqrt(D)
        ref = attn(q @ K.T, V, sc)
        for n in (1, 2, 3):
            for bits in (0, 13):
                o = attn(scores(split(q, n), K, bits), V, sc)
                r = np.linalg.norm(o - ref) / np.linalg.norm(ref)
                worst[(n, bits)] = max(worst.get((n, bits), 0), r)
    print(D, ctx, "  ".join(f"terms {n} acc {'f32' if b == 0 else str(b)+'b'}: {v:.1e}" for (n, b), v in worst.items()))
