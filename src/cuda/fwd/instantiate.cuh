// Included once per native width by inst_d*.cu (D = 64, 80, 96, 112, 128, 192, 256): the launchers of
// every (KV kind, row tiles) variant.
#pragma once

#include <string>

#include "cuda/fwd/fwd_kernel.cuh"
#include "cuda/fwd/launch.h"
#include "cuda/fwd/scores.cuh"
#include "cuda/fwd/wg_kernel.cuh"
#include "pagedattn/types.h"

namespace pagedattn {
namespace cuda {

template <int D, int KV, int RT, int MT = 1, bool PAD = false, int WKV = 0, bool HR = false, int KT = 0>
struct FwdVariant {
  using Tr = FwdTraits<D, KV, RT, MT, WKV, HR, KT>;
  static constexpr std::size_t kSmem = sizeof(SharedStorage<D, KV, RT, MT, WKV, HR, KT>);
  static_assert(kSmem <= 227 * 1024, "shared memory of one CTA exceeds the sm_90 limit");
  // NOTE: a per-device attribute: the cuda plan calls this for every variant it will launch.
  static cudaError_t prepare() {
    return cudaFuncSetAttribute(fwd_kernel<D, KV, RT, MT, PAD, WKV, HR, KT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(kSmem));
  }
  static void launch(const FwdParams& P, int item_offset, int num_items, cudaStream_t stream, bool pdl) {
    launch_ex(fwd_kernel<D, KV, RT, MT, PAD, WKV, HR, KT>, dim3(num_items, P.Hk), dim3(Tr::kThreads), kSmem, stream, pdl,
              P, item_offset);
  }
  static int ctas_per_sm() {
    if (prepare() != cudaSuccess) return 1;
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fwd_kernel<D, KV, RT, MT, PAD, WKV, HR, KT>, Tr::kThreads,
                                                      kSmem) != cudaSuccess)
      n = 1;
    return n;
  }
  static void launch_write(const FwdParams& P, int num_tokens, int num_seqs, cudaStream_t stream, bool pdl) {
    const int64_t rows = static_cast<int64_t>(num_tokens) * P.Hk;
    launch_ex(write_kernel<D, KV>, dim3(static_cast<unsigned>((rows + 3) / 4)), dim3(128), 0, stream, pdl, P,
              num_tokens, num_seqs);
  }
  static void launch_scores(const FwdParams& P, int num_tiles, cudaStream_t stream, bool pdl) {
    // (its D sizes shared memory only; at D = 80 and 112 ptxas spilled 12 bytes, so those take 128's)
    constexpr int kScoresD = D % 32 != 0 ? 128 : D;
    launch_ex(scores_kernel<kScoresD, KV>, dim3(num_tiles), dim3(128), 0, stream, pdl, P);
  }
  static FwdKernelInfo info() {
    return FwdKernelInfo{&launch, &launch_write, &launch_scores, &ctas_per_sm, &prepare, kSmem, Tr::kThreads,
                         KT       ? (KT > FwdTraits<D, KV, 1, 1, 0, true>::kMinCtas ? "kt+" : "kt")
                         : HR      ? "hr"
                         : MT == 2 ? "mt2"
                         : WKV     ? (RT == 1 ? (PAD ? "inv1-pad" : "inv1") : PAD ? "inv-pad" : "inv")
                         : PAD     ? "pad"
                                   : ""};
  }
};

