"""The pagedattn package on the CPU backend with NumPy arrays, against the independent NumPy reference
(reference_np.py). Every case is seeded; a failure prints the case (seed, shapes, options)."""

import numpy as np
import pytest

import pagedattn
import reference_np as ref

NUM_CASES = 160
BASE_SEED = 20260601

TOL = {np.float32: (2e-5, 2e-5), np.float16: (2e-3, 2e-3)}  # (atol, rtol) on out


def _bits(a: np.ndarray) -> np.ndarray:
    """Bitwise view (NaN == NaN, -0 != +0) for exact comparisons of cache contents."""
    return a.view(np.uint16) if a.dtype == np.float16 else a


def _assert_close(got, want, atol, rtol, what, case):
    got64 = got.astype(np.float64)
    assert np.isfinite(got64).all(), f"{what}: {np.count_nonzero(~np.isfinite(got64))} non-finite values; {case.describe()}"
    err = np.abs(got64 - want)
    bound = atol + rtol * np.abs(want)
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    assert (err <= bound).all(), (
        f"{what}: worst at {tuple(int(i) for i in worst)}: got {got64[worst]!r}, want {want[worst]!r} "
        f"(max abs err {err.max():.3g}); {case.describe()}")


def check_case(case: ref.Case, runner) -> None:
    before = case.snapshot()
    result = runner(case)
    assert result is case.out, "forward must write the caller's out in place and return it"

    # 1. the cache: exactly the expected write-in (f16 rounding / this reference's u8 quantisation), and
    #    nothing else changed (unused blocks and slots keep their poison)
    exp = ref.expected_cache(case, before)
    for name, want in exp.items():
        got = getattr(case, name)
        diff = np.argwhere(_bits(got) != _bits(want))
        assert diff.size == 0, (f"{name} differs from the expected write-in at {len(diff)} places, first "
                                f"{tuple(diff[0])}: got {got[tuple(diff[0])]!r}, want {want[tuple(diff[0])]!r}; "
                                f"{case.describe()}")

    # 2. attention, reading the cache the op wrote (checked equal to ours above)
    now = {n: getattr(case, n) for n in exp}
    want_out, want_scores = ref.attention(case, now)
    atol, rtol = TOL[case.qdtype]
    _assert_close(case.out, want_out, atol, rtol, "out", case)
    if case.scores is not None:
        scale = max(1.0, float(want_scores.max(initial=0.0)))
        _assert_close(case.scores, want_scores, 1e-5 * scale, 1e-5, "scores", case)


def _forward(case):
    return pagedattn.forward(**case.kwargs(), backend="cpu")


@pytest.mark.parametrize("seed", range(BASE_SEED, BASE_SEED + NUM_CASES))
def test_forward_matches_numpy_reference(seed):
    check_case(ref.make_case(seed), _forward)


@pytest.mark.parametrize("seed", range(BASE_SEED + 3000, BASE_SEED + 3012))
def test_lse_matches_numpy_reference(seed):
    """The lse output (natural log of each row's softmax denominator, sinks included) against numpy."""
    case = ref.make_case(seed)
    lse = np.full((case.query.shape[0], case.num_heads), np.nan, np.float32)
    before = case.snapshot()
    pagedattn.forward(**case.kwargs(), lse=lse, backend="cpu")
    now = {n: getattr(case, n) for n in ref.expected_cache(case, before)}
    want = np.full(lse.shape, np.nan)
    ref.attention(case, now, lse_out=want)
    assert np.isfinite(lse).all(), case.describe()
    err = np.abs(lse - want) / np.maximum(1.0, np.abs(want))
    assert err.max() <= 1e-4, f"lse worst {err.max():.3g} at {np.unravel_index(err.argmax(), err.shape)}; {case.describe()}"


def test_lse_is_rejected_with_a_wrong_shape():
    case = ref.make_case(BASE_SEED)
    bad = np.zeros((case.query.shape[0], case.num_heads + 1), np.float32)
    with pytest.raises(pagedattn.ValidationError, match="lse"):
        pagedattn.forward(**case.kwargs(), lse=bad, backend="cpu")


