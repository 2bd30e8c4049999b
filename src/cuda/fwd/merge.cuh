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

// A running (m, l, O) over partitions, and the two steps of every merge: merge_fold() takes one
// partition's partial into a group's state (running max), merge_combine() adds a finished group into the
// row's sum at the row's final max Mt. Both merge kernels call these, with explicit roundings (no
// contraction left to the compiler; the same instruction counts as the contracted code they replaced,
// bench/sass_same.sh c0cffb9), so the two give the same bits for the same groups: deterministic mode
// picks either by the call's size (merge_rows_kernel), never changing a row's result.
struct MergeState {
  float m = -INFINITY, den = 0.0f;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
};
__device__ __forceinline__ void merge_fold(MergeState& st, const float2 mlp, const float4 v) {
  if (mlp.x == -INFINITY) return;  // no visible key in this partition
  if (mlp.x > st.m) {
    const float s = fast_exp2(st.m - mlp.x);  // 0 while m is -inf
    st.den = __fmul_rn(st.den, s);
    st.acc = make_float4(__fmul_rn(st.acc.x, s), __fmul_rn(st.acc.y, s), __fmul_rn(st.acc.z, s), __fmul_rn(st.acc.w, s));
    st.m = mlp.x;
  }
  const float wgt = fast_exp2(mlp.x - st.m);
  st.den = __fmaf_rn(wgt, mlp.y, st.den);
  st.acc = make_float4(__fmaf_rn(wgt, v.x, st.acc.x), __fmaf_rn(wgt, v.y, st.acc.y), __fmaf_rn(wgt, v.z, st.acc.z),
                       __fmaf_rn(wgt, v.w, st.acc.w));
}
// the row's sum starts at the sink's term: dt = 2^(sink - Mt) (0 without a sink), a = 0
__device__ __forceinline__ void merge_combine(float& dt, float4& a, const float Mt, const float2 mi, const float4 v) {
  if (mi.x == -INFINITY) return;
  const float wgt = fast_exp2(mi.x - Mt);
  dt = __fmaf_rn(wgt, mi.y, dt);
  a = make_float4(__fmaf_rn(wgt, v.x, a.x), __fmaf_rn(wgt, v.y, a.y), __fmaf_rn(wgt, v.z, a.z), __fmaf_rn(wgt, v.w, a.w));
}
// The row's 4 columns from `col` normalised into out (and its statistics from the thread of column 0).
__device__ __forceinline__ void merge_store(const FwdParams& P, const MergeRow& mr, int col, float Mt, float dt,
                                            float4 a) {
  const float inv = dt > 0.0f ? 1.0f / dt : 0.0f;  // 0: no partition saw a key (prefix_only windows)
  if (col == 0) store_row_stats(P, mr.token, mr.head, Mt, dt);
  const int64_t base = static_cast<int64_t>(mr.token) * P.H * P.Dv + static_cast<int64_t>(mr.head) * P.Dv + col;
  if (col < P.Dv)  // (not a padding column)
    store_io4(P.out, base, P.io_dtype, make_float4(__fmul_rn(a.x, inv), __fmul_rn(a.y, inv), __fmul_rn(a.z, inv),
                                                   __fmul_rn(a.w, inv)));
}
// The first partition of group g (group g folds the partitions p with (part0 + p) % kGroups == g).
template <int kGroups>
__device__ __forceinline__ int merge_group_first(int g, int part0) {
  return ((g - part0) % kGroups + kGroups) % kGroups;
}
__device__ __forceinline__ float merge_sink_log2(const FwdParams& P, const MergeRow& mr) {
  return P.sinks != nullptr ? P.sinks[mr.head] * kLog2e : -INFINITY;
}

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
  const int64_t wo = (static_cast<int64_t>(mr.slot) * P.slot_rows + mr.row) * D + col;  // (load_partial4)
  const int64_t kMlStride = static_cast<int64_t>(P.slot_rows) * 2;
  const int64_t kOStride = static_cast<int64_t>(P.slot_rows) * D;
  pdl_wait();
  tl.mark(1);
  const float sink2 = merge_sink_log2(P, mr);
  const float vscale = partial_value_scale(P, mr.head);  // (1 but for fp8's f16 partials)

  MergeState st;
  // A thread's loads of up to kBatch partitions go out together, then fold in partition order (the
  // same bits for every kBatch). A loop that loads and folds one partition at a time waits two L2 round
  // trips per partition: the O load is not hoisted above the branch on m (SASS, before run s9a). Batches of 4
  // measured 0.93-0.98x at 8k and 32k (run s9a), but their registers (32 -> 52) cost the 32 x 8k batch
  // 1.5-3.4%, where no thread folds more than one partition: the planner picks kBatch. Every slot is
  // written for rows < rows, so the loads of partitions without a visible key read finite values that
  // merge_fold() skips.
  // group g folds the partitions p with (part0 + p) % kGroupsM == g (part0: MergeRow)
  const int first = merge_group_first<kGroupsM>(g, mr.part0);
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
        vb[b] = load_partial4(P, wo + p * kOStride, mlb[b].y * vscale);
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) merge_fold(st, mlb[b], vb[b]);
  }
  if (grouped) {
    if (c4 == 0) ml_s[g] = make_float2(st.m, st.den);
    acc_s[g][c4] = st.acc;
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
    for (int i = 0; i < kGroupsM; ++i) merge_combine(dt, a, Mt, ml_s[i], acc_s[i][c4]);
    merge_store(P, mr, col, Mt, dt, a);
  }
  tl.mark(3);
  tl.print("merge", 4);
}

