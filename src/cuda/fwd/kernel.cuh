// The attention kernel of pagedattn: one CTA per (chunk of new tokens, KV partition, kv head).
//
// A chunk's T*G query rows (tokens x heads sharing one kv head) are loaded once; the partition's keys
// stream through shared memory in 32- or 64-key tiles (cp.async, 2-4 stages, gathered through the block
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
// in its key range, for its kv head. NOTE: several CTAs (chunks of one sequence) may write the same row;
// they write identical bytes (same inputs, IEEE division and rint, no contraction), a formal race that
// is benign only while that holds: a change to the write path must keep it bit-reproducible or give each
// row a single writer.
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

// Tile and pipeline choices per (head size, KV kind, row tiles); shared memory is one struct sized by
// sizeof. Rows are padded by 16 bytes so that ldmatrix reads are free of bank conflicts.
template <int D, int KV, int RT>
struct FwdTraits {
  using T = typename KvTraits<KV>::mma_t;
  static constexpr bool kU8 = KV == kKvU8;
  static constexpr int kRows = RT * 16;
  // 4 row tiles (prefill chunks): 8 warps, 64-key tiles, one CTA per SM at D=256. Few rows (decode and
  // verify): 4 warps and, at D=256, 32-key tiles, so that two CTAs share an SM and overlap their phases.
  static constexpr int kWarps = RT == 4 ? 8 : 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBlockKV = (D >= 256 && RT <= 2) ? 32 : 64;
  static constexpr int kMinCtas = RT == 4 ? 1 : 2;         // __launch_bounds__ occupancy hint
  static constexpr int kLdQ = D + 8;                       // Q row (elements)
  static constexpr int kLdKV = kU8 ? D + 16 : D + 8;       // K/V tile row (cache elements)
  static constexpr int kLdS = kBlockKV + 4;                // S row (floats)
  static constexpr int kLdP = kBlockKV + 8;                // P row (elements)
  static constexpr int kStageBytes = 2 * kBlockKV * kLdKV * static_cast<int>(sizeof(typename KvTraits<KV>::cache_t)) +
                                     (kU8 ? 4 * kBlockKV * 2 : 0);
  static constexpr int kQBytes = kRows * kLdQ * static_cast<int>(sizeof(T));
  static constexpr int kSPBytes = kRows * kLdS * 4 + kRows * kLdP * static_cast<int>(sizeof(T));
  static constexpr int kFixed = (kQBytes > kSPBytes ? kQBytes : kSPBytes) + 5 * kRows * 4 + 256;
  // two CTAs per SM (one for 4 row tiles at D=256), then as many stages as fit
  static constexpr int kBudget = (D >= 256 && RT == 4) ? 227 * 1024 : 113 * 1024;
  static constexpr int kStages = kFixed + 4 * kStageBytes <= kBudget ? 4 : kFixed + 3 * kStageBytes <= kBudget ? 3 : 2;
  // phase 1: warps split keys; phase 3: warps split 32-column blocks
  static constexpr int kGroups1 = kWarps / RT;
  static constexpr int kN1 = kBlockKV / kGroups1 / 8;       // 8-key n-tiles per warp
  static constexpr int kGroups3 = (kWarps / RT) < (D / 32) ? (kWarps / RT) : (D / 32);
  static constexpr int kWarps3 = RT * kGroups3;             // warps active in phase 3
  static constexpr int kCols3 = D / kGroups3;               // columns per phase-3 warp (multiple of 32)
  static constexpr int kN3 = kCols3 / 8;
  // phase 2: each lane owns 8 consecutive keys of one row
  static constexpr int kLanesPerRow = kBlockKV / 8;
  static constexpr int kRowsPerWarp = 32 / kLanesPerRow;
  static constexpr int kRowsPerPass = kWarps * kRowsPerWarp;
  static constexpr int kPasses2 = (kRows + kRowsPerPass - 1) / kRowsPerPass;
  static_assert(kN1 >= 1 && kN3 >= 4 && kN3 % 2 == 0 && kCols3 % 32 == 0, "tile split");
};

