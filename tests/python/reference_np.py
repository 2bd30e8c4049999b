"""An independent NumPy reference of the op and a NumPy random-case generator for the Python tests.

Written from the semantics in include/pagedattn/params.h, not from the C++ oracle: gather each
sequence's pages through its block table, dense softmax in float64, and its own u8 quantisation.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional

import numpy as np

F16_NAN = np.float16(np.nan)
U8_POISON = np.uint8(0xFF)


@dataclasses.dataclass
class Case:
    seed: int
    num_heads: int
    num_kv_heads: int
    head_size: int
    block_size: int
    num_blocks: int
    kv: str                      # "f16" | "u8"
    qdtype: type                 # np.float32 | np.float16
    past_lens: np.ndarray        # [num_seqs] i32
    subsequence_begins: np.ndarray
    block_indices: np.ndarray
    block_indices_begins: np.ndarray
    query: np.ndarray            # [num_tokens, H*D]
    key: Optional[np.ndarray]    # [num_tokens, Hk*D] or None
    value: Optional[np.ndarray]
    key_cache: np.ndarray        # [num_blocks, Hk, bs, D]
    value_cache: np.ndarray
    key_scale: Optional[np.ndarray] = None      # u8: [num_blocks, Hk, bs] f16
    key_min: Optional[np.ndarray] = None
    value_scale: Optional[np.ndarray] = None
    value_min: Optional[np.ndarray] = None
    scale: Optional[float] = None
    sliding_window: int = 0
    alibi_slopes: Optional[np.ndarray] = None
    sinks: Optional[np.ndarray] = None
    qq_bias: Optional[np.ndarray] = None
    qq_bias_begins: Optional[np.ndarray] = None
    out: Optional[np.ndarray] = None
    scores: Optional[np.ndarray] = None
    score_aggregation_window: Optional[np.ndarray] = None  # [num_seqs] int32; None: the last token

    @property
    def num_seqs(self) -> int:
        return len(self.past_lens)

    def T(self, s: int) -> int:
        return int(self.subsequence_begins[s + 1] - self.subsequence_begins[s])

    def ctx(self, s: int) -> int:
        return int(self.past_lens[s]) + self.T(s)

    def table(self, s: int) -> np.ndarray:
        return self.block_indices[self.block_indices_begins[s]:self.block_indices_begins[s + 1]]

    def kwargs(self) -> Dict[str, object]:
        """The keyword arguments of pagedattn.forward / plan for this case."""
        names = ["query", "key", "value", "key_cache", "value_cache", "key_scale", "key_min",
                 "value_scale", "value_min", "past_lens", "subsequence_begins", "block_indices",
                 "block_indices_begins", "scale", "sliding_window", "alibi_slopes", "sinks", "qq_bias",
                 "qq_bias_begins", "out", "scores", "score_aggregation_window"]
        kw = {n: getattr(self, n) for n in names}
        kw["num_heads"] = self.num_heads
        return kw

    def describe(self) -> str:
        T = [self.T(s) for s in range(self.num_seqs)]
        return (f"seed={self.seed} seqs={self.num_seqs} past={self.past_lens.tolist()} T={T} "
                f"H={self.num_heads} Hk={self.num_kv_heads} D={self.head_size} bs={self.block_size} "
                f"kv={self.kv} q={np.dtype(self.qdtype).name} write={self.key is not None} "
                f"window={self.sliding_window} alibi={self.alibi_slopes is not None} "
                f"sinks={self.sinks is not None} tree={self.qq_bias is not None} "
                f"scores={self.scores is not None} scale={self.scale} "
                f"score_window={None if self.score_aggregation_window is None else self.score_aggregation_window.tolist()}")

    def snapshot(self) -> Dict[str, np.ndarray]:
        """Copies of every array the op may write (to check what it changed)."""
        names = ["key_cache", "value_cache", "key_scale", "key_min", "value_scale",
                 "value_min", "out", "scores"]
        return {n: getattr(self, n).copy() for n in names if getattr(self, n) is not None}


# --- u8 quantisation (params.h), in float32 like the op -------------------------------------------------
def _f16_step(h: np.ndarray, down: np.ndarray) -> np.ndarray:
    """h (float16) moved one representable value toward -inf where `down`, else unchanged."""
    bits = h.view(np.uint16).astype(np.int32)
    neg = (bits & 0x8000) != 0
    stepped = np.where(neg, bits + 1, np.where(bits == 0, 0x8001, bits - 1))
    return np.where(down, stepped, bits).astype(np.uint16).view(np.float16)


def f16_down(x: np.ndarray) -> np.ndarray:
    """The largest float16 <= x (x float32 within the f16 range)."""
    h = x.astype(np.float16)
    return _f16_step(h, h.astype(np.float32) > x)


def f16_up(x: np.ndarray) -> np.ndarray:
    """The smallest float16 >= x (x float32, 0 <= x <= 65504)."""
    return -f16_down(-x)


def quantize_u8_rows(x: np.ndarray):
    """x [..., D] float32 -> (codes u8 [..., D], scale f16 [...], min f16 [...]) by the rule of params.h."""
    x = np.clip(np.nan_to_num(x.astype(np.float32), nan=-65504.0), -65504.0, 65504.0).astype(np.float32)
    mn = f16_down(x.min(axis=-1))
    s = ((x.max(axis=-1) - mn.astype(np.float32)) / np.float32(255.0)).astype(np.float32)
    scale = np.where(s > 0, f16_up(s), np.float16(0.0)).astype(np.float16)
    while True:  # the top code must not read back above 65504: step the scale down there
        over = mn.astype(np.float32) + np.float32(255.0) * scale.astype(np.float32) > np.float32(65504.0)
        if not over.any():
            break
        scale = np.where(over, (scale.view(np.uint16) - np.uint16(1)).view(np.float16), scale)
    sc32 = scale.astype(np.float32)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = np.where(sc32 > 0, np.float32(1.0) / np.where(sc32 > 0, sc32, np.float32(1.0)), np.float32(0.0))
    v = ((x - mn.astype(np.float32)[..., None]).astype(np.float32) * inv.astype(np.float32)).astype(np.float32)
    codes = np.clip(np.rint(v), 0, 255).astype(np.uint8)
    return codes, scale, mn


def dequantize_u8(codes: np.ndarray, scale: np.ndarray, mn: np.ndarray) -> np.ndarray:
    return mn.astype(np.float64)[..., None] + codes.astype(np.float64) * scale.astype(np.float64)[..., None]


# --- random cases -----------------------------------------------------------------------------------
def make_case(seed: int, *, kv: Optional[str] = None, qdtype=None, write: Optional[bool] = None,
              max_seqs: int = 4, max_T: int = 9, max_past: int = 70, head_sizes=(8, 16, 32, 64),
              block_sizes=(1, 4, 8, 16)) -> Case:
    """A random valid case. Unused blocks, unused slots of partly filled blocks, the rows to be written
    and the outputs are poisoned (NaN; u8 codes 0xFF with NaN scale/min)."""
    rng = np.random.default_rng(seed)
    num_seqs = int(rng.integers(1, max_seqs + 1))
    Hk = int(rng.choice([1, 2]))
    G = int(rng.choice([1, 2, 4]))
    H = G * Hk
    D = int(rng.choice(list(head_sizes)))
    bs = int(rng.choice(list(block_sizes)))
    kv = kv or str(rng.choice(["f16", "u8"]))
    qdtype = qdtype or (np.float32 if rng.random() < 0.6 else np.float16)
    write = bool(rng.random() < 0.8) if write is None else write

    past = rng.integers(0, max_past + 1, num_seqs).astype(np.int32)
    T = rng.integers(1, max_T + 1, num_seqs)
    T[rng.random(num_seqs) < 0.1] = 0                                  # sequences with no new token
    if T.sum() == 0:
        T[0] = 1
    begins = np.concatenate([[0], np.cumsum(T)]).astype(np.int32)
    num_tokens = int(begins[-1])
    ctx = past + T

    # block pool: every used block distinct (no prefix sharing), shuffled ids, a few unused blocks
    need = [int(-(-c // bs)) for c in ctx]
    num_blocks = sum(need) + int(rng.integers(1, 5))
    ids = rng.permutation(num_blocks).astype(np.int32)
    tables, pos = [], 0
    for n in need:
        t = ids[pos:pos + n]
        pos += n
        if rng.random() < 0.3:                                         # a longer table with garbage ids
            t = np.concatenate([t, rng.integers(2**28, 2**30, int(rng.integers(1, 3))).astype(np.int32)])
        tables.append(t)
    block_indices = np.concatenate(tables).astype(np.int32) if tables else np.zeros(0, np.int32)
    table_begins = np.concatenate([[0], np.cumsum([len(t) for t in tables])]).astype(np.int32)

    # caches: poisoned, then the positions already cached (all ctx positions when nothing is written)
    shape = (num_blocks, Hk, bs, D)
    if kv == "f16":
        kc = np.full(shape, F16_NAN, np.float16)
        vc = np.full(shape, F16_NAN, np.float16)
        ks = km = vs = vm = None
    else:
        kc = np.full(shape, U8_POISON, np.uint8)
        vc = np.full(shape, U8_POISON, np.uint8)
        ks, km, vs, vm = (np.full(shape[:3], F16_NAN, np.float16) for _ in range(4))
    for s in range(num_seqs):
        filled = int(past[s]) if write else int(ctx[s])
        for p in range(filled):
            b, slot = tables[s][p // bs], p % bs
            if kv == "f16":
                kc[b, :, slot] = rng.standard_normal((Hk, D)).astype(np.float16)
                vc[b, :, slot] = rng.standard_normal((Hk, D)).astype(np.float16)
            else:
                for c, sc, mn in ((kc, ks, km), (vc, vs, vm)):
                    c[b, :, slot] = rng.integers(0, 256, (Hk, D), dtype=np.uint8)
                    step = rng.uniform(0.004, 0.02, Hk)
                    sc[b, :, slot] = step.astype(np.float16)
                    mn[b, :, slot] = (-step * rng.uniform(90, 160, Hk)).astype(np.float16)

    query = rng.standard_normal((num_tokens, H * D)).astype(qdtype)
    key = value = None
    if write:
        key = (rng.standard_normal((num_tokens, Hk * D)) * rng.uniform(0.5, 2)).astype(qdtype)
        value = rng.standard_normal((num_tokens, Hk * D)).astype(qdtype)

    case = Case(seed=seed, num_heads=H, num_kv_heads=Hk, head_size=D, block_size=bs, num_blocks=num_blocks,
                kv=kv, qdtype=qdtype, past_lens=past, subsequence_begins=begins, block_indices=block_indices,
                block_indices_begins=table_begins, query=query, key=key, value=value, key_cache=kc,
                value_cache=vc, key_scale=ks, key_min=km, value_scale=vs, value_min=vm)
    if rng.random() < 0.5:
        case.scale = float(rng.uniform(0.05, 0.5))
    if rng.random() < 0.3:
        case.sliding_window = int(rng.integers(1, 40))
    if rng.random() < 0.3:
        case.alibi_slopes = (-rng.uniform(0.01, 0.3, H)).astype(np.float32)
    if rng.random() < 0.3:
        case.sinks = rng.uniform(-2, 3, H).astype(np.float32)
    if rng.random() < 0.3:
        masks = []
        for s in range(num_seqs):
            t = int(T[s])
            m = (rng.random((t, t)) < 0.5).astype(np.uint8)
            np.fill_diagonal(m, 1)
            masks.append(m.reshape(-1))
        case.qq_bias = np.concatenate(masks).astype(np.uint8) if masks else np.zeros(0, np.uint8)
        case.qq_bias_begins = np.concatenate([[0], np.cumsum(T * T)]).astype(np.int32)
    case.out = np.full((num_tokens, H * D), np.nan, qdtype)
    if rng.random() < 0.3:
        case.scores = np.full(int(ctx.sum()), np.nan, np.float32)
        if rng.random() < 0.6:  # the last w_s tokens count: -1 (all), 0 (none), 1..T+2; else the last one
            case.score_aggregation_window = np.array(
                [rng.choice([-1, 0, int(rng.integers(1, int(t) + 3))]) for t in T], np.int32)
    return case


# --- the reference ------------------------------------------------------------------------------------
def expected_cache(case: Case, before: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """The cache arrays after the write-in: `before` with the new rows stored (f16: rounded; u8: this
    module's quantisation)."""
    exp = {n: before[n].copy() for n in ("key_cache", "value_cache", "key_scale", "key_min",
                                         "value_scale", "value_min") if n in before}
    if case.key is None:
        return exp
    Hk, D, bs = case.num_kv_heads, case.head_size, case.block_size
    for s in range(case.num_seqs):
        table = case.table(s)
        for t in range(case.T(s)):
            row = int(case.subsequence_begins[s]) + t
            p = int(case.past_lens[s]) + t
            b, slot = table[p // bs], p % bs
            for src, c, sc, mn in ((case.key, "key_cache", "key_scale", "key_min"),
                                   (case.value, "value_cache", "value_scale", "value_min")):
                x = src[row].astype(np.float32).reshape(Hk, D)
                if case.kv == "f16":
                    exp[c][b, :, slot] = x.astype(np.float16)
                else:
                    codes, scale, row_min = quantize_u8_rows(x)
                    exp[c][b, :, slot] = codes
                    exp[sc][b, :, slot] = scale
                    exp[mn][b, :, slot] = row_min
    return exp


def _gather(case: Case, cache: Dict[str, np.ndarray], s: int, which: str) -> np.ndarray:
    """[ctx_s, Hk, D] float64: sequence s's keys or values gathered through its block table."""
    bs = case.block_size
    n = case.ctx(s)
    p = np.arange(n)
    blocks = case.table(s)[p // bs]
    slots = p % bs
    data = cache[f"{which}_cache"][blocks, :, slots]                 # [ctx, Hk, D]
    if case.kv == "f16":
        return data.astype(np.float64)
    scale = cache[f"{which}_scale"][blocks, :, slots]                # [ctx, Hk]
    mn = cache[f"{which}_min"][blocks, :, slots]
    return dequantize_u8(data, scale, mn)


def attention(case: Case, cache: Dict[str, np.ndarray], lse_out: Optional[np.ndarray] = None):
    """(out [num_tokens, H*D] float64, scores [sum ctx] float64 or None) from the given cache state;
    `lse_out` ([num_tokens, H]), when given, receives each row's log-sum-exp (natural log of the softmax
    denominator, the sink included)."""
    H, Hk, D = case.num_heads, case.num_kv_heads, case.head_size
    G = H // Hk
    scale = case.scale if case.scale is not None else 1.0 / np.sqrt(D)
    num_tokens = case.query.shape[0]
    out = np.zeros((num_tokens, H, D))
    scores: List[np.ndarray] = []
    head_kv = np.arange(H) // G
    for s in range(case.num_seqs):
        past, T, n = int(case.past_lens[s]), case.T(s), case.ctx(s)
        K = _gather(case, cache, s, "key")[:, head_kv]                # [ctx, H, D]
        V = _gather(case, cache, s, "value")[:, head_kv]
        seq_scores = np.zeros(n)
        mask_tree = None
        if case.qq_bias is not None:
            b0 = int(case.qq_bias_begins[s])
            mask_tree = case.qq_bias[b0:b0 + T * T].reshape(T, T).astype(bool)
        for t in range(T):
            row = int(case.subsequence_begins[s]) + t
            i = past + t
            q = case.query[row].astype(np.float64).reshape(H, D)
            j = np.arange(n)
            allowed = j <= i
            if case.sliding_window > 0:
                allowed &= (i - j) < case.sliding_window
            if mask_tree is not None:
                new = j >= past
                allowed[new] &= mask_tree[t, np.clip(j[new] - past, 0, T - 1)]
            logits = scale * np.einsum("hd,jhd->hj", q, K)            # [H, ctx]
            if case.alibi_slopes is not None:
                logits = logits + case.alibi_slopes.astype(np.float64)[:, None] * (j - i)[None, :]
            logits = np.where(allowed[None, :], logits, -np.inf)
            m = logits.max(axis=1, keepdims=True)
            if case.sinks is not None:
                m = np.maximum(m, case.sinks.astype(np.float64)[:, None])
            e = np.exp(logits - m)
            denom = e.sum(axis=1, keepdims=True)
            if case.sinks is not None:
                denom = denom + np.exp(case.sinks.astype(np.float64)[:, None] - m)
            prob = e / denom                                          # [H, ctx]
            if lse_out is not None:
                lse_out[row] = (m + np.log(denom))[:, 0]
            out[row] = np.einsum("hj,jhd->hd", prob, V)
            w = 1 if case.score_aggregation_window is None else int(case.score_aggregation_window[s])
            if w < 0 or t >= T - w:  # scores: the last w new tokens
                seq_scores += prob.sum(axis=0)
        scores.append(seq_scores)
    return out.reshape(num_tokens, H * D), (np.concatenate(scores) if case.scores is not None else None)
