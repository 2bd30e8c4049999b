// The attention kernel of pagedattn: one CTA per (chunk of new tokens, KV partition, kv head).
//
// A chunk's T*G query rows (tokens x heads sharing one kv head) are loaded once; the partition's keys
// stream through shared memory, gathered through the block table by cp.async into per-group rings of
// half-tiles (K, then V, of a group's key slice). Warps form key groups (decode/verify: 4 groups of one
// warp, or 2 of two; prefill chunks: one group of 4 warps, FlashAttention-2 style); per slice a warp
//   S = Q K^T on tensor cores (f32)  ->  masks (causal past+t+1, tree, window), ALiBi, online softmax on
//   the accumulators in registers    ->  P as the A operand of O += P V (tensor cores, f32).
// A one-warp group waits on its own copies only (no CTA barrier in the loop); the groups' (m, l, O) are
// merged once at the end. Every K/V byte is read once for all T*G rows: this is what makes T=8 cost
// what T=1 costs.
// u8 caches: the MMAs run on the codes (biased by 1024, exact in f16) straight from shared memory, and
// the affine parameters are folded into per-key epilogues:
//   s_j = scale_j * q . (code_j + 1024) + (min_j - 1024 scale_j) * sum(q)
//   o   = sum_j (p_j * vscale_j) (code_j - 128) + sum_j p_j (vmin_j + 128 vscale_j)
// (values centred: both sums stay near the result's size, whatever the number of keys summed).
// The op's KV write-in is fused for sequences that are one chunk: before reading, a CTA writes (and
// quantises) every new token that lies in its key range, for its kv head; each row has one writer.
// Sequences cut into several chunks are written by write_kernel, launched before this kernel.
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

// Warp layout, tiles and pipeline per (head size, KV kind, row tiles); shared memory is one struct sized
// by sizeof. Warps form kWKV key groups of kWQ warps: the warps of a group share a ring of half-tiles
// (K or V of kKPW keys) and each owns a 16-row tile of the chunk's query rows; the groups stream
// disjoint key slices (group g takes keys [g * kKPW, (g+1) * kKPW) of every kTileKV-key tile) and are
// merged once at the end. Few rows (decode, verify): 1 x 4 or 2 x 2 warps; 64 rows (prefill chunks):
// 4 x 1, the FlashAttention-2 layout. Rows of K/V are padded by 16 bytes (ldmatrix without conflicts).
// MT: row tiles per warp. MT = 2 (128-row prefill chunks at D <= 128, f16/bf16; 1.20x, run s4a): 4 warps of 32
// rows, so each K/V fragment read from shared memory feeds two MMAs (the 8-warp layout reads every
// fragment once per 16 rows: shared-memory bandwidth, not the tensor cores, bounds it).
template <int D, int KV, int RT, int MT = 1>
struct FwdTraits {
  static_assert(MT == 1 || (MT == 2 && RT == 8 && D <= 128 && KV != kKvU8), "MT = 2: 8 row tiles, D <= 128, f16/bf16 KV");
  using T = typename KvTraits<KV>::mma_t;
  using C = typename KvTraits<KV>::cache_t;
  static constexpr bool kU8 = KV == kKvU8;
  static constexpr int kRows = RT * 16;
  static constexpr int kWQ = RT / MT;                     // warps along rows (MT 16-row tiles each)
  static constexpr int kWKV = RT == 1 ? 4 : RT == 2 ? 2 : 1;  // key groups (8 row tiles: 8 warps, one group)
  static constexpr int kWarps = kWQ * kWKV;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kGroupThreads = kWQ * 32;
  // Keys per group slice. u8 two-warp groups at D = 256 (T = 5..8 of the seed shape) take 32: each warp
  // then runs 4 S chains instead of 2 and one softmax per 32 keys (run s8b, same run: u8 128k T=8 0.83x,
  // 32k 0.98x, 8k 1.04x slower: 2 tiles per 128-key partition instead of 4). f16/bf16 at D = 256 keep
  // 16 (32-key halves would not fit three stages in half an SM's shared memory).
  static constexpr int kKPW = MT == 2 ? 32 : RT >= 4 ? (D >= 256 ? 32 : 64)
                            : (D >= 256 ? (KV == kKvU8 && RT == 2 ? 32 : 16) : 32);
  static constexpr int kTileKV = kWKV * kKPW;             // keys per iteration of the CTA
  static constexpr bool kOneCta = RT == 8 && MT == 1;     // the 8-warp variant: one CTA per SM
  static constexpr int kMinCtas = kOneCta ? 1 : 2;        // __launch_bounds__ occupancy hint
  static constexpr int kLdQ = D + 8;                      // Q row (elements)
  static constexpr int kLdKV = kU8 ? D + 16 : D + 8;      // K/V row (cache elements)
  static constexpr int kParBytes = (kU8 ? 4 : 1) * kKPW * 2;  // u8: key scale, key min, value scale, value min
  static constexpr int kHalfBytes = kKPW * kLdKV * static_cast<int>(sizeof(C)) + kParBytes;
  static constexpr int kQBytes = kRows * kLdQ * static_cast<int>(sizeof(T));
  static constexpr int kFixed = kQBytes + kRows * 4 + kWKV * kRows * 8 + 128;
  static constexpr int kBudget = kOneCta ? 227 * 1024 : 113 * 1024;  // two CTAs per SM (8-warp variant: one)
  static constexpr int kFit = (kBudget - kFixed) / (kWKV * kHalfBytes);
  static constexpr int kStages = kFit > 6 ? 6 : kFit;     // half-tiles in each group's ring
  static_assert(kStages >= 3, "pipeline depth");
  static_assert(kKPW % 16 == 0, "a slice is whole MMA k-steps");
};

template <int D, int KV, int RT, int MT = 1>
struct SharedStorage {
  using Tr = FwdTraits<D, KV, RT, MT>;
  using T = typename Tr::T;
  using C = typename Tr::C;
  struct Half {  // K or V rows of one group slice; the K half of a u8 cache also carries all 4 parameters
    alignas(16) C kv[Tr::kKPW][Tr::kLdKV];
    alignas(16) uint16_t par[Tr::kU8 ? 4 : 1][Tr::kKPW];
  };
  struct Stream {
    Half ring[Tr::kWKV][Tr::kStages];
    alignas(16) T q[Tr::kRows][Tr::kLdQ];
  };
  struct Red {
    alignas(16) float red[Tr::kWKV][Tr::kRows][D + 4];
    float4 row_st[Tr::kRows];  // each row's (max, sum) over the key groups, and its (max', 1/den) with a sink
  };
  union StreamOrRed {  // rings and Q while streaming; each key group's scaled partial output after
    Stream s;
    Red r;  // (larger than Stream only for D = 256 u8 at 8 row tiles, the one-CTA-per-SM variant)
  };

  StreamOrRed u;
  float qsum[Tr::kRows];
  float2 ml[Tr::kWKV][Tr::kRows];  // (max, sum) of each key group's rows
};

// --- small helpers ------------------------------------------------------------------------------
__device__ __forceinline__ float load_io(const void* base, int64_t i, int io) {
  if (io == kIoF16) return __half2float(static_cast<const __half*>(base)[i]);
  if (io == kIoBF16) return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
  return static_cast<const float*>(base)[i];
}

