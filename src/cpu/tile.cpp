// The cpu backend's inner loops (tile.h). Plain loops written so that the compiler vectorises them (dot
// products in explicit lanes, the sums over a tile's keys under `omp simd`), inlined into one wrapper per
// x86-64 level (v4, v3, baseline), plus
// AVX-512 intrinsics for the conversion, S and P V at v4; one dispatch table picks a level per process.
#include "cpu/tile.h"

#include "common/numeric.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PA_CPU_AVX512 1
// The AVX-512 kernels' target: F plus BW and VL (16-bit lanes, 256-bit forms), which every CPU of the
// v4 level has (has_v4).
#define PA_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
// ... plus BF16 (vdpbf16ps) for the bf16 scores (has_bf16dot checks the CPU)
#define PA_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#if defined(__linux__) && (defined(__clang__) || __GNUC__ >= 11)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define PA_CPU_AMX 1
// ... plus AMX-TILE and AMX-BF16 for the many-row tiles (has_amx checks the CPU and asks the kernel)
#define PA_AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")))
#endif
#endif

// The loop bodies are inlined into each level's wrappers (PA_CPU_LEVEL), which set the target ISA.
#if defined(__GNUC__)
#define PA_CPU_BODY __attribute__((always_inline)) static inline
#else
#define PA_CPU_BODY static inline
#endif

// The f16 element type the compiler converts natively: _Float16 on x86-64 (vcvtph2ps where the clone has
// F16C), ARM's __fp16 on aarch64 (fcvtl, NEON); elsewhere the bit-level conversion of common/numeric.h.
// (GCC 12 has no _Float16 in C++ on aarch64: the aarch64 cross build in CI found it.)
#if defined(__aarch64__)
#define PA_CPU_HALF __fp16
#elif defined(__x86_64__) && defined(__FLT16_MAX__)
#define PA_CPU_HALF _Float16
#endif

namespace pagedattn {
namespace cpu {

// The 256 e4m3 values (NaN codes NaN), for the baseline level's fp8 rows (and any D not a multiple of 8):
// the branches of num::e4m3_bits_to_f32 kept that loop scalar, 12x u8's time on an AVX2 CPU (8k T = 1:
// 79.7 vs 6.5 ms per 2 layers, bench/NOTES.md); the AVX2 and AVX-512 levels convert by shifts into f16
// bits instead.
struct E4m3Table {
  float v[256];
  E4m3Table() {
    for (int c = 0; c < 256; ++c) v[c] = num::e4m3_bits_to_f32(static_cast<uint8_t>(c));
  }
};
static const E4m3Table kE4m3;

PA_CPU_BODY void load_row_body(float* dst, const void* src, RowType t, int D, float scale, float min) {
  switch (t) {
    case RowType::f16: {
#if defined(PA_CPU_HALF)
      const PA_CPU_HALF* s = static_cast<const PA_CPU_HALF*>(src);
      for (int d = 0; d < D; ++d) dst[d] = static_cast<float>(s[d]);
#else
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int d = 0; d < D; ++d) dst[d] = num::f16_bits_to_f32(s[d]);
#endif
      break;
    }
    case RowType::bf16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int d = 0; d < D; ++d) {
        const uint32_t bits = static_cast<uint32_t>(s[d]) << 16;
        std::memcpy(&dst[d], &bits, 4);
      }
      break;
    }
    case RowType::u8: {
      const uint8_t* s = static_cast<const uint8_t*>(src);
      for (int d = 0; d < D; ++d) dst[d] = min + static_cast<float>(s[d]) * scale;
      break;
    }
    case RowType::fp8: {  // (a table lookup: e4m3_bits_to_f32's branches kept this loop scalar)
      const uint8_t* s = static_cast<const uint8_t*>(src);
      for (int d = 0; d < D; ++d) dst[d] = kE4m3.v[s[d]] * scale;
      break;
    }
  }
}

// q . k in kLanes interleaved partial sums, combined in a fixed tree: the bits do not depend on whether
// or how wide the compiler vectorizes. (An `omp simd` reduction summed in as many lanes as the ISA level
// has, and in one chain where OpenMP was absent or a sanitizer kept the loop scalar: the scores' error
// grew 8x there, enough to fail the f32-query tolerance of fp8 cases; tests/sanitize.sh.)
constexpr int kLanes = 8;  // (tile.h's lane_sum8 combines them)

// Four keys per pass over a query row: each q element loaded once for four dot products. (A 4-row x
// 4-key register block measured 1.8-2.6x slower here: GCC spilled its accumulators.)
PA_CPU_BODY void scores_body(float* s, int ld_s, const float* q, int rows, const float* kt, int keys, int D,
                             Prefetch* pf) {
  const int Dl = D - D % kLanes;
  int k = 0;
  for (; k + 4 <= keys; k += 4) {
    const float *k0 = kt + static_cast<int64_t>(k) * D, *k1 = k0 + D, *k2 = k1 + D, *k3 = k2 + D;
    for (int r = 0; r < rows; ++r) {
      if (pf) pf->tick();
      const float* qr = q + static_cast<int64_t>(r) * D;
      float a0[kLanes] = {}, a1[kLanes] = {}, a2[kLanes] = {}, a3[kLanes] = {};
      for (int d = 0; d < Dl; d += kLanes) {
#pragma omp simd
        for (int l = 0; l < kLanes; ++l) {
          a0[l] += qr[d + l] * k0[d + l];
          a1[l] += qr[d + l] * k1[d + l];
          a2[l] += qr[d + l] * k2[d + l];
          a3[l] += qr[d + l] * k3[d + l];
        }
      }
      for (int d = Dl; d < D; ++d) {
        a0[d - Dl] += qr[d] * k0[d];
        a1[d - Dl] += qr[d] * k1[d];
        a2[d - Dl] += qr[d] * k2[d];
        a3[d - Dl] += qr[d] * k3[d];
      }
      float* sr = s + static_cast<int64_t>(r) * ld_s + k;
      sr[0] = lane_sum8(a0);
      sr[1] = lane_sum8(a1);
      sr[2] = lane_sum8(a2);
      sr[3] = lane_sum8(a3);
    }
  }
  for (; k < keys; ++k) {
    const float* kr = kt + static_cast<int64_t>(k) * D;
    for (int r = 0; r < rows; ++r) {
      if (pf) pf->tick();
      const float* qr = q + static_cast<int64_t>(r) * D;
      float a[kLanes] = {};
      for (int d = 0; d < Dl; d += kLanes) {
#pragma omp simd
        for (int l = 0; l < kLanes; ++l) a[l] += qr[d + l] * kr[d + l];
      }
      for (int d = Dl; d < D; ++d) a[d - Dl] += qr[d] * kr[d];
      s[static_cast<int64_t>(r) * ld_s + k] = lane_sum8(a);
    }
  }
}

