// The attention kernel of pagedattn: one CTA per (chunk of new tokens, KV partition, kv head).
//
// A chunk's T*G query rows (tokens x heads sharing one kv head) are loaded once; the partition's keys
// stream through shared memory in 64-key tiles (cp.async, double buffered, gathered through the block
// table). Per tile:
//   phase 1  S = Q K^T on tensor cores (f32 accumulate)                    -> smem
//   phase 2  masks (causal past+t+1, tree, window), ALiBi, online softmax  -> P (f16/bf16) in smem
//   phase 3  O = alpha * O + P V on tensor cores (registers)
// Every K/V byte is read once for all T*G rows: this is what makes T=8 cost what T=1 costs.
// u8 caches: the codes are converted exactly to f16 (integers 0..255) in shared memory, the MMAs run
// on raw codes, and the affine parameters are folded into per-key epilogues:
//   s_j = scale_j * (q . code_j - zp_j * sum(q))
//   o   = sum_j (p_j * vscale_j) code_j - sum_j (p_j * vscale_j) * vzp_j
// The op's KV write-in is fused: before reading, a CTA writes (and quantises) every new token that lies
// in its key range, for its kv head (several CTAs may write the same row: they write identical bytes).
// Partitions of one chunk leave (m, l, O) partials; merge_kernel combines them.
#pragma once

#include <cfloat>
#include <climits>
#include <type_traits>

#include "common/numeric.h"
#include "cuda/common/ptx.cuh"
#include "cuda/fwd/params.h"

namespace pagedattn {
namespace cuda {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBlockKV = planner::kBlockKV;  // keys per tile
constexpr int kSlotRows = planner::kMaxRows;

template <int KV>
struct KvTraits;
template <>
struct KvTraits<kKvF16> {
  using mma_t = __half;    // operand type of the MMAs
  using cache_t = __half;  // element type stored in the cache
};
template <>
struct KvTraits<kKvBF16> {
  using mma_t = __nv_bfloat16;
  using cache_t = __nv_bfloat16;
};
template <>
struct KvTraits<kKvU8> {
  using mma_t = __half;  // codes 0..255 are exact in f16
  using cache_t = uint8_t;
};

// Shared memory of one CTA, sized by sizeof (rows padded by 16 bytes: conflict-free ldmatrix).
template <int D, int KV, int RT>
struct SharedStorage {
  using T = typename KvTraits<KV>::mma_t;
  static constexpr int kRows = RT * 16;
  static constexpr int kLd = D + 8;           // padded row of a Q/K/V tile (elements)
  static constexpr int kLdS = kBlockKV + 4;   // padded row of S (floats)
  static constexpr int kLdP = kBlockKV + 8;   // padded row of P (elements)
  static constexpr bool kU8 = KV == kKvU8;

  struct StageHalf {  // one pipeline stage of a 16-bit cache
    alignas(16) T k[kBlockKV][kLd];
    alignas(16) T v[kBlockKV][kLd];
  };
  struct StageU8 {  // one pipeline stage of a u8 cache: raw codes and their f16 parameters
    alignas(16) uint8_t k[kBlockKV][D];
    alignas(16) uint8_t v[kBlockKV][D];
    alignas(16) uint16_t ks[kBlockKV], kz[kBlockKV], vs[kBlockKV], vz[kBlockKV];
  };
  struct Converted {  // u8: the current tile as f16 codes, its parameters as float
    alignas(16) T k[kBlockKV][kLd];
    alignas(16) T v[kBlockKV][kLd];
    float ks[kBlockKV], kz[kBlockKV], vs[kBlockKV], vz[kBlockKV];
  };
  struct Empty {};