// Deterministic mode's merge for calls of many rows: the arithmetic of merge_kernel<D, D / 64, *> (its
// groups of partitions, each folded in partition order, then combined in group order at the row's max),
// in one thread per 4 columns of a row, so the CTAs are few and every thread's loads are in flight
// together. merge_kernel spends a CTA of 512 threads per row and column block (one per SM at its 82
// registers), its groups' combine serial in 16 of them: over many waves each CTA waits its latency in
// turn (the 32 x 8k batch in
// deterministic mode: 2048 / 8192 / 16384 merge CTAs at T = 1 / 4 / 8 took 42 / 159 / 320 us for 18 /
// 70 / 141 MB of partials, ncu, bench/results/2026-12-03-ncu-c0cffb9-h200). The row's max comes
// first (a pass over its partitions' m: max is exact in any order), then groups of kGroupBatch are
// folded with their loads issued together and combined in order. tuning::merge_rowwise picks it.
constexpr int kMergeRowThreads = 128;
template <int D>
__global__ void __launch_bounds__(kMergeRowThreads) merge_rows_kernel(const __grid_constant__ FwdParams P,
                                                                      int num_rows) {
  constexpr int kCols4 = D / 4;
  constexpr int kGroupsM = merge_groups(D, tuning::deterministic_merge_split(D));  // merge_kernel's
  constexpr int kGroupBatch = 8;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kMergeRowThreads + threadIdx.x;
  const int r = static_cast<int>(idx / kCols4), col = static_cast<int>(idx % kCols4) * 4;
  const bool live = r < num_rows;
  const MergeRow mr = P.merge_rows[live ? r : num_rows - 1];  // plan data: before the wait
  const float* ml = P.ws_ml + (static_cast<int64_t>(mr.slot) * P.slot_rows + mr.row) * 2;
  const int64_t wo = (static_cast<int64_t>(mr.slot) * P.slot_rows + mr.row) * D + col;  // (load_partial4)
  const int64_t kMlStride = static_cast<int64_t>(P.slot_rows) * 2;
  const int64_t kOStride = static_cast<int64_t>(P.slot_rows) * D;
  pdl_wait();
  if (!live) {
    pdl_launch_dependents();
    return;
  }
  const float sink2 = merge_sink_log2(P, mr);
  const float vscale = partial_value_scale(P, mr.head);
  float Mt = sink2;
#pragma unroll 8
  for (int p = 0; p < mr.num_parts; ++p) Mt = fmaxf(Mt, __ldcg(reinterpret_cast<const float2*>(ml + p * kMlStride)).x);
  float dt = sink2 == -INFINITY ? 0.0f : exp2f(sink2 - Mt);
  float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
  // group g holds the partitions p = merge_group_first(g) + j kGroupsM
  const int rounds = (mr.num_parts + kGroupsM - 1) / kGroupsM;
  for (int g0 = 0; g0 < kGroupsM; g0 += kGroupBatch) {
    MergeState st[kGroupBatch];
    for (int j = 0; j < rounds; ++j) {
      float2 mlb[kGroupBatch];
      float4 vb[kGroupBatch];
#pragma unroll
      for (int b = 0; b < kGroupBatch; ++b) {
        const int g = g0 + b;
        const int p = merge_group_first<kGroupsM>(g, mr.part0) + j * kGroupsM;
        mlb[b] = make_float2(-INFINITY, 0.0f);
        vb[b] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (g < kGroupsM && p < mr.num_parts) {
          mlb[b] = __ldcg(reinterpret_cast<const float2*>(ml + p * kMlStride));
          vb[b] = load_partial4(P, wo + p * kOStride, mlb[b].y * vscale);
        }
      }
#pragma unroll
      for (int b = 0; b < kGroupBatch; ++b) merge_fold(st[b], mlb[b], vb[b]);
    }
#pragma unroll
    for (int b = 0; b < kGroupBatch; ++b)
      if (g0 + b < kGroupsM) merge_combine(dt, a, Mt, make_float2(st[b].m, st[b].den), st[b].acc);
  }
  pdl_launch_dependents();
  merge_store(P, mr, col, Mt, dt, a);
}

}  // namespace cuda
}  // namespace pagedattn