PA_CPU_BODY void accumulate_body(float* o, const float* p, int ld_p, int rows, const float* vt, int keys, int D,
                                 Prefetch* pf) {
  for (int r = 0; r < rows; ++r) {
    float* orow = o + static_cast<int64_t>(r) * D;
    const float* pr = p + static_cast<int64_t>(r) * ld_p;
    int k = 0;
    for (; k + 2 <= keys; k += 2) {  // two keys per pass over the output row
      if (pf) pf->tick();
      const float p0 = pr[k], p1 = pr[k + 1];
      if (p0 == 0.0f && p1 == 0.0f) continue;  // masked keys
      const float *v0 = vt + static_cast<int64_t>(k) * D, *v1 = v0 + D;
#pragma omp simd
      for (int d = 0; d < D; ++d) orow[d] += p0 * v0[d] + p1 * v1[d];
    }
    for (; k < keys; ++k) {
      if (pf) pf->tick();
      const float pk = pr[k];
      if (pk == 0.0f) continue;
      const float* v = vt + static_cast<int64_t>(k) * D;
#pragma omp simd
      for (int d = 0; d < D; ++d) orow[d] += pk * v[d];
    }
  }
}

// 2^(x - m), 0 below -125 (-inf: masked keys). 2^t = 2^k * 2^f, k = rint(t), f in [-1/2, 1/2]: the Taylor
// polynomial of degree 6 (its remainder (ln2 / 2)^7 / 7! < 1.3e-7 relative).
PA_CPU_BODY float exp2_term(float x, float m) {
  float t = x - m;
  const bool tiny = !(t >= -125.0f);
  t = tiny ? 0.0f : t;
  const float k = std::nearbyint(t);
  const float f = t - k;
  float y = 1.5403530e-4f;
  y = y * f + 1.3333558e-3f;
  y = y * f + 9.6181291e-3f;
  y = y * f + 5.5504109e-2f;
  y = y * f + 2.4022651e-1f;
  y = y * f + 6.9314718e-1f;
  y = y * f + 1.0f;
  int32_t bits;
  std::memcpy(&bits, &y, 4);
  bits += static_cast<int32_t>(k) * (1 << 23);  // not k << 23: shifting a negative k is undefined
  // (0 by an integer mask: a float select here kept GCC 12 from vectorizing the loop at the AVX2 level,
  // "control flow in loop"; AVX-512's masked moves did not need it)
  bits &= -static_cast<int32_t>(!tiny);
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

// p = 2^(x - m) and their sum, in kSumLanes lanes (tile.h)
PA_CPU_BODY float exp2_sum_body(float* p, const float* x, int n, float m) {
  float lanes[kSumLanes] = {};
  const int nl = n - n % kSumLanes;
  for (int i0 = 0; i0 < nl; i0 += kSumLanes) {
#pragma omp simd
    for (int l = 0; l < kSumLanes; ++l) {
      const float v = exp2_term(x[i0 + l], m);
      p[i0 + l] = v;
      lanes[l] += v;
    }
  }
  for (int i = nl; i < n; ++i) {
    const float v = exp2_term(x[i], m);
    p[i] = v;
    lanes[i - nl] += v;
  }
  return lane_sum16(lanes);
}

PA_CPU_BODY void scale_row_body(float* o, float a, int D) {
#pragma omp simd
  for (int d = 0; d < D; ++d) o[d] *= a;
}

// One wrapper per function and level; `ATTR` sets the level's target ISA (empty: the build's baseline).
#define PA_CPU_LEVEL(LEVEL, ATTR)                                                                                   \
  ATTR static void load_row_##LEVEL(float* dst, const void* src, RowType t, int D, float scale, float min) {       \
    load_row_body(dst, src, t, D, scale, min);                                                                   \
  }                                                                                                              \
  ATTR static void scores_##LEVEL(float* s, int ld_s, const float* q, int rows, const float* kt, int keys, int D,  \
                                  Prefetch* pf) {                                                                \
    scores_body(s, ld_s, q, rows, kt, keys, D, pf);                                                              \
  }                                                                                                              \
  ATTR static void accumulate_##LEVEL(float* o, const float* p, int ld_p, int rows, const float* vt, int keys,    \
                                      int D, Prefetch* pf) {                                                     \
    accumulate_body(o, p, ld_p, rows, vt, keys, D, pf);                                                          \
  }                                                                                                              \
  ATTR static float exp2_sum_##LEVEL(float* p, const float* x, int n, float m) { return exp2_sum_body(p, x, n, m); } \
  ATTR static void scale_row_##LEVEL(float* o, float a, int D) { scale_row_body(o, a, D); }
PA_CPU_LEVEL(base, )
#if defined(PA_CPU_AVX512)
PA_CPU_LEVEL(v3, __attribute__((target("arch=x86-64-v3"))))
PA_CPU_LEVEL(v4, __attribute__((target("arch=x86-64-v4"))))
#endif

#if defined(PA_CPU_AVX512)
#pragma GCC diagnostic push
#if !defined(__clang__)  // (a GCC warning group)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's _mm512_reduce_add_ps (false positive)
#endif
// AVX-512 register blocks (where the CPU has it; D a multiple of 16, rows and keys in fours, tails
// through the generic loops): 4 rows x 4 keys of S per pass over D, 16 accumulators, 8 loads per 16
// FMAs; O += P V on 4 rows x 64 columns, 16 accumulators across the tile's keys, 8 loads per 16 FMAs.
// The K and V elements come from the f32 tiles (kF32) or, for the decode without tiles, straight from
// f16 / bf16 / fp8 cache rows (RowType), 16 at a time.
constexpr int kF32 = -1;
// 16 e4m3 codes as f16 bits of their values / 2^8, exactly (f16's exponent bias is 8 more; e4m3
// subnormals become f16 subnormals) and the NaN codes (0x7f, 0xff) as f16 NaN: sign-extended to 16 bits
// and shifted left by 7, a code's sign lands in bits 14 and 15 and its exponent and mantissa in bits
// 7..13; bit 14 then takes the carry of bits 7..13 + 1, set only when they are all ones (NaN). Five
// integer instructions per 16 codes (the earlier form through 32-bit lanes and a NaN blend took nine).
PA_AVX512 static inline __m256i e4m3x16_f16(const uint8_t* src) {
  const __m256i h = _mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src))), 7);
  const __m256i nan = _mm256_add_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x3f80)), _mm256_set1_epi16(0x80));
  return _mm256_ternarylogic_epi32(nan, h, _mm256_set1_epi16(0x4000), 0xe4);  // bit 14 from nan, the rest h
}
template <int T>
PA_AVX512 static inline __m512 row16(const void* row, int d) {
  if constexpr (T == kF32) {
    return _mm512_loadu_ps(static_cast<const float*>(row) + d);
  } else if constexpr (T == static_cast<int>(RowType::fp8)) {  // the values / 2^8 (the caller folds 2^8 x scale)
    return _mm512_cvtph_ps(e4m3x16_f16(static_cast<const uint8_t*>(row) + d));
  } else if constexpr (T == static_cast<int>(RowType::u8)) {
    // the codes - 128 (the top bit flipped, then sign-extended; the caller folds scale and minimum): a
    // fold on the raw codes sums terms of 128 x the values' scale that cancel, and its error grew with the
    // keys summed (design.md, "u8 values centred in the kernels")
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(row) + d));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_xor_si128(c, _mm_set1_epi8(static_cast<char>(0x80)))));
  } else {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(row) + d));
    if constexpr (T == static_cast<int>(RowType::f16)) return _mm512_cvtph_ps(x);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16));  // bf16
  }
}
struct TileRows {  // rows of an f32 tile
  const float* base;
  int ld;
  const void* operator[](int k) const { return base + static_cast<int64_t>(k) * ld; }
};
struct CacheRows {  // one pointer per key
  const void* const* row;
  const void* operator[](int k) const { return row[k]; }
};