  alignas(16) T q[kRows][kLd];
  std::conditional_t<kU8, StageU8, StageHalf> stage[2];
  std::conditional_t<kU8, Converted, Empty> conv;
  alignas(16) float s[kRows][kLdS];
  alignas(16) T p[kRows][kLdP];
  float m[kRows], l[kRows], alpha[kRows], corr[kRows], qsum[kRows];
};

// --- small helpers ------------------------------------------------------------------------------
__device__ __forceinline__ float load_io(const void* base, int64_t i, int io) {
  if (io == kIoF16) return __half2float(static_cast<const __half*>(base)[i]);
  if (io == kIoBF16) return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
  return static_cast<const float*>(base)[i];
}
__device__ __forceinline__ void store_io(void* base, int64_t i, int io, float v) {
  if (io == kIoF16)
    static_cast<__half*>(base)[i] = __float2half_rn(v);
  else if (io == kIoBF16)
    static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(v);
  else
    static_cast<float*>(base)[i] = v;
}

// Index (in elements of a [num_blocks, Hk, bs, D] cache, divided by D) of key position `pos`.
__device__ __forceinline__ int64_t cache_row(const int32_t* table, int pos, int hk, int Hk, int bs_log2) {
  const int64_t blk = __ldg(table + (pos >> bs_log2));
  return ((blk * Hk + hk) << bs_log2) | (pos & ((1 << bs_log2) - 1));
}

// One warp writes (and for u8 quantises) one new key or value row of kv head `hk` into the cache.
template <int D, int KV>
__device__ __forceinline__ void write_row(const void* src, int64_t src_off, void* cache, uint16_t* scale,
                                          uint16_t* zp, int64_t row, int io, int lane) {
  constexpr int kPer = D / 32;
  float x[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) x[i] = load_io(src, src_off + lane * kPer + i, io);
  if constexpr (KV == kKvU8) {
    float mn = x[0], mx = x[0];
#pragma unroll
    for (int i = 1; i < kPer; ++i) {
      mn = fminf(mn, x[i]);
      mx = fmaxf(mx, x[i]);
    }
    mn = warp_min(mn);
    mx = warp_max(mx);
    const num::U8Params qp = num::u8_params(mn, mx);
    uint8_t* dst = static_cast<uint8_t*>(cache) + row * D + lane * kPer;
#pragma unroll
    for (int i = 0; i < kPer; ++i) dst[i] = num::u8_quantize(x[i], qp);
    if (lane == 0) {
      scale[row] = qp.scale_bits;
      zp[row] = qp.zp_bits;
    }
  } else {
    using C = typename KvTraits<KV>::cache_t;
    C* dst = static_cast<C*>(cache) + row * D + lane * kPer;
#pragma unroll
    for (int i = 0; i < kPer; ++i) dst[i] = from_float<C>(x[i]);
  }
}

// Issues the async copies of one 64-key tile (keys [j0, j0+64) clipped to kv_end: the rest zero-filled).
template <int D, int KV, int RT>
__device__ __forceinline__ void load_tile(SharedStorage<D, KV, RT>& sm, int stage, const FwdParams& P,
                                          const int32_t* table, int hk, int j0, int kv_end, int tid) {
  using C = typename KvTraits<KV>::cache_t;
  constexpr int kChunksPerRow = D * static_cast<int>(sizeof(C)) / 16;
  constexpr int kElemsPerChunk = 16 / static_cast<int>(sizeof(C));
  const C* kc = static_cast<const C*>(P.k_cache);
  const C* vc = static_cast<const C*>(P.v_cache);
  auto& st = sm.stage[stage];
#pragma unroll 4
  for (int idx = tid; idx < kBlockKV * kChunksPerRow; idx += kThreads) {
    const int r = idx / kChunksPerRow, c = idx % kChunksPerRow;
    const int j = j0 + r;
    const bool ok = j < kv_end;
    const int64_t off = ok ? cache_row(table, j, hk, P.Hk, P.block_size_log2) * D + c * kElemsPerChunk : 0;
    cp_async_16(&st.k[r][c * kElemsPerChunk], kc + off, ok ? 16 : 0);
    cp_async_16(&st.v[r][c * kElemsPerChunk], vc + off, ok ? 16 : 0);
  }
  if constexpr (KV == kKvU8) {
    // 4 parameter arrays x 8 chunks of 8 tokens (block_size >= 16, so a chunk stays in one block).
    if (tid < 32) {
      const int a = tid / 8, c = tid % 8;
      const int j = j0 + c * 8;
      const bool ok = j < kv_end;
      const uint16_t* src = a == 0 ? P.k_scale : a == 1 ? P.k_zp : a == 2 ? P.v_scale : P.v_zp;
      uint16_t* dst = a == 0 ? st.ks : a == 1 ? st.kz : a == 2 ? st.vs : st.vz;
      const int64_t off = ok ? cache_row(table, j, hk, P.Hk, P.block_size_log2) : 0;
      cp_async_16(dst + c * 8, src + off, ok ? 16 : 0);
    }
  }
}

// u8: codes -> f16 (exact: 0x6400 | b is the half 1024 + b), parameters -> float.
template <int D, int RT>
__device__ __forceinline__ void convert_tile(SharedStorage<D, kKvU8, RT>& sm, int stage, int tid) {
  auto& st = sm.stage[stage];
  constexpr int kChunks = kBlockKV * D / 16;
  const __half2 k1024 = __float2half2_rn(1024.0f);
#pragma unroll 2
  for (int idx = tid; idx < 2 * kChunks; idx += kThreads) {
    const bool is_v = idx >= kChunks;
    const int i = is_v ? idx - kChunks : idx;
    const int r = i / (D / 16), c = (i % (D / 16)) * 16;
    const uint4 raw = *reinterpret_cast<const uint4*>(is_v ? &st.v[r][c] : &st.k[r][c]);
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
    uint32_t h[8];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      uint32_t lo = __byte_perm(w[e], 0x64u, 0x4140u), hi = __byte_perm(w[e], 0x64u, 0x4342u);
      __half2 a = __hsub2(*reinterpret_cast<__half2*>(&lo), k1024);
      __half2 b = __hsub2(*reinterpret_cast<__half2*>(&hi), k1024);
      h[2 * e] = *reinterpret_cast<uint32_t*>(&a);
      h[2 * e + 1] = *reinterpret_cast<uint32_t*>(&b);
    }
    __half* dst = is_v ? &sm.conv.v[r][c] : &sm.conv.k[r][c];
    reinterpret_cast<uint4*>(dst)[0] = make_uint4(h[0], h[1], h[2], h[3]);
    reinterpret_cast<uint4*>(dst)[1] = make_uint4(h[4], h[5], h[6], h[7]);
  }
  if (tid < kBlockKV) {
    sm.conv.ks[tid] = num::f16_bits_to_f32(st.ks[tid]);
    sm.conv.kz[tid] = num::f16_bits_to_f32(st.kz[tid]);
    sm.conv.vs[tid] = num::f16_bits_to_f32(st.vs[tid]);
    sm.conv.vz[tid] = num::f16_bits_to_f32(st.vz[tid]);
  }
}

template <int D, int KV, int RT>
__global__ void __launch_bounds__(kThreads, 1)
    fwd_kernel(const __grid_constant__ FwdParams P, const int item_offset) {
  using T = typename KvTraits<KV>::mma_t;
  using Smem = SharedStorage<D, KV, RT>;
  constexpr int kRows = Smem::kRows;
  constexpr int kGroups = kWarps / RT;          // warps sharing one row tile
  constexpr int kKeysPerWarp = kBlockKV / kGroups;  // phase 1: = 8 * RT
  constexpr int kN1 = kKeysPerWarp / 8;         // phase 1 n-tiles per warp
  constexpr int kColsPerWarp = D / kGroups;     // phase 3
  constexpr int kN3 = kColsPerWarp / 8;         // phase 3 n-tiles per warp
  static_assert(kN1 >= 1 && kN3 >= 1, "tile split");

  extern __shared__ __align__(16) uint8_t smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);