// N consecutive query / new key / new value elements (N = 2, 4 or 8) -> f32. One vector load per 16
// bytes when the address allows (the runtime dtype switch is taken once, so the loads of an unrolled
// caller go out together); else element by element. Plain loads, not the non-coherent path: nothing
// forbids the caller's query buffer from aliasing the output.
template <int N>
__device__ __forceinline__ void load_io_n(const void* base, int64_t i, int io, float (&x)[N]) {
  static_assert(N == 2 || N == 4 || N == 8, "2, 4 or 8 elements");
  constexpr int kHalfBytes = 2 * N, kF32Bytes = 4 * N;
  if (io == kIoF32) {
    const float* p = static_cast<const float*>(base) + i;
    if (reinterpret_cast<uintptr_t>(p) % (kF32Bytes < 16 ? kF32Bytes : 16) == 0) {
      if constexpr (N == 2) {
        const float2 v = *reinterpret_cast<const float2*>(p);
        x[0] = v.x, x[1] = v.y;
      } else {
#pragma unroll
        for (int k = 0; k < N / 4; ++k) {
          const float4 v = reinterpret_cast<const float4*>(p)[k];
          x[4 * k] = v.x, x[4 * k + 1] = v.y, x[4 * k + 2] = v.z, x[4 * k + 3] = v.w;
        }
      }
      return;
    }
  } else {
    const uint16_t* p = static_cast<const uint16_t*>(base) + i;
    if (reinterpret_cast<uintptr_t>(p) % kHalfBytes == 0) {
      uint32_t w[N / 2];
      if constexpr (N == 8) {
        const uint4 v = *reinterpret_cast<const uint4*>(p);
        w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
      } else if constexpr (N == 4) {
        const uint2 v = *reinterpret_cast<const uint2*>(p);
        w[0] = v.x, w[1] = v.y;
      } else {
        w[0] = *reinterpret_cast<const uint32_t*>(p);
      }
#pragma unroll
      for (int k = 0; k < N / 2; ++k) {
        if (io == kIoF16) {
          const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[k]));
          x[2 * k] = f.x, x[2 * k + 1] = f.y;
        } else {
          const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[k]));
          x[2 * k] = f.x, x[2 * k + 1] = f.y;
        }
      }
      return;
    }
  }
#pragma unroll
  for (int k = 0; k < N; ++k) x[k] = load_io(base, i + k, io);
}

// The query rows of a work item -> shared memory in the MMA type T: row r is query head hk * G + r % G
// of token q_tok0 + r / G; rows >= `rows` are zeros. `store(r, chunk, uint4)` places the 8 elements of
// a chunk. Each thread's loads go out in batches of 4 chunks, as raw vectors, before any is converted.
// (Run s6a: Q loaded element by element was the few-query kernel's largest single stall, 6-8% of its
// samples. Session 9: the batches had never overlapped: load_io_n converts next to its load, so the
// compiled loop waited for each chunk before loading the next, 8 load latencies in series at T=8.)
struct NoOp {
  __device__ void operator()() const {}
};
// `after_loads()` runs once the first batch has landed and is stored (fwd_kernel issues the rest of its
// copy prologue there, after the query, as it did before session 9; issuing it with the loads in
// flight, run s9c, measured the same on the rows it was meant to help, run s9d). `row_sums` (u8
// caches; shared memory, or nullptr): each row's sum of its f16-rounded elements (for the key bias
// and row minima), reduced across the lanes holding the row in a fixed order (bit-reproducible); visible after
// the caller's next barrier.
template <typename T, int kRows, int D, int kThreads, typename Store, typename AfterLoads = NoOp>
__device__ __forceinline__ void stage_q(const FwdParams& P, int64_t q_tok0, int hk, int G, int rows, int tid,
                                        Store store, AfterLoads after_loads = {}, float* row_sums = nullptr) {
  constexpr int kChunks = D / 8, kIters = (kRows * kChunks + kThreads - 1) / kThreads, kBatch = 4;
  static_assert(32 % kChunks == 0, "a row's chunks are one lane segment of a warp");
  static_assert((kRows * kChunks) % 32 == 0 && kThreads % 32 == 0, "warp-uniform chunk guards");
  // Every chunk starts at a multiple of 8 elements and run() rejects a query that is not 16-byte
  // aligned (params.h), so every chunk is one vector load (two for f32 queries).
  const int fmt = P.io_dtype;  // what the raw words hold
  constexpr int kSameIo = std::is_same<T, __half>::value ? kIoF16 : kIoBF16;  // raw words already in T
#pragma unroll
  for (int b = 0; b < kIters; b += kBatch) {
    uint4 raw[kBatch][2];  // a chunk: 8 16-bit elements in [0], or 8 f32 in [0] and [1]
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int idx = tid + (b + k) * kThreads, r = idx / kChunks;
      raw[k][0] = raw[k][1] = make_uint4(0u, 0u, 0u, 0u);  // zero bits: 0.0 in every format
      if (b + k < kIters && r < rows) {
        const int64_t src = (q_tok0 + r / G) * P.H * D + static_cast<int64_t>(hk * G + r % G) * D +
                            (idx % kChunks) * 8;
        if (fmt == kIoF32) {
          const uint4* q = reinterpret_cast<const uint4*>(static_cast<const float*>(P.q) + src);
          raw[k][0] = q[0];
          raw[k][1] = q[1];
        } else {
          raw[k][0] = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(P.q) + src);
        }
      }
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int idx = tid + (b + k) * kThreads;
      if (b + k < kIters && idx < kRows * kChunks) {
        uint4 v = raw[k][0];
        if (fmt != kSameIo) {
          const uint32_t w[8] = {raw[k][0].x, raw[k][0].y, raw[k][0].z, raw[k][0].w,
                                 raw[k][1].x, raw[k][1].y, raw[k][1].z, raw[k][1].w};
          alignas(16) T t[8];
#pragma unroll
          for (int e = 0; e < 8; e += 2) {
            float2 f;
            if (fmt == kIoF32)
              f = make_float2(__uint_as_float(w[e]), __uint_as_float(w[e + 1]));
            else if (fmt == kIoF16)
              f = __half22float2(*reinterpret_cast<const __half2*>(&w[e / 2]));
            else
              f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[e / 2]));
            t[e] = from_float<T>(f.x);
            t[e + 1] = from_float<T>(f.y);
          }
          v = *reinterpret_cast<const uint4*>(t);
        }
        store(idx / kChunks, idx % kChunks, v);
        if (std::is_same<T, __half>::value && row_sums != nullptr) {  // CTA-uniform (u8: T is f16)
          const uint32_t h[4] = {v.x, v.y, v.z, v.w};
          float sum = 0.0f;
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h[e]));
            sum += f.x + f.y;
          }
#pragma unroll
          for (int x = 1; x < kChunks; x *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, x);
          if (idx % kChunks == 0) row_sums[idx / kChunks] = sum;
        }
      }
    }
    if (b == 0) after_loads();
  }
}

// Four consecutive output elements (16-byte aligned in f32, 8-byte in f16/bf16).
__device__ __forceinline__ void store_io4(void* base, int64_t i, int io, float4 v) {
  if (io == kIoF16) {
    __half2 a = __floats2half2_rn(v.x, v.y), b = __floats2half2_rn(v.z, v.w);
    *reinterpret_cast<uint2*>(static_cast<__half*>(base) + i) =
        make_uint2(*reinterpret_cast<uint32_t*>(&a), *reinterpret_cast<uint32_t*>(&b));
  } else if (io == kIoBF16) {
    __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
    *reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(base) + i) =
        make_uint2(*reinterpret_cast<uint32_t*>(&a), *reinterpret_cast<uint32_t*>(&b));
  } else {
    *reinterpret_cast<float4*>(static_cast<float*>(base) + i) = v;
  }
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

// u8 codes -> f16 pairs. 0x6400 | b is the half 1024 + b (exact), made by one PRMT; `sel` picks the two
// bytes. The key MMAs run on these biased codes and fold the 1024 against sum(q): the bias costs at most
// 3 bits of an f32 sum over one head's D products. The value MMAs run on centred codes b - 128 (one
// subtraction of 1152, exact): there the f32 accumulators sum over up to a whole context of keys, and
// any bias grows with that sum. Measured: uncentred codes (b, with the zero point folded as
// -sum_j p_j vscale_j zp_j) lost accuracy in proportion to the keys a CTA summed (rel_l2 1.4e-2 at 64k
// keys per CTA); a bias of 1024 * sum(p) did too (5.8e-3 on a 23k-token case).
constexpr float kU8Bias = 1024.0f;   // key codes as f16: b + 1024
constexpr float kU8Centre = 128.0f;  // value codes as f16: b - 128

