// A second, independent check of the CPU oracle. For each random case: run oracle::write_kv, check
// every written slot against the params.h rules (and that nothing else in the cache changed), then
// read the cache back into dense per-sequence K/V, compute attention in double with this file's own
// mask logic, and compare with oracle::attention.
//
// Seeds: PAGEDATTN_SEED overrides the base seed (printed); PAGEDATTN_CASES the number of random cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "common/numeric.h"
#include "cpu/oracle.h"
#include "testing/case.h"

using namespace pagedattn;
namespace pt = pagedattn::testing;
using pt::Case;
using pt::CaseConfig;

namespace {

uint64_t base_seed() { return pagedattn::testing::base_seed("test_oracle", 20250601ull); }

int num_cases(int dflt) {
  const char* env = std::getenv("PAGEDATTN_CASES");
  return env ? std::max(1, std::atoi(env)) : dflt;
}

// The sweep covers the brief's ranges (1-8 sequences, past 0..3000, T 1..40, G 1..8, D 64..256, block
// 16..64) through four profiles, each capped so that the whole suite stays well under a minute on one
// core: the cost of a case is sum_s T_s * ctx_s * H * D.
CaseConfig sweep_config(int k = 3) {
  CaseConfig cfg;
  switch (k % 4) {
    case 0:  // long context, decode and short speculation
      cfg.max_seqs = 2;
      cfg.max_tokens = 8;
      cfg.max_total_tokens = 8;
      break;
    case 1:  // wide ragged batch, short contexts, long T
      cfg.max_past = 300;
      cfg.max_total_tokens = 64;
      cfg.max_total_context = 800;
      break;
    case 2:  // long T over a long context
      cfg.max_seqs = 2;
      cfg.max_total_tokens = 40;
      cfg.max_total_context = 3100;
      cfg.max_past = 3000;
      break;
    default:  // the full ranges, tightly capped
      cfg.max_total_tokens = 12;
      cfg.max_total_context = 3200;
      break;
  }
  return cfg;
}

// --- reading the cache independently of the oracle ------------------------------------------------

double f16_value(uint16_t b) { return num::f16_bits_to_f32(b); }  // checked exhaustively in test_numeric

double cache_value(const Case& c, const std::vector<uint8_t>& data, const std::vector<uint16_t>& scale,
                   const std::vector<uint16_t>& min, int64_t row, int d) {
  const int64_t i = row * (&data == &c.value_cache ? c.Dv() : c.head_size) + d;
  switch (c.kv) {
    case KVPrecision::f16: {
      uint16_t b;
      std::memcpy(&b, &data[2 * i], 2);
      return f16_value(b);
    }
    case KVPrecision::bf16: {
      uint32_t u = static_cast<uint32_t>(data[2 * i]) << 16 | static_cast<uint32_t>(data[2 * i + 1]) << 24;
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    }
    case KVPrecision::u8: {
      // the read-back rule of params.h: min + q * scale, in double
      const double q = data[i], mn = num::f16_bits_to_f32(min[row]), sc = num::f16_bits_to_f32(scale[row]);
      return mn + q * sc;
    }
    case KVPrecision::fp8: {
      // e4m3(code) * the kv head's scale ([Hk] or [1]); e4m3_bits_to_f32 is checked exhaustively in test_numeric
      const int kh = static_cast<int>((row / c.block_size) % c.num_kv_heads);
      const std::vector<float>& sc = &data == &c.key_cache ? c.key_scale_fp8 : c.value_scale_fp8;
      return static_cast<double>(num::e4m3_bits_to_f32(data[i])) * sc[sc.size() == 1 ? 0 : kh];
    }
  }
  return 0;
}

// Row index (block, kv head, slot) of position pos of sequence s.
int64_t cache_row(const Case& c, int s, int pos, int kh) {
  const int block = c.block_indices[c.block_indices_begins[s] + pos / c.block_size];
  return (static_cast<int64_t>(block) * c.num_kv_heads + kh) * c.block_size + pos % c.block_size;
}

struct Dense {
  std::vector<float> out;     // [num_tokens, H*D]
  std::vector<float> scores;  // [sum ctx]
};

// Attention in double over dense K/V, with its own mask logic: the visible keys of query position i
// are the range [first, i] (window), minus new tokens that are not ancestors in the tree.
Dense dense_attention(const Case& c) {
  const int H = c.num_heads, Hk = c.num_kv_heads, D = c.head_size, Dv = c.Dv(), G = H / Hk;
  const double scale = c.scale > 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(D));
  Dense r;
  r.out.assign(static_cast<size_t>(c.num_tokens) * H * Dv, 0.0f);
  for (int s = 0; s < c.num_seqs; ++s) {
    const int past = c.past_lens[s], T = c.T(s), n = c.ctx(s), tok0 = c.subsequence_begins[s];
    // materialise K: [Hk][n][D], V: [Hk][n][Dv]
    std::vector<double> K(static_cast<size_t>(Hk) * n * D), V(static_cast<size_t>(Hk) * n * Dv);
    // (positions before the first new token's window: seen by no token, their blocks may be freed)
    const int lo = c.sliding_window > 0 ? std::max(0, past - c.sliding_window + 1) : 0;
    for (int kh = 0; kh < Hk; ++kh)
      for (int pos = lo; pos < n; ++pos) {
        const int64_t row = cache_row(c, s, pos, kh);
        for (int d = 0; d < D; ++d)
          K[(static_cast<size_t>(kh) * n + pos) * D + d] = cache_value(c, c.key_cache, c.key_scale, c.key_min, row, d);
        for (int d = 0; d < Dv; ++d)
          V[(static_cast<size_t>(kh) * n + pos) * Dv + d] =
              cache_value(c, c.value_cache, c.value_scale, c.value_min, row, d);
      }
    std::vector<double> seq_scores(n, 0.0);
    const int w = c.score_window.empty() ? 1 : c.score_window[s];  // scores: the last w new tokens
    for (int t = 0; t < T; ++t) {
      const bool scored = w < 0 || t >= T - w;
      const int i = past + t;
      const int first = c.sliding_window > 0 ? std::max(0, i - c.sliding_window + 1) : 0;
      std::vector<int> keys;
      for (int j = first; j < std::min(past, i + 1); ++j) keys.push_back(j);  // cached prefix
      for (int u = std::max(0, first - past); u <= t; ++u) {                 // new tokens
        const bool in_tree = c.qq_bias.empty() || c.qq_bias[c.qq_bias_begins[s] + static_cast<size_t>(t) * T + u] == 1;
        if (in_tree) keys.push_back(past + u);
      }
      for (int h = 0; h < H; ++h) {
        const int kh = h / G;
        std::vector<double> q(D);
        for (int d = 0; d < D; ++d)
          q[d] = pt::load_as_float(c.query.data(), c.qdtype, (static_cast<int64_t>(tok0) + t) * H * D + h * D + d);
        std::vector<double> logit(keys.size());
        double m = c.sinks.empty() ? -std::numeric_limits<double>::infinity() : c.sinks[h];
        for (size_t k = 0; k < keys.size(); ++k) {
          const double* kr = &K[(static_cast<size_t>(kh) * n + keys[k]) * D];
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += q[d] * kr[d];
          logit[k] = dot * scale;
          if (!c.alibi_slopes.empty()) logit[k] -= c.alibi_slopes[h] * static_cast<double>(i - keys[k]);
          m = std::max(m, logit[k]);
        }
        double z = c.sinks.empty() ? 0.0 : std::exp(c.sinks[h] - m);
        for (double l : logit) z += std::exp(l - m);
        const double lse = m + std::log(z);
        std::vector<double> o(Dv, 0.0);
        for (size_t k = 0; k < keys.size(); ++k) {
          const double p = std::exp(logit[k] - lse);
          if (scored) seq_scores[keys[k]] += p;
          const double* vr = &V[(static_cast<size_t>(kh) * n + keys[k]) * Dv];
          for (int d = 0; d < Dv; ++d) o[d] += p * vr[d];
        }
        for (int d = 0; d < Dv; ++d)
          r.out[(static_cast<size_t>(tok0) + t) * H * Dv + static_cast<size_t>(h) * Dv + d] = static_cast<float>(o[d]);
      }
    }
    for (double v : seq_scores) r.scores.push_back(static_cast<float>(v));
  }
  return r;
}

