#include "core/tuning.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/planner.h"

namespace pagedattn {
namespace tuning {

Overrides parse_overrides(const std::function<const char*(const char*)>& getenv) {
  Overrides o;
  auto is = [&](const char* name, const char* value) {
    const char* e = getenv(name);
    return e != nullptr && std::string(e) == value;
  };
  auto number = [&](const char* name) {  // 0 when unset or empty
    const char* e = getenv(name);
    return e != nullptr && *e != '\0' ? std::atoi(e) : 0;
  };
  o.early_reads = !is("PAGEDATTN_EARLY_READS", "0");
  o.stale_max = !is("PAGEDATTN_STALE_MAX", "0");
  o.half_partials = !is("PAGEDATTN_HALF_PARTIALS", "0");
  o.prefill_mt2 = !is("PAGEDATTN_PREFILL_MT2", "0");
  o.wgmma_u8 = !is("PAGEDATTN_WGMMA_U8", "0");
  o.wgmma = is("PAGEDATTN_WGMMA", "0") ? 0 : is("PAGEDATTN_WGMMA", "64") ? 64 : is("PAGEDATTN_WGMMA", "128") ? 128 : -1;
  o.wg_split = is("PAGEDATTN_WG_SPLIT", "0")   ? 0
               : is("PAGEDATTN_WG_SPLIT", "1") ? 1
               : is("PAGEDATTN_WG_SPLIT", "2") ? 2
               : is("PAGEDATTN_WG_SPLIT", "3") ? 3
                                               : -1;
  o.wg_shared = is("PAGEDATTN_WG_SHARED", "0") ? 0 : is("PAGEDATTN_WG_SHARED", "1") ? 1 : -1;
  o.wgs_shared = is("PAGEDATTN_WGS_SHARED", "0") ? 0 : is("PAGEDATTN_WGS_SHARED", "1") ? 1 : -1;
  if (const char* e = getenv("PAGEDATTN_WIDE_PREFILL"); e != nullptr && *e != '\0') o.wide_prefill = is("PAGEDATTN_WIDE_PREFILL", "1");
  const int split = number("PAGEDATTN_MERGE_SPLIT"), batch = number("PAGEDATTN_MERGE_BATCH");
  o.merge_split = split == 1 || split == 2 || split == 4 ? split : 0;
  o.merge_batch = batch == 1 || batch == 4 || batch == 8 ? batch : 0;
  o.merge_rowwise = is("PAGEDATTN_MERGE_ROWWISE", "0") ? 0 : is("PAGEDATTN_MERGE_ROWWISE", "1") ? 1 : -1;
  o.merge_cols = is("PAGEDATTN_MERGE_COLS", "4") ? 4 : is("PAGEDATTN_MERGE_COLS", "8") ? 8 : 0;
  o.units = !is("PAGEDATTN_UNITS", "0");
  const int min_part = number("PAGEDATTN_MIN_PARTITION");
  o.min_partition = min_part >= 64 && min_part <= 4096 && min_part % 64 == 0 ? min_part : 0;
  if (const char* e = getenv("PAGEDATTN_SHORT_WAVE"); e != nullptr && e[0] >= '0' && e[0] <= '8' && e[1] == '\0')
    o.short_wave = e[0] - '0';
  o.half_rows = !is("PAGEDATTN_HALF_ROWS", "0");
  o.keys_on_m = is("PAGEDATTN_KEYS_ON_M", "0")   ? 0
                : is("PAGEDATTN_KEYS_ON_M", "1") ? 1
                : is("PAGEDATTN_KEYS_ON_M", "2") ? 2
                                                 : -1;
  o.deterministic_rows = is("PAGEDATTN_DETERMINISTIC_ROWS", "16") ? 16 : 0;
  o.deterministic_split = is("PAGEDATTN_DETERMINISTIC_SPLIT", "0") ? 0 : is("PAGEDATTN_DETERMINISTIC_SPLIT", "1") ? 1 : -1;
  return o;
}

Overrides read_overrides() {
  return parse_overrides([](const char* name) { return std::getenv(name); });
}

// The Hopper kernel (wg_kernel, wgmma) for the 8-row-tile chunks: sm_90 devices, builds with sm_90a
// code. Key tiles: 64 at D = 64 and 128, 32 at D = 256 (shared memory). At D = 128, 128-key tiles (3 ring
// slots) were 1.02-1.04x faster than 64 on bf16 prefill (run s4dev5) until the 64-key ring (5 slots)
// took per-slot mbarriers and warpgroup turns (WgTraits::kMbar): then 64 keys ran bf16 prefill 1.045x /
// 1.002x faster at 8k / 32k (run mb2) and 65-256-row verifies 0.873-1.006x the time (median 0.941, mb1). u8 caches on it too (codes
// converted to f16 in shared memory, 64-key tiles): a 1024-token chunk at 32k 2099.7 vs 3779.9 us on
// mma.sync, the mixed batch 959.7 vs 1455.1 us (H200, run s5a).
int hopper_key_tile(int head_size, bool u8, bool hopper, const Overrides& o) {
  if (!hopper || (u8 && !o.wgmma_u8)) return 0;
  int tile = head_size == 256 ? 32 : 64;
  if (o.wgmma == 0) tile = 0;
  else if (o.wgmma > 0 && head_size <= 128 && !u8) tile = o.wgmma;
  return tile;
}

// D = 64's 128-row chunks on 128-key tiles (one CTA per SM, 6 ring slots of 32 KB) against the 64-key rule
// (two CTAs per SM past 16k keys, hopper_shared): PAGEDATTN_WGMMA=128 against the default in the same call,
// one sequence, Hk = 4, runs k1 (H100) and k2 (H200, bench/results/2026-12-05-k2-2c74cfe-h200/
// sweep_ratio_k128_new.txt; keys per SM = chunks x keys x Hk / 132):
// - 128k: 128 rows 0.977-0.982x (H100 0.991-1.004x), 256 rows 0.931x (0.933-0.938x), 512 rows 0.916x
//   (0.908x); keys per SM 3972 and more;
// - 32k: 256 rows 0.983-0.993x (0.970-0.998x; 1986 keys per SM), 512 rows 0.954x (0.945x); 128 rows
//   1.037-1.046x slower (1.052-1.076x; 993);
// - 8k: 1.02-1.09x slower at every row count (1.02-1.12x);
// - bf16 prefill from zero (32/8/64, 64/8/64): 32k 0.961-0.962x the time, 8k level / 1.039x slower.
// So past 16k keys and from kWideTileKeys (1536, between the measured 993 and 1986) keys per SM. Run k3
// (H200), this rule against the one before it in the same call: the rows it moves 0.91-0.99x the time,
// those it leaves level, bf16 prefill at 32k 0.965x. Calls of one sequence only: a mixed call sums the
// 128-row chunks of its sequences past kSplitShortKeys (long_key_heads; unmeasured). Not with
// PAGEDATTN_WG_SHARED=1, which asks for the two-CTA (64-key) form.
int wide_key_tile(int head_size, KvKind kv, int key_tile, int64_t long_key_heads, int num_sms, const Overrides& o) {
  if (head_size != 64 || kv != KvKind::f16 || key_tile != 64 || o.wgmma > 0 || o.wg_shared == 1) return key_tile;
  return long_key_heads >= kWideTileKeys * num_sms ? 128 : key_tile;
}

// The key-split Hopper kernel (wg_kernel's SPLIT: two warpgroups over alternate key tiles of one 64-row
// tile) for f16/bf16 chunks of 33-64 rows, every head size. G = 8, one sequence, H200: at D = 128
// against fwd_kernel's 4 row tiles 0.73x (32k) / 0.63-0.66x (128k), against the one-warpgroup kernel
// (wgq, removed after c7eeed8) 0.87x / 0.80x (run c2, G = 8 and 16); D = 64 0.87x / 0.73x, D = 256
// 0.84x / 0.83x (run c3). 17-32-row chunks against fwd_kernel's 2 row tiles (run d5, sweep_wgsplit2;
// confirmed in the same-run A/B of run inv6, wgsplit_ab.txt):
// - D = 256: 0.930 / 0.918 / 0.938x at 8k / 32k / 128k (the seed's T = 8; run d2);
// - D = 128: 0.80-0.96x at 8k, 0.97x at 128k, 0.85x on the 32 x 8k batch (T = 4, G = 8), 1.010-1.024x
//   at 32k (inv6): taken at every context;
// - D = 64: 0.86-0.96x at 8k and 0.75x on the batch, but 1.13-1.18x slower at 32k and 128k (d5): taken
//   when no sequence of the call sees more than 16k keys (`max_keys`; 16k itself was not measured).
// fp8 (codes converted in place in f16's ring; the sweep against fwd_kernel, runs f8s1 and f8s2):
// - 33-64 rows: D = 64 0.77-0.89x at every context, 0.47x on the batch (T = 8, G = 8); D = 128 0.71-0.92x
//   at 8k, 0.99x at 32k/128k, 0.84x on the batch; D = 256 0.82-0.94x at 8k but 1.10x slower at 32k/128k
//   (1.00x on the batch): D = 256 only up to 16k keys;
// - 17-32 rows: D = 64 0.84-0.98x at 8k (taken like f16's, up to 16k keys); D = 128 and 256 1.57-1.89x
//   slower at 32k/128k, 1.03-1.14x at 8k, 1.66-1.79x on the batch (T = 4): never. The kernel's loop is
//   bound by its per-tile instructions (Nsight, f8s2: 4.8-5.7 cycles per issued instruction, 2 warps per
//   scheduler), and an fp8 tile carries half an f16 tile's bytes for more instructions (the conversion).
// u8 (codes converted in place as fp8's, the per-key parameters in arrays of their own), on the
// producer form (two producer warps per ring convert; run wp1, the u8 sweep with PAGEDATTN_WG_SPLIT=1
// against the rule of run u8s1 in the same call):
// - 33-64 rows: D = 128 0.76-0.80x fwd_kernel's time at 32k and 128k (taken at 8k already); D = 256
//   0.79-0.80x at 8k, 0.93-0.94x at 32k and on the 32 x 8k batch (T = 8), 0.99-1.07x at 128k: up to
//   kSplitMidKeys (40k) keys. (Before the producer, run u8s1: D = 128 1.05x slower at 128k, D = 256
//   1.11-1.33x at 32k/128k.)
// - 17-32 rows (PAGEDATTN_WG_SPLIT=2, run wp1): 1.25-1.84x slower at 32k/128k, 0.93-1.09x at 8k: never
//   at D = 128 / 256. D = 64's form dequantises since 9213b7a (the consumers run f16's loop): 17-32 rows
//   there 0.68-0.98x fwd_kernel's time at 8k and 0.70x on the 32 x 8k batch (T = 4, G = 8), but 0.74-1.09x
//   at 32k and 1.11-1.16x slower at 128k (run u8r17, the sweep at D = 64 against PAGEDATTN_WG_SPLIT=2 in the
//   same call), so taken up to 16k keys, as f16's and fp8's.
// PAGEDATTN_WG_SPLIT=1 / 2 / 3: 33-64 / 17-64 / 1-64 rows at every head size and cache type.
// f16/bf16 D = 64 past 16k keys on the two-CTA form (wgs64x2, hopper_split_shared): 17-32 rows 0.87-0.97x
// fwd_kernel's time at 32k and 0.90-0.91x at 128k (T/T1 at 128k 1.11-1.17 -> 1.01-1.05; run x2s4, one
// sequence, Hk = 4, G 1-16), so 17-64 rows there.
int hopper_split(int head_size, KvKind kv, int key_tile, int64_t max_keys, bool two_ctas, const Overrides& o) {
  if (key_tile == 0 || o.wg_split == 0) return 0;
  if (o.wg_split == 1) return 4;
  if (o.wg_split == 2) return 2;
  if (o.wg_split == 3) return 1;
  const bool short_keys = max_keys <= kSplitShortKeys;
  if (head_size == 64 && kv != KvKind::f16) return short_keys ? 2 : 4;  // (u8 and fp8)
  if (kv == KvKind::u8) return head_size <= 128 || max_keys <= kSplitMidKeys ? 4 : 0;  // (a 32k verify: 32k + T)
  if (kv == KvKind::fp8) {
    return head_size == 128 || short_keys ? 4 : 0;
  }
  return head_size >= 128 || short_keys || (head_size == 64 && two_ctas) ? 2 : 4;
}

// 1-16-row f16/bf16 chunks on the key-split kernel (one CTA per SM, one-wave partitions, a 64-row tile
// of which they fill 1-16 rows) against fwd_kernel's one row tile (two CTAs per SM), PAGEDATTN_WG_SPLIT=3
// against the default in the same call, one sequence, Hk = 4, G 1-16, T 1-16 and 16-node trees (runs ss1
// and ss2; drift 0.98-1.01):
// - 128k: 0.926-0.944x at D = 256 (85-88% of the read ceiling -> 92-93.5%), 0.953-0.967x at D = 128,
//   0.935-0.961x at D = 64; 64k: D = 256 0.946-0.972x, D = 128 0.979-1.003x, D = 64 0.994-1.007x;
// - 32k: D = 256 0.980-1.020x, D = 64 / 128 1.03-1.07x slower (but 0.93-0.96x at G = 1, T = 16); 8k and
//   16k: 1.02-1.13x slower for decodes (the chains of 16 rows at G = 1 / 2 0.86-0.92x);
// - the 32 x 8k batch, T = 1 (G = 8): 0.884 / 0.911 / 0.916x at D = 64 / 128 / 256; the seed's shape
//   (16 / 4 / 256) at 8k, T = 1 / 4: 4 sequences 0.980 / 0.953x, 8 0.939 / 0.922x, 16 0.937 / 0.916x,
//   32 0.929 / 0.907x, 64 0.946 / 0.944x; 32 / 4 / 128 at T = 1: 4 sequences 1.013x, 8-64 0.962-0.969x
//   (run ss3).
// So what decides is the call's work for those chunks, keys times kv heads: 2^18 (one 64k sequence or
// eight 8k ones at Hk = 4) and more on the kernel; 2^17 (a 32k sequence, four 8k ones) stays on
// fwd_kernel. u8 and fp8 never (their in-place conversion: 1.4-2.3x slower on the seed rows, run ss2).
// Other kv-head counts follow the same product (runs re1, re2: at Hk = 1 and 8, 2^17 keys times kv heads
// stays 1.01-1.07x faster on fwd_kernel for decodes and <= 8-row verifies at D = 64 / 128, and 2^18-2^19
// 1.02-1.06x faster on the kernel at D = 256, 0.99-1.05x at D = 128). The crossover depends on the head
// size: at D = 256 a 48k sequence at Hk = 4 (1.5 x 2^17) takes 0.960-0.995x the time on the kernel (run
// re2) where 2^17 is level (0.980-1.020, run ss2), so D = 256 takes it from 3 x 2^16 (run re3: 0.949-0.978x
// at 48k); at D = 64 fwd_kernel took 0.980-1.000x the kernel's time at 2^18 (re2, Hk = 8; Hk = 1
// 0.987-1.001; Hk = 4 at 64k level, ss1): kept at 2^18.
// Only where the call's 17-32-row chunks take the kernel already (`split` == 2), so that the rule moves no
// chunk but the <= 16-row ones: at D = 64 past 16k keys that is the two-CTA form (the form run ss1
// measured there); its one-CTA form keeps 17-32 rows off the kernel past 16k keys (1.13-1.18x slower,
// run d5).
bool hopper_split_small(int head_size, KvKind kv, int split, int64_t small_key_heads, const Overrides& o) {
  return split == 2 && o.wg_split < 0 && kv == KvKind::f16 && small_key_heads >= split_small_key_heads(head_size);
}

// Two CTAs per SM (registers bounded to 128) for D = 64's 128-row f16/bf16 chunks, against one (run mb2,
// same call): bf16 prefill 1.26x / 1.31x faster at 8k / 32k tokens, 65-256-row verifies 0.80-0.83x the
// time at 128k and 0.88-0.94x at 32k, but 128-row verifies at 8k (one sequence, Hk = 4: 4 chunk CTAs)
// 1.10-1.16x slower, and as slow with partitions of 4 tiles instead of 2 (run mb3): one CTA per SM there.
// The rule against one CTA everywhere (run mb4): 65-256-row median 0.934x (0.835-1.003), prefill 1.26x /
// 1.31x faster at 8k / 32k.
bool hopper_shared(int head_size, KvKind kv, int key_tile, int64_t max_keys, int64_t wide_ctas, int num_sms,
                   const Overrides& o) {
  if (head_size != 64 || key_tile != 64 || kv != KvKind::f16 || o.wg_shared == 0) return false;
  return o.wg_shared == 1 || max_keys > kSplitShortKeys || wide_ctas >= num_sms;
}

// The key-split kernel at D = 64 on two CTAs per SM (3 slots per ring, 128 registers) against one (6 slots),
// same call (f16, Hk = 4, H = 32; 33-64 rows): one sequence 0.89-0.92x the time at 32k and 128k (T/T1 at
// 128k 1.23-1.26 -> 1.11-1.13), but 1.06-1.11x slower at 8k and the 32 x 8k batch 1.46x (T = 4) / 2.07x
// (T = 8) slower (run x2s1); batches at 32k, T = 8: 8 sequences 0.911x, 16 sequences 0.903x (run x2s2). So
// past 16k keys while the call's such chunks times the kv heads are at most half the SMs (16 x 4 = 64 on
// 132 was measured; 32 x 4 at 8k is the slow batch).
bool hopper_split_shared(int head_size, KvKind kv, int split, int64_t max_keys, int64_t split_ctas, int num_sms,
                         const Overrides& o) {
  if (head_size != 64 || split == 0 || kv != KvKind::f16 || o.wgs_shared == 0) return false;
  return o.wgs_shared == 1 || (max_keys > kSplitShortKeys && 2 * split_ctas <= num_sms);
}

// 128-row chunks for prefill: the default at D <= 128, where on 8-warp mma.sync CTAs they measured
// 1.09-1.11x faster on prefill from zero (H200, run s3a), and wherever the Hopper kernel takes them; at
// D = 256 on mma.sync they were 0.88x (one CTA per SM with 1/2 the key tile). Only where the
// 8-row-tile variant fits the device's shared memory (sm_80 at D = 256 does not).
bool wide_chunks(int head_size, int key_tile, bool wide_fits, const Overrides& o) {
  const bool wide = o.wide_prefill >= 0 ? o.wide_prefill == 1 : head_size <= 128 || key_tile != 0;
  return wide && wide_fits;
}

// Merge CTAs per row: split the row's columns while the merge grid stays within one CTA per SM. Few
// rows (decode): more, shorter CTAs (8k T=1: 1.14x faster than whole rows); many rows: a large merge
// grid holds the SMs that the next grid's CTAs need (8k T=8: 1.17x slower with 512 merge CTAs). (H200,
// same-run A/B in runs s3c and s3d.) Deterministic mode takes it too at D = 128 / 256, its groups kept
// (run dm2, H100: 0.78-0.97x the time of its fixed D / 64 blocks at T = 8).
int merge_split(int head_size, int64_t merge_rows, int num_sms, const Overrides& o) {
  if (o.merge_split > 0 && o.merge_split <= std::max(1, head_size / 64)) return o.merge_split;
  int split = 1;
  while (split * 2 <= head_size / 64 && merge_rows * split * 2 <= num_sms) split *= 2;
  return split;
}

// A 128-row call (the seed's T = 8) on 4 blocks per row took 4 waves of one-per-SM merge CTAs, 15.9 us a
// layer, where one block per row takes 9.6; on this rule the seed's rows take 0.78-0.97x their time at
// T = 8, level at T = 1-2, where it keeps 4 blocks (one took 9.2 us against 6.0) (runs dm1, dm2, H100).
// Fewer blocks only where each thread gets whole groups (merge_kernel's static_assert): D = 192's 32
// groups do not divide over the 10 / 21 thread groups of 1 / 2 blocks, so it keeps 3.
int deterministic_merge_blocks(int head_size, int64_t merge_rows, int num_sms, const Overrides& o) {
  const int groups_split = deterministic_merge_split(head_size);
  const int split = std::min(merge_split(head_size, merge_rows, num_sms, o), groups_split);
  return merge_groups(head_size, groups_split) % merge_groups(head_size, split) == 0 ? split : groups_split;
}

// Partition loads in flight per merge thread: as many as a thread folds (one batch), of 1, 4 or 8. More
// costs registers (32, 52, 74), so fewer merge CTAs per SM: the 32 x 8k batch, 1-3 partitions per row,
// was 1.5-3.4% slower with 4 (run s9a); 8 only while the merge grid fits one CTA per SM. (Run s9a, batch
// 8 against 4: T=3 rows, 5 partitions per thread, 0.96-0.99x; T=1 rows, 3 per thread, 1.001-1.017x. Runs
// s10a/s10b, this rule against 4: T=3 rows 0.976-0.995, the rest level but u8 128k T=8, 1.02-1.04, a
// row whose drift was 2-5% in both.)
int merge_batch(int head_size, int split, int max_parts, int64_t merge_rows, int num_sms, const Overrides& o) {
  if (o.merge_batch > 0) return o.merge_batch;
  const int groups = merge_groups(head_size, split);
  const int per_thread = (max_parts + groups - 1) / groups;
  const bool one_wave = merge_rows * split <= num_sms;
  return per_thread <= 1 ? 1 : per_thread <= 4 || !one_wave ? 4 : 8;
}

// Deterministic mode fixes the split (D / 64), so a call of many rows runs many merge CTAs of 512 threads
// (one per SM at D >= 128: 82 registers per thread), each waiting its loads and its serial combine in
// turn. The 32 x 8k batch's merges (2048 / 8192 / 16384 CTAs at T = 1 / 4 / 8) took 42 / 159 / 320 us
// (ncu, bench/results/2026-12-03-ncu-c0cffb9-h200), reading 18 / 70 / 141 MB; on the thread-per-columns
// kernel the batch took 0.87 / 0.68 / 0.79 of its time (run mr). Lone sequences (at most 128 rows x 4
// CTAs at the seed's shape) keep merge_kernel, as measured in the mode's cost runs: its groups fold in
// parallel, where one thread would fold a row's 32-64 partitions in series (a lone 128k row has 64).
// The threshold, 4 CTAs per SM, sits between the two; the crossover itself is not measured.
bool merge_rowwise(int64_t merge_rows, int split, int num_sms, const Overrides& o) {
  if (o.merge_rowwise >= 0) return o.merge_rowwise == 1;
  constexpr int kCtasPerSm = 4;
  return merge_rows * split > static_cast<int64_t>(num_sms) * kCtasPerSm;
}

// 8 columns per thread share a row's scalar work (its m, l and weights) over twice the bytes, at 4 CTAs per
// SM; they also halve the CTAs. The 32 x 8k batch (H100, ncu): at T = 4 / 8 (512 / 1024 CTAs at 8 columns)
// 34.3 / 61.3 us against 51.3 / 95.6 at 4 columns (run 2026-12-07-mc8-23b29c3-h100); at T = 1 (128 CTAs,
// fewer than the SMs) 22.6 against 18.3 us, the batch 1.011 / 1.016x slower for f16 / u8 (run mc8c). So 8
// columns where their CTAs give every SM one; the crossover between 128 and 512 CTAs is not measured.
bool merge_cols8(int64_t ctas8, int num_sms, const Overrides& o) {
  if (o.merge_cols != 0) return o.merge_cols == 8;
  return ctas8 >= num_sms;
}

// The least partition: 256-key partitions (fewer CTAs of more bytes each) where 128 cost more. One
// sequence, H200. Run mp1 (8k, Hk = 4, --partition 128 / 256 against the default, which was 128 for
// chunks of <= 16 rows): f16 D = 128 decodes (G = 8, 16) 0.909 / 0.926x the time with 256, D = 64
// 0.952-0.974x, but D = 256 (the seed's shape) 1.029-1.103x slower. Run mp2 (8k and 16k, Hk = 2,
// G = 1 / 4 / 8, T = 1, 2, 4 and 16-node trees; PAGEDATTN_MIN_PARTITION=128 and =256 against a first
// rule of 256 for f16 at D <= 128 only; drift 0.988-1.031): f16 D = 64 / 128 with 128 keys up to 1.185x
// slower (64 CTAs at 8k as well as 128 at 16k), none faster beyond the drift; f16 D = 256 with 256 keys
// 0.880-1.108x (slower on 8k decodes: kept at 128). One-byte codes with 256 keys, rows other than 17-32
// per kv head: fp8 0.856-1.005x at D = 64 / 128 / 256, u8 0.930-1.004x at D = 64 / 128 but 0.949-1.111x
// at D = 256; 17-32 rows (G = 8, T = 4): u8 D = 128 1.009-1.143x, fp8 D = 128 0.988-1.046x, u8 D = 256
// 1.008-1.036x slower, fp8 D = 64 / 256 0.91-1.00x. Run mp4 (the seed's shape, 8k / 32k and the
// 32 x 8k batch, PAGEDATTN_MIN_PARTITION=256 against the rule of run mp3): fp8 8k T = 8 (32 rows) 0.919x
// (184.6 -> 169.7 us), so fp8 keeps 128 for 17-32-row calls at D = 128 only; u8 D = 256 8k T = 3 0.911x
// but T = 1 1.061x: left at 128. 32k and the batch level.
// D = 64 one-byte codes: the 1-row-tile kernel fits 3 CTAs per SM (129-146 registers, ~66 KB), and the
// one-wave partition at 3 per SM is uneven where it is short: one 32k decode at Hk = 4 on 132 SMs gets
// 384-key partitions, 344 CTAs: 80 SMs run 3 of them, 52 run 2 (no per-SM timeline taken). A wave of 2 per SM
// (512 keys, 256 CTAs) took 0.86-1.00x the time on 1-16-row calls at 32k (H100, run wv2: median 0.941,
// fp8 0.88-0.95, u8 0.86-1.00; H200, run wv1: fp8 0.88-0.98, u8 0.86-1.03), while at 128k the 3-per-SM
// wave (1344 keys, 392 CTAs) is the faster one (run wv1: 2 per SM took u8 1.19-1.27x, fp8 0.96-1.09x; the
// 32 x 8k batch's u8 T = 1 1.18x). So the rule applies below kShortWaveKeys, between the measured 384
// (2 per SM faster) and 1344 (3 faster); the boundary in between is not measured. At 8k both waves give
// the least partition (256 keys). Rows of 17+ per kv head and f16/bf16 (2 CTAs per SM already) keep the
// rule before it.
int short_wave_ctas_per_sm(int head_size, KvKind kv, int occupancy, bool above_16_rows, bool deterministic,
                           const Overrides& o) {
  if (deterministic) return 0;
  if (o.short_wave >= 0) return o.short_wave;
  return head_size == 64 && kv != KvKind::f16 && !above_16_rows && occupancy > 2 ? 2 : 0;
}

// fwd_kernel's HR variant against its 16-row variant, PAGEDATTN_HALF_ROWS=0 in the same call (H100, run
// hr2: one sequence, Hk = 4, G 1 / 4 / 8, T with G x T <= 8, 8k / 32k / 128k; noise 0.99-1.01), time ratios:
// u8 D = 64 0.945 / 0.947 / 0.979 (8k / 32k / 128k), D = 128 0.960 / 0.997 / 0.991, D = 256 0.966 / 0.997 /
// 1.004; fp8 D = 64 0.953 / 0.980 / 0.995, but D = 128 0.981 / 1.008 / 1.006 and D = 256 1.046 / 1.022 /
// 1.014; f16 D = 64 0.884 / 1.028 / 0.999 (its 3 CTAs per SM move the wave), D = 128 / 256 0.985-1.001.
// The 32 x 8k batch (G = 8, T = 1: 8 rows): u8 0.980 / 0.988 / 1.005 (D = 64 / 128 / 256), fp8 D = 64 0.998.
// So u8 at every head size and fp8 at D = 64 take it.
bool half_rows(int head_size, KvKind kv, bool deterministic, const Overrides& o) {
  if (deterministic || !o.half_rows) return false;
  const bool width = head_size == 64 || head_size == 128 || head_size == 256;
  return width && (kv == KvKind::u8 || (kv == KvKind::fp8 && head_size == 64));
}

// fwd_kernel's KT variant against the default (the HR variant where half_rows takes it, else the 16-row one),
// PAGEDATTN_KEYS_ON_M=1 / 2 in the same call (H100, runs kt2 and kt3: the seed rows, the 32 x 8k batch, and
// one sequence at G 1 / 4 / 8, T with G x T <= 8, 8k / 32k / 128k; the 16-row rows of the same sweep, on
// the default kernel in both builds, 0.996-1.006), time ratios, KT / KT+ (one CTA per SM more):
// fp8 D = 256 sweep medians 0.976 / 0.967 (KT+ 0.891-1.006), seed 0.950-0.978 / 0.910-0.984, batch 0.981 /
// 0.977; fp8 D = 128 0.989 / 0.975, but KT+ 1.062-1.114 at 32k (every G; not the wave's balance across SMs,
// run bw1) where KT is 0.978-0.999; u8 D = 256 0.989 / 0.972 (KT+ 0.917-1.005), seed KT+ 1.003-1.005
// at 8k and 0.964-0.976 at 32k / 128k, batch 0.976; u8 D = 128 1.019 / 0.998 (KT+ 1.039-1.117 at 32k);
// D = 64 u8 1.031 / 1.032, fp8 1.000 / 1.002 (run kt2). So D = 256 takes KT+, fp8 D = 128 KT, the rest HR.
int keys_on_m(int head_size, KvKind kv, bool deterministic, const Overrides& o) {
  if (deterministic || kv == KvKind::f16) return 0;
  if (o.keys_on_m >= 0) return o.keys_on_m;
  return head_size == 256 ? 2 : head_size == 128 && kv == KvKind::fp8 ? 1 : 0;
}

int min_partition(int head_size, KvKind kv, bool mid_rows, const Overrides& o) {
  if (o.min_partition > 0) return o.min_partition;
  constexpr int kLonger = 256;
  switch (kv) {
    case KvKind::f16: return head_size <= 128 ? kLonger : planner::kMinPartition;
    case KvKind::u8: return head_size <= 128 && !mid_rows ? kLonger : planner::kMinPartition;
    case KvKind::fp8: return !(mid_rows && head_size == 128) ? kLonger : planner::kMinPartition;
  }
  return planner::kMinPartition;
}

// Deterministic mode's f16/bf16 chunks on the key-split Hopper kernel (wgs: 1-64 rows in one 64-row
// wgmma tile, its warpgroups on the key tiles of even and odd index from the partition start, a partial
// each): decodes and verifies share its layout, so a verify row is its decode's whatever the rows of its
// chunk, and its 17-32-row chunks are the default's own kernel where fwd_kernel's 8-warp layout cost the
// mode 1.13-1.25x at 32k (run fl1, H100). Its decodes measured 0.93-1.02x fwd_kernel's time at 32k-128k,
// D = 256 (runs ss1-ss3). f16 against fwd_kernel's layout in the same call, deterministic / default (runs
// dks1, dks3, H100, the seed shape): 32k T = 1-8 0.970-1.119 (on fwd_kernel 0.994-1.209), 128k
// 0.993-1.038 (1.037-1.124), 8k T = 8 1.27 (1.21), the 32 x 8k batch 1.16 / 1.42 / 1.78 (1.15 / 1.31 / 1.54:
// two partials per partition, one per warpgroup). u8 and fp8 stay on fwd_kernel (on the key-split kernel
// 1.4-2.3x slower at <= 16 rows, run ss2).
bool deterministic_split(int head_size, KvKind kv, int key_tile, const Overrides& o) {
  if (o.deterministic_split == 0) return false;
  return kv == KvKind::f16 && key_tile != 0 && (head_size == 64 || head_size == 128 || head_size == 256);
}

int fold_block(bool wg_partials, bool half_partials, const Overrides& o) {
  return wg_partials && half_partials && o.units ? kFoldBlock : 0;
}

}  // namespace tuning
}  // namespace pagedattn
