// The attention kernels' compile-time shapes: per KV kind (KvTraits), per fwd_kernel variant
// (FwdTraits: warps, key groups, slices, ring depth) and its shared memory (SharedStorage).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "cuda/common/ptx.cuh"
#include "cuda/fwd/params.h"

namespace pagedattn {
namespace cuda {

constexpr float kLog2e = 1.4426950408889634f;

template <int KV>
struct KvTraits;
template <>
struct KvTraits<kKvF16> {
  using mma_t = __half;    // operand type of the MMAs
  using cache_t = __half;  // element type stored in the cache
};
template <>
struct KvTraits<kKvBF16> {
  using mma_t = __nv_bfloat16;
  using cache_t = __nv_bfloat16;
};
template <>
struct KvTraits<kKvU8> {
  using mma_t = __half;  // codes 0..255 are exact in f16
  using cache_t = uint8_t;
};
template <>
struct KvTraits<kKvF8> {
  using mma_t = __half;  // every e4m3 value is exact in f16
  using cache_t = uint8_t;
};

// Warp layout, tiles and pipeline per (head size, KV kind, row tiles); shared memory is one struct sized
// by sizeof. Warps form kWKV key groups of kWQ warps: the warps of a group share a ring of half-tiles
// (K or V of kKPW keys) and each owns a 16-row tile of the chunk's query rows; the groups stream
// disjoint key slices (group g takes keys [g * kKPW, (g+1) * kKPW) of every kTileKV-key tile) and are
// merged once at the end. Few rows (decode, verify): 1 x 4 or 2 x 2 warps; 64 rows (prefill chunks):
// 4 x 1, the FlashAttention-2 layout. Rows of K/V are padded by 16 bytes (ldmatrix without conflicts).
// MT: row tiles per warp. MT = 2 (128-row prefill chunks at D <= 128, f16/bf16; 1.20x, run s4a): 4 warps of 32
// rows, so each K/V fragment read from shared memory feeds two MMAs (the 8-warp layout reads every
// fragment once per 16 rows: shared-memory bandwidth, not the tensor cores, bounds it).
// WKV: key groups other than the default rule's (0). WKV = 4 is Options::deterministic's layout: at RT = 2
// 8 warps, the 1-row-tile variant's 4 key groups and slices with two row tiles each, so a row's
// arithmetic (its slices, their order, the group merge) is the same as in a chunk of <= 16 rows
// (docs/design.md, "Invariant rows"); at RT = 1 the 1-row-tile layout itself. Both carry fwd_kernel's
// partition flush (WorkItem::part), which the default mode's variants do not compile.
// HR: chunks of at most 8 rows (G x T <= 8: a G = 4 decode or 2-token verify) on the 1-row-tile layout
// with the MMAs' top halves only (mma_16816_top): the accumulators and Q fragments of rows 8-15 dead, and
// those rows neither scored nor rescaled.
// KT: HR's chunks with keys as the MMAs' M dimension (fwd_kernel's KT variant), at KT CTAs per SM; 0: not KT.
template <int D, int KV, int RT, int MT = 1, int WKV = 0, bool HR = false, int KT = 0>
struct FwdTraits {
  static_assert(!HR || (RT == 1 && MT == 1 && WKV == 0), "HR: the default 1-row-tile layout");
  static_assert(KT == 0 || (HR && KT >= 2 && KT <= 4), "KT: on HR's layout, 2-4 CTAs per SM");
  static_assert(MT == 1 || (MT == 2 && RT == 8 && D <= 128 && (KV == kKvF16 || KV == kKvBF16)),
                "MT = 2: 8 row tiles, D <= 128, f16/bf16 KV");
  static_assert(WKV == 0 || (WKV == 4 && RT <= 2 && MT == 1), "WKV = 4: 1 or 2 row tiles");
  using T = typename KvTraits<KV>::mma_t;
  using C = typename KvTraits<KV>::cache_t;
  static constexpr bool kU8 = KV == kKvU8;  // affine codes: per-key parameters, folded around the MMAs
  static constexpr bool kF8 = KV == kKvF8;  // e4m3 codes: one scale per kv head, folded into S and O
  static constexpr bool kBytes = kU8 || kF8;  // one-byte codes: their shared-memory rows and fragment order
  static constexpr int kRows = HR ? 8 : RT * 16;  // query rows a CTA holds
  static constexpr int kQRows = RT * 16;          // rows of the Q area (the byte codes' pair units span 16)
  static constexpr int kWQ = RT / MT;                     // warps along rows (MT 16-row tiles each)
  static constexpr int kWKV = WKV > 0 ? WKV : RT == 1 ? 4 : RT == 2 ? 2 : 1;  // key groups (8 row tiles: 8 warps, one group)
  static constexpr int kWarps = kWQ * kWKV;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kGroupThreads = kWQ * 32;
  // Keys per group slice. u8 two-warp groups at D = 256 (T = 5..8 of the seed shape) take 32: each warp
  // then runs 4 S chains instead of 2 and one softmax per 32 keys (run s8b, same run: u8 128k T=8 0.83x,
  // 32k 0.98x, 8k 1.04x slower: 2 tiles per 128-key partition instead of 4). f16/bf16 at D = 256 keep
  // 16 (32-key halves would not fit three stages in half an SM's shared memory).
  // D = 192 takes D = 256's slices (at 32 keys its one-warp groups' rings would hold 2 halves, not 3).
  static constexpr int kKPW = MT == 2 ? 32 : RT >= 4 ? (D > 128 ? 32 : 64)
                            : (D > 128 ? (kBytes && RT == 2 && WKV == 0 ? 32 : 16) : 32);
  static constexpr int kTileKV = kWKV * kKPW;             // keys per iteration of the CTA
  static constexpr bool kOneCta = kWarps == 8;           // the 8-warp variants: one CTA per SM
  // D = 64 u8 decodes (1 row tile, the default layout) at 4 CTAs per SM: 128 registers and a quarter of
  // the SM's shared memory (4 ring stages). Against 3 per SM (H100, run x4b): <= 16 rows 0.89-1.03x the
  // time at 32k (median 0.906), 0.90-0.99x at 128k, 8k level; fp8 was not faster at 128k (1.019x).
  static constexpr bool kFourCtas = D == 64 && kU8 && RT == 1 && WKV == 0;
  static constexpr int kLdQ = D + 8;                      // Q row (elements)
  static constexpr int kLdKV = kBytes ? D + 16 : D + 8;   // K/V row (cache elements)
  static constexpr int kParBytes = (kU8 ? 4 : 1) * kKPW * 2;  // u8: key scale, key min, value scale, value min
  static constexpr int kHalfBytes = kKPW * kLdKV * static_cast<int>(sizeof(C)) + kParBytes;
  static constexpr int kQBytes = kQRows * kLdQ * static_cast<int>(sizeof(T));
  static constexpr int kFixed = kQBytes + kRows * 4 + kWKV * kRows * 8 + (WKV == 4 ? kRows * 4 : 0) + 128;
  // HR variants: 3 CTAs per SM at D = 64 (u8: 4, kFourCtas), as its one-byte 16-row variants reach by their
  // registers, else 2. At 3 per SM (168 registers) ptxas spilled in the key loop at D = 128 (u8 80 bytes)
  // and D = 256 (u8 120), so the registers HR frees do not buy a third CTA there.
  static constexpr int kHrCtas = D <= 64 ? 3 : 2;
  static constexpr int kMinCtas = kOneCta ? 1 : KT ? KT : kFourCtas ? 4 : HR ? kHrCtas : 2;  // __launch_bounds__ occupancy hint
  static constexpr int kBudget = kOneCta     ? 227 * 1024   // one CTA per SM (8-warp variants)
                                 : KT        ? 227 * 1024 / KT - 1024
                                 : kFourCtas ? 55 * 1024    // four
                                 : HR        ? 227 * 1024 / kHrCtas - 1024  // HR: 3 (or 2)
                                             : 113 * 1024;  // two
  static constexpr int kFit = (kBudget - kFixed) / (kWKV * kHalfBytes);
  static constexpr int kFullStages = kFit > 6 ? 6 : kFit;
  // Options::deterministic's partition flush (fwd_kernel, WKV = 4) passes the key groups' outputs through
  // shared memory kFlushCols columns at a time, rows kFlushLd floats apart. It stages them in an area of
  // its own (kFlushOwn) where the one-CTA-per-SM budget leaves room beside the full ring for blocks wider
  // than a ring slot holds (the two-CTA variants keep their L1 share); else in the ring slot each group
  // has just read (the other slots hold copies in flight). u8 D = 256 at 32 rows: 2 blocks of 128
  // columns instead of 16 of 16 (a block costs two CTA barriers).
  static constexpr int kRingFlushCols = D % 64 == 0 && kRows * 68 * 4 <= kHalfBytes   ? 64
                                        : D % 32 == 0 && kRows * 36 * 4 <= kHalfBytes ? 32
                                                                                      : 16;
  // The own area's rows lie 16 banks apart (byte codes: a quarter-warp's float4 stores cover two rows)
  // or an odd multiple of 8 (a half-warp's float2 stores cover four): no bank conflict.
  static constexpr int own_pad(int c) { return kBytes ? (48 - c % 32) % 32 : (24 - c % 16) % 16; }
  static constexpr bool own_fits(int c, int stages) {
    return D % c == 0 && c % (kBytes ? 16 : 8) == 0 &&
           kWKV * kRows * (c + own_pad(c)) * 4 <= kBudget - kFixed - kWKV * stages * kHalfBytes;
  }
  static constexpr int own_cols(int stages) {
    return WKV != 4 || !kOneCta ? 0
           : own_fits(D, stages)     ? D
           : own_fits(D / 2, stages) ? D / 2
           : own_fits(D / 4, stages) ? D / 4
                                     : 0;
  }
  // Where the full ring leaves no room for an area wider than a ring slot (f16/bf16 D = 128 and 256 at
  // 32 rows), the ring gives up stages for one: 4 stages, so 128-column blocks (D = 256: 2 blocks and 3
  // barriers instead of 8 of 32 columns and 16). Run fl, same call against the 6-stage ring: the 32 x 8k
  // batch's f16 T = 8 0.909 of the time, lone T = 8 0.959 / 0.973 / 1.018 at 8k / 32k / 128k.
  static constexpr int kFlushStages = 4;
  static constexpr bool kShortRing = own_cols(kFullStages) <= kRingFlushCols && kFlushStages < kFullStages &&
                                     own_cols(kFlushStages) > kRingFlushCols;
  static constexpr int kStages = kShortRing ? kFlushStages : kFullStages;  // half-tiles in each group's ring
  static_assert(kStages >= 3, "pipeline depth");
  static constexpr int kOwnCols = own_cols(kStages);
  static constexpr bool kFlushOwn = kOwnCols > kRingFlushCols;
  static constexpr int kFlushCols = kFlushOwn ? kOwnCols : kRingFlushCols;
  static constexpr int kFlushLd = kFlushCols + (kFlushOwn ? own_pad(kFlushCols) : 4);
  static_assert(kKPW % 16 == 0, "a slice is whole MMA k-steps");
  static_assert(D >= 64 && D <= 256 && D % (kBytes ? 32 : 16) == 0,
                "native widths: multiples of 16 (byte codes: of 32; docs/design.md, \"Head sizes\")");
};

// K or V rows of one group slice; the K half of a u8 cache also carries all 4 parameters. (Its own
// template: the HR variants share the gather's code, load_half, with the variant of 16 rows.)
template <int D, int KV, int RT, int MT = 1, int WKV = 0>
struct KvHalf {
  using Tr = FwdTraits<D, KV, RT, MT, WKV>;
  alignas(16) typename Tr::C kv[Tr::kKPW][Tr::kLdKV];
  alignas(16) uint16_t par[Tr::kU8 ? 4 : 1][Tr::kKPW];
};

template <int D, int KV, int RT, int MT = 1, int WKV = 0, bool HR = false, int KT = 0>
struct SharedStorage {
  using Tr = FwdTraits<D, KV, RT, MT, WKV, HR, KT>;
  using T = typename Tr::T;
  using C = typename Tr::C;
  using Half = KvHalf<D, KV, RT, MT, WKV>;
  struct Stream {
    Half ring[Tr::kWKV][Tr::kStages];
    alignas(16) T q[Tr::kQRows][Tr::kLdQ];
  };
  struct StreamStaged : Stream {  // FwdTraits::kFlushOwn: the partition flush's own area
    alignas(16) float stage[Tr::kWKV][Tr::kRows][Tr::kFlushLd];
  };
  struct Red {
    alignas(16) float red[Tr::kWKV][Tr::kRows][D + 4];
    float4 row_st[Tr::kRows];  // each row's (max, sum) over the key groups, and its (max', 1/den) with a sink
  };
  union StreamOrRed {  // rings and Q while streaming; each key group's scaled partial output after
    std::conditional_t<Tr::kFlushOwn, StreamStaged, Stream> s;
    Red r;  // (larger than Stream in some one-CTA-per-SM u8 variants: 8 row tiles at D = 192 and 256, WKV = 4 at 192)
  };

  StreamOrRed u;
  float qsum[Tr::kRows];
  float2 ml[Tr::kWKV][Tr::kRows];  // (max, sum) of each key group's rows
  // WKV = 4 (deterministic mode): each row's 1 / l for the partition flush's f16 partials (fwd_kernel)
  float flush_inv[WKV == 4 ? Tr::kRows : 1];
};

}  // namespace cuda
}  // namespace pagedattn
