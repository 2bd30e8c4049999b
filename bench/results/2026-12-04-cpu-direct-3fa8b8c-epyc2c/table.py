# Per row (kv, seqs, context, T): each build's median over the rounds and the ratio new / base; the
# per-round ratios' range. Usage: table.py BASE_TAG NEW_TAG
import json, glob, statistics, sys
base, new = sys.argv[1], sys.argv[2]
def load(tag):
    runs = []
    for f in sorted(glob.glob(f"pa_{tag}_r*.json")):
        j = json.load(open(f))
        runs.append({(r["kv"], r["seqs"], r["context"], r["T"]): (r["us"], r.get("pct", 0)) for r in j["rows"]})
    return runs
B, N = load(base), load(new)
print(f"{'kv':5} {'seqs':>4} {'context':>7} {'T':>2} {base+' us':>14} {new+' us':>14} {'new/base':>8} {'per-round':>13} {'T/T1 base':>9} {'T/T1 new':>8}")
t1 = {}
for key in B[0]:
    b = statistics.median(r[key][0] for r in B); n = statistics.median(r[key][0] for r in N)
    rr = [N[i][key][0] / B[i][key][0] for i in range(min(len(B), len(N)))]
    k1 = (key[0], key[1], key[2], 1)
    tb = b / statistics.median(r[k1][0] for r in B) if k1 in B[0] else 1
    tn = n / statistics.median(r[k1][0] for r in N) if k1 in N[0] else 1
    print(f"{key[0]:5} {key[1]:>4} {key[2]:>7} {key[3]:>2} {b:14.1f} {n:14.1f} {n/b:8.3f} {min(rr):6.3f}-{max(rr):5.3f} {tb:9.2f} {tn:8.2f}")
