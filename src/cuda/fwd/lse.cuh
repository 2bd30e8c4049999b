// Params::lse on the cuda backend, written where each row's final (max', den) in log2 units is known
// (the sink joined): the attention kernels' epilogues for rows of one partition, the merge kernel for
// the others (with FwdParams::row_stats for the scores pass). lse = (max' + log2 den) ln 2, -inf where
// den = 0. A separate kernel over row_stats after the merge cost 1-2 us per layer (5-7% of the seed's
// 8k and 32k rows, run 2026-12-01-d2).
#pragma once

#include "cuda/common/ptx.cuh"
#include "cuda/fwd/params.h"

namespace pagedattn {
namespace cuda {

__device__ __forceinline__ float lse_of(float m_log2, float den) {
  return den > 0.0f ? (m_log2 + log2f(den)) * 0.6931471805599453f : -INFINITY;
}

// Row (token, h)'s final statistics to row_stats (scores) and lse, where requested.
__device__ __forceinline__ void store_row_stats(const FwdParams& P, int64_t token, int h, float m_log2, float den) {
  const int64_t i = token * P.H + h;
  if (P.row_stats != nullptr) reinterpret_cast<float2*>(P.row_stats)[i] = make_float2(m_log2, den);
  if (P.lse != nullptr) P.lse[i] = lse_of(m_log2, den);
}

}  // namespace cuda
}  // namespace pagedattn
