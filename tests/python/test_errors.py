"""Bad inputs raise pagedattn.ValidationError (a ValueError) carrying the op's message, naming the input,
and nothing is written. Each test breaks one rule of a valid seeded case."""

import numpy as np
import pytest

import pagedattn
import reference_np as ref

SEED = 777001


def _case(**kw):
    # a u8 case with writes, a tree and scores so that every rule below has something to break
    case = ref.make_case(SEED, kv="u8", write=True, **kw)
    T = [case.T(s) for s in range(case.num_seqs)]
    case.qq_bias = np.concatenate([np.eye(t, dtype=np.uint8).reshape(-1) for t in T])
    case.qq_bias_begins = np.concatenate([[0], np.cumsum(np.array(T) ** 2)]).astype(np.int32)
    case.scores = np.full(sum(case.ctx(s) for s in range(case.num_seqs)), np.nan, np.float32)
    return case


def _i32(x):
    return np.asarray(x, np.int32)


# (test id, mutation of the kwargs, expected input, a fragment of the rule)
BREAKS = [
    ("num_heads", lambda c, kw: kw.update(num_heads=c.num_heads + 1), "num_heads", "multiple"),
    ("num_heads_zero", lambda c, kw: kw.update(num_heads=0), "num_heads", "> 0"),
    ("query_dtype", lambda c, kw: kw.update(query=c.query.astype(np.float64)), "query", "not supported"),
    ("query_ndim", lambda c, kw: kw.update(query=c.query.reshape(-1)), "query", "2-D"),
    ("query_strided", lambda c, kw: kw.update(query=np.repeat(c.query, 2, axis=1)[:, ::2]), "query", "contiguous"),
    ("key_without_value", lambda c, kw: kw.update(value=None), "value", "both or neither"),
    ("key_dtype", lambda c, kw: kw.update(key=c.key.astype(np.float16 if c.qdtype == np.float32 else np.float32)),
     "key", "query's"),
    ("cache_dtype", lambda c, kw: kw.update(key_cache=c.key_cache.astype(np.float32)), "key_cache", "f16, bf16, u8 or f8e4m3"),
    ("value_cache_shape", lambda c, kw: kw.update(value_cache=c.value_cache[:-1].copy()), "value_cache", "shape"),
    ("u8_without_scale", lambda c, kw: kw.update(key_scale=None), "key_scale", "required"),
    ("u8_scale_dtype", lambda c, kw: kw.update(value_min=c.value_min.astype(np.float32)),
     "value_min", "f16"),
    ("out_shape", lambda c, kw: kw.update(out=np.zeros((c.query.shape[0] + 1, c.query.shape[1]), c.qdtype)),
     "out", "num_tokens"),
    ("out_dtype", lambda c, kw: kw.update(out=np.zeros(c.query.shape, np.float16 if c.qdtype == np.float32 else np.float32)),
     "out", "query's"),
    ("out_read_only", lambda c, kw: kw["out"].setflags(write=False), "out", "writable"),
    ("cache_read_only", lambda c, kw: kw["value_cache"].setflags(write=False), "value_cache", "writable"),
    ("past_lens_int64", lambda c, kw: kw.update(past_lens=c.past_lens.astype(np.int64)), "past_lens", "int32"),
    ("past_lens_negative", lambda c, kw: kw.update(past_lens=_i32(np.r_[-1, c.past_lens[1:]])), "past_lens", ">= 0"),
    ("begins_end", lambda c, kw: kw.update(subsequence_begins=_i32(np.r_[c.subsequence_begins[:-1],
                                                                       c.subsequence_begins[-1] + 1])),
     "subsequence_begins", "num_tokens"),
    ("begins_length", lambda c, kw: kw.update(subsequence_begins=c.subsequence_begins[:-1].copy()),
     "subsequence_begins", "num_seqs+1"),
    # (no window: with one, an entry wholly before it is never read and may hold anything)
    ("block_id_range", lambda c, kw: kw.update(block_indices=_i32(np.r_[c.num_blocks, c.block_indices[1:]]),
                                               sliding_window=0), "block_indices", "outside"),
    ("table_begins_end", lambda c, kw: kw.update(block_indices_begins=_i32(np.r_[c.block_indices_begins[:-1],
                                                                                 c.block_indices_begins[-1] + 1])),
     "block_indices_begins", "must end"),
    ("table_too_short", lambda c, kw: kw.update(past_lens=_i32(np.r_[c.past_lens[:-1], c.past_lens[-1] + 1000]),
                                                scores=None), "block_indices", "needs"),
    ("scale_negative", lambda c, kw: kw.update(scale=-1.0), "scale", "> 0"),
    ("scale_nan", lambda c, kw: kw.update(scale=float("nan")), "scale", "finite"),
    ("window_negative", lambda c, kw: kw.update(sliding_window=-3), "sliding_window", ">= 0"),
    ("max_context_len_small", lambda c, kw: kw.update(max_context_len=0), "max_context_len", ">="),
    ("alibi_shape", lambda c, kw: kw.update(alibi_slopes=np.zeros(c.num_heads + 1, np.float32)), "alibi_slopes",
     "num_heads"),
    ("sinks_dtype", lambda c, kw: kw.update(sinks=np.zeros(c.num_heads, np.float64)), "sinks", "not supported"),
    ("tree_diagonal", lambda c, kw: kw["qq_bias"].__setitem__(0, 0), "qq_bias", "diagonal"),
    ("tree_without_begins", lambda c, kw: kw.update(qq_bias_begins=None), "qq_bias_begins", "both or neither"),
    ("scores_length", lambda c, kw: kw.update(scores=np.zeros(len(c.scores) + 1, np.float32)), "scores", "entries"),
    ("zero_dim_array", lambda c, kw: kw.update(sinks=np.float32(1.0).reshape(())), "sinks", "0-d"),
    ("not_an_array", lambda c, kw: kw.update(key_cache="cache"), "key_cache", "DLPack"),
    ("backend_name", lambda c, kw: kw.update(backend="tpu"), "backend", "'cpu' or 'cuda'"),
    ("cuda_backend_on_host_arrays", lambda c, kw: kw.update(backend="cuda"), "query", "cuda device"),
]


