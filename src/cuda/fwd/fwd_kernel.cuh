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
// Sequences cut into several chunks are written by write_kernel, launched before this kernel (every
// sequence, under FwdParams::write_all).
// Partitions of one chunk leave (m, l, O) partials; merge_kernel combines them.
#pragma once

#include "cuda/fwd/gather.cuh"
#include "cuda/fwd/lse.cuh"
#include "cuda/fwd/write.cuh"

namespace pagedattn {
namespace cuda {

// Column of accumulator element pair (n, 0/1) of an O fragment; byte-code (u8, fp8) n-tiles hold
// even/odd columns (see the PV step), f16/bf16 n-tiles 8 consecutive columns. Returns the first column;
// the second is col + 2 (byte codes) or col + 1 (f16/bf16).
template <bool kBytes>
__device__ __forceinline__ int o_col(int n, int lane) {
  if constexpr (kBytes) {
    const int b = n / 4, q = n % 4;
    return 32 * b + (q >= 2 ? 16 : 0) + (q % 2) + 4 * (lane % 4);
  } else {
    return n * 8 + 2 * (lane % 4);
  }
}

// An output element with u8's value offset term added (x + c), or x itself for the other precisions: with
// c = 0.0f the compiler keeps the add (x + 0.0f is not x for x = -0.0f), 128 FADD per thread in every CTA's
// epilogue of fwd_kernel<256, f16, 1> (3240 -> 3112 SASS instructions without them; time within the
// spread, run bs1).
template <bool kAdd>
__device__ __forceinline__ float plus_offset(float x, float c) {
  if constexpr (kAdd) {
    return x + c;
  } else {
    return x;
  }
}

// One S MMA k-step on a register of 4 byte codes of a key (B operand): u8 codes as f16 1024 + code (one
// PRMT per pair), fp8 codes as their f16 values (one cvt per pair).
template <int KV, typename T, bool HR>
__device__ __forceinline__ void mma_codes(float (&acc)[4], const uint32_t (&qf)[4], uint32_t codes) {
  if constexpr (KV == kKvF8) {
    const uint2 h = f8x4_to_half2x2(codes);
    mma_rows<T, HR>(acc, qf, h.x, h.y);
  } else {
    mma_rows<T, HR>(acc, qf, u8x2_biased(codes, kSelB01), u8x2_biased(codes, kSelB23));
  }
}

// A register of ldmatrix.trans on fp8 codes, (d, d + 1) of key k then of key k + 1, as f16 pairs of the two
// keys at d (x) and at d + 1 (y): one PRMT (bytes 0, 2 low, 1, 3 high) and one cvt per pair.
__device__ __forceinline__ uint2 f8_key_pairs(uint32_t r) { return f8x4_to_half2x2(__byte_perm(r, 0u, 0x3120u)); }

// --- the key loop's named steps (fwd_kernel, per slice of a key group) ----------------------------------
// S = Q K^T of the slice's K half `hb` into acc (zeroed by the caller): each K fragment feeds MT MMAs.
// u8 and fp8: one ldmatrix.x4 on raw codes covers 8 keys x 4 MMA k-steps (see load_qf for Q's matching
// order); u8 codes become f16 1024 + code (one PRMT per pair), fp8 codes their f16 values (one cvt).
template <int D, int MT, int kN1, int KV, typename T, bool HR, typename Half, typename QFrag>
__device__ __forceinline__ void qk_step(float (&acc)[MT][kN1][4], const Half& hb, const QFrag& q_frag, int lane) {
  if constexpr (KV == kKvU8 || KV == kKvF8) {
    // one ldmatrix.x4 on raw codes: 8 keys x 4 MMA k-steps; each register holds 4 codes of a key
#pragma unroll
    for (int ks = 0; ks < D / 64 * 4; ks += 4) {
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
          for (int e = 0; e < 4; ++e) mma_codes<KV, T, HR>(acc[mt][n], qf[mt][e], r4[e]);
      }
    }
    if constexpr (D % 64 != 0) {  // D = 96: the last 32 codes of a key by one ldmatrix.x2 (2 k-steps)
      constexpr int ks = D / 16 - 2;
      uint32_t qf[MT][2][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) q_frag(qf[mt][0], mt, ks), q_frag(qf[mt][1], mt, ks + 1);
#pragma unroll
      for (int n = 0; n < kN1; ++n) {
        uint32_t r2[2];
        ldmatrix_x2(r2, &hb.kv[n * 8 + (lane % 8)][(ks + (lane / 8) % 2) * 16]);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_codes<KV, T, HR>(acc[mt][n], qf[mt][0], r2[0]);
          mma_codes<KV, T, HR>(acc[mt][n], qf[mt][1], r2[1]);
        }
      }
    }
  } else {
#pragma unroll
    for (int ks = 0; ks < D / 32 * 2; ks += 2) {
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
          mma_rows<T, HR>(acc[mt][n], qf[mt][0], b[0], b[1]);
          mma_rows<T, HR>(acc[mt][n], qf[mt][1], b[2], b[3]);
        }
      }
    }
    if constexpr (D % 32 != 0) {  // D = 80, 112: the last k-step by one ldmatrix.x2
      constexpr int ks = D / 16 - 1;
      uint32_t qf[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) q_frag(qf[mt], mt, ks);
#pragma unroll
      for (int n = 0; n < kN1; ++n) {
        uint32_t b[2];
        ldmatrix_x2(b, &hb.kv[n * 8 + (lane % 8)][ks * 16 + ((lane / 8) % 2) * 8]);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) mma_rows<T, HR>(acc[mt][n], qf[mt], b[0], b[1]);
      }
    }
  }
}