// u8 value path: P * vscale is rounded to f16 as the A operand of the P V MMA. Rows with a small value
// range (vscale ~1e-4: range ~0.03) put most products into f16 subnormals (below 2^-14), and a long
// flat tail of small p loses its mass (rel_l2 3.9e-2 for range 0.01, bench/u8_pv_rounding.py). So p
// carries a power of two 2^E, E chosen from the largest value scale of the keys in flight so that
// vscale * 2^E reads back below 2^9 (and the largest at least 2^0): with 2^(s - m) <= 2^6
// (FwdParams::stale_log2) every product stays below 2^15, and one falls below f16's normal range only
// where its weight is ~2^-22 of the row's largest. The 2^E costs nothing per key: it is folded into the
// softmax reference (p = 2^(s - (m - E))), so l, the offset term c and O all carry it, every consumer
// of (m, l, O) sees the reference m - E, and a change of E rescales them as a new max does.
// E of a largest scale vsmax (> 0, finite): vsmax * 2^E in [2^8, 2^9); an integer, as a float.
__device__ __forceinline__ float u8_value_exp(float vsmax) {
  return static_cast<float>(135 - (__float_as_int(vsmax) >> 23));
}
__device__ __forceinline__ uint32_t u8x2_biased(uint32_t x, uint32_t sel) { return __byte_perm(x, 0x64u, sel); }
__device__ __forceinline__ uint32_t u8x2_to_half2(uint32_t x, uint32_t sel, uint32_t k64 = 0x64u) {
  uint32_t h = __byte_perm(x, k64, sel);  // u8x2_biased with the 0x64 byte given
  __half2 v = __hsub2(*reinterpret_cast<__half2*>(&h), __float2half2_rn(kU8Bias + kU8Centre));  // b - 128
  return *reinterpret_cast<uint32_t*>(&v);
}
constexpr uint32_t kSelB01 = 0x4140u, kSelB23 = 0x4342u, kSelB02 = 0x4240u, kSelB13 = 0x4341u;

// One warp writes (and for u8 quantises) one new key or value row of one kv head into the cache.
template <int D, int KV>
__device__ __forceinline__ void write_row(const void* src, int64_t src_off, void* cache, uint16_t* scale,
                                          uint16_t* min, int64_t row, int io, int lane) {
  constexpr int kPer = D / 32;
  float x[kPer];
  load_io_n<kPer>(src, src_off + lane * kPer, io, x);
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
      min[row] = qp.min_bits;
    }
  } else {
    using C = typename KvTraits<KV>::cache_t;
    C* dst = static_cast<C*>(cache) + row * D + lane * kPer;
#pragma unroll
    for (int i = 0; i < kPer; ++i) dst[i] = from_float<C>(x[i]);
  }
}

// The op's KV write-in fused into the attention launch (sequences that are one chunk): the CTA's
// warps write (and quantise) the new tokens inside its key range for its kv head, then fence so that
// the copies that follow (cp.async, through L2) see them. CTA-uniform; a CTA barrier when it wrote.
// (Sequences cut into several chunks have their rows written by write_kernel before the launch.)
template <int D, int KV>
__device__ __forceinline__ void fused_write_in(const FwdParams& P, const planner::WorkItem& w, const int32_t* table,
                                               int hk, int warp, int warps, int lane) {
  if (P.k_new == nullptr || w.nt != w.t_seq) return;
  const int wb = max(w.kv_begin, w.past), we = min(w.kv_end, w.past + w.t_seq);
  if (wb >= we) return;
  for (int pos = wb + warp; pos < we; pos += warps) {
    const int64_t src = static_cast<int64_t>(w.tok0 + pos - w.past) * P.Hk * D + static_cast<int64_t>(hk) * D;
    const int64_t row = cache_row(table, pos, hk, P.Hk, P.block_size_log2);
    write_row<D, KV>(P.k_new, src, P.k_cache, P.k_scale, P.k_min, row, P.io_dtype, lane);
    write_row<D, KV>(P.v_new, src, P.v_cache, P.v_scale, P.v_min, row, P.io_dtype, lane);
  }
  __threadfence();  // NOTE: the rows just written are read back through cp.async (L2)
  __syncthreads();
}

// The first key any new token of a chunk starting at token t0 may see: its sliding window's start (0
// without a window). Keys below it are never read: their slots may hold anything, their blocks freed.
__device__ __forceinline__ int window_lo(const FwdParams& P, int past, int t0) {
  return P.sliding_window > 0 ? max(0, past + t0 - P.sliding_window + 1) : 0;
}