// The horizontal sums of KB (4 or 2) accumulators into dst[0..KB), four at a time (two: the pair twice):
// fold 512 -> 256 -> 128 bits pairwise, then two hadds
template <int KB>
PA_AVX512 static inline void store_sums(float* dst, const __m512* acc) {
  __m128 x[4];
  for (int j = 0; j < 4; ++j) {
    const __m512 a = acc[j % KB];
    const __m256 h =
        _mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
    x[j] = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  }
  const __m128 sum = _mm_hadd_ps(_mm_hadd_ps(x[0], x[1]), _mm_hadd_ps(x[2], x[3]));
  if constexpr (KB == 4)
    _mm_storeu_ps(dst, sum);
  else
    _mm_storel_pi(reinterpret_cast<__m64*>(dst), sum);
}

// S for rows [0, rb) x keys [0, kb) in RB x (16 / RB) blocks: RB = 4, 4 x 4 (the tiles, and a decode's
// 4 rows); RB = 8, 8 x 2, which converts a cache row's elements once for 8 rows. Either shape gives each
// (row, key) the same instructions (one accumulator over D in steps of 16, the same folds), so the same
// bits.
template <int T, int RB, class Rows>
PA_AVX512 static void scores_blocks(float* s, int ld_s, const float* q, int rb, Rows kr, int kb, int D, Prefetch* pf) {
  constexpr int KB = 16 / RB;
  for (int r = 0; r < rb; r += RB)
    for (int k = 0; k < kb; k += KB) {
      if (pf) pf->tick();
      __m512 acc[RB][KB];
      for (int i = 0; i < RB; ++i)
        for (int j = 0; j < KB; ++j) acc[i][j] = _mm512_setzero_ps();
      for (int d = 0; d < D; d += 16) {
        __m512 kv[KB];
        for (int j = 0; j < KB; ++j) kv[j] = row16<T>(kr[k + j], d);
        for (int i = 0; i < RB; ++i) {
          const __m512 qv = _mm512_loadu_ps(q + static_cast<int64_t>(r + i) * D + d);
          for (int j = 0; j < KB; ++j) acc[i][j] = _mm512_fmadd_ps(qv, kv[j], acc[i][j]);
        }
      }
      for (int i = 0; i < RB; ++i) store_sums<KB>(s + static_cast<int64_t>(r + i) * ld_s + k, acc[i]);
    }
}

// O += P V for rows [0, rb) in RB-row blocks of 16 / RB column blocks (4 x 64 or 8 x 32 columns), over
// every key; each (row, 16 columns) accumulator takes the same products in the same order in either shape.
template <int T, int RB, class Rows>
PA_AVX512 static void accumulate_blocks(float* o, const float* p, int ld_p, int rb, Rows vr, int keys, int D,
                                        Prefetch* pf) {
  constexpr int CB = 16 / RB;
  for (int r = 0; r < rb; r += RB) {
    int d0 = 0;
    for (; d0 + 16 * CB <= D; d0 += 16 * CB) {
      __m512 acc[RB][CB];
      for (int i = 0; i < RB; ++i)
        for (int c = 0; c < CB; ++c) acc[i][c] = _mm512_loadu_ps(o + static_cast<int64_t>(r + i) * D + d0 + 16 * c);
      for (int k = 0; k < keys; ++k) {
        if (pf) pf->tick();
        __m512 v[CB];
        for (int c = 0; c < CB; ++c) v[c] = row16<T>(vr[k], d0 + 16 * c);
        for (int i = 0; i < RB; ++i) {
          const __m512 pk = _mm512_set1_ps(p[static_cast<int64_t>(r + i) * ld_p + k]);
          for (int c = 0; c < CB; ++c) acc[i][c] = _mm512_fmadd_ps(pk, v[c], acc[i][c]);
        }
      }
      for (int i = 0; i < RB; ++i)
        for (int c = 0; c < CB; ++c) _mm512_storeu_ps(o + static_cast<int64_t>(r + i) * D + d0 + 16 * c, acc[i][c]);
    }
    for (; d0 < D; d0 += 16) {
      __m512 acc[RB];
      for (int i = 0; i < RB; ++i) acc[i] = _mm512_loadu_ps(o + static_cast<int64_t>(r + i) * D + d0);
      for (int k = 0; k < keys; ++k) {
        if (pf) pf->tick();
        const __m512 v = row16<T>(vr[k], d0);
        for (int i = 0; i < RB; ++i)
          acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(p[static_cast<int64_t>(r + i) * ld_p + k]), v, acc[i]);
      }
      for (int i = 0; i < RB; ++i) _mm512_storeu_ps(o + static_cast<int64_t>(r + i) * D + d0, acc[i]);
    }
  }
}

PA_AVX512 static void scores_avx512(float* s, int ld_s, const float* q, int rows, const float* kt, int keys, int D,
                                    Prefetch* pf) {
  const int r4 = rows / 4 * 4, k4 = keys / 4 * 4;
  scores_blocks<kF32, 4>(s, ld_s, q, r4, TileRows{kt, D}, k4, D, pf);
  if (r4 < rows)
    scores_v4(s + static_cast<int64_t>(r4) * ld_s, ld_s, q + static_cast<int64_t>(r4) * D, rows - r4, kt, keys, D, pf);
  if (k4 < keys && r4 > 0) scores_v4(s + k4, ld_s, q, r4, kt + static_cast<int64_t>(k4) * D, keys - k4, D, pf);
}

PA_AVX512 static void accumulate_avx512(float* o, const float* p, int ld_p, int rows, const float* vt, int keys, int D,
                                        Prefetch* pf) {
  const int r4 = rows / 4 * 4;
  accumulate_blocks<kF32, 4>(o, p, ld_p, r4, TileRows{vt, D}, keys, D, pf);
  if (r4 < rows)
    accumulate_v4(o + static_cast<int64_t>(r4) * D, p + static_cast<int64_t>(r4) * ld_p, ld_p, rows - r4, vt, keys, D,
                  pf);
}

// The chunks without f32 tiles (tile.h): the blocks on the cache rows (4 rows: 4 x 4, 8 rows: 8 x 2); the
// last keys' S one (row, key) at a time.
template <int T, int RB>
PA_AVX512 static void scores_direct_avx512(float* s, int ld_s, const float* q, int rows, const void* const* krow,
                                           int keys, int D, Prefetch* pf) {
  const int kb = keys / (16 / RB) * (16 / RB);
  scores_blocks<T, RB>(s, ld_s, q, rows, CacheRows{krow}, kb, D, pf);
  for (int r = 0; r < rows; ++r)
    for (int k = kb; k < keys; ++k) {
      if (pf) pf->tick();
      __m512 acc = _mm512_setzero_ps();
      for (int d = 0; d < D; d += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + static_cast<int64_t>(r) * D + d), row16<T>(krow[k], d), acc);
      s[static_cast<int64_t>(r) * ld_s + k] = _mm512_reduce_add_ps(acc);
    }
}

