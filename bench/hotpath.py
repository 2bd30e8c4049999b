#!/usr/bin/env python3
"""Hot-path length of a few-query kernel's K half, from a SASS listing (bench/sass.sh with SASS_DUMP=1
writes /tmp/sass_N.txt): the instructions a warp executes from the first S MMA block of the key loop to
the rescale vote, taking the branches to the plain (interior) score and probability passes. A static
reading for comparing two builds of the same variant, not a profile.
  usage: bench/hotpath.py SASS_FILE [START_HEX]
START_HEX: the first instruction of the S block; by default the instruction after the last
predicated branch before the first HMMA that precedes the vote (the loop's "active slice" test)."""
import re
import sys

ins = [(int(l[:5], 16), l[6:].strip()) for l in open(sys.argv[1]) if re.match(r"^[0-9a-f]{5} ", l)]
pos = {a: i for i, (a, _) in enumerate(ins)}
vote = next(i for i, (_, t) in enumerate(ins) if "VOTE.ALL" in t)
if len(sys.argv) > 2:
    i = pos[int(sys.argv[2], 16)]
else:
    first_mma = next(i for i in range(vote) if "HMMA" in ins[i][1])
    i = max(k for k in range(first_mma) if re.match(r"@!?P\d BRA 0x", ins[k][1])) + 1
start, n, taken = ins[i][0], 0, 0
while i != vote:
    t = ins[i][1]
    n += 1
    # two-predicate branches (@Px BRA Py, target) are the plain-slice tests; plain BRA jumps over code
    m = re.match(r"@!?P\d BRA !?P\d, 0x([0-9a-f]+)", t) or re.match(r"BRA 0x([0-9a-f]+)", t)
    if m:
        i = pos[int(m.group(1), 16)]
        taken += 1
    else:
        i += 1
print("%s: %d instructions from 0x%x to the rescale vote (%d branches taken)" % (sys.argv[1], n, start, taken))
