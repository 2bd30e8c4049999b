// Internal: the cpu backend's inner loops (rows x keys of one tile), compiled for several x86-64 levels
// (x86-64-v4 = AVX-512, with intrinsics for the conversion, S and P V; v3 = AVX2 + FMA + F16C; baseline)
// and picked once per process by the CPU's features, or capped by PAGEDATTN_CPU_ISA=baseline|avx2|avx512|amx;
// one binary runs on any x86-64 (other architectures: the baseline, vectorised for their own SIMD).
#pragma once

#include <cstddef>
#include <cstdint>

namespace pagedattn {
namespace cpu {

// KV element types of a cache row, converted to f32 by load_row.
enum class RowType : int { f16 = 0, bf16 = 1, u8 = 2, fp8 = 3 };

// dst[0..D) = the row as f32. u8: min + code * scale; fp8: e4m3(code) * scale (one f32 rounding, as the
// oracle's).
void load_row(float* dst, const void* src, RowType t, int D, float scale, float min);

// The next key tile's cache lines, prefetched a few at a time from inside the S and P V loops (tick), so
// that the memory stream runs under the arithmetic, and into L2 (prefetcht2): a burst of prefetches stalls
// the core once its miss buffers are taken, and the work after it then runs with the memory idle; into
// L1, the lines compete with the tile kernels' own f32 rows, which overflow it (bench/NOTES.md, "The cpu
// backend's prefetch inside the arithmetic").
struct Prefetch {
  static constexpr int kRows = 64;
  const char* row[kRows];
  int bytes[kRows];
  int rows = 0, cur = 0, off = 0;
  int per = 1;  // lines per tick

  void clear() { rows = cur = off = 0; }
  void add(const void* p, int nbytes) {  // a row to prefetch, in order; past kRows: at once
    if (rows < kRows) {
      row[rows] = static_cast<const char*>(p);
      bytes[rows++] = nbytes;
    } else {
      for (int b = 0; b < nbytes; b += 64) __builtin_prefetch(static_cast<const char*>(p) + b, 0, 1);
    }
  }
  int lines() const {
    int n = 0;
    for (int i = 0; i < rows; ++i) n += (bytes[i] + 63) / 64;
    return n;
  }
  void issue(int n) {
    for (; n > 0 && cur < rows; --n) {
      __builtin_prefetch(row[cur] + off, 0, 1);  // (locality 1: prefetcht2)
      off += 64;
      if (off >= bytes[cur]) off = 0, ++cur;
    }
  }
  void tick() { issue(per); }
  void drain() { issue(1 << 30); }
};

// How many ticks scores() and accumulate() (direct: scores_direct() and accumulate_direct()) give one
// tile of `rows` x `keys` at this level (the S and P V loops' block counts): a Prefetch's `per` is its
// lines over this.
int tile_ticks(int rows, int keys, int D, int Dv, bool direct = false);

// s[r * ld_s + k] = dot(q[r * D .. +D), kt[k * D .. +D)) for r < rows, k < keys; pf (if any) ticks.
void scores(float* s, int ld_s, const float* q, int rows, const float* kt, int keys, int D, Prefetch* pf = nullptr);

// o[r * D + d] += sum_k p[r * ld_p + k] * vt[k * D + d] for r < rows; pf (if any) ticks.
void accumulate(float* o, const float* p, int ld_p, int rows, const float* vt, int keys, int D,
                Prefetch* pf = nullptr);

// p[i] = 2^(x[i] - m) for i < n (x = -inf gives 0); returns the sum (in kSumLanes lanes). Relative
// error ~2e-7.
float exp2_sum(float* p, const float* x, int n, float m);

// Sums over a row accumulate element i into lane i % (8 or kSumLanes), and the lanes combine in a fixed
// tree (lane_sum8; lane_sum16 adds l + 8 into l first), so their bits do not depend on whether or how wide
// the compiler vectorizes the loop (an `omp simd` reduction sums in as many lanes as the level has, and in
// one chain where the loop stays scalar: without OpenMP, or under a sanitizer). 16 lanes: one AVX-512
// register, two AVX2 ones (cpu::scores' dot products take 8).
inline float lane_sum8(const float* a) { return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7])); }
constexpr int kSumLanes = 16;
inline float lane_sum16(const float* a) {
  float b[8];
  for (int l = 0; l < 8; ++l) b[l] = a[l] + a[l + 8];
  return lane_sum8(b);
}

// max(x[0..n)), -inf for n = 0; NaN elements are passed over (std::max(m, x) in order, or 16 lanes)
float row_max(const float* x, int n);

