// The Hopper prefill kernel: 128-row chunks (tokens x heads of one kv head) on warpgroup MMAs (sm_90a).
//
// Same work items, partial slots and output as fwd_kernel's 8-row-tile variant, which it replaces on
// sm_90a (u8 caches too: codes converted to f16 in shared memory, below). Two warpgroups of 64 rows
// share each key tile (32, 64 or 128 keys):
//   K and V tiles are gathered through the block table by cp.async into shared memory in the 128-byte
//   swizzled layout: one-CTA 128-row forms and the key-split forms of one-byte codes by a third
//   warpgroup, the producer, into rings of per-slot mbarriers (WgTraits::kProducer, kMbar; the 128-row
//   consumers take turns at the tensor cores); other forms by the consumers themselves (a kStages-deep
//   ring, one commit group per tile, or the mbarriers of the two-CTA form);
//   S = Q K^T: wgmma m64n64k16 with Q and K both read from shared memory (no ldmatrix traffic);
//   masks, ALiBi and the online softmax on the S accumulators in registers;
//   O += P V: wgmma m64nDk16 with P from registers (the S accumulator layout is the A fragment
//   layout) and V read N-major from shared memory (imm-trans-b).
// The 8-warp mma.sync variant reads every K/V fragment from shared memory once per 16 rows; here the
// tensor cores read the operands themselves, which is what bounded that variant (bench/NOTES.md).
#pragma once

#include "cuda/common/wgmma.cuh"
#include "cuda/fwd/gather.cuh"
#include "cuda/fwd/lse.cuh"
#include "cuda/fwd/write.cuh"