// O += P V of the slice's V half `hb` (each V fragment feeds MT MMAs); pa: P as the A fragments.
template <int D, int MT, int kK3, int KV, typename T, bool HR, typename Half>
__device__ __forceinline__ void value_step(float (&o)[MT][D / 8][4], const uint32_t (&pa)[MT][kK3][4], const Half& hb,
                                           int lane, uint32_t k64) {
  constexpr int kN3 = D / 8;  // O n-tiles
#pragma unroll
  for (int kk = 0; kk < kK3; ++kk) {
    const int key = kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
    if constexpr (KV == kKvU8 || KV == kKvF8) {
      // ldmatrix.trans on raw codes: a register holds codes (d, d+1) of keys (k, k+1); split into an
      // even-d and an odd-d n-tile: n-tile 4b+{0,1,2,3} holds d = 32b + {0,1,16,17} + 2 * col (f8_key_pairs).
#pragma unroll
      for (int b = 0; b < D / 32; ++b) {
        uint32_t r4[4];
        ldmatrix_x4_trans(r4, &hb.kv[key][32 * b + (lane / 16) * 16]);
        uint32_t v0, v1, v2, v3, v4, v5, v6, v7;
        if constexpr (KV == kKvF8) {
          const uint2 h0 = f8_key_pairs(r4[0]), h1 = f8_key_pairs(r4[1]);
          const uint2 h2 = f8_key_pairs(r4[2]), h3 = f8_key_pairs(r4[3]);
          v0 = h0.x, v1 = h1.x, v2 = h0.y, v3 = h1.y;
          v4 = h2.x, v5 = h3.x, v6 = h2.y, v7 = h3.y;
        } else {
          v0 = u8x2_to_half2(r4[0], kSelB02, k64), v1 = u8x2_to_half2(r4[1], kSelB02, k64);
          v2 = u8x2_to_half2(r4[0], kSelB13, k64), v3 = u8x2_to_half2(r4[1], kSelB13, k64);
          v4 = u8x2_to_half2(r4[2], kSelB02, k64), v5 = u8x2_to_half2(r4[3], kSelB02, k64);
          v6 = u8x2_to_half2(r4[2], kSelB13, k64), v7 = u8x2_to_half2(r4[3], kSelB13, k64);
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_rows<T, HR>(o[mt][4 * b + 0], pa[mt][kk], v0, v1);
          mma_rows<T, HR>(o[mt][4 * b + 1], pa[mt][kk], v2, v3);
          mma_rows<T, HR>(o[mt][4 * b + 2], pa[mt][kk], v4, v5);
          mma_rows<T, HR>(o[mt][4 * b + 3], pa[mt][kk], v6, v7);
        }
      }
    } else {
#pragma unroll
      for (int n = 0; n < kN3; n += 2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, &hb.kv[key][(n + lane / 16) * 8]);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_rows<T, HR>(o[mt][n], pa[mt][kk], b[0], b[1]);
          mma_rows<T, HR>(o[mt][n + 1], pa[mt][kk], b[2], b[3]);
        }
      }
    }
  }
}

// --- KT: keys as the MMAs' M dimension (u8 and fp8 chunks of <= 8 rows) -----------------------------
// S^T = K Q^T and O^T = V^T P^T: a 16-key m-tile of codes is the A operand, the chunk's 8 rows the n8
// columns, so every MMA does useful work for 16 keys where the 16-row variants' top halves (HR) did for 8:
// half the MMAs of S and of P V. Lane l holds keys l / 4 and l / 4 + 8 of an S^T tile for rows
// 2 (l % 4) and + 1; P^T reaches the B operand of P V through one movmatrix per 8 keys.
// S^T of the slice's K half: m-tile mk is keys 16 mk .. + 15; one ldmatrix.x4 on raw codes covers its
// 16 keys x 2 k-steps (a register: 4 codes of one key, in load_qf's head-dim order, so that Q's B
// fragment of k-step ks is registers 0 and 2 of load_qf's: qt[ks]). D = 256 (one m-tile) sums its
// 16 k-steps in two chains.
template <int D, int KV, int kMK, typename Half>
__device__ __forceinline__ void kt_qk_step(float (&acc)[kMK][4], const Half& hb, const uint32_t (&qt)[D / 16][2],
                                           int lane) {
  // a register of 4 codes of a key -> its two A registers (k-steps 2t.. and 2t + 8..): fp8 values, u8 1024 + code
  auto codes = [](uint32_t r) {
    if constexpr (KV == kKvF8)
      return f8x4_to_half2x2(r);
    else
      return make_uint2(u8x2_biased(r, kSelB01), u8x2_biased(r, kSelB23));
  };
  constexpr int kChains = kMK == 1 ? 2 : 1;
  float part[kMK][kChains][4];
#pragma unroll
  for (int mk = 0; mk < kMK; ++mk)
#pragma unroll
    for (int c = 0; c < kChains; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e) part[mk][c][e] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < D / 16; ks += 2) {
#pragma unroll
    for (int mk = 0; mk < kMK; ++mk) {
      uint32_t r4[4];  // keys 0-7 / 8-15 of the m-tile at k-step ks, then at ks + 1
      ldmatrix_x4(r4, &hb.kv[16 * mk + (lane % 8) + ((lane / 8) % 2) * 8][(ks + lane / 16) * 16]);
      const uint2 h0 = codes(r4[0]), h1 = codes(r4[1]), h2 = codes(r4[2]), h3 = codes(r4[3]);
      const uint32_t a0[4] = {h0.x, h1.x, h0.y, h1.y}, a1[4] = {h2.x, h3.x, h2.y, h3.y};
      mma_16816<__half>(part[mk][0], a0, qt[ks][0], qt[ks][1]);
      mma_16816<__half>(part[mk][kChains - 1], a1, qt[ks + 1][0], qt[ks + 1][1]);
    }
  }
#pragma unroll
  for (int mk = 0; mk < kMK; ++mk)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[mk][e] = kChains == 2 ? part[mk][0][e] + part[mk][kChains - 1][e] : part[mk][0][e];
}

