"""pagedattn: paged attention for every step of speculative decoding at the cost of one KV-cache read.

Tensors are any DLPack arrays (PyTorch, CuPy, NumPy) and are used in place, with no copy. Notation
(as in the C++ header ``include/pagedattn/params.h``): ``num_seqs`` sequences; sequence ``s`` has
``T_s = subsequence_begins[s+1] - subsequence_begins[s]`` new tokens; ``num_tokens = sum_s T_s``; ``H``
query heads, ``Hk`` kv heads (``H = G * Hk``), head size ``D``; ``ctx_s = past_lens[s] + T_s``.

    out = pagedattn.forward(query=q, key=k, value=v, key_cache=kc, value_cache=vc,
                            past_lens=past, subsequence_begins=begins, block_indices=table,
                            block_indices_begins=table_begins, num_heads=H)

or, to keep host work out of the hot loop (and capture ``run`` in a CUDA graph)::

    plan = pagedattn.plan(...same arguments...)
    plan.run()               # on the tensors given to plan(); or plan.run(query=q2, out=o2, ...)
"""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Optional

import numbers as _numbers

import numpy as _np

from . import _C
from ._errors import Error, RuntimeError, UnsupportedError, ValidationError  # noqa: A004

try:  # written into the wheel by the build (pyproject.toml: CMakeLists.txt's project version)
    from ._version import __version__
except ImportError:  # a package directory used without a build: the installed distribution's metadata
    try:
        from importlib.metadata import version as _dist_version

        __version__ = _dist_version("pagedattn")
    except Exception:
        __version__ = "0+unknown"
__all__ = ["__version__", "forward", "plan", "Plan", "merge_states", "cuda_available", "built_with_cuda", "Error",
           "ValidationError", "UnsupportedError"]

#: True when this build has the CUDA backend (the wheel was built with nvcc).
built_with_cuda: bool = bool(_C.built_with_cuda)


def cuda_available() -> bool:
    """True when this build has the CUDA backend and a CUDA device is visible."""
    return bool(_C.cuda_available())


# --- fields of the op ------------------------------------------------------------------------------
# Metadata read on the host by plan() (params.h "(host)"): copied to host memory here when given on
# a device, converted from Python lists.
_HOST_FIELDS = {"past_lens": _np.int32, "subsequence_begins": _np.int32, "block_indices": _np.int32,
                "block_indices_begins": _np.int32, "qq_bias": _np.uint8, "qq_bias_begins": _np.int32,
                "score_aggregation_window": _np.int32, "new_token_positions": _np.int32}
# Tensors on the backend's device; Plan.run() may replace any of them (same shape/dtype).
_DEVICE_FIELDS = ("query", "key", "value", "key_cache", "value_cache", "key_scale", "key_min",
                  "value_scale", "value_min", "alibi_slopes", "sinks", "out", "scores", "lse")

_DLPACK_CUDA = (2, 13)  # kDLCUDA, kDLCUDAManaged


def _tensor_args(args: dict) -> dict:
    """The op's tensors from the keyword arguments of forward() / plan() (their locals())."""
    return {name: args[name] for name in (*_DEVICE_FIELDS, *_HOST_FIELDS)}


def _framework(x: Any) -> str:
    return type(x).__module__.split(".")[0]


def _is_cuda(x: Any) -> bool:
    dev = getattr(x, "__dlpack_device__", None)
    if dev is None:
        return False
    try:
        return int(dev()[0]) in _DLPACK_CUDA
    except Exception:  # an object whose __dlpack_device__ fails: let the native converter report it
        return False


def _to_host(x: Any, name: str) -> Any:
    """Host metadata: lists become NumPy arrays; device arrays are copied to the host (this syncs)."""
    if x is None:
        return None
    if isinstance(x, (list, tuple)):
        return _np.asarray(x, dtype=_HOST_FIELDS[name])
    if _is_cuda(x):
        fw = _framework(x)
        if fw == "torch":
            return x.cpu()
        if fw == "cupy":
            return x.get()
        raise ValidationError.of(name, "must be host memory (plan() reads it); pass a host array "
                                       f"(got a CUDA array of type {type(x).__name__})")
    return x