namespace pagedattn {
namespace cuda {

// Two warpgroups of 64 rows: 128-row chunks (prefill, long verifies) sharing each key tile, or (SPLIT,
// wgs) chunks of up to 64 rows: one 64-row tile whose key tiles alternate between the two warpgroups (the
// MMA shape is 64 rows whatever T*G is, so 1-64 rows cost the same tensor work; which chunks take it:
// tuning::hopper_split, hopper_split_small). Each warpgroup reads
// its own ring, filled by its own copies (f16/bf16; it meets only its own threads at a named barrier) or
// by two warps of a producer warpgroup that convert one-byte codes in place (mbarriers), so an SM runs
// two independent streams (a CTA-wide barrier per tile would make it one: bench/NOTES.md, run s12e);
// their (m, l, O) are combined in shared memory at the end.
template <int D, int KV, int KEYS = 64, bool SPLIT = false, bool SHARED = false>
struct WgTraits {
  static_assert((D <= 128 && (KEYS == 64 || KEYS == 128)) || (D == 256 && KEYS == 32), "head size / key tile");
  static_assert(KV == kKvF16 || KV == kKvBF16 || ((KV == kKvU8 || KV == kKvF8) && KEYS == (D == 256 ? 32 : 64)),
                "cache type");
  // SPLIT: two warpgroups, every cache type. (u8 on it with three conversion buffers per ring and
  // 32-key tiles at D = 128, commit 7aba6f4, ran level with fwd_kernel at 64 rows, run c4; it now
  // converts in place, below.)
  using T = typename KvTraits<KV>::mma_t;
  // u8: affine codes, each key row's f16 scale and minimum. kDequant (the 128-row forms, and the
  // key-split forms at D = 64): the producer turns them into the f16 values min + code * scale (one
  // rounding), so the consumers run f16's loop; kFold (the key-split forms at D = 128 / 256): the MMAs
  // run on exact codes (keys biased by 1024, values centred) and the consumers fold the parameters per
  // key, as fwd_kernel does (docs/design.md, "u8 on the Hopper kernel": there the producer's two warps
  // per ring bound the dequantisation, 1.04-1.10x slower, run u8d; at D = 64 it is 0.85-0.93x, run u8w).
  static constexpr bool kU8 = KV == kKvU8;
  static constexpr bool kFold = kU8 && SPLIT && D > 64;
  static constexpr bool kDequant = kU8 && !kFold;
  static constexpr bool kF8 = KV == kKvF8;     // e4m3 codes: the kv head's scales fold into S and O
  static constexpr bool kBytes = kU8 || kF8;   // one-byte codes: staged, then converted to f16 tiles
  // u8 and fp8 on SPLIT: converted in place. The codes of 16-byte chunk c of a row land where the row's
  // f16 chunk 2c goes, and the thread that copied them converts them into chunks 2c and 2c + 1 (no other
  // thread's codes are there), so the ring is f16's: same slots, depth and refill rule, no conversion
  // buffers (each ring's three would not fit two rings at D = 256). u8's per-key parameters go to arrays
  // of their own after the rings and the query sums (kParSlot per ring slot), so each slot stays
  // 1024-byte aligned.
  static constexpr bool kInPlace = kBytes && SPLIT;
  static constexpr int kRows = SPLIT ? 64 : 128;
  static constexpr int kKeys = KEYS;   // keys per tile (D = 256: 32, so that Q and a 5-slot ring fit)
  // The one-CTA 128-row forms (f16/bf16 on rings of >= 5 slots, a tile's K and V <= 48 KB: D = 64 / 128 on
  // 64-key tiles, D = 256 on 32-key ones; u8 and fp8): a third warpgroup, the producer, issues every copy
  // (and converts one-byte codes to f16 tiles); the two consumer warpgroups only wait for tiles and
  // release them (kMbar below). The registers move to the consumers (setmaxnreg, below).
  // SPLIT with one-byte codes: a producer too, two of its warps per ring, which copy the codes into the
  // ring in place and convert them there (kInPlace), off the consumers' path.
  static constexpr bool kProducer = !SHARED && (SPLIT ? kBytes : kBytes || 4 * kKeys * D <= 48 * 1024);
  static constexpr int kConsumerThreads = 256;                  // two warpgroups of 64 rows (or key tiles)
  static constexpr int kThreads = kProducer ? 384 : 256;
  static constexpr int kRings = SPLIT ? 2 : 1;                 // rings of copy stages (one per stream)
  static constexpr int kCopyThreads = kProducer ? 128 / kRings : kThreads / kRings;  // threads that fill one ring
  static constexpr int kReleaseThreads = kConsumerThreads / kRings;  // threads that read one ring's tiles
  // (one-byte codes: the conversion needs more than 40 registers; 32 bytes spilled at D = 128 and 256)
  // (SPLIT: each producer thread converts twice the codes, in 64-thread rings; at 56, 4-12 bytes spilled)
  static constexpr int kProducerRegs = SPLIT ? 72 : kBytes ? 56 : 40;
  static constexpr int kConsumerRegs = SPLIT ? 216 : kBytes ? 224 : 232;
  static_assert(!kProducer || 128 * kProducerRegs + kConsumerThreads * kConsumerRegs <= 64 * 1024 - 1024,
                "register budgets: the entry count of 384 threads is 168");
  static constexpr int kChunks = D / 8;                      // 16-byte chunks per row
  static constexpr int kQBytes = kRows * D * 2;              // D/64 blocks of [kRows][128 bytes]
  static constexpr int kTileBytes = kKeys * D * 2;           // K (or V) of one tile: D/64 blocks of [64][128 bytes]
  // f16/bf16: a ring of (K, V) tiles in the MMA layout. u8 and fp8 (PAGEDATTN_WGMMA_U8=0: mma.sync
  // instead): a ring of staging slots (K and V codes, row-major, then u8's 4 parameter arrays), the codes
  // converted by the producer threads that loaded them into three (K, V) f16 buffers in the MMA layout (one being
  // converted, one read by the S MMA, one by the PV MMA in flight), and (kFold) the rows' query sums; u8
  // and fp8 on SPLIT: f16's ring, converted in place (above).
  static constexpr int kStageBytes = kInPlace ? 2 * kTileBytes
                                     : kU8 ? 2 * kKeys * D + 4 * kKeys * 2 : kF8 ? 2 * kKeys * D : 2 * kTileBytes;
  static constexpr int kParSlot = kU8 && kInPlace ? 4 * kKeys * 2 : 0;  // u8 in place: a slot's parameters
  static constexpr int kQsumBytes = kFold ? kRows * 4 : 0;
  static constexpr int kParOff = kInPlace ? 0 : 2 * kKeys * D;           // ... else in its staging slot
  static constexpr int kConvBytes = kBytes && !kInPlace ? 3 * 2 * kTileBytes : 0;
  // ring depth (tiles ahead = kStages - 2): kProducer and one-byte codes what fits, <= 6 (f16/bf16: 6 at
  // D = 64 / 128, 5 at D = 256; u8 6 / 5 / 4; fp8 6 / 6 / 4); the two-CTA form 5, 128-key tiles at D = 128 3;
  // SPLIT: what fits each ring, <= 6 (SHARED: half the SM's shared memory)
  static constexpr int kBudget = SHARED ? 113 * 1024 : 227 * 1024;
  // kProducer: its barriers (<= 2 x 6 per ring)
  static constexpr int kProducerExtra = kProducer ? kRings * 96 : 0;
  static constexpr int kFit =
      ((kBudget - 1024 - kQBytes - kQsumBytes - kProducerExtra) / kRings - kConvBytes) / (kStageBytes + kParSlot);
  static constexpr int kStages = kBytes || SPLIT || kProducer ? (kFit > 6 ? 6 : kFit)
                                                           : (kStageBytes > 48 * 1024 ? 3 : 5);
  static_assert(kStages >= 3, "pipeline depth");
  static constexpr int kRingBytes = kConvBytes + kStages * kStageBytes;
  // 128-row f16/bf16 chunks on rings of >= 5 slots: per-slot mbarriers instead of a CTA barrier per tile
  // (each slot a "full" barrier, completed when every thread's copies of its tile have landed, and an
  // "empty" one, completed when every warp's MMAs reading it have), so the two warpgroups run apart and
  // take turns at the tensor cores (see the loop). Against the CTA barrier, same call (run mb1,
  // bench/NOTES.md): 65-256-row verifies D = 64 0.979x, D = 128 (64-key tiles) 0.942x, D = 256 0.990x the
  // time (medians); without the turns 1.010x-1.032x slower (runs mb1, mb2).
  // kProducer: the consumers' slots are the ring's (f16/bf16) or the three converted tiles (u8, fp8: the
  // staging slots are the producer's own, each thread converting the codes it copied)
  // (SPLIT with a producer: each ring's slots, full when its two producer warps have converted a tile,
  // empty when its consumer warpgroup has read it)
  static constexpr bool kMbar = kProducer || (!SPLIT && !kBytes && kStages >= 5);
  static constexpr int kCSlots = kProducer && kBytes && !kInPlace ? 3 : kStages;
  static constexpr int kBarBytes = kMbar ? 2 * kRings * kCSlots * 8 : 0;
  static_assert(2 * kRings * kCSlots * 8 <= kRings * 96 || !kProducer, "barriers in kProducerExtra");
  // SHARED: registers bounded for two CTAs per SM (D = 64, 64-key f16/bf16 tiles: ~100 KB of shared memory
  // each; 143 -> 128 registers, 4 bytes spilled), where tuning::hopper_shared takes it; SPLIT too (wgs64x2:
  // 3 slots per ring, ~108 KB), where tuning::hopper_split_shared does
  static_assert(!SHARED || (D == 64 && KEYS == 64 && !kBytes && (kMbar || SPLIT)),
                "two CTAs per SM: D = 64, 64-key f16/bf16 tiles");
  static constexpr int kMinCtas = SHARED ? 2 : 1;
  // SPLIT: the second warpgroup's O, m and l for the combine, in the first ring once it is drained
  static_assert(!SPLIT || kRingBytes >= kRows * (D + 2) * 4, "combine buffer");
  // + slack to align the base to 1024
  static constexpr int kParBytes = kRings * kStages * kParSlot;
  static constexpr int kSmem = 1024 + kQBytes + kRings * kRingBytes + kQsumBytes + kParBytes + kBarBytes;
  static_assert(kSmem <= 227 * 1024, "shared memory");
};

// Byte offset of 16-byte chunk `ch` of row `r` in a [rows][D] operand stored as D/64 blocks of
// [rows][128 bytes] in the 128-byte swizzle (chunk c of row r at c ^ (r % 8)).
__device__ __forceinline__ uint32_t sw128_offset(int r, int ch, int rows) {
  return static_cast<uint32_t>((ch >> 3) * rows * 128 + r * 128 + (((ch & 7) ^ (r & 7)) << 4));
}

// Two consecutive output elements.
__device__ __forceinline__ void store_io2(void* base, int64_t i, int io, float a, float b) {
  if (io == kIoF16) {
    *reinterpret_cast<__half2*>(static_cast<__half*>(base) + i) = __floats2half2_rn(a, b);
  } else if (io == kIoBF16) {
    *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(base) + i) = __floats2bfloat162_rn(a, b);
  } else {
    *reinterpret_cast<float2*>(static_cast<float*>(base) + i) = make_float2(a, b);
  }
}
// Two columns of a partial (io.cuh's store_partial4, by store_io2; inv_l: 1 without ws_half)
__device__ __forceinline__ void store_partial2(const FwdParams& P, int64_t i, float x, float y, float inv_l) {
  const float s = P.ws_half ? inv_l : 1.0f;
  store_io2(P.ws_o, i, P.ws_half ? kIoF16 : kIoF32, x * s, y * s);
}

// OWN (deterministic mode, the key-split form on f16/bf16 caches): each warpgroup leaves its own partials
// (see the loop); a variant of its own, since the flush in the loop cost the default form registers
// (D = 64: 143 -> 154, and 48 bytes spilled in its two-CTA form).
template <int D, int KV, int KEYS, bool SPLIT = false, bool SHARED = false, bool OWN = false>
__global__ void __launch_bounds__(WgTraits<D, KV, KEYS, SPLIT, SHARED>::kThreads,
                                  WgTraits<D, KV, KEYS, SPLIT, SHARED>::kMinCtas)
    wg_kernel(const __grid_constant__ FwdParams P, const int item_offset) {
#if PAGEDATTN_WGMMA_ARCH
  using Tr = WgTraits<D, KV, KEYS, SPLIT, SHARED>;
  static_assert(!OWN || (SPLIT && !SHARED && !Tr::kBytes), "own partials: the one-CTA key-split form, f16/bf16");
  using T = typename Tr::T;
  constexpr int kKeys = Tr::kKeys;
  constexpr int kStages = Tr::kStages;
  constexpr int kN1 = kKeys / 8;  // S n-tiles (8 keys) per row block
  constexpr int kN3 = D / 8;      // O n-tiles

  extern __shared__ __align__(16) uint8_t smem_raw[];
  const uint32_t raw_u32 = smem_u32(smem_raw);
  const uint32_t base = (raw_u32 + 1023u) & ~1023u;  // swizzle atoms start on 1024-byte boundaries
  const uint32_t q_base = base;
  constexpr bool kU8 = Tr::kU8, kFold = Tr::kFold, kDequant = Tr::kDequant;
  constexpr bool kBytes = Tr::kBytes;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  // diagnostic build only (PAGEDATTN_TIMELINE; thread 0, a consumer): 1 pdl wait, 2 write-in, 4 Q staged,
  // 5 first tile landed, 6 loop drained, 7 warpgroups combined (SPLIT), 8 rows out (bench/timeline.sh)
  Timeline tl;
  // warpgroup: rows 64 * wgi .. (SPLIT: key tiles wgi, wgi + 2, ..); read through a shuffle so that the
  // compiler knows it warp-uniform and keeps what derives from it (ring and operand addresses, the MMA
  // descriptors) in uniform registers
  const int wgi = __shfl_sync(0xffffffffu, warp / 4, 0);
  // SPLIT: each warpgroup's ring, copies and barriers are its own (with a producer: its warps 0-1 fill
  // ring 0, warps 2-3 ring 1); ctid: the thread within its ring's copiers (kProducer: the producer's)
  const int ring = !SPLIT ? 0 : Tr::kProducer && wgi == 2 ? __shfl_sync(0xffffffffu, warp % 4, 0) / 2 : wgi;
  const int ctid = Tr::kProducer ? tid % Tr::kCopyThreads : SPLIT ? tid % 128 : tid;
  const uint32_t ring_base = base + Tr::kQBytes + ring * Tr::kRingBytes;
  // ring slot `stage`: f16/bf16 K and V tiles (MMA layout); u8 codes and parameters (staging)
  auto slot_base = [&](int stage) { return ring_base + Tr::kConvBytes + stage * Tr::kStageBytes; };
  // K and V of (the ring's) tile `t`, in ring slot `sl` (t % kStages: callers count slots, not divide), in
  // the MMA layout: the slot, or (u8) the tile's converted buffer
  auto k_tile = [&](int t, int sl) {
    return kBytes && !Tr::kInPlace ? ring_base + (t % 3) * 2 * Tr::kTileBytes : slot_base(sl);
  };
  auto v_tile = [&](int t, int sl) { return k_tile(t, sl) + Tr::kTileBytes; };
  auto smem_ptr = [&](uint32_t addr) { return smem_raw + (addr - raw_u32); };
  // u8: the parameters of ring slot `stage` ([4][kKeys] f16): in the staging slot, or (in place) after
  // the rings and (kFold) the query sums
  const uint32_t par_base = base + Tr::kQBytes + Tr::kRings * Tr::kRingBytes + Tr::kQsumBytes;
  auto par_addr = [&](int stage) {
    return Tr::kInPlace ? par_base + (ring * kStages + stage) * Tr::kParSlot : slot_base(stage) + Tr::kParOff;
  };
  // kMbar: ring slot sl's barriers (after Q, the ring and u8's parameters): every ring's
  // full barriers, then every ring's empty ones
  const uint32_t bar_base = par_base + Tr::kParBytes;
  auto full_bar = [&](int sl) { return bar_base + 8u * static_cast<uint32_t>(ring * Tr::kCSlots + sl); };
  auto empty_bar = [&](int sl) {
    return bar_base + 8u * static_cast<uint32_t>((Tr::kRings + ring) * Tr::kCSlots + sl);
  };
  constexpr int kC16 = D / 16;                    // one-byte codes: 16-byte chunks per row

  const int hk = blockIdx.y;

  const planner::WorkItem w = P.items[item_offset + blockIdx.x];
  const int G = P.G;
  const int rows = w.nt * G;
  const int past = w.past;
  const int32_t* table = P.block_indices + w.table;
  const bool early = P.pdl_early_reads && w.kv_end <= past;  // see fwd_kernel
  const int n_all = (w.kv_end - w.kv_begin + kKeys - 1) / kKeys;
  // the ring's tiles: all, or (SPLIT) every second one from wgi; ring tile `it` is tile tile_of(it)
  const int n_tiles = SPLIT ? (n_all - ring + 1) / 2 : n_all;
  auto tile_of = [&](int it) { return SPLIT ? 2 * it + ring : it; };
  const int kv_lo = window_lo(P, past, w.t0);

  // One-byte codes: where chunk c (16 codes) of key row r of the tile in ring slot `sb` is staged:
  // row-major in the staging slot (K, then V), or (kInPlace: the slot is the tile's K and V) at the row's
  // f16 chunk 2c in the MMA layout.
  auto code_k = [&](uint32_t sb, int r, int c) {
    return Tr::kInPlace ? sb + sw128_offset(r, 2 * c, kKeys) : sb + r * D + c * 16;
  };
  auto code_v = [&](uint32_t sb, int r, int c) {
    return Tr::kInPlace ? sb + Tr::kTileBytes + sw128_offset(r, 2 * c, kKeys) : sb + kKeys * D + r * D + c * 16;
  };
  // A tile wholly valid whose 32-key groups each lie in one cache block (a 32-key tile inside one block,
  // or block_size >= 32 and the tile on the 32-key grid, as partitions start): its copies take one table
  // lookup per group and constant row offsets instead of a lookup, 64-bit offset and zero-fill test per
  // 16-byte copy.
  auto whole = [&](int js) {
    const int lbs = P.block_size_log2;
    return js >= kv_lo && js + kKeys <= w.kv_end &&
           (kKeys == 32 ? (js >> lbs) == ((js + 31) >> lbs) : lbs >= 5 && (js & 31) == 0);
  };
  // The copies of a whole tile starting at key js: K and V rows r0 + i * kStep (r0 < kStep), 16 bytes
  // from element `col` of each (kc / vc: the caches, of the element type), to dst_k(r) / dst_v(r).
  auto copy_whole = [&](auto step, const auto* kc, const auto* vc, int js, int r0, int col, auto dst_k, auto dst_v) {
    constexpr int kStep = decltype(step)::value;
    static_assert(32 % kStep == 0 && kKeys % 32 == 0, "a thread's rows of a 32-key group");
#pragma unroll
    for (int g = 0; g < kKeys / 32; ++g) {
      const int64_t off = (cache_row(table, js + 32 * g, hk, P.Hk, P.block_size_log2) + r0) * D + col;
#pragma unroll
      for (int m = 0; m < 32 / kStep; ++m) {
        const int r = 32 * g + r0 + m * kStep;
        cp_async_16_full(dst_k(r), kc + off + m * kStep * D);
        cp_async_16_full(dst_v(r), vc + off + m * kStep * D);
      }
    }
  };
  // K and V of ring tile `it` -> ring slot sl (it % kStages); rows outside [kv_lo, kv_end) are zero-filled
  // (and their blocks never looked up: see load_half). A thread keeps one 16-byte column chunk and takes
  // every (kCopyThreads / kChunks)-th row. kMbar: the slot's previous tile is released in the phase of
  // parity `ph` of its empty barrier.
  auto issue = [&](int it, int sl, uint32_t ph) {
    if constexpr (kBytes) {
      if (it >= n_tiles) {
        cp_async_commit();
        return;
      }
      // SPLIT with a producer: the slot's previous tile (it - kStages) released by the ring's consumers
      if (Tr::kProducer && SPLIT && it >= kStages) wg::mbar_wait(empty_bar(sl), ph);
      // codes: a thread keeps one 16-byte chunk column (and converts what it loaded, see `convert`)
      constexpr int kRowStep = Tr::kCopyThreads / kC16;
      constexpr int kIters = kKeys / kRowStep;
      const int c = ctid % kC16, r0 = ctid / kC16;
      const int js = w.kv_begin + tile_of(it) * kKeys;
      const uint32_t sb = slot_base(sl);
      const uint8_t* kc = static_cast<const uint8_t*>(P.k_cache);
      const uint8_t* vc = static_cast<const uint8_t*>(P.v_cache);
      bool done = false;
      if constexpr (kRowStep <= 32) {  // (64 or 128 copying threads in every byte-code form: always)
        if (whole(js)) {
          copy_whole(std::integral_constant<int, kRowStep>{}, kc, vc, js, r0, c * 16,
                     [&](int r) { return code_k(sb, r, c); }, [&](int r) { return code_v(sb, r, c); });
          done = true;
        }
      }
      if (!done) {
#pragma unroll
        for (int i = 0; i < kIters; ++i) {
          const int r = r0 + i * kRowStep;
          const bool ok = js + r < w.kv_end && js + r >= kv_lo;
          const int64_t off = ok ? cache_row(table, js + r, hk, P.Hk, P.block_size_log2) * D + c * 16 : 0;
          cp_async_16_u32(code_k(sb, r, c), kc + off, ok ? 16 : 0);
          cp_async_16_u32(code_v(sb, r, c), vc + off, ok ? 16 : 0);
        }
      }
      // u8 parameters: 4 arrays, copied in chunks of the 8 rows from r (16 bytes; a chunk stays in one
      // cache block)
      auto copy_par = [&](int a, int r) {
        const int j = js + r;
        const bool ok = j < w.kv_end && j + 7 >= kv_lo;
        const uint16_t* ps = a == 0 ? P.k_scale : a == 1 ? P.k_min : a == 2 ? P.v_scale : P.v_min;
        const int64_t off8 = ok ? cache_row(table, j, hk, P.Hk, P.block_size_log2) : 0;
        cp_async_16_u32(par_addr(sl) + a * kKeys * 2 + r * 2, ps + off8, ok ? 16 : 0);
      };
      if constexpr (kU8 && SPLIT && kDequant) {
        // D = 64's key-split form: each warp copies the chunks of the rows its own threads convert (8
        // consecutive rows per row step), so a __syncwarp stands for a producer barrier. (A named barrier
        // over the ring's two warps here, 62735e3, drew racecheck reports against the combine's stores,
        // runs u8e / u8r; this form runs clean: run f8r, racecheck over U8SplitRandom, 0 hazards.)
        static_assert(32 / kC16 == 8 && kRowStep % 8 == 0 && 4 * kIters <= 32, "a warp's parameter chunks");
        const int lane_c = ctid % 32;
        if (lane_c < 4 * kIters) copy_par(lane_c / kIters, (ctid / 32) * 8 + (lane_c % kIters) * kRowStep);
      } else if constexpr (kU8) {  // the first threads: each array's kKeys / 8 chunks in order
        constexpr int kPerArray = kKeys / 8;
        if (ctid < 4 * kPerArray) copy_par(ctid / kPerArray, (ctid % kPerArray) * 8);
      }
    } else if (it < n_tiles) {
      // kMbar: the slot's previous tile (it - kStages) released by every warp
      if (Tr::kMbar && it >= kStages) wg::mbar_wait(empty_bar(sl), ph);
      constexpr int kRowStep = Tr::kCopyThreads / Tr::kChunks;
      constexpr int kIters = kKeys / kRowStep;
      static_assert(Tr::kCopyThreads % Tr::kChunks == 0 && kIters * kRowStep == kKeys, "tile copy split");
      const int ch = ctid % Tr::kChunks, r0 = ctid / Tr::kChunks;
      const int js = w.kv_begin + tile_of(it) * kKeys;
      const uint32_t kb = k_tile(it, sl), vb = v_tile(it, sl);
      const T* kc = static_cast<const T*>(P.k_cache);
      const T* vc = static_cast<const T*>(P.v_cache);
      if (whole(js)) {
        copy_whole(std::integral_constant<int, kRowStep>{}, kc, vc, js, r0, ch * 8,
                   [&](int r) { return kb + sw128_offset(r, ch, kKeys); },
                   [&](int r) { return vb + sw128_offset(r, ch, kKeys); });
      } else {
#pragma unroll
        for (int i = 0; i < kIters; ++i) {
          const int r = r0 + i * kRowStep;
          const bool ok = js + r < w.kv_end && js + r >= kv_lo;
          const int64_t off = ok ? cache_row(table, js + r, hk, P.Hk, P.block_size_log2) * D + ch * 8 : 0;
          const uint32_t so = sw128_offset(r, ch, kKeys);
          cp_async_16_u32(kb + so, kc + off, ok ? 16 : 0);
          cp_async_16_u32(vb + so, vc + off, ok ? 16 : 0);
        }
      }
      if constexpr (Tr::kMbar) {
        wg::mbar_arrive_on_copies(full_bar(sl));
        return;
      }
    }
    if constexpr (kBytes || !Tr::kMbar) cp_async_commit();
  };
  // u8 and fp8: the codes this thread loaded for tile `it` -> f16 in the tile's MMA-layout buffer. u8,
  // kDequant: the values min + code * scale of the row's parameters (u8x2_dequant: one rounding; rows
  // outside the tile's keys, whose parameters may be unwritten slots, are zeros); kFold: keys biased by
  // 1024 (exact; folded against sum(q), as in fwd_kernel), values centred (b - 128, exact). fp8: their
  // f16 values (exact), by cvt.rn.f16x2.e4m3x2 (the kv head's scales fold into S and O).
  auto cvt4 = [&](uint32_t x, bool key, __half2 scale, __half2 mn) {  // 4 codes -> f16 pairs (codes 0, 1 and 2, 3)
    if constexpr (Tr::kF8) return f8x4_to_half2x2(x);
    if constexpr (kDequant) return make_uint2(u8x2_dequant(x, kSelB01, scale, mn), u8x2_dequant(x, kSelB23, scale, mn));
    if (key) return make_uint2(u8x2_biased(x, kSelB01), u8x2_biased(x, kSelB23));
    return make_uint2(u8x2_to_half2(x, kSelB01), u8x2_to_half2(x, kSelB23));
  };
  auto convert = [&](int it, int sl) {
    constexpr int kRowStep = Tr::kCopyThreads / kC16;
    constexpr int kIters = kKeys / kRowStep;
    static_assert(kIters * kRowStep == kKeys && Tr::kCopyThreads % kC16 == 0, "code chunk split");
    const int c = ctid % kC16, r0 = ctid / kC16;
    const uint32_t sb = slot_base(sl), kb = k_tile(it, sl), vb = v_tile(it, sl);
    const int js = w.kv_begin + tile_of(it) * kKeys;
    const __half* par = reinterpret_cast<const __half*>(smem_ptr(par_addr(sl)));
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      const int r = r0 + i * kRowStep;
      const __half2 zero = __float2half2_rn(0.0f);
      __half2 ks = zero, km = zero, vs = zero, vm = zero;  // (fp8, kFold: unused)
      if constexpr (kDequant) {
        if (js + r < w.kv_end && js + r >= kv_lo) {
          ks = __half2half2(par[r]);
          km = __half2half2(par[kKeys + r]);
          vs = __half2half2(par[2 * kKeys + r]);
          vm = __half2half2(par[3 * kKeys + r]);
        }
      }
      const uint4 kx = *reinterpret_cast<const uint4*>(smem_ptr(code_k(sb, r, c)));
      const uint4 vx = *reinterpret_cast<const uint4*>(smem_ptr(code_v(sb, r, c)));
      const uint2 k0 = cvt4(kx.x, true, ks, km), k1 = cvt4(kx.y, true, ks, km), k2 = cvt4(kx.z, true, ks, km),
                  k3 = cvt4(kx.w, true, ks, km);
      const uint2 v0 = cvt4(vx.x, false, vs, vm), v1 = cvt4(vx.y, false, vs, vm), v2 = cvt4(vx.z, false, vs, vm),
                  v3 = cvt4(vx.w, false, vs, vm);
      *reinterpret_cast<uint4*>(smem_ptr(kb + sw128_offset(r, 2 * c, kKeys))) = make_uint4(k0.x, k0.y, k1.x, k1.y);
      *reinterpret_cast<uint4*>(smem_ptr(kb + sw128_offset(r, 2 * c + 1, kKeys))) = make_uint4(k2.x, k2.y, k3.x, k3.y);
      *reinterpret_cast<uint4*>(smem_ptr(vb + sw128_offset(r, 2 * c, kKeys))) = make_uint4(v0.x, v0.y, v1.x, v1.y);
      *reinterpret_cast<uint4*>(smem_ptr(vb + sw128_offset(r, 2 * c + 1, kKeys))) = make_uint4(v2.x, v2.y, v3.x, v3.y);
    }
  };
  // tiles 0 .. kStages - 3 (see the pipeline below); kProducer: by its warpgroup (one-byte codes on 128
  // rows: tiles 0 .. kStages - 2, see the producer's loop)
  auto prologue = [&]() {
    if constexpr (Tr::kProducer) {
      if (wgi == 2) {
#pragma unroll
        for (int s = 0; s < kStages - (kBytes && !SPLIT ? 1 : 2); ++s) issue(s, s, 0u);
      }
    } else {
#pragma unroll
      for (int s = 0; s < kStages - 2; ++s) issue(s, s, 0u);
    }
  };
  if constexpr (Tr::kMbar) {
    if (tid < Tr::kRings * Tr::kCSlots) {
      wg::mbar_init(bar_base + 8u * tid, Tr::kCopyThreads);
      wg::mbar_init(bar_base + 8u * (Tr::kRings * Tr::kCSlots + tid), Tr::kReleaseThreads);
    }
    __syncthreads();
  }
  if (early) prologue();
  pdl_wait();
  tl.mark(1);
  fused_write_in<D, KV>(P, w, table, hk, warp, Tr::kThreads / 32, lane);
  tl.mark(2);
  if constexpr (Tr::kProducer) {
    // The producer. f16/bf16: tile it into slot it % kStages once every consumer thread has released the
    // slot's previous tile (it - kStages, its empty barrier); its copies complete the slot's full
    // barrier. One-byte codes: tile it's codes (and u8's parameters) into staging slot it % kStages,
    // kStages - 2 to kStages - 1 tiles ahead of the conversion; each thread waits for its own copies of
    // tile c (u8: and the producer meets at barrier 5, the parameters being other threads' copies),
    // converts them into buffer c % 3 once the consumers have released tile c - 3 there, and arrives on
    // that buffer's full barrier. SPLIT (one-byte codes): each ring's two warps, in place (see their loop).
    // The consumers stage Q meanwhile and meet at a barrier of their own.
    if (wgi == 2) {
      wg::setmaxnreg_dec<Tr::kProducerRegs>();
      if (!early) prologue();
      if constexpr (SPLIT) {
        // One-byte codes on SPLIT, each ring's two warps: tile it converted in place once this thread's
        // copies have landed (one commit group per tile, kStages - 2 tiles ahead), then tile
        // it + kStages - 2 issued into the slot of tile it - 2 once the ring's consumers have released it
        int sl = 0;
        uint32_t ph = 0u;  // tile it's slot and its round's parity
        for (int it = 0; it < n_tiles; ++it) {
          cp_async_wait<kStages - 3>();
          // u8, D = 64 (kDequant): the tile's parameters were copied by other lanes of the warp (the slot
          // refilled below held tile it - 2, which every lane converted before this __syncwarp). kFold:
          // the consumers read the parameters after the full barrier, so the producer needs no barrier.
          if constexpr (kDequant) __syncwarp();
          convert(it, sl);
          wg::fence_proxy_async();  // the converted tile -> visible to the consumers' wgmma
          wg::mbar_arrive(full_bar(sl));
          issue(it + kStages - 2, sl >= 2 ? sl - 2 : sl + kStages - 2, sl >= 2 ? ph : ph ^ 1u);
          if (++sl == kStages) {
            sl = 0;
            ph ^= 1u;
          }
        }
      } else if constexpr (kBytes) {
        // u8: a key row's parameters are copied by other threads than its codes, so the producer meets at a
        // named barrier once tile c has landed, and only then issues tile c + kStages - 1 into the staging
        // slot of tile c - 1 (which every thread converted before the barrier)
        int sl = 0, sl_in = kStages - 1, b = 0;  // tile c's staging slot, tile c + kStages - 1's, its buffer
        uint32_t phb = 0u;  // parity of tile c's round in the buffers (c / 3); the previous tile's: phb ^ 1
        for (int c = 0; c < n_tiles; ++c) {
          if constexpr (!kDequant) issue(c + kStages - 1, sl_in, 0u);  // (a commit group, empty past the last tile)
          cp_async_wait<kDequant ? kStages - 2 : kStages - 1>();       // this thread's copies of tile c have landed
          if constexpr (kDequant) {
            named_barrier(5, Tr::kCopyThreads);
            issue(c + kStages - 1, sl_in, 0u);
          }
          if (c >= 3) wg::mbar_wait(empty_bar(b), phb ^ 1u);
          convert(c, sl);
          wg::fence_proxy_async();  // the converted tile -> visible to the consumers' wgmma
          wg::mbar_arrive(full_bar(b));
          sl = sl + 1 == kStages ? 0 : sl + 1;
          sl_in = sl_in + 1 == kStages ? 0 : sl_in + 1;
          if (++b == 3) {
            b = 0;
            phb ^= 1u;
          }
        }
      } else {
        // at most kStages - 2 tiles in flight (not landed), as when the consumers issued the copies: all
        // kStages at once made each CTA's first tile land later (the CTAs of a short partition start
        // together: 8k rows 1.07-1.12x slower, run ws2)
        int sl = kStages - 2, sl_l = 0;  // tile it's slot, tile it - (kStages - 2)'s
        uint32_t ph = 0u, ph_l = 0u;     // their rounds' parities (tile it's previous one in its slot: ph ^ 1)
        for (int it = kStages - 2; it < n_tiles; ++it) {
          wg::mbar_wait(full_bar(sl_l), ph_l);  // tile it - (kStages - 2) has landed
          issue(it, sl, ph ^ 1u);
          if (++sl == kStages) {
            sl = 0;
            ph ^= 1u;
          }
          if (++sl_l == kStages) {
            sl_l = 0;
            ph_l ^= 1u;
          }
        }
      }
      cp_async_wait_all();  // (f16/bf16 copies belong to no commit group: wait_group 0 would not wait)
      return;  // (no CTA-wide barrier follows; pdl_launch_dependents counts exited threads)
    }
    wg::setmaxnreg_inc<Tr::kConsumerRegs>();
  } else {
    if (!early) prologue();
  }