// O^T += V^T P^T of the slice's V half: ldmatrix.trans on raw codes, key pairs at d and at d + 1 from each
// register (f8_key_pairs). O^T tile n (= 2 b + y) holds head dims 32 b + 16 y + 2 (l / 4) (elements 0, 1)
// and + 1 (elements 2, 3), for rows 2 (l % 4) (elements 0, 2) and + 1 (1, 3).
template <int D, int KV, int kK3, typename Half>
__device__ __forceinline__ void kt_value_step(float (&o)[D / 16][4], const uint32_t (&pb)[kK3][2], const Half& hb,
                                              int lane, uint32_t k64) {
  // u8: codes - 128 (the centred values), the same pairs by two PRMT (u8x2_to_half2)
  auto pairs = [&](uint32_t r) {
    if constexpr (KV == kKvF8)
      return f8_key_pairs(r);
    else
      return make_uint2(u8x2_to_half2(r, kSelB02, k64), u8x2_to_half2(r, kSelB13, k64));
  };
#pragma unroll
  for (int kk = 0; kk < kK3; ++kk) {
    const int key = kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
#pragma unroll
    for (int b = 0; b < D / 32; ++b) {
      uint32_t r4[4];
      ldmatrix_x4_trans(r4, &hb.kv[key][32 * b + (lane / 16) * 16]);
      const uint2 h0 = pairs(r4[0]), h1 = pairs(r4[1]), h2 = pairs(r4[2]), h3 = pairs(r4[3]);
      const uint32_t ax[4] = {h0.x, h0.y, h1.x, h1.y}, ay[4] = {h2.x, h2.y, h3.x, h3.y};
      mma_16816<__half>(o[2 * b], ax, pb[kk][0], pb[kk][1]);
      mma_16816<__half>(o[2 * b + 1], ay, pb[kk][0], pb[kk][1]);
    }
  }
}

// --- the epilogue's named steps (fwd_kernel, after the key groups' (m, l) are in sm.ml) ----------------
// Row r's statistics, once, by one thread: the groups' common max M, the sum L at M, and for an output
// row the sink (it joins the max, as in the merge: exp2(sink - M) alone could overflow for a large
// sink) and 1 / denominator -> sm.u.r.row_st[r] = (M, L or the denominator, max with the sink, inv).
// The groups' common max M of row r and the sum L at M (row_statistics; a partition's partial (M, L)).
template <typename Tr, typename Smem>
__device__ __forceinline__ float2 group_max_sum(const Smem& sm, int r) {
  float M = -INFINITY;
#pragma unroll
  for (int g = 0; g < Tr::kWKV; ++g) M = fmaxf(M, sm.ml[g][r].x);
  float L = 0.0f;
#pragma unroll
  for (int g = 0; g < Tr::kWKV; ++g) {
    const float2 ml = sm.ml[g][r];
    L += ml.x == -INFINITY ? 0.0f : ml.y * fast_exp2(ml.x - M);
  }
  return make_float2(M, L);
}

template <typename Tr, typename Smem>
__device__ __forceinline__ void row_statistics(const FwdParams& P, const planner::WorkItem& w, Smem& sm, int r, int hk,
                                               int G) {
  const float2 ML = group_max_sum<Tr>(sm, r);
  const float M = ML.x;
  float L = ML.y;
  // L = 0: no visible key (a prefix_only row whose window starts past the shard): out 0, lse -inf
  float Ms = M, inv = L > 0.0f ? 1.0f / L : 0.0f;
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

// The rows out: the key groups' outputs (sm.u.r.red, each scaled to the rows' common max) summed and
// written as whole rows, coalesced: normalised into `out` (and row_stats), or a partial for the merge.
// One chunk per step (reading 4 chunks before storing any measured 1.04-1.13x slower, run s10b).
template <typename Tr, int D, bool PAD, typename Smem>
__device__ __forceinline__ void write_rows(const FwdParams& P, const planner::WorkItem& w, int slot0, Smem& sm, int rows,
                                           int tid, int hk, int G, int tok0) {
  for (int idx = tid; idx < rows * (D / 4); idx += Tr::kThreads) {
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
    if (slot0 < 0) {
      const float inv = st.w;
      if (c == 0) store_row_stats(P, token, h, st.z, st.y);
      const int dv = PAD ? P.Dv : D;  // (PAD: the call's value head size; else D, at compile time)
      if (!PAD || c < dv)  // (not a padding column)
        store_io4(P.out, token * P.H * dv + static_cast<int64_t>(h) * dv + c, P.io_dtype,
                  make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv));
    } else {
      const int64_t slot = (slot0 + static_cast<int64_t>(hk) * w.num_parts) * P.slot_rows + r;
      store_partial4(P, slot * D + c, acc, st.w);  // (st.w: 1 / L, partial_inv; no sink in a partial)
      if (c == 0) *reinterpret_cast<float2*>(P.ws_ml + slot * 2) = make_float2(st.x, st.y);
    }
  }
}

