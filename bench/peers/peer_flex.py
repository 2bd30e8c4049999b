"""FlexAttention (torch.compile) over a paged KV pool; see run_peers.py."""
import time
import traceback

import torch

from peers_common import (bytes_terms, finish_row, layer_sets, new_row, over_budget, reference, rel_err,
                          short, skip_rows, timed_row)


# --- FlexAttention over a paged KV pool -----------------------------------------------------------------------
class PagedPool:
    """Per layer set and layer: K and V pools [1, Hk, pages*bs, D]; one block table shared by the layers.
    Sized once per scenario (largest L and T), so that FlexAttention compiles once per T, not per L."""

    def __init__(self, ctx, B, L_max, T_max, sets, gen):
        a = ctx.args
        self.bs = a.block_size
        self.B = B
        self.pages_per_seq = -(-(L_max + T_max) // self.bs)
        self.pages = B * self.pages_per_seq
        shape = (1, a.kv_heads, self.pages * self.bs, a.head_size)
        self.k = [[torch.randn(shape, generator=gen, device=ctx.dev, dtype=torch.float16) for _ in range(a.layers)]
                  for _ in range(sets)]
        self.v = [[torch.randn(shape, generator=gen, device=ctx.dev, dtype=torch.float16) for _ in range(a.layers)]
                  for _ in range(sets)]
        # phys_to_logical[b, page]: logical page of sequence b stored in physical page `page`, else -1
        self.p2l = torch.full((B, self.pages), -1, dtype=torch.int32, device=ctx.dev)
        self.past = torch.zeros((), dtype=torch.int32, device=ctx.dev)
        self.table = None  # [B, pages_per_seq] logical -> physical page

    def assign(self, L, T, gen_cpu):
        """A fresh shuffled table for context L + T: every sequence gets random pages of the pool."""
        n = -(-(L + T) // self.bs)
        perm = torch.randperm(self.pages, generator=gen_cpu).to(self.p2l.device)
        table = perm[: self.B * self.pages_per_seq].view(self.B, self.pages_per_seq)[:, :n].contiguous()
        p2l = torch.full_like(self.p2l, -1)
        rows = torch.arange(self.B, device=table.device)[:, None].expand(self.B, n)
        p2l[rows, table] = torch.arange(n, dtype=torch.int32, device=table.device)[None, :].expand(self.B, n)
        self.p2l.copy_(p2l)  # in place: the mask_mod closure keeps pointing at the same tensors
        self.past.fill_(L)
        self.table = table

    def mask_mod(self):
        p2l, past, bs = self.p2l, self.past, self.bs

        def paged_causal(b, h, q_idx, kv_idx):
            lp = p2l[b, kv_idx // bs]
            pos = lp * bs + kv_idx % bs
            return (lp >= 0) & (pos <= past + q_idx)

        return paged_causal

    def logical(self, kv, L, T, s=0, layer=0):
        """Sequence-ordered K or V of one layer: [B, Hk, L+T, D] gathered through the table."""
        S = L + T
        pos = torch.arange(S, device=self.table.device)
        phys = self.table[:, pos // self.bs] * self.bs + pos % self.bs  # [B, S]
        x = kv[s][layer][0]  # [Hk, slots, D]
        return x[:, phys].permute(1, 0, 2, 3)


def flex_jobs(scen, plot_tokens=(1, 3, 8)):
    """(scenario, B, L list, T) in the order run: the seed scenario's plotted T first, then the batch
    scenario, then the seed scenario's other T (each new T costs a compile; the budget guard may cut the tail)."""
    first, later = [], []
    for name, B, Ls, Ts in scen:
        for T in Ts:
            (first if name != "seed" or T in plot_tokens else later).append((name, B, Ls, T))
    seed_first = [j for j in first if j[0] == "seed"]
    return seed_first + [j for j in first if j[0] != "seed"] + later


def run_flex(ctx, scen):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    a = ctx.args
    system = "flex-paged"
    H, D = a.heads, a.head_size
    if ctx.cpu and not a.smoke_compile:
        flex, ctx.meta["flex"] = flex_attention, "eager (CPU smoke)"
    else:
        import torch._dynamo as dynamo
        dynamo.config.cache_size_limit = 64
        if hasattr(dynamo.config, "recompile_limit"):
            dynamo.config.recompile_limit = 64
        flex, ctx.meta["flex"] = torch.compile(flex_attention, dynamic=False), "torch.compile(dynamic=False)"
    gen = torch.Generator(device=ctx.dev).manual_seed(a.seed + 7)
    gen_cpu = torch.Generator().manual_seed(a.seed + 11)
    pools = {}  # scenario -> PagedPool (or the error that allocating it raised)
    failures = {}  # error message -> count: the same compile error twice ends the flex rows
    for name, B, L_list, T in flex_jobs(scen):
        if name not in pools:
            Ts = next(x[3] for x in scen if x[0] == name)
            # one pool per scenario, sized for its largest L and T: a compile per T, not per (L, T)
            sets = layer_sets(ctx, bytes_terms(a, B, min(L_list), min(Ts))["kv"])
            try:
                pools[name] = PagedPool(ctx, B, max(L_list), max(Ts), sets, gen)
                pools[name].mask = pools[name].mask_mod()
            except Exception as e:  # noqa: BLE001
                pools[name] = "allocating the paged pool: " + short(e)
        pool = pools[name]
        if isinstance(pool, str):
            skip_rows(ctx, system, name, B, L_list[0], [T], "error", pool)
            continue
        KV = pool.pages * pool.bs
        compiled = False
        for L in L_list:
            repeated = [m for m, n in failures.items() if n >= 2]
            if repeated:
                skip_rows(ctx, system, name, B, L, [T], "error", "not tried: the same error twice before: " + repeated[0])
                continue
            why = over_budget(ctx, system, 0.0 if compiled else ctx.meta.get("flex_compile_s", 20.0))
            if why:
                skip_rows(ctx, system, name, B, L, [T], "skipped", why)
                continue
            t0 = time.monotonic()
            row = new_row(ctx, system, name, B, L, T)
            row["kv_layout"] = f"paged pool [1, Hk, {pool.pages} pages x {pool.bs}, D], shuffled table"
            row["gqa"], row["mask"] = "enable_gqa=True", "mask_mod: physical slot -> logical position <= L + t"
            try:
                pool.assign(L, T, gen_cpu)
                bm = create_block_mask(pool.mask, B, None, T, KV, device=ctx.dev, BLOCK_SIZE=(128, pool.bs))
                sets = len(pool.k)
                q = [[torch.randn(B, H, T, D, generator=gen, device=ctx.dev, dtype=torch.float16)
                      for _ in range(a.layers)] for _ in range(sets)]

                def call(s_, l_):
                    return flex(q[s_][l_], pool.k[s_][l_], pool.v[s_][l_], block_mask=bm, enable_gqa=True)

                tc = time.monotonic()
                out0 = call(0, 0)
                ctx.sync()
                if not compiled:
                    ctx.meta["flex_compile_s"] = max(ctx.meta.get("flex_compile_s", 0.0), time.monotonic() - tc)
                    row["note"] = f"first call (compile) {time.monotonic() - tc:.1f} s"
                    compiled = True
                ref = reference(q[0][0], pool.logical(pool.k, L, T), pool.logical(pool.v, L, T), L)
                calls = [[(lambda s_=s_, l_=l_: call(s_, l_)) for l_ in range(a.layers)] for s_ in range(sets)]
                timed_row(ctx, row, calls, lambda out: rel_err(out, ref), out0, t0)
                q = ref = bm = None
            except Exception as e:  # noqa: BLE001
                row["status"], row["note"] = "error", short(e)
                failures[row["note"]] = failures.get(row["note"], 0) + 1
                if a.verbose:
                    traceback.print_exc()
                finish_row(ctx, row, t0)
    pools.clear()
    if not ctx.cpu:
        torch.cuda.empty_cache()
