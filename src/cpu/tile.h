// Internal: the cpu backend's inner loops (rows x keys of one tile), compiled for several x86-64 levels
// (x86-64-v4 = AVX-512, with intrinsics for the conversion, S and P V; v3 = AVX2 + FMA + F16C; baseline)
// and picked once per process by the CPU's features, or capped by PAGEDATTN_CPU_ISA=baseline|avx2|avx512;
// one binary runs on any x86-64 (other architectures: the baseline, vectorised for their own SIMD).
#pragma once

#include <cstdint>

namespace pagedattn {
namespace cpu {

// KV element types of a cache row, converted to f32 by load_row.
enum class RowType : int { f16 = 0, bf16 = 1, u8 = 2, fp8 = 3 };

// dst[0..D) = the row as f32. u8: min + code * scale; fp8: e4m3(code) * scale (one f32 rounding, as the
// oracle's).
void load_row(float* dst, const void* src, RowType t, int D, float scale, float min);

// s[r * ld_s + k] = dot(q[r * D .. +D), kt[k * D .. +D)) for r < rows, k < keys.
void scores(float* s, int ld_s, const float* q, int rows, const float* kt, int keys, int D);

// o[r * D + d] += sum_k p[r * ld_p + k] * vt[k * D + d] for r < rows.
void accumulate(float* o, const float* p, int ld_p, int rows, const float* vt, int keys, int D);

// p[i] = 2^(x[i] - m) for i < n (x = -inf gives 0); returns the sum. Relative error ~2e-7.
float exp2_sum(float* p, const float* x, int n, float m);

// o[0..D) *= a
void scale_row(float* o, float a, int D);

// u8 keys' scores from exact integer dot products, where the CPU has AVX-512 VNNI (vpdpwssd: 32
// products of 16-bit integers per instruction, twice the f32 FMA's, and no f32 key tile): each query row
// as 16-bit integers with a power of two of its own (q ~= qi * qinv, |qi| <= 32767: every element to
// 2^-16 of the row's largest, no coarser than an f16 query's own rounding for elements within 2^-5 of it),
// each key's codes widened to 16 bits; s = (kscale * sum(qi * code) + kmin * sum(qi)) * qinv, one
// rounding of the exact sums. Rows are int_row_stride(D) elements apart, padded with zeros.
bool has_u8_int_scores();
int int_row_stride(int D);
// One query row (D floats) -> qi, and its sum(qi) and qinv (times `mult`: the softmax scale); a
// non-finite element makes qinv NaN (the row's scores NaN, as the f32 route gives).
void quantize_query(int16_t* qi, float* qsum, float* qinv, const float* q, int D, float mult);
// One key row's D codes -> 16-bit integers (with the padding).
void widen_codes(int16_t* dst, const uint8_t* src, int D);
// s[r * ld_s + k] for r < rows, k < keys, from the rows above and each key's f32 scale and min.
void scores_u8(float* s, int ld_s, const int16_t* qi, const float* qsum, const float* qinv, int rows,
               const int16_t* kc, const float* kscale, const float* kmin, int keys, int D);

// u8 values' P V from exact integer sums, on the same CPUs: a tile's weights w_k = p_k * vscale_k of each
// row as 16-bit integers with a power of two of the row's own (wi, winv: to 2^-16 of the row's largest
// in the tile), and wmin = sum_k p_k * vmin_k; the tile's value codes widened to 16 bits and interleaved
// by key pairs (pair_codes); o[r][d] += fma(sum_k wi_k * code_k[d], winv, wmin).
// Pair rows are 2 * int_pair_stride(Dv) elements apart; wi rows hold the keys in pairs (even count).
int int_pair_stride(int Dv);
// Weights of keys [0, n) of one row (p, vscale, vmin: n each) -> wi[0, n rounded up to even) and factors.
void quantize_weights(int16_t* wi, float* winv, float* wmin, const float* p, const float* vscale, const float* vmin,
                      int n);
// Codes of two keys (b null: zeros) -> one pair row.
void pair_codes(int16_t* dst, const uint8_t* a, const uint8_t* b, int Dv);
// o[r * Dv + d] += ... for r < rows over `pairs` key pairs (wi rows ld_w apart).
void accumulate_u8(float* o, const int16_t* wi, int ld_w, const float* winv, const float* wmin, int rows,
                   const int16_t* vc, int pairs, int Dv);

// The level the functions above run at: "avx512", "avx2" or "baseline".
const char* isa_name();

}  // namespace cpu
}  // namespace pagedattn