// S of bf16 query rows on bf16 cache rows by vdpbf16ps (AVX512-BF16): each instruction takes 16 pairs of
// products into 16 f32 sums, two elements per lane where an f32 FMA takes one, and reads the cache rows
// as they are (no conversion). bf16 x bf16 products are exact in f32; the instruction adds each lane's pair
// into its sum with round-to-nearest-even and flushes subnormals (inputs and results below 2^-126: far
// below a score's resolution). 4 x 4 blocks over D in steps of 32, the last rows and keys one at a time.
PA_AVX512_BF16 static inline __m512bh bf16x32(const void* row, int d) {
  return (__m512bh)_mm512_loadu_si512(static_cast<const uint16_t*>(row) + d);
}
PA_AVX512_BF16 static void scores_bf16dot_avx512(float* s, int ld_s, const uint16_t* q, int rows,
                                                  const void* const* krow, int keys, int D, Prefetch* pf) {
  const int r4 = rows / 4 * 4, k4 = keys / 4 * 4;
  for (int r = 0; r < r4; r += 4)
    for (int k = 0; k < k4; k += 4) {
      if (pf) pf->tick();
      __m512 acc[4][4];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] = _mm512_setzero_ps();
      for (int d = 0; d < D; d += 32) {
        __m512bh kv[4];
        for (int j = 0; j < 4; ++j) kv[j] = bf16x32(krow[k + j], d);
        for (int i = 0; i < 4; ++i) {
          const __m512bh qv = bf16x32(q + static_cast<int64_t>(r + i) * D, d);
          for (int j = 0; j < 4; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], qv, kv[j]);
        }
      }
      for (int i = 0; i < 4; ++i) store_sums<4>(s + static_cast<int64_t>(r + i) * ld_s + k, acc[i]);
    }
  for (int r = 0; r < rows; ++r)
    for (int k = r < r4 ? k4 : 0; k < keys; ++k) {
      if (pf) pf->tick();
      __m512 acc = _mm512_setzero_ps();
      for (int d = 0; d < D; d += 32)
        acc = _mm512_dpbf16_ps(acc, bf16x32(q + static_cast<int64_t>(r) * D, d), bf16x32(krow[k], d));
      s[static_cast<int64_t>(r) * ld_s + k] = _mm512_reduce_add_ps(acc);
    }
}

#pragma GCC diagnostic pop
#endif

#if defined(PA_CPU_AVX512)
#pragma GCC diagnostic push
#if !defined(__clang__)  // (a GCC warning group)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's intrinsic headers (false positive)
#endif
// 16 elements per step: vcvtph2ps (f16), a 16-bit shift (bf16), zero-extend + convert + FMA (u8),
// shifts into f16 bits + vcvtph2ps (fp8).
// (GCC 12 leaves the _Float16 loop scalar: one vcvtph2ps per element, 20% of a decode's time.)
PA_AVX512 static void load_row_avx512(float* dst, const void* src, RowType t, int D, float scale, float min) {
  switch (t) {
    case RowType::f16:
      for (int d = 0; d < D; d += 16)
        _mm512_storeu_ps(dst + d, _mm512_cvtph_ps(_mm256_loadu_si256(
                                      reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(src) + d))));
      break;
    case RowType::bf16:
      for (int d = 0; d < D; d += 16) {
        const __m512i w = _mm512_cvtepu16_epi32(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(src) + d)));
        _mm512_storeu_ps(dst + d, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
      }
      break;
    case RowType::u8: {
      const __m512 vs = _mm512_set1_ps(scale), vm = _mm512_set1_ps(min);
      for (int d = 0; d < D; d += 16) {
        const __m512i c = _mm512_cvtepu8_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(src) + d)));
        _mm512_storeu_ps(dst + d, _mm512_fmadd_ps(_mm512_cvtepi32_ps(c), vs, vm));
      }
      break;
    }
    case RowType::fp8: {
      // the values / 2^8 in f16 (e4m3x16_f16), times 2^8 (exact), then times the scale: one rounding, as
      // the oracle's, and no overflow of 256 * scale; NaN codes stay NaN through the products
      const __m512 v256 = _mm512_set1_ps(256.0f), vs = _mm512_set1_ps(scale);
      for (int d = 0; d < D; d += 16) {
        const __m512 v = _mm512_cvtph_ps(e4m3x16_f16(static_cast<const uint8_t*>(src) + d));
        _mm512_storeu_ps(dst + d, _mm512_mul_ps(_mm512_mul_ps(v, v256), vs));
      }
      break;
    }
  }
}
#pragma GCC diagnostic pop
#endif

#if defined(PA_CPU_AVX512)
// The v4 level: the intrinsics where the shapes allow them (D a multiple of 16; S and P V in 4-row blocks).
static void load_row_avx512_or_v4(float* dst, const void* src, RowType t, int D, float scale, float min) {
  if (D % 16 == 0) return load_row_avx512(dst, src, t, D, scale, min);
  load_row_v4(dst, src, t, D, scale, min);
}
static bool scores_blocked(int rows, int keys, int D) { return D % 16 == 0 && rows >= 4 && keys >= 4; }
static bool accumulate_blocked(int rows, int D) { return D % 16 == 0 && rows >= 4; }
static void scores_avx512_or_v4(float* s, int ld_s, const float* q, int rows, const float* kt, int keys, int D,
                                Prefetch* pf) {
  if (scores_blocked(rows, keys, D)) return scores_avx512(s, ld_s, q, rows, kt, keys, D, pf);
  scores_v4(s, ld_s, q, rows, kt, keys, D, pf);
}
static void accumulate_avx512_or_v4(float* o, const float* p, int ld_p, int rows, const float* vt, int keys, int D,
                                    Prefetch* pf) {
  if (accumulate_blocked(rows, D)) return accumulate_avx512(o, p, ld_p, rows, vt, keys, D, pf);
  accumulate_v4(o, p, ld_p, rows, vt, keys, D, pf);
}
#endif

#if defined(PA_CPU_AVX512)
// The v3 level's fp8 rows, 8 elements per step by the AVX-512 level's shifts into f16 bits (vcvtph2ps is
// F16C, which every AVX2 CPU has): the same values as the table (times 2^8 exact, then one rounding by
// the scale), without its scalar lookups (bench/NOTES.md, "fp8 rows on the cpu backend's AVX2 level").
__attribute__((target("arch=x86-64-v3"))) static void load_row_fp8_v3(float* dst, const uint8_t* src, int D,
                                                                      float scale) {
  const __m256 v256 = _mm256_set1_ps(256.0f), vs = _mm256_set1_ps(scale), vnan = _mm256_set1_ps(NAN);
  const __m128i m7f = _mm_set1_epi16(0x7f), m80 = _mm_set1_epi16(0x80);
  for (int d = 0; d < D; d += 8) {
    const __m128i c = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + d)));
    const __m128i mag = _mm_and_si128(c, m7f);
    const __m128i h = _mm_or_si128(_mm_slli_epi16(mag, 7), _mm_slli_epi16(_mm_and_si128(c, m80), 8));
    const __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtph_ps(h), v256), vs);
    const __m256 is_nan = _mm256_castsi256_ps(_mm256_cvtepi16_epi32(_mm_cmpeq_epi16(mag, m7f)));
    _mm256_storeu_ps(dst + d, _mm256_blendv_ps(v, vnan, is_nan));
  }
}
// The v3 level's f16 rows, 8 elements per vcvtph2ps: GCC 12 leaves the generic _Float16 loop scalar (one
// vcvtph2ps per element; f16 decodes took 1.5x bf16's time on a 2-core AVX2 EPYC, run cpu-f16v3).
__attribute__((target("arch=x86-64-v3"))) static void load_row_f16_v3(float* dst, const uint16_t* src, int D) {
  for (int d = 0; d < D; d += 8)
    _mm256_storeu_ps(dst + d, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + d))));
}
static void load_row_avx2_or_v3(float* dst, const void* src, RowType t, int D, float scale, float min) {
  if (t == RowType::fp8 && D % 8 == 0) return load_row_fp8_v3(dst, static_cast<const uint8_t*>(src), D, scale);
  if (t == RowType::f16 && D % 8 == 0) return load_row_f16_v3(dst, static_cast<const uint16_t*>(src), D);
  load_row_v3(dst, src, t, D, scale, min);
}
#endif