// (S = QK^T runs D/16 dependent MMAs per 8-key n-tile. Even and odd k-steps in two accumulator chains,
// summed before the softmax, measured 0.98-1.01x in run s4a; the variant lived until 5a4d0c0.)
// PAD: the call's key or value head size (P.Dk, P.Dv) is below D (zero columns past it; see load_half).
// WKV: the key groups (FwdTraits; 4 at RT = 2: Options::deterministic's layout).
// KT: keys as the MMAs' M dimension (kt_qk_step; u8 and fp8 chunks of <= 8 rows, on the HR variant's layout) at
// KT CTAs per SM; 0: off.
template <int D, int KV, int RT, int MT = 1, bool PAD = false, int WKV = 0, bool HR = false, int KT = 0>
__global__ void __launch_bounds__(FwdTraits<D, KV, RT, MT, WKV, HR, KT>::kThreads,
                                  FwdTraits<D, KV, RT, MT, WKV, HR, KT>::kMinCtas)
    fwd_kernel(const __grid_constant__ FwdParams P, const int item_offset) {
  using Tr = FwdTraits<D, KV, RT, MT, WKV, HR, KT>;
  using T = typename Tr::T;
  using Smem = SharedStorage<D, KV, RT, MT, WKV, HR, KT>;
  static_assert(!KT || (HR && (KV == kKvF8 || KV == kKvU8)), "KT: the one-byte kinds on the HR variant's layout");
  constexpr int kWarps = Tr::kWarps;
  constexpr int kThreads = Tr::kThreads;
  constexpr int kKPW = Tr::kKPW;
  constexpr int kRows = Tr::kRows;
  constexpr int kStages = Tr::kStages;
  constexpr bool kU8 = Tr::kU8;
  constexpr bool kBytes = Tr::kBytes;  // u8 or fp8 codes: their Q order and O columns
  constexpr int kN1 = kKPW / 8;   // S n-tiles (8 keys) per warp
  constexpr int kK3 = kKPW / 16;  // PV k-steps (16 keys) per warp
  constexpr int kN3 = KT ? D / 16 : D / 8;  // O n-tiles per warp (KT: O^T m-tiles)
  // Q stays in registers at D <= 128 (one row tile per warp); else it is re-read from shared memory.
  // (HR at D = 256 with Q in registers, 2 per k-step: f16 254 registers against 200, sm_90a)
  constexpr bool kQRegs = !KT && D <= 128 && MT == 1;
  // The thread's rows per row tile: lane/4 and lane/4 + 8 (hf = 0, 1); HR: lane/4 only (mma_16816_top);
  // KT: 2 (lane % 4) and + 1.
  constexpr int kHF = HR && !KT ? 1 : 2;

  extern __shared__ __align__(16) uint8_t smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);

  // diagnostic build only (PAGEDATTN_TIMELINE): 1 pdl wait, 2 write-in, 3 prologue issued (thread 0's
  // copies out, its first query loads in flight), 4 Q staged, 5 first K, 6 loop, 7 partial outputs of
  // the key groups in shared memory, 8 end
  Timeline tl;
  const int hk = blockIdx.y;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wq = warp % Tr::kWQ, wkv = warp / Tr::kWQ;  // row-tile slot (tiles wq*MT ..), key group
  auto thread_row = [&](int mt, int hf) {
    return KT ? 2 * (lane % 4) + hf : (wq * MT + mt) * 16 + lane / 4 + 8 * hf;
  };
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
        load_half<D, KV, RT, MT, PAD, WKV>(sm.u.s.ring[wkv][h % kStages], h % 2, P, table, hk, js, kv_lo, w.kv_end, gtid);
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
  fused_write_in<D, KV, PAD>(P, w, table, hk, warp, kWarps, lane);
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
  // odd, so the two pairs a quarter warp reads lie in different banks. kQRows * 2D bytes: within q.
  auto q_unit = [&](int p, int i) {
    return reinterpret_cast<uint32_t*>(reinterpret_cast<uint8_t*>(&sm.u.s.q[0][0]) + p * (4 * D) +
                                       (i ^ ((p & 1) << 2)) * 16);
  };
  auto store_q = [&](int r, int ch, uint4 v) {
    if constexpr (kBytes) {
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
  stage_q<T, kRows, D, kThreads, PAD>(P, tok0 + w.t0, hk, G, rows, tid, store_q, prologue_rest,
                                      kU8 ? sm.qsum : nullptr);
  __syncthreads();
  tl.mark(4);

  // Q fragments of the warp's row tile mt (A operand of S = Q K^T, k-step ks).
  // u8: the k index of an MMA step maps to head dims so that one 32-bit load of 4 codes feeds both
  // B registers: k = 2i+b -> d = 4i+b, k = 8+2i+b -> d = 4i+2+b (i = lane % 4); Q follows suit.
  auto load_qf = [&](uint32_t (&f)[4], int mt, int ks) {
    const int r0 = (wq * MT + mt) * 16;
    if constexpr (kBytes) {
      // unit ks * 4 + t of pair p, i.e. q_unit(p, ks * 4 + t): the swizzle flips ks's parity when p is odd
      const int p = (wq * MT + mt) * 8 + lane / 4, sw = (p & 1) ? 64 : 0;
      const uint8_t* qb = reinterpret_cast<const uint8_t*>(&sm.u.s.q[0][0]) + p * (4 * D) + (lane % 4) * 16;
      const uint4 u = *reinterpret_cast<const uint4*>(qb + ks * 64 + ((ks & 1) ? -sw : sw));
      f[0] = u.x;
      f[1] = u.y;
      f[2] = u.z;
      f[3] = u.w;
    } else {
      // (HR: the rows 8-15 registers f[1], f[3] are not used; their addresses repeat rows 0-7)
      ldmatrix_x4(f, &sm.u.s.q[r0 + (lane % (HR ? 8 : 16))][ks * 16 + (lane / 16) * 8]);
    }
  };
  uint32_t qreg[kQRegs ? D / 16 : 1][4];
  // KT: Q's B fragments (row lane / 4, head dims 16 ks + 4 (lane % 4) .. + 3; see kt_qk_step): registers
  // 0 and 2 of the 16-row A fragment
  uint32_t qt[KT ? D / 16 : 1][2];
  if constexpr (KT) {
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      uint32_t f[4];
      load_qf(f, 0, ks);
      qt[ks][0] = f[0];
      qt[ks][1] = f[2];
    }
  }
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
    for (int hf = 0; hf < kHF; ++hf) {
      const int r = thread_row(mt, hf);
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
  // u8: E per row (u8_value_exp; the reference is row_m - v_exp) in the variants Options::deterministic
  // runs chunks of several tokens on (1 row tile, and WKV = 4); one warp-uniform E elsewhere (chunks of
  // one token there, or the default mode only: the 2-row-tile u8 variant at D = 256 ran 1.04x slower
  // with per-row E, 32k and 128k T = 8, run 2026-12-02-inv3)
  constexpr bool kRowExp = kU8 && (RT == 1 || WKV != 0);
  float v_exp[kRowExp ? MT : 1][kRowExp ? 2 : 1] = {};
  auto vexp = [&](int mt, int hf) -> float& { return v_exp[kRowExp ? mt : 0][kRowExp ? hf : 0]; };
  float o[MT][kN3][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int hf = 0; hf < kHF; ++hf) {
      row_m[mt][hf] = -INFINITY;
      row_l[mt][hf] = row_c[mt][hf] = 0.0f;
    }
#pragma unroll
    for (int n = 0; n < kN3; ++n) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
  }
  uint32_t pa[MT][kK3][4];  // P of the slice as A fragments of the PV MMAs
  uint32_t pb[KT ? kK3 : 1][2];  // KT: P^T as B fragments

  // 0x64 (the high byte of the f16 1024 + code) from a kernel parameter, so the compiler cannot fold
  // it: with a literal, ptxas takes the PRMT form with the selector in a register and re-creates the
  // selectors before each use in the value step (~50 instructions per slice at u8 D = 256).
  const uint32_t k64 = P.u8_exp_byte;
  // fp8: the kv head's key scale joins the softmax scale (S runs on the codes' values); its value scale
  // multiplies the group's output at the end (P V runs on them too)
  const float s_log2 = Tr::kF8 ? P.scale_log2 * P.k_head_scale[hk * P.k_head_scale_stride] : P.scale_log2;
  const float v_head = Tr::kF8 ? P.v_head_scale[hk * P.v_head_scale_stride] : 1.0f;
  // a partial in f16 (ws_half) leaves fp8's value scale to the merge: |O / l| <= 448 fits f16 whatever the scale
  const float v_part = P.ws_half ? 1.0f : v_head;

  // Options::deterministic's runs of partitions (WorkItem::part > 0; planner::Plan::span). After a
  // partition's last tile the CTA leaves that partition's partial in its slot, with the arithmetic of
  // the epilogue below (the groups' (m, l) through sm.ml; each group's output scaled to the rows'
  // common max, summed in group order), so a partition's partial has the same bits whether its CTA
  // runs it alone or in a run. The groups' outputs pass through shared memory kFC columns at a time
  // (FwdTraits::kFlushOwn says where: an area of its own, or the ring slot each group has just read);
  // then the next partition starts from empty state while its copies keep streaming. (WKV = 4:
  // deterministic mode's variants.) The block loop and its per-n-tile predicates are compile-time:
  // blocks sized at run time took the 32 x 8k batch's u8 T = 8 attention kernel from 510 to 922 us per
  // layer (runs mk, ncu); the own area took it to 382 (run fs).
  constexpr bool kFlush = WKV == 4;
  constexpr bool kOwn = Tr::kFlushOwn;  // its own staging area (FwdTraits says where it has one)
  constexpr int kFC = Tr::kFlushCols;
  static_assert(!kFlush || kOwn || kRows * Tr::kFlushLd * 4 <= static_cast<int>(sizeof(typename Smem::Half)),
                "the partition flush's column block fits a ring slot");
  const int flush_tiles = kFlush && w.part > 0 ? w.part / Tr::kTileKV : 0;
  auto flush_partition = [&](int sf, int slot0) {
    float fm[MT][2], fl[MT][2], fc[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int hf = 0; hf < kHF; ++hf) {
        fm[mt][hf] = row_m[mt][hf] - vexp(mt, hf);
        fl[mt][hf] = row_l[mt][hf];
        fc[mt][hf] = row_c[mt][hf];
#pragma unroll
        for (int x = 1; x <= 2; x *= 2) {
          fl[mt][hf] += __shfl_xor_sync(0xffffffffu, fl[mt][hf], x);
          if constexpr (kU8) fc[mt][hf] += __shfl_xor_sync(0xffffffffu, fc[mt][hf], x);
        }
      }
    __syncthreads();  // every group is done with the tile (slot sf), and the last flush with sm.ml
    if (lane % 4 == 0) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int r0 = (wq * MT + mt) * 16 + lane / 4;
        sm.ml[wkv][r0] = make_float2(fm[mt][0], fl[mt][0]);
        sm.ml[wkv][r0 + 8] = make_float2(fm[mt][1], fl[mt][1]);
      }
    }
    __syncthreads();
    // each row's (max, sum) over the groups once, and with f16 partials its 1 / l (write_rows' st.w), read
    // by the column blocks' stores after their first barrier: computed there per 4 columns, it took the
    // 32 x 8k batch's u8 T = 8 3.9% longer than f32 partials (run hp1)
    float2 ml_row = make_float2(0.0f, 0.0f);
    if (tid < rows) {
      ml_row = group_max_sum<Tr>(sm, tid);
      sm.flush_inv[tid] = P.ws_half ? partial_inv(ml_row.y) : 1.0f;
    }
    float f[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int hf = 0; hf < kHF; ++hf) {
        const int r = (wq * MT + mt) * 16 + lane / 4 + 8 * hf;
        float M = -INFINITY;
#pragma unroll
        for (int g = 0; g < Tr::kWKV; ++g) M = fmaxf(M, sm.ml[g][r].x);
        f[mt][hf] = fm[mt][hf] == -INFINITY ? 0.0f : fast_exp2(fm[mt][hf] - M) * v_part;
      }
    constexpr int kLd = Tr::kFlushLd;
    auto stage = [&](int g) -> float* {
      if constexpr (kOwn) {
        return &sm.u.s.stage[g][0][0];
      } else {
        return reinterpret_cast<float*>(&sm.u.s.ring[g][sf]);
      }
    };
    for (int cb = 0; cb < D / kFC; ++cb) {
      float* mine = stage(wkv);
      if (cb > 0) __syncthreads();  // every thread is done reading the last block
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hf = 0; hf < kHF; ++hf) {
          const int r = (wq * MT + mt) * 16 + lane / 4 + 8 * hf;
          if (r >= rows) continue;
          const float cz = kU8 ? fc[mt][hf] : 0.0f;
          const float fr = f[mt][hf];
          auto out = [&](float x) { return plus_offset<kU8>(x, cz) * fr; };
          // (every n unrolled, so that o stays in registers; each loop takes the n-tiles of columns
          // [cb kFC, (cb + 1) kFC))
          if constexpr (kOwn && kBytes) {
#pragma unroll
            for (int n = 0; n < kN3; n += 2) {  // n-tiles n, n + 1 hold columns c, c + 2 and c + 1, c + 3
              if (n / (kFC / 8) != cb) continue;
              const int c = o_col<kBytes>(n, lane) - cb * kFC;
              *reinterpret_cast<float4*>(mine + r * kLd + c) =
                  make_float4(out(o[mt][n][2 * hf]), out(o[mt][n + 1][2 * hf]), out(o[mt][n][2 * hf + 1]),
                              out(o[mt][n + 1][2 * hf + 1]));
            }
          } else {
#pragma unroll
            for (int n = 0; n < kN3; ++n) {
              if (n / (kFC / 8) != cb) continue;
              const int c = o_col<kBytes>(n, lane) - cb * kFC;
              if constexpr (kOwn) {
                *reinterpret_cast<float2*>(mine + r * kLd + c) =
                    make_float2(out(o[mt][n][2 * hf]), out(o[mt][n][2 * hf + 1]));
              } else {
                mine[r * kLd + c] = out(o[mt][n][2 * hf]);
                mine[r * kLd + c + (kBytes ? 2 : 1)] = out(o[mt][n][2 * hf + 1]);
              }
            }
          }
        }
      __syncthreads();
      for (int idx = tid; idx < rows * (kFC / 4); idx += kThreads) {
        const int r = idx / (kFC / 4), c = (idx % (kFC / 4)) * 4;
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int g = 0; g < Tr::kWKV; ++g) {
          const float4 v = *reinterpret_cast<const float4*>(stage(g) + r * kLd + c);
          acc.x += v.x;
          acc.y += v.y;
          acc.z += v.z;
          acc.w += v.w;
        }
        const int64_t slot = (slot0 + static_cast<int64_t>(hk) * w.num_parts) * P.slot_rows + r;
        store_partial4(P, slot * D + cb * kFC + c, acc, sm.flush_inv[r]);
      }
    }
    // the ring slot is free for the next copies once every reader is done; the own area is next written
    // after the next flush's first barrier
    if constexpr (!kOwn) __syncthreads();
    if (tid < rows) {
      const int64_t slot = (slot0 + static_cast<int64_t>(hk) * w.num_parts) * P.slot_rows + tid;
      *reinterpret_cast<float2*>(P.ws_ml + slot * 2) = ml_row;
    }
  };

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
      if constexpr (KT) {
        // element (mk, e) of S^T: key js + 16 mk + lane / 4 + 8 (e / 2), row 2 (lane % 4) + e % 2
        float acc[kK3][4];
        kt_qk_step<D, KV, kK3>(acc, hb, qt, lane);
        const bool interior = js + kKPW <= w.kv_end && js + kKPW <= past + w.t0 + 1 &&
                              (P.sliding_window == 0 || js >= past + w.t0 + w.nt - P.sliding_window) &&
                              (P.qq_bias == nullptr || js + kKPW <= past);
        // u8: a key's parameters (its m-tile row: the thread's keys lane / 4 and + 8)
        auto par = [&](int a, int mk, int e) {
          return __half2float(*reinterpret_cast<const __half*>(&hb.par[a][16 * mk + lane / 4 + 8 * (e / 2)]));
        };
        float mx[2] = {-INFINITY, -INFINITY};
        auto score_pass = [&](auto plain_c) {
          constexpr bool kPlain = decltype(plain_c)::value;
#pragma unroll
          for (int mk = 0; mk < kK3; ++mk)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int hf = e % 2, j = js + 16 * mk + lane / 4 + 8 * (e / 2);
              float raw = acc[mk][e];
              if constexpr (kU8) {  // (as fwd_kernel's u8 scores: s = kscale acc + (kmin - 1024 kscale) sum(q))
                const float ks = par(0, mk, e);
                raw = fmaf(ks, raw, fmaf(-kU8Bias, ks, par(1, mk, e)) * row_qsum[0][hf]);
              }
              float sv;
              if constexpr (kPlain) {
                sv = row_valid[0][hf] ? raw * s_log2 : -INFINITY;
              } else {
                const bool vis = row_valid[0][hf] && j < w.kv_end && j <= row_qpos[0][hf] && j >= row_lo[0][hf] &&
                                 (row_qq[0][hf] == nullptr || j < past || row_qq[0][hf][j - past] != 0);
                sv = vis ? raw * s_log2 + row_slope2[0][hf] * static_cast<float>(j - row_qpos[0][hf]) : -INFINITY;
              }
              acc[mk][e] = sv;
              mx[hf] = fmaxf(mx[hf], sv);
            }
        };
        if (interior && P.alibi == nullptr)
          score_pass(std::true_type{});
        else
          score_pass(std::false_type{});
        // u8: each row's E (u8_value_exp) from the largest value scale of the keys it sees (as the 16-row
        // variant's kRowExp: in an interior slice every row sees every key, so one max over the slice; a
        // lane's keys do not depend on lane % 4); de joins alpha. NaN (unwritten) scales lose to any number
        // in fmaxf; masked keys are not counted.
        float de[2] = {0.0f, 0.0f};
        if constexpr (kU8) {
          float vsmax[2] = {0.0f, 0.0f};
#pragma unroll
          for (int mk = 0; mk < kK3; ++mk)
#pragma unroll
            for (int e = 0; e < 4; ++e)
              if (interior ? js + 16 * mk + lane / 4 + 8 * (e / 2) < w.kv_end : acc[mk][e] != -INFINITY)
                vsmax[e % 2] = fmaxf(vsmax[e % 2], par(2, mk, e));
          if (interior) vsmax[0] = vsmax[1] = fmaxf(vsmax[0], vsmax[1]);
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
#pragma unroll
            for (int x = 4; x <= 16; x *= 2) vsmax[hf] = fmaxf(vsmax[hf], __shfl_xor_sync(0xffffffffu, vsmax[hf], x));
            if (vsmax[hf] > 0.0f) {  // else (no key seen, or scales all 0: constant rows) E stays
              const float ex = u8_value_exp(vsmax[hf]);
              if (vexp(0, hf) > ex || vexp(0, hf) < ex - 8.0f) {
                de[hf] = ex - vexp(0, hf);
                vexp(0, hf) = ex;
              }
            }
          }
        }
        // A row's keys lie across the 8 lanes of its lane % 4. The reference moves only where a slice max
        // passes it by more than stale_log2 (see row_m), or E moves: one vote, and the butterfly only then.
        float alpha[2] = {1.0f, 1.0f};
        if (__any_sync(0xffffffffu, mx[0] > row_m[0][0] + stale || mx[1] > row_m[0][1] + stale || de[0] != 0.0f ||
                                        de[1] != 0.0f)) {
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) {
#pragma unroll
            for (int x = 4; x <= 16; x *= 2) mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], x));
            const float m_old = row_m[0][hf];
            const float m_new = mx[hf] > m_old + stale ? mx[hf] : m_old;
            alpha[hf] =
                (m_new != m_old || de[hf] != 0.0f) && m_old != -INFINITY ? fast_exp2(m_old - m_new + de[hf]) : 1.0f;
            row_m[0][hf] = m_new;
          }
        }
        const float ref[2] = {row_m[0][0] - vexp(0, 0), row_m[0][1] - vexp(0, 1)};
        float sum[2] = {0.0f, 0.0f}, cz[2] = {0.0f, 0.0f};
