"""pagedattn as a PyTorch operator: ``torch.ops.pagedattn.forward``, registered with
``torch.library.custom_op`` (pure Python; pagedattn has no C++ dependency on PyTorch).

Importing this module imports torch (``import pagedattn`` alone does not). The op works in eager mode and
inside ``torch.compile`` (a fake implementation describes it to the compiler: it returns nothing and
mutates ``out``, the caches and ``scores``)::

    import pagedattn.torch as pat
    out = pat.forward(query, key, value, key_cache, value_cache, past_lens, subsequence_begins,
                      block_indices, block_indices_begins, num_heads=H)

Shapes and dtypes are those of :func:`pagedattn.forward`. Metadata tensors (past_lens, the begins, block
tables, qq_bias) are read on the host at every call: give CPU tensors (CUDA ones are copied to the host,
which synchronises). Each call plans and runs, so it is not capturable in a CUDA graph; to capture, use
``pagedattn.plan(...)`` once and ``plan.run()`` inside ``torch.cuda.graph`` (see :class:`pagedattn.Plan`).
Kernels run on ``torch.cuda.current_stream()``.
"""

from typing import Optional

import torch
from torch import Tensor

import pagedattn as _pa

__all__ = ["forward"]

# The tensors the op may write (declared to torch as mutated). None of them has a default in the schema:
# torch 2.11's ADInplaceOrView kernel indexes the boxed arguments by the mutated ones' positions, and the
# boxed call drops trailing arguments equal to their defaults (IndexError on the H200's torch 2.11 with
# lse=None last, run 2026-12-01-d1).
_MUTATED = ("key_cache", "value_cache", "key_scale", "key_min", "value_scale", "value_min", "out",
            "scores", "lse")


@torch.library.custom_op("pagedattn::forward", mutates_args=_MUTATED)
def _forward_op(
    query: Tensor,
    key: Optional[Tensor],
    value: Optional[Tensor],
    key_cache: Tensor,
    value_cache: Tensor,
    key_scale: Optional[Tensor],
    key_min: Optional[Tensor],
    value_scale: Optional[Tensor],
    value_min: Optional[Tensor],
    past_lens: Tensor,
    subsequence_begins: Tensor,
    block_indices: Tensor,
    block_indices_begins: Tensor,
    out: Tensor,
    scores: Optional[Tensor],
    lse: Optional[Tensor],
    alibi_slopes: Optional[Tensor],
    sinks: Optional[Tensor],
    qq_bias: Optional[Tensor],
    qq_bias_begins: Optional[Tensor],
    num_heads: int,
    scale: Optional[float],
    sliding_window: int,
    max_context_len: Optional[int],
    deterministic: bool,
    score_aggregation_window: Optional[Tensor] = None,
    prefix_only: bool = False,
    new_token_positions: Optional[Tensor] = None,
) -> None:
    _pa.forward(query=query, key=key, value=value, key_cache=key_cache, value_cache=value_cache,
                key_scale=key_scale, key_min=key_min, value_scale=value_scale,
                value_min=value_min, past_lens=past_lens, subsequence_begins=subsequence_begins,
                block_indices=block_indices, block_indices_begins=block_indices_begins, out=out, scores=scores,
                alibi_slopes=alibi_slopes, sinks=sinks, qq_bias=qq_bias, qq_bias_begins=qq_bias_begins,
                num_heads=num_heads, scale=scale, sliding_window=sliding_window,
                max_context_len=max_context_len, deterministic=deterministic,
                score_aggregation_window=score_aggregation_window, lse=lse, prefix_only=prefix_only,
                new_token_positions=new_token_positions)


@_forward_op.register_fake
def _forward_fake(query, key, value, key_cache, value_cache, key_scale, key_min, value_scale,
                  value_min, past_lens, subsequence_begins, block_indices, block_indices_begins, out,
                  scores, lse, alibi_slopes, sinks, qq_bias, qq_bias_begins, num_heads, scale, sliding_window,
                  max_context_len, deterministic, score_aggregation_window=None, prefix_only=False,
                  new_token_positions=None) -> None:
    # Only shapes are known here; the real op validates. Out-of-place results do not exist: the op
    # writes `out` (and the caches, `scores`, `lse`) in place.
    return None


def forward(
    query: Tensor,
    key: Optional[Tensor],
    value: Optional[Tensor],
    key_cache: Tensor,
    value_cache: Tensor,
    past_lens: Tensor,
    subsequence_begins: Tensor,
    block_indices: Tensor,
    block_indices_begins: Tensor,
    *,
    num_heads: int,
    key_scale: Optional[Tensor] = None,
    key_min: Optional[Tensor] = None,
    value_scale: Optional[Tensor] = None,
    value_min: Optional[Tensor] = None,
    scale: Optional[float] = None,
    sliding_window: int = 0,
    alibi_slopes: Optional[Tensor] = None,
    sinks: Optional[Tensor] = None,
    max_context_len: Optional[int] = None,
    qq_bias: Optional[Tensor] = None,
    qq_bias_begins: Optional[Tensor] = None,
    out: Optional[Tensor] = None,
    scores: Optional[Tensor] = None,
    score_aggregation_window: Optional[Tensor] = None,
    deterministic: bool = False,
    lse: Optional[Tensor] = None,
    prefix_only: bool = False,
    new_token_positions: Optional[Tensor] = None,
) -> Tensor:
    """``torch.ops.pagedattn.forward`` with `out` allocated when None; returns `out`.

    query [num_tokens, H*D] (f32/f16/bf16); key, value [num_tokens, Hk*D] / [num_tokens, Hk*Dv] or None (written into the cache
    first); key_cache, value_cache [num_blocks, Hk, block_size, D] (f16/bf16/u8, u8 with
    key_scale/key_min/value_scale/value_min [num_blocks, Hk, block_size] f16); past_lens
    [num_seqs], subsequence_begins [num_seqs+1], block_indices [n], block_indices_begins [num_seqs+1] int32
    (CPU tensors); out [num_tokens, H*Dv]; scores [sum_s ctx_s] f32 or None; score_aggregation_window
    [num_seqs] int32 (CPU) or None (w_s = 1); lse [num_tokens, H] f32 or None (filled in place);
    prefix_only (a shard of a split context, see pagedattn.merge_states) with new_token_positions [num_seqs]
    int32 (CPU) or None. See pagedattn.forward.
    """
    if out is None:
        # [num_tokens, H*Dv]: the value head size (value_cache's last dimension) may differ from the key's
        out = torch.empty((query.shape[0], num_heads * value_cache.shape[-1]), dtype=query.dtype, device=query.device)
    torch.ops.pagedattn.forward(query, key, value, key_cache, value_cache, key_scale, key_min, value_scale,
                                value_min, past_lens, subsequence_begins, block_indices,
                                block_indices_begins, out, scores, lse, alibi_slopes, sinks, qq_bias,
                                qq_bias_begins, num_heads, scale, sliding_window, max_context_len, deterministic,
                                score_aggregation_window, prefix_only, new_token_positions)
    return out