// The dispatch table: the highest level the CPU has, or PAGEDATTN_CPU_ISA=baseline|avx2|avx512|amx to
// cap it (the tests run every level the machine has this way).
struct Table {
  void (*load_row)(float*, const void*, RowType, int, float, float);
  void (*scores)(float*, int, const float*, int, const float*, int, int, Prefetch*);
  void (*accumulate)(float*, const float*, int, int, const float*, int, int, Prefetch*);
  float (*exp2_sum)(float*, const float*, int, float);
  void (*scale_row)(float*, float, int);
  const char* name;
};
// The levels by their features (clang 14 knows neither "x86-64-v4" nor "f16c" here; F16C comes with
// every AVX2 + FMA + BMI2 CPU).
#if defined(PA_CPU_AVX512)
static bool has_v4() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx2");
}
static bool has_v3() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2");
}
#endif
static const Table& table() {
  static const Table t = [] {
    const char* isa = std::getenv("PAGEDATTN_CPU_ISA");
    const std::string want = isa ? isa : "";
    (void)want;
#if defined(PA_CPU_AVX512)
    if ((want.empty() || want == "avx512" || want == "amx") && has_v4())
      return Table{load_row_avx512_or_v4, scores_avx512_or_v4, accumulate_avx512_or_v4, exp2_sum_v4, scale_row_v4,
                   "avx512"};
    if (want != "baseline" && has_v3())
      return Table{load_row_avx2_or_v3, scores_v3, accumulate_v3, exp2_sum_v3, scale_row_v3, "avx2"};
#endif
    return Table{load_row_base, scores_base, accumulate_base, exp2_sum_base, scale_row_base, "baseline"};
  }();
  return t;
}

const char* isa_name() { return table().name; }
void load_row(float* dst, const void* src, RowType t, int D, float scale, float min) {
  table().load_row(dst, src, t, D, scale, min);
}
void scores(float* s, int ld_s, const float* q, int rows, const float* kt, int keys, int D, Prefetch* pf) {
  table().scores(s, ld_s, q, rows, kt, keys, D, pf);
}
void accumulate(float* o, const float* p, int ld_p, int rows, const float* vt, int keys, int D, Prefetch* pf) {
  table().accumulate(o, p, ld_p, rows, vt, keys, D, pf);
}

// The most rows a chunk takes without tiles: each cache element is converted once per 8-row block, and
// past 12 rows the tiles' one conversion wins (16 rows: f16 0.98x, fp8 1.02-1.03x the tiles' time; 32
// rows: 1.05x / 1.12-1.14x; 12 rows 0.91x / 0.94-0.99x; bench/NOTES.md, run cpu-r12). u8: 4 rows (8 / 12
// rows 1.00x / 1.05x the tiles' time, run cpu-u8d).
constexpr int kDirectRows = 12;
bool has_direct(RowType t, int rows, int D, int Dv) {
#if defined(PA_CPU_AVX512)
  return table().scores == scores_avx512_or_v4 && rows % 4 == 0 && rows > 0 &&
         rows <= (t == RowType::u8 ? 4 : kDirectRows) && D % 16 == 0 && Dv % 16 == 0;
#else
  (void)t, (void)rows, (void)D, (void)Dv;
  return false;
#endif
}
#if defined(PA_CPU_AVX512)
// rows: blocks of 8, then one of 4 (rows a multiple of 4)
template <int T>
static void scores_direct_rows(float* s, int ld_s, const float* q, int rows, const void* const* krow, int keys, int D,
                               Prefetch* pf) {
  const int r8 = rows / 8 * 8;
  if (r8 > 0) scores_direct_avx512<T, 8>(s, ld_s, q, r8, krow, keys, D, pf);
  if (r8 < rows)
    scores_direct_avx512<T, 4>(s + static_cast<int64_t>(r8) * ld_s, ld_s, q + static_cast<int64_t>(r8) * D, 4, krow,
                               keys, D, pf);
}
template <int T>
static void accumulate_direct_rows(float* o, const float* p, int ld_p, int rows, const void* const* vrow, int keys,
                                   int Dv, Prefetch* pf) {
  const int r8 = rows / 8 * 8;
  if (r8 > 0) accumulate_blocks<T, 8>(o, p, ld_p, r8, CacheRows{vrow}, keys, Dv, pf);
  if (r8 < rows)
    accumulate_blocks<T, 4>(o + static_cast<int64_t>(r8) * Dv, p + static_cast<int64_t>(r8) * ld_p, ld_p, 4,
                            CacheRows{vrow}, keys, Dv, pf);
}
#endif
void scores_direct(float* s, int ld_s, const float* q, int rows, const void* const* krow, RowType t, int keys, int D,
                   Prefetch* pf) {
#if defined(PA_CPU_AVX512)
  if (t == RowType::bf16)
    return scores_direct_rows<static_cast<int>(RowType::bf16)>(s, ld_s, q, rows, krow, keys, D, pf);
  if (t == RowType::fp8) return scores_direct_rows<static_cast<int>(RowType::fp8)>(s, ld_s, q, rows, krow, keys, D, pf);
  if (t == RowType::u8) return scores_direct_rows<static_cast<int>(RowType::u8)>(s, ld_s, q, rows, krow, keys, D, pf);
  return scores_direct_rows<static_cast<int>(RowType::f16)>(s, ld_s, q, rows, krow, keys, D, pf);
#else
  (void)s, (void)ld_s, (void)q, (void)rows, (void)krow, (void)t, (void)keys, (void)D, (void)pf;
#endif
}
bool has_bf16dot(int D) {
#if defined(PA_CPU_AVX512)
  static const bool cpu = __builtin_cpu_supports("avx512bf16");
  return table().scores == scores_avx512_or_v4 && cpu && D % 32 == 0;
#else
  (void)D;
  return false;
#endif
}
void scores_bf16dot(float* s, int ld_s, const uint16_t* q, int rows, const void* const* krow, int keys, int D,
                    Prefetch* pf) {
#if defined(PA_CPU_AVX512)
  scores_bf16dot_avx512(s, ld_s, q, rows, krow, keys, D, pf);
#else
  (void)s, (void)ld_s, (void)q, (void)rows, (void)krow, (void)keys, (void)D, (void)pf;
#endif
}
void accumulate_direct(float* o, const float* p, int ld_p, int rows, const void* const* vrow, RowType t, int keys,
                       int Dv, Prefetch* pf) {
#if defined(PA_CPU_AVX512)
  if (t == RowType::bf16)
    return accumulate_direct_rows<static_cast<int>(RowType::bf16)>(o, p, ld_p, rows, vrow, keys, Dv, pf);
  if (t == RowType::fp8)
    return accumulate_direct_rows<static_cast<int>(RowType::fp8)>(o, p, ld_p, rows, vrow, keys, Dv, pf);
  if (t == RowType::u8)
    return accumulate_direct_rows<static_cast<int>(RowType::u8)>(o, p, ld_p, rows, vrow, keys, Dv, pf);
  return accumulate_direct_rows<static_cast<int>(RowType::f16)>(o, p, ld_p, rows, vrow, keys, Dv, pf);
#else
  (void)o, (void)p, (void)ld_p, (void)rows, (void)vrow, (void)t, (void)keys, (void)Dv, (void)pf;
#endif
}