def _empty_like(query: Any, shape: Any = None) -> Any:
    """A new array of query's framework, dtype and device, of query's shape or `shape` (for `out`)."""
    fw = _framework(query)
    shape = tuple(query.shape) if shape is None else tuple(shape)
    if fw == "numpy":
        return _np.empty(shape, dtype=query.dtype)
    if fw == "torch":
        import torch

        return torch.empty(shape, dtype=query.dtype, device=query.device)
    if fw == "cupy":
        import cupy

        with cupy.cuda.Device(query.device.id):
            return cupy.empty(shape, dtype=query.dtype)
    raise ValidationError.of("out", "is required when query is not a NumPy, PyTorch or CuPy array "
                                    f"(got {type(query).__name__})")


def _scale_array(value: Any, like: Any, name: str) -> Any:
    """An fp8 cache's scale given as a Python number: a [1] float32 array of `like`'s framework and device."""
    fw = _framework(like)
    if fw == "torch":
        import torch

        return torch.tensor([float(value)], dtype=torch.float32, device=like.device)
    if fw == "cupy":
        import cupy

        with cupy.cuda.Device(like.device.id):
            return cupy.asarray([float(value)], dtype=cupy.float32)
    if fw == "numpy" or not _is_cuda(like):
        return _np.array([float(value)], dtype=_np.float32)
    raise ValidationError.of(name, "a number is accepted for a PyTorch, CuPy or host cache; give a [1] float32 "
                                   f"array on the cache's device (cache is {type(like).__name__})")


def _scales_as_arrays(tensors: Dict[str, Any]) -> None:
    """fp8 caches: key_scale / value_scale given as numbers (NumPy scalars too) become [1] float32 arrays."""
    for name in ("key_scale", "value_scale"):
        x = tensors.get(name)
        if isinstance(x, _numbers.Real) and not isinstance(x, bool):
            tensors[name] = _scale_array(x, tensors["key_cache"], name)


def _resolve_backend(backend: str, query: Any) -> str:
    if backend == "auto":
        return "cuda" if _is_cuda(query) else "cpu"
    if backend not in ("cpu", "cuda"):
        raise ValidationError.of("backend", f"must be 'auto', 'cpu' or 'cuda', got '{backend}'")
    return backend


def _current_stream(query: Any) -> int:
    """The caller's current CUDA stream for query's framework (0: the default stream)."""
    fw = _framework(query)
    if fw == "torch":
        import torch

        return int(torch.cuda.current_stream(query.device).cuda_stream)
    if fw == "cupy":
        import cupy

        return int(cupy.cuda.get_current_stream().ptr)
    return 0


def _stream_ptr(stream: Any, query: Any, backend: str) -> int:
    if backend != "cuda":
        return 0
    if stream is None:
        return _current_stream(query)
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
        if hasattr(stream, attr):
            return int(getattr(stream, attr))
    raise ValidationError.of("stream", "must be None, an int (cudaStream_t), a torch.cuda.Stream or a "
                                       f"cupy.cuda.Stream, got {type(stream).__name__}")


def _device_guard(query: Any):
    """Makes query's CUDA device current for the call (the backend uses the current device)."""
    if not _is_cuda(query):
        return contextlib.nullcontext()
    fw = _framework(query)
    if fw == "torch":
        import torch

        if query.device.index is not None and query.device.index != torch.cuda.current_device():
            return torch.cuda.device(query.device)
    elif fw == "cupy":
        import cupy

        return cupy.cuda.Device(query.device.id)
    return contextlib.nullcontext()


def _opt_float(x: Any) -> Optional[float]:
    return None if x is None else float(x)


def _opt_int(x: Any) -> Optional[int]:
    return None if x is None else int(x)


def _prepare(tensors: Dict[str, Any], backend: str, stream: Any, num_heads: int):
    """Allocates out, moves metadata to the host; returns (tensors, backend, stream pointer)."""
    query = tensors["query"]
    backend = _resolve_backend(backend, query)
    for name in _HOST_FIELDS:
        tensors[name] = _to_host(tensors[name], name)
    _scales_as_arrays(tensors)
    if tensors["out"] is None and query is not None:
        # [num_tokens, H*Dv]: the value head size Dv (value_cache's last dimension) may differ from D
        vc = tensors["value_cache"]
        dv = int(vc.shape[-1]) if vc is not None and len(getattr(vc, "shape", ())) == 4 else None
        shape = None if dv is None or len(query.shape) != 2 else (query.shape[0], int(num_heads) * dv)
        tensors["out"] = _empty_like(query, shape)
    return tensors, backend, _stream_ptr(stream, query, backend)


