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

// The level the functions above run at: "avx512", "avx2" or "baseline".
const char* isa_name();

}  // namespace cpu
}  // namespace pagedattn