// o[0..D) *= a
void scale_row(float* o, float a, int D);

// S and P V straight from the cache rows, without the f32 tiles, at the AVX-512 level (has_direct): 4, 8 or
// 12 query rows of an f16, bf16 or fp8 cache, 4 of a u8 cache. Each key's elements are converted in
// registers, minus the tiles' stores and loads; 8-row blocks run 8 x 2 S blocks and 8 x 32 P V blocks
// (each element converted once per 8 rows), a 4-row block the tiles' 4 x 4 and 4 x 64. Keys in whole
// blocks get the tiles' per-(row, key) instructions, so the same bits on the same values (the last keys
// of a tile whose key count is not a multiple of 4 are summed in another order). fp8 rows give their
// e4m3 values / 2^8 (exact in f16), unscaled: the caller folds 2^8 x the key scale into q and 2^8 x the
// value scale into o. u8 rows give code - 128: the caller folds each key's scale and minimum (the
// backend's `affine` form). krow and vrow give each key's row. The blocked kernels' ticks.
bool has_direct(RowType t, int rows, int D, int Dv);
void scores_direct(float* s, int ld_s, const float* q, int rows, const void* const* krow, RowType t, int keys, int D,
                   Prefetch* pf);
void accumulate_direct(float* o, const float* p, int ld_p, int rows, const void* const* vrow, RowType t, int keys,
                       int Dv, Prefetch* pf);

// S = Q K^T on bf16 query rows (q: rows x D bf16 bits, unscaled) and bf16 cache rows by vdpbf16ps, where
// the CPU has AVX512-BF16 and D is a multiple of 32 (has_bf16dot): half the instructions of the f32 tiles'
// FMAs and no conversion of K. Exact products, f32 sums in pairs (other bits than scores(); run cpu-bf16dot).
bool has_bf16dot(int D);
void scores_bf16dot(float* s, int ld_s, const uint16_t* q, int rows, const void* const* krow, int keys, int D,
                    Prefetch* pf);

// Chunks of many rows on AMX-BF16 tiles (tile.cpp, "Chunks of many rows on AMX-BF16"): where has_amx
// (the CPU has AMX-BF16 and AVX512-BF16, the kernel grants the tile state, PAGEDATTN_CPU_ISA is unset or
// "amx", D and Dv multiples of 32). One item's operands live in an Amx, laid out in the caller's scratch
// (amx_bytes, for up to max_rows rows) by amx_setup, which packs the query: qraw holds the query's own
// values (rows x D; exact in qparts bf16 parts: 2 for f16, 1 for bf16; f32 queries in 2 parts keep 16
// significant bits), unscaled, so the caller scales S. Between amx_begin and amx_end (this thread's tile
// state) each key tile of at most kAmxTileKeys keys runs amx_scores (s = scale * (q . k), rows x keys, from the
// cache rows: RowType's values, fp8 as values / 2^8 and u8 as codes - 128, as the direct path) and
// amx_accumulate (o[rows_pad][Dv] += p v, o's rows past `rows` zero). Other bits than the f32 tiles, and
// an f16 +-inf (query, key or value) gives NaN where the f32 tiles give inf (its low part is inf - inf).
constexpr int kAmxTileKeys = 32;
struct Amx {
  RowType t = RowType::f16;
  int rows = 0, rows_pad = 0, D = 0, Dv = 0, qparts = 0, parts = 0;
  uint16_t* q = nullptr;  // Q^T as B tiles
  uint16_t* k = nullptr;  // K as A rows, per part
  uint16_t* v = nullptr;  // V as B tiles, per part
  uint16_t* p = nullptr;  // P as A rows, two parts
  float* st = nullptr;    // S^T as stored from the C tiles
};
bool has_amx(RowType t, int D, int Dv);
size_t amx_bytes(int max_rows, int D, int Dv);
Amx amx_setup(void* scratch, RowType t, int rows, int D, int Dv, const float* qraw, int qparts);
void amx_begin();
void amx_end();
void amx_scores(Amx& a, float* s, int ld_s, const void* const* krow, int keys, float scale, Prefetch* pf);
void amx_accumulate(Amx& a, float* o, const float* p, int ld_p, const void* const* vrow, int keys, Prefetch* pf);
int amx_ticks(int rows, int keys, int D, int Dv);  // the ticks amx_scores and amx_accumulate give a key tile

// The level the functions above run at: "avx512", "avx2" or "baseline".
const char* isa_name();

}  // namespace cpu
}  // namespace pagedattn
