"""Rows of `pagedattn bench --json` (tools/bench.cpp's writer) in run_peers.py's row schema (no torch needed)."""
import json


def pagedattn_rows(path, ceiling_gbs):
    """Rows of `pagedattn bench --json` (tools/bench.cpp) in this script's schema."""
    with open(path) as f:
        doc = json.load(f)
    out = []
    for r in doc.get("rows", []):
        seqs = int(r["seqs"])
        row = {"system": f"pagedattn-{r['kv']}", "scenario": "seed" if seqs == 1 else "batch", "seqs": seqs,
               "context": int(r["context"]), "T": int(r["T"]), "layers": int(r.get("layers", 8)), "status": "ok",
               "note": "", "us": r["us"], "us_min": r.get("us_min"), "repeats": doc.get("config", {}).get("repeats"),
               "timing": "cuda-graph (pagedattn bench)", "sets": r.get("sets", 1), "bytes": r["bytes"],
               "bytes_terms": r.get("bytes_terms", {}), "gbs": r.get("gbs"),
               "pct_ceiling": None, "pct_own_ceiling": r.get("pct_ceiling"), "rel_err": None, "kernels": [],
               "gqa": "native", "mask": "causal past + t + 1", "kv_layout": f"paged, kv {r['kv']}"}
        if row["us"]:
            row["gbs"] = row["bytes"] / (row["us"] * 1e-6) / 1e9
            if ceiling_gbs:
                row["pct_ceiling"] = 100.0 * row["gbs"] / ceiling_gbs
        out.append(row)
    info = {k: doc.get(k) for k in ("device", "date", "commit", "ceiling_gbs", "ceiling_method", "backend")}
    info["path"] = path
    info["config"] = doc.get("config")
    return out, info


def pagedattn_rows_many(paths, ceiling_gbs):
    """Rows of several `pagedattn bench --json` files (e.g. the seed run and a 32-sequence run); a later file's
    row replaces an earlier one of the same system, sequences, context and T. Returns (rows, [info, ...]);
    an unreadable file gives an info with 'error'."""
    rows, infos = {}, []
    for p in paths or []:
        try:
            rs, info = pagedattn_rows(p, ceiling_gbs)
        except Exception as e:  # noqa: BLE001 - one unreadable file does not hide the others
            infos.append({"path": p, "error": f"{type(e).__name__}: {e}"})
            continue
        infos.append(info)
        for r in rs:
            rows[(r["system"], r["seqs"], r["context"], r["T"])] = r
    return list(rows.values()), infos