  const bool alibi = P.alibi != nullptr;
  // fp8: the kv head's key scale joins the softmax scale, its value scale multiplies O at the end
  const float s_log2 = Tr::kF8 ? P.scale_log2 * P.k_head_scale[hk * P.k_head_scale_stride] : P.scale_log2;
  const float v_head = Tr::kF8 ? P.v_head_scale[hk * P.v_head_scale_stride] : 1.0f;
  // Q rows -> shared memory (MMA type, swizzled); padding rows zero
  // kFold: with each row's sum of its f16-rounded query (for the key bias; other forms have no such
  // array, and this address is never touched there)
  float* qsum = reinterpret_cast<float*>(smem_ptr(base + Tr::kQBytes + Tr::kRings * Tr::kRingBytes));
  stage_q<T, Tr::kRows, D, Tr::kConsumerThreads>(
      P, w.tok0 + w.t0, hk, G, rows, tid,
      [&](int r, int ch, uint4 v) {
        *reinterpret_cast<uint4*>(smem_raw + (q_base - raw_u32) + sw128_offset(r, ch, Tr::kRows)) = v;
      },
      NoOp{}, kFold ? qsum : nullptr);
  if constexpr (SPLIT || Tr::kMbar) {  // Q (and qsum) -> both warpgroups, whose loops meet no CTA-wide barrier
    wg::fence_proxy_async();
    if constexpr (Tr::kProducer) named_barrier(3, Tr::kConsumerThreads);  // (the producer is on its way)
    else __syncthreads();
  }
  tl.mark(4);
  const int row0 = SPLIT ? 0 : 64 * wgi;  // the warpgroup's first row
  const uint64_t qd = wg::desc_sw128(q_base + row0 * 128, 16, 1024);  // its Q rows (S's A operand)

