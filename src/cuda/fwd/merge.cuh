// merge_kernel: combines the (m, l, O) partials of a chunk's KV partitions into the output.
#pragma once

#include <type_traits>

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
// merge_fold_n / merge_combine_n: the same steps for N x 4 columns that share (m, l): each column's
// instructions are those of the 4-column forms.
template <int N>
struct MergeStateN {
  float m = -INFINITY, den = 0.0f;
  float4 acc[N] = {};
};
__device__ __forceinline__ float4 mul4_rn(const float4 a, const float s) {
  return make_float4(__fmul_rn(a.x, s), __fmul_rn(a.y, s), __fmul_rn(a.z, s), __fmul_rn(a.w, s));
}
__device__ __forceinline__ float4 fma4_rn(const float w, const float4 v, const float4 a) {
  return make_float4(__fmaf_rn(w, v.x, a.x), __fmaf_rn(w, v.y, a.y), __fmaf_rn(w, v.z, a.z), __fmaf_rn(w, v.w, a.w));
}
template <int N>
__device__ __forceinline__ void merge_fold_n(MergeStateN<N>& st, const float2 mlp, const float4 (&v)[N]) {
  if (mlp.x == -INFINITY) return;  // no visible key in this partition
  if (mlp.x > st.m) {
    const float s = fast_exp2(st.m - mlp.x);  // 0 while m is -inf
    st.den = __fmul_rn(st.den, s);
#pragma unroll
    for (int i = 0; i < N; ++i) st.acc[i] = mul4_rn(st.acc[i], s);
    st.m = mlp.x;
  }
  const float wgt = fast_exp2(mlp.x - st.m);
  st.den = __fmaf_rn(wgt, mlp.y, st.den);
#pragma unroll
  for (int i = 0; i < N; ++i) st.acc[i] = fma4_rn(wgt, v[i], st.acc[i]);
}
// the row's sum starts at the sink's term: dt = 2^(sink - Mt) (0 without a sink), a = 0
template <int N>
__device__ __forceinline__ void merge_combine_n(float& dt, float4 (&a)[N], const float Mt, const float2 mi,
                                                const float4 (&v)[N]) {
  if (mi.x == -INFINITY) return;
  const float wgt = fast_exp2(mi.x - Mt);
  dt = __fmaf_rn(wgt, mi.y, dt);
#pragma unroll
  for (int i = 0; i < N; ++i) a[i] = fma4_rn(wgt, v[i], a[i]);
}
using MergeState = MergeStateN<1>;
__device__ __forceinline__ void merge_fold(MergeState& st, const float2 mlp, const float4 v) {
  const float4 vv[1] = {v};
  merge_fold_n<1>(st, mlp, vv);
}
__device__ __forceinline__ void merge_combine(float& dt, float4& a, const float Mt, const float2 mi, const float4 v) {
  float4 aa[1] = {a};
  const float4 vv[1] = {v};
  merge_combine_n<1>(dt, aa, Mt, mi, vv);
  a = aa[0];
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
// Units (MergeRow::fold > 0: deterministic mode on the key-split kernel, tuning::kFoldBlock = B). The row's
// slots are two per partition (part0 = 2 p0, num_parts = 2 x its partitions); unit U = 2 b + w (absolute)
// is warpgroup w's partials of the partitions of block b (b B .. b B + B - 1, those of the chunk) folded in
// partition order (merge_fold_n), then rounded as a partial is stored (ws_half: f16 O / l, read back times
// l). The row's groups fold units as they fold partitions elsewhere. wg_kernel's own form folds the same
// units where its CTAs run whole blocks (FwdParams::fold_block) and leaves them as the row's partials
// (fold 0), with these steps, so a row's bits do not depend on who folded its units.
__device__ __forceinline__ int merge_unit_count(const MergeRow& mr, int& upart0) {
  constexpr int B = tuning::kFoldBlock;
  const int p0 = mr.part0 / 2, p1 = p0 + mr.num_parts / 2;
  upart0 = 2 * (p0 / B);
  return 2 * ((p1 + B - 1) / B - p0 / B);
}
// unit u of the row (relative: absolute unit upart0 + u) as a partial: its (m, l) and N x 4 columns of O
template <int N, bool kHalf>
__device__ __forceinline__ void load_unit(const FwdParams& P, const MergeRow& mr, const float* ml, int64_t wo,
                                          int64_t ml_stride, int64_t o_stride, float vscale, int u, float2& mlu,
                                          float4 (&v)[N]) {
  constexpr int B = tuning::kFoldBlock;
  using Raw = std::conditional_t<kHalf, uint2, float4>;  // (per 4 columns)
  const int p0 = mr.part0 / 2, np = mr.num_parts / 2;
  const int U = 2 * (p0 / B) + u, first = (U / 2) * B - p0, w = U % 2;
  float2 mlb[B];
  Raw vb[B][N];
#pragma unroll
  for (int k = 0; k < B; ++k) {  // the block's loads in flight together
    const int r = first + k;
    mlb[k] = make_float2(-INFINITY, 0.0f);
#pragma unroll
    for (int i = 0; i < N; ++i) vb[k][i] = Raw{};
    if (r >= 0 && r < np) {
      const int64_t sl = 2 * r + w;
      mlb[k] = __ldcg(reinterpret_cast<const float2*>(ml + sl * ml_stride));
#pragma unroll
      for (int i = 0; i < N; ++i) {
        if constexpr (kHalf) vb[k][i] = load_half_partial4(P, wo + i * 4 + sl * o_stride);
        else vb[k][i] = __ldcg(reinterpret_cast<const float4*>(P.ws_o + wo + i * 4 + sl * o_stride));
      }
    }
  }
  MergeStateN<N> st;
#pragma unroll
  for (int k = 0; k < B; ++k) {
    float4 x[N];
#pragma unroll
    for (int i = 0; i < N; ++i) {
      if constexpr (kHalf) x[i] = half_partial4(vb[k][i], mlb[k].y * vscale);
      else x[i] = vb[k][i];
    }
    merge_fold_n<N>(st, mlb[k], x);
  }
  mlu = make_float2(st.m, st.den);
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if constexpr (kHalf) {  // as wg_kernel stores it (f16 of O / l) and the merge reads a partial back
      const float inv = partial_inv(st.den), l = st.den * vscale;
      const float4 a = st.acc[i];
      const __half2 h0 = __floats2half2_rn(__fmul_rn(a.x, inv), __fmul_rn(a.y, inv));
      const __half2 h1 = __floats2half2_rn(__fmul_rn(a.z, inv), __fmul_rn(a.w, inv));
      const uint2 raw = make_uint2(*reinterpret_cast<const uint32_t*>(&h0), *reinterpret_cast<const uint32_t*>(&h1));
      v[i] = half_partial4(raw, l);
    } else {
      v[i] = st.acc[i];
    }
  }
}
__device__ __forceinline__ float merge_sink_log2(const FwdParams& P, const MergeRow& mr) {
  return P.sinks != nullptr ? P.sinks[mr.head] * kLog2e : -INFINITY;
}

