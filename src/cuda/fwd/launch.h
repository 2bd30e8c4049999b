// Host-side entry points of the attention kernels: one launcher per (head size, KV kind, row tiles),
// instantiated in src/cuda/fwd/inst_d*.cu (one file per head size, so builds run in parallel).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "cuda/fwd/params.h"

namespace pagedattn {
namespace cuda {

struct FwdKernelInfo {
  void (*launch)(const FwdParams& P, int item_offset, int num_items, cudaStream_t stream, bool pdl);
  // the separate KV write-in (write_kernel<D, KV>), the same for every row-tile variant
  void (*launch_write)(const FwdParams& P, int num_tokens, int num_seqs, cudaStream_t stream, bool pdl);
  // the scores output (scores_kernel<D, KV>), one CTA per ScoreTile
  void (*launch_scores)(const FwdParams& P, int num_tiles, cudaStream_t stream, bool pdl);
  int (*ctas_per_sm)();        // occupancy with the kernel's shared memory (current device)
  cudaError_t (*prepare)();    // raises the kernel's dynamic shared-memory limit on the current device
  std::size_t smem_bytes;
  int threads;                 // per CTA
  const char* variant;         // "", "wg<keys>" / "wgs<keys>" (wg_kernel: 128-row chunks, suffix "u8" / "f8" for u8 / fp8
                               // caches / key-split 33-64-row chunks; "wgs<keys>inv": deterministic mode's own
                               // partials), "mt2" (MT = 2), "pad" (a padded head size) or
                               // "inv1" / "inv" (-pad) (WKV = 4: Options::deterministic's 1- and 2-row-tile chunks)
};

// Which kernel variants a plan uses besides the defaults (run-time switches, see backend.cu).
struct KernelChoice {
  bool mt2 = false;        // two row tiles per warp in the 8-row-tile variant (fwd_kernel's MT = 2; D <= 128)
  int wg = 0;              // 8-row-tile chunks on the Hopper kernel (wg_kernel): its key tile at D <= 128
                           // (64 or 128; any nonzero value means 32 at D = 256, and 64 / 32 for u8), 0 = off
  int wg_split = 0;        // chunks of wg_split..4 row tiles on the key-split Hopper kernel (0: none)
  bool wg_shared = false;   // D = 64 f16/bf16 128-row chunks on the Hopper kernel's two-CTA-per-SM form
  bool wgs_shared = false;  // ... and their key-split chunks (wgs64x2)
  bool pad = false;        // the call's head size is below the kernel's (FwdParams::Dk < D): fwd_kernel's
                           // PAD variants, no Hopper kernel
  bool invariant = false;  // Options::deterministic: 1- and 2-row-tile chunks on fwd_kernel's WKV = 4 layout
                           // (the 1-row-tile variant's key groups, and the partition flush), no Hopper kernel
  bool wg_partials = false;  // Options::deterministic on f16/bf16 caches: every chunk on the key-split Hopper
                             // kernel's own-partials variant (wg_kernel's OWN: each warpgroup leaves its
                             // partials; wg_split = 1; tuning::deterministic_split); invariant is off
  bool hr = false;         // every chunk has <= 8 rows: the 1-row-tile chunks on fwd_kernel's HR variant
                           // (where has_hr_kernels; tuning::half_rows; not with pad or invariant)
  int kt = 0;              // the same chunks with keys as the MMAs' M dimension (fwd_kernel's KT variant;
                           // where has_kt_kernels; tuning::keys_on_m; before hr): 1, or 2 at one CTA
                           // per SM more; 0 off
};

// The (width, KV kind) pairs with fwd_kernel HR variants (chunks of <= 8 rows; FwdTraits): the ones
// tuning::half_rows takes.
constexpr bool has_hr_kernels(int D, int kv) {
  return (kv == kKvU8 && (D == 64 || D == 128 || D == 256)) || (kv == kKvF8 && D == 64);
}

// The (width, KV kind) pairs with fwd_kernel KT variants (chunks of <= 8 rows, keys as the MMAs' M
// dimension): u8 and fp8 at D = 64, 128, 256.
constexpr bool has_kt_kernels(int D, int kv) {
  return (kv == kKvU8 || kv == kKvF8) && (D == 64 || D == 128 || D == 256);
}

// The widths with Hopper kernels (wg_kernel: swizzled 64-column operand blocks); at 80, 96, 112 and 192
// every chunk runs on fwd_kernel.
constexpr bool has_hopper_kernels(int D) { return D == 64 || D == 128 || D == 256; }

FwdKernelInfo fwd_kernel_info_d64(int kv, int row_tiles, const KernelChoice& c);
FwdKernelInfo fwd_kernel_info_d80(int kv, int row_tiles, const KernelChoice& c);
FwdKernelInfo fwd_kernel_info_d96(int kv, int row_tiles, const KernelChoice& c);
FwdKernelInfo fwd_kernel_info_d112(int kv, int row_tiles, const KernelChoice& c);
FwdKernelInfo fwd_kernel_info_d128(int kv, int row_tiles, const KernelChoice& c);
FwdKernelInfo fwd_kernel_info_d192(int kv, int row_tiles, const KernelChoice& c);
FwdKernelInfo fwd_kernel_info_d256(int kv, int row_tiles, const KernelChoice& c);
/// Throws UnsupportedError naming the head size when there is no kernel for it. The Hopper variants
/// (`wg`, `wg_split`) must be asked for only on sm_90 devices of a build with sm_90a code.
FwdKernelInfo fwd_kernel_info(int head_size, int kv, int row_tiles, const KernelChoice& c = {});

void launch_merge(const FwdParams& P, int head_size, int num_rows, int split, cudaStream_t stream, bool pdl);

// Launches with programmatic stream serialisation (PDL) when `pdl` is set.
template <typename... KArgs, typename... Args>
cudaError_t launch_ex(void (*kernel)(KArgs...), dim3 grid, dim3 block, std::size_t smem, cudaStream_t stream,
                      bool pdl, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace cuda
}  // namespace pagedattn