@pytest.mark.parametrize("seed", range(BASE_SEED + 1000, BASE_SEED + 1012))
def test_plan_run_matches_numpy_reference(seed):
    def via_plan(case):
        p = pagedattn.plan(**case.kwargs())
        assert p.backend == "cpu"
        assert "cpu" in p.describe()
        info = p.info
        assert info["backend"] == "cpu" and not info["reference"] and info["work_items"] > 0, info
        return p.run()

    check_case(ref.make_case(seed), via_plan)


@pytest.mark.parametrize("seed", range(BASE_SEED + 2000, BASE_SEED + 2004))
def test_programmatic_launch_option_is_accepted(seed):
    # a cuda scheduling option: the cpu backend takes it and computes the same op
    check_case(ref.make_case(seed), lambda case: pagedattn.forward(**case.kwargs(), backend="cpu", programmatic_launch=False))


@pytest.mark.parametrize("seed", range(BASE_SEED + 2100, BASE_SEED + 2106))
def test_cpu_threads_and_reference_options(seed):
    # one worker thread, and the oracle itself (cpu_reference): the same op within the same tolerances
    check_case(ref.make_case(seed), lambda case: pagedattn.forward(**case.kwargs(), backend="cpu", num_threads=1))
    check_case(ref.make_case(seed), lambda case: pagedattn.forward(**case.kwargs(), backend="cpu", cpu_reference=True))
    check_case(ref.make_case(seed), lambda case: pagedattn.plan(**case.kwargs(), backend="cpu", num_threads=2).run())


def test_negative_options_are_rejected():
    case = ref.make_case(BASE_SEED + 2200)
    for name in ("num_threads", "partition_tokens"):
        with pytest.raises(pagedattn.ValidationError, match=f"options.{name}"):
            pagedattn.forward(**case.kwargs(), backend="cpu", **{name: -1})


def test_case_mix_covers_the_features():
    """The random cases above do exercise u8 caches, trees, windows, alibi, sinks, scores, f16 queries,
    read-only calls (no key/value) and block_size 1 (so a feature cannot silently drop out)."""
    cases = [ref.make_case(s) for s in range(BASE_SEED, BASE_SEED + NUM_CASES)]
    counts = {
        "u8": sum(c.kv == "u8" for c in cases),
        "tree": sum(c.qq_bias is not None for c in cases),
        "window": sum(c.sliding_window > 0 for c in cases),
        "alibi": sum(c.alibi_slopes is not None for c in cases),
        "sinks": sum(c.sinks is not None for c in cases),
        "scores": sum(c.scores is not None for c in cases),
        "f16 query": sum(c.qdtype == np.float16 for c in cases),
        "no write": sum(c.key is None for c in cases),
        "block_size 1": sum(c.block_size == 1 for c in cases),
    }
    print(counts)
    for k, n in counts.items():
        assert n >= 10, f"only {n} of {NUM_CASES} cases have {k}"


def test_plan_run_with_new_tensors():
    """run(query=..., out=...) uses the new tensors; results equal a one-shot forward on them."""
    case = ref.make_case(BASE_SEED + 2000, write=False)
    p = pagedattn.plan(**case.kwargs())
    rng = np.random.default_rng(BASE_SEED + 2000)
    q2 = rng.standard_normal(case.query.shape).astype(case.qdtype)
    o2 = np.full_like(case.out, np.nan)
    got = p.run(query=q2, out=o2)
    assert got is o2
    kw = case.kwargs()
    kw.update(query=q2, out=None)
    want = pagedattn.forward(**kw)
    np.testing.assert_array_equal(o2, want)
    assert np.isnan(case.out).all(), "run() with another out must not write the planned out"


def test_plan_run_rejects_other_shapes():
    case = ref.make_case(BASE_SEED + 2001, write=False)
    p = pagedattn.plan(**case.kwargs())
    with pytest.raises(pagedattn.ValidationError) as e:
        p.run(query=np.zeros((case.query.shape[0] + 1, case.query.shape[1]), case.qdtype))
    assert e.value.input == "query" and "re-plan" in str(e.value)


def test_out_is_allocated_like_query():
    case = ref.make_case(BASE_SEED + 2002)
    kw = case.kwargs()
    kw["out"] = None
    out = pagedattn.forward(**kw)
    assert isinstance(out, np.ndarray) and out.shape == case.query.shape and out.dtype == case.query.dtype
    assert np.isfinite(out.astype(np.float64)).all()


