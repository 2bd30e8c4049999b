#!/usr/bin/env python3
"""Times pagedattn's peers on the seed and batch scenarios (DESIGN.md section 6), one GPU run.

Peers (each a "system" in the rows):
  sdpa-flash   torch SDPA, flash backend, contiguous KV [B, Hk, L+T, D]; T>1: lower-right causal (CausalBias)
  sdpa-cudnn   torch SDPA, cuDNN backend, same KV; T>1: lower-right causal as an additive f16 mask
               (CausalBias would route to the flash kernel whatever sdpa_kernel says: see mask_for)
  flex-paged   FlexAttention (torch.compile) over a paged KV pool [1, Hk, pages*bs, D], shuffled block table,
               a mask_mod that maps physical slots to logical positions (causal past + t + 1), enable_gqa
  flashinfer   FlashInfer paged decode (T=1, tensor cores) / paged prefill (T>1, causal, backend fa2 unless
               --flashinfer-prefill-backend), HND pages; if `import flashinfer` fails, the wheels of <repo>/.wheels
               (bench/peers/fetch_flashinfer.sh) are installed into /tmp first (with prebuilt modules), and its JIT
               compile runs in child processes bounded by --flashinfer-compile-seconds
  flashinfer-tcdecode  T>1 only: FlashInfer's tensor-core decode with q_len_per_req=T (same FA2 module, the plan
               sized for exactly T rows per sequence); --flashinfer-multitoken picks prefill, this, or both
pagedattn's own rows come from `pagedattn bench --json` (--pagedattn-json), merged into the same table.

Every timed row: the layers' calls captured in one CUDA graph per layer set (eager with events if capture
fails, said in the row), median of --repeats replays, layer sets rotated so that one replay's KV exceeds
3x L2; the output of layer 0 checked against a float64 reference (relative L2 error <= --tol), a peer that
disagrees is marked "mismatch". Bytes per row: KV (L+T)*Hk*D*2*2 + Q + O, per sequence and layer.
The read ceiling is measured here: torch sum over a 2 GiB tensor, median of 20.

  python3 bench/peers/run_peers.py --json OUT.json [--pagedattn-json bench.json] [--quick] [--max-seconds S]
  python3 bench/peers/run_peers.py --json OUT.json --only flashinfer --merge-json EARLIER.json --max-seconds 540
  python3 bench/peers/run_peers.py --cpu-smoke        # tiny sizes on CPU: exercises the logic, no graphs
"""
import argparse
import glob
import importlib
import io
import json
import math
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import time
import traceback
import zipfile

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
    log(f"{'system':<19} {'scen':<5} {'seqs':>4} {'L':>7} {'T':>2} {'us/layers':>10} {'GB/s':>7} {'%ceil':>6}"
        f" {'rel_err':>8}  status / timing / note")


def print_row(r):
    us = f"{r['us']:10.1f}" if r["us"] else f"{'-':>10}"
    gbs = f"{r['gbs']:7.0f}" if r["gbs"] else f"{'-':>7}"
    pct = f"{r['pct_ceiling']:6.1f}" if r["pct_ceiling"] else f"{'-':>6}"
    err = f"{r['rel_err']:8.1e}" if r["rel_err"] is not None else f"{'-':>8}"
    extra = " ".join(x for x in [r["timing"] if r["status"] in ("ok", "mismatch") else "", r["note"]] if x)
    log(f"{r['system']:<19} {r['scenario']:<5} {r['seqs']:>4} {r['context']:>7} {r['T']:>2} {us} {gbs} {pct} {err}"
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
                      "flashinfer_compile_seconds": a.flashinfer_compile_seconds,
                      "flashinfer_backend": a.flashinfer_backend,
                      "flashinfer_prefill_backend": a.flashinfer_prefill_backend,
                      "flashinfer_multitoken": a.flashinfer_multitoken,
                      "timing": "median of CUDA graph replays (one graph per layer set, events around each replay)"},
           "bytes_formula": {"kv": "(L+T)*Hk*D*2*sizeof(f16)", "q": "T*H*D*2", "o": "T*H*D*2",
                             "scope": "summed over sequences and layers",
                             "pagedattn rows": "pagedattn's own bytes (adds the new K/V rows; u8 adds scales)"},
           "command": " ".join(sys.argv), "pagedattn": ctx.meta.get("pagedattn"),
           "flex": ctx.meta.get("flex"), "flex_compile_s": ctx.meta.get("flex_compile_s"),
           "inductor_pool": ctx.meta.get("inductor_pool"), "flashinfer": ctx.meta.get("flashinfer"),
           "merged": ctx.meta.get("merged"), "rows": ctx.rows}
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


# --- FlashInfer (imported, or installed from the carried wheels) ------------------------------------------------
# The GPU machine has no network and no flashinfer. bench/peers/fetch_flashinfer.sh puts flashinfer-python and
# the dependency wheels it lacks into <repo>/.wheels; they are installed from there into --flashinfer-target.
# FlashInfer compiles its kernels with nvcc at first use: that happens in child processes (one per module kind,
# in parallel), bounded by --flashinfer-compile-seconds, so that a slow or failing compile gives `not run` rows
# with the reason instead of eating the run. The JIT cache lives under /tmp and is reused by the timed calls.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FI_MARK = "FLASHINFER_WARMUP "


