// Internal: bit-exact f16/bf16 conversions and the u8 quantisation rule, shared by the CPU oracle and
// the CUDA kernels (host and device), so both produce the same codes.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

#if defined(__CUDACC__)
#define PA_HD __host__ __device__ __forceinline__
#else
#define PA_HD inline
#endif

namespace pagedattn {
namespace num {

PA_HD uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
PA_HD float bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// f32 -> f16 bits, round to nearest even, with overflow to inf and subnormals.
PA_HD uint16_t f32_to_f16_bits(float f) {
  uint32_t x = f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (ax < 0x38800000u) {                                               // f16 subnormal or zero
    if (ax < 0x33000000u) return static_cast<uint16_t>(sign);           // < 2^-25: rounds to 0
    uint32_t e = ax >> 23;
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e;  // 14..24
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t r = ax + 0xc8000fffu + ((ax >> 13) & 1u);  // rebias exponent (-112 << 23) and round
  return static_cast<uint16_t>(sign | (r >> 13));
}

PA_HD float f16_bits_to_f32(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));  // exact (one cvt)
#else
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  if (e == 0) {
    if (m == 0) return bits_f32(sign);
    float v = static_cast<float>(m) * 5.9604644775390625e-8f;  // m * 2^-24
    return sign ? -v : v;
  }
  if (e == 31) return bits_f32(sign | 0x7f800000u | (m << 13));
  return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
#endif
}

// f32 -> bf16 bits, round to nearest even; NaN stays NaN.
PA_HD uint16_t f32_to_bf16_bits(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}
PA_HD float bf16_bits_to_f32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

PA_HD float round_f16(float f) { return f16_bits_to_f32(f32_to_f16_bits(f)); }
PA_HD float round_bf16(float f) { return bf16_bits_to_f32(f32_to_bf16_bits(f)); }

// --- fp8 e4m3 (OCP E4M3FN: bias 7, no inf, 0x7f / 0xff NaN, largest finite 448) -------------------------
constexpr float kE4M3Max = 448.0f;

// f32 -> e4m3 bits, round to nearest even, saturating: |x| >= 448 (inf included) gives +-448, NaN gives
// 0x7f (the PTX cvt.rn.satfinite.e4m3x2.f32 rule).
PA_HD uint8_t f32_to_e4m3_bits(float f) {
  const uint32_t x = f32_bits(f);
  const uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return 0x7fu;
  if (ax >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);  // >= 448
  if (ax < 0x3c800000u) {                                              // < 2^-6: multiples of 2^-9
    // |x| * 512 is exact; its nearest-even integer 0..8 is the code (8 = 0x08 = 2^-6, the least normal)
    const float q = rintf(bits_f32(ax) * 512.0f);
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(q));
  }
  const uint32_t r = ax + 0x7ffffu + ((ax >> 20) & 1u);  // round the mantissa to 3 bits, nearest even
  const uint32_t code = (r >> 20) - (120u << 3);          // rebias the exponent: 127 - 7
  return static_cast<uint8_t>(sign | (code > 0x7eu ? 0x7eu : code));
}

PA_HD float e4m3_bits_to_f32(uint8_t b) {
  const uint32_t e = (b >> 3) & 0xfu, m = b & 7u;
  float v;
  if (e == 0) v = static_cast<float>(m) * 0.001953125f;                   // m * 2^-9
  else if (e == 15 && m == 7) v = bits_f32(0x7fc00000u);                  // NaN
  else v = bits_f32(((e + 120u) << 23) | (m << 20));
  return (b & 0x80u) ? -v : v;
}

// --- u8 KV quantisation (the rule stated in params.h) ----------------------------------------------
// A row is stored as f16 scale, f16 row minimum and codes 0..255, and reads back as min + code * scale.
// The minimum is rounded down and the scale up, so every code of a finite row falls in [0, 255] without
// clamping and reads back within half a step of its input (no zero point far from zero, no overflow);
// where the top code would read back above 65504, the scale is rounded down (within 3/4 of a step).
constexpr float kF16Max = 65504.0f;

// x clamped to the f16 range [-65504, 65504]; NaN becomes -65504 (fmaxf returns the non-NaN operand).
PA_HD float clamp_f16_range(float x) { return fminf(fmaxf(x, -kF16Max), kF16Max); }

// f16 bits of the largest f16 <= x (x finite, within the f16 range). On the device one cvt.rm (the
// write-in's quantiser sits on a decode's critical path; the software path cost u8 8k T=1 6%, run s13b).
PA_HD uint16_t f32_to_f16_bits_down(float x) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rd(x));
#else
  uint16_t h = f32_to_f16_bits(x);
  if (f16_bits_to_f32(h) > x) h = (h & 0x8000u) ? static_cast<uint16_t>(h + 1u) : (h == 0 ? 0x8001u : static_cast<uint16_t>(h - 1u));
  return h;
#endif
}
// f16 bits of the smallest f16 >= x (0 <= x <= 65504).
PA_HD uint16_t f32_to_f16_bits_up(float x) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_ru(x));
#else
  uint16_t h = f32_to_f16_bits(x);
  if (f16_bits_to_f32(h) < x) h = static_cast<uint16_t>(h + 1u);
  return h;
#endif
}

// a * b and a + b rounded separately (never contracted into an FMA), so host and device agree.
PA_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  volatile float r = a * b;
  return r;
#endif
}
PA_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  volatile float r = a + b;
  return r;
#endif
}

struct U8Params {
  uint16_t scale_bits, min_bits;  // f16
  float scale, min;               // the same values as float
  float inv;                      // 1 / scale rounded to f32 (0 when scale == 0): one division per row
};

// mn, mx: the row's minimum and maximum (in float, before clamping).
PA_HD U8Params u8_params(float mn, float mx) {
  U8Params p;
  p.min_bits = f32_to_f16_bits_down(clamp_f16_range(mn));
  p.min = f16_bits_to_f32(p.min_bits);
  const float s = (clamp_f16_range(mx) - p.min) / 255.0f;  // >= 0
  p.scale_bits = s > 0.0f ? f32_to_f16_bits_up(s) : static_cast<uint16_t>(0);
  p.scale = f16_bits_to_f32(p.scale_bits);
  // NOTE: the top code must not read back above 65504 (an output row averaging such values would
  // overflow an f16 output): there the scale steps down instead (at most a quarter step more error).
  while (add_rn(p.min, mul_rn(255.0f, p.scale)) > kF16Max) {
    --p.scale_bits;
    p.scale = f16_bits_to_f32(p.scale_bits);
  }
  p.inv = p.scale > 0.0f ? 1.0f / p.scale : 0.0f;
  return p;
}

PA_HD uint8_t u8_quantize(float x, const U8Params& p) {
  float v = mul_rn(add_rn(clamp_f16_range(x), -p.min), p.inv);  // scale 0: inv 0, code 0
#if defined(__CUDA_ARCH__)
  v = rintf(v);
#else
  v = std::nearbyint(v);  // default rounding mode: to nearest even
#endif
  v = v < 0.0f ? 0.0f : (v > 255.0f ? 255.0f : v);
  return static_cast<uint8_t>(v);
}

PA_HD float u8_dequantize(uint8_t q, float scale, float min) { return min + static_cast<float>(q) * scale; }

}  // namespace num
}  // namespace pagedattn
