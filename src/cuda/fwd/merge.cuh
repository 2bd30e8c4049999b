// merge_kernel: combines the (m, l, O) partials of a chunk's KV partitions into the output.
#pragma once

#include "core/tuning.h"
#include "cuda/fwd/io.cuh"
#include "cuda/fwd/lse.cuh"

namespace pagedattn {
namespace cuda {

// Combines the partitions of one query row: out = sum_p 2^(m_p - M) O_p / (sum_p 2^(m_p - M) l_p + sink).
// One CTA per row; a thread owns (partition group, 4-column chunk) and folds its partitions in one pass
// with a running max (m, l and O loaded together, so the loads of all partitions are in flight at
// once); the groups are combined in a fixed order (bit-reproducible).
// A row's D columns may be split over kSplit CTAs (blockIdx.y): more CTAs, and more partition groups
// per CTA, so each thread folds fewer partitions in series (the merge is latency-bound).
// kBatch: partitions per thread whose loads are in flight together (1, 4 or 8: what a thread folds;
// tuning::merge_batch).
// (kMergeThreads, merge_groups: core/tuning.h, beside the host rules that choose kSplit and kBatch.)
using tuning::kMergeThreads;
using tuning::merge_groups;
template <int D, int kSplit, int kBatch>
__global__ void __launch_bounds__(kMergeThreads) merge_kernel(const __grid_constant__ FwdParams P) {
  constexpr int kCols4 = D / 4 / kSplit;              // float4 chunks of the row per CTA
  constexpr int kGroupsM = merge_groups(D, kSplit);
  __shared__ float2 ml_s[kGroupsM];
  __shared__ float4 acc_s[kGroupsM][kCols4];
  Timeline tl;  // diagnostic build only (PAGEDATTN_TIMELINE): 1 pdl wait, 2 partials folded, 3 end
  // plan data (never written by a kernel): read before waiting for the previous grid
  const MergeRow mr = P.merge_rows[blockIdx.x];
  const int tid = threadIdx.x;
  const int c4 = tid % kCols4, g = tid / kCols4;
  // (D = 80, 96, 112, 192: kCols4 may not divide the block; the threads past the last whole group idle)
  const bool grouped = kMergeThreads % kCols4 == 0 || g < kGroupsM;
  const int col = ((kSplit == 1 ? 0 : static_cast<int>(blockIdx.y) * kCols4) + c4) * 4;  // first of its 4 columns
  const float* ml = P.ws_ml + (static_cast<int64_t>(mr.slot) * P.slot_rows + mr.row) * 2;
  const float* wo = P.ws_o + (static_cast<int64_t>(mr.slot) * P.slot_rows + mr.row) * D + col;
  const int64_t kMlStride = static_cast<int64_t>(P.slot_rows) * 2;
  const int64_t kOStride = static_cast<int64_t>(P.slot_rows) * D;
  pdl_wait();
  tl.mark(1);
  const float sink2 = P.sinks != nullptr ? P.sinks[mr.head] * kLog2e : -INFINITY;

  float M = -INFINITY, den = 0.0f;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  auto fold = [&](const float2 mlp, const float4 v) {
    if (mlp.x == -INFINITY) return;  // no visible key in this partition
    if (mlp.x > M) {
      const float s = fast_exp2(M - mlp.x);  // 0 while M is -inf
      den *= s;
      acc.x *= s;
      acc.y *= s;
      acc.z *= s;
      acc.w *= s;
      M = mlp.x;
    }
    const float wgt = fast_exp2(mlp.x - M);
    den += wgt * mlp.y;
    acc.x += wgt * v.x;
    acc.y += wgt * v.y;
    acc.z += wgt * v.z;
    acc.w += wgt * v.w;
  };
  // A thread's loads of up to kBatch partitions go out together, then fold in partition order (the
  // same bits for every kBatch). A loop that loads and folds one partition at a time waits two L2 round
  // trips per partition: the O load is not hoisted above the branch on m (SASS, before run s9a). Batches of 4
  // measured 0.93-0.98x at 8k and 32k (run s9a), but their registers (32 -> 52) cost the 32 x 8k batch
  // 1.5-3.4%, where no thread folds more than one partition: the planner picks kBatch. Every slot is
  // written for rows < rows, so the loads of partitions without a visible key read finite values that
  // fold() skips.
  // group g folds the partitions p with (part0 + p) % kGroupsM == g (part0: MergeRow)
  const int first = ((g - mr.part0) % kGroupsM + kGroupsM) % kGroupsM;
  for (int p0 = first; grouped && p0 < mr.num_parts; p0 += kGroupsM * kBatch) {
    float2 mlb[kBatch];
    float4 vb[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int p = p0 + b * kGroupsM;
      mlb[b] = make_float2(-INFINITY, 0.0f);
      vb[b] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (p < mr.num_parts) {
        mlb[b] = __ldcg(reinterpret_cast<const float2*>(ml + p * kMlStride));
        vb[b] = __ldcg(reinterpret_cast<const float4*>(wo + p * kOStride));
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) fold(mlb[b], vb[b]);
  }
  if (grouped) {
    if (c4 == 0) ml_s[g] = make_float2(M, den);
    acc_s[g][c4] = acc;
  }
  __syncthreads();
  tl.mark(2);
  pdl_launch_dependents();
  if (g == 0) {
    float Mt = sink2;
#pragma unroll
    for (int i = 0; i < kGroupsM; ++i) Mt = fmaxf(Mt, ml_s[i].x);
    float dt = sink2 == -INFINITY ? 0.0f : exp2f(sink2 - Mt);
    float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int i = 0; i < kGroupsM; ++i) {
      const float2 mi = ml_s[i];
      if (mi.x == -INFINITY) continue;
      const float wgt = fast_exp2(mi.x - Mt);
      const float4 v = acc_s[i][c4];
      dt += wgt * mi.y;
      a.x += wgt * v.x;
      a.y += wgt * v.y;
      a.z += wgt * v.z;
      a.w += wgt * v.w;
    }
    const float inv = dt > 0.0f ? 1.0f / dt : 0.0f;  // 0: no partition saw a key (prefix_only windows)
    if (col == 0) store_row_stats(P, mr.token, mr.head, Mt, dt);
    const int64_t base = static_cast<int64_t>(mr.token) * P.H * P.Dv + static_cast<int64_t>(mr.head) * P.Dv + col;
    if (col < P.Dv)  // (not a padding column)
      store_io4(P.out, base, P.io_dtype, make_float4(a.x * inv, a.y * inv, a.z * inv, a.w * inv));
  }
  tl.mark(3);
  tl.print("merge", 4);
}

}  // namespace cuda
}  // namespace pagedattn