  const planner::WorkItem w = P.items[item_offset + blockIdx.x];
  const int hk = blockIdx.y;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int G = P.G;
  const int rows = w.nt * G;

  // NOTE: everything below may read what the previous kernel in the stream wrote.
  pdl_wait();

  const int past = P.past_lens[w.seq];
  const int tok0 = P.subseq_begins[w.seq];
  const int t_seq = P.subseq_begins[w.seq + 1] - tok0;
  const int32_t* table = P.block_indices + P.block_indices_begins[w.seq];

  // --- fused KV write-in: new tokens inside this CTA's key range ----------------------------------
  if (P.k_new != nullptr) {
    const int wb = max(w.kv_begin, past), we = min(w.kv_end, past + t_seq);
    for (int pos = wb + warp; pos < we; pos += kWarps) {
      const int64_t src = static_cast<int64_t>(tok0 + pos - past) * P.Hk * D + static_cast<int64_t>(hk) * D;
      const int64_t row = cache_row(table, pos, hk, P.Hk, P.block_size_log2);
      write_row<D, KV>(P.k_new, src, P.k_cache, P.k_scale, P.k_zp, row, P.io_dtype, lane);
      write_row<D, KV>(P.v_new, src, P.v_cache, P.v_scale, P.v_zp, row, P.io_dtype, lane);
    }
    __threadfence();  // NOTE: the rows just written are read back below through cp.async (L2)
    __syncthreads();
  }

