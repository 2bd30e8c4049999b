#!/usr/bin/env python3
"""Table and plots from run_peers.py's JSON (pagedattn's rows merged in).

  python3 bench/peers/plot.py --json peers.json --out-dir bench/results/<dir> [--pagedattn-json bench.json]

Writes <out-dir>/peers.md (one table per scenario, then the reasons for every row that is not a timing)
and <out-dir>/peers_<scenario>.png: time per `layers` layers vs context (log x), one line per system and
T (T in --plot-tokens), the HBM floor (KV bytes / measured read ceiling) drawn in. A scenario with a single
context (the batch one) is drawn as bars per T instead.
"""
import argparse
import json
import os
import sys

ORDER = ["pagedattn-f16", "pagedattn-u8", "pagedattn-fp8", "sdpa-flash", "sdpa-cudnn", "flex-paged", "flashinfer",
         "flashinfer-tcdecode", "flashinfer-fp8"]
COLORS = {"pagedattn-f16": "#d62728", "pagedattn-u8": "#ff7f0e", "pagedattn-fp8": "#e377c2", "sdpa-flash": "#1f77b4",
          "sdpa-cudnn": "#17becf", "flex-paged": "#2ca02c", "flashinfer": "#9467bd", "flashinfer-fp8": "#8c564b"}
STYLES = ["-", "--", ":", "-.", (0, (1, 3)), (0, (5, 1))]
MARKERS = ["o", "s", "^", "D", "v", "x"]
SCEN_TITLE = {"seed": "seed scenario: one sequence", "batch": "batch scenario"}


def load(path, pagedattn_json=None):
    with open(path) as f:
        doc = json.load(f)
    if pagedattn_json:  # replaces any pagedattn rows the JSON has
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from pagedattn_rows import pagedattn_rows_many  # noqa: E402 - the same conversion as run_peers.py
        rows, infos = pagedattn_rows_many(pagedattn_json, doc.get("ceiling_gbs"))
        doc["rows"] = rows + [r for r in doc["rows"] if not r["system"].startswith("pagedattn-")]
        doc["pagedattn"] = infos
    if isinstance(doc.get("pagedattn"), dict):
        doc["pagedattn"] = [doc["pagedattn"]]
    doc["rows"] = [r for r in doc["rows"] if not r.get("tree")]  # chains only: trees are sweep_table.py's
    return doc


def systems_of(rows):
    names = {r["system"] for r in rows}
    return [s for s in ORDER if s in names] + sorted(names - set(ORDER))


def fmt_ctx(L):
    return f"{L // 1024}k" if L % 1024 == 0 else str(L)


def floor_us(doc, r, kv_bytes=2):
    """KV bytes of the row (peers' formula, kv_bytes an element: f16 2, fp8 1) at the measured ceiling."""
    c = doc.get("config", {})
    kv = r["seqs"] * r["layers"] * (r["context"] + r["T"]) * c.get("kv_heads", 4) * c.get("head_size", 256) * 2 * \
        kv_bytes
    ceil = doc.get("ceiling_gbs") or 0
    return kv / (ceil * 1e9) * 1e6 if ceil else None


def cell(r):
    if r is None:
        return ""
    st = r["status"]
    if st == "ok":
        pct = f" ({r['pct_ceiling']:.0f}%)" if r.get("pct_ceiling") else ""
        eager = " †" if "eager" in (r.get("timing") or "") else ""
        return f"{r['us']:.1f}{pct}{eager}"
    if st == "mismatch":
        return f"**mismatch** (err {r['rel_err']:.1e}; {r['us']:.1f} us)" if r.get("us") else "**mismatch**"
    return st


