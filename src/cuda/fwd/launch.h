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
  const char* variant;         // "", "wg32" / "wg64" / "wg128" (wg_kernel and its key tile) or an experiment: "sk2" (SK = 2), "mt2" (MT = 2)
};

FwdKernelInfo fwd_kernel_info_d64(int kv, int row_tiles, bool split_s, bool mt2, int wg);
FwdKernelInfo fwd_kernel_info_d128(int kv, int row_tiles, bool split_s, bool mt2, int wg);
FwdKernelInfo fwd_kernel_info_d256(int kv, int row_tiles, bool split_s, bool mt2, int wg);
/// Throws UnsupportedError naming the head size when there is no kernel for it. Experiments, where
/// instantiated: `split_s`, the S accumulator split (PAGEDATTN_SPLIT_S=1; fwd_kernel's SK);
/// `mt2`, two row tiles per warp in the 8-row-tile variant (PAGEDATTN_PREFILL_MT2=1; fwd_kernel's MT).
/// `wg`: 0, or the key tile (64, 128 at D <= 128; any nonzero value means 32 at D = 256) of the Hopper
/// prefill kernel (wg_kernel) that replaces the 8-row-tile variant for f16/bf16 caches; the caller
/// passes it only on sm_90 devices of a build with sm_90a code.
FwdKernelInfo fwd_kernel_info(int head_size, int kv, int row_tiles, bool split_s = false, bool mt2 = false,
                              int wg = 0);

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
