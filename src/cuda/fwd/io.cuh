// Device helpers of every attention kernel: query/output loads and stores in the op's io type, the
// query staging into shared memory, cache row addressing, exp2, and the u8 code conversions.
#pragma once

#include <cfloat>
#include <climits>
#include <type_traits>

#include <cuda_fp8.h>

#include "common/numeric.h"
#include "cuda/fwd/traits.cuh"

namespace pagedattn {
namespace cuda {

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
// of token q_tok0 + r / G, its P.Dk elements (PAD: the columns from P.Dk to D are zeros; else P.Dk = D,
// taken at compile time, see fused_write_in); rows >= `rows` are zeros. `store(r, chunk, uint4)` places
// the 8 elements of a chunk. Each thread's loads go out in batches of 4 chunks, as raw vectors, before any
// is converted.
// (Run s6a: Q loaded element by element was the few-query kernel's largest single stall, 6-8% of its
// samples. Run s9b's SASS: the batches had never overlapped: load_io_n converts next to its load, so the
// compiled loop waited for each chunk before loading the next, 8 load latencies in series at T=8.)
struct NoOp {
  __device__ void operator()() const {}
};
// `after_loads()` runs once the first batch has landed and is stored (fwd_kernel issues the rest of its
// copy prologue there, after the query, as it did before v15; issuing it with the loads in
// flight, run s9c, measured the same on the rows it was meant to help, run s9d). `row_sums` (u8
// caches; shared memory, or nullptr): each row's sum of its f16-rounded elements (for the key bias
// and row minima), reduced across the lanes holding the row in a fixed order (bit-reproducible); visible after
// the caller's next barrier.
template <typename T, int kRows, int D, int kThreads, bool PAD = false, typename Store, typename AfterLoads = NoOp>
__device__ __forceinline__ void stage_q(const FwdParams& P, int64_t q_tok0, int hk, int G, int rows, int tid,
                                        Store store, AfterLoads after_loads = {}, float* row_sums = nullptr) {
  // a row takes kChunks lanes, a power of two (D = 80-112: 16 lanes for 10-14 chunks, D = 192: 32 for 24;
  // the lanes past D / 8 load nothing, store nothing and add 0 to the row sum)
  constexpr int kChunks = D <= 64 ? 8 : D <= 128 ? 16 : 32, kIters = (kRows * kChunks + kThreads - 1) / kThreads,
                kBatch = 4;
  static_assert(32 % kChunks == 0 && kChunks * 8 >= D, "a row's chunks are one lane segment of a warp");
  static_assert((kRows * kChunks) % 32 == 0 && kThreads % 32 == 0, "warp-uniform chunk guards");
  // Every chunk starts at a multiple of 8 elements and run() rejects a query that is not 16-byte
  // aligned (params.h), so every chunk is one vector load (two for f32 queries).
  const int fmt = P.io_dtype;  // what the raw words hold
  const int dk = PAD ? P.Dk : D;  // the query's row length (elements)
  constexpr int kSameIo = std::is_same<T, __half>::value ? kIoF16 : kIoBF16;  // raw words already in T
#pragma unroll
  for (int b = 0; b < kIters; b += kBatch) {
    uint4 raw[kBatch][2];  // a chunk: 8 16-bit elements in [0], or 8 f32 in [0] and [1]
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int idx = tid + (b + k) * kThreads, r = idx / kChunks;
      raw[k][0] = raw[k][1] = make_uint4(0u, 0u, 0u, 0u);  // zero bits: 0.0 in every format
      if (b + k < kIters && r < rows && (idx % kChunks) * 8 < dk) {
        const int64_t src =
            (q_tok0 + r / G) * P.H * dk + static_cast<int64_t>(hk * G + r % G) * dk + (idx % kChunks) * 8;
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
        if (kChunks * 8 == D || (idx % kChunks) * 8 < D) store(idx / kChunks, idx % kChunks, v);
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

// A partition's partial output, 4 columns from element i of ws_o: f32 O (relative to its m), or with
// P.ws_half f16 O / l (inv_l = 1 / l, 0 where l = 0), half the bytes each partition writes and the merge
// reads. O / l is a convex combination of value rows, so it fits f16 wherever the values do.
__device__ __forceinline__ float partial_inv(float l) { return l > 0.0f ? 1.0f / l : 0.0f; }
// (through store_io4, whose code fwd_kernel's epilogue already holds for its output rows)
__device__ __forceinline__ void store_partial4(const FwdParams& P, int64_t i, float4 v, float inv_l) {
  const float s = P.ws_half ? inv_l : 1.0f;
  store_io4(P.ws_o, i, P.ws_half ? kIoF16 : kIoF32, make_float4(v.x * s, v.y * s, v.z * s, v.w * s));
}
// The merge's read of store_partial4's 4 columns (L2 only: written by the previous grid), as f32 O:
// with ws_half the stored O / l times l, and for fp8 caches times the kv head's value scale, which the
// writers leave out of f16 partials (partial_value_scale: pass l times it).
__device__ __forceinline__ float partial_value_scale(const FwdParams& P, int head) {
  return P.ws_half && P.v_head_scale != nullptr ? P.v_head_scale[(head / P.G) * P.v_head_scale_stride] : 1.0f;
}
// (f16 partials in two steps for callers that keep the raw bytes in flight: load_half_partial4, then
// half_partial4 with l)
__device__ __forceinline__ uint2 load_half_partial4(const FwdParams& P, int64_t i) {
  return __ldcg(reinterpret_cast<const uint2*>(reinterpret_cast<const __half*>(P.ws_o) + i));
}
__device__ __forceinline__ float4 half_partial4(uint2 u, float l) {
  const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&u.x));
  const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&u.y));
  return make_float4(__fmul_rn(a.x, l), __fmul_rn(a.y, l), __fmul_rn(b.x, l), __fmul_rn(b.y, l));
}
__device__ __forceinline__ float4 load_partial4(const FwdParams& P, int64_t i, float l) {
  if (P.ws_half) return half_partial4(load_half_partial4(P, i), l);
  return __ldcg(reinterpret_cast<const float4*>(P.ws_o + i));
}

// The first key any new token of a chunk starting at token t0 may see: its sliding window's start (0
// without a window). Keys below it are never read: their slots may hold anything, their blocks freed.
__device__ __forceinline__ int window_lo(const FwdParams& P, int past, int t0) {
  return P.sliding_window > 0 ? max(0, past + t0 - P.sliding_window + 1) : 0;
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
// bytes. In fwd_kernel and wg_kernel's key-split forms (wg_kernel's 128-row forms dequantise instead:
// u8x2_dequant) the key MMAs run on these biased codes and fold the 1024 against sum(q): the bias costs at most
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
// Two codes -> their f16 values mn + code * scale (wg_kernel's u8 tiles): the code exact as an f16
// (1024 + b - 1024), then one fused multiply-add, so the value is rounded once, as an f16 cache holding
// it would be.
__device__ __forceinline__ uint32_t u8x2_dequant(uint32_t x, uint32_t sel, __half2 scale, __half2 mn) {
  uint32_t h = u8x2_biased(x, sel);
  const __half2 b = __hsub2(*reinterpret_cast<__half2*>(&h), __float2half2_rn(kU8Bias));
  __half2 v = __hfma2(b, scale, mn);
  return *reinterpret_cast<uint32_t*>(&v);
}

// fp8 codes -> f16 pairs: the low 16 bits of x (bytes 0 and 1 -> the low and high half), one
// cvt.rn.f16x2.e4m3x2 on sm_89 and later (cuda_fp8.h; older targets convert in software). Exact: every
// e4m3 value, subnormals and NaN included, is an f16 value.
__device__ __forceinline__ uint32_t f8x2_to_half2(uint32_t x) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(x & 0xffffu), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}
// 4 fp8 codes -> 2 f16 pairs: bytes 0, 1 in .x, bytes 2, 3 in .y. On sm_89 and later the second cvt reads
// the register's upper half itself (SASS: F2FP ... R.H1), where f8x2_to_half2(x >> 16) first shifted it:
// one instruction less per 4 codes, the same bits.
__device__ __forceinline__ uint2 f8x4_to_half2x2(uint32_t x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint2 r;
  asm("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %2;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n cvt.rn.f16x2.e4m3x2 %1, hi;\n}\n"
      : "=r"(r.x), "=r"(r.y)
      : "r"(x));
  return r;
#else
  return make_uint2(f8x2_to_half2(x), f8x2_to_half2(x >> 16));
#endif
}

}  // namespace cuda
}  // namespace pagedattn
