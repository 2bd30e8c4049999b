// Params::lse on the cuda backend: each row's log-sum-exp from its final (max', den) in log2 units
// (FwdParams::row_stats: the sink joined, written by the attention kernels for rows of one partition
// and by the merge kernel for the others): lse = (max' + log2 den) ln 2, -inf where den = 0.
#pragma once

#include "cuda/common/ptx.cuh"

namespace pagedattn {
namespace cuda {

__global__ void lse_kernel(const float* __restrict__ row_stats, float* __restrict__ lse, int64_t n) {
  pdl_wait();  // row_stats come from the kernels before this one in the stream
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    const float2 ms = reinterpret_cast<const float2*>(row_stats)[i];
    lse[i] = ms.y > 0.0f ? (ms.x + log2f(ms.y)) * 0.6931471805599453f : -INFINITY;
  }
}

}  // namespace cuda
}  // namespace pagedattn
