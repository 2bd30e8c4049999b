// Included once per head size by inst_d*.cu: the launchers of every (KV kind, row tiles) variant.
#pragma once

#include "cuda/fwd/fwd_kernel.cuh"
#include "cuda/fwd/launch.h"
#include "cuda/fwd/scores.cuh"
#include "cuda/fwd/wg_kernel.cuh"

namespace pagedattn {
namespace cuda {

template <int D, int KV, int RT, int MT = 1, bool PAD = false, int WKV = 0>
struct FwdVariant {
  using Tr = FwdTraits<D, KV, RT, MT, WKV>;
  static constexpr std::size_t kSmem = sizeof(SharedStorage<D, KV, RT, MT, WKV>);
  static_assert(kSmem <= 227 * 1024, "shared memory of one CTA exceeds the sm_90 limit");
  // NOTE: a per-device attribute: the cuda plan calls this for every variant it will launch.
  static cudaError_t prepare() {
    return cudaFuncSetAttribute(fwd_kernel<D, KV, RT, MT, PAD, WKV>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(kSmem));
  }
  static void launch(const FwdParams& P, int item_offset, int num_items, cudaStream_t stream, bool pdl) {
    launch_ex(fwd_kernel<D, KV, RT, MT, PAD, WKV>, dim3(num_items, P.Hk), dim3(Tr::kThreads), kSmem, stream, pdl, P,
              item_offset);
  }
  static int ctas_per_sm() {
    if (prepare() != cudaSuccess) return 1;
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fwd_kernel<D, KV, RT, MT, PAD, WKV>, Tr::kThreads, kSmem) != cudaSuccess) n = 1;
    return n;
  }
  static void launch_write(const FwdParams& P, int num_tokens, int num_seqs, cudaStream_t stream, bool pdl) {
    const int64_t rows = static_cast<int64_t>(num_tokens) * P.Hk;
    launch_ex(write_kernel<D, KV>, dim3(static_cast<unsigned>((rows + 3) / 4)), dim3(128), 0, stream, pdl, P,
              num_tokens, num_seqs);
  }
  static void launch_scores(const FwdParams& P, int num_tiles, cudaStream_t stream, bool pdl) {
    launch_ex(scores_kernel<D, KV>, dim3(num_tiles), dim3(128), 0, stream, pdl, P);
  }
  static FwdKernelInfo info() {
    return FwdKernelInfo{&launch, &launch_write, &launch_scores, &ctas_per_sm, &prepare, kSmem, Tr::kThreads,
                         MT == 2 ? "mt2" : WKV ? (PAD ? "inv-pad" : "inv") : PAD ? "pad" : ""};
  }
};

// The Hopper kernel (wg_kernel), sm_90a builds: 128-row chunks (u8 caches too: the default;
// PAGEDATTN_WGMMA_U8=0 off), and f16/bf16 chunks of 33-64 rows on its key-split form (SPLIT).
template <int D, int KV, int KEYS, bool SPLIT = false>
struct WgVariant {
  using Tr = WgTraits<D, KV, KEYS, SPLIT>;
  static constexpr std::size_t kSmem = Tr::kSmem;
  static cudaError_t prepare() {
    return cudaFuncSetAttribute(wg_kernel<D, KV, KEYS, SPLIT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(kSmem));
  }
  static void launch(const FwdParams& P, int item_offset, int num_items, cudaStream_t stream, bool pdl) {
    launch_ex(wg_kernel<D, KV, KEYS, SPLIT>, dim3(num_items, P.Hk), dim3(Tr::kThreads), kSmem, stream, pdl, P,
              item_offset);
  }
  static int ctas_per_sm() {
    if (prepare() != cudaSuccess) return 1;
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, wg_kernel<D, KV, KEYS, SPLIT>, Tr::kThreads, kSmem) !=
        cudaSuccess)
      n = 1;
    return n;
  }
  static FwdKernelInfo info() {
    using Base = FwdVariant<D, KV, 8>;  // the same write-in and scores kernels
    constexpr bool kU8 = KV == kKvU8, kF8 = KV == kKvF8;
    const char* name = SPLIT ? (KEYS == 32 ? "wgs32" : "wgs64")
                             : (KEYS == 32 ? (kU8 ? "wg32u8" : kF8 ? "wg32f8" : "wg32")
                                           : KEYS == 64 ? (kU8 ? "wg64u8" : kF8 ? "wg64f8" : "wg64") : "wg128");
    return FwdKernelInfo{&launch, &Base::launch_write, &Base::launch_scores, &ctas_per_sm, &prepare, kSmem,
                         Tr::kThreads, name};
  }
};

