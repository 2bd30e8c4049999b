// f16/bf16 conversions and the u8 quantisation rule (src/common/numeric.h) against independent
// references: a brute-force nearest-value search over every value of the format, and _Float16 where
// the compiler has it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/numeric.h"
#include "testing/case.h"

using namespace pagedattn;

namespace {

uint64_t base_seed() { return pagedattn::testing::base_seed("test_numeric", 0x5eed0001ull); }

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Decodes a 16-bit float with `mant` mantissa bits and (15 - mant) exponent bits from its definition.
double decode16(uint16_t h, int mant) {
  const int ebits = 15 - mant, bias = (1 << (ebits - 1)) - 1;
  const int sign = h >> 15, e = (h >> mant) & ((1 << ebits) - 1), m = h & ((1 << mant) - 1);
  double v;
  if (e == (1 << ebits) - 1)
    v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (e == 0)
    v = std::ldexp(static_cast<double>(m), 1 - bias - mant);
  else
    v = std::ldexp(static_cast<double>(m + (1 << mant)), e - bias - mant);
  return sign ? -v : v;
}

// Reference rounding to a 16-bit format: nearest representable value, ties to the even bit pattern,
// overflow to inf where the value rounds past the largest finite (brute force over a sorted table).
struct Format16 {
  int mant;
  uint16_t inf_bits;
  std::vector<double> mag;  // mag[b] = value of bits b for b in [0, inf_bits]; mag[inf_bits] = the
                            // next power of two (where inf "would be" if the exponent continued)
  explicit Format16(int m) : mant(m) {
    inf_bits = static_cast<uint16_t>(((1u << (15 - m)) - 1u) << m);
    for (uint32_t b = 0; b < inf_bits; ++b) mag.push_back(decode16(static_cast<uint16_t>(b), m));
    mag.push_back(2.0 * std::ldexp(1.0, static_cast<int>(std::ilogb(mag.back()))));
  }
  uint16_t round(float x) const {
    const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    if (std::isnan(x)) return 0;  // not used for NaN
    const double a = std::fabs(static_cast<double>(x));
    if (a >= mag.back()) return sign | inf_bits;
    auto it = std::upper_bound(mag.begin(), mag.end(), a);  // first > a
    const size_t hi = static_cast<size_t>(it - mag.begin()), lo = hi - 1;
    const double dl = a - mag[lo], dh = mag[hi] - a;
    size_t pick = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
    return static_cast<uint16_t>(sign | pick);
  }
};

const Format16& f16_format() {
  static const Format16 f(10);
  return f;
}
const Format16& bf16_format() {
  static const Format16 f(7);
  return f;
}

// Floats that stress rounding: random bit patterns, and exact midpoints between neighbouring 16-bit
// values (and one float ulp either side).
std::vector<float> stress_floats(uint64_t seed, int mant, int n) {
  std::mt19937_64 g(seed);
  std::vector<float> xs;
  for (int i = 0; i < n; ++i) xs.push_back(from_bits(static_cast<uint32_t>(g())));
  const uint16_t inf_bits = static_cast<uint16_t>(((1u << (15 - mant)) - 1u) << mant);
  for (int i = 0; i < n; ++i) {
    uint16_t b = static_cast<uint16_t>(g() % inf_bits);
    double lo = decode16(b, mant);
    double hi = b + 1 < inf_bits ? decode16(static_cast<uint16_t>(b + 1), mant) : 2.0 * std::ldexp(1.0, std::ilogb(lo));
    float mid = static_cast<float>(0.5 * (lo + hi));  // exact: the midpoint needs mant+2 bits
    float s = (g() & 1) ? -1.0f : 1.0f;
    xs.push_back(s * mid);
    xs.push_back(s * std::nextafter(mid, 0.0f));
    xs.push_back(s * std::nextafter(mid, std::numeric_limits<float>::infinity()));
  }
  return xs;
}

bool is_nan16(uint16_t h, uint16_t inf_bits) { return (h & 0x7fff) > inf_bits; }

}  // namespace

// --- f16 ------------------------------------------------------------------------------------------

TEST(Numeric, F16DecodeExhaustive) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = num::f16_bits_to_f32(static_cast<uint16_t>(h));
    const double ref = decode16(static_cast<uint16_t>(h), 10);
    if (std::isnan(ref)) {
      ASSERT_TRUE(std::isnan(f)) << "bits 0x" << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<double>(f), ref) << "bits 0x" << std::hex << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << "bits 0x" << std::hex << h;
    }
#if defined(__FLT16_MAX__)
    _Float16 hf;
    uint16_t hb = static_cast<uint16_t>(h);
    std::memcpy(&hf, &hb, 2);
    if (!std::isnan(ref)) {
      ASSERT_EQ(to_bits(f), to_bits(static_cast<float>(hf))) << "bits 0x" << std::hex << h;
    }
#endif
  }
}