// Issues the async copies of one half-tile for a key group: K (kind 0, with the u8 parameters) or V
// (kind 1) of keys [js, js + kKPW) clipped to [kv_lo, kv_end); rows outside are zero-filled and their
// blocks never looked up (kv_lo: the first key in the sliding window of the chunk's first token; the
// slots before it may hold NaN, and their table entries any value, -1 included). `gtid` is the
// thread's index in its group. The block-table lookups go out before the copies. (Reading the slice's
// block id one tile ahead instead measured 0.99-1.04x, run s6c: the lookup is not what the loop waits on;
// a called instead of inlined copy issue, half the kernel's code, 1.02-1.13x slower, run s6a.)
template <int D, int KV, int RT, int MT>
__device__ __forceinline__ void load_half(typename SharedStorage<D, KV, RT, MT>::Half& hb, int kind, const FwdParams& P,
                                          const int32_t* table, int hk, int js, int kv_lo, int kv_end, int gtid) {
  using Tr = FwdTraits<D, KV, RT, MT>;
  using C = typename Tr::C;
  constexpr int kChunksPerRow = D * static_cast<int>(sizeof(C)) / 16;
  constexpr int kElemsPerChunk = 16 / static_cast<int>(sizeof(C));
  constexpr int kIters = Tr::kKPW * kChunksPerRow / Tr::kGroupThreads;
  static_assert(kIters * Tr::kGroupThreads == Tr::kKPW * kChunksPerRow, "slice copy split");
  static_assert(Tr::kGroupThreads % kChunksPerRow == 0, "a thread keeps its column");
  constexpr int kRowStep = Tr::kGroupThreads / kChunksPerRow;
  constexpr int kLog2KPW = Tr::kKPW == 16 ? 4 : Tr::kKPW == 32 ? 5 : 6;
  const C* src = static_cast<const C*>(kind == 0 ? P.k_cache : P.v_cache);
  const int r0 = gtid / kChunksPerRow, c = (gtid % kChunksPerRow) * kElemsPerChunk;
  const uint32_t dst = smem_u32(&hb.kv[r0][c]);
  constexpr uint32_t kDstStep = kRowStep * Tr::kLdKV * sizeof(C);
  // A slice lies in one cache block when block_size >= kKPW (always with 16-key slices: the backend
  // checks block_size >= 16), else it spans kKPW / block_size blocks (2 or 4).
  constexpr int kMaxBlocks = Tr::kKPW / 16;
  const int lbs = P.block_size_log2;
  if ((kMaxBlocks == 1 || lbs >= kLog2KPW) && js + Tr::kKPW <= kv_end && js >= kv_lo) {
    // Every slice but a partition's last: all rows valid and in one cache block, so one table lookup,
    // one base address, and constant offsets that fold into the copies (the general path below pays
    // a block select and 64-bit offset and zero-fill arithmetic per copy).
    const int64_t row0 = cache_row(table, js, hk, P.Hk, lbs);
    const C* s = src + (row0 + r0) * D + c;
#pragma unroll
    for (int i = 0; i < kIters; ++i) cp_async_16_full(dst + i * kDstStep, s + i * kRowStep * D);
    if constexpr (Tr::kU8) {
      constexpr int kPerArray = Tr::kKPW / 8;
      if (kind == 0 && gtid < 4 * kPerArray) {
        const int a = gtid / kPerArray, cc = gtid % kPerArray;
        const uint16_t* ps = a == 0 ? P.k_scale : a == 1 ? P.k_min : a == 2 ? P.v_scale : P.v_min;
        cp_async_16_full(smem_u32(&hb.par[a][cc * 8]), ps + row0 + cc * 8);
      }
    }
    return;
  }
  // General: a partition's last slice (rows past kv_end zero-filled), a slice over several blocks, or
  // a slice that starts before kv_lo (rows before it zero-filled). One table lookup per block the slice
  // reaches inside [kv_lo, kv_end) (all issued before the copies); a row's cache row is its block's first
  // row plus its offset in the block.
  int64_t rowb[kMaxBlocks];
#pragma unroll
  for (int k = 0; k < kMaxBlocks; ++k) {
    const int j = js + (k << lbs);  // first row of block k in the slice (js is block-aligned when k > 0)
    const int j_last = js + min((k + 1) << lbs, Tr::kKPW) - 1;
    rowb[k] = (k == 0 || (k << lbs) < Tr::kKPW) && j < kv_end && j_last >= kv_lo ? cache_row(table, j, hk, P.Hk, lbs) : 0;
  }
  const int bs_mask = (1 << lbs) - 1;
  auto row_of = [&](int r) {
    const int k = r >> lbs;
    int64_t b = rowb[0];
#pragma unroll
    for (int q = 1; q < kMaxBlocks; ++q) b = k == q ? rowb[q] : b;
    return b + (r & bs_mask);
  };
  auto copy_row = [&](int i) {
    const int r = r0 + i * kRowStep;
    const bool ok = js + r < kv_end && js + r >= kv_lo;
    cp_async_16_u32(dst + i * kDstStep, ok ? src + row_of(r) * D + c : src, ok ? 16 : 0);
  };
  if constexpr (kMaxBlocks == 1) {
    // only a partition's last slice comes here (once per partition): a rolled loop keeps its code
    // (kIters copies of 64-bit arithmetic) from sitting between the key loop's hot instructions
#pragma unroll 1
    for (int i = 0; i < kIters; ++i) copy_row(i);
  } else {
#pragma unroll
    for (int i = 0; i < kIters; ++i) copy_row(i);
  }
  if constexpr (Tr::kU8) {
    // 4 parameter arrays x (kKPW/8) chunks of 8 tokens (block_size >= 16: a chunk stays in one block).
    // NOTE: a chunk that straddles kv_end or kv_lo also loads slots outside: masked keys, never multiplied.
    constexpr int kPerArray = Tr::kKPW / 8;
    if (kind == 0 && gtid < 4 * kPerArray) {
      const int a = gtid / kPerArray, cc = gtid % kPerArray;
      const bool ok = js + cc * 8 < kv_end && js + cc * 8 + 7 >= kv_lo;
      const uint16_t* ps = a == 0 ? P.k_scale : a == 1 ? P.k_min : a == 2 ? P.v_scale : P.v_min;
      cp_async_16(&hb.par[a][cc * 8], ps + (ok ? row_of(cc * 8) : 0), ok ? 16 : 0);
    }
  }
}

// Column of accumulator element pair (n, 0/1) of an O fragment; u8 n-tiles hold even/odd columns
// (see the PV step), f16/bf16 n-tiles 8 consecutive columns. Returns the first column; the second is
// col + 2 (u8) or col + 1 (f16/bf16).
template <bool kU8>
__device__ __forceinline__ int o_col(int n, int lane) {
  if constexpr (kU8) {
    const int b = n / 4, q = n % 4;
    return 32 * b + (q >= 2 ? 16 : 0) + (q % 2) + 4 * (lane % 4);
  } else {
    return n * 8 + 2 * (lane % 4);
  }
}