  // The thread's two rows: row0 + 16 * (warp % 4) + lane / 4 (+ 8).
  int row_qpos[2], row_lo[2];
  bool row_valid[2];
  float row_slope2[2], row_qsum[2];
  const uint8_t* row_qq[2];
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int r = row0 + 16 * (warp % 4) + lane / 4 + 8 * hf;
    const bool valid = r < rows;
    const int t = w.t0 + (valid ? r / G : 0);
    const int h = hk * G + (valid ? r % G : 0);
    row_valid[hf] = valid;
    row_qpos[hf] = past + t;
    row_lo[hf] = P.sliding_window > 0 ? past + t - P.sliding_window + 1 : INT_MIN;
    row_slope2[hf] = (valid && P.alibi != nullptr) ? P.alibi[h] * kLog2e : 0.0f;
    row_qsum[hf] = kFold ? qsum[r] : 0.0f;
    row_qq[hf] = (valid && P.qq_bias != nullptr)
                     ? P.qq_bias + P.qq_bias_begins[w.seq] + static_cast<int64_t>(t) * w.t_seq
                     : nullptr;
  }
  // row_m is a reference, not the running max, as in fwd_kernel: it moves (and O, l are rescaled) only
  // when a tile's max passes it by more than P.stale_log2, so P = 2^(s - row_m) <= 2^stale_log2 and the
  // warp vote below skips the O rescale (D/2 multiplies per thread per tile) on most tiles of a long
  // context. kFold: the running max (its E moves with each tile's scales, and O with it).
  // row_c: kFold's value offset term, sum_j p_j (vmin_j + 128 vscale_j) (as fwd_kernel)
  float row_m[2] = {-INFINITY, -INFINITY}, row_l[2] = {0.0f, 0.0f}, row_c[2] = {0.0f, 0.0f};
  float v_exp = 0.0f;  // kFold: E of u8_value_exp, set per tile (the reference is row_m - v_exp)
  float o[kN3 * 4];
