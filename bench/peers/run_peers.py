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
  flashinfer (tree)  --flashinfer-trees N,..: in the seed scenario also draft trees of N nodes (node i's parent
               (i - 1) // 2, as pagedattn's sweep), the paged prefill wrapper with a custom mask (fa2, same module);
               rows with "tree": true, checked against the reference with the tree's mask
  flashinfer-fp8  FlashInfer over an e4m3 KV cache (f16 queries and output, k_scale = v_scale = 1, HND pages):
               tensor-core decode (T=1) and tensor-core decode with q_len_per_req=T (T>1), FA2; on with
               flashinfer unless --no-flashinfer-fp8. Its bytes count 1 byte a KV element
pagedattn's own rows come from `pagedattn bench --json` (--pagedattn-json), merged into the same table.

Every timed row: the layers' calls captured in one CUDA graph per layer set (eager with events if capture
fails, said in the row), median of --repeats replays, layer sets rotated so that one replay's KV exceeds
3x L2; the output of layer 0 checked against a float64 reference (relative L2 error <= --tol), a peer that
disagrees is marked "mismatch". Bytes per row: KV (L+T)*Hk*D*2*2 (fp8: *2*1) + Q + O, per sequence and layer
(a tree of T nodes counts as a chain of T).
The read ceiling is measured here: torch sum over a 2 GiB tensor, median of 20.

  python3 bench/peers/run_peers.py --json OUT.json [--pagedattn-json bench.json] [--quick] [--max-seconds S]
  python3 bench/peers/run_peers.py --json OUT.json --only flashinfer --merge-json EARLIER.json --max-seconds 540
  python3 bench/peers/run_peers.py --cpu-smoke        # tiny sizes on CPU: exercises the logic, no graphs
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers_common import (Ctx, SYSTEMS, T_IMPORT, log, measure_ceiling, parse_ints, print_header, print_row,
                          reference, rel_err, short, tree_mask, write_json)  # noqa: E402
import torch  # noqa: E402  (already imported by peers_common)
import torch.nn.functional as F  # noqa: E402
from peer_sdpa import mask_for, run_sdpa  # noqa: E402
from peer_flex import run_flex  # noqa: E402
from peer_flashinfer import (FI_FP8, FI_TC, REPO_ROOT, fi_check_aot, fi_prebuild, fi_tree_mask_packed,  # noqa: E402
                             fi_warmup_child, run_flashinfer_all)
from pagedattn_rows import pagedattn_rows_many  # noqa: E402

# --- the check can fail ------------------------------------------------------------------------------------
def self_check(ctx):
    """CPU smoke only: a deliberately wrong mask must fail the reference check (the check has teeth), and the tree
    kind's packed mask, read bit by bit as FlashInfer's kernel reads it, must give the tree reference."""
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
    T = 11  # a tree deep enough that a node's ancestors are not all the earlier nodes
    q = torch.randn(1, H, T, D, generator=g, dtype=torch.float16)
    k = torch.randn(1, Hk, L + T, D, generator=g, dtype=torch.float16)
    v = torch.randn(1, Hk, L + T, D, generator=g, dtype=torch.float16)
    ref = reference(q, k, v, L, tree_mask(T))
    j = torch.arange(T * (L + T))
    bits = ((fi_tree_mask_packed(L, T).int()[j // 8] >> (j % 8)) & 1).bool().view(T, L + T)  # variants.cuh
    packed = rel_err(F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=bits, enable_gqa=True),
                     ref)
    chain = rel_err(reference(q, k, v, L), ref)
    tree_ok = packed <= a.tol < chain
    log(f"self-check: tree of {T} through FlashInfer's packed mask rel err {packed:.1e} (<= {a.tol:g}); the chain's "
        f"mask {chain:.1e} (must exceed {a.tol:g}): {'ok' if tree_ok else 'FAILED'}")
    return ok and tree_ok


# --- rows of earlier runs -----------------------------------------------------------------------------------------
def merged_rows(ctx, paths):
    """Rows of earlier peers.json files (--merge-json) whose system this run does not time; a later file's row
    replaces an earlier one of the same system, scenario, sequences, context, T and shape (chain or tree). gbs is
    absolute, so % of ceiling is recomputed against this run's ceiling (the earlier value stays as
    pct_prev_ceiling)."""
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
            rows[(s, r["scenario"], r["seqs"], r["context"], r["T"], r.get("tree", False))] = r
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
    p.add_argument("--flashinfer-trees", default="", metavar="LIST",
                   help="seed scenario: also time FlashInfer on draft trees of these node counts (binary, node i's "
                        "parent (i - 1) // 2, as `pagedattn bench --scenario sweep`): the paged prefill wrapper, fa2, "
                        "with a custom mask; rows of system flashinfer with \"tree\": true (default: none)")
    p.add_argument("--no-flashinfer-fp8", action="store_true",
                   help="leave out the " + FI_FP8 + " rows (FlashInfer over an e4m3 KV cache), which otherwise run "
                        "whenever flashinfer does")
    p.add_argument("--flashinfer-prebuild", action="store_true",
                   help="no GPU needed: compile FlashInfer's modules for --flashinfer-arch here and pack them into "
                        "the wheels directory (fetch_flashinfer.sh with PREBUILD=1), then exit")
    p.add_argument("--flashinfer-prebuild-head-sizes", metavar="LIST",
                   help="with --flashinfer-prebuild: pack the modules of these head sizes (default --head-size)")
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
    a.flashinfer_trees = parse_ints(a.flashinfer_trees)
    if any(T < 1 for T in a.flashinfer_trees):
        p.error("--flashinfer-trees: every tree needs >= 1 node")
    a.systems = [s.strip() for s in a.systems.split(",") if s.strip()]
    bad = [s for s in a.systems if s not in SYSTEMS]
    if bad:
        p.error(f"--systems: unknown {bad}; known: {SYSTEMS}")
    if "flashinfer" in a.systems and FI_FP8 not in a.systems:
        a.systems.append(FI_FP8)
    if a.no_flashinfer_fp8:
        a.systems = [s for s in a.systems if s != FI_FP8]
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
    if "flashinfer" in a.systems or FI_FP8 in a.systems:
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