// (S = QK^T runs D/16 dependent MMAs per 8-key n-tile. Even and odd k-steps in two accumulator chains,
// summed before the softmax, measured 0.98-1.01x in run s4a; the variant lived until 5a4d0c0.)
template <int D, int KV, int RT, int MT = 1>
__global__ void __launch_bounds__(FwdTraits<D, KV, RT, MT>::kThreads, FwdTraits<D, KV, RT, MT>::kMinCtas)
    fwd_kernel(const __grid_constant__ FwdParams P, const int item_offset) {
  using Tr = FwdTraits<D, KV, RT, MT>;
  using T = typename Tr::T;
  using Smem = SharedStorage<D, KV, RT, MT>;
  constexpr int kWarps = Tr::kWarps;
  constexpr int kThreads = Tr::kThreads;
  constexpr int kKPW = Tr::kKPW;
  constexpr int kRows = Tr::kRows;
  constexpr int kStages = Tr::kStages;
  constexpr bool kU8 = Tr::kU8;
  constexpr int kN1 = kKPW / 8;   // S n-tiles (8 keys) per warp
  constexpr int kK3 = kKPW / 16;  // PV k-steps (16 keys) per warp
  constexpr int kN3 = D / 8;      // O n-tiles per warp
  // Q stays in registers at D <= 128 (one row tile per warp); else it is re-read from shared memory.
  constexpr bool kQRegs = D <= 128 && MT == 1;

  extern __shared__ __align__(16) uint8_t smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);

  // diagnostic build only (PAGEDATTN_TIMELINE): 1 pdl wait, 2 write-in, 3 prologue issued (thread 0's
  // copies out, its first query loads in flight), 4 Q staged, 5 first K, 6 loop, 7 partial outputs of
  // the key groups in shared memory, 8 end
  Timeline tl;
  const int hk = blockIdx.y;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wq = warp % Tr::kWQ, wkv = warp / Tr::kWQ;  // row-tile slot (tiles wq*MT ..), key group
  const int gtid = tid % Tr::kGroupThreads;
  auto group_sync = [&]() {
    if constexpr (Tr::kWQ == 1) {
      __syncwarp();
    } else if constexpr (Tr::kWKV == 1) {
      __syncthreads();
    } else {
      named_barrier(1 + wkv, Tr::kGroupThreads);
    }
  };

  // Plan data (work items, block tables: uploaded by plan(), never written by a kernel) is read before
  // waiting for the previous grid; the first slice's table entry is prefetched into L1.
  const planner::WorkItem w = P.items[item_offset + blockIdx.x];
  const int G = P.G;
  const int rows = w.nt * G;
  const int past = w.past, tok0 = w.tok0, t_seq = w.t_seq;
  const int32_t* table = P.block_indices + w.table;
  if (lane == 0 && w.kv_begin + wkv * Tr::kKPW < w.kv_end)
    asm volatile("prefetch.global.L1 [%0];\n" ::"l"(table + ((w.kv_begin + wkv * Tr::kKPW) >> P.block_size_log2)));
  // Cache rows before past_len were written by earlier runs of the op: a CTA whose keys are all old
  // starts its copies before waiting for the previous grid, so its first bytes arrive while that grid
  // drains. NOTE: PTX guarantees the previous grid's writes only after griddepcontrol.wait; these
  // reads rely on rows written before the previous grid let its dependents start being fenced (this
  // kernel fences its write-in before pdl_launch_dependents) or on that grid never triggering early.
  // docs/design.md, "Programmatic dependent launch"; Options::programmatic_launch = false is strict.
  const bool early = P.pdl_early_reads && w.kv_end <= past;  // (then no fused write-in in its range)
  const int n_tiles = (w.kv_end - w.kv_begin + Tr::kTileKV - 1) / Tr::kTileKV;
  const int n_halves = 2 * n_tiles;
  const int kv_lo = window_lo(P, past, w.t0);
  auto slice_begin = [&](int it) { return w.kv_begin + it * Tr::kTileKV + wkv * kKPW; };
  // Half h of a group: tile h/2, K (h even) or V (h odd), ring slot h % kStages.
  auto issue = [&](int h) {
    if (h < n_halves) {
      const int js = slice_begin(h / 2);
      if (js < w.kv_end)
        load_half<D, KV, RT, MT>(sm.u.s.ring[wkv][h % kStages], h % 2, P, table, hk, js, kv_lo, w.kv_end, gtid);
    }
    cp_async_commit();
  };
  // Copy order (run s7a, same-run A/B: 0.95-1.01x of the old order at 8k and 32k, level at 128k): one
  // half per group (K of tile 0) goes out first, then the query rows, then, once the query's first
  // batch has landed (stage_q), the rest of the prologue (halves 1 .. kAhead - 1). The old order (the
  // whole prologue, then Q) left the query loads queued behind kStages - 1 halves per group: 3.3 us of
  // an 8k T=1 CTA against 1.0 us at 1k (run s6f). A
  // fully busy ring (kStages halves ahead for one-warp groups) measured 1.00-1.10x slower (run s7a).
  constexpr int kAhead = kStages - 1;  // halves issued before the first step
  auto prologue_rest = [&]() {
#pragma unroll
    for (int s = 1; s < kAhead; ++s) issue(s);
    tl.mark(3);
  };
  if (early) issue(0);
  // NOTE: everything below may read what the previous kernel in the stream wrote.
  pdl_wait();
  tl.mark(1);

  // --- fused KV write-in: new tokens inside this CTA's key range ----------------------------------
  // (sequences cut into several chunks have their rows written by write_kernel before this launch)
  fused_write_in<D, KV>(P, w, table, hk, warp, kWarps, lane);
  tl.mark(2);
  if (!early) issue(0);

  // --- Q rows (token-major, head-minor) -> smem in the MMA type; padding rows zero ---------------
  // (The rows by cp.async in the copy group of half 1, where the query is already in the MMA type,
  // measured 1.00-1.17x slower, run s7b: at T=8 the first halves, not the query, arrive last.)
  // u8: Q in the order of the S MMA's A fragments (k permuted, see load_qf). For rows g and g + 8 of a
  // 16-row tile (pair p = tile * 8 + g) and head dims 4i..4i+3, one 16-byte unit holds the fragment's 4
  // registers {Q[g][4i..4i+1], Q[g+8][4i..4i+1], Q[g][4i+2..4i+3], Q[g+8][4i+2..4i+3]}: one 16-byte
  // load per fragment and no register moves (two 8-byte loads into a fragment cost 4 moves each, ~10%
  // of the u8 D = 256 key loop, which re-reads Q every slice). Unit i of pair p sits at i ^ 4 when p is
  // odd, so the two pairs a quarter warp reads lie in different banks. kRows * 2D bytes: within q.
  auto q_unit = [&](int p, int i) {
    return reinterpret_cast<uint32_t*>(reinterpret_cast<uint8_t*>(&sm.u.s.q[0][0]) + p * (4 * D) +
                                       (i ^ ((p & 1) << 2)) * 16);
  };
  auto store_q = [&](int r, int ch, uint4 v) {
    if constexpr (kU8) {
      const int p = (r / 16) * 8 + r % 8, hf = (r / 8) % 2;
      uint32_t* u0 = q_unit(p, 2 * ch);
      uint32_t* u1 = q_unit(p, 2 * ch + 1);
      u0[hf] = v.x;
      u0[2 + hf] = v.y;
      u1[hf] = v.z;
      u1[2 + hf] = v.w;
    } else {
      *reinterpret_cast<uint4*>(&sm.u.s.q[r][ch * 8]) = v;
    }
  };
  // (u8: with each row's sum, for the key bias and row minima; a separate pass over Q after the barrier cost a
  // second barrier and a chain of dependent shared-memory loads per row)
  stage_q<T, kRows, D, kThreads>(P, tok0 + w.t0, hk, G, rows, tid, store_q, prologue_rest,
                                 kU8 ? sm.qsum : nullptr);
  __syncthreads();
  tl.mark(4);

  // Q fragments of the warp's row tile mt (A operand of S = Q K^T, k-step ks).
  // u8: the k index of an MMA step maps to head dims so that one 32-bit load of 4 codes feeds both
  // B registers: k = 2i+b -> d = 4i+b, k = 8+2i+b -> d = 4i+2+b (i = lane % 4); Q follows suit.
  auto load_qf = [&](uint32_t (&f)[4], int mt, int ks) {
    const int r0 = (wq * MT + mt) * 16;
    if constexpr (kU8) {
      // unit ks * 4 + t of pair p, i.e. q_unit(p, ks * 4 + t): the swizzle flips ks's parity when p is odd
      const int p = (wq * MT + mt) * 8 + lane / 4, sw = (p & 1) ? 64 : 0;
      const uint8_t* qb = reinterpret_cast<const uint8_t*>(&sm.u.s.q[0][0]) + p * (4 * D) + (lane % 4) * 16;
      const uint4 u = *reinterpret_cast<const uint4*>(qb + ks * 64 + ((ks & 1) ? -sw : sw));
      f[0] = u.x;
      f[1] = u.y;
      f[2] = u.z;
      f[3] = u.w;
    } else {
      ldmatrix_x4(f, &sm.u.s.q[r0 + (lane % 16)][ks * 16 + (lane / 16) * 8]);
    }
  };
  uint32_t qreg[kQRegs ? D / 16 : 1][4];
  if constexpr (kQRegs) {
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) load_qf(qreg[ks], 0, ks);
  }
  auto q_frag = [&](uint32_t (&f)[4], int mt, int ks) {  // from registers, or re-read from shared memory
    if constexpr (kQRegs) {
#pragma unroll
      for (int x = 0; x < 4; ++x) f[x] = qreg[ks][x];
    } else {
      load_qf(f, mt, ks);
    }
  };

  // The thread's two rows per row tile (lane/4 and lane/4 + 8): masks, ALiBi, u8 query sums.
  int row_qpos[MT][2], row_lo[MT][2];
  bool row_valid[MT][2];
  float row_slope2[MT][2], row_qsum[MT][2];
  const uint8_t* row_qq[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int r = (wq * MT + mt) * 16 + lane / 4 + 8 * hf;
      const bool valid = r < rows;
      const int t = w.t0 + (valid ? r / G : 0);
      const int h = hk * G + (valid ? r % G : 0);
      row_valid[mt][hf] = valid;
      row_qpos[mt][hf] = past + t;
      row_lo[mt][hf] = P.sliding_window > 0 ? past + t - P.sliding_window + 1 : INT_MIN;
      row_slope2[mt][hf] = (valid && P.alibi != nullptr) ? P.alibi[h] * kLog2e : 0.0f;
      row_qq[mt][hf] = (valid && P.qq_bias != nullptr)
                           ? P.qq_bias + P.qq_bias_begins[w.seq] + static_cast<int64_t>(t) * t_seq
                           : nullptr;
      row_qsum[mt][hf] = kU8 ? sm.qsum[r] : 0.0f;
    }
  }

  // Online-softmax state of the thread's rows; l and c (u8: sum_j p_j (vmin_j + 128 vscale_j)) are the
  // thread's own partial sums, reduced over the quad once at the end.
  // row_m is a reference, not the running max: it moves (and O, l, c are rescaled) only when a slice's
  // max passes it by more than P.stale_log2, so P = 2^(s - row_m) <= 2^stale_log2 (FwdParams says
  // which bound each KV kind can take). With random keys the max of later slices rarely passes the
  // first slice's by that much, so the warp vote below skips the O rescale (D/2 multiplies per thread)
  // on nearly every slice; with the exact max, any row's new max forced it (at T=3, 12 rows, on most
  // slices). The first visible slice sets the reference without a rescale (O, l and c are still zero).
  // Every consumer of (m, l, O) (key-group reduction, merge, sinks, the scores output) needs only that
  // l and O share m, not that m is the max.
  const float stale = P.stale_log2;
  float row_m[MT][2], row_l[MT][2], row_c[MT][2];
  float v_exp = 0.0f;  // u8: E of u8_value_exp (the reference is row_m - v_exp); warp-uniform
  float o[MT][kN3][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      row_m[mt][hf] = -INFINITY;
      row_l[mt][hf] = row_c[mt][hf] = 0.0f;
    }