template <int D, int KV, int RT>
struct SharedStorage {
  using Tr = FwdTraits<D, KV, RT>;
  using T = typename Tr::T;
  using C = typename KvTraits<KV>::cache_t;
  struct Stage {
    alignas(16) C k[Tr::kBlockKV][Tr::kLdKV];
    alignas(16) C v[Tr::kBlockKV][Tr::kLdKV];
    alignas(16) uint16_t par[Tr::kU8 ? 4 : 1][Tr::kBlockKV];  // u8: key scale, key zp, value scale, value zp
  };
  struct SP {
    alignas(16) float s[Tr::kRows][Tr::kLdS];
    alignas(16) T p[Tr::kRows][Tr::kLdP];
  };
  union QOrSP {  // Q is only read before the first tile; S and P only inside the loop
    alignas(16) T q[Tr::kRows][Tr::kLdQ];
    SP sp;
  };
  Stage stage[Tr::kStages];
  QOrSP u;
  float m[Tr::kRows], l[Tr::kRows], alpha[Tr::kRows], corr[Tr::kRows], qsum[Tr::kRows];
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

// Row index (in units of D elements of a [num_blocks, Hk, bs, D] cache) of key position `pos`.
__device__ __forceinline__ int64_t cache_row(const int32_t* table, int pos, int hk, int Hk, int bs_log2) {
  const int64_t blk = __ldg(table + (pos >> bs_log2));
  return ((blk * Hk + hk) << bs_log2) | (pos & ((1 << bs_log2) - 1));
}

// 2^x with one MUFU op (|rel err| ~ 2^-22; -inf -> 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// u8 codes -> f16 pairs, exactly: 0x6400 | b is the half 1024 + b. `sel` picks the two bytes.
__device__ __forceinline__ uint32_t u8x2_to_half2(uint32_t x, uint32_t sel) {
  uint32_t h = __byte_perm(x, 0x64u, sel);
  __half2 v = __hsub2(*reinterpret_cast<__half2*>(&h), __float2half2_rn(1024.0f));
  return *reinterpret_cast<uint32_t*>(&v);
}
constexpr uint32_t kSelB01 = 0x4140u, kSelB23 = 0x4342u, kSelB02 = 0x4240u, kSelB13 = 0x4341u;

// One warp writes (and for u8 quantises) one new key or value row of one kv head into the cache.
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

// Issues the async copies of one tile (keys [j0, j0 + kBlockKV) clipped to kv_end; the rest zero-filled).
// The block-table lookups of all the thread's rows go out first, then the copies.
template <int D, int KV, int RT>
__device__ __forceinline__ void load_tile(SharedStorage<D, KV, RT>& sm, int stage, const FwdParams& P,
                                          const int32_t* table, int hk, int j0, int kv_end, int tid) {
  using Tr = FwdTraits<D, KV, RT>;
  using C = typename KvTraits<KV>::cache_t;
  constexpr int kChunksPerRow = D * static_cast<int>(sizeof(C)) / 16;
  constexpr int kElemsPerChunk = 16 / static_cast<int>(sizeof(C));
  constexpr int kIters = Tr::kBlockKV * kChunksPerRow / Tr::kThreads;
  static_assert(kIters * Tr::kThreads == Tr::kBlockKV * kChunksPerRow, "tile copy split");
  constexpr int kRowStep = Tr::kThreads / kChunksPerRow;  // rows between a thread's copies
  constexpr int kLog2BlockKV = Tr::kBlockKV == 32 ? 5 : 6;
  static_assert(Tr::kBlockKV == 32 || Tr::kBlockKV == 64, "tile size");
  static_assert(Tr::kThreads % kChunksPerRow == 0, "a thread keeps its column");
  const C* kc = static_cast<const C*>(P.k_cache);
  const C* vc = static_cast<const C*>(P.v_cache);
  auto& st = sm.stage[stage];
  const int r0 = tid / kChunksPerRow, c = (tid % kChunksPerRow) * kElemsPerChunk;
  int64_t off[kIters];
  if (P.block_size_log2 >= kLog2BlockKV) {
    // the tile lies in one cache block (j0 is a multiple of kBlockKV): one table lookup
    const int64_t base = cache_row(table, j0, hk, P.Hk, P.block_size_log2) * D + c;
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      const int r = r0 + i * kRowStep;
      off[i] = j0 + r < kv_end ? base + static_cast<int64_t>(r) * D : -1;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      const int j = j0 + r0 + i * kRowStep;
      off[i] = j < kv_end ? cache_row(table, j, hk, P.Hk, P.block_size_log2) * D + c : -1;
    }
  }
  const uint32_t dk = smem_u32(&st.k[r0][c]), dv = smem_u32(&st.v[r0][c]);
  constexpr uint32_t kDstStep = kRowStep * Tr::kLdKV * sizeof(C);
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const bool ok = off[i] >= 0;
    cp_async_16_u32(dk + i * kDstStep, kc + (ok ? off[i] : 0), ok ? 16 : 0);
    cp_async_16_u32(dv + i * kDstStep, vc + (ok ? off[i] : 0), ok ? 16 : 0);
  }
  if constexpr (KV == kKvU8) {
    // 4 parameter arrays x (kBlockKV/8) chunks of 8 tokens (block_size >= 16: a chunk stays in one block).
    // NOTE: a chunk that straddles kv_end also loads slots past it: masked keys, never multiplied.
    constexpr int kPerArray = Tr::kBlockKV / 8;
    if (tid < 4 * kPerArray) {
      const int a = tid / kPerArray, c = tid % kPerArray;
      const int j = j0 + c * 8;
      const bool ok = j < kv_end;
      const uint16_t* src = a == 0 ? P.k_scale : a == 1 ? P.k_zp : a == 2 ? P.v_scale : P.v_zp;
      const int64_t off8 = ok ? cache_row(table, j, hk, P.Hk, P.block_size_log2) : 0;
      cp_async_16(&st.par[a][c * 8], src + off8, ok ? 16 : 0);
    }
  }
}

