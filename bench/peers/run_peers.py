#!/usr/bin/env python3
"""Times pagedattn's peers on the seed and batch scenarios (DESIGN.md section 6), one GPU run.

Peers (each a "system" in the rows):
  sdpa-flash   torch SDPA, flash backend, contiguous KV [B, Hk, L+T, D]; T>1: lower-right causal (CausalBias)
  sdpa-cudnn   torch SDPA, cuDNN backend, same KV; T>1: lower-right causal as an additive f16 mask
               (CausalBias would route to the flash kernel whatever sdpa_kernel says: see mask_for)
  flex-paged   FlexAttention (torch.compile) over a paged KV pool [1, Hk, pages*bs, D], shuffled block table,
               a mask_mod that maps physical slots to logical positions (causal past + t + 1), enable_gqa
  flashinfer   FlashInfer paged decode (T=1) / paged prefill (T>1), HND pages, if `import flashinfer` works
pagedattn's own rows come from `pagedattn bench --json` (--pagedattn-json), merged into the same table.

Every timed row: the layers' calls captured in one CUDA graph per layer set (eager with events if capture
fails, said in the row), median of --repeats replays, layer sets rotated so that one replay's KV exceeds
3x L2; the output of layer 0 checked against a float64 reference (relative L2 error <= --tol), a peer that
disagrees is marked "mismatch". Bytes per row: KV (L+T)*Hk*D*2*2 + Q + O, per sequence and layer.
The read ceiling is measured here: torch sum over a 2 GiB tensor, median of 20.

  python3 bench/peers/run_peers.py --json OUT.json [--pagedattn-json bench.json] [--quick] [--max-seconds S]
  python3 bench/peers/run_peers.py --cpu-smoke        # tiny sizes on CPU: exercises the logic, no graphs
"""
import argparse
import importlib
import json
import math
import os
import platform
import statistics
import sys
import time
import traceback

T_START = time.monotonic()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pagedattn_rows import pagedattn_rows_many  # noqa: E402

T_IMPORT = time.monotonic() - T_START

SYSTEMS = ["sdpa-flash", "sdpa-cudnn", "flex-paged", "flashinfer"]


def log(msg=""):
    print(msg, flush=True)


def short(e, n=300):
    """One line naming the exception, at most n characters."""
    s = f"{type(e).__name__}: {e}".replace("\n", " ").strip()
    return s if len(s) <= n else s[: n - 3] + "..."


def parse_ints(s):
    return [int(x) for x in s.split(",") if x.strip()]


# --- run context ------------------------------------------------------------------------------------------
class Ctx:
    def __init__(self, args):
        self.args = args
        self.cpu = args.cpu_smoke
        self.dev = torch.device("cpu" if self.cpu else "cuda")
        self.deadline = T_START + args.max_seconds
        self.rows = []
        self.ceiling_gbs = 0.0
        self.l2_bytes = 0
        self.est = {}  # system -> seconds of its last row (guard estimate)
        self.flex_fn = None
        self.profiler_ok = not (self.cpu or args.no_kernel_names)
        self.meta = {}
        self.profiled = set()

    def left(self):
        return self.deadline - time.monotonic()

    def elapsed(self):
        return time.monotonic() - T_START

    def sync(self):
        if not self.cpu:
            torch.cuda.synchronize()


def layer_sets(ctx, bytes_per_set):
    """Copies of the layers so that one replay's KV exceeds 3x L2 (1 on CPU)."""
    if ctx.cpu or ctx.l2_bytes <= 0:
        return 1
    return max(1, min(64, math.ceil(3.0 * ctx.l2_bytes / bytes_per_set)))


def bytes_terms(a, B, L, T):
    H, Hk, D, n = a.heads, a.kv_heads, a.head_size, B * a.layers
    return {"kv": float(n * (L + T) * Hk * D * 2 * 2), "q": float(n * T * H * D * 2), "o": float(n * T * H * D * 2)}