  // --- Q rows (token-major, head-minor) -> smem, converted to the MMA type; padding rows zero -----
  for (int idx = tid; idx < kRows * (D / 8); idx += kThreads) {
    const int r = idx / (D / 8), c = (idx % (D / 8)) * 8;
    alignas(16) T v[8];
    if (r < rows) {
      const int tl = r / G, g = r % G;
      const int64_t base = static_cast<int64_t>(tok0 + w.t0 + tl) * P.H * D + static_cast<int64_t>(hk * G + g) * D + c;
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = from_float<T>(load_io(P.q, base + e, P.io_dtype));
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = from_float<T>(0.0f);
    }
    *reinterpret_cast<uint4*>(&sm.q[r][c]) = *reinterpret_cast<const uint4*>(v);
  }
  if (tid < kRows) {
    sm.m[tid] = -INFINITY;
    sm.l[tid] = 0.0f;
    sm.corr[tid] = 0.0f;
  }

  // --- pipeline prologue ----------------------------------------------------------------------------
  const int n_tiles = (w.kv_end - w.kv_begin + kBlockKV - 1) / kBlockKV;
  load_tile<D, KV, RT>(sm, 0, P, table, hk, w.kv_begin, w.kv_end, tid);
  cp_async_commit();
  if (n_tiles > 1) load_tile<D, KV, RT>(sm, 1, P, table, hk, w.kv_begin + kBlockKV, w.kv_end, tid);
  cp_async_commit();
  __syncthreads();

  if constexpr (KV == kKvU8) {  // sum of the (f16-rounded) query row, for the key zero points
    for (int r = warp; r < kRows; r += kWarps) {
      float s = 0.0f;
      for (int d = lane; d < D; d += 32) s += __half2float(sm.q[r][d]);
      s = warp_sum(s);
      if (lane == 0) sm.qsum[r] = s;
    }
  }

  // Q fragments of this warp's row tile stay in registers for the whole partition.
  const int rt = warp % RT;       // row tile of this warp (phases 1 and 3)
  const int grp = warp / RT;      // key group (phase 1) / column group (phase 3)
  uint32_t qf[D / 16][4];
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) ldmatrix_x4(qf[ks], &sm.q[rt * 16 + (lane % 16)][ks * 16 + (lane / 16) * 8]);

  float o[kN3][4];