def where(rs):
    """Compact list of (scenario, L, T): 'seed L=8k,32k T=8; batch L=8k T=1,4'."""
    parts = []
    for scen in sorted({r["scenario"] for r in rs}):
        by_L = {}
        for r in rs:
            if r["scenario"] == scen:
                by_L.setdefault(r["context"], set()).add(r["T"])
        by_T = {}
        for L, Ts in sorted(by_L.items()):
            by_T.setdefault(tuple(sorted(Ts)), []).append(L)
        for Ts, Ls in by_T.items():
            parts.append(f"{scen} L={','.join(fmt_ctx(L) for L in Ls)} T={','.join(map(str, Ts))}")
    return "; ".join(parts)


def markdown(doc):
    rows = doc["rows"]
    systems = systems_of(rows)
    peers = [s for s in systems if not s.startswith("pagedattn-") and not s.endswith("-fp8")]
    peers8 = [s for s in systems if not s.startswith("pagedattn-") and s.endswith("-fp8")]
    c = doc.get("config", {})
    layers = c.get("layers", 8)
    out = [f"# pagedattn and its peers: {doc.get('device', '?')}, {doc.get('date', '?')}", ""]
    pas = doc.get("pagedattn") or []
    pa = pas[0] if pas else {}
    out.append(f"Peers: `{doc.get('command', '?')}` (torch {doc.get('torch', '?')}, python {doc.get('python', '?')}, "
               f"{doc.get('elapsed_s', '?')} s).")
    for i in pas:
        if i.get("error"):
            out.append(f"pagedattn rows: could not read `{i.get('path')}`: {i['error']}.")
        else:
            cfg = i.get("config") or {}
            out.append(f"pagedattn rows: `{i.get('path')}` (commit {i.get('commit', '?')}, {i.get('date', '?')}, "
                       f"scenario {cfg.get('scenario', '?')}, fill {cfg.get('fill', '?')}).")
    out += ["", f"Model: H={c.get('heads')} q heads, Hk={c.get('kv_heads')} kv heads, D={c.get('head_size')}, "
                f"{layers} layers each with its own KV, f16 Q/O. Cells: us per {layers} layers, median of "
                f"{c.get('repeats')} CUDA-graph replays (layer copies rotated so that one replay's KV exceeds 3x L2), "
                "and in parentheses % of the read ceiling.",
            "",
            f"Read ceiling: {doc.get('ceiling_gbs', 0):.1f} GB/s ({doc.get('ceiling_method', '')})"
            + (f"; pagedattn's own read kernel measured {pa['ceiling_gbs']:.1f} GB/s in its run "
               "(its % here are against the ceiling above)" if pa.get("ceiling_gbs") else "") + ".",
            "Bytes: KV (L+T)*Hk*D*2*2 + Q + O per sequence and layer (flashinfer-fp8: 1-byte KV); pagedattn's rows "
            "use its own count (adds the new K/V rows it writes; u8: 1-byte KV plus f16 scale and zero point per "
            "token and kv head). HBM floor: the f16 KV bytes at the read ceiling"
            + ("; HBM floor fp8: the 1-byte KV bytes." if peers8 or "pagedattn-fp8" in systems else "."),
            f"Every peer's layer-0 output is checked against a float64 reference (relative L2 error <= "
            f"{c.get('tol', 1e-2):g}); pagedattn's correctness is its test suite's (its bench checks the output is "
            f"finite).", ""]
    if any("eager" in (r.get("timing") or "") for r in rows if r["status"] == "ok"):
        out += ["† timed eagerly with CUDA events: graph capture failed (reason in the JSON row's `timing`).", ""]
    base = "pagedattn-f16" if "pagedattn-f16" in systems else None
    base8 = "pagedattn-fp8" if "pagedattn-fp8" in systems else None
    fp8 = bool(peers8) or base8 is not None
    for scen in [s for s in ("seed", "batch") if any(r["scenario"] == s for r in rows)] + \
            sorted({r["scenario"] for r in rows} - {"seed", "batch"}):
        sr = [r for r in rows if r["scenario"] == scen]
        seqs = sorted({r["seqs"] for r in sr})
        out.append(f"## {SCEN_TITLE.get(scen, scen)} ({'/'.join(map(str, seqs))} sequence(s))")
        out.append("")
        head = ["seqs", "L", "T", "HBM floor"] + (["HBM floor fp8"] if fp8 else []) + systems
        if base and peers:
            head.append("best peer / pagedattn-f16")
        if base8 and peers8:
            head.append("best fp8 peer / pagedattn-fp8")
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "|".join("---:" for _ in head) + "|")
        keys = sorted({(r["seqs"], r["context"], r["T"]) for r in sr})
        for key in keys:
            by = {r["system"]: r for r in sr if (r["seqs"], r["context"], r["T"]) == key}
            any_row = next(iter(by.values()))
            fl = floor_us(doc, any_row)
            line = [str(key[0]), fmt_ctx(key[1]), str(key[2]), f"{fl:.1f}" if fl else ""]
            if fp8:
                fl8 = floor_us(doc, any_row, 1)
                line.append(f"{fl8:.1f}" if fl8 else "")
            line += [cell(by.get(s)) for s in systems]
            for ps, bs in ((peers, base), (peers8, base8)):  # f16 peers against pagedattn-f16, fp8 against fp8
                if not (bs and ps):
                    continue
                ok = [(by[s]["us"], s) for s in ps if s in by and by[s]["status"] == "ok" and by[s].get("us")]
                b = by.get(bs)
                if ok and b and b["status"] == "ok":
                    us, who = min(ok)
                    line.append(f"{us / b['us']:.2f} ({who})")
                else:
                    line.append("")
            out.append("| " + " | ".join(line) + " |")
        out.append("")
    if base and peers:
        out += ["best peer / pagedattn-f16 > 1: pagedattn f16 is faster by that factor; < 1: the peer named is "
                "faster" + (" (f16 peers only; fp8 peers are compared with pagedattn-fp8 the same way)."
                            if base8 and peers8 else "."), ""]
    elif base8 and peers8:
        out += ["best fp8 peer / pagedattn-fp8 > 1: pagedattn fp8 is faster by that factor; < 1: the peer named "
                "is faster.", ""]

    # reasons for every row that is not a timing, grouped by system and message
    notes = []
    for s in systems:
        groups = {}
        for r in rows:
            if r["system"] != s or r["status"] == "ok":
                continue
            msg = r["note"] or r["status"]
            if r["status"] == "mismatch":
                msg = f"rel L2 error {r['rel_err']:.2e} vs the float64 reference"
            groups.setdefault((r["status"], msg), []).append(r)
        n_all = sum(1 for r in rows if r["system"] == s)
        for (st, msg), rs in groups.items():
            notes.append(f"- **{s}** {st} ({'all rows' if len(rs) == n_all else where(rs)}): {msg}")
    if notes:
        out += ["## Rows without a timing, and why", ""] + notes + [""]
    kern = []
    for s in systems:
        seen = []
        for r in rows:
            if r["system"] == s:
                for k in r.get("kernels") or []:
                    if k not in seen:
                        seen.append(k)
        how = sorted({f"{r.get('gqa', '')}; mask: {r.get('mask', '')}" for r in rows
                      if r["system"] == s and r["status"] in ("ok", "mismatch") and not s.startswith("pagedattn-")})
        if seen or how:
            kern.append(f"- **{s}**: " + "; ".join(f"`{k}`" for k in seen[:6]) +
                        (" | " + " | ".join(how) if how else ""))
    if kern:
        out += ["## What ran (GPU kernels seen by the profiler; GQA; mask)", ""] + kern + [""]
    return "\n".join(out)