def new_row(ctx, system, scenario, B, L, T):
    a = ctx.args
    bt = bytes_terms(a, B, L, T)
    return {"system": system, "scenario": scenario, "seqs": B, "context": L, "T": T, "layers": a.layers,
            "status": "error", "note": "", "us": None, "us_min": None, "repeats": 0, "timing": "", "sets": 1,
            "bytes": sum(bt.values()), "bytes_terms": bt, "gbs": None, "pct_ceiling": None, "rel_err": None,
            "kernels": [], "gqa": "", "mask": "", "kv_layout": ""}


def finish_row(ctx, row, t0):
    if row["us"]:
        row["gbs"] = row["bytes"] / (row["us"] * 1e-6) / 1e9
        row["pct_ceiling"] = 100.0 * row["gbs"] / ctx.ceiling_gbs if ctx.ceiling_gbs else None
    row["wall_s"] = round(time.monotonic() - t0, 2)
    ctx.est[row["system"]] = row["wall_s"]
    ctx.rows.append(row)
    print_row(row)
    write_json(ctx)


def skip_rows(ctx, system, scenario, B, L, Ts, status, note):
    for T in Ts:
        r = new_row(ctx, system, scenario, B, L, T)
        r["status"], r["note"] = status, note
        ctx.rows.append(r)
        print_row(r)
    write_json(ctx)


def print_header():
    log(f"{'system':<14} {'scen':<5} {'seqs':>4} {'L':>7} {'T':>2} {'us/layers':>10} {'GB/s':>7} {'%ceil':>6}"
        f" {'rel_err':>8}  status / timing / note")


def print_row(r):
    us = f"{r['us']:10.1f}" if r["us"] else f"{'-':>10}"
    gbs = f"{r['gbs']:7.0f}" if r["gbs"] else f"{'-':>7}"
    pct = f"{r['pct_ceiling']:6.1f}" if r["pct_ceiling"] else f"{'-':>6}"
    err = f"{r['rel_err']:8.1e}" if r["rel_err"] is not None else f"{'-':>8}"
    extra = " ".join(x for x in [r["timing"] if r["status"] in ("ok", "mismatch") else "", r["note"]] if x)
    log(f"{r['system']:<14} {r['scenario']:<5} {r['seqs']:>4} {r['context']:>7} {r['T']:>2} {us} {gbs} {pct} {err}"
        f"  {r['status']}{' ' + extra if extra else ''}")


def write_json(ctx):
    a = ctx.args
    if not a.json:
        return
    doc = {"tool": "bench/peers/run_peers.py", "device": ctx.meta.get("device", ""), "date": ctx.meta.get("date", ""),
           "torch": torch.__version__, "python": platform.python_version(),
           "ceiling_gbs": ctx.ceiling_gbs, "ceiling_method": ctx.meta.get("ceiling_method", ""),
           "l2_bytes": ctx.l2_bytes, "import_s": round(T_IMPORT, 2), "elapsed_s": round(ctx.elapsed(), 2),
           "config": {"heads": a.heads, "kv_heads": a.kv_heads, "head_size": a.head_size, "layers": a.layers,
                      "block_size": a.block_size, "dtype": "f16", "repeats": a.repeats, "tol": a.tol,
                      "cpu_smoke": a.cpu_smoke, "quick": a.quick, "max_seconds": a.max_seconds,
                      "timing": "median of CUDA graph replays (one graph per layer set, events around each replay)"},
           "bytes_formula": {"kv": "(L+T)*Hk*D*2*sizeof(f16)", "q": "T*H*D*2", "o": "T*H*D*2",
                             "scope": "summed over sequences and layers",
                             "pagedattn rows": "pagedattn's own bytes (adds the new K/V rows; u8 adds scales)"},
           "command": " ".join(sys.argv), "pagedattn": ctx.meta.get("pagedattn"),
           "flex": ctx.meta.get("flex"), "flex_compile_s": ctx.meta.get("flex_compile_s"),
           "inductor_pool": ctx.meta.get("inductor_pool"), "rows": ctx.rows}
    tmp = a.json + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, a.json)