_ARGS_DOC = """
    Tensors (shapes as in include/pagedattn/params.h; (dev): on the backend's device, (host): host memory,
    read by plan(): a CUDA tensor given here is copied to the host, which synchronises):

    query                [num_tokens, H*D] float32 | float16 | bfloat16 (dev): new tokens' queries,
                         sequences back to back.
    key, value           [num_tokens, Hk*D] and [num_tokens, Hk*Dv], query's dtype (dev), or None: new
                         tokens' keys/values (Dv: value_cache's last dimension, the value head size); the op
                         WRITES them into the cache at positions past_lens[s] .. past_lens[s]+T_s-1 first.
                         None: those rows are already in the cache.
    key_cache,           [num_blocks, Hk, block_size, D] float16 | bfloat16 | uint8 | float8_e4m3fn (dev):
      value_cache        the paged cache (written when key/value are given).
    key_scale, key_min, value_scale, value_min
                         u8 caches: [num_blocks, Hk, block_size] float16 (dev): per-row scale and row minimum;
                         a row reads back as x = min + code * scale (params.h gives the rule).
                         float8_e4m3fn caches (e.g. torch.float8_e4m3fn): key_scale and value_scale only, each
                         [Hk] or [1] float32 (dev) or a Python number: x = e4m3(code) * scale; the write-in
                         stores e4m3(x / scale), saturating at +-448 (vLLM's kv_cache_dtype="fp8").
    past_lens            [num_seqs] int32 (host): tokens already cached per sequence.
    subsequence_begins   [num_seqs+1] int32 (host): token offsets of each sequence in query.
    block_indices        [n] int32 (host): all block tables back to back.
    block_indices_begins [num_seqs+1] int32 (host): sequence s's table is
                         block_indices[begins[s]:begins[s+1]]; position p lives in block table[p // block_size],
                         slot p % block_size.
    alibi_slopes         [H] float32 (dev) or None: score += slope[h] * (j - i).
    sinks                [H] float32 (dev) or None: per-head logit added to the softmax denominator.
    qq_bias              [sum_s T_s^2] uint8 or bool (host) or None: tree mask among a sequence's new tokens,
                         row-major T_s x T_s; (t, u) = 1: token t may attend token u; diagonal 1.
    qq_bias_begins       [num_seqs+1] int32 (host) or None (iff qq_bias is None).
    out                  [num_tokens, H*Dv], query's dtype (dev), or None: allocated with query's framework.
    scores               [sum_s ctx_s] float32 (dev) or None: attention weight per cached+new position,
                         summed over heads and the last w_s new tokens of each sequence (cache eviction).
    score_aggregation_window
                         [num_seqs] int32 (host) or None: w_s (OpenVINO's input 13); -1 or >= T_s: every new
                         token, 0: none; None: w_s = 1 (the last new token, OpenVINO's default).
    lse                  [num_tokens, H] float32 (dev) or None: each row's log-sum-exp (natural log of its
                         softmax denominator, the sink included; -inf for a row with no key and no sink),
                         filled in place.
    new_token_positions  [num_seqs] int32 (host) or None; prefix_only only: the position of each sequence's
                         first new token in the shard's own positions (its keys are 0 .. past_len-1), for
                         the window and ALiBi: a shard whose keys start at absolute position a, before new
                         tokens at absolute P, gives P - a. None: past_len.
    Lists of ints are accepted for the (host) metadata.

    Options:
    num_heads            H (required).
    scale                softmax scale; None or 0: 1/sqrt(D) (0 as OpenVINO reads it).
    sliding_window       0 = none; else query at position i sees keys j with i - j < sliding_window.
    max_context_len      sizing hint >= every ctx_s; None: computed from past_lens and subsequence_begins.
    backend              "auto" (cuda when query is on a CUDA device, else cpu), "cpu" or "cuda".
    deterministic        invariant rows (cpu and cuda): each row depends only on its own keys, so a chain
                         verify's row is bit-identical to the decode of its prefix and to its sequence run
                         alone, in any batch (trees: the latter), on one device type and build (cuda sizes
                         its partitions by the SM count). Costs time on cuda (docs/design.md).
    partition_tokens     cuda: force the KV partition size (multiple of 64); 0 = the planner decides.
    stream               cuda: None = the caller's current stream (torch.cuda.current_stream() for torch
                         tensors, cupy's current stream for CuPy, else the default stream); or an int
                         cudaStream_t, a torch.cuda.Stream or a cupy.cuda.Stream.
    programmatic_launch  cuda, sm_90+: the op's kernels may start while the previous kernel in the stream
                         drains and read cache rows before past_lens early (docs/design.md); False: plain
                         stream order.
    num_threads          cpu: worker threads; 0 = PAGEDATTN_CPU_THREADS when set, else all cores.
    cpu_reference        cpu: run the oracle (double precision, one thread) instead of the fast kernels.
    prefix_only          every new token attends all cached keys [0, past_len) of its sequence and nothing
                         else; nothing is written (key/value None): a shard of a split context without the
                         new tokens, or the shared prefix of cascade attention; combine with lse and
                         merge_states(). Not with qq_bias, scores, sinks; sliding_window and alibi_slopes
                         need new_token_positions.

    Raises ValidationError (a ValueError) naming the input and the rule, before anything is written;
    UnsupportedError for a valid call this build or backend does not support.
"""