#pragma unroll
    for (int n = 0; n < kN3; ++n) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
  }
  uint32_t pa[MT][kK3][4];  // P of the slice as A fragments of the PV MMAs

  // 0x64 (the high byte of the f16 1024 + code) from a kernel parameter, so the compiler cannot fold
  // it: with a literal, ptxas takes the PRMT form with the selector in a register and re-creates the
  // selectors before each use in the value step (~50 instructions per slice at u8 D = 256).
  const uint32_t k64 = P.u8_exp_byte;
  for (int it = 0; it < n_tiles; ++it) {
    const int js = slice_begin(it);
    const bool active = js < w.kv_end;  // group-uniform

    // ---- K half: S = Q K^T, masks, online softmax -> P (registers) ----
    cp_async_wait<kAhead - 1>();
    group_sync();
    if (it == 0) tl.mark(5);
    issue(2 * it + kStages - 1);
    if (active) {
      const auto& hb = sm.u.s.ring[wkv][(2 * it) % kStages];
      // each K fragment feeds MT MMAs
      float acc[MT][kN1][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int n = 0; n < kN1; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[mt][n][e] = 0.0f;
      if constexpr (kU8) {
        // one ldmatrix.x4 on raw codes: 8 keys x 4 MMA k-steps; each register holds 4 codes of a key
#pragma unroll
        for (int ks = 0; ks < D / 16; ks += 4) {
          uint32_t qf[MT][4][4];
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int e = 0; e < 4; ++e) q_frag(qf[mt][e], mt, ks + e);
#pragma unroll
          for (int n = 0; n < kN1; ++n) {
            uint32_t r4[4];
            ldmatrix_x4(r4, &hb.kv[n * 8 + (lane % 8)][(ks + lane / 8) * 16]);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
              for (int e = 0; e < 4; ++e)
                mma_16816<T>(acc[mt][n], qf[mt][e],
                             u8x2_biased(r4[e], kSelB01), u8x2_biased(r4[e], kSelB23));
          }
        }
      } else {
#pragma unroll
        for (int ks = 0; ks < D / 16; ks += 2) {
          uint32_t qf[MT][2][4];
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int e = 0; e < 2; ++e) q_frag(qf[mt][e], mt, ks + e);
#pragma unroll
          for (int n = 0; n < kN1; ++n) {
            uint32_t b[4];  // k-steps ks and ks+1 of keys n*8..n*8+7
            ldmatrix_x4(b, &hb.kv[n * 8 + (lane % 8)][ks * 16 + (lane / 8) * 8]);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
              mma_16816<T>(acc[mt][n], qf[mt][0], b[0], b[1]);
              mma_16816<T>(acc[mt][n], qf[mt][1], b[2], b[3]);
            }
          }
        }
      }
      // scores (log2 units) with masks; element (n, e): row hf = e / 2, key js + n*8 + 2*(lane%4) + e%2
      const bool interior = js + kKPW <= w.kv_end && js + kKPW <= past + w.t0 + 1 &&
                            (P.sliding_window == 0 || js >= past + w.t0 + w.nt - P.sliding_window) &&
                            (P.qq_bias == nullptr || js + kKPW <= past);
      // kPlain: an interior slice without ALiBi, the common case: a score is one multiply (and the
      // padding-row select); the general pass masks per key and adds the ALiBi term. Two unrolled
      // copies, chosen per slice (group-uniform), so the plain one has no per-key branches.
      auto score_pass = [&](auto plain, int mt, float (&mx)[2]) {
        constexpr bool kPlain = decltype(plain)::value;
#pragma unroll
        for (int n = 0; n < kN1; ++n) {
          const int kc = n * 8 + 2 * (lane % 4);  // key within the slice (and its neighbour kc + 1)
          // u8: s = kscale * acc + (kmin - 1024 kscale) * sum(q), acc over codes biased by 1024 (two
          // operations per score, as with the zero point; the bias cancels as it did there)
          float2 kscale = make_float2(1.0f, 1.0f), kbias = make_float2(0.0f, 0.0f);
          if constexpr (kU8) {
            kscale = __half22float2(*reinterpret_cast<const __half2*>(&hb.par[0][kc]));
            const float2 kmin = __half22float2(*reinterpret_cast<const __half2*>(&hb.par[1][kc]));
            kbias = make_float2(fmaf(-kU8Bias, kscale.x, kmin.x), fmaf(-kU8Bias, kscale.y, kmin.y));
          }
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int hf = e / 2;
            const int j = js + kc + (e % 2);
            float raw = acc[mt][n][e];
            if constexpr (kU8)
              raw = fmaf(e % 2 ? kscale.y : kscale.x, raw, (e % 2 ? kbias.y : kbias.x) * row_qsum[mt][hf]);
            float sv;
            if constexpr (kPlain) {
              sv = row_valid[mt][hf] ? raw * P.scale_log2 : -INFINITY;
            } else {
              const bool vis = row_valid[mt][hf] && j < w.kv_end && j <= row_qpos[mt][hf] && j >= row_lo[mt][hf] &&
                               (row_qq[mt][hf] == nullptr || j < past || row_qq[mt][hf][j - past] != 0);
              sv = vis ? raw * P.scale_log2 + row_slope2[mt][hf] * static_cast<float>(j - row_qpos[mt][hf])
                       : -INFINITY;
            }
            acc[mt][n][e] = sv;
            mx[hf] = fmaxf(mx[hf], sv);
          }
        }
      };
      const bool plain = interior && P.alibi == nullptr;
      // u8: the slice's E, from the largest value scale of its keys (the quad's lanes hold every key
      // of the slice, so after two shuffles it is warp-uniform). E moves only when the slice's largest
      // scale leaves [2^0, 2^9) at the current E; de joins the softmax's alpha.
      float de = 0.0f;
      if constexpr (kU8) {
        __half2 vs2 = __float2half2_rn(0.0f);
        if (js + kKPW <= w.kv_end) {
#pragma unroll
          for (int n = 0; n < kN1; ++n)  // NaN (unwritten) scales lose to any number in __hmax2
            vs2 = __hmax2(vs2, *reinterpret_cast<const __half2*>(&hb.par[2][n * 8 + 2 * (lane % 4)]));
        } else {  // slots past the partition's end may be unwritten (NaN, or stale scales): not counted
#pragma unroll
          for (int n = 0; n < kN1; ++n) {
            const int kc = n * 8 + 2 * (lane % 4);
            const __half2 v = *reinterpret_cast<const __half2*>(&hb.par[2][kc]);
            vs2 = __hmax2(vs2, __halves2half2(js + kc < w.kv_end ? __low2half(v) : __float2half(0.0f),
                                               js + kc + 1 < w.kv_end ? __high2half(v) : __float2half(0.0f)));
          }
        }
        float vsmax = fmaxf(__low2float(vs2), __high2float(vs2));
        vsmax = fmaxf(vsmax, __shfl_xor_sync(0xffffffffu, vsmax, 1));
        vsmax = fmaxf(vsmax, __shfl_xor_sync(0xffffffffu, vsmax, 2));
        if (vsmax > 0.0f) {  // else (scales all 0: constant rows, or zero-filled window rows) E stays
          const float e = u8_value_exp(vsmax);
          if (v_exp > e || v_exp < e - 8.0f) {
            de = e - v_exp;
            v_exp = e;
          }
        }
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        float mx[2] = {-INFINITY, -INFINITY};
        if (plain)
          score_pass(std::true_type{}, mt, mx);
        else
          score_pass(std::false_type{}, mt, mx);
        float alpha[2], ref[2];
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 1));
          mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 2));
          // the reference moves only when the slice's max passes it by more than stale_log2 (see row_m)
          // (u8: or when E moves; the reference is m - E)
          const float m_old = row_m[mt][hf];
          const float m_new = mx[hf] > m_old + stale ? mx[hf] : m_old;
          alpha[hf] = (m_new != m_old || de != 0.0f) && m_old != -INFINITY ? fast_exp2(m_old - m_new + de) : 1.0f;
          row_m[mt][hf] = m_new;
          ref[hf] = m_new - v_exp;
        }
        float sum[2] = {0.0f, 0.0f}, cz[2] = {0.0f, 0.0f};