FI_TC = "flashinfer-tcdecode"


def fi_jobs(a, T):
    """(system, kind) of the FlashInfer rows for T new tokens. Kinds: decode (T=1: tensor-core decode), prefill
    (T>1: BatchPrefillWithPagedKVCacheWrapper, causal), tcdecode (T>1: tensor-core decode with q_len_per_req=T,
    causal within the request; FlashInfer >= 0.6.18 has it)."""
    if T == 1:
        return [("flashinfer", "decode")]
    jobs = []
    if a.flashinfer_multitoken in ("prefill", "both"):
        jobs.append(("flashinfer", "prefill"))
    if a.flashinfer_multitoken in ("decode", "both"):
        jobs.append((FI_TC, "tcdecode"))
    return jobs


def fi_module_key(a, kind):
    """Which JIT module a kind loads, as far as known before planning: the decode wrapper with tensor cores
    resolves `auto` to fa2 for f16; the prefill wrapper's `auto` is FA3 on Hopper. Kinds with the same key share
    one module and so one warm-up child."""
    if kind in ("decode", "tcdecode"):
        return "fa2" if a.flashinfer_backend in ("auto", "fa2") else a.flashinfer_backend
    return "prefill-" + a.flashinfer_prefill_backend if a.flashinfer_prefill_backend == "auto" else \
        a.flashinfer_prefill_backend


def fi_env(a, arch=None):
    """FlashInfer's environment: JIT cache and cubin dir under /tmp, one target arch, no downloads. Values
    already set by the caller win. Must run before `import flashinfer` (it reads them at import)."""
    base = a.flashinfer_target + "-jit"
    os.environ.setdefault("FLASHINFER_WORKSPACE_BASE", base)  # cache: $base/.cache/flashinfer/<ver>/<arch>
    os.environ.setdefault("FLASHINFER_CUBIN_DIR", os.path.join(base, "cubins"))
    os.environ.setdefault("FLASHINFER_NO_DOWNLOAD", "1")  # no network there: fail at once, not after a timeout
    if arch:
        os.environ.setdefault("FLASHINFER_CUDA_ARCH_LIST", arch)
        os.environ.setdefault("TORCH_CUDA_ARCH_LIST", arch)
    return os.environ["FLASHINFER_WORKSPACE_BASE"]


def fi_use_target(a):
    """Puts --flashinfer-target first on sys.path, and its ninja on PATH if there is none."""
    if a.flashinfer_target not in sys.path:
        sys.path.insert(0, a.flashinfer_target)
    importlib.invalidate_caches()
    if not shutil.which("ninja"):  # FlashInfer runs `ninja`; the ninja wheel carries one
        for nb in fi_ninja_dirs(a.flashinfer_target):
            os.environ["PATH"] = nb + os.pathsep + os.environ.get("PATH", "")
            break


def fi_ninja_dirs(target):
    """Directories under target holding the ninja wheel's binary: bin/ (pip --target), or where unzip put it."""
    dirs = [os.path.join(target, "bin")] + glob.glob(os.path.join(target, "ninja-*.data", "scripts"))
    return [d for d in dirs if os.path.isfile(os.path.join(d, "ninja"))]


def fi_arch():
    """nvcc target for this device: 9.0a on Hopper (FlashInfer's FA3 kernels need the `a` features)."""
    major, minor = torch.cuda.get_device_capability(0)
    return f"{major}.{minor}a" if major >= 9 else f"{major}.{minor}"


def fi_aot_name(version, arch):
    return f"flashinfer-aot-{version}-sm{arch.replace('.', '')}.tar.gz"