#pragma unroll
  for (int i = 0; i < kN3 * 4; ++i) o[i] = 0.0f;

  // O += P V of tile `t` (ring slot sl: 64 x D per warpgroup); V N-major: its 64-column blocks kKeys * 128
  // bytes apart. Issued and committed, not waited for.
  auto pv = [&](const uint32_t (&p)[kKeys / 16][4], int t, int sl) {
    const uint64_t vd = wg::desc_sw128(v_tile(t, sl), kKeys * 128, 1024);
    wg::fence();
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) wg::mma_rs_tb<T, D>(o, p[kk], wg::desc_plus(vd, kk * 16 * 128), 1);
    wg::commit();
  };

  // Software pipeline (FlashAttention-3's intra-warpgroup overlap): iteration `it` issues S of tile it,
  // then O += P V of tile it - 1, and runs the softmax of tile it while that PV MMA is in flight; O is
  // rescaled once the PV MMA has completed. A slot is refilled two iterations after its tile (its V
  // is read by the PV MMA issued one iteration later): tile it + kStages - 2 goes out in iteration it.
  uint32_t pa[kKeys / 16][4];  // P of the previous tile: A fragments of its PV MMAs (k-step = 16 keys)
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) pa[kk][0] = pa[kk][1] = pa[kk][2] = pa[kk][3] = 0u;
  // kMbar: the warpgroups take turns issuing their MMAs (FlashAttention-3's ping-pong): warpgroup w waits
  // at named barrier 1 + w, issues S of tile it and P V of tile it - 1, and lets the other one go, so one
  // warpgroup's softmax runs under the other's MMAs. Warpgroup 0 goes first.
  constexpr bool kTurns = Tr::kMbar && !SPLIT;  // (SPLIT's warpgroups run different tile counts)
  if (kTurns && wgi == 1 && n_tiles > 0) named_barrier_arrive(1, 256);
  // Deterministic mode (OWN: SPLIT, f16/bf16): each warpgroup leaves its own (m, l, O) per
  // partition instead of the combine below, in slot 2 i + wgi of the item's partition i, so a row's
  // arithmetic is the same whether its partition runs alone or in a run of them (WorkItem::part), and no
  // combine area is needed mid-run (at D = 256 it takes a drained ring). A run's partitions are whole
  // (w.part keys, a multiple of 2 kKeys), so each warpgroup takes pt tiles of each: the flush of
  // partition i comes in iteration (i + 1) pt, once the PV MMA of its last tile has completed.
  constexpr bool kOwnForm = OWN;
  const int pt = OWN && w.part > 0 ? w.part / (2 * kKeys) : INT_MAX;
  int next_flush = pt, flushed = 0;  // the next partition boundary (ring tiles); partitions left so far
  // The warpgroup's partial of the item's partition i from (m, l) and o: its rows' l summed over the quad,
  // O / l (f16 partials) or O, as the end of the kernel stores a partial.
  auto leave_partial = [&](int i, const float (&m)[2], const float (&l_part)[2]) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      float l = l_part[hf];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const int r = 16 * (warp % 4) + lane / 4 + 8 * hf;
      if (r >= rows) continue;
      const int c0 = 2 * (lane % 4);
      const int64_t slot = (w.slot + 2 * i + wgi + static_cast<int64_t>(hk) * w.num_parts) * P.slot_rows + r;
      const float inv_l = P.ws_half ? partial_inv(l) : 1.0f;
