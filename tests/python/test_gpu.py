"""The CUDA backend from PyTorch: agreement with torch SDPA in float64, the cache write-in, the custom op
on CUDA, and a plan.run captured in a CUDA graph replaying correctly. Skipped without PyTorch, without a
CUDA device, or on a build of pagedattn without the CUDA backend.

Run on the GPU machine with `pytest tests/python/test_gpu.py -q -rA -s` to see the error figures."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

import pagedattn  # noqa: E402
import reference_np as ref  # noqa: E402

if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible to PyTorch", allow_module_level=True)
if not pagedattn.built_with_cuda:
    pytest.skip("this build of pagedattn has no CUDA backend (built with PAGEDATTN_CUDA=OFF or without nvcc)",
                allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

SEED = 9090000
NUM_CASES = 48
DEV = torch.device("cuda")
TOL = {torch.float16: 4e-3, torch.bfloat16: 2.5e-2}       # atol = rtol, vs a float64 reference
WORST = {}                                                 # dtype -> worst abs error seen (printed at the end)

_FIELDS = ("query", "key", "value", "key_cache", "value_cache", "key_scale", "key_min", "value_scale",
           "value_min", "alibi_slopes", "sinks", "out", "scores")
_HOST = ("past_lens", "subsequence_begins", "block_indices", "block_indices_begins", "qq_bias", "qq_bias_begins",
         "score_aggregation_window")


def gpu_case(seed, qdtype, **kw):
    """A reference_np case at head sizes of the CUDA backend's widths and its block sizes, as torch tensors: the device
    fields on the GPU (query/key/value in `qdtype`), metadata on the host."""
    rng = np.random.default_rng(seed)
    case = ref.make_case(seed, qdtype=np.float32, head_sizes=(64, 80, 96, 112, 128, 192, 256), block_sizes=(16, 32, 64),
                         max_T=int(rng.choice([3, 8, 16, 40])), max_past=int(rng.choice([100, 2000])), **kw)
    t = {}
    for n in _FIELDS:
        a = getattr(case, n)
        if a is None:
            t[n] = None
        elif n in ("query", "key", "value", "out"):
            t[n] = torch.from_numpy(a).to(DEV, qdtype)
        else:
            t[n] = torch.from_numpy(a).to(DEV)
    for n in _HOST:
        a = getattr(case, n)
        t[n] = None if a is None else torch.from_numpy(a)
    if t["out"] is not None:
        t["out"].fill_(float("nan"))
    # the reference sees the inputs as the op does: rounded to qdtype
    for n in ("query", "key", "value"):
        if t[n] is not None:
            setattr(case, n, t[n].float().cpu().numpy())
    return case, t


def call(case, t, **extra):
    """pagedattn.forward on the case. Should the backend refuse `scores` (UnsupportedError, raised at plan time
    before anything is written), the case is rerun without them and says so."""
    kw = {**t, "scale": case.scale, "sliding_window": case.sliding_window, "num_heads": case.num_heads, **extra}
    try:
        return pagedattn.forward(**kw)
    except pagedattn.UnsupportedError as e:
        if t["scores"] is None or "scores" not in str(e):
            raise
        print(f"note: {e}; checking this case without scores")
        t["scores"] = case.scores = None
        kw["scores"] = None
        return pagedattn.forward(**kw)


def sdpa_reference(case, t):
    """float64 SDPA on the GPU, per sequence: the keys/values gathered through the block table from the cache
    the op wrote (u8 dequantised), masks for causality, window and tree as additive biases with ALiBi, and
    the sink as an extra key of logit sinks[h] whose value is zero."""
    H, Hk, D, bs = case.num_heads, case.num_kv_heads, case.head_size, case.block_size
    G = H // Hk
    scale = case.scale if case.scale is not None else D ** -0.5
    outs, scores = [], []
    for s in range(case.num_seqs):
        past, T, n = int(case.past_lens[s]), case.T(s), case.ctx(s)
        if T == 0:
            scores.append(torch.zeros(n, dtype=torch.float64, device=DEV))
            continue
        p = torch.arange(n, device=DEV)
        blocks = torch.from_numpy(case.table(s)).to(DEV).long()[p // bs]
        slots = p % bs

        def gather(which):
            data = t[f"{which}_cache"][blocks, :, slots]                     # [n, Hk, D]
            if case.kv == "u8":
                sc = t[f"{which}_scale"][blocks, :, slots].double()
                mn = t[f"{which}_min"][blocks, :, slots].double()
                return mn[..., None] + data.double() * sc[..., None]
            return data.double()

        K = gather("key").repeat_interleave(G, dim=1).transpose(0, 1)          # [H, n, D]
        V = gather("value").repeat_interleave(G, dim=1).transpose(0, 1)
        b0 = int(case.subsequence_begins[s])
        q = t["query"][b0:b0 + T].double().view(T, H, D).transpose(0, 1)       # [H, T, D]
        i = past + torch.arange(T, device=DEV)[:, None]
        j = p[None, :]
        allowed = j <= i
        if case.sliding_window:
            allowed &= (i - j) < case.sliding_window
        if case.qq_bias is not None:
            qb0 = int(case.qq_bias_begins[s])
            tree = torch.from_numpy(case.qq_bias[qb0:qb0 + T * T].reshape(T, T).astype(bool)).to(DEV)
            new = (j >= past).expand(T, n)
            tree_ok = torch.ones(T, n, dtype=torch.bool, device=DEV)
            tree_ok[:, past:] = tree
            allowed &= ~new | tree_ok
        bias = torch.zeros(H, T, n, dtype=torch.float64, device=DEV)
        if case.alibi_slopes is not None:
            slopes = torch.from_numpy(case.alibi_slopes).to(DEV).double()
            bias += slopes[:, None, None] * (j - i).double()[None]
        bias = bias.masked_fill(~allowed[None], float("-inf"))
        if case.sinks is not None:                                              # the sink as key n
            K = torch.cat([K, torch.zeros(H, 1, D, dtype=torch.float64, device=DEV)], dim=1)
            V = torch.cat([V, torch.zeros(H, 1, D, dtype=torch.float64, device=DEV)], dim=1)
            sink = torch.from_numpy(case.sinks).to(DEV).double()[:, None, None].expand(H, T, 1)
            bias = torch.cat([bias, sink], dim=2)
        o = F.scaled_dot_product_attention(q, K, V, attn_mask=bias, scale=scale)    # [H, T, D]
        outs.append(o.transpose(0, 1).reshape(T, H * D))
        logits = scale * q @ K.transpose(1, 2) + bias
        # scores: the last w_s new tokens (score_aggregation_window; absent: the last one; w < 0: all)
        w = 1 if case.score_aggregation_window is None else int(case.score_aggregation_window[s])
        first = 0 if w < 0 else max(T - w, 0)
        scores.append(torch.softmax(logits, dim=-1)[:, first:, :n].sum(dim=(0, 1)))
    out = torch.cat(outs) if outs else torch.zeros(0, H * D, dtype=torch.float64, device=DEV)
    return out, torch.cat(scores)


def check_against_sdpa(case, t, got, qdtype):
    want, want_scores = sdpa_reference(case, t)
    tol = TOL[qdtype]
    g = got.double()
    assert torch.isfinite(g).all(), f"non-finite output; {case.describe()}"
    err = (g - want).abs()
    worst = err.max().item() if err.numel() else 0.0
    WORST[qdtype] = max(WORST.get(qdtype, 0.0), worst)
    bad = err > tol + tol * want.abs()
    if bad.any():
        idx = tuple(int(x) for x in torch.nonzero(bad)[0])
        pytest.fail(f"out vs SDPA: {int(bad.sum())} elements out of tolerance, first {idx}: got {g[idx].item()}, "
                    f"want {want[idx].item()} (worst abs err {worst:.3g}); {case.describe()}")
    if t["scores"] is not None:
        torch.testing.assert_close(t["scores"].double(), want_scores, rtol=1e-3, atol=1e-3 * case.num_heads,
                                   msg=lambda m: f"scores: {m}; {case.describe()}")
    return worst


def check_cache_write(case, before, t):
    """The cache after the op equals the reference write-in bit for bit (same rounding and u8 rule), and
    poisoned blocks stay poisoned."""
    exp = ref.expected_cache(case, before)
    for name, want in exp.items():
        got = t[name].cpu().numpy()
        gb = got.view(np.uint16) if got.dtype == np.float16 else got
        wb = want.view(np.uint16) if want.dtype == np.float16 else want
        diff = np.argwhere(gb != wb)
        assert diff.size == 0, (f"{name}: {len(diff)} entries differ from the expected write-in, first "
                                f"{tuple(diff[0])}: got {got[tuple(diff[0])]!r} want {want[tuple(diff[0])]!r}; "
                                f"{case.describe()}")


@pytest.mark.parametrize("qdtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("seed", range(SEED, SEED + NUM_CASES))
def test_cuda_matches_sdpa_float64(seed, qdtype):
    case, t = gpu_case(seed, qdtype)
    before = {n: t[n].cpu().numpy().copy() for n in ("key_cache", "value_cache", "key_scale", "key_min",
                                                    "value_scale", "value_min") if t[n] is not None}
    got = call(case, t)
    torch.cuda.synchronize()
    assert got is t["out"]
    check_cache_write(case, before, t)
    worst = check_against_sdpa(case, t, got, qdtype)
    print(f"seed={seed} {qdtype}: worst abs err vs SDPA float64 = {worst:.3g}")


def test_custom_op_on_cuda():
    import pagedattn.torch as pat

    case, t = gpu_case(SEED + 500, torch.float16, write=False)
    t["scores"] = case.scores = None
    got = pat.forward(t["query"], None, None, t["key_cache"], t["value_cache"], t["past_lens"],
                      t["subsequence_begins"], t["block_indices"], t["block_indices_begins"],
                      num_heads=case.num_heads, key_scale=t["key_scale"], key_min=t["key_min"],
                      value_scale=t["value_scale"], value_min=t["value_min"], scale=case.scale,
                      sliding_window=case.sliding_window, alibi_slopes=t["alibi_slopes"], sinks=t["sinks"],
                      qq_bias=t["qq_bias"], qq_bias_begins=t["qq_bias_begins"], scores=t["scores"])
    torch.cuda.synchronize()
    check_against_sdpa(case, t, got, torch.float16)


def test_runs_on_the_current_torch_stream():
    """forward() on a side stream, without synchronising the default stream, sees its inputs and writes out."""
    case, t = gpu_case(SEED + 600, torch.float16, write=False)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        got = call(case, t)
        got2 = got.clone()                       # ordered after the op on s
    s.synchronize()
    check_against_sdpa(case, t, got2, torch.float16)


def test_cuda_graph_replay():
    """plan once, capture plan.run() in a torch.cuda.graph, then change the inputs in place and replay: each
    replay gives the reference result for the new inputs (including the new key/value written in)."""
    for seed in range(SEED + 700, SEED + 800):          # a case with several sequences and tokens
        case, t = gpu_case(seed, torch.float16, write=True)
        if case.num_seqs >= 2 and case.query.shape[0] >= 8:
            break
    t["scores"] = case.scores = None
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    plan = pagedattn.plan(**{**t, "scale": case.scale, "sliding_window": case.sliding_window,
                             "num_heads": case.num_heads}, stream=s)
    print(plan.describe())
    with torch.cuda.stream(s):
        plan.run()                               # warm-up
    s.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        plan.run()
    gen = torch.Generator(device="cpu").manual_seed(SEED + 701)
    for rep in range(3):
        for n in ("query", "key", "value"):
            t[n].copy_(torch.randn(t[n].shape, generator=gen).to(t[n].dtype))
            setattr(case, n, t[n].float().cpu().numpy())
        t["out"].fill_(float("nan"))
        before = {n: t[n].cpu().numpy().copy() for n in ("key_cache", "value_cache", "key_scale", "key_min",
                                                        "value_scale", "value_min") if t[n] is not None}
        g.replay()
        torch.cuda.synchronize()
        check_cache_write(case, before, t)
        worst = check_against_sdpa(case, t, t["out"], torch.float16)
        print(f"graph replay {rep}: worst abs err vs SDPA float64 = {worst:.3g}")


def test_plan_run_on_another_stream_is_refused():
    """A plan made on the current stream refuses run() from another current stream (its kernels would go
    to the plan's stream, outside the caller's ordering or graph capture)."""
    case, t = gpu_case(SEED + 800, torch.float16, write=False)
    t["scores"] = case.scores = None
    plan = pagedattn.plan(**{**t, "scale": case.scale, "sliding_window": case.sliding_window,
                             "num_heads": case.num_heads})
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        with pytest.raises(pagedattn.Error, match="stream"):
            plan.run()


def test_speculative_decoding_emits_the_plain_tokens_on_cuda():
    """examples/speculative_invariance.py on the cuda backend: with deterministic=True greedy speculative
    decoding (chain verifies of T <= 5, GQA 4, a 700-token prompt over several partitions) emits plain
    decoding's tokens."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
    import speculative_invariance as si
    args = si.parse(["--backend", "cuda", "--steps", "200", "--dtype", "bf16", "--heads", "8", "--kv-heads", "2",
                     "--head-size", "128", "--prompt", "700", "--vocab", "1024", "--seed", "5"])
    results = si.run(args)
    assert results[True] is None, f"first divergence at token {results[True]}"


def test_zz_worst_errors():
    """Prints the worst errors seen above (for the GPU log)."""
    for dt, w in WORST.items():
        print(f"WORST abs err vs SDPA float64, {dt}: {w:.3g} (tolerance {TOL[dt]} abs + rel)")
    assert WORST, "no GPU case ran"