// ---- Chunks of many rows on AMX-BF16 (tile.h, amx_*) ----
// S^T = K Q^T and O += P V as 16 x 16 f32 tiles of tdpbf16ps (16 x 16 x 32 products each, ~5.3 ns on
// this VM's Xeon: 3.1 TFLOP/s on one core, against ~0.19 for the f32 FMAs). Operands in bf16 parts:
// cache values truncated, then the rest (f16 values are exact in two, 8 + 3 significant bits; bf16, fp8
// values / 2^8 and u8 codes - 128 in one); the query and P rounded to nearest, then the rest rounded (P
// to 2^-17 of each value). The products of the two low parts are dropped (below 2^-15 of their product,
// the cache's low part < 2^-7 of its value, the query's < 2^-8), so S takes 3 products per
// element for f16 queries on f16 caches, 2 for one-part caches, and P V 3 or 2. Keys are the M
// dimension of S^T: K's rows are the A tiles as converted, no transpose; the query's transpose is the B
// operand, packed once per item; V's B tiles interleave two keys' rows (a 16-bit unpack). O lives in
// the f32 rows of the caller, loaded and stored as C tiles per key tile.
#if defined(PA_CPU_AMX)
#pragma GCC diagnostic push
#if !defined(__clang__)                                 // (a GCC warning group)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's intrinsic headers (false positive)
#endif
struct alignas(64) AmxConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
  AmxConfig() {
    for (int i = 0; i < 8; ++i) colsb[i] = 64, rows[i] = 16;  // every tile 16 rows x 64 bytes
  }
};
// The CPU has AMX-TILE, AMX-BF16 and AVX512-BF16, the kernel grants this process the tile state
// (arch_prctl ARCH_REQ_XCOMP_PERM, Linux 5.16+), and PAGEDATTN_CPU_ISA is unset or "amx".
static bool amx_allowed() {
  static const bool ok = [] {
    const char* isa = std::getenv("PAGEDATTN_CPU_ISA");
    if (isa && *isa && std::string(isa) != "amx") return false;
    if (table().scores != scores_avx512_or_v4 || !__builtin_cpu_supports("avx512bf16")) return false;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 22))) return false;
    constexpr long kReqXcompPerm = 0x1023, kXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtiledata) == 0;
  }();
  return ok;
}
// 16 values as bf16 parts in the upper halves of 32-bit lanes: hi = x truncated to bf16, lo = x - hi
// (exact in f32; a value of at most 16 significant bits, f16's 11 among them, leaves lo exact in bf16 too)
PA_AMX static inline __m512i amx_hi(__m512 x) {
  return _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(~0xffff));
}
PA_AMX static inline __m512i amx_lo(__m512 x) {
  return _mm512_castps_si512(_mm512_sub_ps(x, _mm512_castsi512_ps(amx_hi(x))));
}
// 32 values exact in bf16 (x0's 16, then x1's) as bf16 words: vcvtne2ps2bf16 (its rounding is a no-op here)
PA_AMX static inline __m512i amx_words(__m512i x0, __m512i x1) {
  return (__m512i)_mm512_cvtne2ps_pbh(_mm512_castsi512_ps(x1), _mm512_castsi512_ps(x0));
}
// Two rows' upper halves interleaved per lane: b's in the upper half of each 32-bit lane, a's in the lower
PA_AMX static inline __m512i amx_pair(__m512i a, __m512i b) {
  return _mm512_ternarylogic_epi32(_mm512_srli_epi32(a, 16), b, _mm512_set1_epi32(~0xffff), 0xf8);  // a' | (b & m)
}
// keys [0, n) of krow as A rows ([part][kAmxTileKeys][D]), keys [n, kAmxTileKeys) zero
template <int T>
PA_AMX static void amx_key_rows(uint16_t* k, int parts, const void* const* krow, int n, int D, Prefetch* pf) {
  const size_t part = static_cast<size_t>(kAmxTileKeys) * D;
  for (int j = 0; j < n; ++j) {
    if (pf) pf->tick();
    for (int d = 0; d < D; d += 32) {
      const __m512 x0 = row16<T>(krow[j], d), x1 = row16<T>(krow[j], d + 16);
      uint16_t* dst = k + static_cast<size_t>(j) * D + d;
      _mm512_storeu_si512(dst, amx_words(amx_hi(x0), amx_hi(x1)));
      if (parts == 2) _mm512_storeu_si512(dst + part, amx_words(amx_lo(x0), amx_lo(x1)));
    }
  }
  for (int pt = 0; pt < parts; ++pt)
    std::memset(k + pt * part + static_cast<size_t>(n) * D, 0, sizeof(uint16_t) * (kAmxTileKeys - n) * D);
}
// keys [0, n) of vrow as B tiles ([part][Dv / 16] tiles of 16 key pairs x 16 columns x 2 keys), the rest
// zero: a pair's two rows interleaved, key 2r in the low half of each 32-bit element
template <int T>
PA_AMX static void amx_value_tiles(uint16_t* v, int parts, const void* const* vrow, int n, int Dv, Prefetch* pf) {
  const size_t part = static_cast<size_t>(kAmxTileKeys) * Dv;
  for (int r = 0; r < kAmxTileKeys / 2; ++r) {
    if (pf) pf->tick();
    uint16_t* dst = v + r * 32;
    if (2 * r >= n) {
      for (int d = 0; d < Dv; d += 16)
        for (int pt = 0; pt < parts; ++pt) _mm512_store_si512(dst + pt * part + d / 16 * 512, _mm512_setzero_si512());
      continue;
    }
    const void* a = vrow[2 * r];
    const void* b = 2 * r + 1 < n ? vrow[2 * r + 1] : nullptr;
    for (int d = 0; d < Dv; d += 16) {
      const __m512 xa = row16<T>(a, d), xb = b ? row16<T>(b, d) : _mm512_setzero_ps();
      _mm512_store_si512(dst + d / 16 * 512, amx_pair(_mm512_castps_si512(xa), _mm512_castps_si512(xb)));
      if (parts == 2) _mm512_store_si512(dst + part + d / 16 * 512, amx_pair(amx_lo(xa), amx_lo(xb)));
    }
  }
}
// The compiler does not see the tile stores' and loads' memory (GCC's _tile_* are asm without a
// "memory" clobber): a barrier between them and the plain loads and stores of the same buffers.
static inline void amx_fence() { asm volatile("" ::: "memory"); }