#pragma unroll
      for (int n = 0; n < kN3; ++n)
        store_partial2(P, slot * D + n * 8 + c0, o[4 * n + 2 * hf], o[4 * n + 2 * hf + 1], inv_l);
      if (c0 == 0) *reinterpret_cast<float2*>(P.ws_ml + slot * 2) = make_float2(m[hf], l);
    }
  };
  // Units (FwdParams::fold_block = B; chunks of <= 32 rows, whose rows sit in warps 0-1 of each warpgroup):
  // warps 2-3, which hold padding rows only, keep the fold of warps 0-1's partitions over a block of B
  // absolute partitions in their O registers. Their P is 0, so the PV MMAs leave that O as it is (+-0 added;
  // an infinite value in the keys' range would make it NaN), and they skip the rescale. At a partition's
  // end the thread of warp 0 / 1 passes its partial, as the merge reads it (f16 O / l, m, l), through the
  // ring slot just read (free until the next iteration's copies) to the thread of warp 2 / 3 with the same
  // lane, which folds it in with merge.cuh's steps (merge_fold_n) and, at its block's last partition or the
  // run's, leaves the unit in the block's slot: the bits of the merge folding the block's partials
  // (merge.cuh, load_unit), with one partial per unit instead of B.
  const bool fold = kOwnForm && P.fold_block > 0 && rows <= 32 && w.part > 0;
  const bool keeper = fold && warp % 4 >= 2;
  const int n_run = w.part > 0 ? (w.kv_end - w.kv_begin + w.part - 1) / w.part : 1;  // the run's partitions
  const int fold_p0 = fold ? w.kv_begin / w.part : 0;  // its first, absolute (the planner sets part)
  float u_m[2] = {-INFINITY, -INFINITY}, u_l[2] = {0.0f, 0.0f};  // a keeper's unit: (m, l); O in o
  auto stage_at = [&](uint32_t sb, int i) { return smem_ptr(sb + (i * 64 + (warp % 2) * 32 + lane) * 4); };
  static_assert(!OWN || 64 * (2 * kN3 + 4) * 4 <= Tr::kStageBytes, "a unit's hand-over in one ring slot");
  // the unit of partition i (of the run), once that is its block's last or the run's
  auto leave_unit = [&](int i) {
    if constexpr (OWN) {  // (the other forms have no units)
      const int pa = fold_p0 + i, B = P.fold_block;
      if (!keeper || ((pa + 1) % B != 0 && i != n_run - 1)) return;
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int r = 16 * (warp % 4 - 2) + lane / 4 + 8 * hf;
        if (r >= rows) continue;
        const int c0 = 2 * (lane % 4);
        const int64_t slot =
            (w.slot + 2 * (pa / B - fold_p0 / B) + wgi + static_cast<int64_t>(hk) * w.num_parts) * P.slot_rows + r;
        const float inv_l = partial_inv(u_l[hf]);
#pragma unroll
        for (int n = 0; n < kN3; ++n)
          store_partial2(P, slot * D + n * 8 + c0, o[4 * n + 2 * hf], o[4 * n + 2 * hf + 1], inv_l);
        if (c0 == 0) *reinterpret_cast<float2*>(P.ws_ml + slot * 2) = make_float2(u_m[hf], u_l[hf]);
      }
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        u_m[hf] = -INFINITY;
        u_l[hf] = 0.0f;
      }