def forward(*, query: Any, key: Any = None, value: Any = None, key_cache: Any, value_cache: Any,
            key_scale: Any = None, key_min: Any = None, value_scale: Any = None,
            value_min: Any = None, past_lens: Any, subsequence_begins: Any, block_indices: Any,
            block_indices_begins: Any, scale: Optional[float] = None, sliding_window: int = 0,
            alibi_slopes: Any = None, sinks: Any = None, max_context_len: Optional[int] = None,
            qq_bias: Any = None, qq_bias_begins: Any = None, out: Any = None, scores: Any = None,
            score_aggregation_window: Any = None, lse: Any = None, new_token_positions: Any = None,
            num_heads: int, backend: str = "auto", deterministic: bool = False, partition_tokens: int = 0,
            stream: Any = None, programmatic_launch: bool = True, num_threads: int = 0,
            cpu_reference: bool = False, prefix_only: bool = False) -> Any:
    tensors = _tensor_args(locals())
    tensors, backend, stream_ptr = _prepare(tensors, backend, stream, num_heads)
    with _device_guard(query):
        _C.forward(tensors, int(num_heads), _opt_float(scale), int(sliding_window), _opt_int(max_context_len), backend,
                   bool(deterministic), int(partition_tokens), stream_ptr, bool(programmatic_launch),
                   int(num_threads), bool(cpu_reference), bool(prefix_only))
    return tensors["out"]


forward.__doc__ = """Runs the op once (plan then run): writes key/value into the cache, attends, returns `out`.
""" + _ARGS_DOC + """
    Returns `out` ([num_tokens, H*Dv], query's dtype); `scores` and `lse`, when given, are filled in place.
"""


class Plan:
    """A validated call with its work list and workspace (the host half of the op).

    ``run()`` launches the op with no host synchronisation and can be captured in a CUDA graph. It keeps
    references to the tensors given to :func:`plan`; ``run(name=array, ...)`` replaces device tensors for
    this run (same shape, dtype and strides as planned). The host metadata (past_lens, begins, block
    tables, qq_bias) was read at plan time: when it changes, make a new plan.

    CUDA: kernels go to the stream given at plan time (by default the current stream then). To capture
    run() in ``torch.cuda.graph``, plan on the capture stream::

        s = torch.cuda.Stream()
        plan = pagedattn.plan(..., stream=s)
        with torch.cuda.stream(s):
            plan.run()                       # warm-up
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            plan.run()
        g.replay()
    """

    def __init__(self, native: Any, tensors: Dict[str, Any], backend: str, stream_ptr: int,
                 stream_from_caller: bool):
        self._native = native
        self._tensors = tensors
        self._backend = backend
        self._stream = stream_ptr
        self._stream_from_caller = stream_from_caller

    @property
    def backend(self) -> str:
        """'cpu' or 'cuda'."""
        return self._native.backend

    @property
    def workspace_bytes(self) -> int:
        """Device workspace bytes owned by this plan."""
        return int(self._native.workspace_bytes)

    @property
    def out(self) -> Any:
        """The planned output tensor (what run() writes when not given another `out`)."""
        return self._tensors["out"]

    def describe(self) -> str:
        """The planner's decisions in a few lines."""
        return self._native.describe()

    @property
    def info(self) -> dict:
        """The planner's decisions as a dict (C++ PlanInfo): backend, reference, threads, partition_tokens,
        wave_ctas, head_width, work_items, launches (cuda: [{row_tiles, ctas, threads, variant}]), merge_rows, merge_split,
        merge_batch, merge_rowwise, separate_kv_write, pdl, early_reads, workspace_bytes."""
        return self._native.info

    def run(self, *, query: Any = None, key: Any = None, value: Any = None, key_cache: Any = None,
            value_cache: Any = None, key_scale: Any = None, key_min: Any = None,
            value_scale: Any = None, value_min: Any = None, alibi_slopes: Any = None,
            sinks: Any = None, out: Any = None, scores: Any = None, lse: Any = None) -> Any:
        """Runs the planned op; arguments given replace the planned device tensors for this run.

        Returns `out`. Raises ValidationError when a tensor's shape, dtype or strides differ from the plan.
        """
        given = dict(query=query, key=key, value=value, key_cache=key_cache, value_cache=value_cache,
                     key_scale=key_scale, key_min=key_min, value_scale=value_scale,
                     value_min=value_min, alibi_slopes=alibi_slopes, sinks=sinks, out=out,
                     scores=scores, lse=lse)
        tensors = dict(self._tensors)
        tensors.update({k: v for k, v in given.items() if v is not None})
        _scales_as_arrays(tensors)
        q = tensors["query"]
        if self._backend == "cuda" and not self._stream_from_caller:
            cur = _current_stream(q)
            if cur != self._stream:
                raise Error(f"Plan.run(): the current CUDA stream ({cur:#x}) is not the stream this plan "
                            f"launches on ({self._stream:#x}, the current stream at plan time). Plan on the "
                            "stream you run on: pagedattn.plan(..., stream=s) (for torch.cuda.graph, pass "
                            "the same s to torch.cuda.graph(g, stream=s)).")
        with _device_guard(q):
            self._native.run(tensors)
        return tensors["out"]

    def __repr__(self) -> str:
        return f"<pagedattn.Plan backend={self._backend}>"