// kGroupSplit (>= kSplit): the split whose partition groups the arithmetic follows (merge_groups(D,
// kGroupSplit) groups; deterministic mode's D / 64). With kGroupSplit > kSplit a thread folds
// kGroupSplit / kSplit of those groups for its columns, with all their loads in flight together, and the
// CTA combines them in group order as the kGroupSplit layout does: the same bits with a CTA per row
// instead of kGroupSplit / kSplit of them.
// kUnits: rows with MergeRow::fold may come (deterministic mode on the key-split kernel; a variant of its
// own: the unit path's registers, 84 against 40-82, would cost the default mode's merge its occupancy).
template <int D, int kSplit, int kBatch, int kGroupSplit = kSplit, bool kUnits = false>
__global__ void __launch_bounds__(kMergeThreads) merge_kernel(const __grid_constant__ FwdParams P) {
  constexpr int kCols4 = D / 4 / kSplit;              // float4 chunks of the row per CTA
  constexpr int kThreadGroups = merge_groups(D, kSplit);
  constexpr int kGroupsM = merge_groups(D, kGroupSplit);  // the arithmetic's groups
  constexpr int kPer = kGroupsM / kThreadGroups;          // groups per thread
  static_assert(kPer >= 1 && kPer * kThreadGroups == kGroupsM, "merge: groups per thread");
  __shared__ float2 ml_s[kGroupsM];
  __shared__ float4 acc_s[kGroupsM][kCols4];
  Timeline tl;  // diagnostic build only (PAGEDATTN_TIMELINE): 1 pdl wait, 2 partials folded, 3 end
  // plan data (never written by a kernel): read before waiting for the previous grid
  const MergeRow mr = P.merge_rows[blockIdx.x];
  const int tid = threadIdx.x;
  const int c4 = tid % kCols4, g = tid / kCols4;
  // (D = 80, 96, 112, 192: kCols4 may not divide the block; the threads past the last whole group idle)
  const bool grouped = kMergeThreads % kCols4 == 0 || g < kThreadGroups;
  const int col = ((kSplit == 1 ? 0 : static_cast<int>(blockIdx.y) * kCols4) + c4) * 4;  // first of its 4 columns
  const float* ml = P.ws_ml + (static_cast<int64_t>(mr.slot) * P.slot_rows + mr.row) * 2;
  const int64_t wo = (static_cast<int64_t>(mr.slot) * P.slot_rows + mr.row) * D + col;  // (load_partial4)
  const int64_t kMlStride = static_cast<int64_t>(P.slot_rows) * 2;
  const int64_t kOStride = static_cast<int64_t>(P.slot_rows) * D;
  pdl_wait();
  tl.mark(1);
  const float sink2 = merge_sink_log2(P, mr);
  const float vscale = partial_value_scale(P, mr.head);  // (1 but for fp8's f16 partials)

  MergeState st[kPer];
  // A thread's loads of up to kBatch partitions per group go out together, then fold in partition order
  // (the same bits for every kBatch). A loop that loads and folds one partition at a time waits two L2
  // round trips per partition: the O load is not hoisted above the branch on m (SASS, before run s9a).
  // Batches of 4 measured 0.93-0.98x at 8k and 32k (run s9a), but their registers (32 -> 52) cost the
  // 32 x 8k batch 1.5-3.4%, where no thread folds more than one partition: the planner picks kBatch.
  // Every slot is written for rows < rows, so the loads of partitions without a visible key read finite
  // values that merge_fold() skips.
  // group gm folds the partitions p with (part0 + p) % kGroupsM == gm (part0: MergeRow); this thread's
  // groups are g + j * kThreadGroups
  // (kPer = 1: p = p0 + b kGroupsM, the loop of the layout without kGroupSplit, instruction for instruction)
  int first[kPer];
  first[0] = merge_group_first<kGroupsM>(g, mr.part0);
  int first_min = first[0];
#pragma unroll
  for (int j = 1; j < kPer; ++j) {
    first[j] = merge_group_first<kGroupsM>(g + j * kThreadGroups, mr.part0);
    first_min = min(first_min, first[j]);
  }
  if (kUnits && mr.fold > 0 && grouped) {  // units folded from the row's slots (load_unit), one per group at a time
    int upart0;
    const int nu = merge_unit_count(mr, upart0);
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      for (int u = merge_group_first<kGroupsM>(g + j * kThreadGroups, upart0); u < nu; u += kGroupsM) {
        float2 mlu;
        float4 v[1];
        if (P.ws_half) load_unit<1, true>(P, mr, ml, wo, kMlStride, kOStride, vscale, u, mlu, v);
        else load_unit<1, false>(P, mr, ml, wo, kMlStride, kOStride, vscale, u, mlu, v);
        merge_fold(st[j], mlu, v[0]);
      }
    }
  }
  for (int p0 = first_min; (!kUnits || mr.fold == 0) && grouped && p0 < mr.num_parts; p0 += kGroupsM * kBatch) {
    float2 mlb[kPer][kBatch];
    float4 vb[kPer][kBatch];
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int p = first[j] + (p0 - first_min) + b * kGroupsM;
        mlb[j][b] = make_float2(-INFINITY, 0.0f);
        vb[j][b] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (p < mr.num_parts) {
          mlb[j][b] = __ldcg(reinterpret_cast<const float2*>(ml + p * kMlStride));
          vb[j][b] = load_partial4(P, wo + p * kOStride, mlb[j][b].y * vscale);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
#pragma unroll
      for (int b = 0; b < kBatch; ++b) merge_fold(st[j], mlb[j][b], vb[j][b]);
    }
  }
  if (grouped) {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      if (c4 == 0) ml_s[g + j * kThreadGroups] = make_float2(st[j].m, st[j].den);
      acc_s[g + j * kThreadGroups][c4] = st[j].acc[0];
    }
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
// in one thread per kC columns of a row, so the CTAs are few and every thread's loads are in flight
// together. merge_kernel spends a CTA of 512 threads per row and column block (one per SM at its 82
// registers), its groups' combine serial in 16 of them: over many waves each CTA waits its latency in
// turn (the 32 x 8k batch in deterministic mode: 2048 / 8192 / 16384 merge CTAs at T = 1 / 4 / 8 took
// 42 / 159 / 320 us for 18 / 70 / 141 MB of partials, ncu, bench/results/2026-12-03-ncu-c0cffb9-h200).
// A CTA holds whole rows (merge_rows_per_cta). The row's max takes one round trip (each of the row's threads
// reads the m of every kColsT-th partition, and the row's maxima meet in shared memory: max is exact in any
// order), then each batch of kGroupBatch groups one per kRoundBatch of their partitions (loads issued
// together, folded in partition order; f16 partials 2 rounds, f32 1). With 4 columns per thread (158-166
// registers, 3 CTAs per SM) the batch's T = 8 merge (4096 rows of 64 partials, 141 MB) took 93.5 us, and
// 229.7 us with 16 round trips instead of 5 (H100, runs 2026-12-07-rt1-36ab8e7-h100 and op1). It was then
// bound by its instructions, not its round trips (ncu, run 2026-12-07-sm2-9842ea4-h100: an instruction
// issued on half the cycles at 3 warps per scheduler; staging a row's partials in shared memory did not
// change its time): each thread's work per partition is mostly the row's scalars (m, l, the weights), the
// same in every thread of the row. 8 columns per thread (kC = 8: one 16-byte load of f16 partials, 4
// groups per batch, 128 registers, 4 CTAs per SM) share them over twice the columns: T = 8 61.3 us against
// 95.6, T = 4 34.3 against 51.3, u8 T = 8 38.0 against 54.6 (run 2026-12-07-mc8-23b29c3-h100, same call).
// They also halve the CTAs, so the host takes them where those still give every SM one (tuning::merge_cols8).
constexpr int kMergeRowThreads = 128;
// Columns per thread: 8 where the row's threads divide into float4 reads of their maxima (D = 64, 96, 128,
// 192, 256), else 4 (D = 80, 112)
constexpr int merge_row_cols(int head_size) { return (head_size / 8) % 4 == 0 ? 8 : 4; }
constexpr int merge_rows_per_cta(int head_size, int cols) { return kMergeRowThreads / (head_size / cols); }
template <int D, int kC>
__global__ void __launch_bounds__(kMergeRowThreads, kC == 8 ? 4 : 3)
    merge_rows_kernel(const __grid_constant__ FwdParams P, int num_rows) {
  constexpr int kN = kC / 4;          // float4s per thread
  constexpr int kColsT = D / kC;      // threads per row
  constexpr int kRowsPerCta = merge_rows_per_cta(D, kC);  // (D = 80: 6 rows of 20 threads; 8 threads idle)
  static_assert(kColsT % 4 == 0 && kRowsPerCta >= 1, "the row maxima are read as float4");
  constexpr int kGroupsM = merge_groups(D, tuning::deterministic_merge_split(D));  // merge_kernel's
  constexpr int kGroupBatch = kC == 8 ? 4 : 8;
  __shared__ __align__(16) float max_s[kMergeRowThreads];
  const int lr = threadIdx.x / kColsT, ct = threadIdx.x % kColsT;
  const int r = static_cast<int>(blockIdx.x) * kRowsPerCta + lr, col = ct * kC;
  const bool live = lr < kRowsPerCta && r < num_rows;
  const MergeRow mr = P.merge_rows[live ? r : num_rows - 1];  // plan data: before the wait
  const float* ml = P.ws_ml + (static_cast<int64_t>(mr.slot) * P.slot_rows + mr.row) * 2;
  const int64_t wo = (static_cast<int64_t>(mr.slot) * P.slot_rows + mr.row) * D + col;  // (load_partial4)
  const int64_t kMlStride = static_cast<int64_t>(P.slot_rows) * 2;
  const int64_t kOStride = static_cast<int64_t>(P.slot_rows) * D;
  pdl_wait();
  float m = -INFINITY;
  if (live)
    for (int p = ct; p < mr.num_parts; p += kColsT)
      m = fmaxf(m, __ldcg(reinterpret_cast<const float2*>(ml + p * kMlStride)).x);
  max_s[threadIdx.x] = m;
  __syncthreads();
  if (!live) {
    pdl_launch_dependents();
    return;
  }
  const float sink2 = merge_sink_log2(P, mr);
  const float vscale = partial_value_scale(P, mr.head);
  float Mt = sink2;
#pragma unroll
  for (int i = 0; i < kColsT; i += 4) {
    const float4 v = *reinterpret_cast<const float4*>(&max_s[lr * kColsT + i]);
    Mt = fmaxf(Mt, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
  }
  float dt = sink2 == -INFINITY ? 0.0f : exp2f(sink2 - Mt);
  float4 a[kN] = {};
  // group g holds the partitions p = merge_group_first(g) + j kGroupsM. f16 partials stay raw bytes in
  // flight (2 registers per 4 columns) until their fold.
  const int rounds = (mr.num_parts + kGroupsM - 1) / kGroupsM;
  auto fold_all = [&](auto half_tag) {
    constexpr bool kHalf = decltype(half_tag)::value;
    using Raw = std::conditional_t<kHalf, uint2, float4>;  // (per 4 columns)
    constexpr int kRoundBatch = kHalf ? 2 : 1;  // (f32 partials: twice the registers per load)
    for (int g0 = 0; g0 < kGroupsM; g0 += kGroupBatch) {
      MergeStateN<kN> st[kGroupBatch];
      for (int j0 = 0; j0 < rounds; j0 += kRoundBatch) {
        float2 mlb[kRoundBatch][kGroupBatch];
        Raw vb[kRoundBatch][kGroupBatch][kN];
#pragma unroll
        for (int jj = 0; jj < kRoundBatch; ++jj) {
#pragma unroll
          for (int b = 0; b < kGroupBatch; ++b) {
            const int g = g0 + b;
            const int p = merge_group_first<kGroupsM>(g, mr.part0) + (j0 + jj) * kGroupsM;
            mlb[jj][b] = make_float2(-INFINITY, 0.0f);
#pragma unroll
            for (int i = 0; i < kN; ++i) vb[jj][b][i] = Raw{};
            if (g < kGroupsM && p < mr.num_parts) {
              mlb[jj][b] = __ldcg(reinterpret_cast<const float2*>(ml + p * kMlStride));
              if constexpr (kHalf && kN == 2) {  // 8 columns of f16: one 16-byte load
                const __half* src = reinterpret_cast<const __half*>(P.ws_o) + wo + p * kOStride;
                const uint4 u = __ldcg(reinterpret_cast<const uint4*>(src));
                vb[jj][b][0] = make_uint2(u.x, u.y);
                vb[jj][b][1] = make_uint2(u.z, u.w);
              } else {
#pragma unroll
                for (int i = 0; i < kN; ++i) {
                  if constexpr (kHalf) vb[jj][b][i] = load_half_partial4(P, wo + i * 4 + p * kOStride);
                  else vb[jj][b][i] = __ldcg(reinterpret_cast<const float4*>(P.ws_o + wo + i * 4 + p * kOStride));
                }
              }
            }
          }
        }
#pragma unroll
        for (int jj = 0; jj < kRoundBatch; ++jj) {
#pragma unroll
          for (int b = 0; b < kGroupBatch; ++b) {
            float4 v[kN];
#pragma unroll
            for (int i = 0; i < kN; ++i) {
              if constexpr (kHalf) v[i] = half_partial4(vb[jj][b][i], mlb[jj][b].y * vscale);
              else v[i] = vb[jj][b][i];
            }
            merge_fold_n<kN>(st[b], mlb[jj][b], v);
          }
        }
      }
#pragma unroll
      for (int b = 0; b < kGroupBatch; ++b)
        if (g0 + b < kGroupsM) merge_combine_n<kN>(dt, a, Mt, make_float2(st[b].m, st[b].den), st[b].acc);
    }
  };
  if (mr.fold > 0) {  // units folded from the row's slots (load_unit), a group at a time
    int upart0;
    const int nu = merge_unit_count(mr, upart0);
    for (int g = 0; g < kGroupsM; ++g) {
      MergeStateN<kN> st;
      for (int u = merge_group_first<kGroupsM>(g, upart0); u < nu; u += kGroupsM) {
        float2 mlu;
        float4 v[kN];
        if (P.ws_half) load_unit<kN, true>(P, mr, ml, wo, kMlStride, kOStride, vscale, u, mlu, v);
        else load_unit<kN, false>(P, mr, ml, wo, kMlStride, kOStride, vscale, u, mlu, v);
        merge_fold_n<kN>(st, mlu, v);
      }
      merge_combine_n<kN>(dt, a, Mt, make_float2(st.m, st.den), st.acc);
    }
  } else if (P.ws_half) {
    fold_all(std::true_type{});
  } else {
    fold_all(std::false_type{});
  }
  pdl_launch_dependents();
#pragma unroll
  for (int i = 0; i < kN; ++i) merge_store(P, mr, col + 4 * i, Mt, dt, a[i]);
}

}  // namespace cuda
}  // namespace pagedattn