#pragma unroll
      for (int i2 = 0; i2 < kN3 * 4; ++i2) o[i2] = 0.0f;
    }
  };
  // partition i of the run ((m, l_part) and o: warps 0-1's rows) into its unit, through ring slot sb
  auto fold_partial = [&](int i, const float (&m)[2], const float (&l_part)[2], uint32_t sb) {
    if (!keeper) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {  // leave_partial's values
        float l = l_part[hf];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const float inv_l = partial_inv(l);
#pragma unroll
        for (int n = 0; n < kN3; ++n) {
          const __half2 h = __floats2half2_rn(o[4 * n + 2 * hf] * inv_l, o[4 * n + 2 * hf + 1] * inv_l);
          *reinterpret_cast<__half2*>(stage_at(sb, hf * kN3 + n)) = h;
        }
        *reinterpret_cast<float*>(stage_at(sb, 2 * kN3 + 2 * hf)) = m[hf];
        *reinterpret_cast<float*>(stage_at(sb, 2 * kN3 + 2 * hf + 1)) = l;
      }
    }
    named_barrier(1 + wgi, 128);
    if (keeper) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {  // merge_fold_n, column by column
        const float mp = *reinterpret_cast<const float*>(stage_at(sb, 2 * kN3 + 2 * hf));
        const float lp = *reinterpret_cast<const float*>(stage_at(sb, 2 * kN3 + 2 * hf + 1));
        if (mp == -INFINITY) continue;
        if (mp > u_m[hf]) {
          const float sc = fast_exp2(u_m[hf] - mp);
          u_l[hf] = __fmul_rn(u_l[hf], sc);
#pragma unroll
          for (int n = 0; n < kN3; ++n) {
            o[4 * n + 2 * hf] = __fmul_rn(o[4 * n + 2 * hf], sc);
            o[4 * n + 2 * hf + 1] = __fmul_rn(o[4 * n + 2 * hf + 1], sc);
          }
          u_m[hf] = mp;
        }
        // (the merge's l x vscale: vscale is 1 but for fp8, which this form does not take)
        const float wgt = fast_exp2(mp - u_m[hf]);
        u_l[hf] = __fmaf_rn(wgt, lp, u_l[hf]);
        // 8 words at a time (volatile loads keep the compiler from holding all 2 kN3 in registers)
#pragma unroll
        for (int n0 = 0; n0 < kN3; n0 += 8) {
          uint32_t hw[8];
#pragma unroll
          for (int n = 0; n < 8; ++n) {
            const uint32_t a = sb + ((hf * kN3 + n0 + n) * 64 + (warp % 2) * 32 + lane) * 4;  // (stage_at)
            asm volatile("ld.shared.b32 %0, [%1];" : "=r"(hw[n]) : "r"(a));
          }
#pragma unroll
          for (int n = 0; n < 8; ++n) {
            const float2 x = __half22float2(*reinterpret_cast<const __half2*>(&hw[n]));
            o[4 * (n0 + n) + 2 * hf] = __fmaf_rn(wgt, __fmul_rn(x.x, lp), o[4 * (n0 + n) + 2 * hf]);
            o[4 * (n0 + n) + 2 * hf + 1] = __fmaf_rn(wgt, __fmul_rn(x.y, lp), o[4 * (n0 + n) + 2 * hf + 1]);
          }
        }
      }
    }
    leave_unit(i);
  };
  // Ring slots counted, not divided (it % kStages): tile it's slot sl and its round's parity ph; the
  // previous tile's slot, and the slot refilled this iteration (tile it + kStages - 2) with the parity its
  // empty barrier completes in for the tile it held (tile it - 2).
  int sl = 0;
  uint32_t ph = 0u;
  for (int it = 0; it < n_tiles; ++it) {
    const int js = w.kv_begin + tile_of(it) * kKeys;
    const int sl_prev = sl == 0 ? Tr::kCSlots - 1 : sl - 1;
    const int sl_fill = sl >= 2 ? sl - 2 : sl + kStages - 2;
    const uint32_t ph_fill = sl >= 2 ? ph : ph ^ 1u;
    if constexpr (Tr::kMbar) {
      wg::mbar_wait(full_bar(sl), ph);  // every thread's copies of tile it have landed
      wg::fence_proxy_async();
      if (it == 0) tl.mark(5);
    } else {
      static_assert(!kBytes, "one-byte codes: converted by the producer (kProducer, so kMbar)");
      cp_async_wait<kStages - 3>();
      wg::fence_proxy_async();  // this thread's copies (and Q stores) -> visible to the tensor cores
      // every thread's (SPLIT: the warpgroup's); and the slot refilled below is no longer read
      if constexpr (SPLIT) named_barrier(1 + wgi, 128);
      else __syncthreads();
      if (it == 0) tl.mark(5);
      issue(it + kStages - 2, sl_fill, ph_fill);
    }

    // ---- S = Q K^T (64 x 64 per warpgroup), then O += P V of the previous tile ----
    float s[kN1 * 4];
#pragma unroll
    for (int i = 0; i < kN1 * 4; ++i) s[i] = 0.0f;
    const uint64_t kd = wg::desc_sw128(k_tile(it, sl), 16, 1024);
    if (kTurns) named_barrier(1 + wgi, 256);
    wg::fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)  // k-step ks: 16 columns, in 64-column block ks / 4
      wg::mma_ss<T, kKeys>(s, wg::desc_plus(qd, (ks / 4) * (Tr::kRows * 128) + (ks % 4) * 32),
                           wg::desc_plus(kd, (ks / 4) * (kKeys * 128) + (ks % 4) * 32), ks > 0);
    wg::commit();
    if (it > 0) {
      pv(pa, it - 1, sl_prev);
      if (kTurns) named_barrier_arrive(2 - wgi, 256);  // the other warpgroup's turn
      wg::wait<1>();  // S done; the PV MMA may still run
    } else {  // (the arrive in each branch: one shared after the branch made ptxas serialise the wgmmas, C7514)
      if (kTurns) named_barrier_arrive(2 - wgi, 256);
      wg::wait<0>();
    }
    wg::fence_regs(s);
    // own partials: tile it starts partition flushed + 1 of the run; its softmax starts from a fresh state
    // (as a CTA of that partition alone would), the finished partition's (m, l) kept for its flush
    const bool boundary = kOwnForm && it == next_flush;
    float m_done[2] = {-INFINITY, -INFINITY}, l_done[2] = {0.0f, 0.0f};
    if (kOwnForm && boundary) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        m_done[hf] = row_m[hf];
        l_done[hf] = row_l[hf];
        row_m[hf] = -INFINITY;
        row_l[hf] = 0.0f;
      }
    }
    // kFold (SPLIT: sl is the ring slot, its parameters beside it; the 128-row forms never read them here)
    const uint16_t* par = reinterpret_cast<const uint16_t*>(smem_ptr(par_addr(sl)));
    if constexpr (kFold) {  // s_j = kscale_j * q . (code_j + 1024) + (kmin_j - 1024 kscale_j) * sum(q)
#pragma unroll
      for (int n = 0; n < kN1; ++n) {
        const int kc = n * 8 + 2 * (lane % 4);
        const float2 ks2 = __half22float2(*reinterpret_cast<const __half2*>(par + kc));
        const float2 km2 = __half22float2(*reinterpret_cast<const __half2*>(par + kKeys + kc));
        const float2 kb2 = make_float2(fmaf(-kU8Bias, ks2.x, km2.x), fmaf(-kU8Bias, ks2.y, km2.y));
#pragma unroll
        for (int e = 0; e < 4; ++e)
          s[4 * n + e] = fmaf(e % 2 ? ks2.y : ks2.x, s[4 * n + e], (e % 2 ? kb2.y : kb2.x) * row_qsum[e / 2]);
      }
    }

    // ---- masks, online softmax; element (n, e): row hf = e / 2, key js + 8n + 2 (lane % 4) + e % 2 ----
    const bool interior = js + kKeys <= w.kv_end && js + kKeys <= past + w.t0 + 1 &&
                          (P.sliding_window == 0 || js >= past + w.t0 + w.nt - P.sliding_window) &&
                          (P.qq_bias == nullptr || js + kKeys <= past);
    // Masks, then p = 2^(s * s_mul - m_sub) below. Without ALiBi (and s_log2 > 0) S stays unscaled and the
    // softmax scale rides in the exp2's FFMA (s_mul = s_log2): a masked score is -inf and an interior tile
    // is left as it is; the row maxima, taken on S, are scaled after, the same values since rounding is
    // monotonic. With ALiBi (or a scale of 0, or a negative fp8 key scale), s is the score in log2 units
    // and s_mul 1. Padding rows (r >= rows) of an interior tile stay unmasked: their queries are zero
    // (stage_q), so their scores are finite, and no row reaches another before the stores, which skip them.
    // (Computed here rather than once before the loop: hoisted, ptxas scheduled 32 of the kernels
    // differently, unmeasured.)
    const bool raw = !alibi && s_log2 > 0.0f;
    const float s_mul = raw ? s_log2 : 1.0f;
    if (!interior || !raw) {
#pragma unroll
      for (int n = 0; n < kN1; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int hf = e / 2;
          const int j = js + n * 8 + 2 * (lane % 4) + (e % 2);
          const bool vis = row_valid[hf] && j < w.kv_end && j <= row_qpos[hf] && j >= row_lo[hf] &&
                           (row_qq[hf] == nullptr || j < past || row_qq[hf][j - past] != 0);
          const float sv = raw ? s[4 * n + e]
                               : s[4 * n + e] * s_log2 + row_slope2[hf] * static_cast<float>(j - row_qpos[hf]);
          s[4 * n + e] = vis ? sv : -INFINITY;
        }
      }
    }
    // row maxima and (below) sums in two chains per row: n-tiles n % 2 (half the dependent latency)
    float mx4[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < kN1 * 4; ++i) {
      const int c = (i % 4) / 2 + 2 * ((i / 4) % 2);  // row (i % 4) / 2, chain (i / 4) % 2
      mx4[c] = fmaxf(mx4[c], s[i]);
    }
    float mx[2] = {fmaxf(mx4[0], mx4[2]) * s_mul, fmaxf(mx4[1], mx4[3]) * s_mul};  // (-inf stays -inf: s_mul > 0)
    // kFold: this tile's E (u8_value_exp) from its largest value scale (the quad holds every key of the
    // tile); O, l and c are rescaled every tile anyway, so E follows each tile: alpha takes 2^(E' - E)
    float de = 0.0f;
    if constexpr (kFold) {
      __half2 vs2 = __float2half2_rn(0.0f);
#pragma unroll
      for (int n = 0; n < kN1; ++n) {  // slots past the end may be unwritten (NaN: loses in __hmax2, or stale)
        const int kc = n * 8 + 2 * (lane % 4);
        const __half2 v = *reinterpret_cast<const __half2*>(par + 2 * kKeys + kc);
        vs2 = __hmax2(vs2, __halves2half2(js + kc < w.kv_end ? __low2half(v) : __float2half(0.0f),
                                           js + kc + 1 < w.kv_end ? __high2half(v) : __float2half(0.0f)));
      }
      float vsmax = fmaxf(__low2float(vs2), __high2float(vs2));
      vsmax = fmaxf(vsmax, __shfl_xor_sync(0xffffffffu, vsmax, 1));
      vsmax = fmaxf(vsmax, __shfl_xor_sync(0xffffffffu, vsmax, 2));
      if (vsmax > 0.0f) {
        const float e = u8_value_exp(vsmax);
        de = e - v_exp;
        v_exp = e;
      }
    }
    float alpha[2], m_sub[2];
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 1));
      mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 2));
      // kFold: the running max; else the reference moves only when the tile's max passes it by more than
      // stale_log2 (see row_m)
      const float m_old = row_m[hf];
      const float m_new = kFold ? fmaxf(m_old, mx[hf]) : mx[hf] > m_old + P.stale_log2 ? mx[hf] : m_old;
      if constexpr (kFold)
        alpha[hf] = m_new != -INFINITY ? fast_exp2(m_old - m_new + de) : 1.0f;
      else
        alpha[hf] = m_new != m_old && m_old != -INFINITY ? fast_exp2(m_old - m_new) : 1.0f;
      row_m[hf] = m_new;
      // no visible key yet: every score is -inf -> 0 (kFold: p = 2^(s - (m - E)), see u8_value_exp)
      m_sub[hf] = (m_new != -INFINITY ? m_new : 0.0f) - v_exp;
    }
    float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < kN1 * 4; ++i) {  // P (f32) in place of S; exp2(-inf) = 0
      s[i] = fast_exp2(fmaf(s[i], s_mul, -m_sub[(i % 4) / 2]));
      sum[(i % 4) / 2 + 2 * ((i / 4) % 2)] += s[i];  // (the chains of the maxima above)
    }
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) row_l[hf] = row_l[hf] * alpha[hf] + (sum[hf] + sum[hf + 2]);
    // The previous tile's PV MMA reads pa and writes o asynchronously: both stay untouched (and pa
    // live, fenced) until it has completed.
    wg::wait<0>();
    wg::fence_regs(o);
    wg::fence_regs(pa);
    if (kOwnForm && boundary) {  // O holds the finished partition (its last PV MMA has completed)
      if (fold) fold_partial(flushed++, m_done, l_done, slot_base(sl_prev));
      else leave_partial(flushed++, m_done, l_done);
      if (!keeper) {
#pragma unroll
        for (int i = 0; i < kN3 * 4; ++i) o[i] = 0.0f;
      }
      next_flush += pt;
    }
    // (kFold: E moves on most tiles, so O is rescaled on most: the vote cost 2-3% at D = 64, run wt1)
    // (a keeper's O is its unit: never rescaled)
    if (!keeper && (kFold || !__all_sync(0xffffffffu, alpha[0] == 1.0f && alpha[1] == 1.0f))) {  // the warp's 16 rows
#pragma unroll
      for (int n = 0; n < kN3; ++n) {
        o[4 * n + 0] *= alpha[0];
        o[4 * n + 1] *= alpha[0];
        o[4 * n + 2] *= alpha[1];
        o[4 * n + 3] *= alpha[1];
      }
    }

    if constexpr (kFold) {  // P' = f16(p * vscale) feeds the MMA on the centred codes; c += p (vmin + 128 vscale)
      float cz[2] = {0.0f, 0.0f};
#pragma unroll
      for (int n = 0; n < kN1; ++n) {
        const int kc = n * 8 + 2 * (lane % 4);
        const float2 vs2 = __half22float2(*reinterpret_cast<const __half2*>(par + 2 * kKeys + kc));
        const float2 vm2 = __half22float2(*reinterpret_cast<const __half2*>(par + 3 * kKeys + kc));
        const float2 vb2 = make_float2(fmaf(kU8Centre, vs2.x, vm2.x), fmaf(kU8Centre, vs2.y, vm2.y));
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          // NOTE: masked keys may carry NaN parameters (unwritten slots): never multiply them
          const float pe = s[4 * n + e];
          s[4 * n + e] = pe != 0.0f ? pe * (e % 2 ? vs2.y : vs2.x) : 0.0f;  // (rounded to f16 by the pack below)
          cz[e / 2] += pe != 0.0f ? pe * (e % 2 ? vb2.y : vb2.x) : 0.0f;
        }
      }
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) row_c[hf] = row_c[hf] * alpha[hf] + cz[hf];
    }
    if (keeper) {  // P = 0: the PV MMAs leave the unit in O
#pragma unroll
      for (int i = 0; i < kN1 * 4; ++i) s[i] = 0.0f;
    }