# --- measurement ------------------------------------------------------------------------------------------
def measure_ceiling(ctx):
    if ctx.cpu:
        x = torch.ones(16 << 20, dtype=torch.float32)
        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            x.sum()
            ts.append(time.perf_counter() - t0)
        ctx.meta["ceiling_method"] = "CPU smoke: torch sum over 64 MiB f32, median of 5"
        return x.numel() * 4 / statistics.median(ts) / 1e9
    n = (2 << 30) // 4  # 2 GiB of f32
    x = torch.ones(n, dtype=torch.float32, device="cuda")
    for _ in range(3):
        x.sum()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(21)]
    ev[0].record()
    for i in range(20):
        x.sum()
        ev[i + 1].record()
    torch.cuda.synchronize()
    ms = statistics.median(ev[i].elapsed_time(ev[i + 1]) for i in range(20))
    del x
    ctx.meta["ceiling_method"] = "torch.sum over a 2 GiB f32 tensor, median of 20 (cuda events)"
    return n * 4 / (ms * 1e-3) / 1e9


def time_sets(ctx, set_fns):
    """set_fns[s]() runs all layers of layer set s and returns their outputs.
    Returns (us per replay, timing description, layer 0's output of set 0 as the timed calls left it)."""
    a = ctx.args
    if ctx.cpu:
        for f in set_fns:
            f()
        us = []
        for r in range(a.repeats):
            t0 = time.perf_counter()
            set_fns[r % len(set_fns)]()
            us.append(1e6 * (time.perf_counter() - t0))
        return us, "wall clock (CPU smoke)", set_fns[0]()[0]
    run, timing, graph_out = None, "cuda-graph", None
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for f in set_fns:
                f()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        graphs, pool = [], None
        for f in set_fns:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                outs = f()
            if graph_out is None:
                graph_out = outs[0]  # the replays of graph 0 rewrite this tensor
            pool = g.pool()
            graphs.append(g)
        run = [g.replay for g in graphs]
    except Exception as e:  # noqa: BLE001 - any capture failure: time eagerly and say so
        torch.cuda.synchronize()
        run, timing, graph_out = set_fns, "eager, cuda events (graph capture failed: " + short(e, 160) + ")", None
    for w in range(max(a.warmup, len(run))):
        run[w % len(run)]()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(a.repeats + 1)]
    ev[0].record()
    for r in range(a.repeats):
        run[r % len(run)]()
        ev[r + 1].record()
    torch.cuda.synchronize()
    us = [1000.0 * ev[r].elapsed_time(ev[r + 1]) for r in range(a.repeats)]
    if graph_out is None:
        graph_out = set_fns[0]()[0]
        torch.cuda.synchronize()
    return us, timing, graph_out


def kernel_names(ctx, fn):
    """Names of the GPU kernels one call launches (which backend really ran)."""
    if not ctx.profiler_ok:
        return []
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        names = []
        for e in prof.events():
            dt = str(getattr(e, "device_type", ""))
            if "CUDA" in dt and e.name not in names and not e.name.startswith(("Memset", "Memcpy", "cudaStream")):
                names.append(e.name)
        return [n if len(n) <= 90 else n[:87] + "..." for n in names[:4]]
    except Exception as e:  # noqa: BLE001
        ctx.profiler_ok = False
        return ["(profiler failed: " + short(e, 100) + ")"]


