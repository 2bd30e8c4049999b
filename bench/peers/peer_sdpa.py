"""torch SDPA peers (flash and cuDNN backends) on contiguous KV; see run_peers.py."""
import time
import traceback

import torch
import torch.nn.functional as F

from peers_common import (bytes_terms, finish_row, layer_sets, new_row, over_budget, reference, rel_err,
                          short, skip_rows, timed_row)


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