template <int D, int KV, int RT>
__global__ void __launch_bounds__(FwdTraits<D, KV, RT>::kThreads, FwdTraits<D, KV, RT>::kMinCtas)
    fwd_kernel(const __grid_constant__ FwdParams P, const int item_offset) {
  using Tr = FwdTraits<D, KV, RT>;
  using T = typename Tr::T;
  constexpr int kWarps = Tr::kWarps;
  constexpr int kThreads = Tr::kThreads;
  constexpr int kBlockKV = Tr::kBlockKV;
  using Smem = SharedStorage<D, KV, RT>;
  constexpr int kRows = Tr::kRows;
  constexpr int kStages = Tr::kStages;
  constexpr bool kU8 = Tr::kU8;

  extern __shared__ __align__(16) uint8_t smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);

  const int hk = blockIdx.y;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  // NOTE: everything below may read what the previous kernel in the stream wrote.
  pdl_wait();
  const planner::WorkItem w = P.items[item_offset + blockIdx.x];
  const int G = P.G;
  const int rows = w.nt * G;
  const int past = w.past, tok0 = w.tok0, t_seq = w.t_seq;
  const int32_t* table = P.block_indices + w.table;

  // --- fused KV write-in: new tokens inside this CTA's key range ----------------------------------
  if (P.k_new != nullptr) {
    const int wb = max(w.kv_begin, past), we = min(w.kv_end, past + t_seq);
    if (wb < we) {
      for (int pos = wb + warp; pos < we; pos += kWarps) {
        const int64_t src = static_cast<int64_t>(tok0 + pos - past) * P.Hk * D + static_cast<int64_t>(hk) * D;
        const int64_t row = cache_row(table, pos, hk, P.Hk, P.block_size_log2);
        write_row<D, KV>(P.k_new, src, P.k_cache, P.k_scale, P.k_zp, row, P.io_dtype, lane);
        write_row<D, KV>(P.v_new, src, P.v_cache, P.v_scale, P.v_zp, row, P.io_dtype, lane);
      }
      __threadfence();  // NOTE: the rows just written are read back below through cp.async (L2)
      __syncthreads();
    }
  }

  // --- pipeline prologue: the first kStages-1 tiles go out before anything else -------------------
  const int n_tiles = (w.kv_end - w.kv_begin + kBlockKV - 1) / kBlockKV;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_tiles) load_tile<D, KV, RT>(sm, s, P, table, hk, w.kv_begin + s * kBlockKV, w.kv_end, tid);
    cp_async_commit();
  }

  // --- Q rows (token-major, head-minor) -> smem in the MMA type; padding rows zero ---------------
  for (int idx = tid; idx < kRows * (D / 8); idx += kThreads) {
    const int r = idx / (D / 8), c = (idx % (D / 8)) * 8;
    alignas(16) T v[8];
    if (r < rows) {
      const int64_t base =
          static_cast<int64_t>(tok0 + w.t0 + r / G) * P.H * D + static_cast<int64_t>(hk * G + r % G) * D + c;
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = from_float<T>(load_io(P.q, base + e, P.io_dtype));
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = from_float<T>(0.0f);
    }
    *reinterpret_cast<uint4*>(&sm.u.q[r][c]) = *reinterpret_cast<const uint4*>(v);
  }
  __syncthreads();

  if constexpr (kU8) {  // sum of each (f16-rounded) query row, for the key zero points
    for (int r = warp; r < kRows; r += kWarps) {
      float s = 0.0f;
      for (int d = lane; d < D; d += 32) s += __half2float(sm.u.q[r][d]);
      s = warp_sum(s);
      if (lane == 0) sm.qsum[r] = s;
    }
  }

  // Q fragments of this warp's row tile stay in registers for the whole partition.
  // u8: the k index of an MMA step maps to head dims so that one 32-bit load of 4 codes feeds both
  // B registers: k = 2i+b -> d = 4i+b, k = 8+2i+b -> d = 4i+2+b (i = lane % 4); Q follows suit.
  const int rt = warp % RT;
  const int grp = warp / RT;
  uint32_t qf[D / 16][4];
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    if constexpr (kU8) {
      const uint2 lo = *reinterpret_cast<const uint2*>(&sm.u.q[rt * 16 + lane / 4][ks * 16 + 4 * (lane % 4)]);
      const uint2 hi = *reinterpret_cast<const uint2*>(&sm.u.q[rt * 16 + lane / 4 + 8][ks * 16 + 4 * (lane % 4)]);
      qf[ks][0] = lo.x;
      qf[ks][1] = hi.x;
      qf[ks][2] = lo.y;
      qf[ks][3] = hi.y;
    } else {
      ldmatrix_x4(qf[ks], &sm.u.q[rt * 16 + (lane % 16)][ks * 16 + (lane / 16) * 8]);
    }
  }

  // Phase-2 row state lives in the registers of the 8 lanes that own the row.
  float row_m[Tr::kPasses2], row_l[Tr::kPasses2], row_c[Tr::kPasses2];