// --- write_kv check -------------------------------------------------------------------------------

struct Snapshot {
  std::vector<uint8_t> key_cache, value_cache;
  std::vector<uint16_t> key_scale, key_min, value_scale, value_min;
  explicit Snapshot(const Case& c)
      : key_cache(c.key_cache), value_cache(c.value_cache), key_scale(c.key_scale), key_min(c.key_min),
        value_scale(c.value_scale), value_min(c.value_min) {}
};

uint16_t f16_bits_of(float x) {
#if defined(__FLT16_MAX__)
  _Float16 h = static_cast<_Float16>(x);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
#else
  return num::f32_to_f16_bits(x);
#endif
}

// Checks one written row of a key (or value) against the new token's row x (as float).
void check_written_row(const Case& c, const char* what, const std::vector<uint8_t>& data,
                       const std::vector<uint16_t>& scale, const std::vector<uint16_t>& min, int64_t row,
                       const std::vector<float>& x, const uint8_t* raw_input, int* failures) {
  const int D = static_cast<int>(x.size());  // the key or the value head size
  auto fail = [&](const std::string& msg) {
    if ((*failures)++ < 5) ADD_FAILURE() << c.describe() << "\n  " << what << " row " << row << ": " << msg;
  };
  if (c.kv == KVPrecision::u8) {
    // params.h: values clamped to the f16 range, min rounded down to f16, scale rounded up
    auto clamp16 = [](float v) { return std::min(65504.0f, std::max(-65504.0f, v)); };
    float mn = clamp16(x[0]), mx = clamp16(x[0]);
    for (float v : x) mn = std::min(mn, clamp16(v)), mx = std::max(mx, clamp16(v));
    uint16_t mb = f16_bits_of(mn);
    if (num::f16_bits_to_f32(mb) > mn) mb = (mb & 0x8000) ? mb + 1 : (mb == 0 ? 0x8001 : mb - 1);
    const float mf = num::f16_bits_to_f32(mb);
    const float s = (mx - mf) / 255.0f;
    uint16_t sb = s > 0.0f ? f16_bits_of(s) : 0;
    if (num::f16_bits_to_f32(sb) < s) ++sb;
    while (mf + 255.0f * num::f16_bits_to_f32(sb) > 65504.0f) --sb;  // the top stays in f16's range
    const float sf = num::f16_bits_to_f32(sb);
    if (scale[row] != sb) fail("scale bits " + std::to_string(scale[row]) + " != " + std::to_string(sb));
    if (min[row] != mb) fail("min bits " + std::to_string(min[row]) + " != " + std::to_string(mb));
    for (int d = 0; d < D; ++d) {
      volatile float diff = clamp16(x[d]) - mf, inv = sf == 0.0f ? 0.0f : 1.0f / sf;  // no contraction
      volatile float prod = diff * inv;
      const float v = std::nearbyint(static_cast<float>(prod));
      const uint8_t code = static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
      if (data[row * D + d] != code) {
        fail("code at d=" + std::to_string(d) + " is " + std::to_string(data[row * D + d]) + ", want " +
             std::to_string(code));
        return;
      }
    }
    return;
  }
  if (c.kv == KVPrecision::fp8) {  // params.h: e4m3(x / scale) of the row's kv head (f32 division)
    const int kh = static_cast<int>((row / c.block_size) % c.num_kv_heads);
    const std::vector<float>& scs = &data == &c.key_cache ? c.key_scale_fp8 : c.value_scale_fp8;
    const float sc = scs[scs.size() == 1 ? 0 : kh];
    for (int d = 0; d < D; ++d) {
      volatile float q = x[d] / sc;  // rounded to f32, as the write-in's
      const uint8_t want = num::f32_to_e4m3_bits(q);
      if (data[row * D + d] != want) {
        fail("code at d=" + std::to_string(d) + " is " + std::to_string(data[row * D + d]) + ", want " +
             std::to_string(want) + " (input " + std::to_string(x[d]) + ", scale " + std::to_string(sc) + ")");
        return;
      }
    }
    return;
  }
  const bool same_dtype = (c.kv == KVPrecision::f16 && c.qdtype == DType::f16) ||
                          (c.kv == KVPrecision::bf16 && c.qdtype == DType::bf16);
  for (int d = 0; d < D; ++d) {
    uint16_t got;
    std::memcpy(&got, &data[2 * (row * D + d)], 2);
    uint16_t want;
    if (same_dtype)
      std::memcpy(&want, raw_input + 2 * d, 2);  // bit-exact round trip
    else
      want = c.kv == KVPrecision::f16 ? f16_bits_of(x[d]) : num::f32_to_bf16_bits(x[d]);
    if (got != want) {
      fail("element d=" + std::to_string(d) + " bits " + std::to_string(got) + " != " + std::to_string(want) +
           " (input " + std::to_string(x[d]) + ")");
      return;
    }
  }
}