// mt2: the 8-row-tile variant with two row tiles per warp (fwd_kernel's MT = 2; the default where the
// Hopper kernel is off), instantiated at D <= 128 for f16/bf16 KV; elsewhere the plain 8-row-tile variant.
template <int D>
FwdKernelInfo fwd_kernel_info_for(int kv, int rt, const KernelChoice& c) {
  // Runtime values become template constants here and only here.
  constexpr bool kMt2Variants = D <= 128;
  if (c.invariant && rt == 2) {  // Options::deterministic: 17-32-row chunks on the 1-row-tile key groups
#define PA_INV_CASES(KVK)                                                                      \
  return c.pad ? FwdVariant<D, KVK, 2, 1, true, 4>::info() : FwdVariant<D, KVK, 2, 1, false, 4>::info();
    switch (kv) {
      case kKvF16: PA_INV_CASES(kKvF16)
      case kKvBF16: PA_INV_CASES(kKvBF16)
      case kKvF8: PA_INV_CASES(kKvF8)
      default: PA_INV_CASES(kKvU8)
    }
#undef PA_INV_CASES
  }
  if (c.pad) {  // a head size below D: fwd_kernel's padded variants only (docs/design.md, "Head sizes")
#define PA_PAD_CASES(KVK)                                                                      \
  switch (rt) {                                                                                \
    case 1: return FwdVariant<D, KVK, 1, 1, true>::info();                                     \
    case 2: return FwdVariant<D, KVK, 2, 1, true>::info();                                     \
    case 4: return FwdVariant<D, KVK, 4, 1, true>::info();                                     \
    default: return FwdVariant<D, KVK, 8, 1, true>::info();                                    \
  }
    switch (kv) {
      case kKvF16: PA_PAD_CASES(kKvF16)
      case kKvBF16: PA_PAD_CASES(kKvBF16)
      case kKvF8: PA_PAD_CASES(kKvF8)
      default: PA_PAD_CASES(kKvU8)
    }
#undef PA_PAD_CASES
  }
  constexpr int kKeys = D == 256 ? 32 : 64;  // the key-split variant's key tile, and u8's
  // f16/bf16 chunks of 33-64 rows (17-64: an experiment) on the key-split Hopper kernel (KernelChoice::wg_split)
  const bool split = c.wg != 0 && c.wg_split != 0 && rt >= c.wg_split && rt <= 4;
  if (split && kv == kKvF16) return WgVariant<D, kKvF16, kKeys, true>::info();
  if (split && kv == kKvBF16) return WgVariant<D, kKvBF16, kKeys, true>::info();
  // u8 and fp8 128-row chunks on the Hopper kernel (the default; off: c.wg = 0 for them)
  if (c.wg != 0 && kv == kKvU8 && rt == 8) return WgVariant<D, kKvU8, kKeys>::info();
  if (c.wg != 0 && kv == kKvF8 && rt == 8) return WgVariant<D, kKvF8, kKeys>::info();
  if constexpr (D == 256) {  // the Hopper kernel takes 32-key tiles at D = 256
    if (c.wg != 0 && rt == 8 && kv == kKvF16) return WgVariant<D, kKvF16, 32>::info();
    if (c.wg != 0 && rt == 8 && kv == kKvBF16) return WgVariant<D, kKvBF16, 32>::info();
  }
  if constexpr (kMt2Variants) {
    if (c.wg != 0 && rt == 8 && kv == kKvF16)
      return c.wg == 128 ? WgVariant<D, kKvF16, 128>::info() : WgVariant<D, kKvF16, 64>::info();
    if (c.wg != 0 && rt == 8 && kv == kKvBF16)
      return c.wg == 128 ? WgVariant<D, kKvBF16, 128>::info() : WgVariant<D, kKvBF16, 64>::info();
    if (c.mt2 && rt == 8 && kv == kKvF16) return FwdVariant<D, kKvF16, 8, 2>::info();
    if (c.mt2 && rt == 8 && kv == kKvBF16) return FwdVariant<D, kKvBF16, 8, 2>::info();
  }
#define PA_RT_CASES(KVK)                                                                       \
  switch (rt) {                                                                                \
    case 1: return FwdVariant<D, KVK, 1>::info();                                              \
    case 2: return FwdVariant<D, KVK, 2>::info();                                              \
    case 4: return FwdVariant<D, KVK, 4>::info();                                              \
    default: return FwdVariant<D, KVK, 8>::info();                                             \
  }
  switch (kv) {
    case kKvF16: PA_RT_CASES(kKvF16)
    case kKvBF16: PA_RT_CASES(kKvBF16)
    case kKvF8: PA_RT_CASES(kKvF8)
    default: PA_RT_CASES(kKvU8)
  }
#undef PA_RT_CASES
}

}  // namespace cuda
}  // namespace pagedattn