// The Hopper kernel (wg_kernel), sm_90a builds: 128-row chunks (u8 caches too: the default;
// PAGEDATTN_WGMMA_U8=0 off), and chunks of up to 64 rows on its key-split form (SPLIT; which ones:
// tuning::hopper_split, hopper_split_small).
template <int D, int KV, int KEYS, bool SPLIT = false, bool SHARED = false, bool OWN = false>
struct WgVariant {
  using Tr = WgTraits<D, KV, KEYS, SPLIT, SHARED>;
  static constexpr std::size_t kSmem = Tr::kSmem;
  static cudaError_t prepare() {
    return cudaFuncSetAttribute(wg_kernel<D, KV, KEYS, SPLIT, SHARED, OWN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(kSmem));
  }
  static void launch(const FwdParams& P, int item_offset, int num_items, cudaStream_t stream, bool pdl) {
    launch_ex(wg_kernel<D, KV, KEYS, SPLIT, SHARED, OWN>, dim3(num_items, P.Hk), dim3(Tr::kThreads), kSmem, stream,
              pdl, P, item_offset);
  }
  static int ctas_per_sm() {
    if (prepare() != cudaSuccess) return 1;
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, wg_kernel<D, KV, KEYS, SPLIT, SHARED, OWN>, Tr::kThreads,
                                                      kSmem) != cudaSuccess)
      n = 1;
    return n;
  }
  static FwdKernelInfo info() {
    using Base = FwdVariant<D, KV, 8>;  // the same write-in and scores kernels
    constexpr bool kU8 = KV == kKvU8, kF8 = KV == kKvF8;
    // (OWN: deterministic mode's variant, "inv" as fwd_kernel's)
    const char* name = OWN ? (KEYS == 32 ? "wgs32inv" : "wgs64inv")
                       : SPLIT ? (KEYS == 32 ? (kU8 ? "wgs32u8" : kF8 ? "wgs32f8" : "wgs32")
                                           : (kU8 ? "wgs64u8" : kF8 ? "wgs64f8" : SHARED ? "wgs64x2" : "wgs64"))
                             : (KEYS == 32 ? (kU8 ? "wg32u8" : kF8 ? "wg32f8" : "wg32")
                                           : KEYS == 64 ? (kU8 ? "wg64u8" : kF8 ? "wg64f8" : SHARED ? "wg64x2" : "wg64") : "wg128");
    return FwdKernelInfo{&launch, &Base::launch_write, &Base::launch_scores, &ctas_per_sm, &prepare, kSmem,
                         Tr::kThreads, name};
  }
};

