#!/usr/bin/env python3
"""One sequence's context split across processes (context parallelism) with torch.distributed.

Each rank holds one shard of the cached context (a run of whole cache blocks) in its own paged cache;
the last rank also holds the new tokens. Every rank attends its shard (pagedattn.forward with `lse`;
the ranks without the new tokens with `prefix_only=True`: they attend their whole shard and write
nothing), the ranks all-gather their (out, lse) and merge them with pagedattn.merge_states. The result
is checked against the unsplit call on rank 0. docs/design.md, "Splitting a context", gives the rule.

    python3 examples/context_parallel.py --world-size 2              # gloo on the CPU (two processes)
    python3 examples/context_parallel.py --world-size 1              # the shards in turn, one process
    python3 examples/context_parallel.py --device cuda --world-size 2  # one GPU per rank, NCCL
    torchrun --nproc-per-node 2 examples/context_parallel.py [--device cuda]   # ranks as launched

Sizes: --context (cached tokens, default 131072), --tokens (new tokens T, default 4), --heads 16
--kv-heads 4 --head-size 128, f16 cache and queries, block size 32. On one H200 (--device cuda
--world-size 1, 128k, 2 and 4 shards): max abs error 3.81e-06 against the unsplit call (run d3); the
NCCL part (two GPUs) has not run.
--window W: a sliding window across the shards; the shards without the new tokens then pass
new_token_positions (where the new tokens sit relative to their keys).
"""
import argparse
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

import pagedattn


def make_sequence(args):
    """The whole sequence, the same on every rank (seeded): its cache blocks in order, queries, new K/V."""
    rng = np.random.default_rng(args.seed)
    H, Hk, D, bs = args.heads, args.kv_heads, args.head_size, args.block_size
    L, T = args.context, args.tokens
    blocks = (L + T + bs - 1) // bs
    f16 = np.float16
    return dict(
        key_blocks=rng.uniform(-1, 1, (blocks, Hk, bs, D)).astype(f16),
        value_blocks=rng.uniform(-1, 1, (blocks, Hk, bs, D)).astype(f16),
        query=rng.uniform(-1, 1, (T, H * D)).astype(f16),
        key=rng.uniform(-1, 1, (T, Hk * D)).astype(f16),
        value=rng.uniform(-1, 1, (T, Hk * D)).astype(f16),
        sinks=rng.uniform(-1, 2, H).astype(np.float32),
    )