def reference(q, k, v, L):
    """float64 attention of q [B,H,T,D] over logical k, v [B,Hk,L+T,D]; token t sees positions <= L + t."""
    B, H, T, D = q.shape
    Hk, S = k.shape[1], k.shape[2]
    G = H // Hk
    qd = q.double().reshape(B, Hk, G * T, D)  # head h = kvh * G + g; row g * T + t
    s = torch.matmul(qd, k.double().transpose(-1, -2)) / math.sqrt(D)
    t = torch.arange(T, device=q.device).repeat(G)
    allowed = torch.arange(S, device=q.device)[None, :] <= (L + t)[:, None]
    s.masked_fill_(~allowed, float("-inf"))
    o = torch.matmul(torch.softmax(s, dim=-1), v.double())
    return o.reshape(B, H, T, D)


def rel_err(out, ref):
    out = out.double()
    if not torch.isfinite(out).all():
        return float("inf")
    return (torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref)).item()


def timed_row(ctx, row, calls, check, out0, t0):
    """calls[s][l]() is layer l of set s; out0: what calls[0][0]() returned when first called (eagerly);
    check(out) -> relative L2 error of a layer-0, set-0 output against the float64 reference.
    Both the eager output and the one the timed replays left behind are checked; the worse one is kept."""
    a = ctx.args
    err = check(out0)
    set_fns = [(lambda cs=cs: [c() for c in cs]) for cs in calls]
    us, timing, timed_out = time_sets(ctx, set_fns)
    err_timed = check(timed_out)
    err = err_timed if not (err_timed <= err) else err  # NaN-safe max
    row["rel_err"] = err
    row["us"], row["us_min"], row["repeats"], row["timing"] = statistics.median(us), min(us), len(us), timing
    row["sets"] = len(calls)
    key = (row["system"], row["scenario"], row["T"])
    if key not in ctx.profiled:  # once per system, scenario and T: the profiler costs time
        ctx.profiled.add(key)
        row["kernels"] = kernel_names(ctx, calls[0][0])
    if not (err <= a.tol):
        row["status"] = "mismatch"
        row["note"] = (row["note"] + "; " if row["note"] else "") + f"output differs from the float64 reference " \
                                                                    f"(rel L2 {err:.2e} > {a.tol:g})"
    else:
        row["status"] = "ok"
    finish_row(ctx, row, t0)


def over_budget(ctx, system, extra=0.0):
    est = ctx.est.get(system, 1.0) + extra
    if ctx.left() < est:
        return f"skipped: time budget --max-seconds {ctx.args.max_seconds:g} (at {ctx.elapsed():.0f} s, " \
               f"a row of this system takes ~{est:.0f} s)"
    return None


# --- SDPA on contiguous KV ----------------------------------------------------------------------------------
def mask_for(system, T, S, dev):
    """(attn_mask, description). T=1: none needed (the one query sees all L+1 keys)."""
    from torch.nn.attention.bias import causal_lower_right
    if T == 1:
        return None, "none (T=1)"
    if system == "sdpa-flash":
        return causal_lower_right(T, S), "CausalBias lower-right"
    # NOTE: CausalBias dispatches to the flash kernel directly when flash can run, ignoring sdpa_kernel's
    # backend choice, so cuDNN gets the same mask materialised as an additive f16 bias. Row stride padded
    # to 16 elements.
    Sp = (S + 15) // 16 * 16
    allowed = torch.arange(S, device=dev)[None, :] <= (S - T + torch.arange(T, device=dev))[:, None]
    full = torch.zeros(1, 1, T, Sp, dtype=torch.float16, device=dev)
    full[..., :S].masked_fill_(~allowed, float("-inf"))
    return full[..., :S], "additive f16 lower-right mask (materialised)"


