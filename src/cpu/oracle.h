// Internal: the CPU oracle. Obvious loops, float accumulation, the op's full semantics (params.h).
// Every backend's tests compare against it; it never gets clever.
#pragma once

#include "pagedattn/params.h"

namespace pagedattn {
namespace oracle {

/// Step 1: writes the new key/value rows into the cache at positions past_len .. past_len+T-1
/// (quantising for u8). No-op when p.key is absent. `p` must be valid and on the host.
void write_kv(const Params& p);

/// Step 2: attention over positions [0, past_len+T) of each sequence, reading the cache (after
/// write_kv). Writes p.out and, when present, p.scores.
void attention(const Params& p);

/// write_kv then attention.
void forward(const Params& p);

}  // namespace oracle
}  // namespace pagedattn