def plot(doc, scen, path, plot_tokens):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [r for r in doc["rows"] if r["scenario"] == scen and r["status"] == "ok" and r.get("us")]
    if not rows:
        return False
    layers = doc.get("config", {}).get("layers", 8)
    systems = systems_of(rows)
    contexts = sorted({r["context"] for r in rows})
    Ts = sorted({r["T"] for r in rows})
    shown = [t for t in Ts if t in plot_tokens] or Ts
    fig, ax = plt.subplots(figsize=(9, 6))
    if len(contexts) > 1:
        for s in systems:
            for i, T in enumerate(shown):
                pts = sorted((r["context"], r["us"]) for r in rows if r["system"] == s and r["T"] == T)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], color=COLORS.get(s, None),
                            linestyle=STYLES[i % len(STYLES)], marker=MARKERS[i % len(MARKERS)], label=f"{s} T={T}")
        ref = {}
        for r in doc["rows"]:
            if r["scenario"] == scen and r["T"] == min(shown) and r["context"] in contexts:
                ref[r["context"]] = floor_us(doc, r)
        fl = sorted((L, u) for L, u in ref.items() if u)
        if fl:
            ax.plot([p[0] for p in fl], [p[1] for p in fl], color="black", linewidth=2.5, alpha=0.6,
                    label=f"HBM floor (f16 KV bytes / {doc.get('ceiling_gbs', 0):.0f} GB/s)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(contexts)
        ax.set_xticklabels([fmt_ctx(L) for L in contexts])
        ax.minorticks_off()
        ax.set_xlabel("context L (tokens, log scale)")
    else:  # one context: bars per T (every T: there are few)
        shown = Ts
        width = 0.8 / max(1, len(systems))
        for j, s in enumerate(systems):
            xs, ys = [], []
            for i, T in enumerate(shown):
                r = next((r for r in rows if r["system"] == s and r["T"] == T), None)
                if r:
                    xs.append(i + (j - (len(systems) - 1) / 2) * width)
                    ys.append(r["us"])
            ax.bar(xs, ys, width=width, color=COLORS.get(s, None), label=s)
        for i, T in enumerate(shown):
            r = next((r for r in doc["rows"] if r["scenario"] == scen and r["T"] == T), None)
            u = floor_us(doc, r) if r else None
            if u:
                ax.hlines(u, i - 0.45, i + 0.45, colors="black", linewidth=2.5, alpha=0.6,
                          label="HBM floor (f16 KV bytes / ceiling)" if i == 0 else None)
        ax.set_xticks(range(len(shown)))
        ax.set_xticklabels([f"T={T}" for T in shown])
        ax.set_xlabel(f"new tokens per sequence, context {fmt_ctx(contexts[0])}")
    seqs = sorted({r["seqs"] for r in rows})
    ax.set_ylabel(f"us per {layers} layers (median of CUDA-graph replays)")
    ax.set_title(f"{SCEN_TITLE.get(scen, scen)} ({'/'.join(map(str, seqs))} seq) - {doc.get('device', '')}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", required=True, help="run_peers.py's JSON")
    p.add_argument("--pagedattn-json", nargs="+", action="extend", metavar="FILE",
                   help="pagedattn bench JSON file(s): their rows replace any pagedattn rows of --json")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--plot-tokens", default="1,3,8", help="T values drawn in the line plots")
    a = p.parse_args(argv)
    doc = load(a.json, a.pagedattn_json)
    os.makedirs(a.out_dir, exist_ok=True)
    md = markdown(doc)
    plot_tokens = [int(x) for x in a.plot_tokens.split(",") if x.strip()]
    images = []
    for scen in sorted({r["scenario"] for r in doc["rows"]}):
        name = f"peers_{scen}.png"
        try:
            if plot(doc, scen, os.path.join(a.out_dir, name), plot_tokens):
                images.append((scen, name))
        except Exception as e:  # noqa: BLE001 - the table is still worth writing
            print(f"plot {scen}: {type(e).__name__}: {e}", file=sys.stderr)
    if images:
        md += "\n## Plots\n\n" + "\n".join(f"![{s}]({n})" for s, n in images) + "\n"
    with open(os.path.join(a.out_dir, "peers.md"), "w") as f:
        f.write(md)
    print(md)
    print(f"wrote {os.path.join(a.out_dir, 'peers.md')} and {', '.join(n for _, n in images) or 'no plot'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