#pragma unroll
        for (int n = 0; n < kN1; ++n) {
          const int kc = n * 8 + 2 * (lane % 4);
          float2 vscale = make_float2(1.0f, 1.0f), vbias = make_float2(0.0f, 0.0f);
          if constexpr (kU8) {
            vscale = __half22float2(*reinterpret_cast<const __half2*>(&hb.par[2][kc]));
            const float2 vmin = __half22float2(*reinterpret_cast<const __half2*>(&hb.par[3][kc]));
            vbias = make_float2(fmaf(kU8Centre, vscale.x, vmin.x), fmaf(kU8Centre, vscale.y, vmin.y));
          }
          float p[4];
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int hf = e / 2;
            const float pe = acc[mt][n][e] == -INFINITY ? 0.0f : fast_exp2(acc[mt][n][e] - ref[hf]);
            sum[hf] += pe;
            if constexpr (kU8) {
              // NOTE: masked keys may carry NaN parameters (unwritten slots): never multiply them
              p[e] = pe != 0.0f ? __half2float(__float2half_rn(pe * (e % 2 ? vscale.y : vscale.x))) : 0.0f;
              cz[hf] += pe != 0.0f ? pe * (e % 2 ? vbias.y : vbias.x) : 0.0f;
            } else {
              p[e] = pe;
            }
          }
          // accumulator (n) -> A fragment of k-step n/2: registers {0,1} from even n, {2,3} from odd n
          pa[mt][n / 2][(n % 2) * 2 + 0] = pack2<T>(p[0], p[1]);
          pa[mt][n / 2][(n % 2) * 2 + 1] = pack2<T>(p[2], p[3]);
        }
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          row_l[mt][hf] = row_l[mt][hf] * alpha[hf] + sum[hf];
          row_c[mt][hf] = row_c[mt][hf] * alpha[hf] + cz[hf];
        }
        if (!__all_sync(0xffffffffu, alpha[0] == 1.0f && alpha[1] == 1.0f)) {
#pragma unroll
          for (int n = 0; n < kN3; ++n) {
            o[mt][n][0] *= alpha[0];
            o[mt][n][1] *= alpha[0];
            o[mt][n][2] *= alpha[1];
            o[mt][n][3] *= alpha[1];
          }
        }
      }
    }

    // ---- V half: O += P V (each V fragment feeds MT MMAs) ----
    cp_async_wait<kAhead - 1>();
    group_sync();
    issue(2 * it + kStages);
    if (active) {
      const auto& hb = sm.u.s.ring[wkv][(2 * it + 1) % kStages];
#pragma unroll
      for (int kk = 0; kk < kK3; ++kk) {
        const int key = kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
        if constexpr (kU8) {
          // ldmatrix.trans on raw codes: a register holds codes (d, d+1) of keys (k, k+1); split into an
          // even-d and an odd-d n-tile: n-tile 4b+{0,1,2,3} holds d = 32b + {0,1,16,17} + 2 * col.
#pragma unroll
          for (int b = 0; b < D / 32; ++b) {
            uint32_t r4[4];
            ldmatrix_x4_trans(r4, &hb.kv[key][32 * b + (lane / 16) * 16]);
            const uint32_t v0 = u8x2_to_half2(r4[0], kSelB02, k64), v1 = u8x2_to_half2(r4[1], kSelB02, k64);
            const uint32_t v2 = u8x2_to_half2(r4[0], kSelB13, k64), v3 = u8x2_to_half2(r4[1], kSelB13, k64);
            const uint32_t v4 = u8x2_to_half2(r4[2], kSelB02, k64), v5 = u8x2_to_half2(r4[3], kSelB02, k64);
            const uint32_t v6 = u8x2_to_half2(r4[2], kSelB13, k64), v7 = u8x2_to_half2(r4[3], kSelB13, k64);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
              mma_16816<T>(o[mt][4 * b + 0], pa[mt][kk], v0, v1);
              mma_16816<T>(o[mt][4 * b + 1], pa[mt][kk], v2, v3);
              mma_16816<T>(o[mt][4 * b + 2], pa[mt][kk], v4, v5);
              mma_16816<T>(o[mt][4 * b + 3], pa[mt][kk], v6, v7);
            }
          }
        } else {
#pragma unroll
          for (int n = 0; n < kN3; n += 2) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, &hb.kv[key][(n + lane / 16) * 8]);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
              mma_16816<T>(o[mt][n], pa[mt][kk], b[0], b[1]);
              mma_16816<T>(o[mt][n + 1], pa[mt][kk], b[2], b[3]);
            }
          }
        }
      }
    }
  }
  cp_async_wait<0>();

  tl.mark(6);
  // NOTE: after the fused write-in and its __threadfence: the next run of the op may read those rows
  // before its griddepcontrol.wait (early reads). Keep the trigger after every cache write.
  pdl_launch_dependents();

  // --- the quad's partial sums -> full row sums (u8: the reference m - E from here on) ------------
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      row_m[mt][hf] -= v_exp;
#pragma unroll
      for (int x = 1; x <= 2; x *= 2) {
        row_l[mt][hf] += __shfl_xor_sync(0xffffffffu, row_l[mt][hf], x);
        if constexpr (kU8) row_c[mt][hf] += __shfl_xor_sync(0xffffffffu, row_c[mt][hf], x);
      }
    }

  // --- key groups -> one (m, l, O) per row, through shared memory -------------------------------
  // Each group leaves (m, l) per row and its output scaled to the rows' common max; then all threads
  // sum the groups' outputs and write whole rows (coalesced), normalised or as a partial for the merge.
  __syncthreads();  // every group is done with its ring and with Q
  if (lane % 4 == 0) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int r0 = (wq * MT + mt) * 16 + lane / 4;
      sm.ml[wkv][r0] = make_float2(row_m[mt][0], row_l[mt][0]);
      sm.ml[wkv][r0 + 8] = make_float2(row_m[mt][1], row_l[mt][1]);
    }
  }
  __syncthreads();
  // each row's statistics once, by one thread per row, for the output loop below
  if (tid < rows) {
    const int r = tid;
    float M = -INFINITY;
#pragma unroll
    for (int g = 0; g < Tr::kWKV; ++g) M = fmaxf(M, sm.ml[g][r].x);
    float L = 0.0f;
#pragma unroll
    for (int g = 0; g < Tr::kWKV; ++g) {
      const float2 ml = sm.ml[g][r];
      L += ml.x == -INFINITY ? 0.0f : ml.y * fast_exp2(ml.x - M);
    }
    // the sink joins the max (as in the merge): exp2(sink - M) alone could overflow for a large sink
    float Ms = M, inv = 1.0f / L;
    if (w.slot < 0 && P.sinks != nullptr) {
      const float sink2 = P.sinks[hk * G + r % G] * kLog2e;
      Ms = fmaxf(M, sink2);
      const float f = fast_exp2(M - Ms);
      const float den = L * f + fast_exp2(sink2 - Ms);
      inv = f / den;
      L = den;  // row_stats: (max', den)
    }
    sm.u.r.row_st[r] = make_float4(M, L, Ms, inv);
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int r = (wq * MT + mt) * 16 + lane / 4 + 8 * hf;
      if (r >= rows) continue;
      float M = -INFINITY;
#pragma unroll
      for (int g = 0; g < Tr::kWKV; ++g) M = fmaxf(M, sm.ml[g][r].x);
      const float f = row_m[mt][hf] == -INFINITY ? 0.0f : fast_exp2(row_m[mt][hf] - M);
      const float cz = kU8 ? row_c[mt][hf] : 0.0f;  // u8 value offset term (f16/bf16: none)
#pragma unroll
      for (int n = 0; n < kN3; ++n) {
        // (float4/float2 stores here measured level, run s10b)
        const int c = o_col<kU8>(n, lane);
        sm.u.r.red[wkv][r][c] = (o[mt][n][2 * hf] + cz) * f;
        sm.u.r.red[wkv][r][c + (kU8 ? 2 : 1)] = (o[mt][n][2 * hf + 1] + cz) * f;
      }
    }
  }
  __syncthreads();
  tl.mark(7);
  // one chunk per step (reading 4 chunks before storing any measured 1.04-1.13x slower, run s10b)
  for (int idx = tid; idx < rows * (D / 4); idx += kThreads) {
    const int r = idx / (D / 4), c = (idx % (D / 4)) * 4;
    const float4 st = sm.u.r.row_st[r];
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int g = 0; g < Tr::kWKV; ++g) {
      const float4 v = *reinterpret_cast<const float4*>(&sm.u.r.red[g][r][c]);
      acc.x += v.x;
      acc.y += v.y;
      acc.z += v.z;
      acc.w += v.w;
    }
    const int h = hk * G + r % G;
    const int64_t token = tok0 + w.t0 + r / G;
    if (w.slot < 0) {
      const float inv = st.w;
      if (P.row_stats != nullptr && c == 0)
        *reinterpret_cast<float2*>(P.row_stats + (token * P.H + h) * 2) = make_float2(st.z, st.y);
      store_io4(P.out, token * P.H * D + static_cast<int64_t>(h) * D + c, P.io_dtype,
                make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv));
    } else {
      const int64_t slot = (w.slot + static_cast<int64_t>(hk) * w.num_parts) * P.slot_rows + r;
      *reinterpret_cast<float4*>(P.ws_o + slot * D + c) = acc;
      if (c == 0) *reinterpret_cast<float2*>(P.ws_ml + slot * 2) = make_float2(st.x, st.y);
    }
  }
  tl.mark(8);
  tl.print("fwd", 9);
}