def plan(*, query: Any, key: Any = None, value: Any = None, key_cache: Any, value_cache: Any,
         key_scale: Any = None, key_min: Any = None, value_scale: Any = None,
         value_min: Any = None, past_lens: Any, subsequence_begins: Any, block_indices: Any,
         block_indices_begins: Any, scale: Optional[float] = None, sliding_window: int = 0,
         alibi_slopes: Any = None, sinks: Any = None, max_context_len: Optional[int] = None,
         qq_bias: Any = None, qq_bias_begins: Any = None, out: Any = None, scores: Any = None,
         score_aggregation_window: Any = None, lse: Any = None, new_token_positions: Any = None,
         num_heads: int, backend: str = "auto", deterministic: bool = False, partition_tokens: int = 0,
         stream: Any = None, programmatic_launch: bool = True, num_threads: int = 0,
         cpu_reference: bool = False, prefix_only: bool = False) -> Plan:
    tensors = _tensor_args(locals())
    tensors, backend, stream_ptr = _prepare(tensors, backend, stream, num_heads)
    with _device_guard(query):
        native = _C.plan(tensors, int(num_heads), _opt_float(scale), int(sliding_window), _opt_int(max_context_len), backend,
                         bool(deterministic), int(partition_tokens), stream_ptr, bool(programmatic_launch),
                         int(num_threads), bool(cpu_reference), bool(prefix_only))
    return Plan(native, tensors, backend, stream_ptr, stream is not None)


plan.__doc__ = """Validates the call and builds its plan (host work: reads the metadata, builds the work
list, sizes the workspace). Nothing is written until Plan.run().
""" + _ARGS_DOC + """
    Returns a Plan; Plan.run() runs the op (CUDA-graph capturable) and returns `out`.
"""


def merge_states(outs: Any, lses: Any, *, out: Any = None, lse: Any = None, backend: str = "auto",
                 stream: Any = None) -> Any:
    """Combines partial results of the same rows, each from a call over a disjoint part of the keys with
    `lse` (a context split across calls or devices, cascade attention): lse = log(sum_i exp(lse_i)),
    out = sum_i exp(lse_i - lse) out_i.

    outs: list of [num_tokens, H*D] arrays (float32, float16 or bfloat16, one dtype); lses: list of
    [num_tokens, H] float32. out: [num_tokens, H*D] or None (allocated like outs[0]; may be one of outs);
    lse: [num_tokens, H] float32 or None (may be one of lses), filled in place. A row and head whose every
    lse_i is -inf gets out 0 and lse -inf. cuda: at most 64 partials per call. Returns out."""
    outs, lses = list(outs), list(lses)
    if not outs:
        raise ValidationError.of("outs", "must hold at least one partial result")
    if out is None:
        out = _empty_like(outs[0])
    backend = _resolve_backend(backend, outs[0])
    _C.merge_states(outs, lses, out, lse, backend, _stream_ptr(stream, outs[0], backend))
    return out
