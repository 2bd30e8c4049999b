// scores_kernel: the optional scores output (attention weights summed per key position).
#pragma once

#include "cuda/fwd/io.cuh"

namespace pagedattn {
namespace cuda {

// Scores output (launched only when requested): for each key position j of a sequence, the attention
// weight summed over the sequence's new tokens and query heads. The weights are recomputed from Q and
// the dequantised keys (a second read of the keys, paid only by callers who ask) against the final row
// statistics that the attention kernel or the merge stored. A CTA takes 32 keys: lane = key, the four
// warps split the query rows, the key tile sits dequantised in shared memory (rows padded: no bank
// conflicts); sums in a fixed order, so the result is bit-reproducible.
constexpr int kScoreKeys = 32;
template <int D, int KV>
__global__ void __launch_bounds__(128) scores_kernel(const __grid_constant__ FwdParams P) {
  __shared__ float kt[kScoreKeys][D + 1];
  __shared__ float part[4][kScoreKeys];
  const ScoreTile st = P.score_tiles[blockIdx.x];  // plan data: read before the PDL wait
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  pdl_wait();
  const int s = st.seq, G = P.G;
  const int past = P.past_lens[s], tok0 = P.subseq_begins[s], T = P.subseq_begins[s + 1] - tok0;
  const int ctx = past + T;
  const int32_t* table = P.block_indices + P.block_indices_begins[s];
  const int j = st.j0 + lane;
  float acc = 0.0f;
  for (int hk = 0; hk < P.Hk; ++hk) {
    __syncthreads();  // the previous head's tile is no longer read
    for (int r = warp; r < kScoreKeys; r += 4) {
      const int jr = st.j0 + r;
      if (jr >= ctx || jr < window_lo(P, past, 0)) {  // no token sees it: its block may be freed
        for (int d = lane; d < D; d += 32) kt[r][d] = 0.0f;
        continue;
      }
      const int64_t row = cache_row(table, jr, hk, P.Hk, P.block_size_log2);
      if constexpr (KV == kKvU8) {
        const float sc = __half2float(__ushort_as_half(P.k_scale[row]));
        const float mn = __half2float(__ushort_as_half(P.k_min[row]));
        const uint8_t* src = static_cast<const uint8_t*>(P.k_cache) + row * P.Dk;
        for (int d = lane; d < P.Dk; d += 32) kt[r][d] = num::u8_dequantize(src[d], sc, mn);
      } else if constexpr (KV == kKvF8) {  // code * scale, one f32 rounding, as the oracle reads it
        const float sc = P.k_head_scale[hk * P.k_head_scale_stride];
        const uint8_t* src = static_cast<const uint8_t*>(P.k_cache) + row * P.Dk;
        for (int d = lane; d < P.Dk; d += 32)  // (e4m3 -> f16 is exact; numeric.h's decoder spilled here)
          kt[r][d] = __half2float(__half(__nv_cvt_fp8_to_halfraw(src[d], __NV_E4M3))) * sc;
      } else {
        for (int d = lane; d < P.Dk; d += 32) kt[r][d] = load_io(P.k_cache, row * P.Dk + d, KV == kKvF16 ? kIoF16 : kIoBF16);
      }
    }
    __syncthreads();
    if (j >= ctx) continue;
    for (int r = st.t_lo * G + warp; r < T * G; r += 4) {  // warp-uniform; the lanes differ only in the key
      const int t = r / G, h = hk * G + r % G;
      const int qpos = past + t;
      bool vis = j <= qpos && (P.sliding_window == 0 || qpos - j < P.sliding_window);
      if (vis && P.qq_bias != nullptr && j >= past)
        vis = P.qq_bias[P.qq_bias_begins[s] + static_cast<int64_t>(t) * T + (j - past)] != 0;
      if (!vis) continue;
      const int64_t qb = static_cast<int64_t>(tok0 + t) * P.H * P.Dk + static_cast<int64_t>(h) * P.Dk;
      float dot = 0.0f;
      // q rounded to the MMA type, as the attention kernel saw it (its statistics are in ms)
      for (int d = 0; d < P.Dk; ++d) {
        const float qd = load_io(P.q, qb + d, P.io_dtype);
        dot += (KV == kKvBF16 ? __bfloat162float(__float2bfloat16_rn(qd)) : __half2float(__float2half_rn(qd))) *
               kt[lane][d];
      }
      const float2 ms = *reinterpret_cast<const float2*>(P.row_stats + (static_cast<int64_t>(tok0 + t) * P.H + h) * 2);
      const float slope2 = P.alibi != nullptr ? P.alibi[h] * kLog2e : 0.0f;
      acc += exp2f(dot * P.scale_log2 + slope2 * static_cast<float>(j - qpos) - ms.x) / ms.y;
    }
  }
  part[warp][lane] = acc;
  __syncthreads();
  if (warp == 0 && j < ctx) P.scores[st.base + j] = ((part[0][lane] + part[1][lane]) + part[2][lane]) + part[3][lane];
}

}  // namespace cuda
}  // namespace pagedattn
