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
#include "cpu/tile.h"
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

// --- fp8 e4m3 ------------------------------------------------------------------------------------------

// e4m3 (OCP E4M3FN) from its definition: bias 7, exponent 0 subnormal (m * 2^-9), 0x7f / 0xff NaN.
double decode_e4m3(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double v = e == 0 ? std::ldexp(m, -9) : std::ldexp(1.0 + m / 8.0, e - 7);
  return (b & 0x80) ? -v : v;
}

TEST(Numeric, E4M3DecodeExhaustive) {
  for (int b = 0; b < 256; ++b) {
    const double want = decode_e4m3(static_cast<uint8_t>(b));
    const float got = num::e4m3_bits_to_f32(static_cast<uint8_t>(b));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code 0x" << std::hex << b;
      continue;
    }
    EXPECT_EQ(static_cast<double>(got), want) << "code 0x" << std::hex << b;
  }
  EXPECT_EQ(num::e4m3_bits_to_f32(0x7e), 448.0f);
  EXPECT_EQ(num::e4m3_bits_to_f32(0x01), 0.001953125f);
}

// Round to nearest even against a brute-force search over the 254 finite codes; saturation at +-448
// (inf included), NaN to 0x7f.
TEST(Numeric, F32ToE4M3MatchesReference) {
  std::vector<std::pair<double, uint8_t>> finite;  // (value, code) of the non-negative finite codes
  for (int b = 0; b < 0x7f; ++b) finite.emplace_back(decode_e4m3(static_cast<uint8_t>(b)), static_cast<uint8_t>(b));
  auto nearest = [&](double ax) {  // the code nearest to ax >= 0, ties to the even code
    uint8_t best = 0;
    double bd = INFINITY;
    for (const auto& [v, b] : finite) {
      const double d = std::fabs(v - ax);
      if (d < bd || (d == bd && (b & 1) == 0)) {
        bd = d;
        best = b;
      }
    }
    return best;
  };
  auto xs = stress_floats(base_seed() + 5, 7, 100000);
  for (int b = 0; b < 0x7f; ++b) {  // every code, its midpoints with the next, and just around them
    const float v = static_cast<float>(decode_e4m3(static_cast<uint8_t>(b)));
    const float mid = static_cast<float>((decode_e4m3(static_cast<uint8_t>(b)) + decode_e4m3(static_cast<uint8_t>(b + 1))) / 2);
    for (float x : {v, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      xs.push_back(x);
      xs.push_back(-x);
    }
  }
  for (float x : xs) {
    const uint8_t got = num::f32_to_e4m3_bits(x);
    if (std::isnan(x)) {
      ASSERT_EQ(got, 0x7f) << "NaN input 0x" << std::hex << to_bits(x);
      continue;
    }
    const double ax = std::fabs(static_cast<double>(x));
    const uint8_t mag = ax >= 448.0 ? 0x7e : nearest(ax);
    const uint8_t want = static_cast<uint8_t>(mag | (std::signbit(x) ? 0x80 : 0));
    ASSERT_EQ(got, want) << "x=" << x << " (0x" << std::hex << to_bits(x) << ")";
  }
  EXPECT_EQ(num::f32_to_e4m3_bits(INFINITY), 0x7e);
  EXPECT_EQ(num::f32_to_e4m3_bits(-INFINITY), 0xfe);
  EXPECT_EQ(num::f32_to_e4m3_bits(464.0f), 0x7e);  // would round to 480, which e4m3 lacks
}

// The cpu backend's fp8 row conversion (cpu::load_row; on an AVX-512 machine its vector path for D a
// multiple of 16, else the scalar loop) against e4m3 * scale rounded once, for every code, NaN codes and
// subnormals included, and scales from subnormal to near FLT_MAX.
TEST(Numeric, Fp8RowConversionMatchesTheDecodeForEveryCode) {
  for (int D : {256, 40}) {
    std::vector<uint8_t> codes(static_cast<size_t>(D));
    std::vector<float> row(static_cast<size_t>(D));
    for (float scale : {1e-40f, 3e-8f, 0.3f, 1.0f, 7.5e4f, 2e36f}) {
      for (int b0 = 0; b0 < 256; b0 += D) {
        for (int d = 0; d < D; ++d) codes[static_cast<size_t>(d)] = static_cast<uint8_t>((b0 + d) & 0xff);
        cpu::load_row(row.data(), codes.data(), cpu::RowType::fp8, D, scale, 0.0f);
        for (int d = 0; d < D; ++d) {
          const float want = num::e4m3_bits_to_f32(codes[static_cast<size_t>(d)]) * scale;
          const float got = row[static_cast<size_t>(d)];
          ASSERT_TRUE(std::isnan(want) ? std::isnan(got) : to_bits(got) == to_bits(want))
              << "D=" << D << " code 0x" << std::hex << int(codes[static_cast<size_t>(d)]) << std::dec << " scale "
              << scale << ": " << got << " vs " << want << " (" << cpu::isa_name() << ")";
        }
      }
    }
  }
}

// The cpu backend's chunks without f32 tiles (cpu::scores_direct / accumulate_direct, 4, 8 and 12 rows
// at the AVX-512 level) against the tile kernels on load_row's f32 rows, as the backend runs them (fp8
// rows as their values / 2^8 on both paths): bit for bit, which the invariant mode relies on, except S's
// last keys past the 4-key blocks (the tails sum in another order; the invariant mode's tiles have none):
// within roundings. fp8 NaN codes give NaN in the same places; every code appears in the fp8 keys (both
// paths share e4m3x16_f16, which Fp8RowConversionMatchesTheDecodeForEveryCode checks); 35 keys take the
// 4-key blocks and the tail. (u8's direct rows need the backend's fold: the ctests cover them.)
TEST(Numeric, DirectDecodeMatchesTheTiles) {
  constexpr int keys = 35;
  for (cpu::RowType t : {cpu::RowType::f16, cpu::RowType::bf16, cpu::RowType::fp8}) {
    for (int D : {256, 64, 48}) {
      for (int rows : {4, 8, 12}) {
        if (!cpu::has_direct(t, rows, D, D))
          GTEST_SKIP() << "no decode without tiles at this level (" << cpu::isa_name() << ")";
        const uint64_t seed =
            base_seed() + static_cast<uint64_t>(t) * 1000 + static_cast<uint64_t>(D) * 10 + static_cast<uint64_t>(rows);
        SCOPED_TRACE("seed " + std::to_string(seed) + " type " + std::to_string(static_cast<int>(t)) + " D " +
                     std::to_string(D) + " rows " + std::to_string(rows));
        std::mt19937_64 rng(seed);
        std::uniform_real_distribution<float> u(-2.0f, 2.0f);
        const bool fp8 = t == cpu::RowType::fp8;
        const int es = fp8 ? 1 : 2;
        std::vector<uint8_t> kc(static_cast<size_t>(keys) * D * es), vc(kc.size());
        for (size_t i = 0; i < kc.size() / es; ++i) {
          for (std::vector<uint8_t>* c : {&kc, &vc}) {
            if (fp8) {  // every code in the first 256, NaN codes taken out here and put into keys 5 and 22 below
              uint8_t code = static_cast<uint8_t>((i + i / 256 * 11 + (c == &vc ? 128 : 0)) & 0xff);
              if ((code & 0x7f) == 0x7f) code = static_cast<uint8_t>(code - 1);
              (*c)[i] = code;
            } else {
              const float x = u(rng);
              const uint16_t b = t == cpu::RowType::f16 ? num::f32_to_f16_bits(x) : num::f32_to_bf16_bits(x);
              std::memcpy(c->data() + 2 * i, &b, 2);
            }
          }
        }
        if (fp8) {
          kc[static_cast<size_t>(5) * D + 7] = 0x7f;
          vc[static_cast<size_t>(22) * D + static_cast<size_t>(D) - 1] = 0xff;
        }
        const float row_scale = fp8 ? 1.0f / 256.0f : 1.0f;  // the backend's load_tile
        std::vector<float> q(static_cast<size_t>(rows) * D), p(static_cast<size_t>(rows) * keys);
        for (float& x : q) x = u(rng);
        for (size_t i = 0; i < p.size(); ++i) p[i] = i % 7 == 3 ? 0.0f : std::abs(u(rng)) / 2;
        // the tiles
        std::vector<float> kt(static_cast<size_t>(keys) * D), vt(kt.size());
        std::vector<const void*> krow(keys), vrow(keys);
        for (int k = 0; k < keys; ++k) {
          krow[static_cast<size_t>(k)] = kc.data() + static_cast<size_t>(k) * D * es;
          vrow[static_cast<size_t>(k)] = vc.data() + static_cast<size_t>(k) * D * es;
          cpu::load_row(kt.data() + static_cast<size_t>(k) * D, krow[static_cast<size_t>(k)], t, D, row_scale, 0.0f);
          cpu::load_row(vt.data() + static_cast<size_t>(k) * D, vrow[static_cast<size_t>(k)], t, D, row_scale, 0.0f);
        }
        std::vector<float> st(static_cast<size_t>(rows) * keys, NAN), sd(st), ot(static_cast<size_t>(rows) * D, 0.0f),
            od(ot);
        cpu::scores(st.data(), keys, q.data(), rows, kt.data(), keys, D);
        cpu::scores_direct(sd.data(), keys, q.data(), rows, krow.data(), t, keys, D, nullptr);
        cpu::accumulate(ot.data(), p.data(), keys, rows, vt.data(), keys, D);
        cpu::accumulate_direct(od.data(), p.data(), keys, rows, vrow.data(), t, keys, D, nullptr);
        for (int r = 0; r < rows; ++r) {
          for (int k = 0; k < keys; ++k) {
            const size_t i = static_cast<size_t>(r) * keys + k;
            double mag = 0;  // sum of |q k|
            for (int d = 0; d < D; ++d)
              mag +=
                  std::abs(static_cast<double>(q[static_cast<size_t>(r) * D + d]) * kt[static_cast<size_t>(k) * D + d]);
            if (fp8 && k == 5) {
              ASSERT_TRUE(std::isnan(sd[i]) && std::isnan(st[i])) << "row " << r << ": a NaN key code gives NaN";
              continue;
            }
            if (k >= keys / 4 * 4)
              ASSERT_LE(std::abs(sd[i] - st[i]), 1e-6 * mag) << "S row " << r << " key " << k;
            else
              ASSERT_EQ(to_bits(sd[i]), to_bits(st[i])) << "S row " << r << " key " << k;
          }
          for (int d = 0; d < D; ++d) {
            const size_t i = static_cast<size_t>(r) * D + d;
            if (fp8 && d == D - 1 && p[static_cast<size_t>(r) * keys + 22] != 0.0f) {
              ASSERT_TRUE(std::isnan(od[i]) && std::isnan(ot[i])) << "row " << r << ": a NaN value code gives NaN";
              continue;
            }
            ASSERT_EQ(to_bits(od[i]), to_bits(ot[i])) << "O row " << r << " column " << d;
          }
        }
      }
    }
  }
}

// S by vdpbf16ps (cpu::scores_bf16dot) on bf16 queries and bf16 rows, against f64 sums of the same
// products: exact products, so its error is the f32 sums' (<= ~D * 2^-24 of sum |q k|, bounded here by
// 1e-6 of it); every block shape (4 x 4 blocks, the last rows and keys alone); a NaN element gives its
// key's scores NaN and no other.
TEST(Numeric, Bf16DotScoresMatchF64) {
  constexpr int keys = 35;
  for (int D : {256, 64, 32}) {
    if (!cpu::has_bf16dot(D)) GTEST_SKIP() << "no AVX512-BF16 at this level (" << cpu::isa_name() << ")";
    for (int rows : {1, 4, 7, 16, 17}) {
      const uint64_t seed = base_seed() + 7000 + static_cast<uint64_t>(D) * 100 + static_cast<uint64_t>(rows);
      SCOPED_TRACE("seed " + std::to_string(seed) + " D " + std::to_string(D) + " rows " + std::to_string(rows));
      std::mt19937_64 rng(seed);
      std::uniform_real_distribution<float> u(-2.0f, 2.0f);
      std::vector<uint16_t> q(static_cast<size_t>(rows) * D), kc(static_cast<size_t>(keys) * D);
      for (uint16_t& x : q) x = num::f32_to_bf16_bits(u(rng));
      for (uint16_t& x : kc) x = num::f32_to_bf16_bits(u(rng));
      kc[static_cast<size_t>(9) * D + 3] = 0x7fc0;  // NaN in key 9
      std::vector<const void*> krow(keys);
      for (int k = 0; k < keys; ++k) krow[static_cast<size_t>(k)] = kc.data() + static_cast<size_t>(k) * D;
      std::vector<float> s(static_cast<size_t>(rows) * keys, -1.0f);
      cpu::scores_bf16dot(s.data(), keys, q.data(), rows, krow.data(), keys, D, nullptr);
      for (int r = 0; r < rows; ++r)
        for (int k = 0; k < keys; ++k) {
          const float got = s[static_cast<size_t>(r) * keys + k];
          if (k == 9) {
            ASSERT_TRUE(std::isnan(got)) << "row " << r << ": a NaN key element gives NaN";
            continue;
          }
          double ref = 0, mag = 0;
          for (int d = 0; d < D; ++d) {
            const double x = static_cast<double>(num::bf16_bits_to_f32(q[static_cast<size_t>(r) * D + d])) *
                             num::bf16_bits_to_f32(kc[static_cast<size_t>(k) * D + d]);
            ref += x;
            mag += std::abs(x);
          }
          ASSERT_LE(std::abs(got - ref), 1e-6 * mag) << "S row " << r << " key " << k;
        }
    }
  }
}

// The AMX tiles (cpu::amx_*) against f64 sums of the same values: S = q . k from each row type's values
// (f16, bf16, u8 codes - 128, fp8 values / 2^8) with f16 queries (two bf16 parts) and bf16 queries (one),
// O += P V with P in [0, 1]. Each operand is exact in its parts but P (to 2^-17 of each value), and the
// products of two low parts are dropped (< 2^-15 of their product), so the error is bounded by 2^-13 of
// sum |q k| (of sum |p v|, plus O's own f32 rounding). One Amx runs key tiles of 32, 5 and 17 keys in turn
// on scratch filled with 0xff bytes (NaN) and one byte off 64-byte alignment; rows not a multiple of 16
// (padded). The keys past a tile's count have null row pointers (never read); S's entries and P's past
// the keys are NaN-poisoned and must not leak or be written; O's padded rows stay zero.
TEST(Numeric, AmxTilesMatchF64) {
  const cpu::RowType types[] = {cpu::RowType::f16, cpu::RowType::bf16, cpu::RowType::u8, cpu::RowType::fp8};
  constexpr int ld = cpu::kAmxTileKeys;
  for (int D : {64, 256})
    for (int Dv : {32, 128}) {
      if (!cpu::has_amx(cpu::RowType::f16, D, Dv)) GTEST_SKIP() << "no AMX-BF16 here (" << cpu::isa_name() << ")";
      for (cpu::RowType t : types)
        for (int rows : {16, 20, 33, 64})
          for (int qparts : {1, 2}) {
            const int salt = D * 7 + Dv * 3 + rows * 11 + static_cast<int>(t) * 1000 + qparts;
            const uint64_t seed = base_seed() + 9000 + static_cast<uint64_t>(salt);
            SCOPED_TRACE("seed " + std::to_string(seed) + " D " + std::to_string(D) + " Dv " + std::to_string(Dv) +
                         " type " + std::to_string(static_cast<int>(t)) + " rows " + std::to_string(rows) +
                         " qparts " + std::to_string(qparts));
            std::mt19937_64 rng(seed);
            std::uniform_real_distribution<float> u(-2.0f, 2.0f), pu(0.0f, 1.0f);
            const int esize = t == cpu::RowType::f16 || t == cpu::RowType::bf16 ? 2 : 1;
            // n rows' bytes and their values as the tiles read them
            auto make = [&](int n, int width, std::vector<uint8_t>& bytes, std::vector<double>& val) {
              bytes.assign(static_cast<size_t>(n) * width * esize, 0);
              val.assign(static_cast<size_t>(n) * width, 0.0);
              for (int i = 0; i < n * width; ++i) {
                double v = 0;
                if (t == cpu::RowType::f16) {
                  const uint16_t h = num::f32_to_f16_bits(u(rng));
                  std::memcpy(&bytes[static_cast<size_t>(i) * 2], &h, 2);
                  v = num::f16_bits_to_f32(h);
                } else if (t == cpu::RowType::bf16) {
                  const uint16_t h = num::f32_to_bf16_bits(u(rng));
                  std::memcpy(&bytes[static_cast<size_t>(i) * 2], &h, 2);
                  v = num::bf16_bits_to_f32(h);
                } else if (t == cpu::RowType::u8) {
                  bytes[static_cast<size_t>(i)] = static_cast<uint8_t>(rng());
                  v = static_cast<double>(bytes[static_cast<size_t>(i)]) - 128.0;
                } else {
                  uint8_t c = static_cast<uint8_t>(rng());
                  if ((c & 0x7f) == 0x7f) c = 0x3c;  // (no NaN codes)
                  bytes[static_cast<size_t>(i)] = c;
                  v = num::e4m3_bits_to_f32(c) / 256.0;
                }
                val[static_cast<size_t>(i)] = v;
              }
            };
            std::vector<float> q(static_cast<size_t>(rows) * D);
            for (float& x : q)
              x = qparts == 1 ? num::round_bf16(u(rng)) : num::f16_bits_to_f32(num::f32_to_f16_bits(u(rng)));
            std::vector<uint8_t> scratch(cpu::amx_bytes(64, D, Dv) + 128, 0xff);
            cpu::Amx a = cpu::amx_setup(scratch.data() + 1, t, rows, D, Dv, q.data(), qparts);
            std::vector<float> o(static_cast<size_t>(a.rows_pad) * Dv, 0.0f);
            for (int r = 0; r < rows; ++r)
              for (int d = 0; d < Dv; ++d) o[static_cast<size_t>(r) * Dv + d] = u(rng);
            cpu::amx_begin();
            for (int keys : {32, 5, 17}) {
              SCOPED_TRACE("keys " + std::to_string(keys));
              std::vector<uint8_t> kb, vb;
              std::vector<double> kv, vv;
              make(keys, D, kb, kv);
              make(keys, Dv, vb, vv);
              std::vector<const void*> krow(ld, nullptr), vrow(ld, nullptr);
              for (int k = 0; k < keys; ++k) {
                krow[static_cast<size_t>(k)] = kb.data() + static_cast<size_t>(k) * D * esize;
                vrow[static_cast<size_t>(k)] = vb.data() + static_cast<size_t>(k) * Dv * esize;
              }
              std::vector<float> s(static_cast<size_t>(rows) * ld, NAN), pm(static_cast<size_t>(rows) * ld, NAN);
              const std::vector<float> o0 = o;
              cpu::amx_scores(a, s.data(), ld, krow.data(), keys, 1.0f, nullptr);
              for (int r = 0; r < rows; ++r)
                for (int k = 0; k < keys; ++k) pm[static_cast<size_t>(r) * ld + k] = k % 7 == 3 ? 0.0f : pu(rng);
              cpu::amx_accumulate(a, o.data(), pm.data(), ld, vrow.data(), keys, nullptr);
              for (int r = 0; r < rows; ++r)
                for (int k = 0; k < ld; ++k) {
                  const float got = s[static_cast<size_t>(r) * ld + k];
                  if (k >= keys) {
                    ASSERT_TRUE(std::isnan(got)) << "S entry past the keys written: row " << r << " key " << k;
                    continue;
                  }
                  double ref = 0, mag = 0;
                  for (int d = 0; d < D; ++d) {
                    const double x = static_cast<double>(q[static_cast<size_t>(r) * D + d]) *
                                     kv[static_cast<size_t>(k) * D + d];
                    ref += x;
                    mag += std::abs(x);
                  }
                  ASSERT_LE(std::abs(got - ref), std::ldexp(mag, -13) + 1e-30) << "S row " << r << " key " << k;
                }
              for (int r = 0; r < a.rows_pad; ++r)
                for (int d = 0; d < Dv; ++d) {
                  const float got = o[static_cast<size_t>(r) * Dv + d];
                  if (r >= rows) {
                    ASSERT_EQ(got, 0.0f) << "padded row " << r << " column " << d;
                    continue;
                  }
                  double ref = o0[static_cast<size_t>(r) * Dv + d], mag = 0;
                  for (int k = 0; k < keys; ++k) {
                    const double x = static_cast<double>(pm[static_cast<size_t>(r) * ld + k]) *
                                     vv[static_cast<size_t>(k) * Dv + d];
                    ref += x;
                    mag += std::abs(x);
                  }
                  ASSERT_LE(std::abs(got - ref), std::ldexp(mag, -13) + 1e-6 * std::abs(ref))
                      << "O row " << r << " column " << d;
                }
            }
            cpu::amx_end();
          }
    }
}

// What the invariant mode needs of cpu::scores_bf16dot: in whole 4 x 4 blocks (rows and keys multiples of
// 4, as the mode's padded rows and 32-key tiles), a (row, key)'s bits do not depend on how many rows the
// call has or where the row sits among them: a decode's rows against a verify's.
TEST(Numeric, Bf16DotScoresIndependentOfTheRows) {
  constexpr int D = 128, keys = 32, rows = 64;
  if (!cpu::has_bf16dot(D)) GTEST_SKIP() << "no AVX512-BF16 at this level (" << cpu::isa_name() << ")";
  const uint64_t seed = base_seed() + 7999;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<uint16_t> q(static_cast<size_t>(rows) * D), kc(static_cast<size_t>(keys) * D);
  for (uint16_t& x : q) x = num::f32_to_bf16_bits(u(rng));
  for (uint16_t& x : kc) x = num::f32_to_bf16_bits(u(rng));
  std::vector<const void*> krow(keys);
  for (int k = 0; k < keys; ++k) krow[static_cast<size_t>(k)] = kc.data() + static_cast<size_t>(k) * D;
  std::vector<float> all(static_cast<size_t>(rows) * keys);
  cpu::scores_bf16dot(all.data(), keys, q.data(), rows, krow.data(), keys, D, nullptr);
  for (int r0 = 0; r0 < rows; r0 += 4) {  // each 4-row slice alone, as a decode
    std::vector<float> part(static_cast<size_t>(4) * keys);
    cpu::scores_bf16dot(part.data(), keys, q.data() + static_cast<size_t>(r0) * D, 4, krow.data(), keys, D, nullptr);
    for (int r = 0; r < 4; ++r)
      for (int k = 0; k < keys; ++k)
        ASSERT_EQ(to_bits(part[static_cast<size_t>(r) * keys + k]),
                  to_bits(all[static_cast<size_t>(r0 + r) * keys + k]))
            << "row " << r0 + r << " key " << k;
  }
}

// cpu::scores' plain loops (every level's tails and rows outside the AVX-512 blocks) sum q . k in 8
// interleaved lanes combined in a fixed tree, so their bits do not depend on how the compiler vectorizes
// the loop (an `omp simd` reduction summed in as many lanes as the level has, and in one chain without
// OpenMP or under a sanitizer). Checked bit for bit against that order written out here, with the products
// fused (where the level contracts them: FMA) or not; D with and without a tail past the last 8 lanes,
// 4-key groups and single keys.
TEST(Numeric, GenericScoresSumInFixedLanes) {
  const uint64_t seed = base_seed() + 8111;
  SCOPED_TRACE(std::string("seed ") + std::to_string(seed) + ", level " + cpu::isa_name());
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (int D : {72, 100, 256}) {
    constexpr int rows = 3, keys = 7;  // rows < 4: outside the AVX-512 blocks at every D
    std::vector<float> q(static_cast<size_t>(rows) * D), kt(static_cast<size_t>(keys) * D), s(rows * keys);
    for (float& x : q) x = u(rng);
    for (float& x : kt) x = u(rng);
    cpu::scores(s.data(), keys, q.data(), rows, kt.data(), keys, D);
    int differ[2] = {0, 0};  // against the plain and the fused order
    for (int fused = 0; fused < 2; ++fused)
      for (int r = 0; r < rows; ++r)
        for (int k = 0; k < keys; ++k) {
          const float* a = q.data() + static_cast<size_t>(r) * D;
          const float* b = kt.data() + static_cast<size_t>(k) * D;
          float lane[8] = {};
          const int Dl = D - D % 8;
          for (int d = 0; d < D; ++d) {
            float& l = lane[d < Dl ? d % 8 : d - Dl];
            l = fused ? std::fma(a[d], b[d], l) : l + a[d] * b[d];
          }
          const float want = ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
          differ[fused] += to_bits(want) != to_bits(s[static_cast<size_t>(r) * keys + k]);
        }
    EXPECT_TRUE(differ[0] == 0 || differ[1] == 0)
        << "D " << D << ": " << differ[0] << " of " << rows * keys << " scores differ from the plain lane order, "
        << differ[1] << " from the fused one";
  }
}

// cpu::exp2_sum: each p[i] within 2^-21 of 2^(x[i] - m) (0 for -inf and below 2^-125), and the sum
// in the lanes and tree tile.h states (cpu::lane_sum16 over p), bit for bit at every level: an `omp simd`
// reduction summed in as many lanes as the level has (8 at AVX2), or in one chain where the loop stayed scalar.
TEST(Numeric, Exp2SumInFixedLanes) {
  const uint64_t seed = base_seed() + 8222;
  SCOPED_TRACE(std::string("seed ") + std::to_string(seed) + ", level " + cpu::isa_name());
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-30.0f, 0.0f);
  for (int n : {32, 16, 23, 7, 1}) {
    std::vector<float> x(static_cast<size_t>(n)), p(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) x[static_cast<size_t>(i)] = i % 5 == 3 ? -INFINITY : i % 7 == 1 ? -200.0f : u(rng);
    const float m = 0.25f;
    const float sum = cpu::exp2_sum(p.data(), x.data(), n, m);
    float lanes[cpu::kSumLanes] = {};
    const int nl = n - n % cpu::kSumLanes;
    for (int i = 0; i < n; ++i) {
      const double t = static_cast<double>(x[static_cast<size_t>(i)]) - m;
      const double want = t < -125.0 ? 0.0 : std::exp2(t);  // (2^t below 2^-125 is taken as 0)
      EXPECT_LE(std::fabs(p[static_cast<size_t>(i)] - want), want * 0x1p-21) << "n " << n << " i " << i;
      lanes[i < nl ? i % cpu::kSumLanes : i - nl] += p[static_cast<size_t>(i)];
    }
    const float want = cpu::lane_sum16(lanes);
    EXPECT_EQ(to_bits(sum), to_bits(want)) << "n " << n << ": " << sum << " vs " << want;
  }
}