def shard_bounds(args, world):
    """Shard r holds cached positions [b[r], b[r + 1]); every bound a block boundary (the last: L)."""
    bs, L = args.block_size, args.context
    per = (L // bs + world - 1) // world * bs
    b = [min(r * per, L) for r in range(world)] + [L]
    return b


def on_device(x, args, rank):
    """A NumPy array as this rank's tensor: the array itself on the CPU, a torch tensor on its GPU."""
    if args.device == "cpu":
        return x
    return torch.from_numpy(np.ascontiguousarray(x)).to(f"cuda:{rank % torch.cuda.device_count()}")


def attend_shard(args, seq, rank, world):
    """(out, lse) of this rank's shard: a cache of its own blocks, its positions shard-local."""
    bs, T = args.block_size, args.tokens
    b = shard_bounds(args, world)
    lo, hi = b[rank], b[rank + 1]
    last = rank == world - 1
    top = hi + (T if last else 0)                     # positions this shard's table covers
    first_blk, end_blk = lo // bs, (top + bs - 1) // bs
    kc = seq["key_blocks"][first_blk:end_blk].copy()  # this rank's paged cache: only its blocks
    vc = seq["value_blocks"][first_blk:end_blk].copy()
    rows = seq["query"].shape[0]
    dev = lambda x: on_device(x, args, rank)  # noqa: E731
    lse = dev(np.full((rows, args.heads), np.nan, np.float32))
    kw = dict(query=dev(seq["query"]), key_cache=dev(kc), value_cache=dev(vc),
              past_lens=[hi - lo], subsequence_begins=[0, rows], block_indices=list(range(end_blk - first_blk)),
              block_indices_begins=[0, end_blk - first_blk], num_heads=args.heads, lse=lse, backend=args.device)
    if last:   # the new tokens: written here (at shard-local positions hi - lo ..), the sinks once
        kw.update(key=dev(seq["key"]), value=dev(seq["value"]), sinks=dev(seq["sinks"]))
    else:      # a shard without them: every new token attends the whole shard, nothing is written
        kw.update(prefix_only=True)
        if args.window:  # the new tokens sit L - lo positions after the shard's first key
            kw.update(new_token_positions=[args.context - lo])
    kw.update(sliding_window=args.window)
    if args.device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = pagedattn.forward(**kw)
    if args.device == "cuda":
        torch.cuda.synchronize()
    return out, lse, time.perf_counter() - t0


def unsplit(args, seq):
    """The whole call (the reference): one cache of every block."""
    rows, blocks = seq["query"].shape[0], seq["key_blocks"].shape[0]
    dev = lambda x: on_device(x, args, 0)  # noqa: E731
    out = pagedattn.forward(query=dev(seq["query"]), key=dev(seq["key"]), value=dev(seq["value"]),
                            key_cache=dev(seq["key_blocks"].copy()), value_cache=dev(seq["value_blocks"].copy()),
                            past_lens=[args.context], subsequence_begins=[0, rows],
                            block_indices=list(range(blocks)), block_indices_begins=[0, blocks],
                            sinks=dev(seq["sinks"]), num_heads=args.heads, sliding_window=args.window,
                            backend=args.device)
    return out if args.device == "cpu" else out.cpu().numpy()


def run(rank, world, args, results=None):
    """One rank (world > 1: inside an initialised process group) or, with world == 1 and args.shards,
    every shard in turn. Returns (max abs error of the merged out vs the unsplit call, shard seconds)."""
    seq = make_sequence(args)
    if world == 1:
        parts = [attend_shard(args, seq, r, args.shards) for r in range(args.shards)]
        outs = [p[0] for p in parts]
        lses = [p[1] for p in parts]
        secs = [p[2] for p in parts]
    else:
        out, lse, sec = attend_shard(args, seq, rank, world)
        out_t, lse_t = (torch.from_numpy(out), torch.from_numpy(lse)) if args.device == "cpu" else (out, lse)
        outs = [torch.empty_like(out_t) for _ in range(world)]
        lses = [torch.empty_like(lse_t) for _ in range(world)]
        dist.all_gather(outs, out_t)
        dist.all_gather(lses, lse_t)
        secs_t = [torch.zeros(1, dtype=torch.float64, device=out_t.device) for _ in range(world)]
        dist.all_gather(secs_t, torch.tensor([sec], dtype=torch.float64, device=out_t.device))
        secs = [float(s) for s in secs_t]
    merged = pagedattn.merge_states(outs, lses)  # on the device the partials are on
    if not isinstance(merged, np.ndarray):  # torch (gathered) tensors
        merged = merged.cpu().numpy()
    err = None
    if rank == 0:
        want = unsplit(args, seq)
        err = float(np.abs(merged.astype(np.float64) - want.astype(np.float64)).max())
        print(f"context {args.context} tokens {args.tokens}: {len(outs)} shards "
              f"({', '.join(f'{s * 1e3:.1f}' for s in secs)} ms each), merged vs unsplit: max abs error {err:.2e}")
        if results is not None:
            results.append(err)
    return err


def _worker(rank, world, args, port):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(port))
    if args.device == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo", rank=rank, world_size=world)
    try:
        err = run(rank, world, args)
        if rank == 0 and err is not None and err > args.tol:
            raise SystemExit(f"merged output differs from the unsplit call: {err:.2e} > {args.tol}")
    finally:
        dist.destroy_process_group()


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--context", type=int, default=131072)
    p.add_argument("--tokens", type=int, default=4)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--head-size", type=int, default=128)
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cpu: gloo and the cpu backend; cuda: one GPU per rank, NCCL and the cuda backend")
    p.add_argument("--world-size", type=int, default=2, help="processes; 1: the shards in turn")
    p.add_argument("--shards", type=int, default=2, help="with --world-size 1: shards run in turn")
    p.add_argument("--window", type=int, default=0,
                   help="sliding window (0: none); the shards without the new tokens get new_token_positions")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--port", type=int, default=29517)
    p.add_argument("--tol", type=float, default=2e-3, help="max abs error of the merged f16 output")
    return p.parse_args(argv)


def main(argv=None):
    args = parse(argv)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # launched by torchrun
        if args.device == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
        try:
            run(dist.get_rank(), dist.get_world_size(), args)
        finally:
            dist.destroy_process_group()
        return 0
    if args.world_size == 1:
        err = run(0, 1, args)
        return 0 if err <= args.tol else 1
    torch.multiprocessing.spawn(_worker, args=(args.world_size, args, args.port), nprocs=args.world_size, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