def run_sdpa(ctx, scenario, B, L, Ts, systems):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    a = ctx.args
    H, Hk, D = a.heads, a.kv_heads, a.head_size
    backend = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION}
    g = torch.Generator(device=ctx.dev).manual_seed(a.seed + L)
    for T in Ts:
        S = L + T
        todo = []
        for system in systems:
            why = over_budget(ctx, system)
            if why:
                skip_rows(ctx, system, scenario, B, L, [T], "skipped", why)
            else:
                todo.append(system)
        if not todo:
            continue
        kv_bytes = bytes_terms(a, B, L, T)["kv"]
        sets = layer_sets(ctx, kv_bytes)
        try:
            q = [[torch.randn(B, H, T, D, generator=g, device=ctx.dev, dtype=torch.float16) for _ in range(a.layers)]
                 for _ in range(sets)]
            k = [[torch.randn(B, Hk, S, D, generator=g, device=ctx.dev, dtype=torch.float16) for _ in range(a.layers)]
                 for _ in range(sets)]
            v = [[torch.randn(B, Hk, S, D, generator=g, device=ctx.dev, dtype=torch.float16) for _ in range(a.layers)]
                 for _ in range(sets)]
        except Exception as e:  # noqa: BLE001
            for system in todo:
                skip_rows(ctx, system, scenario, B, L, [T], "error", "allocating the inputs: " + short(e))
            continue
        ref = [None]

        def check_against(out):
            if ref[0] is None:
                ref[0] = reference(q[0][0], k[0][0], v[0][0], L)
            return rel_err(out, ref[0])

        for system in todo:
            t0 = time.monotonic()
            row = new_row(ctx, system, scenario, B, L, T)
            row["kv_layout"] = "contiguous [B, Hk, L+T, D]"
            try:
                mask, row["mask"] = mask_for(system, T, S, ctx.dev)
                be = backend[system]
                kk, vv, gqa = k, v, True

                def call(qi, ki, vi, use_gqa):
                    with sdpa_kernel([be]):
                        if use_gqa:
                            return F.scaled_dot_product_attention(qi, ki, vi, attn_mask=mask, enable_gqa=True)
                        return F.scaled_dot_product_attention(qi, ki, vi, attn_mask=mask)

                try:
                    out0 = call(q[0][0], k[0][0], v[0][0], True)
                    row["gqa"] = "enable_gqa=True"
                except Exception as e:  # noqa: BLE001 - GQA not supported here: expand K/V (4x the bytes read)
                    gqa = False
                    G = H // Hk
                    kk = [[x.repeat_interleave(G, dim=1) for x in s_] for s_ in k]
                    vv = [[x.repeat_interleave(G, dim=1) for x in s_] for s_ in v]
                    try:
                        out0 = call(q[0][0], kk[0][0], vv[0][0], False)
                    except Exception as e2:  # noqa: BLE001
                        raise RuntimeError(f"with enable_gqa: {short(e, 200)}; with K/V expanded: {short(e2, 200)}")
                    row["gqa"] = "repeat_interleave (enable_gqa failed: " + short(e, 120) + ")"
                    row["note"] = f"K/V expanded to H heads: reads {G}x the KV bytes counted"
                calls = [[(lambda s_=s_, l_=l_: call(q[s_][l_], kk[s_][l_], vv[s_][l_], gqa))
                          for l_ in range(a.layers)] for s_ in range(sets)]
                timed_row(ctx, row, calls, check_against, out0, t0)
                kk = vv = None
            except Exception as e:  # noqa: BLE001
                row["status"], row["note"] = "error", short(e)
                if a.verbose:
                    traceback.print_exc()
                finish_row(ctx, row, t0)
        q = k = v = ref = None  # frees the inputs before the next T allocates its own
        if not ctx.cpu:
            torch.cuda.empty_cache()


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


# --- FlashInfer (only if importable) ------------------------------------------------------------------------
def flashinfer_status():
    try:
        importlib.import_module("flashinfer")
        return None
    except ModuleNotFoundError as e:
        return ("not installed (" + short(e, 120) + "); its wheel JIT-compiles its kernels with nvcc at first use, "
                "which does not fit this run's device budget")
    except Exception as e:  # noqa: BLE001
        return "import flashinfer failed: " + short(e)