// The cpu backend's f16 row conversion (cpu::load_row: vcvtph2ps 8 or 16 at a time at the AVX2 / AVX-512
// levels for D a multiple of 8 / 16, else the scalar loop) against the bit-level decode, for every f16
// bit pattern: subnormals, infinities and NaNs included.
TEST(Numeric, F16RowConversionMatchesTheDecodeForEveryCode) {
  for (int D : {256, 40, 12}) {
    std::vector<uint16_t> codes(static_cast<size_t>(D));
    std::vector<float> row(static_cast<size_t>(D));
    for (int b0 = 0; b0 < 65536; b0 += D) {
      for (int d = 0; d < D; ++d) codes[static_cast<size_t>(d)] = static_cast<uint16_t>((b0 + d) & 0xffff);
      cpu::load_row(row.data(), codes.data(), cpu::RowType::f16, D, 1.0f, 0.0f);
      for (int d = 0; d < D; ++d) {
        const float want = num::f16_bits_to_f32(codes[static_cast<size_t>(d)]);
        const float got = row[static_cast<size_t>(d)];
        ASSERT_TRUE(std::isnan(want) ? std::isnan(got) : to_bits(got) == to_bits(want))
            << "D=" << D << " f16 0x" << std::hex << codes[static_cast<size_t>(d)] << std::dec << ": " << got
            << " vs " << want << " (" << cpu::isa_name() << ")";
      }
    }
  }
}

