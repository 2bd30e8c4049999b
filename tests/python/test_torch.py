"""The PyTorch side on the CPU: torch tensors through DLPack (no copy), the custom op
torch.ops.pagedattn.forward (eager, opcheck, torch.compile). Skipped when PyTorch is not installed."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: the pagedattn.torch layer is not tested")

import pagedattn  # noqa: E402
import pagedattn.torch as pat  # noqa: E402
import reference_np as ref  # noqa: E402
from test_cpu import check_case  # noqa: E402

SEED = 5150000
_TENSOR_FIELDS = ("query", "key", "value", "key_cache", "value_cache", "key_scale", "key_min", "value_scale",
                  "value_min", "past_lens", "subsequence_begins", "block_indices", "block_indices_begins",
                  "alibi_slopes", "sinks", "qq_bias", "qq_bias_begins", "out", "scores", "score_aggregation_window")


def torch_views(case):
    """torch tensors sharing memory with the case's NumPy arrays (so check_case sees what the op wrote)."""
    return {n: (None if getattr(case, n) is None else torch.from_numpy(getattr(case, n))) for n in _TENSOR_FIELDS}


def op_args(case, t):
    return dict(num_heads=case.num_heads, key_scale=t["key_scale"], key_min=t["key_min"],
                value_scale=t["value_scale"], value_min=t["value_min"], scale=case.scale,
                sliding_window=case.sliding_window, alibi_slopes=t["alibi_slopes"], sinks=t["sinks"],
                qq_bias=t["qq_bias"], qq_bias_begins=t["qq_bias_begins"], out=t["out"], scores=t["scores"],
                score_aggregation_window=t["score_aggregation_window"])


def call_torch_op(case, t):
    return pat.forward(t["query"], t["key"], t["value"], t["key_cache"], t["value_cache"], t["past_lens"],
                       t["subsequence_begins"], t["block_indices"], t["block_indices_begins"], **op_args(case, t))


@pytest.mark.parametrize("seed", range(SEED, SEED + 20))
def test_package_with_torch_tensors_zero_copy(seed):
    case = ref.make_case(seed)

    def run(c):
        t = torch_views(c)
        kw = {**c.kwargs(), **{n: v for n, v in t.items()}}
        got = pagedattn.forward(**kw)
        assert got is t["out"]
        return c.out

    check_case(case, run)


@pytest.mark.parametrize("seed", range(SEED + 100, SEED + 120))
def test_custom_op_eager(seed):
    case = ref.make_case(seed)

    def run(c):
        got = call_torch_op(c, torch_views(c))
        assert got.data_ptr() == c.out.ctypes.data
        return c.out

    check_case(case, run)


def test_out_allocated_as_torch_tensor():
    case = ref.make_case(SEED + 200)
    t = torch_views(case)
    t["out"] = None
    kw = {**case.kwargs(), **t}
    out = pagedattn.forward(**kw)
    assert isinstance(out, torch.Tensor) and out.shape == t["query"].shape and out.dtype == t["query"].dtype
    out2 = pat.forward(t["query"], t["key"], t["value"], t["key_cache"], t["value_cache"], t["past_lens"],
                       t["subsequence_begins"], t["block_indices"], t["block_indices_begins"],
                       **{**op_args(case, t), "out": None})
    torch.testing.assert_close(out, out2, rtol=0, atol=0)


def test_bfloat16_query():
    """bf16 (which NumPy lacks) through torch: agrees with the reference on the bf16-rounded inputs."""
    case = ref.make_case(SEED + 300, kv="f16", qdtype=np.float32)
    t = torch_views(case)
    before = case.snapshot()
    qb, kb, vb = (None if t[n] is None else t[n].to(torch.bfloat16) for n in ("query", "key", "value"))
    out = pagedattn.forward(**{**case.kwargs(), **t, "query": qb, "key": kb, "value": vb, "out": None})
    assert out.dtype == torch.bfloat16
    # the reference on the bf16-rounded query/key/value
    case.query = qb.float().numpy()
    if kb is not None:
        case.key, case.value = kb.float().numpy(), vb.float().numpy()
    want, _ = ref.attention(case, ref.expected_cache(case, before))
    err = np.abs(out.double().numpy() - want)
    assert (err <= 1e-2 + 1e-2 * np.abs(want)).all(), f"max err {err.max():.3g}; {case.describe()}"