def run_flashinfer(ctx, scenario, B, L_list, Ts):
    import flashinfer
    a = ctx.args
    system = "flashinfer"
    H, Hk, D, bs = a.heads, a.kv_heads, a.head_size, a.block_size
    dev = ctx.dev
    for L in L_list:
        for T in Ts:
            why = over_budget(ctx, system, 0.0 if system in ctx.est else 30.0)
            if why:
                skip_rows(ctx, system, scenario, B, L, [T], "skipped", why)
                continue
            t0 = time.monotonic()
            row = new_row(ctx, system, scenario, B, L, T)
            row["gqa"], row["kv_layout"] = "native", f"HND pages [pages, Hk, {bs}, D], shuffled table"
            try:
                S = L + T
                n = -(-S // bs)
                sets = layer_sets(ctx, bytes_terms(a, B, L, T)["kv"])
                gen = torch.Generator(device=dev).manual_seed(a.seed + L + T)
                pages = B * n
                kc = [[torch.randn(pages, Hk, bs, D, generator=gen, device=dev, dtype=torch.float16)
                       for _ in range(a.layers)] for _ in range(sets)]
                vc = [[torch.randn(pages, Hk, bs, D, generator=gen, device=dev, dtype=torch.float16)
                       for _ in range(a.layers)] for _ in range(sets)]
                q = [[torch.randn(B * T, H, D, generator=gen, device=dev, dtype=torch.float16)
                      for _ in range(a.layers)] for _ in range(sets)]
                table = torch.randperm(pages, device=dev).to(torch.int32).view(B, n)
                kv_indptr = torch.arange(B + 1, device=dev, dtype=torch.int32) * n
                last = torch.full((B,), S - (n - 1) * bs, dtype=torch.int32, device=dev)
                ws = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
                if T == 1:
                    w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "HND", use_tensor_cores=True)
                    w.plan(kv_indptr, table.flatten(), last, H, Hk, D, bs, q_data_type=torch.float16,
                           kv_data_type=torch.float16)
                    row["mask"] = "decode (T=1), tensor-core decode"
                else:
                    w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "HND")
                    qo_indptr = torch.arange(B + 1, device=dev, dtype=torch.int32) * T
                    w.plan(qo_indptr, kv_indptr, table.flatten(), last, H, Hk, D, bs, causal=True,
                           q_data_type=torch.float16, kv_data_type=torch.float16)
                    row["mask"] = "paged prefill, causal (bottom-right aligned)"

                def call(s_, l_):
                    return w.run(q[s_][l_], (kc[s_][l_], vc[s_][l_]))

                tc = time.monotonic()
                out0 = call(0, 0)
                ctx.sync()
                row["note"] = f"first call {time.monotonic() - tc:.1f} s"

                pos = torch.arange(S, device=dev)
                pg, off = table[:, pos // bs].long(), pos % bs  # [B, S]
                kl = kc[0][0][pg, :, off].permute(0, 2, 1, 3)  # [B, Hk, S, D]
                vl = vc[0][0][pg, :, off].permute(0, 2, 1, 3)
                ref = reference(q[0][0].view(B, T, H, D).permute(0, 2, 1, 3), kl, vl, L)
                kl = vl = None

                def check(out):  # flashinfer's output is [B*T, H, D]
                    return rel_err(out.reshape(B, T, H, D).permute(0, 2, 1, 3), ref)

                calls = [[(lambda s_=s_, l_=l_: call(s_, l_)) for l_ in range(a.layers)] for s_ in range(sets)]
                timed_row(ctx, row, calls, check, out0, t0)
                kc = vc = q = w = ws = None
            except Exception as e:  # noqa: BLE001
                row["status"], row["note"] = "error", short(e)
                if a.verbose:
                    traceback.print_exc()
                finish_row(ctx, row, t0)
            if not ctx.cpu:
                torch.cuda.empty_cache()


# --- the check can fail ------------------------------------------------------------------------------------
def self_check(ctx):
    """CPU smoke only: a deliberately wrong mask must fail the reference check (the check has teeth)."""
    a = ctx.args
    B, H, Hk, D, L, T = 2, a.heads, a.kv_heads, a.head_size, 40, 3
    g = torch.Generator().manual_seed(a.seed + 99)
    q = torch.randn(B, H, T, D, generator=g, dtype=torch.float16)
    k = torch.randn(B, Hk, L + T, D, generator=g, dtype=torch.float16)
    v = torch.randn(B, Hk, L + T, D, generator=g, dtype=torch.float16)
    ref = reference(q, k, v, L)
    good = rel_err(F.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=True,
                                                  attn_mask=mask_for("sdpa-cudnn", T, L + T, q.device)[0].float()),
                   ref)
    upper_left = rel_err(F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True), ref)
    off_by_one = rel_err(reference(q, k, v, L - 1), ref)
    ok = good <= a.tol < upper_left and a.tol < off_by_one
    log(f"self-check: right mask rel err {good:.1e} (<= {a.tol:g}); upper-left causal {upper_left:.1e}, "
        f"window one short {off_by_one:.1e} (both must exceed {a.tol:g}): {'ok' if ok else 'FAILED'}")
    return ok