// --- u8 quantisation --------------------------------------------------------------------------------

namespace {
// Directed rounding to f16 from the brute-force table: the largest f16 <= x / the smallest f16 >= x
// (x finite and within the f16 range). Returns the value (the bits are checked through it).
double f16_down(double x) {
  const auto& mag = f16_format().mag;
  if (x >= 0) return *(std::upper_bound(mag.begin(), mag.end() - 1, x) - 1);
  return -*std::lower_bound(mag.begin(), mag.end() - 1, -x);
}
double f16_up(double x) { return -f16_down(-x); }

// The params.h formula, written out again with the brute-force f16 reference.
struct RefU8 {
  float scale, min;
};
float clamp16(float v) { return std::isnan(v) ? -65504.0f : std::min(65504.0f, std::max(-65504.0f, v)); }
RefU8 ref_u8_params(const std::vector<float>& x) {
  float mn = x[0], mx = x[0];
  for (float v : x) {
    mn = clamp16(v) < clamp16(mn) ? v : mn;
    mx = clamp16(v) > clamp16(mx) ? v : mx;
  }
  RefU8 r;
  r.min = static_cast<float>(f16_down(clamp16(mn)));
  const float s = (clamp16(mx) - r.min) / 255.0f;
  r.scale = s > 0.0f ? static_cast<float>(f16_up(s)) : 0.0f;
  while (r.min + 255.0f * r.scale > 65504.0f) r.scale = static_cast<float>(f16_down(std::nextafter(r.scale, 0.0f)));
  return r;
}
// the row's range after clamping, measured from its stored (rounded down) minimum
double ref_range(const std::vector<float>& x) {
  float mx = clamp16(x[0]);
  for (float v : x) mx = std::max(mx, clamp16(v));
  return static_cast<double>(mx) - ref_u8_params(x).min;
}
uint8_t ref_u8_code(float x, const RefU8& p) {
  if (p.scale == 0.0f) return 0;
  volatile float d = clamp16(x) - p.min, inv = 1.0f / p.scale;  // (volatile: no contraction)
  volatile float prod = d * inv;
  float v = std::nearbyint(static_cast<float>(prod));
  return static_cast<uint8_t>(std::min(255.0f, std::max(0.0f, v)));
}
num::U8Params row_params(const std::vector<float>& x) {
  return num::u8_params(*std::min_element(x.begin(), x.end()), *std::max_element(x.begin(), x.end()));
}
// Quantises x and checks the promise of params.h: finite parameters, bits equal to the reference
// formula, and every element read back (min + code * scale, in double) within half a step of its
// input (clamped to the f16 range), plus f32 rounding of the input's magnitude.
void check_row(const std::vector<float>& x, const std::string& what) {
  const RefU8 ref = ref_u8_params(x);
  const num::U8Params p = row_params(x);
  ASSERT_TRUE(std::isfinite(p.scale) && std::isfinite(p.min)) << what;
  ASSERT_EQ(p.scale, ref.scale) << what;
  ASSERT_EQ(p.min, ref.min) << what;
  ASSERT_EQ(num::f16_bits_to_f32(p.scale_bits), p.scale) << what;
  ASSERT_EQ(num::f16_bits_to_f32(p.min_bits), p.min) << what;
  ASSERT_GE(p.scale, 0.0f) << what;
  for (size_t d = 0; d < x.size(); ++d) {
    const uint8_t q = num::u8_quantize(x[d], p);
    ASSERT_EQ(q, ref_u8_code(x[d], ref)) << what << " d " << d << " x=" << x[d];
    const double back = static_cast<double>(p.min) + static_cast<double>(q) * p.scale;
    const double err = std::fabs(back - clamp16(x[d]));
    ASSERT_LE(std::fabs(back), 65504.0) << what << " d " << d << ": reads back beyond the f16 range";
    const bool stepped_down = p.scale > 0.0f && static_cast<double>(p.scale) * 255.0 < ref_range(x);
    ASSERT_LE(err, (stepped_down ? 0.75 : 0.5) * p.scale * (1 + 1e-4) + 1e-6 * std::fabs(static_cast<double>(clamp16(x[d]))))
        << what << " d " << d << " x=" << x[d] << " back=" << back << " scale=" << p.scale;
    ASSERT_TRUE(std::isfinite(num::u8_dequantize(q, p.scale, p.min))) << what;
  }
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
    check_row(x, "row " + std::to_string(row));
  }
}