@pytest.mark.parametrize("break_", BREAKS, ids=[b[0] for b in BREAKS])
def test_bad_input_raises_validation_error(break_):
    _, mutate, input_name, fragment = break_
    case = _case()
    kw = case.kwargs()
    mutate(case, kw)
    before = case.snapshot()
    with pytest.raises(pagedattn.ValidationError) as info:
        pagedattn.forward(**kw)
    e = info.value
    assert isinstance(e, ValueError) and isinstance(e, pagedattn.Error)
    assert e.input == input_name, f"expected input '{input_name}', got '{e.input}': {e}"
    assert str(e).startswith(f"invalid input '{input_name}': "), str(e)
    assert fragment in str(e), f"expected the rule to mention {fragment!r}: {e}"
    assert e.rule and e.rule in str(e)
    # nothing was written: caches, u8 params, out and scores keep their exact bytes (NaN poison)
    for name, old in before.items():
        new = getattr(case, name)
        assert np.array_equal(old.view(np.uint8), new.view(np.uint8)), f"{name} was written by a rejected call"


def test_valid_base_case_passes():
    """The base case of the tests above is valid (so each of them breaks exactly its one rule)."""
    case = _case()
    pagedattn.forward(**case.kwargs())
    assert np.isfinite(case.out.astype(np.float64)).all()


def test_exception_hierarchy():
    assert issubclass(pagedattn.ValidationError, ValueError) and issubclass(pagedattn.ValidationError, pagedattn.Error)
    assert issubclass(pagedattn.UnsupportedError, NotImplementedError)
    assert issubclass(pagedattn.UnsupportedError, pagedattn.Error)
    assert issubclass(pagedattn.RuntimeError, RuntimeError) and issubclass(pagedattn.RuntimeError, pagedattn.Error)