# --- main --------------------------------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", help="write the rows here (rewritten after every row)")
    p.add_argument("--pagedattn-json", nargs="+", action="extend", metavar="FILE",
                   help="output(s) of `pagedattn bench --json`: their rows join the table")
    p.add_argument("--quick", action="store_true", help="seed contexts up to 32k only")
    p.add_argument("--max-seconds", type=float, default=100.0,
                   help="time budget from process start (import included); rows that would not fit are skipped")
    p.add_argument("--cpu-smoke", action="store_true", help="tiny sizes on CPU, no graphs: checks the logic")
    p.add_argument("--smoke-compile", action="store_true", help="with --cpu-smoke: torch.compile flex too (slow)")
    p.add_argument("--systems", default=",".join(SYSTEMS), help="comma list of " + ",".join(SYSTEMS))
    p.add_argument("--scenario", default="all", choices=["seed", "batch", "all"])
    p.add_argument("--contexts", help="seed contexts, comma list (default 8192,32768,131072)")
    p.add_argument("--tokens", help="seed T values (default 1,2,3,4,8)")
    p.add_argument("--batch-seqs", type=int, default=32)
    p.add_argument("--batch-context", type=int, default=8192)
    p.add_argument("--batch-tokens", default="1,4")
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--head-size", type=int, default=256)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--repeats", type=int, default=50)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--tol", type=float, default=1e-2, help="max relative L2 error vs the float64 reference")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--no-kernel-names", action="store_true", help="skip the profiler pass that names the kernels")
    p.add_argument("--verbose", action="store_true")
    a = p.parse_args(argv)
    if a.cpu_smoke:  # small everything; same code paths
        a.heads, a.kv_heads, a.head_size, a.layers, a.block_size = 8, 2, 64, 2, 16
        a.contexts = a.contexts or "64,200"
        a.tokens = a.tokens or "1,3"
        a.batch_seqs, a.batch_context, a.batch_tokens = 3, 100, "1,2"
        a.repeats = min(a.repeats, 5)
    a.contexts = parse_ints(a.contexts or "8192,32768,131072")
    if a.quick:
        a.contexts = [L for L in a.contexts if L <= 32768] or a.contexts[:1]
    a.tokens = parse_ints(a.tokens or "1,2,3,4,8")
    a.batch_tokens = parse_ints(a.batch_tokens)
    a.systems = [s.strip() for s in a.systems.split(",") if s.strip()]
    bad = [s for s in a.systems if s not in SYSTEMS]
    if bad:
        p.error(f"--systems: unknown {bad}; known: {SYSTEMS}")
    if a.heads % a.kv_heads:
        p.error("--heads must be a multiple of --kv-heads")
    if a.repeats < 1:
        p.error("--repeats must be >= 1")
    return a