// Section 2 of the u8 rule: rows that broke the earlier zero-point format (a zero point of -255000
// stored as -inf gave NaN) and every other corner: all within half a step, all parameters finite.
TEST(Numeric, U8EdgeRowsStayFiniteAndWithinHalfAStep) {
  std::mt19937_64 g(base_seed() + 4);
  std::uniform_real_distribution<float> u01(0.0f, 1.0f);
  auto row = [&](float lo, float width, int D) {
    std::vector<float> x(D);
    for (float& v : x) v = lo + width * u01(g);
    return x;
  };
  check_row(row(100.0f, 0.1f, 128), "[100, 100.1)");
  check_row(row(-100.1f, 0.1f, 128), "[-100.1, -100)");
  check_row(row(10.0f, 0.1f, 64), "[10, 10.1)");
  check_row(row(65000.0f, 504.0f, 256), "[65000, 65504)");
  check_row(row(-65504.0f, 131008.0f, 256), "[-65504, 65504)");
  check_row(row(-65504.0f, 1.0f, 128), "[-65504, -65503)");
  check_row(row(60000.0f, 1e-2f, 128), "[60000, 60000.01)");
  check_row(row(0.0f, 1e-6f, 128), "subnormal range [0, 1e-6)");
  check_row(row(-3e-7f, 6e-7f, 128), "subnormal range around 0");
  check_row(row(1.0f, 1e-6f, 128), "range below f16 resolution at 1");
  check_row(row(1e-30f, 1e-30f, 64), "f32 subnormal range");
  for (float c : {0.0f, -0.0f, 0.3f, 7.0f, -1000.0f, 1.0e-3f, 100.05f, 65504.0f, -65504.0f, 1e-7f}) {
    std::vector<float> x(128, c);
    check_row(x, "constant " + std::to_string(c));
    const num::U8Params p = row_params(x);
    if (f16_down(c) == c) {  // a constant f16 row: scale 0, codes 0, reads back exactly
      EXPECT_EQ(p.scale, 0.0f) << "c=" << c;
      EXPECT_EQ(num::u8_quantize(c, p), 0);
      EXPECT_EQ(num::u8_dequantize(0, p.scale, p.min), c);
    } else {  // min rounds below c: a step of (c - min) / 255 or more, c reads back within half of it
      EXPECT_GT(p.scale, 0.0f) << "c=" << c;
    }
  }
  // beyond the f16 range (f32 or bf16 inputs), inf and NaN: saturate to +-65504 (NaN: -65504)
  std::vector<float> big = {1e6f, -1e6f, 3.0f, std::numeric_limits<float>::infinity()};
  check_row(big, "beyond f16 range");
  const num::U8Params pb = row_params(big);
  EXPECT_EQ(pb.min, -65504.0f);
  EXPECT_EQ(num::u8_quantize(1e6f, pb), 255);
  std::vector<float> with_nan = {1.0f, 2.0f, std::numeric_limits<float>::quiet_NaN()};
  const num::U8Params pn = num::u8_params(-std::numeric_limits<float>::quiet_NaN(), 2.0f);
  EXPECT_TRUE(std::isfinite(pn.min) && std::isfinite(pn.scale));
  EXPECT_EQ(num::u8_quantize(std::numeric_limits<float>::quiet_NaN(), pn), 0);  // NaN -> -65504 -> code 0
}

