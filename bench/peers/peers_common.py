"""Shared pieces of bench/peers/run_peers.py: the run context and its rows, timing (CUDA graphs, the read
ceiling), the float64 reference and the budget. One module per peer beside it (sdpa.py, flex.py,
flashinfer.py) uses these."""
import json
import math
import os
import platform
import statistics
import sys
import time

T_START = time.monotonic()

import torch  # noqa: E402

T_IMPORT = time.monotonic() - T_START

SYSTEMS = ["sdpa-flash", "sdpa-cudnn", "flex-paged", "flashinfer", "flashinfer-fp8"]


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


def bytes_terms(a, B, L, T, kv_bytes=2):
    """Bytes read and written: K and V of L+T tokens (kv_bytes an element: 2 for f16, 1 for fp8), f16 Q and O."""
    H, Hk, D, n = a.heads, a.kv_heads, a.head_size, B * a.layers
    return {"kv": float(n * (L + T) * Hk * D * 2 * kv_bytes), "q": float(n * T * H * D * 2),
            "o": float(n * T * H * D * 2)}


def new_row(ctx, system, scenario, B, L, T, kv_bytes=2, tree=False):
    """A row of T new tokens: a chain, or (tree) a draft tree of T nodes (tree_mask), read as one chain of T."""
    a = ctx.args
    bt = bytes_terms(a, B, L, T, kv_bytes)
    return {"system": system, "scenario": scenario, "seqs": B, "context": L, "T": T, "tree": tree, "layers": a.layers,
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


def skip_rows(ctx, system, scenario, B, L, Ts, status, note, kv_bytes=2, tree=False):
    for T in Ts:
        r = new_row(ctx, system, scenario, B, L, T, kv_bytes, tree)
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
    extra = " ".join(x for x in ["tree" if r.get("tree") else "",
                                 r["timing"] if r["status"] in ("ok", "mismatch") else "", r["note"]] if x)
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
                      "flashinfer_multitoken": a.flashinfer_multitoken, "flashinfer_trees": a.flashinfer_trees,
                      "timing": "median of CUDA graph replays (one graph per layer set, events around each replay)"},
           "bytes_formula": {"kv": "(L+T)*Hk*D*2*sizeof(kv element) (f16: 2; flashinfer-fp8: 1)",
                             "q": "T*H*D*2", "o": "T*H*D*2",
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


def tree_mask(T, device=None):
    """The sweep's draft tree of T nodes (tools/bench.cpp binary_tree_mask): node i's parent is (i - 1) // 2
    (binary, breadth first); [T, T] bool, entry (t, u) true when node t sees node u: itself and its ancestors."""
    m = torch.zeros(T, T, dtype=torch.bool, device=device)
    for t in range(T):
        u = t
        while True:
            m[t, u] = True
            if u == 0:
                break
            u = (u - 1) // 2
    return m


def reference(q, k, v, L, tree=None):
    """float64 attention of q [B,H,T,D] over logical k, v [B,Hk,L+T,D]; token t sees positions <= L + t, or, with
    tree ([T, T] bool, tree_mask), the L past positions and the new ones u with tree[t, u]."""
    B, H, T, D = q.shape
    Hk, S = k.shape[1], k.shape[2]
    G = H // Hk
    qd = q.double().reshape(B, Hk, G * T, D)  # head h = kvh * G + g; row g * T + t
    s = torch.matmul(qd, k.double().transpose(-1, -2)) / math.sqrt(D)
    t = torch.arange(T, device=q.device).repeat(G)
    allowed = torch.arange(S, device=q.device)[None, :] <= (L + t)[:, None]
    if tree is not None:
        allowed[:, L:] = tree.to(q.device)[t]
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
    key = (row["system"], row["scenario"], row["T"], row["tree"])
    if key not in ctx.profiled:  # once per system, scenario, T and shape: the profiler costs time
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