#pragma unroll
        for (int mk = 0; mk < kK3; ++mk) {
          float p[4];
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float pe = acc[mk][e] == -INFINITY ? 0.0f : fast_exp2(acc[mk][e] - ref[e % 2]);
            sum[e % 2] += pe;
            if constexpr (kU8) {
              // NOTE: masked keys may carry NaN parameters (unwritten slots): never multiply them
              const float vs = par(2, mk, e);
              p[e] = pe != 0.0f ? pe * vs : 0.0f;
              cz[e % 2] += pe != 0.0f ? pe * fmaf(kU8Centre, vs, par(3, mk, e)) : 0.0f;
            } else {
              p[e] = pe;
            }
          }
          // (key g: rows 2t, 2t + 1) pairs -> B fragments (keys 2t, 2t + 1 of row g), 8 keys per movmatrix
          pb[mk][0] = movmatrix_trans(pack2<T>(p[0], p[1]));
          pb[mk][1] = movmatrix_trans(pack2<T>(p[2], p[3]));
        }
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          row_l[0][hf] = row_l[0][hf] * alpha[hf] + sum[hf];
          row_c[0][hf] = row_c[0][hf] * alpha[hf] + cz[hf];
        }
        if (!__all_sync(0xffffffffu, alpha[0] == 1.0f && alpha[1] == 1.0f)) {
#pragma unroll
          for (int n = 0; n < kN3; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[0][n][e] *= alpha[e % 2];
        }
      } else {
        float acc[MT][kN1][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int n = 0; n < kN1; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][n][e] = 0.0f;
        qk_step<D, MT, kN1, KV, T, HR>(acc, hb, q_frag, lane);
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
            for (int e = 0; e < 2 * kHF; ++e) {
              const int hf = e / 2;
              const int j = js + kc + (e % 2);
              float raw = acc[mt][n][e];
              if constexpr (kU8)
                raw = fmaf(e % 2 ? kscale.y : kscale.x, raw, (e % 2 ? kbias.y : kbias.x) * row_qsum[mt][hf]);
              float sv;
              if constexpr (kPlain) {
                sv = row_valid[mt][hf] ? raw * s_log2 : -INFINITY;
              } else {
                const bool vis = row_valid[mt][hf] && j < w.kv_end && j <= row_qpos[mt][hf] && j >= row_lo[mt][hf] &&
                                 (row_qq[mt][hf] == nullptr || j < past || row_qq[mt][hf][j - past] != 0);
                sv = vis ? raw * s_log2 + row_slope2[mt][hf] * static_cast<float>(j - row_qpos[mt][hf])
                         : -INFINITY;
              }
              acc[mt][n][e] = sv;
              mx[hf] = fmaxf(mx[hf], sv);
            }
          }
        };
        const bool plain = interior && P.alibi == nullptr;
        // u8: E (u8_value_exp) from the largest value scale of the keys in flight; it moves only when that
        // scale leaves [2^0, 2^9) at the current E, and de joins the softmax's alpha.
        // kRowExp: each row's own E, from the keys it sees in the slice. In an interior slice every row sees
        // every key: one max over the slice (the quad's lanes hold every key, so after two shuffles it is
        // warp-uniform); elsewhere each row's max over its visible keys, so a row's E does not depend on
        // keys only other rows see (a verify row takes its decode's E steps: Options::deterministic).
        // Else one E per slice from its keys before kv_end (warp-uniform).
        float vs_slice = 0.0f, de_w = 0.0f;
        if constexpr (kU8) {
          if (!kRowExp || interior) {
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
            vs_slice = fmaxf(__low2float(vs2), __high2float(vs2));
            vs_slice = fmaxf(vs_slice, __shfl_xor_sync(0xffffffffu, vs_slice, 1));
            vs_slice = fmaxf(vs_slice, __shfl_xor_sync(0xffffffffu, vs_slice, 2));
          }
          if (!kRowExp && vs_slice > 0.0f) {  // else (scales all 0: constant rows, or zero-filled window rows) E stays
            const float e = u8_value_exp(vs_slice);
            if (vexp(0, 0) > e || vexp(0, 0) < e - 8.0f) {
              de_w = e - vexp(0, 0);
              vexp(0, 0) = e;
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
          float de[2] = {de_w, de_w};
          if constexpr (kRowExp) {
            float vsmax[2] = {vs_slice, vs_slice};
            if (!interior) {  // visible keys only (a masked key's score is -inf; its scale may be NaN)
              vsmax[0] = vsmax[1] = 0.0f;
#pragma unroll
              for (int n = 0; n < kN1; ++n) {
                const float2 vs = __half22float2(*reinterpret_cast<const __half2*>(&hb.par[2][n * 8 + 2 * (lane % 4)]));
#pragma unroll
                for (int e = 0; e < 2 * kHF; ++e)
                  if (acc[mt][n][e] != -INFINITY) vsmax[e / 2] = fmaxf(vsmax[e / 2], e % 2 ? vs.y : vs.x);
              }
#pragma unroll
              for (int hf = 0; hf < kHF; ++hf) {
                vsmax[hf] = fmaxf(vsmax[hf], __shfl_xor_sync(0xffffffffu, vsmax[hf], 1));
                vsmax[hf] = fmaxf(vsmax[hf], __shfl_xor_sync(0xffffffffu, vsmax[hf], 2));
              }
            }
#pragma unroll
            for (int hf = 0; hf < kHF; ++hf) {
              if (vsmax[hf] > 0.0f) {  // else (no key seen, or scales all 0: constant rows) E stays
                const float e = u8_value_exp(vsmax[hf]);
                if (vexp(mt, hf) > e || vexp(mt, hf) < e - 8.0f) {
                  de[hf] = e - vexp(mt, hf);
                  vexp(mt, hf) = e;
                }
              }
            }
          }
          float alpha[2] = {1.0f, 1.0f}, ref[2];
#pragma unroll
          for (int hf = 0; hf < kHF; ++hf) {
            mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 1));
            mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 2));
            // the reference moves only when the slice's max passes it by more than stale_log2 (see row_m)
            // (u8: or when E moves; the reference is m - E)
            const float m_old = row_m[mt][hf];
            const float m_new = mx[hf] > m_old + stale ? mx[hf] : m_old;
            alpha[hf] =
                (m_new != m_old || de[hf] != 0.0f) && m_old != -INFINITY ? fast_exp2(m_old - m_new + de[hf]) : 1.0f;
            row_m[mt][hf] = m_new;
            ref[hf] = m_new - vexp(mt, hf);
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
            for (int e = 0; e < 2 * kHF; ++e) {
              const int hf = e / 2;
              const float pe = acc[mt][n][e] == -INFINITY ? 0.0f : fast_exp2(acc[mt][n][e] - ref[hf]);
              sum[hf] += pe;
              if constexpr (kU8) {
                // NOTE: masked keys may carry NaN parameters (unwritten slots): never multiply them
                p[e] = pe != 0.0f ? pe * (e % 2 ? vscale.y : vscale.x) : 0.0f;  // (rounded to f16 by the pack below)
                cz[hf] += pe != 0.0f ? pe * (e % 2 ? vbias.y : vbias.x) : 0.0f;
              } else {
                p[e] = pe;
              }
            }
            // accumulator (n) -> A fragment of k-step n/2: registers {0,1} from even n, {2,3} from odd n
            pa[mt][n / 2][(n % 2) * 2 + 0] = pack2<T>(p[0], p[1]);
            if constexpr (!HR) pa[mt][n / 2][(n % 2) * 2 + 1] = pack2<T>(p[2], p[3]);
          }