#pragma unroll
  for (int ps = 0; ps < Tr::kPasses2; ++ps) {
    row_m[ps] = -INFINITY;
    row_l[ps] = 0.0f;
    row_c[ps] = 0.0f;
  }

  float o[Tr::kN3][4];
#pragma unroll
  for (int n = 0; n < Tr::kN3; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

  for (int it = 0; it < n_tiles; ++it) {
    const int stage = it % kStages;
    const int j0 = w.kv_begin + it * kBlockKV;

    // wait for this tile; everyone is done with the stage of tile it-1 (and with Q, at it == 0)
    cp_async_wait<kStages - 2>();
    __syncthreads();
    {
      const int nt = it + kStages - 1;
      if (nt < n_tiles) load_tile<D, KV, RT>(sm, nt % kStages, P, table, hk, w.kv_begin + nt * kBlockKV, w.kv_end, tid);
      cp_async_commit();
    }
    const auto& st = sm.stage[stage];

    // phase 1: S = Q K^T for this warp's row tile and keys [kb, kb + 8 * kN1)
    {
      const int kb = grp * 8 * Tr::kN1;
      float acc[Tr::kN1][4];
#pragma unroll
      for (int n = 0; n < Tr::kN1; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
      for (int n = 0; n < Tr::kN1; ++n) {
        if constexpr (kU8) {
          // one ldmatrix.x4 on raw codes: 8 keys x 4 MMA k-steps; each register holds 4 codes of a key
#pragma unroll
          for (int ks = 0; ks < D / 16; ks += 4) {
            uint32_t r4[4];
            ldmatrix_x4(r4, &st.k[kb + n * 8 + (lane % 8)][(ks + lane / 8) * 16]);
#pragma unroll
            for (int e = 0; e < 4; ++e)
              mma_16816<T>(acc[n], qf[ks + e], u8x2_to_half2(r4[e], kSelB01), u8x2_to_half2(r4[e], kSelB23));
          }
        } else {
#pragma unroll
          for (int ks = 0; ks < D / 16; ++ks) {
            uint32_t b[2];
            ldmatrix_x2(b, &st.k[kb + n * 8 + (lane % 8)][ks * 16 + ((lane / 8) % 2) * 8]);
            mma_16816<T>(acc[n], qf[ks], b[0], b[1]);
          }
        }
      }
      const int r0 = rt * 16 + lane / 4;
#pragma unroll
      for (int n = 0; n < Tr::kN1; ++n) {
        const int c = kb + n * 8 + 2 * (lane % 4);
        *reinterpret_cast<float2*>(&sm.u.sp.s[r0][c]) = make_float2(acc[n][0], acc[n][1]);
        *reinterpret_cast<float2*>(&sm.u.sp.s[r0 + 8][c]) = make_float2(acc[n][2], acc[n][3]);
      }
    }
    __syncthreads();

    // phase 2: masks, scores, online softmax. kLanesPerRow lanes own a row (8 keys each).
    // `interior`: every key of the tile is visible to every row (no per-key mask needed).
    const bool interior = j0 + kBlockKV <= w.kv_end && j0 + kBlockKV <= past + w.t0 + 1 &&
                          (P.sliding_window == 0 || j0 >= past + w.t0 + w.nt - P.sliding_window) &&
                          (P.qq_bias == nullptr || j0 + kBlockKV <= past);
#pragma unroll
    for (int ps = 0; ps < Tr::kPasses2; ++ps) {
      const int r = ps * Tr::kRowsPerPass + warp * Tr::kRowsPerWarp + lane / Tr::kLanesPerRow;
      if (r >= kRows) continue;  // warp-uniform: kRows is a multiple of 16
      const int c0 = (lane % Tr::kLanesPerRow) * 8;
      float p[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
      float alpha = 1.0f;
      // warp-uniform: a warp whose rows are all padding only writes zeros
      if (ps * Tr::kRowsPerPass + warp * Tr::kRowsPerWarp < rows) {
      // NOTE: every lane runs the shuffles below (full mask): rows past `rows` are masked, not skipped
      const bool valid = r < rows;
      const int t = w.t0 + (valid ? r / G : 0);
      const int h = hk * G + (valid ? r % G : 0);
      const int qpos = past + t;
      const int lo = P.sliding_window > 0 ? qpos - P.sliding_window + 1 : INT_MIN;
      const float slope2 = (valid && P.alibi != nullptr) ? P.alibi[h] * kLog2e : 0.0f;
      const uint8_t* qq = (valid && P.qq_bias != nullptr)
                              ? P.qq_bias + P.qq_bias_begins[w.seq] + static_cast<int64_t>(t) * t_seq
                              : nullptr;
      const float4 s_lo = *reinterpret_cast<const float4*>(&sm.u.sp.s[r][c0]);
      const float4 s_hi = *reinterpret_cast<const float4*>(&sm.u.sp.s[r][c0 + 4]);
      float s[8] = {s_lo.x, s_lo.y, s_lo.z, s_lo.w, s_hi.x, s_hi.y, s_hi.z, s_hi.w};
      float mt = -INFINITY;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int j = j0 + c0 + e;
        const bool vis = valid && (interior || (j < w.kv_end && j <= qpos && j >= lo &&
                                                (qq == nullptr || j < past || qq[j - past] != 0)));
        float raw = s[e];
        if constexpr (kU8) {
          const float ks = __half2float(__ushort_as_half(st.par[0][c0 + e]));
          const float kz = __half2float(__ushort_as_half(st.par[1][c0 + e]));
          raw = ks * (raw - kz * sm.qsum[r]);
        }
        s[e] = vis ? raw * P.scale_log2 + slope2 * static_cast<float>(j - qpos) : -INFINITY;
        mt = fmaxf(mt, s[e]);
      }
#pragma unroll
      for (int x = 1; x < Tr::kLanesPerRow; x *= 2) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, x));
      const float m_new = fmaxf(row_m[ps], mt);
      alpha = m_new != -INFINITY ? fast_exp2(row_m[ps] - m_new) : 1.0f;
      float sum = 0.0f, cz = 0.0f;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float pe = s[e] == -INFINITY ? 0.0f : fast_exp2(s[e] - m_new);
        sum += pe;
        if constexpr (kU8) {
          // NOTE: masked keys may carry NaN parameters (unwritten slots): never multiply them
          const float vs = __half2float(__ushort_as_half(st.par[2][c0 + e]));
          const float vz = __half2float(__ushort_as_half(st.par[3][c0 + e]));
          p[e] = pe != 0.0f ? __half2float(__float2half_rn(pe * vs)) : 0.0f;
          cz += pe != 0.0f ? p[e] * vz : 0.0f;
        } else {
          p[e] = pe;
        }
      }
#pragma unroll
      for (int x = 1; x < Tr::kLanesPerRow; x *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, x);
      if constexpr (kU8) {
#pragma unroll
        for (int x = 1; x < Tr::kLanesPerRow; x *= 2) cz += __shfl_xor_sync(0xffffffffu, cz, x);
        row_c[ps] = row_c[ps] * alpha + cz;
      }
      row_l[ps] = row_l[ps] * alpha + sum;
      row_m[ps] = m_new;
      }
      alignas(16) T pt[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) pt[e] = from_float<T>(p[e]);
      *reinterpret_cast<uint4*>(&sm.u.sp.p[r][c0]) = *reinterpret_cast<const uint4*>(pt);
      if (lane % Tr::kLanesPerRow == 0) sm.alpha[r] = alpha;
    }
    __syncthreads();

    // phase 3: O = alpha * O + P V for this warp's row tile and columns [d0, d0 + kCols3)
    if (warp < Tr::kWarps3) {
      const int d0 = grp * Tr::kCols3;
      const float a_lo = sm.alpha[rt * 16 + lane / 4], a_hi = sm.alpha[rt * 16 + lane / 4 + 8];
#pragma unroll
      for (int n = 0; n < Tr::kN3; ++n) {
        o[n][0] *= a_lo;
        o[n][1] *= a_lo;
        o[n][2] *= a_hi;
        o[n][3] *= a_hi;
      }
#pragma unroll
      for (int kk = 0; kk < kBlockKV / 16; ++kk) {
        uint32_t a[4];
        ldmatrix_x4(a, &sm.u.sp.p[rt * 16 + (lane % 16)][kk * 16 + (lane / 16) * 8]);
        const int key = kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
        if constexpr (kU8) {
          // ldmatrix.trans on raw codes: a register holds codes (d, d+1) of keys (k, k+1); split into an
          // even-d and an odd-d n-tile: n-tile 4b+{0,1,2,3} holds d = d0 + 32b + {0,1,16,17} + 2 * col.
#pragma unroll
          for (int b = 0; b < Tr::kCols3 / 32; ++b) {
            uint32_t r4[4];
            ldmatrix_x4_trans(r4, &st.v[key][d0 + 32 * b + (lane / 16) * 16]);
            mma_16816<T>(o[4 * b + 0], a, u8x2_to_half2(r4[0], kSelB02), u8x2_to_half2(r4[1], kSelB02));
            mma_16816<T>(o[4 * b + 1], a, u8x2_to_half2(r4[0], kSelB13), u8x2_to_half2(r4[1], kSelB13));
            mma_16816<T>(o[4 * b + 2], a, u8x2_to_half2(r4[2], kSelB02), u8x2_to_half2(r4[3], kSelB02));
            mma_16816<T>(o[4 * b + 3], a, u8x2_to_half2(r4[2], kSelB13), u8x2_to_half2(r4[3], kSelB13));
          }
        } else {
#pragma unroll
          for (int n = 0; n < Tr::kN3; n += 2) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, &st.v[key][d0 + (n + lane / 16) * 8]);
            mma_16816<T>(o[n], a, b[0], b[1]);
            mma_16816<T>(o[n + 1], a, b[2], b[3]);
          }
        }
      }
    }
    // the next iteration's barrier protects this stage and S/P before they are overwritten
  }
  cp_async_wait<0>();

  pdl_launch_dependents();

  // --- row statistics to smem for the epilogue ---------------------------------------------------