// Runs oracle::write_kv on `c` and checks it. Returns the number of failures.
int check_write_kv(Case& c) {
  const Snapshot before(c);
  Params p = c.params();
  oracle::write_kv(p);
  int failures = 0;
  const int Hk = c.num_kv_heads, D = c.head_size, Dv = c.Dv();
  const int64_t rows = static_cast<int64_t>(c.num_blocks) * Hk * c.block_size;
  std::vector<char> written(rows, 0);
  if (c.write_kv) {
    const size_t qsz = dtype_size(c.qdtype);
    std::vector<float> x(D), xv(Dv);
    for (int s = 0; s < c.num_seqs; ++s)
      for (int t = 0; t < c.T(s); ++t) {
        const int tok = c.subsequence_begins[s] + t;
        for (int kh = 0; kh < Hk; ++kh) {
          const int64_t row = cache_row(c, s, c.past_lens[s] + t, kh);
          written[row] = 1;
          const int64_t in0 = static_cast<int64_t>(tok) * Hk * D + static_cast<int64_t>(kh) * D;
          for (int d = 0; d < D; ++d) x[d] = pt::load_as_float(c.key.data(), c.qdtype, in0 + d);
          check_written_row(c, "key", c.key_cache, c.key_scale, c.key_min, row, x, &c.key[in0 * qsz], &failures);
          const int64_t v0 = (static_cast<int64_t>(tok) * Hk + kh) * Dv;
          for (int d = 0; d < Dv; ++d) xv[d] = pt::load_as_float(c.value.data(), c.qdtype, v0 + d);
          check_written_row(c, "value", c.value_cache, c.value_scale, c.value_min, row, xv, &c.value[v0 * qsz],
                            &failures);
        }
      }
  }
  // nothing else changed, byte for byte
  const size_t es = c.kv == KVPrecision::u8 || c.kv == KVPrecision::fp8 ? 1 : 2;
  const size_t kbytes = static_cast<size_t>(D) * es, vbytes = static_cast<size_t>(Dv) * es;
  for (int64_t row = 0; row < rows; ++row) {
    if (written[row]) continue;
    bool same = std::memcmp(&before.key_cache[row * kbytes], &c.key_cache[row * kbytes], kbytes) == 0 &&
                std::memcmp(&before.value_cache[row * vbytes], &c.value_cache[row * vbytes], vbytes) == 0;
    if (c.kv == KVPrecision::u8)
      same = same && before.key_scale[row] == c.key_scale[row] && before.key_min[row] == c.key_min[row] &&
             before.value_scale[row] == c.value_scale[row] && before.value_min[row] == c.value_min[row];
    if (!same && failures++ < 5) ADD_FAILURE() << c.describe() << "\n  write_kv changed cache row " << row << " it must not write";
  }
  return failures;
}