PA_AMX static void amx_scores_tiles(const Amx& a, int n, Prefetch* pf) {
  const size_t qtile = 512, qpart = static_cast<size_t>(a.D / 32) * (a.rows_pad / 16) * qtile;
  const size_t kpart = static_cast<size_t>(kAmxTileKeys) * a.D;
  const long kstride = 2L * a.D, sstride = 4L * a.rows_pad;
  amx_fence();
  for (int rg = 0; rg < a.rows_pad / 16; ++rg) {
    _tile_zero(0);
    _tile_zero(1);
    for (int dc = 0; dc < a.D / 32; ++dc) {
      if (pf) pf->tick();
      const uint16_t* q = a.q + (static_cast<size_t>(dc) * (a.rows_pad / 16) + rg) * qtile;
      const uint16_t* k = a.k + dc * 32;
      _tile_loadd(2, q, 64);
      _tile_loadd(4, k, kstride);
      _tile_dpbf16ps(0, 4, 2);
      if (n > 16) {
        _tile_loadd(6, k + 16 * a.D, kstride);
        _tile_dpbf16ps(1, 6, 2);
      }
      if (a.qparts == 2) {
        _tile_loadd(3, q + qpart, 64);
        _tile_dpbf16ps(0, 4, 3);
        if (n > 16) _tile_dpbf16ps(1, 6, 3);
      }
      if (a.parts == 2) {
        _tile_loadd(5, k + kpart, kstride);
        _tile_dpbf16ps(0, 5, 2);
        if (n > 16) {
          _tile_loadd(7, k + kpart + 16 * a.D, kstride);
          _tile_dpbf16ps(1, 7, 2);
        }
      }
    }
    _tile_stored(0, a.st + rg * 16, sstride);
    if (n > 16) _tile_stored(1, a.st + 16 * a.rows_pad + rg * 16, sstride);
  }
  amx_fence();
}

PA_AMX static void amx_accumulate_tiles(const Amx& a, float* o, Prefetch* pf) {
  const size_t ppart = static_cast<size_t>(a.rows_pad) * kAmxTileKeys, vpart = static_cast<size_t>(kAmxTileKeys) * a.Dv;
  const long ostride = 4L * a.Dv;
  amx_fence();
  for (int rg = 0; rg < a.rows_pad / 16; ++rg) {
    _tile_loadd(2, a.p + rg * 16 * kAmxTileKeys, 64);
    _tile_loadd(3, a.p + ppart + rg * 16 * kAmxTileKeys, 64);
    for (int dt = 0; dt < a.Dv / 16; dt += 2) {
      if (pf) pf->tick();
      float* c = o + static_cast<size_t>(rg) * 16 * a.Dv + dt * 16;
      const uint16_t* v = a.v + static_cast<size_t>(dt) * 512;
      _tile_loadd(0, c, ostride);
      _tile_loadd(1, c + 16, ostride);
      _tile_loadd(4, v, 64);
      _tile_loadd(6, v + 512, 64);
      _tile_dpbf16ps(0, 2, 4);
      _tile_dpbf16ps(1, 2, 6);
      _tile_dpbf16ps(0, 3, 4);
      _tile_dpbf16ps(1, 3, 6);
      if (a.parts == 2) {
        _tile_loadd(5, v + vpart, 64);
        _tile_loadd(7, v + vpart + 512, 64);
        _tile_dpbf16ps(0, 2, 5);
        _tile_dpbf16ps(1, 2, 7);
      }
      _tile_stored(0, c, ostride);
      _tile_stored(1, c + 16, ostride);
    }
  }
  amx_fence();
}

PA_AMX static void amx_keys(Amx& a, const void* const* krow, int n, Prefetch* pf) {
  switch (a.t) {
    case RowType::f16: return amx_key_rows<static_cast<int>(RowType::f16)>(a.k, a.parts, krow, n, a.D, pf);
    case RowType::bf16: return amx_key_rows<static_cast<int>(RowType::bf16)>(a.k, a.parts, krow, n, a.D, pf);
    case RowType::u8: return amx_key_rows<static_cast<int>(RowType::u8)>(a.k, a.parts, krow, n, a.D, pf);
    case RowType::fp8: return amx_key_rows<static_cast<int>(RowType::fp8)>(a.k, a.parts, krow, n, a.D, pf);
  }
}
PA_AMX static void amx_values(Amx& a, const void* const* vrow, int n, Prefetch* pf) {
  switch (a.t) {
    case RowType::f16: return amx_value_tiles<static_cast<int>(RowType::f16)>(a.v, a.parts, vrow, n, a.Dv, pf);
    case RowType::bf16: return amx_value_tiles<static_cast<int>(RowType::bf16)>(a.v, a.parts, vrow, n, a.Dv, pf);
    case RowType::u8: return amx_value_tiles<static_cast<int>(RowType::u8)>(a.v, a.parts, vrow, n, a.Dv, pf);
    case RowType::fp8: return amx_value_tiles<static_cast<int>(RowType::fp8)>(a.v, a.parts, vrow, n, a.Dv, pf);
  }
}
// P's rows [0, rows) x keys [0, n) in two parts as A rows ([2][rows_pad][kAmxTileKeys]); keys past n zero
PA_AMX static void amx_pack_p(Amx& a, const float* p, int ld_p, int n) {
  const size_t ppart = static_cast<size_t>(a.rows_pad) * kAmxTileKeys;
  for (int r = 0; r < a.rows; ++r)
    for (int k = 0; k < kAmxTileKeys; k += 16) {
      const __mmask16 m = static_cast<__mmask16>(n - k >= 16 ? 0xffff : n > k ? (1u << (n - k)) - 1 : 0);
      const __m512 x = _mm512_maskz_loadu_ps(m, p + static_cast<size_t>(r) * ld_p + k);
      const __m256i h = (__m256i)_mm512_cvtneps_pbh(x);  // P rounded: hi, then the rest
      const __m512 hf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(a.p + static_cast<size_t>(r) * kAmxTileKeys + k), h);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(a.p + ppart + static_cast<size_t>(r) * kAmxTileKeys + k),
                          (__m256i)_mm512_cvtneps_pbh(_mm512_sub_ps(x, hf)));
    }
}
// The query rows' bf16 parts as Q^T's B tiles: a row's 32 columns of a tile are its 16 (pair) dwords,
// one per tile row, so each goes out by a scatter of stride 16 dwords; rows past a.rows zero
PA_AMX static void amx_pack_query(Amx& a, const float* qraw) {
  const size_t qpart = static_cast<size_t>(a.D / 32) * (a.rows_pad / 16) * 512;
  const __m512i stride =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), _mm512_set1_epi32(16));
  for (int n = 0; n < a.rows_pad; ++n)
    for (int d = 0; d < a.D; d += 32) {
      const float* row = n < a.rows ? qraw + static_cast<size_t>(n) * a.D + d : nullptr;
      const __m512 x0 = row ? _mm512_loadu_ps(row) : _mm512_setzero_ps();
      const __m512 x1 = row ? _mm512_loadu_ps(row + 16) : _mm512_setzero_ps();
      const __m512bh h = _mm512_cvtne2ps_pbh(x1, x0);  // rounded to nearest, then the rest
      const __m512i hw = (__m512i)h;
      const __m512 h0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(hw)), 16));
      const __m512 h1 =
          _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(hw, 1)), 16));
      uint16_t* tile = a.q + (static_cast<size_t>(d / 32) * (a.rows_pad / 16) + n / 16) * 512 + (n % 16) * 2;
      _mm512_i32scatter_epi32(tile, stride, hw, 4);
      if (a.qparts == 2) {
        const __m512i lw = (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(x1, h1), _mm512_sub_ps(x0, h0));
        _mm512_i32scatter_epi32(tile + qpart, stride, lw, 4);
      }
    }
}
#pragma GCC diagnostic pop
#endif