#pragma unroll
          for (int hf = 0; hf < kHF; ++hf) {
            row_l[mt][hf] = row_l[mt][hf] * alpha[hf] + sum[hf];
            row_c[mt][hf] = row_c[mt][hf] * alpha[hf] + cz[hf];
          }
          if (!__all_sync(0xffffffffu, alpha[0] == 1.0f && alpha[1] == 1.0f)) {
#pragma unroll
            for (int n = 0; n < kN3; ++n) {
              o[mt][n][0] *= alpha[0];
              o[mt][n][1] *= alpha[0];
              if constexpr (!HR) {
                o[mt][n][2] *= alpha[1];
                o[mt][n][3] *= alpha[1];
              }
            }
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
      if constexpr (KT)
        kt_value_step<D, KV, kK3>(o[0], pb, hb, lane, k64);
      else
        value_step<D, MT, kK3, KV, T, HR>(o, pa, hb, lane, k64);
    }
    if constexpr (kFlush) {
      if (flush_tiles > 0 && (it + 1) % flush_tiles == 0 && it + 1 < n_tiles) {
        tl.span_begin();
        flush_partition((2 * it + 1) % kStages, w.slot + it / flush_tiles);
        tl.span_end();
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int hf = 0; hf < kHF; ++hf) {
            row_m[mt][hf] = -INFINITY;
            row_l[mt][hf] = row_c[mt][hf] = 0.0f;
            vexp(mt, hf) = 0.0f;
          }
#pragma unroll
          for (int n = 0; n < kN3; ++n) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
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
  // (KT: a row's keys lie across the lanes of one lane % 4, not in a quad)
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hf = 0; hf < kHF; ++hf) {
      row_m[mt][hf] -= vexp(mt, hf);
#pragma unroll
      for (int x = KT ? 4 : 1; x <= (KT ? 16 : 2); x *= 2) {
        row_l[mt][hf] += __shfl_xor_sync(0xffffffffu, row_l[mt][hf], x);
        if constexpr (kU8) row_c[mt][hf] += __shfl_xor_sync(0xffffffffu, row_c[mt][hf], x);
      }
    }

  // --- key groups -> one (m, l, O) per row, through shared memory -------------------------------
  // Each group leaves (m, l) per row and its output scaled to the rows' common max; then all threads
  // sum the groups' outputs and write whole rows (coalesced), normalised or as a partial for the merge.
  __syncthreads();  // every group is done with its ring and with Q
  if (KT ? lane < 4 : lane % 4 == 0) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int hf = 0; hf < kHF; ++hf) sm.ml[wkv][thread_row(mt, hf)] = make_float2(row_m[mt][hf], row_l[mt][hf]);
  }
  __syncthreads();
  if (tid < rows) row_statistics<Tr>(P, w, sm, tid, hk, G);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int hf = 0; hf < kHF; ++hf) {
      const int r = thread_row(mt, hf);
      if (r >= rows) continue;
      float M = -INFINITY;
#pragma unroll
      for (int g = 0; g < Tr::kWKV; ++g) M = fmaxf(M, sm.ml[g][r].x);
      const float f = row_m[mt][hf] == -INFINITY ? 0.0f : fast_exp2(row_m[mt][hf] - M) * (w.slot < 0 ? v_head : v_part);
      const float cz = kU8 ? row_c[mt][hf] : 0.0f;  // u8 value offset term (f16/bf16: none)
      auto out = [&](float x) { return plus_offset<kU8>(x, cz) * f; };
#pragma unroll
      for (int n = 0; n < kN3; ++n) {
        if constexpr (KT) {  // (kt_value_step: head dims c, c + 1 in elements hf, 2 + hf)
          const int c = 32 * (n / 2) + 16 * (n % 2) + 2 * (lane / 4);
          *reinterpret_cast<float2*>(&sm.u.r.red[wkv][r][c]) = make_float2(out(o[mt][n][hf]), out(o[mt][n][2 + hf]));
        } else {
          // (float4/float2 stores here measured level, run s10b)
          const int c = o_col<kBytes>(n, lane);
          sm.u.r.red[wkv][r][c] = out(o[mt][n][2 * hf]);
          sm.u.r.red[wkv][r][c + (kBytes ? 2 : 1)] = out(o[mt][n][2 * hf + 1]);
        }
      }
    }
  }
  __syncthreads();
  tl.mark(7);
  write_rows<Tr, D, PAD>(P, w, w.slot < 0 ? -1 : w.slot + (kFlush && w.part > 0 ? (n_tiles - 1) / flush_tiles : 0),
                         sm, rows, tid, hk, G, tok0);
  tl.mark(8);
  tl.print("fwd", 9);
}

}  // namespace cuda
}  // namespace pagedattn