// Writes (and for u8 quantises) the new key and value rows of the sequences cut into several chunks
// (prefill), one warp per (token, kv head): fused, every chunk's CTA would rewrite all earlier new rows
// of its sequence (O(T^2) writes). Single-chunk sequences keep the fused write-in.
template <int D, int KV>
__global__ void __launch_bounds__(128) write_kernel(const __grid_constant__ FwdParams P, int num_tokens, int num_seqs) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * 4 + warp;
  pdl_wait();
  pdl_launch_dependents();  // the attention kernel still waits for this grid to complete
  if (i >= static_cast<int64_t>(num_tokens) * P.Hk) return;
  const int token = static_cast<int>(i / P.Hk), hk = static_cast<int>(i % P.Hk);
  int lo = 0, hi = num_seqs - 1;  // the last sequence that begins at or before the token
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (P.subseq_begins[mid] <= token) lo = mid; else hi = mid - 1;
  }
  // single-chunk sequences write their rows inside the attention kernel (planner: T > max_rows/G -> chunks)
  if (P.subseq_begins[lo + 1] - P.subseq_begins[lo] <= P.chunk_rows / P.G) return;
  const int pos = P.past_lens[lo] + token - P.subseq_begins[lo];
  const int64_t row = cache_row(P.block_indices + P.block_indices_begins[lo], pos, hk, P.Hk, P.block_size_log2);
  const int64_t src = static_cast<int64_t>(token) * P.Hk * D + static_cast<int64_t>(hk) * D;
  write_row<D, KV>(P.k_new, src, P.k_cache, P.k_scale, P.k_min, row, P.io_dtype, lane);
  write_row<D, KV>(P.v_new, src, P.v_cache, P.v_scale, P.v_min, row, P.io_dtype, lane);
}

// Combines the partitions of one query row: out = sum_p 2^(m_p - M) O_p / (sum_p 2^(m_p - M) l_p + sink).
// One CTA per row; a thread owns (partition group, 4-column chunk) and folds its partitions in one pass
// with a running max (m, l and O loaded together, so the loads of all partitions are in flight at
// once); the groups are combined in a fixed order (bit-reproducible).
// A row's D columns may be split over kSplit CTAs (blockIdx.y): more CTAs, and more partition groups
// per CTA, so each thread folds fewer partitions in series (the merge is latency-bound).
// kBatch: partitions per thread whose loads are in flight together (1, 4 or 8: what a thread folds;
// CudaPlan::merge_batch_).
constexpr int kMergeThreads = 512;
// Partition groups of a merge CTA (its threads over the float4 chunks of its D / split columns).
__host__ __device__ constexpr int merge_groups(int D, int split) { return kMergeThreads / (D / 4 / split); }
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
  // trips per partition: the O load is not hoisted above the branch on m (SASS, session 8). Batches of 4
  // measured 0.93-0.98x at 8k and 32k (run s9a), but their registers (32 -> 52) cost the 32 x 8k batch
  // 1.5-3.4%, where no thread folds more than one partition: the planner picks kBatch. Every slot is
  // written for rows < rows, so the loads of partitions without a visible key read finite values that
  // fold() skips.
  for (int p0 = g; p0 < mr.num_parts; p0 += kGroupsM * kBatch) {
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
  if (c4 == 0) ml_s[g] = make_float2(M, den);
  acc_s[g][c4] = acc;
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
    const float inv = 1.0f / dt;
    if (P.row_stats != nullptr && col == 0)
      *reinterpret_cast<float2*>(P.row_stats + (static_cast<int64_t>(mr.token) * P.H + mr.head) * 2) =
          make_float2(Mt, dt);
    const int64_t base = static_cast<int64_t>(mr.token) * P.H * D + static_cast<int64_t>(mr.head) * D + col;
    store_io4(P.out, base, P.io_dtype, make_float4(a.x * inv, a.y * inv, a.z * inv, a.w * inv));
  }
  tl.mark(3);
  tl.print("merge", 4);
}

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
        const uint8_t* src = static_cast<const uint8_t*>(P.k_cache) + row * D;
        for (int d = lane; d < D; d += 32) kt[r][d] = num::u8_dequantize(src[d], sc, mn);
      } else {
        for (int d = lane; d < D; d += 32) kt[r][d] = load_io(P.k_cache, row * D + d, KV == kKvF16 ? kIoF16 : kIoBF16);
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
      const int64_t qb = static_cast<int64_t>(tok0 + t) * P.H * D + static_cast<int64_t>(h) * D;
      float dot = 0.0f;
      // q rounded to the MMA type, as the attention kernel saw it (its statistics are in ms)
      for (int d = 0; d < D; ++d) {
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