def main(argv=None):
    a = parse_args(argv)
    ctx = Ctx(a)
    ctx.meta["date"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if not ctx.cpu:
        if not torch.cuda.is_available():
            log("run_peers: no CUDA device visible (use --cpu-smoke on a machine without a GPU)")
            return 2
        prop = torch.cuda.get_device_properties(0)
        ctx.meta["device"] = prop.name
        ctx.l2_bytes = int(getattr(prop, "L2_cache_size", 0) or 0)
    else:
        ctx.meta["device"] = "cpu (smoke)"
    torch.manual_seed(a.seed)
    if "flex-paged" in a.systems and not ctx.cpu:
        # start Inductor's compile workers now, while SDPA runs: the first FlexAttention compile is the slow one
        try:
            from torch._inductor.async_compile import AsyncCompile
            AsyncCompile.warm_pool()
            ctx.meta["inductor_pool"] = "warmed at start"
        except Exception as e:  # noqa: BLE001 - only an optimisation
            ctx.meta["inductor_pool"] = "not warmed: " + short(e, 120)
    ctx.ceiling_gbs = measure_ceiling(ctx)
    log(f"run_peers: device={ctx.meta['device']} torch={torch.__version__} import {T_IMPORT:.1f} s, "
        f"L2 {ctx.l2_bytes / 1e6:.1f} MB, budget {a.max_seconds:g} s")
    log(f"model: H={a.heads} Hk={a.kv_heads} D={a.head_size}, {a.layers} layers, block {a.block_size}, f16; "
        f"median of {a.repeats} replays")
    log(f"read ceiling: {ctx.ceiling_gbs:.1f} GB/s ({ctx.meta['ceiling_method']})")
    if a.pagedattn_json:
        try:
            prow, infos = pagedattn_rows_many(a.pagedattn_json, ctx.ceiling_gbs)
            ctx.meta["pagedattn"] = infos
            for i in infos:
                if i.get("error"):
                    log(f"pagedattn: could not read {i['path']}: {i['error']}")
                else:
                    log(f"pagedattn: rows from {i['path']} (commit {i.get('commit')}, its ceiling "
                        f"{(i.get('ceiling_gbs') or 0):.1f} GB/s)")
        except Exception as e:  # noqa: BLE001
            prow = []
            ctx.meta["pagedattn"] = [{"path": ",".join(a.pagedattn_json), "error": short(e)}]
            log(f"pagedattn: could not read {a.pagedattn_json}: {short(e)}")
    else:
        prow = []
    print_header()
    for r in prow:
        ctx.rows.append(r)
        print_row(r)

    scen = []
    if a.scenario in ("seed", "all"):
        scen.append(("seed", 1, a.contexts, a.tokens))
    if a.scenario in ("batch", "all"):
        scen.append(("batch", a.batch_seqs, [a.batch_context], a.batch_tokens))

    sdpa = [s for s in a.systems if s.startswith("sdpa-")]
    if sdpa:
        for name, B, Ls, Ts in scen:
            for L in Ls:
                run_sdpa(ctx, name, B, L, Ts, sdpa)
    if "flex-paged" in a.systems:
        run_flex(ctx, scen)
    if "flashinfer" in a.systems:
        why = flashinfer_status()
        for name, B, Ls, Ts in scen:
            if why:
                for L in Ls:
                    skip_rows(ctx, "flashinfer", name, B, L, Ts, "not run", why)
            else:
                run_flashinfer(ctx, name, B, Ls, Ts)

    rc = 0
    if ctx.cpu and not self_check(ctx):
        rc = 1
    write_json(ctx)
    bad = [r for r in ctx.rows if r["status"] not in ("ok",)]
    log(f"\n{len(ctx.rows)} rows, {len(bad)} not ok; {ctx.elapsed():.1f} s in all (torch import {T_IMPORT:.1f} s)")
    if a.json:
        log(f"wrote {a.json}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
