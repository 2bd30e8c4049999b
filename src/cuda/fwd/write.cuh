// The op's KV write-in: one warp quantises (u8, fp8) or converts one new row into the cache; fused into the
// attention kernels for single-chunk sequences (fused_write_in), else write_kernel before them.
#pragma once

#include "cuda/fwd/io.cuh"

namespace pagedattn {
namespace cuda {

// One warp writes (and for u8 and fp8 quantises) one new key or value row of one kv head into the
// cache. fp8: `head_scale` is the kv head's scale; the code is e4m3(x / scale) by numeric.h's rule (the
// host oracle's own function: the same bits on every backend). The row has `ld` (P.Dk) elements, a
// multiple of 16, at most D: lanes past it hold none.
template <int D, int KV>
__device__ __forceinline__ void write_row(const void* src, int64_t src_off, void* cache, uint16_t* scale,
                                          uint16_t* min, int64_t row, int io, int lane, int ld,
                                          float head_scale = 1.0f) {
  constexpr int kPer = D <= 64 ? 2 : D <= 128 ? 4 : 8;  // elements per lane (D = 80-112, 192: some lanes idle)
  const bool active = lane * kPer < ld;  // (ld is a multiple of kPer)
  float x[kPer];
  if (active) load_io_n<kPer>(src, src_off + lane * kPer, io, x);
  if constexpr (KV == kKvU8) {
    float mn = active ? x[0] : INFINITY, mx = active ? x[0] : -INFINITY;
#pragma unroll
    for (int i = 1; i < kPer; ++i) {
      mn = active ? fminf(mn, x[i]) : mn;
      mx = active ? fmaxf(mx, x[i]) : mx;
    }
    mn = warp_min(mn);
    mx = warp_max(mx);
    const num::U8Params qp = num::u8_params(mn, mx);
    uint8_t* dst = static_cast<uint8_t*>(cache) + row * ld + lane * kPer;
    if (active)
#pragma unroll
      for (int i = 0; i < kPer; ++i) dst[i] = num::u8_quantize(x[i], qp);
    if (lane == 0) {
      scale[row] = qp.scale_bits;
      min[row] = qp.min_bits;
    }
  } else if constexpr (KV == kKvF8) {
    uint8_t* dst = static_cast<uint8_t*>(cache) + row * ld + lane * kPer;
    if (active)
#pragma unroll
      for (int i = 0; i < kPer; ++i) dst[i] = num::f32_to_e4m3_bits(__fdiv_rn(x[i], head_scale));
  } else {
    using C = typename KvTraits<KV>::cache_t;
    C* dst = static_cast<C*>(cache) + row * ld + lane * kPer;
    if (active)
#pragma unroll
      for (int i = 0; i < kPer; ++i) dst[i] = from_float<C>(x[i]);
  }
}

// The op's KV write-in fused into the attention launch (sequences that are one chunk): the CTA's
// warps write (and quantise) the new tokens inside its key range for its kv head, then fence so that
// the copies that follow (cp.async, through L2) see them. CTA-uniform; a CTA barrier when it wrote.
// (Sequences cut into several chunks have their rows written by write_kernel before the launch; with
// FwdParams::write_all, every sequence's are.) PAD: the call's head sizes P.Dk / P.Dv are below D; else
// both are D, taken at compile time here, in stage_q and in write_rows (write_kernel keeps run-time
// sizes). (Run-time sizes there came with 73d5a48, the only kernel change between runs d8b and d9, six
// minutes apart on one H200, where the seed's f16 8k T = 1 / 3 took 3.4% / 5.9% longer; with compile-time
// sizes fwd_kernel<256, f16, 1> has f830000's instruction count again, 3240.)
template <int D, int KV, bool PAD = false>
__device__ __forceinline__ void fused_write_in(const FwdParams& P, const planner::WorkItem& w, const int32_t* table,
                                               int hk, int warp, int warps, int lane) {
  if (P.k_new == nullptr || w.nt != w.t_seq || P.write_all) return;
  const int wb = max(w.kv_begin, w.past), we = min(w.kv_end, w.past + w.t_seq);
  if (wb >= we) return;
  const float kscale = KV == kKvF8 ? P.k_head_scale[hk * P.k_head_scale_stride] : 1.0f;
  const float vscale = KV == kKvF8 ? P.v_head_scale[hk * P.v_head_scale_stride] : 1.0f;
  const int dk = PAD ? P.Dk : D, dv = PAD ? P.Dv : D;
  for (int pos = wb + warp; pos < we; pos += warps) {
    const int64_t tok = w.tok0 + pos - w.past;
    const int64_t row = cache_row(table, pos, hk, P.Hk, P.block_size_log2);
    write_row<D, KV>(P.k_new, (tok * P.Hk + hk) * dk, P.k_cache, P.k_scale, P.k_min, row, P.io_dtype, lane, dk, kscale);
    write_row<D, KV>(P.v_new, (tok * P.Hk + hk) * dv, P.v_cache, P.v_scale, P.v_min, row, P.io_dtype, lane, dv, vscale);
  }
  __threadfence();  // NOTE: the rows just written are read back through cp.async (L2)
  __syncthreads();
}

// Writes (and for u8 quantises) the new key and value rows of the sequences cut into several chunks
// (prefill), one warp per (token, kv head): fused, every chunk's CTA would rewrite all earlier new rows
// of its sequence (O(T^2) writes). Single-chunk sequences keep the fused write-in, except under
// FwdParams::write_all (deterministic mode cut a short sequence: all are written here).
// (Run-time head sizes: backend.cu launches it through the plain variant's info, padded or not.)
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
  if (!P.write_all && P.subseq_begins[lo + 1] - P.subseq_begins[lo] <= P.chunk_rows / P.G) return;
  const int pos = P.past_lens[lo] + token - P.subseq_begins[lo];
  const int64_t row = cache_row(P.block_indices + P.block_indices_begins[lo], pos, hk, P.Hk, P.block_size_log2);
  const int64_t tok_hk = static_cast<int64_t>(token) * P.Hk + hk;
  const float kscale = KV == kKvF8 ? P.k_head_scale[hk * P.k_head_scale_stride] : 1.0f;
  const float vscale = KV == kKvF8 ? P.v_head_scale[hk * P.v_head_scale_stride] : 1.0f;
  write_row<D, KV>(P.k_new, tok_hk * P.Dk, P.k_cache, P.k_scale, P.k_min, row, P.io_dtype, lane, P.Dk, kscale);
  write_row<D, KV>(P.v_new, tok_hk * P.Dv, P.v_cache, P.v_scale, P.v_min, row, P.io_dtype, lane, P.Dv, vscale);
}

}  // namespace cuda
}  // namespace pagedattn
