"""pagedattn's CPU backend against OpenVINO's own PagedAttentionExtension op on OpenVINO's CPU plugin.

Seeded random cases (ragged batches of 1-4 sequences, 1-16 new tokens each, shuffled block tables of
32-token blocks, trees, sliding windows, ALiBi, sinks, scores, f32 queries) run on both; `out` and
`scores` must agree to 1e-4 (absolute). Both ops read the SAME cache bytes: the test fills every
position (cached and new) itself and runs pagedattn read-only (key/value absent) and OpenVINO with
`write_kv_cache=False` (its key/value inputs are NaN, so a read of them would show). The f16 write-in is
compared separately (both write into copies of one cache; the caches must be bit-identical).

OpenVINO's CPU plugin fixes the cache layout when the model is compiled (INFERENCE_PRECISION_HINT=f32):
  KV_CACHE_PRECISION=f16: key/value cache [num_blocks, Hk, 32, D] f16, as pagedattn's;
  KV_CACHE_PRECISION=u8, KEY_CACHE_QUANT_MODE=BY_TOKEN: [num_blocks, Hk, 32, D + 8] u8, each row an
      f32 scale, an f32 zero point, then D codes; it reads back as (code - zp) * scale.
pagedattn's u8 rows are (f16 scale, f16 min, codes) and read back as min + code * scale; the test gives
OpenVINO the same codes with scale' = f32(scale), zp' = -min / scale (a constant row, scale 0, gets
scale' = 2^-100 and zp' = -min * 2^100, which reads back min).

Where the two ops' semantics differ, the compared cases stay on common ground:
  * scale: pagedattn's None is 1/sqrt(D); OpenVINO reads a scale of 0 as 1/sqrt(D) (both are tested).
  * ALiBi with a sliding window: OpenVINO's CPU plugin drops ALiBi when a window is set, pagedattn
    applies both; cases have one or the other, never both (test_openvino_drops_alibi_when_a_window_is_set
    pins this).
  * scores: both sum each key's weights over the last w_s new tokens of sequence s (pagedattn's
    score_aggregation_window, OpenVINO's input 13, i32 [num_seqs] on the CPU plugin: the op accepts a
    scalar too, but the plugin then fails at inference for more than one sequence). Absent (OpenVINO:
    an empty array) means the last token only, w_s = 0 gives zero scores, -1 or w_s >= T_s every new
    token. The compared cases give both T_s per sequence (test_openvino_score_aggregation_window
    compares the other values).
A failure prints the seed and the case.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from typing import Dict, Optional, Tuple

import numpy as np
import pytest

try:
    import openvino as ov
    from openvino import opset13 as _ops
    from openvino._pyopenvino.op import _PagedAttentionExtension
except ImportError as _e:  # pragma: no cover - depends on the environment
    pytest.skip(f"openvino is not importable ({_e}); `pip install openvino` to compare pagedattn with "
                "OpenVINO's PagedAttentionExtension", allow_module_level=True)

import pagedattn

BASE_SEED = 20261201
NUM_F16_CASES = 200
NUM_U8_CASES = 150
NUM_WRITE_CASES = 20
ATOL = 1e-4                      # on out and scores (f32)
BLOCK_SIZE = 32                  # what OpenVINO's CPU plugin uses
SHAPES = [(4, 1, 64), (8, 2, 128), (16, 4, 256), (6, 3, 96), (4, 4, 80)]   # (H, Hk, D)

HAS_NEW_U8 = "key_min" in inspect.signature(pagedattn.forward).parameters
needs_new_u8 = pytest.mark.skipif(
    not HAS_NEW_U8, reason="pagedattn.forward does not take key_min yet: the u8 comparison is written for "
                           "the (scale, min) u8 format (x = min + code * scale)")


# --- cases -----------------------------------------------------------------------------------------
@dataclasses.dataclass
class Case:
    seed: int
    kv: str                            # "f16" | "u8"
    H: int
    Hk: int
    D: int
    num_blocks: int
    past: np.ndarray                   # [num_seqs] i32
    T: np.ndarray                      # [num_seqs]
    begins: np.ndarray                 # [num_seqs+1] i32
    block_indices: np.ndarray
    block_indices_begins: np.ndarray
    query: np.ndarray                  # [num_tokens, H*D] f32
    key_cache: np.ndarray              # [num_blocks, Hk, 32, D] f16 | u8 codes
    value_cache: np.ndarray
    key_scale: Optional[np.ndarray] = None   # u8: [num_blocks, Hk, 32] f16
    key_min: Optional[np.ndarray] = None
    value_scale: Optional[np.ndarray] = None
    value_min: Optional[np.ndarray] = None
    scale: Optional[float] = None
    ov_zero_scale: bool = False        # scale None: give OpenVINO 0 (its default) instead of 1/sqrt(D)
    sliding_window: int = 0
    alibi_slopes: Optional[np.ndarray] = None
    sinks: Optional[np.ndarray] = None
    qq_bias: Optional[np.ndarray] = None
    qq_bias_begins: Optional[np.ndarray] = None
    scores: bool = False

    @property
    def num_seqs(self) -> int:
        return len(self.past)

    @property
    def num_tokens(self) -> int:
        return int(self.begins[-1])

    @property
    def ctx(self) -> np.ndarray:
        return self.past + self.T

    def describe(self) -> str:
        return (f"seed={self.seed} kv={self.kv} H={self.H} Hk={self.Hk} D={self.D} past={self.past.tolist()} "
                f"T={self.T.tolist()} scale={self.scale} (ov 0: {self.ov_zero_scale}) "
                f"window={self.sliding_window} alibi={self.alibi_slopes is not None} "
                f"sinks={self.sinks is not None} tree={self.qq_bias is not None} scores={self.scores}")


def _quantize_rows(x: np.ndarray, rng: np.random.Generator):
    """x [..., D] f32 -> codes u8, scale f16, min f16 with x ~ min + code * scale (any valid triple will
    do: both ops read these same codes). About 3% of the rows are constant (scale 0)."""
    mn = x.min(axis=-1).astype(np.float16)
    scale = ((x.max(axis=-1) - mn.astype(np.float32)) / 255.0).astype(np.float16)
    const = rng.random(mn.shape) < 0.03
    scale[const] = 0
    s = np.where(scale > 0, scale.astype(np.float32), 1.0)[..., None]
    codes = np.clip(np.rint((x - mn.astype(np.float32)[..., None]) / s), 0, 255).astype(np.uint8)
    codes[const] = rng.integers(0, 256, codes[const].shape, dtype=np.uint8)   # any code reads back min
    return codes, scale, mn


def make_case(seed: int, kv: str, *, for_write: bool = False, adjust=None) -> Case:
    """A random case; the caches hold every cached and new position (for_write: only the cached ones).
    Unused blocks and slots are NaN (f16) or code 0xFF with NaN scale/min (u8). adjust(past, T) ->
    (past, T), same lengths: changes the drawn lengths before the cache is laid out."""
    rng = np.random.default_rng(seed)
    H, Hk, D = SHAPES[seed % len(SHAPES)]
    num_seqs = int(rng.integers(1, 5))
    T = rng.integers(1, 17, num_seqs)
    if num_seqs > 1:
        T[rng.random(num_seqs) < 0.08] = 0                         # a sequence with no new token
        T[0] = max(int(T[0]), 1)
    past = rng.integers(0, 130, num_seqs)
    long = rng.random(num_seqs) < 0.15
    past[long] = rng.integers(130, 700, int(long.sum()))           # several blocks more
    past[rng.random(num_seqs) < 0.15] = 0                          # prefill from an empty cache
    if adjust is not None:
        past, T = (np.asarray(x) for x in adjust(past, T))
    past = past.astype(np.int32)
    begins = np.concatenate([[0], np.cumsum(T)]).astype(np.int32)
    ctx = past + T
    need = [-(-int(c) // BLOCK_SIZE) for c in ctx]
    num_blocks = sum(need) + int(rng.integers(1, 4))
    ids = rng.permutation(num_blocks).astype(np.int32)
    tables = np.split(ids[:sum(need)], np.cumsum(need)[:-1])
    spare = ids[sum(need):]                                        # unused (poisoned) blocks
    tables = [np.concatenate([tb, spare[:int(rng.integers(1, len(spare) + 1))]]) if rng.random() < 0.25 else tb
              for tb in tables]                                    # a table longer than its context
    block_indices = np.concatenate(tables).astype(np.int32)
    table_begins = np.concatenate([[0], np.cumsum([len(tb) for tb in tables])]).astype(np.int32)

    shape = (num_blocks, Hk, BLOCK_SIZE, D)
    if kv == "f16":
        kc = np.full(shape, np.nan, np.float16)
        vc = np.full(shape, np.nan, np.float16)
        ks = kmn = vs = vmn = None
    else:
        kc = np.full(shape, 0xFF, np.uint8)
        vc = np.full(shape, 0xFF, np.uint8)
        ks, kmn, vs, vmn = (np.full(shape[:3], np.nan, np.float16) for _ in range(4))
    for s in range(num_seqs):
        filled = int(past[s] if for_write else ctx[s])
        p = np.arange(filled)
        b, slot = tables[s][p // BLOCK_SIZE], p % BLOCK_SIZE
        kx = (rng.standard_normal((filled, Hk, D)) * rng.uniform(0.5, 2.0)).astype(np.float32)
        vx = rng.standard_normal((filled, Hk, D)).astype(np.float32)
        if kv == "f16":
            kc[b, :, slot] = kx.astype(np.float16)
            vc[b, :, slot] = vx.astype(np.float16)
        else:
            kc[b, :, slot], ks[b, :, slot], kmn[b, :, slot] = _quantize_rows(kx, rng)
            vc[b, :, slot], vs[b, :, slot], vmn[b, :, slot] = _quantize_rows(vx, rng)

    case = Case(seed=seed, kv=kv, H=H, Hk=Hk, D=D, num_blocks=num_blocks, past=past, T=T, begins=begins,
                block_indices=block_indices, block_indices_begins=table_begins,
                query=rng.standard_normal((int(begins[-1]), H * D)).astype(np.float32),
                key_cache=kc, value_cache=vc, key_scale=ks, key_min=kmn, value_scale=vs, value_min=vmn)
    r = rng.random()
    if r < 0.4:
        case.scale = float(np.float32(rng.uniform(0.03, 0.3)))
    else:
        case.ov_zero_scale = r < 0.7
    r = rng.random()
    if r < 0.3:                                   # a window or ALiBi, never both (OpenVINO drops ALiBi
        case.sliding_window = int(rng.integers(1, 48))   # when a window is set)
    elif r < 0.55:
        case.alibi_slopes = (-rng.uniform(0.005, 0.3, H)).astype(np.float32)
    if rng.random() < 0.35:
        case.sinks = rng.uniform(-2, 4, H).astype(np.float32)
    if rng.random() < 0.35:
        masks = []
        for t in T:
            m = (rng.random((t, t)) < 0.5).astype(np.uint8)
            np.fill_diagonal(m, 1)
            masks.append(m.reshape(-1))
        case.qq_bias = np.concatenate(masks).astype(np.uint8)
        case.qq_bias_begins = np.concatenate([[0], np.cumsum(T * T)]).astype(np.int32)
    case.scores = bool(rng.random() < 0.5)
    return case


# --- pagedattn -------------------------------------------------------------------------------------
_EVERY_TOKEN = object()


def run_pagedattn(case: Case, key=None, value=None, key_cache=None, value_cache=None, score_window=_EVERY_TOKEN):
    """(out [num_tokens, H*D] f32, scores [sum ctx] f32 or None) from pagedattn's CPU backend.
    score_window: its score_aggregation_window (default: T_s per sequence, every new token, as
    run_openvino's default; None: absent, the last token)."""
    out = np.full(case.query.shape, np.nan, case.query.dtype)  # (the query's dtype: f32, or f16)
    scores = np.full(int(case.ctx.sum()), np.nan, np.float32) if case.scores else None
    kw = dict(query=case.query, key=key, value=value,
              key_cache=case.key_cache if key_cache is None else key_cache,
              value_cache=case.value_cache if value_cache is None else value_cache,
              past_lens=case.past, subsequence_begins=case.begins, block_indices=case.block_indices,
              block_indices_begins=case.block_indices_begins, scale=case.scale,
              sliding_window=case.sliding_window, alibi_slopes=case.alibi_slopes, sinks=case.sinks,
              qq_bias=case.qq_bias, qq_bias_begins=case.qq_bias_begins, out=out, scores=scores,
              score_aggregation_window=case.T.astype(np.int32) if score_window is _EVERY_TOKEN else score_window,
              num_heads=case.H, backend="cpu")
    if case.kv == "u8":
        kw.update(key_scale=case.key_scale, key_min=case.key_min, value_scale=case.value_scale,
                  value_min=case.value_min)
    pagedattn.forward(**kw)
    return out, scores


# --- OpenVINO --------------------------------------------------------------------------------------
_CORE = None
_COMPILED: Dict[Tuple, object] = {}


def _core():
    global _CORE
    if _CORE is None:
        _CORE = ov.Core()
    return _CORE


def build_ov_model(H: int, Hk: int, D: int, *, sinks: bool, write: bool):
    """A model with one PagedAttentionExtension node (the 28 inputs of OpenVINO 2026.x). Every input a
    case varies is a Parameter, so one compiled model serves all cases of a shape."""
    def par(shape, t, name):
        return _ops.parameter(ov.PartialShape(shape), t, name=name)

    def const(values, dtype, shape):
        return _ops.constant(np.array(values, dtype=dtype).reshape(shape))

    i32, f32 = ov.Type.i32, ov.Type.f32
    inputs = [
        par([-1, H * D], f32, "query"),
        par([-1, Hk * D], f32, "key"),
        par([-1, Hk * D], f32, "value"),
        par([-1, Hk, -1, -1], ov.Type.dynamic, "key_cache"),     # element type and layout: from the
        par([-1, Hk, -1, -1], ov.Type.dynamic, "value_cache"),   # plugin's KV_CACHE_PRECISION
        par([-1], i32, "past_lens"),
        par([-1], i32, "subsequence_begins"),
        par([-1], i32, "block_indices"),
        par([-1], i32, "block_indices_begins"),
        par([], f32, "scale"),                                   # 0: 1/sqrt(D)
        par([], i32, "sliding_window"),
        par([-1], f32, "alibi_slopes"),                          # [0]: none
        par([], i32, "max_context_len"),
        par([-1], i32, "score_aggregation_window"),              # [num_seqs] (or a scalar for all)
        const([], np.int32, [0]),                                # rotated_block_indices
        const([], np.int32, [0]),                                # rotation_deltas
        const([], np.float32, [0]),                              # rotation_trig_lut
        const([], np.float32, [0]),                              # xattention_threshold ([0]: off)
        const(64, np.int32, []),                                 # xattention_block_size
        const(8, np.int32, []),                                  # xattention_stride
        par([1, H, 1, 1], f32, "sinks") if sinks else const([], np.float32, [0]),
        const(0, np.int32, []),                                  # adaptive_rkv_start_size
        const([], np.int32, [0]),                                # adaptive_rkv_evictable_sizes
        const([], np.int32, [0]),                                # adaptive_rkv_diversity_block_set_indices
        const([], np.int32, [0]),                                #   ..._begins
        const([], np.int32, [0]),                                # token_type_ids
        par([-1], ov.Type.u8, "qq_bias"),                        # [0]: no tree
        par([-1], i32, "qq_bias_begins"),
    ]
    node = _PagedAttentionExtension([x.output(0) for x in inputs])
    for k, v in (("num_k_heads", Hk), ("k_head_size", D), ("num_v_heads", Hk), ("v_head_size", D)):
        node.set_rt_info(v, k)
    node.set_attribute("write_kv_cache", bool(write))
    params = [x for x in inputs if x.get_type_name() == "Parameter"]
    return ov.Model([node.output(0), node.output(1)], params, "paged_attention")


def compiled_ov(H: int, Hk: int, D: int, kv: str, *, sinks: bool, write: bool, precision: str = "f32"):
    """precision: the CPU plugin's INFERENCE_PRECISION_HINT (f32 for the tests; bf16 / f16 in the peers)."""
    key = (H, Hk, D, kv, sinks, write, precision)
    if key not in _COMPILED:
        config = {"INFERENCE_PRECISION_HINT": precision, "KV_CACHE_PRECISION": kv}
        if kv == "u8":
            config["KEY_CACHE_QUANT_MODE"] = "BY_TOKEN"
        _COMPILED[key] = _core().compile_model(build_ov_model(H, Hk, D, sinks=sinks, write=write), "CPU", config)
    return _COMPILED[key]


def to_ov_u8(codes: np.ndarray, scale: np.ndarray, mn: np.ndarray) -> np.ndarray:
    """pagedattn's u8 rows (codes, f16 scale, f16 min: x = min + code * scale) as OpenVINO's by-token
    rows [..., 8 + D]: f32 scale, f32 zero point, codes (x = (code - zp) * scale)."""
    s = scale.astype(np.float32)
    m = mn.astype(np.float64)
    tiny = np.float32(2.0 ** -100)                  # a constant row (scale 0): (code - zp) * tiny == min
    s_ov = np.where(s > 0, s, tiny).astype(np.float32)
    zp = (-m / s_ov.astype(np.float64)).astype(np.float32)
    head = np.stack([s_ov, zp], axis=-1).astype("<f4").view(np.uint8)      # [..., 8]
    return np.ascontiguousarray(np.concatenate([head, codes], axis=-1))


def ov_cache(case: Case, which: str) -> np.ndarray:
    if case.kv == "f16":
        return getattr(case, f"{which}_cache")
    return to_ov_u8(getattr(case, f"{which}_cache"), getattr(case, f"{which}_scale"), getattr(case, f"{which}_min"))


def run_openvino(case: Case, *, key=None, value=None, key_cache=None, value_cache=None, score_window=None,
                 precision: str = "f32"):
    """(out, scores or None) from OpenVINO's op. key/value None: read-only (write_kv_cache=False, NaN
    key/value inputs); else the op writes them into key_cache/value_cache (in place). score_window:
    OpenVINO's input 13 (default: T_s per sequence, i.e. every new token, as pagedattn sums)."""
    write = key is not None
    cm = compiled_ov(case.H, case.Hk, case.D, case.kv, sinks=case.sinks is not None, write=write, precision=precision)
    if not write:
        key = value = np.full((case.num_tokens, case.Hk * case.D), np.nan, np.float32)
    if case.scale is not None:
        scale = case.scale
    else:
        scale = 0.0 if case.ov_zero_scale else 1.0 / math.sqrt(case.D)
    feed = {
        "query": np.asarray(case.query, np.float32), "key": key, "value": value,
        "key_cache": ov_cache(case, "key") if key_cache is None else key_cache,
        "value_cache": ov_cache(case, "value") if value_cache is None else value_cache,
        "past_lens": case.past, "subsequence_begins": case.begins, "block_indices": case.block_indices,
        "block_indices_begins": case.block_indices_begins,
        "scale": np.array(scale, np.float32),
        "sliding_window": np.array(case.sliding_window, np.int32),
        "alibi_slopes": case.alibi_slopes if case.alibi_slopes is not None else np.zeros(0, np.float32),
        "max_context_len": np.array(int(case.ctx.max()), np.int32),
        "score_aggregation_window": case.T.astype(np.int32) if score_window is None else score_window,
        "qq_bias": case.qq_bias if case.qq_bias is not None else np.zeros(0, np.uint8),
        "qq_bias_begins": case.qq_bias_begins if case.qq_bias is not None else np.zeros(0, np.int32),
    }
    if case.sinks is not None:
        feed["sinks"] = case.sinks.reshape(1, case.H, 1, 1)
    req = cm.create_infer_request()
    # share_inputs: the caches are used in place (write-in lands in the caller's arrays)
    res = req.infer(feed, share_inputs=True)
    out = np.array(res[0], dtype=np.float32)
    scores = np.array(res[1], dtype=np.float32) if case.scores else None
    return out, scores


# --- comparison ------------------------------------------------------------------------------------
def assert_close(got: np.ndarray, want: np.ndarray, what: str, case: Case) -> float:
    assert got.shape == want.shape, f"{what}: shape {got.shape} vs {want.shape}; {case.describe()}"
    assert np.isfinite(got).all(), f"{what}: pagedattn gave non-finite values; {case.describe()}"
    assert np.isfinite(want).all(), f"{what}: OpenVINO gave non-finite values; {case.describe()}"
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    worst = np.unravel_index(int(np.argmax(err)), err.shape)
    assert err.max() <= ATOL, (f"{what}: max abs err {err.max():.3g} > {ATOL} at {tuple(int(i) for i in worst)} "
                               f"(pagedattn {got[worst]!r}, OpenVINO {want[worst]!r}); {case.describe()}")
    return float(err.max())


WORST: Dict[str, float] = {}


def _note(name: str, err: float) -> None:
    WORST[name] = max(WORST.get(name, 0.0), err)


def compare(case: Case) -> None:
    got_out, got_scores = run_pagedattn(case)
    want_out, want_scores = run_openvino(case)
    _note(f"{case.kv} out", assert_close(got_out, want_out, "out", case))
    if case.scores:
        _note(f"{case.kv} scores", assert_close(got_scores, want_scores, "scores", case))


@pytest.mark.parametrize("seed", range(BASE_SEED, BASE_SEED + NUM_F16_CASES))
def test_f16_cache_matches_openvino(seed):
    compare(make_case(seed, "f16"))


@needs_new_u8
@pytest.mark.parametrize("seed", range(BASE_SEED + 10000, BASE_SEED + 10000 + NUM_U8_CASES))
def test_u8_cache_matches_openvino(seed):
    compare(make_case(seed, "u8"))


@pytest.mark.parametrize("seed", range(BASE_SEED + 20000, BASE_SEED + 20000 + NUM_WRITE_CASES))
def test_f16_write_in_matches_openvino(seed):
    """Both ops write the new tokens' K/V (f32 -> f16) into copies of one cache: the caches must be
    bit-identical afterwards and the outputs agree."""
    case = make_case(seed, "f16", for_write=True)
    rng = np.random.default_rng(seed + 1)
    key = rng.standard_normal((case.num_tokens, case.Hk * case.D)).astype(np.float32) * 1.5
    value = rng.standard_normal((case.num_tokens, case.Hk * case.D)).astype(np.float32)
    kc_pa, vc_pa = case.key_cache.copy(), case.value_cache.copy()
    kc_ov, vc_ov = case.key_cache.copy(), case.value_cache.copy()
    got_out, got_scores = run_pagedattn(case, key=key, value=value, key_cache=kc_pa, value_cache=vc_pa)
    want_out, want_scores = run_openvino(case, key=key, value=value, key_cache=kc_ov, value_cache=vc_ov)
    for name, a, b in (("key_cache", kc_pa, kc_ov), ("value_cache", vc_pa, vc_ov)):
        diff = np.argwhere(a.view(np.uint16) != b.view(np.uint16))
        assert diff.size == 0, (f"{name} after write-in differs at {len(diff)} places, first {tuple(diff[0])}: "
                                f"pagedattn {a[tuple(diff[0])]!r}, OpenVINO {b[tuple(diff[0])]!r}; {case.describe()}")
    _note("f16 write out", assert_close(got_out, want_out, "out", case))
    if case.scores:
        _note("f16 write scores", assert_close(got_scores, want_scores, "scores", case))


def test_case_mix_covers_the_features():
    """The random cases do exercise every shape, trees, windows, ALiBi, sinks, scores, both scale
    defaults, prefill from an empty cache and several sequences (so a feature cannot drop out)."""
    cases = [make_case(s, "f16") for s in range(BASE_SEED, BASE_SEED + NUM_F16_CASES)]
    counts = {
        "tree": sum(c.qq_bias is not None for c in cases),
        "window": sum(c.sliding_window > 0 for c in cases),
        "alibi": sum(c.alibi_slopes is not None for c in cases),
        "sinks": sum(c.sinks is not None for c in cases),
        "scores": sum(c.scores for c in cases),
        "scale 0 to OpenVINO": sum(c.ov_zero_scale for c in cases),
        "explicit scale": sum(c.scale is not None for c in cases),
        "empty past": sum(bool((c.past == 0).any()) for c in cases),
        "several seqs": sum(c.num_seqs > 1 for c in cases),
        "a seq with T = 0": sum(bool((c.T == 0).any()) for c in cases),
        "past > 128": sum(bool((c.past > 128).any()) for c in cases),
        "longer table": sum(len(c.block_indices) > sum(-(-int(x) // BLOCK_SIZE) for x in c.ctx) for c in cases),
        "T > 8": sum(bool((c.T > 8).any()) for c in cases),
    }
    counts.update({f"shape {s}": sum((c.H, c.Hk, c.D) == s for c in cases) for s in SHAPES})
    print(counts)
    for k, n in counts.items():
        assert n >= 8, f"only {n} of {NUM_F16_CASES} cases have {k}"
    assert not any(c.sliding_window > 0 and c.alibi_slopes is not None for c in cases)


# --- where the two ops differ: OpenVINO's side pinned, so a change in a new OpenVINO release shows ----
@pytest.mark.parametrize("seed", range(BASE_SEED + 30000, BASE_SEED + 30004))
def test_openvino_drops_alibi_when_a_window_is_set(seed):
    """OpenVINO's CPU plugin ignores alibi_slopes when sliding_window > 0; pagedattn applies both. The
    compared cases above therefore never combine them."""
    case = make_case(seed, "f16", adjust=lambda past, T: (np.maximum(past, 40), T))
    rng = np.random.default_rng(seed + 7)
    case.sliding_window = int(rng.integers(2, 24))          # < 40: the window cuts every sequence
    case.alibi_slopes = (-rng.uniform(0.05, 0.3, case.H)).astype(np.float32)
    ov_both, _ = run_openvino(case)
    pa_both, _ = run_pagedattn(case)
    window_only = dataclasses.replace(case, alibi_slopes=None)
    pa_window, _ = run_pagedattn(window_only)
    assert_close(pa_window, ov_both, "out (pagedattn: window only; OpenVINO: window + ALiBi)", case)
    assert np.abs(pa_both - ov_both).max() > 1e-2, (
        f"OpenVINO now applies ALiBi together with a sliding window: compare such cases; {case.describe()}")


@pytest.mark.parametrize("seed", range(BASE_SEED + 31000, BASE_SEED + 31004))
def test_openvino_score_aggregation_window(seed):
    """OpenVINO's input 13 (i32 [num_seqs]) and pagedattn's score_aggregation_window, the same meaning:
    scores summed over the last w_s new tokens of sequence s (w_s >= T_s or -1: all of them; 0: none,
    zeros; absent / OpenVINO's empty array: the last token only)."""
    case = make_case(seed, "f16", adjust=lambda past, T: (past, np.maximum(T, 2)))
    case.scores = True
    case.qq_bias = case.qq_bias_begins = None           # (a tree row may hide new tokens from the last)
    rng = np.random.default_rng(seed)
    for w in ((case.T + 3).astype(np.int32), np.full(case.num_seqs, -1, np.int32),
              np.array([rng.integers(1, t + 1) for t in case.T], np.int32)):
        _, pa = run_pagedattn(case, score_window=w)
        _, ov = run_openvino(case, score_window=w)
        assert_close(pa, ov, f"scores (window {w.tolist()})", case)
    _, pa_default = run_pagedattn(case, score_window=None)
    _, ov_default = run_openvino(case, score_window=np.zeros(0, np.int32))
    assert_close(pa_default, ov_default, "scores (no window: the last token)", case)
    _, pa_zero = run_pagedattn(case, score_window=np.zeros(case.num_seqs, np.int32))
    _, ov_zero = run_openvino(case, score_window=np.zeros(case.num_seqs, np.int32))
    assert not ov_zero.any() and not pa_zero.any(), f"window 0 gives non-zero scores; {case.describe()}"


def test_report_worst_errors():
    """Prints the worst errors seen by the tests above (run last in this module; -s to see it)."""
    print("worst abs err vs OpenVINO:", {k: f"{v:.3g}" for k, v in sorted(WORST.items())})