#pragma unroll
  for (int ps = 0; ps < Tr::kPasses2; ++ps) {
    const int r = ps * Tr::kRowsPerPass + warp * Tr::kRowsPerWarp + lane / Tr::kLanesPerRow;
    if (r < kRows && lane % Tr::kLanesPerRow == 0) {
      sm.m[r] = row_m[ps];
      sm.l[r] = row_l[ps];
      sm.corr[r] = row_c[ps];
    }
  }
  __syncthreads();

  // --- epilogue: normalised output (one partition) or a partial for the merge kernel --------------
  if (warp >= Tr::kWarps3) return;
  const int d0 = grp * Tr::kCols3;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int r = rt * 16 + lane / 4 + hf * 8;
    if (r >= rows) continue;
    const float m = sm.m[r], l = sm.l[r], corr = sm.corr[r];
    const int h = hk * G + r % G;
    const int64_t token = tok0 + w.t0 + r / G;
    float scale = 1.0f;
    float* wo = nullptr;
    int64_t base = 0;
    if (w.slot < 0) {
      float den = l;
      if (P.sinks != nullptr) den += exp2f(P.sinks[h] * kLog2e - m);
      scale = 1.0f / den;
      base = token * P.H * D + static_cast<int64_t>(h) * D;
    } else {
      const int64_t slot = w.slot + static_cast<int64_t>(hk) * w.num_parts;
      wo = P.ws_o + (slot * kSlotRows + r) * D;
      if (grp == 0 && lane % 4 == 0) {
        P.ws_ml[(slot * kSlotRows + r) * 2] = m;
        P.ws_ml[(slot * kSlotRows + r) * 2 + 1] = l;
      }
    }