def test_metadata_as_lists_and_bool_tree_mask():
    case = ref.make_case(BASE_SEED + 2003, write=False)
    kw = case.kwargs()
    for n in ("past_lens", "subsequence_begins", "block_indices", "block_indices_begins"):
        kw[n] = kw[n].tolist()
    T = [case.T(s) for s in range(case.num_seqs)]
    rng = np.random.default_rng(BASE_SEED + 2003)
    masks = []
    for t in T:
        m = rng.random((t, t)) < 0.5
        np.fill_diagonal(m, True)
        masks.append(m.reshape(-1))
    kw["qq_bias"] = np.concatenate(masks)                      # numpy bool
    kw["qq_bias_begins"] = np.concatenate([[0], np.cumsum(np.array(T) ** 2)]).astype(np.int32).tolist()
    kw["out"] = None
    got = pagedattn.forward(**kw)
    case.qq_bias = kw["qq_bias"].astype(np.uint8)
    case.qq_bias_begins = np.asarray(kw["qq_bias_begins"], np.int32)
    want, _ = ref.attention(case, case.snapshot())
    atol, rtol = TOL[case.qdtype]
    _assert_close(got, want, atol, rtol, "out", case)


def test_max_context_len_default_and_explicit():
    case = ref.make_case(BASE_SEED + 2004, write=False)
    need = max(case.ctx(s) for s in range(case.num_seqs))
    pagedattn.forward(**case.kwargs(), max_context_len=need)           # explicit, exactly enough
    with pytest.raises(pagedattn.ValidationError) as e:
        pagedattn.forward(**case.kwargs(), max_context_len=need - 1)
    assert e.value.input == "max_context_len"


def test_u8_quantisation_rule_of_the_reference():
    """The reference's quantiser reproduces params.h's example properties: codes span 0..255 on
    non-constant rows, and read-back error is at most half a step (plus f16 rounding of zp)."""
    rng = np.random.default_rng(BASE_SEED + 2005)
    x = (rng.standard_normal((64, 32)) * rng.uniform(0.01, 10, (64, 1))).astype(np.float32)
    codes, scale, zp = ref.quantize_u8_rows(x)
    back = ref.dequantize_u8(codes, scale, zp)
    step = scale.astype(np.float64)[:, None]
    assert (np.abs(back - x) <= 0.5 * step + np.abs(zp.astype(np.float64)[:, None]) * 2**-10 * step + 1e-12).all()
    assert codes.min() == 0 and codes.max() >= 254


def test_merge_states_matches_numpy():
    rng = np.random.default_rng(BASE_SEED)
    n, H, D, k = 5, 3, 8, 3
    outs = [rng.standard_normal((n, H * D)).astype(np.float32) for _ in range(k)]
    lses = [rng.uniform(-3, 3, (n, H)).astype(np.float32) for _ in range(k)]
    lses[1][0, :] = -np.inf  # a partial that saw no key
    lse = np.full((n, H), np.nan, np.float32)
    out = pagedattn.merge_states(outs, lses, lse=lse)
    L = np.stack(lses).astype(np.float64)                      # [k, n, H]
    want_lse = np.logaddexp.reduce(L, axis=0)
    w = np.exp(L - want_lse)[..., None]                        # [k, n, H, 1]
    want = (w * np.stack(outs).reshape(k, n, H, D)).sum(axis=0).reshape(n, H * D)
    assert np.allclose(out, want, atol=1e-6, rtol=1e-5)
    assert np.allclose(lse, want_lse, atol=1e-6)
    with pytest.raises(pagedattn.ValidationError, match="lses"):
        pagedattn.merge_states(outs, lses[:2])