TEST(Numeric, U8AllNegativeRow) {
  std::vector<float> x(256);
  for (int d = 0; d < 256; ++d) x[d] = -2.0f + static_cast<float>(d) / 255.0f;  // [-2, -1]
  const num::U8Params p = row_params(x);
  EXPECT_EQ(p.min, -2.0f);
  EXPECT_EQ(num::u8_quantize(x.front(), p), 0);
  EXPECT_EQ(num::u8_quantize(x.back(), p), 255);
  uint8_t prev = 0;
  for (float v : x) {
    const uint8_t q = num::u8_quantize(v, p);
    EXPECT_GE(q, prev);  // monotone
    prev = q;
    EXPECT_LE(std::fabs(num::u8_dequantize(q, p.scale, p.min) - v), 0.5f * p.scale);  // within half a step
  }
}

TEST(Numeric, U8RoundsHalfToEvenAndClamps) {
  num::U8Params p{0x3c00, 0x0000, 1.0f, 0.0f, 1.0f};  // scale 1, min 0
  EXPECT_EQ(num::u8_quantize(2.5f, p), 2);
  EXPECT_EQ(num::u8_quantize(3.5f, p), 4);
  EXPECT_EQ(num::u8_quantize(254.5f, p), 254);
  EXPECT_EQ(num::u8_quantize(-3.0f, p), 0);
  EXPECT_EQ(num::u8_quantize(300.0f, p), 255);
  EXPECT_EQ(num::u8_dequantize(200, 0.5f, 100.0f), 200.0f);
}