TEST(Numeric, F16RoundTripExhaustive) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t back = num::f32_to_f16_bits(num::f16_bits_to_f32(static_cast<uint16_t>(h)));
    if (is_nan16(static_cast<uint16_t>(h), 0x7c00))
      ASSERT_TRUE(is_nan16(back, 0x7c00)) << "NaN bits 0x" << std::hex << h << " came back as 0x" << back;
    else
      ASSERT_EQ(back, h) << "bits 0x" << std::hex << h;
  }
}

TEST(Numeric, F32ToF16MatchesReference) {
  const auto xs = stress_floats(base_seed() + 1, 10, 200000);
  const Format16& ref = f16_format();
  for (float x : xs) {
    const uint16_t got = num::f32_to_f16_bits(x);
    if (std::isnan(x)) {
      ASSERT_TRUE(is_nan16(got, 0x7c00)) << "NaN input 0x" << std::hex << to_bits(x);
      continue;
    }
    ASSERT_EQ(got, ref.round(x)) << "x=" << x << " (0x" << std::hex << to_bits(x) << ")";
#if defined(__FLT16_MAX__)
    _Float16 hf = static_cast<_Float16>(x);
    uint16_t hb;
    std::memcpy(&hb, &hf, 2);
    ASSERT_EQ(got, hb) << "x=" << x << " vs _Float16";
#endif
  }
}