@pytest.mark.parametrize("seed", range(BASE_SEED + 4000, BASE_SEED + 4008))
def test_split_context_merges_to_the_whole_call(seed):
    """Two shards of each sequence's cache: the first with prefix_only (nothing written; windows and ALiBi
    through new_token_positions), the second with the rest, the new tokens, the sinks and the tree mask;
    merged with merge_states they give the whole call's out and lse."""
    case = ref.make_case(seed)
    case.scores, case.score_aggregation_window = None, None
    if case.key is None:
        pytest.skip("a case whose new rows are already in the cache")
    n, H = case.query.shape[0], case.num_heads
    kw = case.kwargs()
    split_state = {name: kw[name].copy() for name in ("key_cache", "value_cache", "key_scale", "key_min",
                                                         "value_scale", "value_min") if kw[name] is not None}
    whole_lse = np.full((n, H), np.nan, np.float32)
    whole = pagedattn.forward(**kw, lse=whole_lse, backend="cpu").copy()

    bs, rng = case.block_size, np.random.default_rng(seed)
    cut = [int(rng.integers(0, case.past_lens[s] // bs + 1)) * bs for s in range(case.num_seqs)]
    shards = []
    for first in (True, False):
        past, table, begins = [], [], [0]
        for s in range(case.num_seqs):
            t = case.table(s)
            lo, hi = (0, cut[s]) if first else (cut[s], case.ctx(s))
            past.append(cut[s] if first else case.past_lens[s] - cut[s])
            table.extend(t[lo // bs:(hi + bs - 1) // bs])
            begins.append(len(table))
        skw = dict(kw, **split_state, past_lens=np.array(past, np.int32), block_indices=np.array(table, np.int32),
                   block_indices_begins=np.array(begins, np.int32), out=None, max_context_len=None)
        if first:  # the shard starts at position 0: the new tokens sit at past_lens in its positions
            skw.update(key=None, value=None, sinks=None, qq_bias=None, qq_bias_begins=None,
                       new_token_positions=np.array(case.past_lens, np.int32))
        lse = np.full((n, H), np.nan, np.float32)
        out = pagedattn.forward(**skw, lse=lse, prefix_only=first, backend="cpu")
        shards.append((out, lse))
    merged_lse = np.full((n, H), np.nan, np.float32)
    merged = pagedattn.merge_states([o for o, _ in shards], [l for _, l in shards], lse=merged_lse)
    atol, rtol = TOL[case.qdtype]
    assert np.allclose(merged.astype(np.float64), whole.astype(np.float64), atol=atol, rtol=rtol), case.describe()
    assert np.allclose(merged_lse, whole_lse, atol=1e-4, rtol=1e-4), case.describe()


@pytest.mark.parametrize("seed", range(BASE_SEED + 5000, BASE_SEED + 5004))
def test_value_head_size_differs_from_key_head_size(seed):
    """Keys of D = 96, values and out of Dv = 32 (DeepSeek-style narrower values), f32, with the write-in:
    out against attention in float64 over the cache as written; the written rows equal the inputs."""
    rng = np.random.default_rng(seed)
    H, Hk, D, Dv, bs, T = 8, 2, 96, 32, 16, 3
    past = int(rng.integers(1, 100))
    nb = (past + T + bs - 1) // bs + 2
    table = rng.permutation(nb)[: (past + T + bs - 1) // bs].astype(np.int32)
    kc = rng.standard_normal((nb, Hk, bs, D)).astype(np.float32).astype(np.float16)
    vc = rng.standard_normal((nb, Hk, bs, Dv)).astype(np.float32).astype(np.float16)
    q = rng.standard_normal((T, H * D)).astype(np.float32)
    k = rng.standard_normal((T, Hk * D)).astype(np.float32)
    v = rng.standard_normal((T, Hk * Dv)).astype(np.float32)
    out = pagedattn.forward(query=q, key=k, value=v, key_cache=kc, value_cache=vc, past_lens=[past],
                            subsequence_begins=[0, T], block_indices=table, block_indices_begins=[0, len(table)],
                            num_heads=H, backend="cpu")
    assert out.shape == (T, H * Dv)
    pos = np.arange(past + T)
    K = kc[table[pos // bs], :, pos % bs].astype(np.float64)          # [n, Hk, D]
    V = vc[table[pos // bs], :, pos % bs].astype(np.float64)          # [n, Hk, Dv]
    assert np.array_equal(K[past:], k.reshape(T, Hk, D).astype(np.float16).astype(np.float64))
    assert np.array_equal(V[past:], v.reshape(T, Hk, Dv).astype(np.float16).astype(np.float64))
    want = np.zeros((T, H, Dv))
    for t in range(T):
        for h in range(H):
            logits = K[: past + t + 1, h // (H // Hk)] @ q[t, h * D:(h + 1) * D].astype(np.float64) / np.sqrt(D)
            p = np.exp(logits - logits.max())
            want[t, h] = (p / p.sum()) @ V[: past + t + 1, h // (H // Hk)]
    err = np.linalg.norm(out.astype(np.float64) - want.reshape(T, H * Dv)) / np.linalg.norm(want)
    assert err < 1e-5, err