#pragma unroll
    for (int n = 0; n < kN1; ++n) {  // accumulator n-tile n -> A fragment of k-step n / 2
      pa[n / 2][(n % 2) * 2 + 0] = pack2<T>(s[4 * n + 0], s[4 * n + 1]);
      pa[n / 2][(n % 2) * 2 + 1] = pack2<T>(s[4 * n + 2], s[4 * n + 3]);
    }
    if constexpr (Tr::kMbar) {
      // this warp's MMAs of tile it - 1 are complete (waited above): once every warp's are, its slot
      // takes tile it + kStages - 2 (its refill waits for that; issued here, after the MMAs and the
      // softmax, so that a warpgroup ahead does not wait for the other's softmax)
      if (it > 0) wg::mbar_arrive(empty_bar(sl_prev));
      if constexpr (!Tr::kProducer) issue(it + kStages - 2, sl_fill, ph_fill);
    }
    if (++sl == Tr::kCSlots) {
      sl = 0;
      ph ^= 1u;
    }
  }
  if (n_tiles > 0) {
    if (kTurns) named_barrier(1 + wgi, 256);
    pv(pa, n_tiles - 1, sl == 0 ? Tr::kCSlots - 1 : sl - 1);
    if (kTurns && wgi == 0) named_barrier_arrive(2, 256);
    wg::wait<0>();
    wg::fence_regs(o);
  }
  cp_async_wait<0>();  // (kMbar commits no groups: every tile it issued was waited for on its full barrier)
  tl.mark(6);
  pdl_launch_dependents();  // after every cache write (see fwd_kernel)
  if constexpr (OWN) {
    // the partition of the last tiles, then the run's partitions this warpgroup has no tile of (the
    // short last one: m = -inf, l = 0, O = 0, which the merge skips, as for a warpgroup with no tile)
    // (fold: those fold as nothing; their units are left at their blocks' ends. The hand-over takes ring
    // slot 0: every copy has landed and every MMA has completed.)
    if (fold) {
      fold_partial(flushed, row_m, row_l, slot_base(0));
      for (int i = flushed + 1; i < n_run; ++i) leave_unit(i);
    } else {
      leave_partial(flushed, row_m, row_l);
      const float m0[2] = {-INFINITY, -INFINITY}, l0[2] = {0.0f, 0.0f};
#pragma unroll
      for (int i = 0; i < kN3 * 4; ++i) o[i] = 0.0f;
      for (int i = flushed + 1; i < n_run; ++i) leave_partial(i, m0, l0);
    }
  } else {  // the warpgroups' combine, then out or the CTA's partial
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      row_l[hf] += __shfl_xor_sync(0xffffffffu, row_l[hf], 1);
      row_l[hf] += __shfl_xor_sync(0xffffffffu, row_l[hf], 2);
      row_m[hf] -= v_exp;  // kFold: the reference m - E from here on (l, c and O carry 2^E)
      if constexpr (kFold) {  // O = sum_j P'_j (code_j - 128) + c
        row_c[hf] += __shfl_xor_sync(0xffffffffu, row_c[hf], 1);
        row_c[hf] += __shfl_xor_sync(0xffffffffu, row_c[hf], 2);
#pragma unroll
        for (int n = 0; n < kN3; ++n) {
          o[4 * n + 2 * hf] += row_c[hf];
          o[4 * n + 2 * hf + 1] += row_c[hf];
        }
      }
    }
    if constexpr (Tr::kF8) {  // (a partial in f16 leaves it to the merge, as fwd_kernel's v_part)
      const float vs = P.ws_half && w.slot >= 0 ? 1.0f : v_head;
#pragma unroll
      for (int i = 0; i < kN3 * 4; ++i) o[i] *= vs;
    }
    if constexpr (SPLIT) {
      // The second warpgroup's (m, l, O) -> shared memory (the first ring, drained: every thread waited
      // for its copies above, or with a producer warpgroup 0 waited on every tile of ring 0 and nothing
      // more is copied into it), folded into the first warpgroup's: m = max, l and O scaled by
      // 2^(m_g - m). (With a producer, which may have exited: the consumers' own barrier.)
      float* cb = reinterpret_cast<float*>(smem_ptr(base + Tr::kQBytes));  // [kRows][D] O, then [kRows] (m, l)
      auto consumers_sync = [&]() {
        if constexpr (Tr::kProducer) named_barrier(4, Tr::kConsumerThreads);
        else __syncthreads();
      };
      consumers_sync();
      if (wgi == 1) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int r = 16 * (warp % 4) + lane / 4 + 8 * hf;
          const int c0 = 2 * (lane % 4);
#pragma unroll
          for (int n = 0; n < kN3; ++n)
            *reinterpret_cast<float2*>(cb + r * D + n * 8 + c0) = make_float2(o[4 * n + 2 * hf], o[4 * n + 2 * hf + 1]);
          if (c0 == 0) *reinterpret_cast<float2*>(cb + Tr::kRows * D + 2 * r) = make_float2(row_m[hf], row_l[hf]);
        }
      }
      consumers_sync();
      if (wgi == 1) return;
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int r = 16 * (warp % 4) + lane / 4 + 8 * hf;
        const int c0 = 2 * (lane % 4);
        const float2 ml = *reinterpret_cast<const float2*>(cb + Tr::kRows * D + 2 * r);
        const float m = fmaxf(row_m[hf], ml.x);
        // a warpgroup without a visible key for the row: m_g = -inf, l_g = 0, O_g = 0
        float f0 = row_m[hf] != -INFINITY ? fast_exp2(row_m[hf] - m) : 0.0f;
        float f1 = ml.x != -INFINITY ? fast_exp2(ml.x - m) : 0.0f;
        row_m[hf] = m;
        row_l[hf] = row_l[hf] * f0 + ml.y * f1;
        // a partial with ws_half: O / l here (the store below then scales by 1; no register more there)
        const float s = P.ws_half && w.slot >= 0 ? partial_inv(row_l[hf]) : 1.0f;
        f0 *= s;
        f1 *= s;
#pragma unroll
        for (int n = 0; n < kN3; ++n) {
          const float2 o1 = *reinterpret_cast<const float2*>(cb + r * D + n * 8 + c0);
          o[4 * n + 2 * hf] = o[4 * n + 2 * hf] * f0 + o1.x * f1;
          o[4 * n + 2 * hf + 1] = o[4 * n + 2 * hf + 1] * f0 + o1.y * f1;
        }
      }
    }
    tl.mark(7);
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int r = row0 + 16 * (warp % 4) + lane / 4 + 8 * hf;
      if (r >= rows) continue;
      const int h = hk * G + r % G;
      const int64_t token = w.tok0 + w.t0 + r / G;
      const int c0 = 2 * (lane % 4);
      if (w.slot < 0) {
        float Ms = row_m[hf], den = row_l[hf], inv;
        if (P.sinks != nullptr) {  // the sink joins the max, as in fwd_kernel and the merge
          const float sink2 = P.sinks[h] * kLog2e;
          Ms = fmaxf(row_m[hf], sink2);
          const float f = fast_exp2(row_m[hf] - Ms);
          den = row_l[hf] * f + fast_exp2(sink2 - Ms);
          inv = f / den;
        } else {
          inv = den > 0.0f ? 1.0f / den : 0.0f;  // 0: no visible key (see fwd_kernel's row_statistics)
        }
        if (c0 == 0) store_row_stats(P, token, h, Ms, den);
        const int64_t ob = token * P.H * D + static_cast<int64_t>(h) * D;  // (P.Dv = D here: no padding)
#pragma unroll
        for (int n = 0; n < kN3; ++n)
          store_io2(P.out, ob + n * 8 + c0, P.io_dtype, o[4 * n + 2 * hf] * inv, o[4 * n + 2 * hf + 1] * inv);
      } else {
        const int64_t slot = (w.slot + static_cast<int64_t>(hk) * w.num_parts) * P.slot_rows + r;
        const float inv_l = SPLIT || !P.ws_half ? 1.0f : partial_inv(row_l[hf]);  // (SPLIT: normalised above)
#pragma unroll
        for (int n = 0; n < kN3; ++n)
          store_partial2(P, slot * D + n * 8 + c0, o[4 * n + 2 * hf], o[4 * n + 2 * hf + 1], inv_l);
        if (c0 == 0) *reinterpret_cast<float2*>(P.ws_ml + slot * 2) = make_float2(row_m[hf], row_l[hf]);
      }
    }
    tl.mark(8);
    tl.print("wg", 9);
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // no wgmma on this target: the backend selects this kernel only for sm_90a code (never here)
#endif
}

}  // namespace cuda
}  // namespace pagedattn