// Runs write_kv + attention on the case and compares with the dense reference; returns failures.
// `tol` bounds the largest relative error, or with `l2` the relative L2 error of the whole output (rows
// whose values span +-65504 cancel to small outputs, where the oracle's float read-back of each value
// is the error that remains).
int check_case(Case& c, double tol, bool l2 = false) {
  int failures = check_write_kv(c);
  Params p = c.params();
  oracle::attention(p);
  const Dense ref = dense_attention(c);
  const auto cmp = pt::compare(c.out.data(), c.qdtype, ref.out.data(), static_cast<int64_t>(ref.out.size()));
  if (cmp.nan_count != 0 || !((l2 ? cmp.rel_l2 : cmp.max_rel_err) <= tol)) {
    ++failures;
    ADD_FAILURE() << c.describe() << "\n  out: " << cmp.describe() << " (tolerance " << tol << ")";
  }
  if (c.want_scores) {
    const auto cs = pt::compare(reinterpret_cast<const uint8_t*>(c.scores.data()), DType::f32, ref.scores.data(),
                                     static_cast<int64_t>(ref.scores.size()));
    if (cs.nan_count != 0 || !(cs.max_rel_err <= 1e-5)) {
      ++failures;
      ADD_FAILURE() << c.describe() << "\n  scores: " << cs.describe();
    }
  }
  return failures;
}

}  // namespace

