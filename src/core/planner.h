// Internal: the work-list heuristic of the CUDA backend (DeepGEMM-style: heuristics apart from
// launchers). Pure host code, so it is built and unit-tested without a GPU.
//
// Every sequence's new tokens are cut into chunks of at most max_rows/G tokens (a chunk's T*G query
// rows share every K/V byte the CTA reads); each chunk's key range [lo, causal limit of its last token)
// is cut into partitions aligned to absolute multiples of `partition_tokens`. One CTA runs per
// (chunk, partition, kv head); chunks with more than one partition leave partials that a merge step
// combines. Sequences with T*G <= max_rows (64, or 128 with wide tiles) are one chunk: decode, chain
// and tree verify are the same kernel. Longer sequences (prefill) become several chunks of it. In
// deterministic mode a sequence is also cut where its tokens' partition size changes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace pagedattn {
namespace planner {

constexpr int kMaxRows = 64;    // query rows (tokens x heads of one kv head) per CTA, by default
constexpr int kMaxRowsWide = 128;  // with wide prefill tiles (Inputs::max_rows; the cuda default at D <= 128)
// NOTE: by default a sequence is cut into chunks iff T > max_rows / G; the CUDA write_kernel relies on
// that rule to know which sequences' rows it writes (the others are written inside the attention
// kernel). Deterministic mode also cuts where a sequence's partition size changes; where that cuts a
// sequence of T <= max_rows / G the backend has the write kernel write every sequence
// (FwdParams::write_all).
constexpr int kBlockKV = 64;    // keys per pipeline tile
constexpr int kMinPartition = 128;  // Inputs::min_partition's default (the cuda backend's: tuning::min_partition)
// Inputs::deterministic: the partition size of one query row, from the keys it sees (`keys`: from its
// window start, or 0, to its causal limit) and the call's constants: the least multiple of
// kDeterministicStep keys whose partitions of all kv heads fit one wave of `wave_ctas` CTAs (num_sms x
// the decode variant's CTAs per SM). A function of the row, the model and the device, never of the
// batch, so a verify row and its decode get the same partitions. The seed (Hk = 4, 264 CTAs): 256 keys
// at 8k, 512 at 32k, 2048 at 128k; a fixed 512 had cost the mode 1.31x at 8k u8 T = 1 (64 CTAs) and
// 1.19-1.33x at 128k u8 T <= 4 (1024 CTAs), fixed 256 / 2048 measured 1.00-1.06x there (run inv5).
constexpr int kDeterministicStep = 256;
constexpr int deterministic_partition(int64_t keys, int num_kv_heads, int64_t wave_ctas) {
  const int64_t per_head = std::max<int64_t>(1, wave_ctas / std::max(1, num_kv_heads));  // partitions
  const int64_t part = (std::max<int64_t>(keys, 1) + per_head - 1) / per_head;
  const int64_t rounded = (part + kDeterministicStep - 1) / kDeterministicStep * kDeterministicStep;
  return static_cast<int>(std::min<int64_t>(rounded, int64_t{1} << 30));  // (keys are int32: never reached)
}
// Inputs::deterministic: rows per chunk. Chunks of 1 and 2 row tiles run on layouts with the same key
// groups (the cuda backend's KernelChoice::invariant), so up to 32 rows a row's arithmetic (its key
// slices, their order) does not depend on how many tokens share its chunk; above 32 rows per token
// (G > 32) every chunk is one token of 4 row tiles (docs/design.md, "Invariant rows"). Inputs::max_rows
// = 16 keeps chunks of G <= 16 at one row tile (a device without the shared memory of the 2-row-tile
// layout).
constexpr int deterministic_rows(int group, int max_rows) {
  return group > 32 ? 64 : group > 16 ? 32 : max_rows < 32 ? 16 : 32;
}

// Inputs::deterministic: the partitions a CTA runs in turn (WorkItem::part). A lone sequence's
// partitions fit one wave (deterministic_partition), a batch's may not: the 32 x 8k batch has 4096
// CTAs of 256 keys at Hk = 4 (the mode 1.19x (f16) / 1.64x (u8) the default at T = 1, run inv6; in
// runs of 16, 1.21x / 1.44x, run ir1). Plan::span is the least run length whose items fit one wave (num_sms x
// ctas_per_sm CTAs), for chunks of at most kMaxSpanRows rows (the variants with fwd_kernel's partition
// flush; Inputs::wg_partials: every chunk); a chunk's items take balanced runs. A lone sequence keeps one
// partition per item.
constexpr int kMaxSpanRows = 32;
// Inputs::fold_block: the chunks whose CTAs fold their units (the key-split kernel's 64-row tile with its
// rows in the first two warps of each warpgroup: the other two keep the fold)
constexpr int kFoldRows = 32;
struct WorkItem {
  int32_t seq;        // sequence index
  int32_t t0, nt;     // first new token of the chunk (within its sequence) and token count
  int32_t kv_begin;   // first key position this CTA reads (multiple of kBlockKV)
  int32_t kv_end;     // one past the last key position this CTA reads
  int32_t slot;       // partial slot of (chunk, part) for kv head 0, or -1 when the chunk has one
                      // partition (the CTA writes `out` directly; never in deterministic mode, where
                      // every row goes through the merge); kv head h uses slot + h * num_parts
  int32_t num_parts;  // partitions of this chunk (Inputs::wg_partials: partial slots, 2 per partition)
  int32_t row_tiles;  // kernel variant: 16-row MMA tiles, 1, 2, 4 or 8 (>= ceil(nt * G / 16))
  // Filled by the backend from the call's metadata (so the kernel needs one dependent load, not four):
  int32_t past;       // past_lens[seq]
  int32_t tok0;       // subsequence_begins[seq]
  int32_t t_seq;      // T of the sequence
  int32_t table;      // block_indices_begins[seq]
  // The planner's again (last, so the other fields keep their offsets; the 52-byte item still changes
  // the default kernels' code: the item stride and register assignment, bench/NOTES.md):
  int32_t part;       // 0: the item is one partition. Else (deterministic mode, a call with more
                      // partitions than a wave of CTAs: Plan::span) the keys per partition of a
                      // run of consecutive partitions: the CTA leaves partition i's partial in slot
                      // slot + i, as a CTA of its own would, so the arithmetic does not change
};

struct EmptyChunk {    // new tokens that see no key (prefix_only: an empty shard, or one wholly before
  int32_t seq, t0, nt; // their window): no item; the backend sets out 0 and lse -inf
};

struct MergeItem {     // one (chunk, query row) whose partitions must be combined, for every kv head
  int32_t seq, t0, nt;
  int32_t slot;        // partial slot of partition 0 for kv head 0
  int32_t num_parts;   // (Inputs::wg_partials: partial slots, 2 per partition; a folded chunk: its units)
  int32_t part0;       // absolute index of the chunk's first partition (kv_begin / part; wg_partials: 2x;
                       // a folded chunk: its first unit's, 2 x its first block's)
  int32_t part;        // the chunk's partition size
  int32_t fold;        // Inputs::fold_block, where the merge folds the chunk's slots into units itself;
                       // 0 where its partials are what the merge folds (units its CTAs left, or no units)
};

struct Inputs {
  std::vector<int32_t> past_lens, tokens;  // per sequence
  std::vector<int32_t> positions;          // per sequence, or empty: the first new token's position for
                                           // the window (Params::new_token_positions; default past_lens)
  int group = 1;                           // G = H / Hk
  int num_kv_heads = 1;
  int sliding_window = 0;
  bool prefix_only = false;                // Params::prefix_only: every chunk's keys are [0, past); a
                                           // chunk with none in its window has no item (Plan::empty)
  int num_sms = 132;
  int ctas_per_sm = 1;                     // occupancy of the attention kernel
  // Occupancy of the chunks of 1, 2, 4 and 8 row tiles where they run on the Hopper kernel (wg_kernel,
  // one CTA per SM at D >= 128), else 0. When every chunk of a call does, the one-wave target is
  // num_sms times the least of these instead of ctas_per_sm: partitions sized for fwd_kernel's two CTAs
  // per SM made two waves of them (H200, run mr1: 128-row chunks at 32k 0.81x the time with the
  // longer partitions).
  int wg_ctas_per_sm[4] = {0, 0, 0, 0};
  // Occupancy of the chunks of 1, 2, 4 and 8 row tiles where they run on fwd_kernel, else 0. When a call
  // is not all on the Hopper kernel, the one-wave target counts the least of ctas_per_sm and these over
  // its chunks: D = 64's u8 decodes run 4 CTAs per SM, their 32-row verifies' 2-row-tile kernel 3, and
  // partitions sized for 4 made two waves of the verifies (H100, run x4b: 1.14-1.38x the time).
  int fwd_ctas_per_sm[4] = {0, 0, 0, 0};
  // Partitions of deterministic_partition(the row's keys) at absolute multiples (a sequence's tokens are
  // cut into separate chunks where that size changes), chunks of deterministic_rows(group) rows, key
  // ranges from a partition start, and every chunk through the merge: a row's result is the same in any
  // batch and in any chunk of a chain (its decode's)
  bool deterministic = false;
  // With deterministic: every chunk on the key-split Hopper kernel (f16/bf16 caches on sm_90a), whose
  // warpgroups leave a partial each (cuda FwdParams::wg_partials): chunks of up to kMaxRows rows (its one
  // 64-row tile, so every chunk has a row's arithmetic), runs of partitions (WorkItem::part) for chunks of
  // any rows, and two partial slots per partition: a chunk's partition p (absolute) is slots 2 (p - p0) and
  // 2 (p - p0) + 1 of its range, WorkItem::slot / num_parts and MergeItem::num_parts / part0 count slots
  // (2 x partitions), so the merge folds partial 2 p + w as it would a partition of that index.
  bool wg_partials = false;
  // With wg_partials: the arithmetic's blocks of consecutive absolute partitions (0: none). A row's result
  // is then the merge's groups over units, a unit being one warpgroup's partials of one block folded in
  // partition order (cuda merge.cuh, load_unit). Where the call's runs (Plan::span) cover whole blocks, the
  // chunks of <= kFoldRows rows take runs of whole blocks, their CTAs fold the units themselves and leave
  // one partial slot per unit (Plan::folded; MergeItem::fold 0); other chunks leave their slots and the
  // merge folds their units (MergeItem::fold = fold_block). The same bits either way.
  int fold_block = 0;
  int forced_partition = 0;                // 0: choose
  int min_partition = kMinPartition;       // the least partition the one-wave rule starts from (a multiple
                                           // of kBlockKV; tuning::min_partition)
  // Default mode: where the one-wave partition is under short_wave_keys, the wave counts short_ctas_per_sm
  // CTAs per SM instead, when that is a smaller wave (0: never; tuning::short_wave_ctas_per_sm)
  int short_ctas_per_sm = 0;
  int short_wave_keys = 0;
  int max_rows = kMaxRows;                 // rows per chunk: kMaxRows or kMaxRowsWide (8 row tiles);
                                           // any multiple of 16 up to 128 plans (tests: 16, 32); >= group
};

struct Plan {
  int partition_tokens = 0;                // keys per partition (deterministic: the first chunk's; each
                                           // chunk's own is in its items' key ranges and MergeItem::part)
  int num_slots = 0;                       // partial slots (each slot_rows rows) for all kv heads
  int slot_rows = 16;                      // rows per partial slot: 16 * max_row_tiles (the widest chunk)
  int chunk_rows = kMaxRows;               // = Inputs::max_rows, or deterministic_rows (the chunking rule:
                                           // T > chunk_rows / G; deterministic mode also cuts at size changes)
  int max_row_tiles = 1;
  int span = 1;                            // deterministic: most partitions per item (WorkItem::part)
  bool folded = false;                     // Inputs::fold_block: chunks of <= kFoldRows rows take runs of
                                           // whole blocks, each item leaving one slot per unit
  int64_t ctas = 0;                        // attention CTAs (items x kv heads)
  std::vector<WorkItem> items;             // sorted by row_tiles, then longest key range first
  std::vector<MergeItem> merges;
  std::vector<EmptyChunk> empty;           // chunks with no key in range (prefix_only only)
  std::string describe() const;
};

Plan make_plan(const Inputs& in);

}  // namespace planner
}  // namespace pagedattn
