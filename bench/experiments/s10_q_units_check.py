#!/usr/bin/env python3
"""Host check of s10_q_units.patch (no GPU): stage_q's u8 stores through q_unit and load_qf's 16-byte
fragment loads give every lane, row tile and k-step the 4 registers the old two 8-byte loads gave
(element ids compared), the layout fits in the q buffer without overlap, and each quarter warp's
16-byte loads hit 32 distinct banks. Prints (mismatched fragments, conflicting quarter-warp loads) per
(D, RT); run: python3 bench/experiments/s10_q_units_check.py"""
import itertools
def run(D, RT, MT=1):
    kRows = 16*RT
    Q = {(r, d): (r, d) for r in range(kRows) for d in range(D)}   # element ids
    mem = {}  # byte address -> element id pair (32-bit word = 2 elements)
    def q_unit(p, i): return p*(4*D) + (i ^ ((p & 1) << 2))*16
    for r in range(kRows):
        for ch in range(D//8):
            words = [(Q[(r, 8*ch+2*k)], Q[(r, 8*ch+2*k+1)]) for k in range(4)]  # v.x..v.w
            p = (r//16)*8 + r % 8; hf = (r//8) % 2
            u0 = q_unit(p, 2*ch); u1 = q_unit(p, 2*ch+1)
            for addr, w in ((u0+4*hf, words[0]), (u0+4*(2+hf), words[1]), (u1+4*hf, words[2]), (u1+4*(2+hf), words[3])):
                assert addr not in mem, "overlap"
                mem[addr] = w
    assert max(mem) + 4 <= kRows*(D+8)*2, "fits in q"
    bad = 0
    for wq, mt, lane, ks in itertools.product(range(RT//MT), range(MT), range(32), range(D//16)):
        r0 = (wq*MT+mt)*16; g = lane//4; t = lane % 4
        # original
        lo = [(Q[(r0+g, ks*16+4*t+2*k)], Q[(r0+g, ks*16+4*t+2*k+1)]) for k in range(2)]
        hi = [(Q[(r0+g+8, ks*16+4*t+2*k)], Q[(r0+g+8, ks*16+4*t+2*k+1)]) for k in range(2)]
        want = [lo[0], hi[0], lo[1], hi[1]]
        p = (wq*MT+mt)*8 + g; sw = 64 if p & 1 else 0
        base = p*(4*D) + t*16 + ks*64 + (-sw if ks & 1 else sw)
        got = [mem.get(base + 4*k) for k in range(4)]
        bad += got != want
    # bank conflicts of the loads: per quarter warp (8 lanes), 16-byte accesses
    conflicts = 0
    for wq, mt, ks in itertools.product(range(RT//MT), range(MT), range(D//16)):
        for q4 in range(4):
            banks = []
            for lane in range(8*q4, 8*q4+8):
                g = lane//4; t = lane % 4; p = (wq*MT+mt)*8 + g; sw = 64 if p & 1 else 0
                a = p*(4*D) + t*16 + ks*64 + (-sw if ks & 1 else sw)
                banks += [((a//4)+k) % 32 for k in range(4)]
            conflicts += len(banks) != len(set(banks))
    return bad, conflicts
for D, RT in [(64,1),(128,1),(256,1),(256,2),(256,4),(256,8),(128,8),(64,4)]:
    print(D, RT, run(D, RT))
print('MT=2', run(128, 8, 2))