// The variant of one KV kind at width D for a chunk of `rt` row tiles (runtime values become template
// constants here and only here). mt2: the 8-row-tile variant with two row tiles per warp (fwd_kernel's
// MT = 2; the default where the Hopper kernel is off), instantiated at D <= 128 (but 112) for f16/bf16 KV;
// elsewhere the plain 8-row-tile variant.
template <int D, int KV>
FwdKernelInfo fwd_kernel_info_kind(int rt, const KernelChoice& c) {
  constexpr bool k16 = KV == kKvF16 || KV == kKvBF16;  // 16-bit caches (else one-byte codes: u8, fp8)
  constexpr bool kMt2Variants = D <= 128 && D != 112 && k16;  // (D = 112: 4 bytes spilled; 8 warps instead)
  // (the backend passes c.wg = 0 at widths without Hopper kernels)
  constexpr bool kHopperWidth = has_hopper_kernels(D);
  // Options::deterministic: chunks of <= 16 rows on the 1-row-tile layout with the partition flush,
  // 17-32-row chunks on its key groups with two row tiles each
  if (c.invariant && rt == 1)
    return c.pad ? FwdVariant<D, KV, 1, 1, true, 4>::info() : FwdVariant<D, KV, 1, 1, false, 4>::info();
  if (c.invariant && rt == 2)
    return c.pad ? FwdVariant<D, KV, 2, 1, true, 4>::info() : FwdVariant<D, KV, 2, 1, false, 4>::info();
  if (c.pad) {  // a head size below D: fwd_kernel's padded variants only (docs/design.md, "Head sizes")
    switch (rt) {
      case 1: return FwdVariant<D, KV, 1, 1, true>::info();
      case 2: return FwdVariant<D, KV, 2, 1, true>::info();
      case 4: return FwdVariant<D, KV, 4, 1, true>::info();
      default: return FwdVariant<D, KV, 8, 1, true>::info();
    }
  }
  if constexpr (kHopperWidth) {
    constexpr int kKeys = D == 256 ? 32 : 64;  // the key-split variant's key tile, and u8's
    // chunks of wg_split..4 row tiles on the key-split Hopper kernel (KernelChoice::wg_split)
    if (c.wg != 0 && c.wg_split != 0 && rt >= c.wg_split && rt <= 4) {
      if constexpr (k16) {  // (Options::deterministic: KernelChoice::wg_partials)
        if (c.wg_partials) return WgVariant<D, KV, kKeys, true, false, true>::info();
      }
      if constexpr (D == 64 && k16) {  // (two CTAs per SM: KernelChoice::wgs_shared)
        if (c.wgs_shared) return WgVariant<D, KV, kKeys, true, true>::info();
      }
      return WgVariant<D, KV, kKeys, true>::info();
    }
    if constexpr (k16) {
      if (c.wg != 0 && rt == 8) {
        if constexpr (D == 256)  // the Hopper kernel takes 32-key tiles at D = 256
          return WgVariant<D, KV, 32>::info();
        else if constexpr (D == 64)  // (two CTAs per SM: KernelChoice::wg_shared)
          return c.wg == 128 ? WgVariant<D, KV, 128>::info()
                 : c.wg_shared ? WgVariant<D, KV, 64, false, true>::info() : WgVariant<D, KV, 64>::info();
        else
          return c.wg == 128 ? WgVariant<D, KV, 128>::info() : WgVariant<D, KV, 64>::info();
      }
    } else {
      // u8 and fp8 128-row chunks on the Hopper kernel (the default; off: c.wg = 0 for them)
      if (c.wg != 0 && rt == 8) return WgVariant<D, KV, kKeys>::info();
    }
  }
  if constexpr (kMt2Variants) {
    if (c.mt2 && rt == 8) return FwdVariant<D, KV, 8, 2>::info();
  }
  if constexpr (has_kt_kernels(D, KV)) {
    // the HR variant's CTAs per SM (kt = 2: one more, at most 4)
    constexpr int kCtas = FwdTraits<D, KV, 1, 1, 0, true>::kMinCtas, kMore = kCtas < 4 ? kCtas + 1 : 4;
    if (c.kt == 1 && rt == 1) return FwdVariant<D, KV, 1, 1, false, 0, true, kCtas>::info();
    if (c.kt == 2 && rt == 1) return FwdVariant<D, KV, 1, 1, false, 0, true, kMore>::info();
  }
  if constexpr (has_hr_kernels(D, KV)) {
    if (c.hr && rt == 1) return FwdVariant<D, KV, 1, 1, false, 0, true>::info();
  }
  switch (rt) {
    case 1: return FwdVariant<D, KV, 1>::info();
    case 2: return FwdVariant<D, KV, 2>::info();
    case 4: return FwdVariant<D, KV, 4>::info();
    default: return FwdVariant<D, KV, 8>::info();
  }
}

// Width D's launchers by KV kind. The byte-code kinds (u8, fp8) exist at widths that are multiples of 32
// (their ldmatrix fragment order); the backend sends their other head sizes to the next such width.
template <int D>
FwdKernelInfo fwd_kernel_info_for(int kv, int rt, const KernelChoice& c) {
  switch (kv) {
    case kKvF16: return fwd_kernel_info_kind<D, kKvF16>(rt, c);
    case kKvBF16: return fwd_kernel_info_kind<D, kKvBF16>(rt, c);
    default:
      if constexpr (D % 32 == 0)
        return kv == kKvF8 ? fwd_kernel_info_kind<D, kKvF8>(rt, c) : fwd_kernel_info_kind<D, kKvU8>(rt, c);
      else
        throw UnsupportedError("no u8/fp8 kernels " + std::to_string(D) + " wide (the backend pads to a multiple of 32)");
  }
}

}  // namespace cuda
}  // namespace pagedattn
