// The few-query kernel's K/V gather: half-tiles of a key group copied from the paged cache into its
// shared-memory ring by cp.async, clipped to the sliding window (io.cuh's window_lo).
#pragma once

#include <numeric>

#include "cuda/fwd/io.cuh"

namespace pagedattn {
namespace cuda {

// load_half (below) where a row's 16-byte chunks do not divide the group's threads (D = 80-112, 192): a
// thread's copies cycle through kPer columns (offsets computed once, outside the key loop), and the last
// copy may cover only some threads. Otherwise as load_half, whose general path it repeats: folding the two
// into shared helpers (or one function with per-thread column arrays) changed the SASS of every fwd_kernel
// at D = 64, 128, 256 (bench/sass_same.sh), the kernels every measurement so far was taken on.
template <int D, int KV, int RT, int MT, bool PAD = false, int WKV = 0>
__device__ __forceinline__ void load_half_cycled(typename SharedStorage<D, KV, RT, MT, WKV>::Half& hb, int kind,
                                                 const FwdParams& P, const int32_t* table, int hk, int js,
                                                 int kv_lo, int kv_end, int gtid) {
  using Tr = FwdTraits<D, KV, RT, MT, WKV>;
  using C = typename Tr::C;
  constexpr int kChunksPerRow = D * static_cast<int>(sizeof(C)) / 16;
  constexpr int kElemsPerChunk = 16 / static_cast<int>(sizeof(C));
  constexpr int kChunks = Tr::kKPW * kChunksPerRow;
  constexpr int kIters = (kChunks + Tr::kGroupThreads - 1) / Tr::kGroupThreads;
  // copy i of a thread: chunk gtid + i * kGroupThreads of the slice (row-major); its column repeats every
  // kPer copies, kRowStep rows further
  constexpr int kGcd = std::gcd(Tr::kGroupThreads, kChunksPerRow);
  constexpr int kPer = kChunksPerRow / kGcd;
  constexpr int kRowStep = Tr::kGroupThreads / kGcd;
  constexpr bool kRagged = kChunks % Tr::kGroupThreads != 0;  // the last copy: only some threads
  constexpr int kLog2KPW = Tr::kKPW == 16 ? 4 : Tr::kKPW == 32 ? 5 : 6;
  const C* src = static_cast<const C*>(kind == 0 ? P.k_cache : P.v_cache);
  const int ld = PAD ? (kind == 0 ? P.Dk : P.Dv) : D;  // row stride of the cache (elements)
  int r0[kPer], c[kPer];
  bool col_ok[kPer];  // a padding column: zero-filled
  uint32_t dst[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int idx = gtid + j * Tr::kGroupThreads;
    r0[j] = idx / kChunksPerRow;
    c[j] = (idx % kChunksPerRow) * kElemsPerChunk;
    col_ok[j] = !PAD || c[j] < ld;
    dst[j] = smem_u32(&hb.kv[r0[j]][c[j]]);
  }
  constexpr uint32_t kDstStep = kRowStep * Tr::kLdKV * sizeof(C);
  auto in_slice = [&](int i) { return !kRagged || i < kIters - 1 || gtid + i * Tr::kGroupThreads < kChunks; };
  // A slice lies in one cache block when block_size >= kKPW (always with 16-key slices: the backend
  // checks block_size >= 16), else it spans kKPW / block_size blocks (2 or 4).
  constexpr int kMaxBlocks = Tr::kKPW / 16;
  const int lbs = P.block_size_log2;
  if ((kMaxBlocks == 1 || lbs >= kLog2KPW) && js + Tr::kKPW <= kv_end && js >= kv_lo) {
    // Every slice but a partition's last: all rows valid and in one cache block, so one table lookup,
    // one base address, and constant offsets that fold into the copies (the general path below pays
    // a block select and 64-bit offset and zero-fill arithmetic per copy).
    const int64_t row0 = cache_row(table, js, hk, P.Hk, lbs);
    const C* s[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) s[j] = src + (row0 + r0[j]) * ld + c[j];
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      const int j = i % kPer, m = i / kPer;
      if (!in_slice(i)) continue;
      if constexpr (PAD)  // a padding column's chunks zero-filled here (on the general path, every slice would pay)
        cp_async_16_u32(dst[j] + m * kDstStep, col_ok[j] ? s[j] + m * kRowStep * ld : src, col_ok[j] ? 16 : 0);
      else
        cp_async_16_full(dst[j] + m * kDstStep, s[j] + m * kRowStep * ld);
    }
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
  // General: as in load_half.
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
    int r, cc;
    uint32_t d;
    if constexpr (kMaxBlocks > 1) {  // unrolled: the per-thread offsets
      const int j = i % kPer, m = i / kPer;
      r = r0[j] + m * kRowStep, cc = c[j], d = dst[j] + m * kDstStep;
    } else {  // the rolled loop below: i is not a constant, so no array indexed by it (local memory)
      const int idx = gtid + i * Tr::kGroupThreads;
      r = idx / kChunksPerRow, cc = (idx % kChunksPerRow) * kElemsPerChunk, d = smem_u32(&hb.kv[r][cc]);
    }
    const bool ok = js + r < kv_end && js + r >= kv_lo && (!PAD || cc < ld);
    if (in_slice(i)) cp_async_16_u32(d, ok ? src + row_of(r) * ld + cc : src, ok ? 16 : 0);
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

// Issues the async copies of one half-tile for a key group: K (kind 0, with the u8 parameters) or V
// (kind 1) of keys [js, js + kKPW) clipped to [kv_lo, kv_end); rows outside are zero-filled and their
// blocks never looked up (kv_lo: the first key in the sliding window of the chunk's first token; the
// slots before it may hold NaN, and their table entries any value, -1 included). `gtid` is the
// thread's index in its group. PAD: the call's key (value) head size P.Dk (P.Dv) is below D: rows are
// that many elements apart and the columns past it are zero-filled (never read). The block-table lookups go out before the copies. (Reading the slice's
// block id one tile ahead instead measured 0.99-1.04x, run s6c: the lookup is not what the loop waits on;
// a called instead of inlined copy issue, half the kernel's code, 1.02-1.13x slower, run s6a.)
template <int D, int KV, int RT, int MT, bool PAD = false, int WKV = 0>
__device__ __forceinline__ void load_half(typename SharedStorage<D, KV, RT, MT, WKV>::Half& hb, int kind, const FwdParams& P,
                                          const int32_t* table, int hk, int js, int kv_lo, int kv_end, int gtid) {
  using Tr = FwdTraits<D, KV, RT, MT, WKV>;
  using C = typename Tr::C;
  constexpr int kChunksPerRow = D * static_cast<int>(sizeof(C)) / 16;
  if constexpr (Tr::kGroupThreads % kChunksPerRow != 0) {
    load_half_cycled<D, KV, RT, MT, PAD, WKV>(hb, kind, P, table, hk, js, kv_lo, kv_end, gtid);
    return;
  } else {
    constexpr int kElemsPerChunk = 16 / static_cast<int>(sizeof(C));
    constexpr int kIters = Tr::kKPW * kChunksPerRow / Tr::kGroupThreads;
    static_assert(kIters * Tr::kGroupThreads == Tr::kKPW * kChunksPerRow, "slice copy split");
    static_assert(Tr::kGroupThreads % kChunksPerRow == 0, "a thread keeps its column");
    constexpr int kRowStep = Tr::kGroupThreads / kChunksPerRow;
    constexpr int kLog2KPW = Tr::kKPW == 16 ? 4 : Tr::kKPW == 32 ? 5 : 6;
    const C* src = static_cast<const C*>(kind == 0 ? P.k_cache : P.v_cache);
    const int r0 = gtid / kChunksPerRow, c = (gtid % kChunksPerRow) * kElemsPerChunk;
    const int ld = PAD ? (kind == 0 ? P.Dk : P.Dv) : D;  // row stride of the cache (elements)
    const bool col_ok = !PAD || c < ld;                  // a padding column: zero-filled
    const uint32_t dst = smem_u32(&hb.kv[r0][c]);
    constexpr uint32_t kDstStep = kRowStep * Tr::kLdKV * sizeof(C);
    // A slice lies in one cache block when block_size >= kKPW (always with 16-key slices: the backend
    // checks block_size >= 16), else it spans kKPW / block_size blocks (2 or 4).
    constexpr int kMaxBlocks = Tr::kKPW / 16;
    const int lbs = P.block_size_log2;
    if ((kMaxBlocks == 1 || lbs >= kLog2KPW) && js + Tr::kKPW <= kv_end && js >= kv_lo && (PAD || col_ok)) {
      // Every slice but a partition's last: all rows valid and in one cache block, so one table lookup,
      // one base address, and constant offsets that fold into the copies (the general path below pays
      // a block select and 64-bit offset and zero-fill arithmetic per copy).
      const int64_t row0 = cache_row(table, js, hk, P.Hk, lbs);
      const C* s = src + (row0 + r0) * ld + c;
      if constexpr (PAD) {  // a padding column's chunks zero-filled here (on the general path, every slice would pay)
#pragma unroll
        for (int i = 0; i < kIters; ++i) cp_async_16_u32(dst + i * kDstStep, col_ok ? s + i * kRowStep * ld : src, col_ok ? 16 : 0);
      } else {
#pragma unroll
        for (int i = 0; i < kIters; ++i) cp_async_16_full(dst + i * kDstStep, s + i * kRowStep * ld);
      }
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
      const bool ok = js + r < kv_end && js + r >= kv_lo && col_ok;
      cp_async_16_u32(dst + i * kDstStep, ok ? src + row_of(r) * ld + c : src, ok ? 16 : 0);
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
}

}  // namespace cuda
}  // namespace pagedattn