bool has_amx(RowType t, int D, int Dv) {
#if defined(PA_CPU_AMX)
  (void)t;
  return D % 32 == 0 && Dv % 32 == 0 && amx_allowed();
#else
  (void)t, (void)D, (void)Dv;
  return false;
#endif
}
size_t amx_bytes(int max_rows, int D, int Dv) {
  const size_t rows_pad = static_cast<size_t>(max_rows + 15) / 16 * 16;
  return 2 * (2 * rows_pad * D + 2 * kAmxTileKeys * static_cast<size_t>(D) +
              2 * kAmxTileKeys * static_cast<size_t>(Dv) + 2 * rows_pad * kAmxTileKeys) +
         4 * kAmxTileKeys * rows_pad + 64;
}
Amx amx_setup(void* scratch, RowType t, int rows, int D, int Dv, const float* qraw, int qparts) {
  assert(rows > 0 && rows <= 64 && D % 32 == 0 && Dv % 32 == 0);  // (amx_bytes for up to 64 rows)
  Amx a;
  a.t = t;
  a.rows = rows;
  a.rows_pad = (rows + 15) / 16 * 16;
  a.D = D;
  a.Dv = Dv;
  a.qparts = qparts;
  a.parts = t == RowType::f16 ? 2 : 1;
  auto* base = reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t{63});
  a.q = base;
  a.k = a.q + 2 * static_cast<size_t>(a.rows_pad) * D;
  a.v = a.k + 2 * static_cast<size_t>(kAmxTileKeys) * D;
  a.p = a.v + 2 * static_cast<size_t>(kAmxTileKeys) * Dv;
  a.st = reinterpret_cast<float*>(a.p + 2 * static_cast<size_t>(a.rows_pad) * kAmxTileKeys);
  // Q^T as B tiles: element (pair r, row n, e) of tile (dc, rg) is row 16 rg + n, column 32 dc + 2 r + e
#if defined(PA_CPU_AMX)
  amx_pack_query(a, qraw);
#else
  (void)qraw;
#endif
  // P's padded rows stay zero
  std::memset(a.p, 0, sizeof(uint16_t) * 2 * a.rows_pad * kAmxTileKeys);
  return a;
}
#if defined(PA_CPU_AMX)
PA_AMX void amx_begin() {
  static const AmxConfig config;
  _tile_loadconfig(&config);
}
PA_AMX void amx_end() { _tile_release(); }
#else
void amx_begin() {}
void amx_end() {}
#endif
void amx_scores(Amx& a, float* s, int ld_s, const void* const* krow, int keys, float scale, Prefetch* pf) {
#if defined(PA_CPU_AMX)
  amx_keys(a, krow, keys, pf);
  amx_scores_tiles(a, keys, pf);
  for (int r = 0; r < a.rows; ++r)  // S^T back to rows x keys, scaled on the way
    for (int k = 0; k < keys; ++k)
      s[static_cast<size_t>(r) * ld_s + k] = a.st[static_cast<size_t>(k) * a.rows_pad + r] * scale;
#else
  (void)a, (void)s, (void)ld_s, (void)krow, (void)keys, (void)scale, (void)pf;
#endif
}
void amx_accumulate(Amx& a, float* o, const float* p, int ld_p, const void* const* vrow, int keys, Prefetch* pf) {
#if defined(PA_CPU_AMX)
  amx_pack_p(a, p, ld_p, keys);
  amx_values(a, vrow, keys, pf);
  amx_accumulate_tiles(a, o, pf);
#else
  (void)a, (void)o, (void)p, (void)ld_p, (void)vrow, (void)keys, (void)pf;
#endif
}
// per key row and key pair (all kAmxTileKeys / 2) in the conversions, per (16 rows, 32 columns) in S and P V
int amx_ticks(int rows, int keys, int D, int Dv) {
  return keys + kAmxTileKeys / 2 + (rows + 15) / 16 * (D / 32 + Dv / 32);
}

// The generic loops tick once per (row, 4 keys) and per (row, tail key) in S, per (row, 2 keys) and per
// (row, tail key) in P V; the AVX-512 kernels once per 4 x 4 block in S and per (4 rows, column block,
// key) in P V, their tails through the generic loops (the decode without tiles: its S tail once per
// (row, key), the same count); rows without tiles in blocks of 8 once per 8 x 2 block and per (8 rows, 32
// or 16 columns, key), then a 4-row block as the tiles' blocks, the S tails once per (row, key).
int tile_ticks(int rows, int keys, int D, int Dv, bool direct) {
  auto generic_s = [](int r, int k) { return r * (k / 4 + k % 4); };
  auto generic_pv = [](int r, int k) { return r * (k / 2 + k % 2); };
#if defined(PA_CPU_AVX512)
  if (direct) {
    const int r8 = rows / 8 * 8, r4 = rows - r8;
    return (r8 / 8) * (keys / 2 + (Dv / 32 + (Dv % 32) / 16) * keys) + r8 * (keys % 2) +
           (r4 / 4) * (keys / 4 + (Dv / 64 + (Dv % 64) / 16) * keys) + r4 * (keys % 4);
  }
  if (table().scores == scores_avx512_or_v4) {
    int t = 0;
    const int r4 = rows / 4 * 4, k4 = keys / 4 * 4;
    if (scores_blocked(rows, keys, D))
      t += (r4 / 4) * (k4 / 4) + generic_s(rows - r4, keys) + (k4 < keys ? generic_s(r4, keys - k4) : 0);
    else
      t += generic_s(rows, keys);
    if (accumulate_blocked(rows, Dv))
      t += (r4 / 4) * (Dv / 64 + (Dv % 64) / 16) * keys + generic_pv(rows - r4, keys);
    else
      t += generic_pv(rows, keys);
    return t;
  }
#endif
  return generic_s(rows, keys) + generic_pv(rows, keys);
}
#if defined(PA_CPU_AVX512)
#pragma GCC diagnostic push
#if !defined(__clang__)  // (a GCC warning group)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's _mm512_reduce_max_ps (false positive)
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
PA_AVX512 static float row_max_avx512(const float* x, int n) {
  __m512 m = _mm512_set1_ps(-INFINITY);
  int k = 0;
  for (; k + 16 <= n; k += 16) m = _mm512_max_ps(_mm512_loadu_ps(x + k), m);  // (a NaN x yields m)
  if (k < n) m = _mm512_max_ps(_mm512_mask_loadu_ps(m, static_cast<__mmask16>((1u << (n - k)) - 1), x + k), m);
  return _mm512_reduce_max_ps(m);
}
#pragma GCC diagnostic pop
#endif
float row_max(const float* x, int n) {
#if defined(PA_CPU_AVX512)
  if (table().scores == scores_avx512_or_v4) return row_max_avx512(x, n);
#endif
  float m = -INFINITY;
  for (int k = 0; k < n; ++k) m = std::max(m, x[k]);
  return m;
}
float exp2_sum(float* p, const float* x, int n, float m) { return table().exp2_sum(p, x, n, m); }
void scale_row(float* o, float a, int D) { table().scale_row(o, a, D); }

}  // namespace cpu
}  // namespace pagedattn