// --- the sweep ------------------------------------------------------------------------------------

TEST(Oracle, MatchesDenseReferenceF32) {
  const int n = num_cases(500);
  const auto t0 = std::chrono::steady_clock::now();
  int failing_cases = 0;
  for (int k = 0; k < n && failing_cases < 5; ++k) {
    Case c = pt::make_random_case(base_seed() + k, sweep_config(k));
    if (check_case(c, 1e-5) > 0) ++failing_cases;
  }
  EXPECT_EQ(failing_cases, 0);
  std::printf("  %d cases in %.1f s\n", n,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

TEST(Oracle, MatchesDenseReferenceF16BF16Queries) {
  for (DType qt : {DType::f16, DType::bf16}) {
    // tolerance: the output's own rounding (half an ulp relative: 2^-11 f16, 2^-8 bf16), with margin
    const double tol = qt == DType::f16 ? 1e-3 : 8e-3;
    int failing_cases = 0;
    for (int k = 0; k < num_cases(500) / 5 && failing_cases < 5; ++k) {
      CaseConfig cfg = sweep_config(k);
      cfg.query_dtypes = {qt};
      Case c = pt::make_random_case(base_seed() + 100000 + k + (qt == DType::bf16 ? 50000 : 0), cfg);
      if (check_case(c, tol) > 0) ++failing_cases;
    }
    EXPECT_EQ(failing_cases, 0) << dtype_name(qt);
  }
}

// u8 rows at the corners of the rule (far from zero, constant, subnormal ranges, values up to 65504),
// written in by the op: the written parameters and codes follow params.h (check_write_kv), and the output
// is finite and matches the dense reference. (The rows far from zero gave NaN with the earlier f16 zero
// point, which overflowed to -inf.)
TEST(Oracle, U8EdgeRowsWrittenInStayFiniteAndExact) {
  for (DType qt : {DType::f32, DType::f16, DType::bf16}) {
    const double tol = qt == DType::f32 ? 1e-5 : qt == DType::f16 ? 1e-3 : 8e-3;
    int failing_cases = 0;
    for (int k = 0; k < num_cases(500) / 10 && failing_cases < 5; ++k) {
      CaseConfig cfg = sweep_config(k);
      cfg.query_dtypes = {qt};
      cfg.kv_precisions = {KVPrecision::u8};
      cfg.p_write = 1.0;
      const uint64_t seed = base_seed() + 200000 + k + (qt == DType::f32 ? 0 : qt == DType::f16 ? 30000 : 60000);
      Case c = pt::make_random_case(seed, cfg);
      pt::apply_edge_rows(c, seed);
      if (check_case(c, tol, /*l2=*/true) > 0) ++failing_cases;
    }
    EXPECT_EQ(failing_cases, 0) << dtype_name(qt);
  }
}

// fp8 caches (e4m3 with an f32 scale per kv head or one for the cache): the oracle against the dense
// reference; check_case's write-in check holds every new element to e4m3(x / scale) of its own head.
TEST(Oracle, Fp8MatchesDenseReference) {
  for (DType qt : {DType::f32, DType::f16, DType::bf16}) {
    const double tol = qt == DType::f32 ? 1e-5 : qt == DType::f16 ? 1e-3 : 8e-3;
    int failing_cases = 0;
    for (int k = 0; k < num_cases(500) / 5 && failing_cases < 5; ++k) {
      CaseConfig cfg = sweep_config(k);
      cfg.query_dtypes = {qt};
      cfg.kv_precisions = {KVPrecision::fp8};
      const uint64_t seed = base_seed() + 300000 + k + (qt == DType::f32 ? 0 : qt == DType::f16 ? 30000 : 60000);
      Case c = pt::make_random_case(seed, cfg);
      if (check_case(c, tol, /*l2=*/true) > 0) ++failing_cases;
    }
    EXPECT_EQ(failing_cases, 0) << dtype_name(qt);
  }
}

// A value head size Dv other than the key head size D (DeepSeek-style: values narrower than keys): the
// oracle against the dense reference, every KV precision, the write-in of both row sizes.
TEST(Oracle, ValueHeadSizeDiffersFromKeyHeadSize) {
  int failing_cases = 0, drawn = 0;
  for (int k = 0; k < num_cases(500) / 5 && failing_cases < 5; ++k) {
    CaseConfig cfg = sweep_config(k);
    cfg.head_sizes = {64, 128, 192};
    cfg.value_head_sizes = {16, 48, 64, 128};
    cfg.p_value_head_size = 1.0;
    cfg.kv_precisions = {KVPrecision::f16, KVPrecision::bf16, KVPrecision::u8, KVPrecision::fp8};
    Case c = pt::make_random_case(base_seed() + 400000 + k, cfg);
    drawn += c.Dv() != c.head_size;
    if (check_case(c, 1e-5, /*l2=*/true) > 0) ++failing_cases;
  }
  EXPECT_EQ(failing_cases, 0);
  EXPECT_GT(drawn, 0);
}

// Without sinks each (token, head) row of weights sums to 1: sequence s's scores sum to H times the
// tokens counted (score_aggregation_window: the last w_s; absent: 1).
TEST(Oracle, ScoresSumToHeadsTimesTokens) {
  for (int k = 0; k < 60; ++k) {
    CaseConfig cfg = sweep_config(k);
    cfg.p_sinks = 0.0;
    cfg.p_scores = 1.0;
    Case c = pt::make_random_case(base_seed() + 200000 + k, cfg);
    oracle::forward(c.params());
    int64_t at = 0;
    for (int s = 0; s < c.num_seqs; ++s) {
      double sum = 0;
      for (int j = 0; j < c.ctx(s); ++j) sum += c.scores[at + j];
      at += c.ctx(s);
      const int w = c.score_window.empty() ? 1 : c.score_window[s];  // tokens whose weights count
      const double want = static_cast<double>(c.num_heads) * (w < 0 || w >= c.T(s) ? c.T(s) : w);
      ASSERT_NEAR(sum, want, 1e-5 * std::max(1.0, want)) << c.describe() << " sequence " << s;
    }
    ASSERT_EQ(at, static_cast<int64_t>(c.scores.size()));
  }
}

// --- hand-made cases: the semantics pinned by numbers that need no reference ---------------------

namespace {
// One sequence, f32 queries, f16 cache, no write-in: the caller fills the cache.
Case tiny_case(int past, int T, int D = 64) {
  CaseConfig cfg;
  cfg.min_seqs = cfg.max_seqs = 1;
  cfg.min_past = cfg.max_past = past;
  cfg.min_tokens = cfg.max_tokens = T;
  cfg.group_sizes = {1};
  cfg.kv_heads = {1};
  cfg.head_sizes = {D};
  cfg.block_sizes = {16};
  cfg.kv_precisions = {KVPrecision::f16};
  cfg.p_window = cfg.p_alibi = cfg.p_sinks = cfg.p_tree = cfg.p_scores = cfg.p_write = 0.0;
  Case c = pt::make_random_case(base_seed() + 300000, cfg);
  c.scale = 0.0f;
  return c;
}
float out_at(const Case& c, int64_t i) { return pt::load_as_float(c.out.data(), c.qdtype, i); }
float value_at(const Case& c, int pos, int d) {
  const int64_t row = cache_row(c, 0, pos, 0);
  return num::f16_bits_to_f32(reinterpret_cast<const uint16_t*>(c.value_cache.data())[row * c.head_size + d]);
}
}  // namespace

TEST(Oracle, SingleKeyReturnsItsValue) {
  Case c = tiny_case(0, 1);
  oracle::forward(c.params());
  for (int d = 0; d < c.head_size; ++d) ASSERT_EQ(out_at(c, d), value_at(c, 0, d)) << "d=" << d;
}

TEST(Oracle, WindowOfOneReturnsOwnValue) {
  Case c = tiny_case(37, 3);
  c.sliding_window = 1;
  oracle::forward(c.params());
  for (int t = 0; t < 3; ++t)
    for (int d = 0; d < c.head_size; ++d)
      ASSERT_EQ(out_at(c, t * c.head_size + d), value_at(c, 37 + t, d)) << "t=" << t << " d=" << d;
}

TEST(Oracle, EqualKeysAverageTheValuesAndSinkScales) {
  Case c = tiny_case(20, 1);
  // all keys zero: every score is 0, the weights are uniform over the 21 visible keys
  std::fill(c.key_cache.begin(), c.key_cache.end(), 0);
  c.want_scores = true;
  c.scores.assign(21, std::numeric_limits<float>::quiet_NaN());
  oracle::forward(c.params());
  for (int d = 0; d < c.head_size; ++d) {
    double mean = 0;
    for (int j = 0; j < 21; ++j) mean += value_at(c, j, d);
    mean /= 21;
    ASSERT_NEAR(out_at(c, d), mean, 1e-6 * (1 + std::fabs(mean))) << "d=" << d;
  }
  for (float w : c.scores) ASSERT_NEAR(w, 1.0 / 21, 1e-7);
  // a sink of logit log(21) takes half the mass: the output halves
  std::vector<float> before(c.head_size);
  for (int d = 0; d < c.head_size; ++d) before[d] = out_at(c, d);
  c.sinks = {static_cast<float>(std::log(21.0))};
  oracle::forward(c.params());
  for (int d = 0; d < c.head_size; ++d) ASSERT_NEAR(out_at(c, d), 0.5 * before[d], 1e-6 * (1 + std::fabs(before[d])));
  for (float w : c.scores) ASSERT_NEAR(w, 0.5 / 21, 1e-7);
}

TEST(Oracle, TreeMaskHidesNonAncestors) {
  // T = 3 new tokens, tree: 0 <- 1, 0 <- 2 (siblings): token 2 sees {0, 2}, not 1. All keys are zero,
  // so the weights are uniform over the visible set.
  Case c = tiny_case(0, 3);
  std::fill(c.key_cache.begin(), c.key_cache.end(), 0);
  c.qq_bias = {1, 0, 0, 1, 1, 0, 1, 0, 1};
  c.qq_bias_begins = {0, 9};
  oracle::forward(c.params());
  for (int d = 0; d < c.head_size; ++d) {
    const double want = 0.5 * (value_at(c, 0, d) + value_at(c, 2, d));  // token 2 sees {0, 2}
    ASSERT_NEAR(out_at(c, 2 * c.head_size + d), want, 1e-6 * (1 + std::fabs(want))) << "d=" << d;
  }
}

// --- the checks can fail ----------------------------------------------------------------------------

TEST(Oracle, ComparisonCatchesAPerturbationAndANaN) {
  CaseConfig cfg = sweep_config();
  cfg.max_total_context = 500;
  Case c = pt::make_random_case(base_seed() + 400000, cfg);
  ASSERT_EQ(c.qdtype, DType::f32);
  ASSERT_EQ(check_case(c, 1e-5), 0);
  const Dense ref = dense_attention(c);
  const int64_t n = static_cast<int64_t>(ref.out.size()), i = n / 2;
  const std::vector<uint8_t> good = c.out;
  // one element off by 1e-4 relative: beyond the 1e-5 tolerance
  const float x = ref.out[i] * (1.0f + 1e-4f) + 1e-4f;
  std::memcpy(&c.out[4 * i], &x, 4);
  EXPECT_GT(pt::compare(c.out.data(), c.qdtype, ref.out.data(), n).max_rel_err, 1e-5);
  // one NaN
  c.out = good;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(&c.out[4 * i], &nan, 4);
  const auto cmp = pt::compare(c.out.data(), c.qdtype, ref.out.data(), n);
  EXPECT_EQ(cmp.nan_count, 1);
  EXPECT_EQ(cmp.worst_index, i);
  EXPECT_FALSE(cmp.ok(1.0));
}

// --- the generator ----------------------------------------------------------------------------------

TEST(Case, DeterministicInSeed) {
  const CaseConfig cfg = sweep_config(1);
  for (int k = 0; k < 20; ++k) {
    const Case a = pt::make_random_case(base_seed() + k, cfg), b = pt::make_random_case(base_seed() + k, cfg);
    ASSERT_EQ(a.describe(), b.describe());
    ASSERT_TRUE(a.query == b.query && a.key_cache == b.key_cache && a.value_cache == b.value_cache &&
                a.block_indices == b.block_indices && a.key_scale == b.key_scale && a.qq_bias == b.qq_bias);
  }
}

TEST(Case, ValidAndCoversTheRanges) {
  int past0 = 0, past_multiple = 0, shuffled = 0, window = 0, alibi = 0, sinks = 0, tree = 0, scores = 0, no_write = 0,
      long_tables = 0, shared = 0, past_max = 0, T_max = 0;
  int kv_seen[3] = {0, 0, 0};
  for (int k = 0; k < 300; ++k) {
    const CaseConfig cfg = sweep_config(k);
    Case c = pt::make_random_case(base_seed() + k, cfg);
    Params p = c.params();
    ASSERT_NO_THROW(validate(p)) << c.describe();
    int tokens = 0, context = 0;
    for (int s = 0; s < c.num_seqs; ++s) {
      tokens += c.T(s);
      context += c.ctx(s);
      past0 += c.past_lens[s] == 0;
      past_multiple += c.past_lens[s] > 0 && c.past_lens[s] % c.block_size == 0;
      past_max = std::max(past_max, c.past_lens[s]);
      T_max = std::max(T_max, c.T(s));
      const int used = (c.ctx(s) + c.block_size - 1) / c.block_size;
      long_tables += c.block_indices_begins[s + 1] - c.block_indices_begins[s] > used;
    }
    ASSERT_LE(tokens, cfg.max_total_tokens);
    ASSERT_LE(context, cfg.max_total_context);
    shuffled += !std::is_sorted(c.block_indices.begin(), c.block_indices.end());
    shared += c.describe().find("shared-prefix") != std::string::npos;
    window += c.sliding_window > 0;
    alibi += !c.alibi_slopes.empty();
    sinks += !c.sinks.empty();
    tree += !c.qq_bias_begins.empty();
    scores += c.want_scores;
    no_write += !c.write_kv;
    kv_seen[static_cast<int>(c.kv)]++;

    // poison: every cache row that is not a filled position of some sequence is NaN (0xFF + NaN params for u8)
    const int Hk = c.num_kv_heads, D = c.head_size;
    std::vector<char> filled(static_cast<size_t>(c.num_blocks) * Hk * c.block_size, 0);
    for (int s = 0; s < c.num_seqs; ++s) {
      // positions before the first new token's window are seen by no token: poisoned, maybe freed
      const int lo = c.sliding_window > 0 ? std::max(0, c.past_lens[s] - c.sliding_window + 1) : 0;
      for (int pos = lo; pos < (c.write_kv ? c.past_lens[s] : c.ctx(s)); ++pos)
        for (int kh = 0; kh < Hk; ++kh) filled[cache_row(c, s, pos, kh)] = 1;
    }
    for (size_t row = 0; row < filled.size(); ++row) {
      if (filled[row]) continue;
      if (c.kv == KVPrecision::u8) {
        ASSERT_TRUE(std::isnan(num::f16_bits_to_f32(c.key_scale[row])) && std::isnan(num::f16_bits_to_f32(c.value_min[row])));
        ASSERT_EQ(c.key_cache[row * D], 0xFF);
      } else {
        ASSERT_TRUE(std::isnan(cache_value(c, c.key_cache, c.key_scale, c.key_min, row, D - 1)));
        ASSERT_TRUE(std::isnan(cache_value(c, c.value_cache, c.value_scale, c.value_min, row, 0)));
      }
    }
    for (int64_t i = 0; i < static_cast<int64_t>(c.out.size() / dtype_size(c.qdtype)); ++i)
      ASSERT_TRUE(std::isnan(pt::load_as_float(c.out.data(), c.qdtype, i)));
  }
  EXPECT_GT(past0, 0);
  EXPECT_GT(past_multiple, 0);
  EXPECT_GT(shuffled, 0);
  EXPECT_GT(window, 0);
  EXPECT_GT(alibi, 0);
  EXPECT_GT(sinks, 0);
  EXPECT_GT(tree, 0);
  EXPECT_GT(scores, 0);
  EXPECT_GT(no_write, 0);
  EXPECT_GT(long_tables, 0);
  EXPECT_GT(shared, 0);
  const CaseConfig full;
  EXPECT_EQ(past_max, full.max_past);
  EXPECT_EQ(T_max, full.max_tokens);
  EXPECT_TRUE(kv_seen[0] && kv_seen[1] && kv_seen[2]);
  std::printf("  300 cases: past=0 %d, past=k*bs %d, window %d, alibi %d, sinks %d, tree %d, scores %d, "
              "no write-in %d, long tables %d, shared prefix %d\n",
              past0, past_multiple, window, alibi, sinks, tree, scores, no_write, long_tables, shared);
}