TEST(Numeric, F16Boundaries) {
  // largest finite, the overflow threshold (65520 = halfway to 2^16 ties to the even pattern: inf)
  EXPECT_EQ(num::f32_to_f16_bits(65504.0f), 0x7bff);
  EXPECT_EQ(num::f32_to_f16_bits(65519.996f), 0x7bff);
  EXPECT_EQ(num::f32_to_f16_bits(65520.0f), 0x7c00);
  EXPECT_EQ(num::f32_to_f16_bits(-65520.0f), 0xfc00);
  // smallest subnormal 2^-24; 2^-25 is a tie between 0 and it: to even (0); just above: rounds up
  EXPECT_EQ(num::f32_to_f16_bits(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(num::f32_to_f16_bits(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(num::f32_to_f16_bits(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(num::f32_to_f16_bits(-0.0f), 0x8000);
  EXPECT_TRUE(is_nan16(num::f32_to_f16_bits(std::numeric_limits<float>::quiet_NaN()), 0x7c00));
  EXPECT_EQ(num::f32_to_f16_bits(std::numeric_limits<float>::infinity()), 0x7c00);
}

// --- bf16 -----------------------------------------------------------------------------------------

TEST(Numeric, BF16DecodeAndRoundTripExhaustive) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = num::bf16_bits_to_f32(static_cast<uint16_t>(h));
    const double ref = decode16(static_cast<uint16_t>(h), 7);
    const uint16_t back = num::f32_to_bf16_bits(f);
    if (std::isnan(ref)) {
      ASSERT_TRUE(std::isnan(f)) << "bits 0x" << std::hex << h;
      ASSERT_TRUE(is_nan16(back, 0x7f80)) << "NaN bits 0x" << std::hex << h << " came back as 0x" << back;
    } else {
      ASSERT_EQ(static_cast<double>(f), ref) << "bits 0x" << std::hex << h;
      ASSERT_EQ(back, h) << "bits 0x" << std::hex << h;
    }
  }
}

TEST(Numeric, F32ToBF16MatchesReference) {
  const auto xs = stress_floats(base_seed() + 2, 7, 200000);
  const Format16& ref = bf16_format();
  for (float x : xs) {
    const uint16_t got = num::f32_to_bf16_bits(x);
    if (std::isnan(x)) {
      ASSERT_TRUE(is_nan16(got, 0x7f80)) << "NaN input 0x" << std::hex << to_bits(x);
      continue;
    }
    ASSERT_EQ(got, ref.round(x)) << "x=" << x << " (0x" << std::hex << to_bits(x) << ")";
  }
  // NaN with a payload only in the low 16 bits must stay NaN (not become inf)
  EXPECT_TRUE(is_nan16(num::f32_to_bf16_bits(from_bits(0x7f800001u)), 0x7f80));
  EXPECT_TRUE(is_nan16(num::f32_to_bf16_bits(from_bits(0xff800001u)), 0x7f80));
}

// --- u8 quantisation --------------------------------------------------------------------------------

namespace {
// The params.h formula, written out again with the brute-force f16 reference.
struct RefU8 {
  uint16_t scale_bits, zp_bits;
  float scale, zp;
};
RefU8 ref_u8_params(const std::vector<float>& x) {
  float mn = x[0], mx = x[0];
  for (float v : x) {
    mn = v < mn ? v : mn;
    mx = v > mx ? v : mx;
  }
  float s = (mx - mn) / 255.0f;
  if (s == 0.0f) s = 1.0f;
  RefU8 r;
  r.scale_bits = f16_format().round(s);
  r.scale = static_cast<float>(decode16(r.scale_bits, 10));
  r.zp_bits = f16_format().round(-mn / r.scale);
  r.zp = static_cast<float>(decode16(r.zp_bits, 10));
  return r;
}
uint8_t ref_u8_code(float x, const RefU8& p) {
  float v = std::nearbyint(x / p.scale + p.zp);
  return static_cast<uint8_t>(std::min(255.0f, std::max(0.0f, v)));
}
num::U8Params row_params(const std::vector<float>& x) {
  return num::u8_params(*std::min_element(x.begin(), x.end()), *std::max_element(x.begin(), x.end()));
}
}  // namespace

TEST(Numeric, U8RandomRowsMatchFormula) {
  std::mt19937_64 g(base_seed() + 3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(-3.0f, 3.0f);
  for (int row = 0; row < 2000; ++row) {
    const int D = 64 << (row % 3);
    const float shift = ud(g), mag = std::exp(ud(g));
    std::vector<float> x(D);
    for (float& v : x) v = shift + mag * nd(g);
    const RefU8 ref = ref_u8_params(x);
    const num::U8Params p = row_params(x);
    ASSERT_EQ(p.scale_bits, ref.scale_bits) << "row " << row;
    ASSERT_EQ(p.zp_bits, ref.zp_bits) << "row " << row;
    ASSERT_EQ(p.scale, ref.scale);
    ASSERT_EQ(p.zp, ref.zp);
    for (int d = 0; d < D; ++d) {
      const uint8_t q = num::u8_quantize(x[d], p);
      ASSERT_EQ(q, ref_u8_code(x[d], ref)) << "row " << row << " d " << d << " x=" << x[d];
      // read-back error: half a step from rint, plus the step times the zero point's f16 error
      const double zp_err = std::fabs(static_cast<double>(p.zp) + static_cast<double>(*std::min_element(x.begin(), x.end())) / p.scale);
      const double err = std::fabs(static_cast<double>(num::u8_dequantize(q, p.scale, p.zp)) - x[d]);
      ASSERT_LE(err, p.scale * (0.5 + zp_err) * (1 + 1e-5) + 1e-6 * std::fabs(x[d])) << "row " << row << " d " << d;
    }
  }
}

TEST(Numeric, U8ConstantRow) {
  for (float c : {0.0f, 0.3f, 7.0f, -1000.0f, 1.0e-3f}) {
    std::vector<float> x(128, c);
    const num::U8Params p = row_params(x);
    EXPECT_EQ(p.scale_bits, 0x3c00) << "c=" << c;  // s == 0 -> 1
    EXPECT_EQ(p.scale, 1.0f);
    EXPECT_EQ(p.zp_bits, f16_format().round(-c)) << "c=" << c;
    for (float v : x) {
      const uint8_t q = num::u8_quantize(v, p);
      EXPECT_EQ(q, 0) << "c=" << c;
      // reads back as c rounded to f16 (the zero point holds it)
      EXPECT_EQ(num::u8_dequantize(q, p.scale, p.zp), static_cast<float>(decode16(f16_format().round(c), 10)))
          << "c=" << c;
    }
  }
}

TEST(Numeric, U8AllNegativeRow) {
  std::vector<float> x(256);
  for (int d = 0; d < 256; ++d) x[d] = -2.0f + static_cast<float>(d) / 255.0f;  // [-2, -1]
  const num::U8Params p = row_params(x);
  EXPECT_GT(p.zp, 255.0f);  // the zero point lies beyond the code range for an all-negative row
  EXPECT_EQ(num::u8_quantize(x.front(), p), 0);
  EXPECT_EQ(num::u8_quantize(x.back(), p), 255);
  uint8_t prev = 0;
  for (float v : x) {
    const uint8_t q = num::u8_quantize(v, p);
    EXPECT_GE(q, prev);  // monotone
    prev = q;
    EXPECT_LE(std::fabs(num::u8_dequantize(q, p.scale, p.zp) - v), p.scale);  // within one step
  }
}

TEST(Numeric, U8RoundsHalfToEvenAndClamps) {
  num::U8Params p{0x3c00, 0x0000, 1.0f, 0.0f};  // scale 1, zero point 0
  EXPECT_EQ(num::u8_quantize(2.5f, p), 2);
  EXPECT_EQ(num::u8_quantize(3.5f, p), 4);
  EXPECT_EQ(num::u8_quantize(254.5f, p), 254);
  EXPECT_EQ(num::u8_quantize(-3.0f, p), 0);
  EXPECT_EQ(num::u8_quantize(300.0f, p), 255);
  EXPECT_EQ(num::u8_dequantize(200, 0.5f, 100.0f), 50.0f);
}

TEST(Numeric, U8RangeBelowF16ResolutionIsTreatedAsConstant) {
  // (mx - mn) / 255 rounds to f16 zero: u8_params falls back to scale 1 (a constant row)
  const num::U8Params p = num::u8_params(1.0f, 1.0f + 1e-6f);
  EXPECT_EQ(p.scale, 1.0f);
  EXPECT_EQ(num::u8_quantize(1.0f, p), 0);
  EXPECT_EQ(num::u8_dequantize(0, p.scale, p.zp), 1.0f);
}
