// The cpu backend's inner loops (tile.h). Plain loops written so that GCC vectorises them (the reductions
// under `omp simd`), each compiled for x86-64-v4 / v3 / baseline and dispatched at load time.
#include "cpu/tile.h"

#include <cmath>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PA_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define PA_CPU_CLONES
#endif

namespace pagedattn {
namespace cpu {

namespace {
[[maybe_unused]] float f16_to_f32(uint16_t h) {
  // exact conversion through the bit fields (vectorises; no F16C needed at the baseline)
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  uint32_t bits;
  if (e == 0) {
    const float v = static_cast<float>(m) * 5.9604644775390625e-8f;  // subnormal or zero
    std::memcpy(&bits, &v, 4);
    bits |= sign;
  } else if (e == 31) {
    bits = sign | 0x7f800000u | (m << 13);
  } else {
    bits = sign | ((e + 112u) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
}  // namespace

PA_CPU_CLONES
void load_row(float* dst, const void* src, RowType t, int D, float scale, float min) {
  switch (t) {
    case RowType::f16: {
#if defined(__FLT16_MAX__)
      // _Float16: one vcvtph2ps per 16 elements where the clone has F16C (v3, v4)
      const _Float16* s = static_cast<const _Float16*>(src);
      for (int d = 0; d < D; ++d) dst[d] = static_cast<float>(s[d]);
#else
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int d = 0; d < D; ++d) dst[d] = f16_to_f32(s[d]);
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
  }
}

// Four keys per pass over a query row: each q element loaded once for four dot products. (A 4-row x
// 4-key register block measured 1.8-2.6x slower here: GCC spilled its accumulators.)
PA_CPU_CLONES
void scores(float* s, int ld_s, const float* q, int rows, const float* kt, int keys, int D) {
  int k = 0;
  for (; k + 4 <= keys; k += 4) {
    const float *k0 = kt + static_cast<int64_t>(k) * D, *k1 = k0 + D, *k2 = k1 + D, *k3 = k2 + D;
    for (int r = 0; r < rows; ++r) {
      const float* qr = q + static_cast<int64_t>(r) * D;
      float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
#pragma omp simd reduction(+ : a0, a1, a2, a3)
      for (int d = 0; d < D; ++d) {
        a0 += qr[d] * k0[d];
        a1 += qr[d] * k1[d];
        a2 += qr[d] * k2[d];
        a3 += qr[d] * k3[d];
      }
      float* sr = s + static_cast<int64_t>(r) * ld_s + k;
      sr[0] = a0;
      sr[1] = a1;
      sr[2] = a2;
      sr[3] = a3;
    }
  }
  for (; k < keys; ++k) {
    const float* kr = kt + static_cast<int64_t>(k) * D;
    for (int r = 0; r < rows; ++r) {
      const float* qr = q + static_cast<int64_t>(r) * D;
      float a = 0.0f;
#pragma omp simd reduction(+ : a)
      for (int d = 0; d < D; ++d) a += qr[d] * kr[d];
      s[static_cast<int64_t>(r) * ld_s + k] = a;
    }
  }
}

PA_CPU_CLONES
void accumulate(float* o, const float* p, int ld_p, int rows, const float* vt, int keys, int D) {
  for (int r = 0; r < rows; ++r) {
    float* orow = o + static_cast<int64_t>(r) * D;
    const float* pr = p + static_cast<int64_t>(r) * ld_p;
    int k = 0;
    for (; k + 2 <= keys; k += 2) {  // two keys per pass over the output row
      const float p0 = pr[k], p1 = pr[k + 1];
      if (p0 == 0.0f && p1 == 0.0f) continue;  // masked keys
      const float *v0 = vt + static_cast<int64_t>(k) * D, *v1 = v0 + D;
#pragma omp simd
      for (int d = 0; d < D; ++d) orow[d] += p0 * v0[d] + p1 * v1[d];
    }
    for (; k < keys; ++k) {
      const float pk = pr[k];
      if (pk == 0.0f) continue;
      const float* v = vt + static_cast<int64_t>(k) * D;
#pragma omp simd
      for (int d = 0; d < D; ++d) orow[d] += pk * v[d];
    }
  }
}

PA_CPU_CLONES
float exp2_sum(float* p, const float* x, int n, float m) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int i = 0; i < n; ++i) {
    // 2^t = 2^k * 2^f, k = rint(t), f in [-1/2, 1/2]: the Taylor polynomial of degree 6 (its remainder
    // (ln2 / 2)^7 / 7! < 1.3e-7 relative); t below -125 (-inf: masked keys) gives 0
    float t = x[i] - m;
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
    bits += static_cast<int32_t>(k) << 23;
    float v;
    std::memcpy(&v, &bits, 4);
    v = tiny ? 0.0f : v;
    p[i] = v;
    sum += v;
  }
  return sum;
}

PA_CPU_CLONES
void scale_row(float* o, float a, int D) {
#pragma omp simd
  for (int d = 0; d < D; ++d) o[d] *= a;
}

}  // namespace cpu
}  // namespace pagedattn