#pragma unroll
    for (int n = 0; n < Tr::kN3; ++n) {
      // column of accumulator element (n, e): see the phase-3 layouts
      int c;
      if constexpr (kU8) {
        const int b = n / 4, q = n % 4;
        c = d0 + 32 * b + (q >= 2 ? 16 : 0) + (q % 2) + 4 * (lane % 4);
      } else {
        c = d0 + n * 8 + 2 * (lane % 4);
      }
      const int step = kU8 ? 2 : 1;  // u8: the pair (e=0, e=1) is 2 columns apart
      const float v0 = (o[n][2 * hf] - corr) * scale, v1 = (o[n][2 * hf + 1] - corr) * scale;
      if (wo != nullptr) {
        wo[c] = v0;
        wo[c + step] = v1;
      } else {
        store_io(P.out, base + c, P.io_dtype, v0);
        store_io(P.out, base + c + step, P.io_dtype, v1);
      }
    }
  }
}

// Combines the partitions of one query row: out = sum_p 2^(m_p - M) O_p / (sum_p 2^(m_p - M) l_p + sink).
// One CTA per row; threads spread over (partition group, 4-column chunk) so the loads of all partitions
// are in flight together; the partition weights go through shared memory (num_parts floats, dynamic).
constexpr int kMergeThreads = 512;
// static shared memory of merge_kernel at the largest head size (red + acc_s); the weights come after
constexpr int kMergeStaticSmem = (kMergeThreads / 32) * 4 + kMergeThreads * 16;
template <int D>
__global__ void __launch_bounds__(kMergeThreads) merge_kernel(const __grid_constant__ FwdParams P) {
  constexpr int kCols4 = D / 4;                       // float4 chunks per row
  constexpr int kGroupsM = kMergeThreads / kCols4;    // partition groups
  extern __shared__ float merge_smem[];               // [num_parts] weights
  __shared__ float red[kMergeThreads / 32];
  __shared__ float4 acc_s[kGroupsM][kCols4];
  pdl_wait();
  const MergeRow mr = P.merge_rows[blockIdx.x];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const float* ml = P.ws_ml + (static_cast<int64_t>(mr.slot) * kSlotRows + mr.row) * 2;
  constexpr int64_t kMlStride = static_cast<int64_t>(kSlotRows) * 2;
  const float sink2 = P.sinks != nullptr ? P.sinks[mr.head] * kLog2e : -INFINITY;

  // max over partitions (and the sink)
  float M = sink2;
  for (int p = tid; p < mr.num_parts; p += kMergeThreads) M = fmaxf(M, __ldcg(ml + p * kMlStride));
  M = warp_max(M);
  if (lane == 0) red[warp] = M;
  __syncthreads();
  M = red[0];
#pragma unroll
  for (int i = 1; i < kMergeThreads / 32; ++i) M = fmaxf(M, red[i]);
  __syncthreads();
  // weights and denominator
  float den = 0.0f;
  for (int p = tid; p < mr.num_parts; p += kMergeThreads) {
    const float m = __ldcg(ml + p * kMlStride);
    const float wgt = m == -INFINITY ? 0.0f : exp2f(m - M);
    merge_smem[p] = wgt;
    den += wgt * __ldcg(ml + p * kMlStride + 1);
  }
  den = warp_sum(den);
  if (lane == 0) red[warp] = den;
  __syncthreads();
  den = sink2 == -INFINITY ? 0.0f : exp2f(sink2 - M);
#pragma unroll
  for (int i = 0; i < kMergeThreads / 32; ++i) den += red[i];
  // weighted sum of the partial outputs
  const int c4 = tid % kCols4, g = tid / kCols4;
  const float* wo = P.ws_o + (static_cast<int64_t>(mr.slot) * kSlotRows + mr.row) * D + c4 * 4;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
  for (int p = g; p < mr.num_parts; p += kGroupsM) {
    const float wgt = merge_smem[p];
    const float4 v = __ldcg(reinterpret_cast<const float4*>(wo + static_cast<int64_t>(p) * kSlotRows * D));
    acc.x += wgt * v.x;
    acc.y += wgt * v.y;
    acc.z += wgt * v.z;
    acc.w += wgt * v.w;
  }
  acc_s[g][c4] = acc;
  __syncthreads();
  pdl_launch_dependents();
  if (g == 0) {
#pragma unroll
    for (int i = 1; i < kGroupsM; ++i) {
      const float4 v = acc_s[i][c4];
      acc.x += v.x;
      acc.y += v.y;
      acc.z += v.z;
      acc.w += v.w;
    }
    const float inv = 1.0f / den;
    const int64_t base = static_cast<int64_t>(mr.token) * P.H * D + static_cast<int64_t>(mr.head) * D + c4 * 4;
    store_io(P.out, base + 0, P.io_dtype, acc.x * inv);
    store_io(P.out, base + 1, P.io_dtype, acc.y * inv);
    store_io(P.out, base + 2, P.io_dtype, acc.z * inv);
    store_io(P.out, base + 3, P.io_dtype, acc.w * inv);
  }
}

}  // namespace cuda
}  // namespace pagedattn