#pragma unroll
  for (int n = 0; n < kN3; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

  for (int it = 0; it < n_tiles; ++it) {
    const int stage = it & 1;
    const int j0 = w.kv_begin + it * kBlockKV;

    // wait for this tile's K/V
    cp_async_wait<1>();
    __syncthreads();

    const T* sK;
    const T* sV;
    if constexpr (KV == kKvU8) {
      convert_tile<D, RT>(sm, stage, tid);
      __syncthreads();
      // the raw stage is free again: start the tile after next now
      if (it + 2 < n_tiles) load_tile<D, KV, RT>(sm, stage, P, table, hk, j0 + 2 * kBlockKV, w.kv_end, tid);
      cp_async_commit();
      sK = &sm.conv.k[0][0];
      sV = &sm.conv.v[0][0];
    } else {
      sK = &sm.stage[stage].k[0][0];
      sV = &sm.stage[stage].v[0][0];
    }

    // phase 1: S = Q K^T for this warp's row tile and keys [kb, kb + kKeysPerWarp)
    {
      const int kb = grp * kKeysPerWarp;
      float acc[kN1][4];
#pragma unroll
      for (int n = 0; n < kN1; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
        for (int n = 0; n < kN1; ++n) {
          uint32_t b[2];
          ldmatrix_x2(b, sK + (kb + n * 8 + (lane % 8)) * Smem::kLd + ks * 16 + ((lane / 8) % 2) * 8);
          mma_16816<T>(acc[n], qf[ks], b[0], b[1]);
        }
      }
      const int r0 = rt * 16 + lane / 4;
#pragma unroll
      for (int n = 0; n < kN1; ++n) {
        const int c = kb + n * 8 + 2 * (lane % 4);
        *reinterpret_cast<float2*>(&sm.s[r0][c]) = make_float2(acc[n][0], acc[n][1]);
        *reinterpret_cast<float2*>(&sm.s[r0 + 8][c]) = make_float2(acc[n][2], acc[n][3]);
      }
    }
    __syncthreads();

    // phase 2: masks, scores, online softmax; one warp per row, lanes over keys
    for (int r = warp; r < kRows; r += kWarps) {
      float pv[2] = {0.0f, 0.0f};
      float alpha = 1.0f;
      if (r < rows) {
        const int t = w.t0 + r / G;
        const int h = hk * G + r % G;
        const int qpos = past + t;
        const int lo = P.sliding_window > 0 ? qpos - P.sliding_window + 1 : INT_MIN;
        const float slope2 = P.alibi != nullptr ? P.alibi[h] * kLog2e : 0.0f;
        const uint8_t* qq = P.qq_bias != nullptr ? P.qq_bias + P.qq_bias_begins[w.seq] + static_cast<int64_t>(t) * t_seq : nullptr;
        float s[2];
        bool vis[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int c = lane + 32 * e;
          const int j = j0 + c;
          vis[e] = j < w.kv_end && j <= qpos && j >= lo && (qq == nullptr || j < past || qq[j - past] != 0);
          float raw = sm.s[r][c];
          if constexpr (KV == kKvU8) raw = sm.conv.ks[c] * (raw - sm.conv.kz[c] * sm.qsum[r]);
          s[e] = vis[e] ? raw * P.scale_log2 + slope2 * static_cast<float>(j - qpos) : -INFINITY;
        }
        const float m_old = sm.m[r];
        const float m_new = fmaxf(m_old, warp_max(fmaxf(s[0], s[1])));
        float p[2] = {0.0f, 0.0f};
        if (m_new != -INFINITY) {
          alpha = exp2f(m_old - m_new);
          p[0] = exp2f(s[0] - m_new);
          p[1] = exp2f(s[1] - m_new);
        }
        const float l_new = sm.l[r] * alpha + warp_sum(p[0] + p[1]);
        float corr_new = 0.0f;
        if constexpr (KV == kKvU8) {
          float cz = 0.0f;
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int c = lane + 32 * e;
            // NOTE: masked keys may carry NaN parameters (unwritten slots): never multiply them
            pv[e] = vis[e] ? __half2float(__float2half_rn(p[e] * sm.conv.vs[c])) : 0.0f;
            cz += vis[e] ? pv[e] * sm.conv.vz[c] : 0.0f;
          }
          corr_new = sm.corr[r] * alpha + warp_sum(cz);
        } else {
          pv[0] = p[0];
          pv[1] = p[1];
        }
        __syncwarp();
        if (lane == 0) {
          sm.m[r] = m_new;
          sm.l[r] = l_new;
          sm.corr[r] = corr_new;
        }
      }
      sm.p[r][lane] = from_float<T>(pv[0]);
      sm.p[r][lane + 32] = from_float<T>(pv[1]);
      if (lane == 0) sm.alpha[r] = alpha;
    }
    __syncthreads();

    // phase 3: O = alpha * O + P V for this warp's row tile and columns [d0, d0 + kColsPerWarp)
    {
      const int d0 = grp * kColsPerWarp;
      const float a_lo = sm.alpha[rt * 16 + lane / 4], a_hi = sm.alpha[rt * 16 + lane / 4 + 8];
#pragma unroll
      for (int n = 0; n < kN3; ++n) {
        o[n][0] *= a_lo;
        o[n][1] *= a_lo;
        o[n][2] *= a_hi;
        o[n][3] *= a_hi;
      }
#pragma unroll
      for (int kk = 0; kk < kBlockKV / 16; ++kk) {
        uint32_t a[4];
        ldmatrix_x4(a, &sm.p[rt * 16 + (lane % 16)][kk * 16 + (lane / 16) * 8]);
        const int key = kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
#pragma unroll
        for (int n = 0; n + 1 < kN3; n += 2) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, sV + key * Smem::kLd + d0 + (n + lane / 16) * 8);
          mma_16816<T>(o[n], a, b[0], b[1]);
          mma_16816<T>(o[n + 1], a, b[2], b[3]);
        }
        if constexpr (kN3 % 2 == 1) {
          uint32_t b[2];
          ldmatrix_x2_trans(b, sV + key * Smem::kLd + d0 + (kN3 - 1) * 8);
          mma_16816<T>(o[kN3 - 1], a, b[0], b[1]);
        }
      }
    }
    __syncthreads();  // this stage and S/P are reused by the next tiles

    if constexpr (KV != kKvU8) {
      if (it + 2 < n_tiles) load_tile<D, KV, RT>(sm, stage, P, table, hk, j0 + 2 * kBlockKV, w.kv_end, tid);
      cp_async_commit();
    }
  }
  cp_async_wait<0>();

  pdl_launch_dependents();

  // --- epilogue: normalised output (one partition) or a partial for the merge kernel --------------
  const int d0 = grp * kColsPerWarp;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = rt * 16 + lane / 4 + half * 8;
    if (r >= rows) continue;
    const float m = sm.m[r], l = sm.l[r], corr = sm.corr[r];
    const int tl = r / G, h = hk * G + r % G;
    const int64_t token = tok0 + w.t0 + tl;
    if (w.slot < 0) {
      float den = l;
      if (P.sinks != nullptr) den += exp2f(P.sinks[h] * kLog2e - m);
      const float inv = 1.0f / den;
      const int64_t base = token * P.H * D + static_cast<int64_t>(h) * D;
#pragma unroll
      for (int n = 0; n < kN3; ++n) {
        const int c = d0 + n * 8 + 2 * (lane % 4);
        store_io(P.out, base + c, P.io_dtype, (o[n][2 * half] - corr) * inv);
        store_io(P.out, base + c + 1, P.io_dtype, (o[n][2 * half + 1] - corr) * inv);
      }
    } else {
      const int64_t slot = w.slot + static_cast<int64_t>(hk) * w.num_parts;
      float* wo = P.ws_o + (slot * kSlotRows + r) * D;
#pragma unroll
      for (int n = 0; n < kN3; ++n) {
        const int c = d0 + n * 8 + 2 * (lane % 4);
        *reinterpret_cast<float2*>(wo + c) = make_float2(o[n][2 * half] - corr, o[n][2 * half + 1] - corr);
      }
      if (grp == 0 && lane % 4 == 0) {
        P.ws_ml[(slot * kSlotRows + r) * 2] = m;
        P.ws_ml[(slot * kSlotRows + r) * 2 + 1] = l;
      }
    }
  }
}