def test_validation_error_through_custom_op():
    case = ref.make_case(SEED + 400)
    t = torch_views(case)
    t["past_lens"] = t["past_lens"].to(torch.int64)
    with pytest.raises(pagedattn.ValidationError) as e:
        call_torch_op(case, t)
    assert e.value.input == "past_lens"


def test_opcheck():
    """torch.library.opcheck: the schema's mutations (lse among them), the fake implementation and AOT
    dispatch agree with the real op."""
    case = ref.make_case(SEED + 500, kv="u8", write=True)
    case.scores = np.zeros(sum(case.ctx(s) for s in range(case.num_seqs)), np.float32)
    case.score_aggregation_window = np.full(case.num_seqs, -1, np.int32)
    t = torch_views(case)
    args = (t["query"], t["key"], t["value"], t["key_cache"], t["value_cache"], t["key_scale"], t["key_min"],
            t["value_scale"], t["value_min"], t["past_lens"], t["subsequence_begins"], t["block_indices"],
            t["block_indices_begins"], t["out"], t["scores"],
            torch.full((case.query.shape[0], case.num_heads), float("nan")), t["alibi_slopes"], t["sinks"],
            t["qq_bias"], t["qq_bias_begins"], case.num_heads, case.scale, case.sliding_window, None, False,
            t["score_aggregation_window"], False)
    torch.library.opcheck(torch.ops.pagedattn.forward.default, args,
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static"))


def test_torch_compile_fullgraph():
    """The op inside torch.compile (aot_eager: traces through the fake implementation, no C++ codegen)."""
    case = ref.make_case(SEED + 600, write=False)
    t = torch_views(case)
    kw = op_args(case, t)
    kw.pop("out")

    def step(q):
        return pat.forward(q * 1.0, None, None, t["key_cache"], t["value_cache"], t["past_lens"],
                           t["subsequence_begins"], t["block_indices"], t["block_indices_begins"], **kw)

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    got = compiled(t["query"])
    want = step(t["query"])
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def _fp8_dense_reference(t, past, T, H, Hk, D, bs, table, scale):
    """Causal attention in float64 over the fp8 cache as the op left it: e4m3(code) * the head's scale."""
    n = past + T
    p = torch.arange(n)
    blocks, slots = torch.as_tensor(table).long()[p // bs], p % bs
    ks, vs = t["key_scale"].double(), t["value_scale"].double()
    K = t["key_cache"][blocks, :, slots].double() * ks.view(1, -1, 1)   # [n, Hk, D]; [Hk] or [1] scales
    V = t["value_cache"][blocks, :, slots].double() * vs.view(1, -1, 1)
    G = H // Hk
    K, V = K.repeat_interleave(G, dim=1).transpose(0, 1), V.repeat_interleave(G, dim=1).transpose(0, 1)
    q = t["query"].double().view(T, H, D).transpose(0, 1)
    i = past + torch.arange(T)[:, None]
    logits = scale * q @ K.transpose(1, 2)
    logits = logits.masked_fill(~(p[None, :] <= i)[None], float("-inf"))
    return (torch.softmax(logits, dim=-1) @ V).transpose(0, 1).reshape(T, H * D)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("per_head", [True, False], ids=["scale-per-head", "scale-number"])
@pytest.mark.parametrize("seed", range(SEED + 700, SEED + 704))
def test_fp8_cache_torch_float8(seed, per_head, device):
    """A torch.float8_e4m3fn cache: the write-in stores e4m3(x / scale) (torch's own rounding of in-range
    values agrees bit for bit), and out matches float64 attention over the cache as written, with f32
    queries: 1e-5 on the cpu backend, 3e-3 on the cuda one (its MMAs read the queries in f16). Scales per
    kv head as a tensor, or one as a Python number."""
    if device == "cuda" and not (pagedattn.cuda_available() and torch.cuda.is_available()):
        pytest.skip("no CUDA device visible to pagedattn and PyTorch")
    g = torch.Generator().manual_seed(seed)
    H, Hk, D, bs, past, T = 8, 2, 64, 16, int(torch.randint(1, 200, (1,), generator=g)), 4
    nb = (past + T + bs - 1) // bs + 3
    table = torch.randperm(nb, generator=g)[: (past + T + bs - 1) // bs].to(torch.int32)
    kc = (torch.randn(nb, Hk, bs, D, generator=g) * 16).to(torch.float8_e4m3fn)
    vc = (torch.randn(nb, Hk, bs, D, generator=g) * 16).to(torch.float8_e4m3fn)
    if per_head:
        ks, vs = torch.rand(Hk, generator=g) * 0.4 + 0.05, torch.rand(Hk, generator=g) * 0.4 + 0.05
    else:
        ks, vs = 0.125, 0.3
    t = dict(query=torch.randn(T, H * D, generator=g), key=torch.randn(T, Hk * D, generator=g),
             value=torch.randn(T, Hk * D, generator=g), key_cache=kc, value_cache=vc)
    on = {k: v.to(device) for k, v in t.items()}
    dev_scale = (lambda x: x.to(device)) if per_head else (lambda x: x)
    out = pagedattn.forward(**on, key_scale=dev_scale(ks), value_scale=dev_scale(vs), past_lens=[past],
                            subsequence_begins=[0, T], block_indices=table, block_indices_begins=[0, len(table)],
                            num_heads=H).cpu()
    kc, vc = on["key_cache"].cpu(), on["value_cache"].cpu()
    t["key_cache"], t["value_cache"] = kc, vc
    t["key_scale"] = ks if per_head else torch.tensor([ks])
    t["value_scale"] = vs if per_head else torch.tensor([vs])
    for x, cache, sc in ((t["key"], kc, t["key_scale"]), (t["value"], vc, t["value_scale"])):
        pos = past + torch.arange(T)
        got = cache[table.long()[pos // bs], :, pos % bs]                          # [T, Hk, D]
        want = (x.view(T, Hk, D) / sc.view(1, -1, 1)).to(torch.float8_e4m3fn)
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))
    want = _fp8_dense_reference(t, past, T, H, Hk, D, bs, table, D ** -0.5)
    err = (out.double() - want).norm() / want.norm()
    assert err < (1e-5 if device == "cpu" else 3e-3), f"rel_l2 {err:.3g}"


def test_fp8_scale_rules():
    """An fp8 cache without scales, or with u8's row minima, is rejected naming the input."""
    kc = torch.zeros(4, 2, 16, 64, dtype=torch.float8_e4m3fn)
    base = dict(query=torch.zeros(1, 4 * 64), key_cache=kc, value_cache=kc.clone(), past_lens=[3],
                subsequence_begins=[0, 1], block_indices=[0], block_indices_begins=[0, 1], num_heads=4)
    with pytest.raises(pagedattn.ValidationError) as e:
        pagedattn.forward(**base, value_scale=1.0)
    assert e.value.input == "key_scale"
    with pytest.raises(pagedattn.ValidationError) as e:
        pagedattn.forward(**base, key_scale=1.0, value_scale=torch.ones(3))
    assert e.value.input == "value_scale"
    with pytest.raises(pagedattn.ValidationError) as e:
        pagedattn.forward(**base, key_scale=1.0, value_scale=1.0, key_min=torch.zeros(4, 2, 16, dtype=torch.float16))
    assert e.value.input == "key_min"
