#!/usr/bin/env python3
"""Greedy speculative decoding that emits exactly the tokens of plain greedy decoding (issue 24).

A one-layer attention model with random weights and per-token projections: token -> embedding x ->
q, k, v = x Wq, x Wk, x Wv; out = attention over the paged cache (pagedattn, which writes k, v in);
logits = (out Wo) E^T. Only the attention output can differ between a verify row and a decode row.

Plain decoding feeds one token per call (T = 1). Speculative decoding feeds the last accepted token and
d draft tokens as one chain verify (T = d + 1) and keeps the drafts the target agrees with, plus one
token of its own. The drafts are plain decoding's own tokens with a fraction replaced at random, so
most verifies accept several. With Options::deterministic (invariant rows, on either backend) every
verify row is bit-identical to the decode of the same prefix, so the two emit the same tokens; without
it the script reports the first step where they part, if any.

    python3 examples/speculative_invariance.py [--steps 1000] [--draft 4] [--dtype bf16] [--backend cuda]
"""
import argparse
import sys

import numpy as np

import pagedattn


class Model:
    def __init__(self, args):
        rng = np.random.default_rng(args.seed)
        self.args = args
        H, Hk, D, dm, V = args.heads, args.kv_heads, args.head_size, args.model_dim, args.vocab
        s = 1.0 / np.sqrt(dm)
        self.E = rng.standard_normal((V, dm)).astype(np.float32)
        self.Wq = (rng.standard_normal((dm, H * D)) * s).astype(np.float32)
        self.Wk = (rng.standard_normal((dm, Hk * D)) * s).astype(np.float32)
        self.Wv = (rng.standard_normal((dm, Hk * D)) * s).astype(np.float32)
        self.Wo = (rng.standard_normal((H * D, dm)) / np.sqrt(H * D)).astype(np.float32)
        # NumPy arrays on the cpu backend for f32/f16; torch tensors for bf16 (no NumPy dtype) and on cuda
        self.dt = {"f32": np.float32, "f16": np.float16}.get(args.dtype) if args.backend == "cpu" else None
        if self.dt is None:
            import torch
            self.torch = torch
            self.tdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
            self.dev = "cuda" if args.backend == "cuda" else "cpu"
        blocks = (args.prompt + args.steps + args.draft + 2 + args.block_size - 1) // args.block_size
        self.blocks = blocks
        self.cache_shape = (blocks, Hk, args.block_size, D)

    def new_cache(self):
        if self.dt is not None:
            return [np.zeros(self.cache_shape, self.dt) for _ in range(2)]
        return [self.torch.zeros(self.cache_shape, dtype=self.tdt, device=self.dev) for _ in range(2)]

    def _io(self, x):
        if self.dt is not None:
            return np.ascontiguousarray(x.astype(self.dt))
        return self.torch.from_numpy(np.ascontiguousarray(x)).to(device=self.dev, dtype=self.tdt)

    @staticmethod
    def _rows(x, w):
        """x @ w one row at a time: a matrix product's rows can round differently with the number of rows
        (BLAS picks its kernel by shape), which would make a verify's projections differ from a decode's."""
        return np.stack([xi @ w for xi in x])

    def step(self, cache, tokens, past, deterministic):
        """Feeds `tokens` at positions past.. (written into the cache); returns each row's argmax."""
        a = self.args
        x = self.E[np.asarray(tokens)]
        q, k, v = self._rows(x, self.Wq), self._rows(x, self.Wk), self._rows(x, self.Wv)
        out = pagedattn.forward(query=self._io(q), key=self._io(k), value=self._io(v),
                                key_cache=cache[0], value_cache=cache[1], past_lens=[past],
                                subsequence_begins=[0, len(tokens)], block_indices=list(range(self.blocks)),
                                block_indices_begins=[0, self.blocks], num_heads=a.heads, backend=a.backend,
                                deterministic=deterministic)
        o = out.float().cpu().numpy() if self.dt is None else out.astype(np.float32)
        return list(np.argmax(self._rows(self._rows(o, self.Wo), self.E.T), axis=1))


def plain(model, prompt, steps, deterministic):
    cache = model.new_cache()
    toks = list(prompt)
    nxt = model.step(cache, toks, 0, deterministic)[-1]          # the prompt as one prefill
    out = [nxt]
    while len(out) < steps:
        toks.append(nxt)
        nxt = model.step(cache, [nxt], len(toks) - 1, deterministic)[0]
        out.append(nxt)
    return out


def speculative(model, prompt, steps, reference, deterministic, rng, p_wrong):
    """Greedy speculative decoding with drafts taken from `reference` (p_wrong of them replaced)."""
    cache = model.new_cache()
    toks = list(prompt)
    out = [model.step(cache, toks, 0, deterministic)[-1]]
    verifies = accepted = 0
    while len(out) < steps:
        last = out[-1]
        d = min(model.args.draft, steps - len(out))
        drafts = [reference[len(out) + i] if len(out) + i < len(reference) else 0 for i in range(d)]
        drafts = [int(rng.integers(model.args.vocab)) if rng.random() < p_wrong else g for g in drafts]
        past = len(prompt) + len(out) - 1                          # cache rows before `last`
        pred = model.step(cache, [last] + drafts, past, deterministic)
        verifies += 1
        emit = [pred[0]]
        for i, g in enumerate(drafts):                            # keep drafts the target agrees with
            if g != emit[-1]:
                break
            emit.append(pred[i + 1])
        accepted += len(emit) - 1
        out.extend(emit)
    return out[:steps], verifies, accepted


def run(args):
    model = Model(args)
    rng = np.random.default_rng(args.seed + 1)
    prompt = [int(t) for t in rng.integers(args.vocab, size=args.prompt)]
    results = {}
    for det in (True, False):
        ref = plain(model, prompt, args.steps, det)
        spec, verifies, accepted = speculative(model, prompt, args.steps, ref, det, np.random.default_rng(args.seed + 2),
                                               args.p_wrong)
        first = next((i for i, (a, b) in enumerate(zip(ref, spec)) if a != b), None)
        results[det] = first
        print(f"deterministic={det}: {args.steps} tokens, {verifies} verifies of T <= {args.draft + 1} "
              f"({accepted} drafts accepted): " +
              ("the same tokens as plain decoding" if first is None else f"first divergence at token {first}"))
    return results


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--draft", type=int, default=4, help="draft tokens per verify (T = draft + 1)")
    p.add_argument("--p-wrong", type=float, default=0.2, help="fraction of drafts replaced at random")
    p.add_argument("--prompt", type=int, default=64)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--model-dim", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-size", type=int, default=64)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--dtype", choices=["f32", "f16", "bf16"], default="bf16")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--backend", choices=["cpu", "cuda"], default="cpu")
    return p.parse_args(argv)


def main(argv=None):
    results = run(parse(argv))
    return 0 if results[True] is None else 1


if __name__ == "__main__":
    sys.exit(main())