// Combines the partitions of one query row: out = sum_p 2^(m_p - M) O_p / (sum_p 2^(m_p - M) l_p + sink).
// One CTA per row; thread i owns 4 consecutive columns.
template <int D>
__global__ void __launch_bounds__(D / 4) merge_kernel(const __grid_constant__ FwdParams P) {
  pdl_wait();
  const MergeRow mr = P.merge_rows[blockIdx.x];
  const int c = threadIdx.x * 4;
  const float* ml = P.ws_ml + (static_cast<int64_t>(mr.slot) * kSlotRows + mr.row) * 2;
  constexpr int64_t kSlotStride = static_cast<int64_t>(kSlotRows) * 2;
  float M = P.sinks != nullptr ? P.sinks[mr.head] * kLog2e : -INFINITY;
  for (int p = 0; p < mr.num_parts; ++p) M = fmaxf(M, __ldcg(ml + p * kSlotStride));
  float den = P.sinks != nullptr ? exp2f(P.sinks[mr.head] * kLog2e - M) : 0.0f;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  const float* wo = P.ws_o + (static_cast<int64_t>(mr.slot) * kSlotRows + mr.row) * D + c;
#pragma unroll 4
  for (int p = 0; p < mr.num_parts; ++p) {
    const float m = __ldcg(ml + p * kSlotStride);
    const float wgt = m == -INFINITY ? 0.0f : exp2f(m - M);
    den += wgt * __ldcg(ml + p * kSlotStride + 1);
    const float4 v = __ldcg(reinterpret_cast<const float4*>(wo + p * kSlotRows * D));
    acc.x += wgt * v.x;
    acc.y += wgt * v.y;
    acc.z += wgt * v.z;
    acc.w += wgt * v.w;
  }
  pdl_launch_dependents();
  const float inv = 1.0f / den;
  const int64_t base = static_cast<int64_t>(mr.token) * P.H * D + static_cast<int64_t>(mr.head) * D + c;
  store_io(P.out, base + 0, P.io_dtype, acc.x * inv);
  store_io(P.out, base + 1, P.io_dtype, acc.y * inv);
  store_io(P.out, base + 2, P.io_dtype, acc.z * inv);
  store_io(P.out, base + 3, P.io_dtype, acc.w * inv);
}

}  // namespace cuda
}  // namespace pagedattn