def fi_install(a):
    """Installs the wheels of --flashinfer-wheels into --flashinfer-target (pip, else unzip), and unpacks a
    prebuilt module archive of the same FlashInfer version (fetch_flashinfer.sh with PREBUILD=1) into its
    data/aot, where FlashInfer looks before compiling. Returns (description, None) or (None, why not)."""
    wheels = sorted(glob.glob(os.path.join(a.flashinfer_wheels, "*.whl")))
    fiw = [w for w in wheels if os.path.basename(w).startswith("flashinfer_python-")]
    if not fiw:
        return None, (f"no flashinfer_python wheel in {a.flashinfer_wheels} (bench/peers/fetch_flashinfer.sh "
                      "fetches it)")
    version = os.path.basename(fiw[-1]).split("-")[1]
    aots = sorted(glob.glob(os.path.join(a.flashinfer_wheels, fi_aot_name(version, "*"))))
    names = "\n".join(f"{os.path.basename(w)} {os.path.getsize(w)}" for w in wheels + aots)  # a new archive: redo
    stamp = os.path.join(a.flashinfer_target, ".pagedattn-wheels")
    try:
        with open(stamp) as f:
            if f.read() == names:
                return (f"already installed in {a.flashinfer_target} from the same files ({len(wheels)} wheels, "
                        f"{len(aots)} prebuilt module archive{'' if len(aots) == 1 else 's'})"), None
    except OSError:
        pass
    t0 = time.monotonic()
    shutil.rmtree(a.flashinfer_target, ignore_errors=True)
    cmd = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--disable-pip-version-check",
           "--no-compile", "--find-links", a.flashinfer_wheels, "--target", a.flashinfer_target] + wheels
    how = "pip install --no-index --no-deps --target"
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
        pip_err = None if p.returncode == 0 else f"pip exited with {p.returncode}: " + \
            " ".join((p.stderr or p.stdout).strip().splitlines()[-3:])
    except Exception as e:  # noqa: BLE001 - no pip, or it hung: unzip below
        pip_err = "pip: " + short(e, 200)
    if pip_err:
        log(f"flashinfer: {pip_err[:300]}; unpacking the wheels instead")
        shutil.rmtree(a.flashinfer_target, ignore_errors=True)
        how = f"unzip ({pip_err[:120]})"
        try:
            for w in wheels:
                with zipfile.ZipFile(w) as z:
                    z.extractall(a.flashinfer_target)
            for nb in fi_ninja_dirs(a.flashinfer_target):
                os.chmod(os.path.join(nb, "ninja"), 0o755)  # zipfile drops the mode bits
        except Exception as e:  # noqa: BLE001
            return None, f"installing the wheels failed: {pip_err}; unzip: {short(e, 150)}"
    how = f"{how} {a.flashinfer_target}: {len(wheels)} wheels"
    for t in aots:
        try:
            with tarfile.open(t) as tf:
                dest = os.path.join(a.flashinfer_target, "flashinfer", "data", "aot")
                tf.extractall(dest, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
            how += f", prebuilt modules of {os.path.basename(t)}"
        except Exception as e:  # noqa: BLE001 - FlashInfer compiles them then
            how += f", could not unpack {os.path.basename(t)}: {short(e, 120)}"
    with open(stamp, "w") as f:
        f.write(names)
    return f"{how} in {time.monotonic() - t0:.1f} s", None


def fi_requested_modules(fi, a, kinds):
    """Dry run, no GPU needed: makes and plans each kind's wrapper through fi_plan (the same call the timed rows
    make; tiny problem, CPU tensors) up to where FlashInfer asks for its JIT module, and records that request.
    kinds: [(kind, prefill backend)]. Returns [(kind, backend, args)], args as passed to
    flashinfer.prefill.get_batch_prefill_module(backend, *args) (dtypes, head dims, pos-encoding, sliding window,
    logits cap, fp16 qk reduction), which builds gen_batch_prefill_module(backend, *args)."""
    import flashinfer.decode as fd
    import flashinfer.prefill as fp

    class Asked(Exception):
        pass

    asked = []

    def ask(backend, *args):
        asked.append((backend, args))
        raise Asked()

    saved = (fp.get_batch_prefill_module, fd.get_batch_prefill_module, torch.empty)

    def empty(*x, **k):  # the wrappers pin a host buffer, which needs a driver
        k.pop("pin_memory", None)
        return saved[2](*x, **k)

    out = []
    try:
        fp.get_batch_prefill_module = fd.get_batch_prefill_module = ask
        torch.empty = empty
        for kind, pb in kinds:
            b = argparse.Namespace(**dict(vars(a), flashinfer_prefill_backend=pb or a.flashinfer_prefill_backend))
            T = 1 if kind == "decode" else 2
            S = 2 * b.block_size + T
            n = -(-S // b.block_size)
            table = torch.arange(n, dtype=torch.int32).view(1, n)
            before = len(asked)
            try:
                fi_plan(fi, b, torch.device("cpu"), 1, S, T, table, kind, ws_bytes=1 << 20)
            except Asked:
                pass
            if len(asked) == before:
                raise RuntimeError(f"the {kind} wrapper did not ask for a batch prefill module")
            out.append((kind,) + asked[-1])
    finally:
        fp.get_batch_prefill_module, fd.get_batch_prefill_module, torch.empty = saved
    return out


def fi_install_import(a, tag):
    """fi_install, then import flashinfer from --flashinfer-target (the no-GPU tools). Returns the module or None."""
    how, why = fi_install(a)
    log(f"{tag}: {why or how}")
    if why:
        return None
    fi_use_target(a)
    return importlib.import_module("flashinfer")


def fi_prebuild_kinds(a):
    """The kinds (and prefill backends) whose modules --flashinfer-prebuild packs."""
    pbs = [x.strip() for x in a.flashinfer_prebuild_backends.split(",") if x.strip()]
    return [("decode", None), ("tcdecode", None)] + [("prefill", pb) for pb in pbs]


def fi_prebuild(a):
    """--flashinfer-prebuild (fetch_flashinfer.sh with PREBUILD=1; no GPU needed, nvcc of the GPU machine's CUDA
    major version): compiles the modules that the timed calls load, for --flashinfer-arch, and packs them into
    <wheels>/flashinfer-aot-<version>-sm<arch>.tar.gz. Which modules: the ones the wrappers ask for, found by a
    dry run of fi_plan (fi_requested_modules) for tensor-core decode (T=1 and q_len_per_req>1) and paged prefill
    with each of --flashinfer-prebuild-backends (fa2: the default; fa3: what backend auto picks on Hopper). With
    f16 and D=256 that is two modules: the FA2 one (decode, tcdecode and fa2 prefill share it; it holds the
    paged and ragged kernels for every mask mode) and the FA3 one. On the GPU machine fi_install unpacks the
    archive into flashinfer/data/aot: FlashInfer loads a module from there without compiling, and compiles it
    as usual if it does not load."""
    os.environ["FLASHINFER_CUDA_ARCH_LIST"] = os.environ["TORCH_CUDA_ARCH_LIST"] = a.flashinfer_arch
    base = fi_env(a)
    fi = fi_install_import(a, "prebuild")
    if fi is None:
        return 1
    from flashinfer.jit.attention import gen_batch_prefill_module, get_batch_prefill_uri
    nvcc = subprocess.run([os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc"),
                           "--version"], capture_output=True, text=True, check=False).stdout.strip().splitlines()
    info = {"flashinfer": fi.__version__, "arch": a.flashinfer_arch, "nvcc": nvcc[-2] if len(nvcc) > 1 else "?",
            "config": {"heads": a.heads, "kv_heads": a.kv_heads, "head_size": a.head_size,
                       "block_size": a.block_size}, "modules": {}}
    mods = {}
    for kind, backend, args in fi_requested_modules(fi, a, fi_prebuild_kinds(a)):
        uri = get_batch_prefill_uri(backend, *args)
        m = mods.setdefault(uri, {"backend": backend, "args": args, "kinds": []})
        m["kinds"].append(kind if kind != "prefill" else f"prefill ({backend})")
        log(f"prebuild: {kind} asks for {backend} {uri}")
    out = os.path.join(a.flashinfer_wheels, fi_aot_name(fi.__version__, a.flashinfer_arch))
    with tarfile.open(out + ".tmp", "w:gz") as tf:
        for uri, m in mods.items():
            t0 = time.monotonic()
            spec = gen_batch_prefill_module(m["backend"], *m["args"])  # what get_batch_prefill_module builds
            assert spec.name == uri, (spec.name, uri)
            spec.build(verbose=a.verbose)
            so = spec.jit_library_path
            tf.add(so, arcname=f"{spec.name}/{spec.name}.so")
            info["modules"][spec.name] = {"kinds": m["kinds"], "backend": m["backend"],
                                          "args": [str(x) for x in m["args"]],
                                          "compile_s": round(time.monotonic() - t0, 1)}
            log(f"prebuild: {', '.join(m['kinds'])}: {spec.name}: {time.monotonic() - t0:.1f} s, "
                f"{os.path.getsize(so) / 1e6:.1f} MB")
        data = json.dumps(info, indent=1).encode()
        ti = tarfile.TarInfo("pagedattn-aot.json")
        ti.size = len(data)
        tf.addfile(ti, io.BytesIO(data))
    os.replace(out + ".tmp", out)
    log(f"prebuild: wrote {out} ({os.path.getsize(out) / 1e6:.1f} MB; {info['nvcc']}; JIT workspace {base})")
    return 0


def fi_check_aot(a):
    """--flashinfer-check-aot (no GPU needed): installs the wheels and the prebuilt archive into a fresh
    --flashinfer-target, sets FLASHINFER_DISABLE_JIT=1 and a fresh JIT workspace, asks the wrappers (dry run) for
    their modules (the kinds and prefill backends --flashinfer-prebuild packs) and loads each through FlashInfer's
    own build_and_load: every one must come from data/aot without compiling. Exit 0 when all load."""
    shutil.rmtree(a.flashinfer_target, ignore_errors=True)
    shutil.rmtree(a.flashinfer_target + "-jit", ignore_errors=True)
    os.environ["FLASHINFER_DISABLE_JIT"] = "1"
    fi_env(a, a.flashinfer_arch)
    fi = fi_install_import(a, "check-aot")
    if fi is None:
        return 1
    from flashinfer.jit.attention import gen_batch_prefill_module
    bad = 0
    for kind, backend, args in fi_requested_modules(fi, a, fi_prebuild_kinds(a)):  # what the prebuild packs
        spec = gen_batch_prefill_module(backend, *args)
        try:
            mod = spec.build_and_load()
            ok = spec.is_aot and hasattr(mod, "paged_run") and hasattr(mod, "plan")
            log(f"check-aot: {kind} ({backend}) {'loaded from ' + str(spec.aot_path) if ok else 'NOT from data/aot'}")
            bad += not ok
        except Exception as e:  # noqa: BLE001
            log(f"check-aot: {kind} ({backend}) {spec.name} did not load: {short(e, 400)}")
            bad += 1
    log(f"check-aot: {'ok' if not bad else f'{bad} FAILED'}")
    return 1 if bad else 0


def fi_import(ctx, arch=None):
    """Imports flashinfer, installing the carried wheels first if it is missing. Returns (module, None) or
    (None, why not). Records how in ctx.meta['flashinfer']."""
    a = ctx.args
    meta = ctx.meta.setdefault("flashinfer", {})
    fi_env(a, arch)
    first = None
    try:
        fi = importlib.import_module("flashinfer")
        meta["install"] = "already importable (" + os.path.dirname(fi.__file__) + ")"
    except ModuleNotFoundError as e:
        first = short(e, 120)
    except Exception as e:  # noqa: BLE001
        return None, "import flashinfer failed: " + short(e)
    if first:
        how, why = fi_install(a)
        if why:
            return None, f"not installed ({first}); {why}"
        meta["install"], meta["target"] = how, a.flashinfer_target
        for m in [m for m in sys.modules if m == "flashinfer" or m.startswith("flashinfer.")]:
            del sys.modules[m]  # a half-done import of an installed flashinfer missing a dependency
        fi_use_target(a)
        try:
            fi = importlib.import_module("flashinfer")
        except Exception as e:  # noqa: BLE001
            return None, f"import flashinfer failed after installing the wheels ({how}): {short(e)}"
    meta["version"] = getattr(fi, "__version__", "?")
    meta["env"] = {k: os.environ.get(k) for k in ("FLASHINFER_WORKSPACE_BASE", "FLASHINFER_CUDA_ARCH_LIST",
                                                  "TORCH_CUDA_ARCH_LIST", "FLASHINFER_NO_DOWNLOAD")}
    return fi, None


def fi_build_errors(text):
    """The compiler's error lines in ninja's output (not the command lines), paths cut to file names."""
    return [re.sub(r"(?:/[^/\s:()]+)+/([^/\s:()]+)", r"\1", ln.strip()) for ln in text.splitlines()
            if re.search(r"\berror\b\s*[:#]|fatal error", ln, re.IGNORECASE) and "Ninja build failed" not in ln
            and not ln.lstrip().startswith(("[", "Traceback", "File "))]


def fi_one_line(text, n=300):
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def fi_error(e):
    """An exception as a row note (at most 300 characters): FlashInfer's 'Ninja build failed' text starts with
    the compile commands, so the compiler's error lines are picked out."""
    text = f"{type(e).__name__}: {e}"
    errs = fi_build_errors(text) if "Ninja build failed" in text else []
    return fi_one_line("Ninja build failed: " + " | ".join(errs[:4]) if errs else text)


def fi_plan(fi, a, dev, B, S, T, table, kind, ws_bytes=256 << 20):
    """A planned FlashInfer wrapper for B sequences of S = L + T tokens in HND pages of --block-size
    (table [B, n] int32), T new tokens each (fi_jobs' kinds):
      decode    T=1, BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores=True), backend --flashinfer-backend
      tcdecode  T>1, the same with plan(q_len_per_req=T): causal within the request, bottom-right aligned
      prefill   T>1, BatchPrefillWithPagedKVCacheWrapper, causal=True (bottom-right aligned: FlashInfer aligns
                the query rows to the end of the KV), backend --flashinfer-prefill-backend
    The wrappers are made with use_cuda_graph=True (fixed index buffers), so their run() can be captured.
    Returns (wrapper, its workspace, description, the backend that the plan resolved)."""
    H, Hk, D, bs = a.heads, a.kv_heads, a.head_size, a.block_size
    n = table.shape[1]
    ws = torch.zeros(ws_bytes, dtype=torch.uint8, device=dev)  # must be zero at first use
    kv_indptr = torch.arange(B + 1, device=dev, dtype=torch.int32) * n
    indices = table.flatten().contiguous()
    last = torch.full((B,), S - (n - 1) * bs, dtype=torch.int32, device=dev)
    bufs = [torch.empty_like(kv_indptr), torch.empty_like(indices), torch.empty_like(last)]
    if kind in ("decode", "tcdecode"):
        w = fi.BatchDecodeWithPagedKVCacheWrapper(
            ws, "HND", use_cuda_graph=True, use_tensor_cores=True, paged_kv_indptr_buffer=bufs[0],
            paged_kv_indices_buffer=bufs[1], paged_kv_last_page_len_buffer=bufs[2], backend=a.flashinfer_backend)
        w.plan(kv_indptr, indices, last, H, Hk, D, bs, q_data_type=torch.float16, kv_data_type=torch.float16,
               **({"q_len_per_req": T} if T > 1 else {}))
        what = "decode (T=1), tensor-core decode" if T == 1 else \
            f"tensor-core decode, q_len_per_req={T}, causal (bottom-right aligned)"
    else:
        qo_indptr = torch.arange(B + 1, device=dev, dtype=torch.int32) * T
        w = fi.BatchPrefillWithPagedKVCacheWrapper(
            ws, "HND", use_cuda_graph=True, qo_indptr_buf=torch.empty_like(qo_indptr), paged_kv_indptr_buf=bufs[0],
            paged_kv_indices_buf=bufs[1], paged_kv_last_page_len_buf=bufs[2], backend=a.flashinfer_prefill_backend)
        w.plan(qo_indptr, kv_indptr, indices, last, H, Hk, D, bs, causal=True, q_data_type=torch.float16,
               kv_data_type=torch.float16)
        what = "paged prefill, causal (bottom-right aligned)"
    ran = str(getattr(w, "_backend", "?"))
    return w, ws, f"{what}; backend {ran}", ran


def fi_warmup_child(a):
    """--flashinfer-warmup KIND[,KIND] (a child process): per kind, one call of a tiny problem with the run's dtype,
    heads and head size, which builds (JIT-compiles) or loads the module that the timed calls of that kind load.
    After each kind, and at the end, it prints FI_MARK + JSON {ok, s, kinds: {kind: {ok, s, what, backend | error}}}
    (the parent reads the last one)."""
    t0 = time.monotonic()
    res = {"ok": False, "kinds": {}}
    try:
        fi_env(a)
        if not a.flashinfer_no_target:
            fi_use_target(a)
        import flashinfer as fi
        res["version"] = getattr(fi, "__version__", "?")
        dev = torch.device("cuda")
        for kind in a.flashinfer_warmup.split(","):
            t1 = time.monotonic()
            r = res["kinds"][kind] = {"ok": False}
            try:
                T = 1 if kind == "decode" else 2
                B, bs = 1, a.block_size
                S = 2 * bs + T
                n = -(-S // bs)
                table = torch.arange(n, dtype=torch.int32, device=dev).view(B, n)
                w, _, r["what"], r["backend"] = fi_plan(fi, a, dev, B, S, T, table, kind)
                kc = torch.randn(n, a.kv_heads, bs, a.head_size, device=dev, dtype=torch.float16)
                q = torch.randn(B * T, a.heads, a.head_size, device=dev, dtype=torch.float16)
                w.run(q, (kc, kc))
                torch.cuda.synchronize()
                r["ok"] = True
            except Exception as e:  # noqa: BLE001 - reported to the parent, per kind
                traceback.print_exc()
                r["error"] = fi_error(e)
            r["s"] = round(time.monotonic() - t1, 1)
            res["s"] = round(time.monotonic() - t0, 1)
            print("\n" + FI_MARK + json.dumps(res), flush=True)  # so far: kept if a later kind is killed
        res["ok"] = all(r["ok"] for r in res["kinds"].values())
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        traceback.print_exc()
        res["error"] = fi_error(e)
    res["s"] = round(time.monotonic() - t0, 1)
    print("\n" + FI_MARK + json.dumps(res), flush=True)
    return 0 if res["ok"] else 1


def fi_compile(ctx, kinds):
    """Builds (or loads the prebuilt) FlashInfer modules for `kinds` in child processes, one per module
    (fi_module_key: kinds that share a module warm up one after the other in one child), in parallel, bounded by
    --flashinfer-compile-seconds and by the time left. Returns {kind: None (ready) or why not}."""
    a = ctx.args
    meta = ctx.meta.setdefault("flashinfer", {})
    left = ctx.left() - 10.0  # keep a little for the rows' own first calls
    limit = min(a.flashinfer_compile_seconds, left)
    if left < 10:
        why = (f"skipped: time budget --max-seconds {a.max_seconds:g} (at {ctx.elapsed():.0f} s); FlashInfer's "
               f"JIT compile needs up to --flashinfer-compile-seconds {a.flashinfer_compile_seconds:g}")
        return {k: why for k in kinds}
    base = os.environ["FLASHINFER_WORKSPACE_BASE"]
    os.makedirs(base, exist_ok=True)
    env = dict(os.environ)
    target = meta.get("target")  # None: flashinfer was importable without the carried wheels
    env["PYTHONPATH"] = os.pathsep.join(p for p in [target, env.get("PYTHONPATH")] if p)
    # ninja -j per child: all cores each. A module has 10 sources; the FA2 ones take ~15 s each, the FA3 (sm90)
    # ones 70-110 s (measured on one core of a 2-core box), so the slow child soon has the cores to itself.
    env.setdefault("MAX_JOBS", str(os.cpu_count() or 1))
    env.setdefault("FLASHINFER_JIT_VERBOSE", "1")  # ninja's progress and compiler errors go to the child's log
    meta["max_jobs"] = env["MAX_JOBS"]
    groups = {}
    for k in kinds:
        groups.setdefault(fi_module_key(a, k), []).append(k)
    procs = {}
    t0 = time.monotonic()
    for key, ks in groups.items():
        path = os.path.join(base, f"warmup-{key}.log")
        out = open(path, "w")
        cmd = [sys.executable, os.path.abspath(__file__), "--flashinfer-warmup", ",".join(ks),
               "--heads", str(a.heads), "--kv-heads", str(a.kv_heads), "--head-size", str(a.head_size),
               "--block-size", str(a.block_size), "--flashinfer-backend", a.flashinfer_backend,
               "--flashinfer-prefill-backend", a.flashinfer_prefill_backend,
               "--flashinfer-target", a.flashinfer_target] + ([] if target else ["--flashinfer-no-target"])
        procs[key] = (subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True),
                      out, path, ks)
    log(f"flashinfer: JIT compile (or prebuilt load) + first call of "
        f"{'; '.join(k + ': ' + ', '.join(ks) for k, ks in groups.items())} started (limit {limit:.0f} s, "
        f"MAX_JOBS {env['MAX_JOBS']} each, logs {base}/warmup-*.log)")
    status, took = {}, {}
    for key, (p, out, path, ks) in procs.items():
        timed_out = False
        try:
            p.wait(timeout=max(0.1, t0 + limit - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(p.pid, signal.SIGKILL)  # the child and its ninja/nvcc (its own session)
            except OSError:
                pass
            p.wait()
        out.close()
        with open(path, errors="replace") as f:
            text = f.read()
        lines = [ln for ln in text.splitlines() if ln.strip()]
        res = None
        for ln in reversed(lines):
            if ln.startswith(FI_MARK):
                res = json.loads(ln[len(FI_MARK):])
                break
        took[key] = res["s"] if res else round(time.monotonic() - t0, 1)
        if res:
            meta.setdefault("warmup_s", {}).update({k: r.get("s") for k, r in res.get("kinds", {}).items()})
        for k in ks:
            r = (res or {}).get("kinds", {}).get(k)
            if r and r.get("ok"):  # done before any time-out
                status[k] = None
                meta.setdefault("backend", {})[k] = r.get("what")
            elif timed_out:
                cut = " (cut to the time left in --max-seconds)" if limit < a.flashinfer_compile_seconds else ""
                steps = re.findall(r"^\[(\d+/\d+)\].* -c (\S+)", text, re.MULTILINE)
                where = f"ninja at step {steps[-1][0]} ({os.path.basename(steps[-1][1])})" if steps else \
                    "last output: " + (lines[-1][:120] if lines else "(none)")
                status[k] = (f"JIT compile + first call of the {k} module ({key}) not done after {limit:.0f} s "
                             f"(--flashinfer-compile-seconds {a.flashinfer_compile_seconds:g}{cut}); killed, {where}")
            elif r or res:
                status[k] = (r or res).get("error") or f"warm-up failed (exit {p.returncode})"
                errs = fi_build_errors(text) if "Ninja build failed" in status[k] else []
                if errs:  # verbose ninja: the compiler's errors are in the log, not in the exception
                    status[k] = fi_one_line("Ninja build failed: " + " | ".join(errs[:4]))
            else:
                status[k] = f"JIT warm-up process exited with {p.returncode}: " + " ".join(lines[-3:])[-250:]
        failed = [k for k in ks if status[k]]
        if failed:
            log(f"flashinfer: {key} module ({', '.join(failed)}) failed after {took[key]:.1f} s: {status[failed[0]]}")
            log("  last lines of " + path + ":\n    " + "\n    ".join(ln[:240] for ln in lines[-25:]))
        built = re.findall(r"^\[(\d+)/(\d+)\]", text, re.MULTILINE)
        meta.setdefault("compiled", {})[key] = ("killed; " if timed_out else "") + \
            ("ninja ran (" + built[-1][1] + " steps)" if built else "no ninja steps in the log" +
             ("" if timed_out else " (prebuilt module or JIT cache)"))
    wall = time.monotonic() - t0
    meta["compile_s"], meta["compile_wall_s"] = took, round(wall, 1)
    meta["compile_ok"] = {k: status[k] is None for k in kinds}
    log(f"flashinfer: JIT compile + first call took {wall:.1f} s wall ("
        + ", ".join(f"{key} {took[key]:.1f} s {meta['compiled'][key]}" for key in groups) + "; "
        + ", ".join(f"{k} {'ok' if status[k] is None else 'FAILED'}" for k in kinds) + ")")
    return status


def run_flashinfer_all(ctx, scen):
    """Every FlashInfer row: import (installing the carried wheels), JIT compile (bounded), then the rows.
    Every row that cannot run says why."""
    a = ctx.args
    kinds = sorted({k for _, _, _, Ts in scen for T in Ts for _, k in fi_jobs(a, T)})
    fi, why = fi_import(ctx, None if ctx.cpu else fi_arch())
    status = {k: why for k in kinds}
    if not why:
        log(f"flashinfer {ctx.meta['flashinfer'].get('version')}: {ctx.meta['flashinfer'].get('install')}")
        status = fi_compile(ctx, kinds)
    for name, B, Ls, Ts in scen:
        for L in Ls:
            for T in Ts:
                for system, kind in fi_jobs(a, T):
                    st = status[kind]
                    if st:
                        skip_rows(ctx, system, name, B, L, [T], "skipped" if st.startswith("skipped") else "not run",
                                  st)
                    else:
                        run_flashinfer(ctx, fi, name, B, L, T, system, kind)


def run_flashinfer(ctx, fi, scenario, B, L, T, system, kind):
    a = ctx.args
    H, Hk, D, bs = a.heads, a.kv_heads, a.head_size, a.block_size
    dev = ctx.dev
    why = over_budget(ctx, system, 0.0 if system in ctx.est else ctx.est.get("flashinfer", 30.0))
    if why:
        skip_rows(ctx, system, scenario, B, L, [T], "skipped", why)
        return
    t0 = time.monotonic()
    row = new_row(ctx, system, scenario, B, L, T)
    row["gqa"], row["kv_layout"] = "native", f"HND pages [pages, Hk, {bs}, D], shuffled table"
    row["backend"] = ""
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
        w, _, row["mask"], row["backend"] = fi_plan(fi, a, dev, B, S, T, table, kind)

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
        kc = vc = q = w = None
    except Exception as e:  # noqa: BLE001
        row["status"], row["note"] = "error", fi_error(e)
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


# --- rows of earlier runs -----------------------------------------------------------------------------------------
def merged_rows(ctx, paths):
    """Rows of earlier peers.json files (--merge-json) whose system this run does not time; a later file's row
    replaces an earlier one of the same system, scenario, sequences, context and T. gbs is absolute, so % of
    ceiling is recomputed against this run's ceiling (the earlier value stays as pct_prev_ceiling)."""
    a = ctx.args
    mine = set(a.systems) | ({FI_TC} if "flashinfer" in a.systems else set())
    rows, infos = {}, []
    for path in paths:
        try:
            with open(path) as f:
                doc = json.load(f)
        except Exception as e:  # noqa: BLE001 - one unreadable file does not stop the run
            infos.append({"path": path, "error": short(e)})
            log(f"merge: could not read {path}: {short(e)}")
            continue
        n = 0
        for r in doc.get("rows", []):
            s = r.get("system", "")
            if s in mine or (a.pagedattn_json and s.startswith("pagedattn-")):
                continue
            r = dict(r, merged_from=path, pct_prev_ceiling=r.get("pct_ceiling"))
            r["pct_ceiling"] = 100.0 * r["gbs"] / ctx.ceiling_gbs if r.get("gbs") and ctx.ceiling_gbs else None
            rows[(s, r["scenario"], r["seqs"], r["context"], r["T"])] = r
            n += 1
        infos.append({"path": path, "rows": n, **{k: doc.get(k) for k in ("device", "date", "torch", "ceiling_gbs",
                                                                           "command")}})
        log(f"merge: {n} rows from {path} ({doc.get('date')}, its ceiling {(doc.get('ceiling_gbs') or 0):.1f} GB/s)")
        for k in ("flex", "flex_compile_s", "inductor_pool", "pagedattn"):
            if ctx.meta.get(k) is None and doc.get(k) is not None and \
                    (k == "pagedattn" or "flex-paged" not in mine):
                ctx.meta[k] = doc[k]
    ctx.meta["merged"] = infos
    return list(rows.values())


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
    p.add_argument("--systems", "--only", dest="systems", default=",".join(SYSTEMS),
                   help="comma list of the systems to time, out of " + ",".join(SYSTEMS))
    p.add_argument("--merge-json", nargs="+", action="extend", metavar="FILE",
                   help="earlier outputs of this script: their rows of systems not timed in this run join the table "
                        "(a later file wins); %% of ceiling recomputed against this run's ceiling")
    p.add_argument("--flashinfer-wheels", default=os.path.join(REPO_ROOT, ".wheels"), metavar="DIR",
                   help="wheels installed when `import flashinfer` fails (bench/peers/fetch_flashinfer.sh)")
    p.add_argument("--flashinfer-target", default="/tmp/pagedattn-flashinfer", metavar="DIR",
                   help="where they are installed (pip --target); the JIT cache goes to DIR-jit")
    p.add_argument("--flashinfer-compile-seconds", type=float, default=240.0,
                   help="limit for FlashInfer's JIT compile and first call (all its modules, in parallel); past it, "
                        "or on an error, its rows are `not run` with the reason")
    p.add_argument("--flashinfer-backend", default="auto", choices=["auto", "fa2", "fa3"],
                   help="backend of FlashInfer's tensor-core decode wrapper (T=1 and flashinfer-tcdecode; auto: fa2 "
                        "for f16)")
    p.add_argument("--flashinfer-prefill-backend", default="fa2", choices=["auto", "fa2", "fa3"],
                   help="backend of FlashInfer's paged prefill wrapper, the T>1 rows of `flashinfer` (auto picks fa3 "
                        "on Hopper, 13-30x slower here than fa2 for these shapes)")
    p.add_argument("--flashinfer-multitoken", default="both", choices=["prefill", "decode", "both"],
                   help="FlashInfer's T>1 rows: paged prefill (system flashinfer), tensor-core decode with "
                        "q_len_per_req=T (system flashinfer-tcdecode; same FA2 module), or both")
    p.add_argument("--flashinfer-prebuild", action="store_true",
                   help="no GPU needed: compile FlashInfer's modules for --flashinfer-arch here and pack them into "
                        "the wheels directory (fetch_flashinfer.sh with PREBUILD=1), then exit")
    p.add_argument("--flashinfer-arch", default="9.0a", help="with --flashinfer-prebuild: the target (9.0a: H100/H200)")
    p.add_argument("--flashinfer-prebuild-backends", default="fa2,fa3", metavar="LIST",
                   help="with --flashinfer-prebuild: the paged prefill backends whose modules are packed too")
    p.add_argument("--flashinfer-check-aot", action="store_true",
                   help="no GPU needed: install the wheels and the prebuilt archive into a fresh --flashinfer-target "
                        "and check that FlashInfer loads every module the rows ask for from it, JIT disabled")
    p.add_argument("--flashinfer-warmup", help=argparse.SUPPRESS)
    p.add_argument("--flashinfer-no-target", action="store_true", help=argparse.SUPPRESS)
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
    if a.flashinfer_warmup:  # a child of fi_compile
        return fi_warmup_child(a)
    if a.flashinfer_prebuild:
        return fi_prebuild(a)
    if a.flashinfer_check_aot:
        return fi_check_aot(a)
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
    if a.merge_json:
        prow = merged_rows(ctx, a.merge_json) + prow
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
        run_flashinfer_all(ctx, scen)

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
