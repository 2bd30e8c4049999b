// Internal: the CUDA backend's tuning rules (which kernel variant, which merge shape) as host-only
// functions of the plan's shape and the device, and the environment overrides of A/B runs read into one
// struct. Unit-tested without a GPU (tests/test_tuning.cpp); the measurements behind each rule are in
// the comments of tuning.cpp (runs under bench/results, bench/NOTES.md).
#pragma once

#include <cstdint>
#include <functional>

#include "common/numeric.h"

namespace pagedattn {
namespace tuning {

/// Environment overrides (A/B runs; docs/design.md lists them), read once per plan. Each field holds
/// the default when its variable is unset or not one of the values it takes.
struct Overrides {
  bool early_reads = true;    // PAGEDATTN_EARLY_READS=0: no cache reads before the PDL wait
  bool stale_max = true;      // PAGEDATTN_STALE_MAX=0: fwd_kernel's exact running max (stale_log2 0)
  bool half_partials = true;  // PAGEDATTN_HALF_PARTIALS=0: f32 partials for every cache kind (FwdParams::ws_half)
  bool prefill_mt2 = true;    // PAGEDATTN_PREFILL_MT2=0: one row tile per warp in mma.sync 128-row chunks
  bool wgmma_u8 = true;       // PAGEDATTN_WGMMA_U8=0: u8 and fp8 caches back on mma.sync
  int wgmma = -1;             // PAGEDATTN_WGMMA=0/64/128: the Hopper kernel off, or its key tile; -1 unset
  int wg_split = -1;          // PAGEDATTN_WG_SPLIT=0/1/2/3: the key-split kernel off / on for 33-64-row chunks /
                              // for 17-64 / for 1-64 at every head size; -1 unset (hopper_split())
  int wg_shared = -1;         // PAGEDATTN_WG_SHARED=0/1: D = 64 128-row chunks on one / two CTAs per SM; -1 unset
  int wgs_shared = -1;        // PAGEDATTN_WGS_SHARED=0/1: D = 64 key-split chunks on one / two CTAs per SM; -1 unset
  int wide_prefill = -1;      // PAGEDATTN_WIDE_PREFILL=0/1: 128-row chunks off/on; -1 unset
  int merge_split = 0;        // PAGEDATTN_MERGE_SPLIT=1/2/4; 0 unset
  int merge_batch = 0;        // PAGEDATTN_MERGE_BATCH=1/4/8; 0 unset
  int merge_rowwise = -1;     // PAGEDATTN_MERGE_ROWWISE=0/1: deterministic mode's merge by CTA per row / by
                              // thread per 4 columns (the same bits); -1 unset
  int merge_cols = 0;         // PAGEDATTN_MERGE_COLS=4/8: merge_rows_kernel's threads take 4 columns of a row,
                              // or 8 where the width allows, whatever the call (merge_cols8); 0 unset
  bool units = true;          // PAGEDATTN_UNITS=0: deterministic mode without units (kFoldBlock; other bits)
  int min_partition = 0;      // PAGEDATTN_MIN_PARTITION=N (a multiple of 64, 64-4096): the least keys per
                              // partition for every cache kind and head size; 0 unset
  int short_wave = -1;        // PAGEDATTN_SHORT_WAVE=0: no short-partition wave (short_wave_ctas_per_sm());
                              // =N (1-8): N CTAs per SM there (where fewer than the wave's), every head size and
                              // cache kind; -1 unset
  bool half_rows = true;      // PAGEDATTN_HALF_ROWS=0: calls of <= 8 rows per sequence keep the 16-row
                              // variant (half_rows())
  int keys_on_m = -1;         // PAGEDATTN_KEYS_ON_M=0/1/2: one-byte calls of <= 8 rows per sequence off / on
                              // fwd_kernel's KT variant / on it at one CTA per SM more (keys_on_m()); -1 unset
  int deterministic_rows = 0;  // PAGEDATTN_DETERMINISTIC_ROWS=16: deterministic mode's 17-32-row chunks as
                               // 16-row chunks at G <= 16 (the layout of devices without the 8-warp
                               // variant's memory); 0 unset
  int deterministic_split = -1;  // PAGEDATTN_DETERMINISTIC_SPLIT=0/1: deterministic mode's f16/bf16 chunks on
                                 // fwd_kernel's WKV = 4 layout / on the key-split Hopper kernel
                                 // (deterministic_split()); -1 unset
};
/// `getenv` returns a variable's value or nullptr (tests pass their own).
Overrides parse_overrides(const std::function<const char*(const char*)>& getenv);
/// From the process environment.
Overrides read_overrides();

/// The Hopper kernel's key tile for 128-row chunks (KernelChoice::wg): 0 where it is off (not an sm_90
/// device of an sm_90a build, u8 (and fp8: pass u8 = true for one-byte codes) with PAGEDATTN_WGMMA_U8=0,
/// PAGEDATTN_WGMMA=0).
int hopper_key_tile(int head_size, bool u8, bool hopper, const Overrides& o);
/// What a cache holds, for the rules that tell its kinds apart: 16-bit elements (f16, bf16), u8 or fp8 codes.
enum class KvKind { f16, u8, fp8 };
/// The least row tiles of the chunks that run on the key-split Hopper kernel (KernelChoice::wg_split):
/// 2 (17-64 rows), 4 (33-64 rows), or 0 where it is off (u8 at D = 256 past kSplitMidKeys keys; fp8 at
/// D = 256 past kSplitShortKeys keys) or the Hopper kernel is (`key_tile` =
/// hopper_key_tile() == 0). f16/bf16: 2 at D >= 128 and at D = 64 while the call's longest key range
/// `max_keys` <= kSplitShortKeys, else 4. fp8: 2 at D = 64 (the same key rule, else 4), 4 at D = 128, 4 at
/// D = 256 up to kSplitShortKeys keys. u8: as fp8 at D = 64, 4 at D = 128, 4 at D = 256 up to kSplitMidKeys
/// keys.
/// PAGEDATTN_WG_SPLIT=1 / 2 / 3: 4 / 2 / 1 wherever the kernel may run (every cache type).
/// (kSplitMidKeys: 32k contexts with their verify's tokens, measured, pass 32768 keys; 128k measured
/// slower; the boundary in between is not measured)
constexpr int64_t kSplitShortKeys = 16384, kSplitMidKeys = 40960;
/// `two_ctas`: the call's D = 64 f16/bf16 key-split chunks run on its two-CTA form (hopper_split_shared()),
/// which takes 17-64 rows at any length.
int hopper_split(int head_size, KvKind kv, int key_tile, int64_t max_keys, bool two_ctas, const Overrides& o);
/// Chunks of 1-16 rows on the key-split Hopper kernel too (KernelChoice::wg_split = 1; their 64-row tile
/// holds them as it holds 17-32): f16/bf16 where the call's 17-32-row chunks take the kernel already
/// (`split` = the call's hopper_split(), 2: so no other chunk changes kernel; at D = 64 past 16k keys
/// that is its two-CTA form) and the call's sequences of <= 16 rows per kv head hold, over their key ranges
/// times the kv heads, `small_key_heads` >= split_small_key_heads(head_size) (D = 256: 3 x 2^16, a 48k
/// context at Hk = 4; other head sizes 2^18, one 64k context at Hk = 4 or eight 8k ones). Not with a
/// PAGEDATTN_WG_SPLIT override (=3 takes them anywhere, every cache type; u8 / fp8 there are timed, run ss2,
/// not tested against the oracle).
constexpr int64_t kSplitSmallKeyHeads = int64_t{1} << 18, kSplitSmallKeyHeadsD256 = int64_t{3} << 16;
constexpr int64_t split_small_key_heads(int head_size) {
  return head_size == 256 ? kSplitSmallKeyHeadsD256 : kSplitSmallKeyHeads;
}
bool hopper_split_small(int head_size, KvKind kv, int split, int64_t small_key_heads, const Overrides& o);
/// 128-row f16/bf16 chunks at D = 64 on the Hopper kernel's two-CTA-per-SM form (KernelChoice::wg_shared):
/// where the call's longest key range `max_keys` passes kSplitShortKeys, or its 128-row chunks alone
/// (`wide_ctas`: chunks of more than 64 rows, 128 rows each, times the kv heads) fill `num_sms` CTAs (64-key
/// tiles only: not where wide_key_tile() takes 128). PAGEDATTN_WG_SHARED=0 / 1: never / wherever it may run.
bool hopper_shared(int head_size, KvKind kv, int key_tile, int64_t max_keys, int64_t wide_ctas, int num_sms,
                   const Overrides& o);
/// f16/bf16 chunks on the key-split Hopper kernel at D = 64 (`split` = hopper_split() != 0) on its
/// two-CTA-per-SM form (KernelChoice::wgs_shared: 3 slots per ring, registers bounded to 128): where the
/// call's longest key range `max_keys` passes kSplitShortKeys and its chunks of 17-64 rows times the kv
/// heads (`split_ctas`) are at most half of `num_sms`. PAGEDATTN_WGS_SHARED=0 / 1: never / wherever it
/// may run.
bool hopper_split_shared(int head_size, KvKind kv, int split, int64_t max_keys, int64_t split_ctas, int num_sms,
                         const Overrides& o);
/// D = 64's 128-row f16/bf16 chunks on 128-key tiles (KernelChoice::wg = 128, one CTA per SM) instead of
/// `key_tile` = hopper_key_tile() = 64, where the call's `long_key_heads` (the sum of long_key_heads() over
/// its sequences) reach kWideTileKeys per SM of `num_sms`; else `key_tile`. Not with a PAGEDATTN_WGMMA=64 /
/// 128 override (which hopper_key_tile() applied) or PAGEDATTN_WG_SHARED=1 (two CTAs per SM, a 64-key form,
/// wherever it may run). Measured on calls of one sequence (runs k1-k3); mixed calls follow the same sum,
/// unmeasured.
constexpr int64_t kWideTileKeys = 1536;
int wide_key_tile(int head_size, KvKind kv, int key_tile, int64_t long_key_heads, int num_sms, const Overrides& o);
/// A sequence's share of wide_key_tile()'s sum: its 128-row chunks times its keys times the kv heads where it
/// has more than 64 rows per kv head and more than kSplitShortKeys keys, else 0.
constexpr int64_t long_key_heads(int64_t rows, int64_t keys, int num_kv_heads) {
  return rows > 64 && keys > kSplitShortKeys ? (rows + 127) / 128 * num_kv_heads * keys : 0;
}
/// 128-row chunks (planner::kMaxRowsWide) where the 8-row-tile variant fits the device
/// (`wide_fits`); `key_tile` = hopper_key_tile().
bool wide_chunks(int head_size, int key_tile, bool wide_fits, const Overrides& o);

/// Whether a call whose sequences all have <= 8 rows per kv head (G x T <= 8) runs its chunks on fwd_kernel's
/// HR variant (the MMAs' top halves: KernelChoice::hr): u8 caches at D = 64, 128, 256 and fp8 at D = 64
/// (the instantiated ones, launch.h's has_hr_kernels); not in deterministic mode (its one layout) or with a
/// padded head size. PAGEDATTN_HALF_ROWS=0 turns it off.
bool half_rows(int head_size, KvKind kv, bool deterministic, const Overrides& o);
/// Whether calls whose sequences all have <= 8 rows per kv head run fwd_kernel's KT variant (keys as the
/// MMAs' M dimension: u8 and fp8 at D = 64, 128, 256, launch.h's has_kt_kernels; before the HR variant), as
/// KernelChoice::kt (0: off; 1: at the HR variant's CTAs per SM; 2: one more): u8 and fp8 at D = 256 2,
/// fp8 at D = 128 1, else 0 (runs kt2, kt3); never in deterministic mode. PAGEDATTN_KEYS_ON_M=0 / 1 / 2
/// picks for every u8 / fp8 width with the variant.
int keys_on_m(int head_size, KvKind kv, bool deterministic, const Overrides& o);

/// The least keys per partition (planner::Inputs::min_partition), where the planner's one-wave rule would
/// choose fewer: 256 for f16/bf16 caches at head_size <= 128, for u8 at head_size <= 128 unless the call has
/// a sequence of 17-32 query rows per kv head (`mid_rows`: T * G in 17..32), and for fp8 unless
/// head_size = 128 and `mid_rows`; else planner::kMinPartition (128). PAGEDATTN_MIN_PARTITION overrides it.
int min_partition(int head_size, KvKind kv, bool mid_rows, const Overrides& o);

/// Default mode, where the one-wave partition at the kernel's occupancy would be shorter than
/// kShortWaveKeys: the CTAs per SM of the wave the planner sizes partitions for instead
/// (planner::Inputs::short_ctas_per_sm; 0: keep the occupancy). 2 for D = 64 one-byte codes (u8, fp8; their
/// 1-row-tile kernel fits 3 per SM, `occupancy`) where no sequence of the call has more than 16 rows per
/// kv head (`above_16_rows`); else 0. Deterministic mode: 0 (its partition size may depend on the row
/// alone, never on the call). PAGEDATTN_SHORT_WAVE overrides the rule.
constexpr int kShortWaveKeys = 1024;
int short_wave_ctas_per_sm(int head_size, KvKind kv, int occupancy, bool above_16_rows, bool deterministic,
                           const Overrides& o);

/// The merge kernel's threads per CTA and its partition groups (threads over the float4 chunks of the
/// D / split columns a CTA takes).
constexpr int kMergeThreads = 512;
PA_HD constexpr int merge_groups(int head_size, int split) { return kMergeThreads / (head_size / 4 / split); }
/// Deterministic mode's merge split, whatever the call: the split sets a row's fold groups (merge_groups),
/// so merge_kernel and merge_rows_kernel must both take this one.
PA_HD constexpr int deterministic_merge_split(int head_size) { return head_size / 64; }
/// Merge CTAs per row (column blocks): 1, 2 or 4 (<= D / 64).
int merge_split(int head_size, int64_t merge_rows, int num_sms, const Overrides& o);
/// Deterministic mode's merge CTAs per row: its groups stay those of deterministic_merge_split's blocks
/// (merge_kernel's kGroupSplit), its CTAs take merge_split's blocks where those groups divide over the
/// blocks' thread groups (D = 128, 256); other widths keep deterministic_merge_split.
int deterministic_merge_blocks(int head_size, int64_t merge_rows, int num_sms, const Overrides& o);
/// Partition loads in flight per merge thread: 1, 4 or 8. `max_parts`: the most partitions of a row.
int merge_batch(int head_size, int split, int max_parts, int64_t merge_rows, int num_sms, const Overrides& o);
/// Deterministic mode: whether the merge runs one thread per 4 columns of a row (merge_rows_kernel)
/// rather than a CTA per row and column block (merge_kernel, `split` blocks per row). Same bits either way.
bool merge_rowwise(int64_t merge_rows, int split, int num_sms, const Overrides& o);
/// Deterministic mode's row-wise merge: whether its threads take 8 columns of a row (where the width allows)
/// rather than 4. `ctas8`: the merge's CTAs at 8 columns (half as many as at 4). Same bits either way.
bool merge_cols8(int64_t ctas8, int num_sms, const Overrides& o);
/// Deterministic mode: whether every chunk of the call runs on the key-split Hopper kernel with a
/// partial per warpgroup (planner::Inputs::wg_partials): f16/bf16 caches where the Hopper kernel is on
/// (`key_tile` = hopper_key_tile() != 0) at its widths (64, 128, 256); else fwd_kernel's WKV = 4 layout. A
/// function of the model and the device, never of the batch (so a row's kernel is its decode's).
bool deterministic_split(int head_size, KvKind kv, int key_tile, const Overrides& o);
/// Deterministic mode on the key-split kernel (deterministic_split): the partitions per unit
/// (planner::Inputs::fold_block). A batch's CTAs that run whole blocks leave one partial per unit instead of
/// one per partition: the 32 x 8k batch's 64 partials per row at T = 8 become 8. A lone row's merge folds
/// each unit's 8 partials in series (loads in flight together).
constexpr int kFoldBlock = 8;
/// planner::Inputs::fold_block: kFoldBlock on the key-split kernel's partials (`wg_partials`) where they are f16
/// (`half_partials`: the kernel hands them over in shared memory as the merge reads them), else 0.
int fold_block(bool wg_partials, bool half_partials, const Overrides& o);

}  // namespace tuning
}  // namespace pagedattn
