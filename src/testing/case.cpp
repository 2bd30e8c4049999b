// Random cases of the op and comparison helpers (see case.h).
//
// NOTE: draws use hand-written helpers on top of std::mt19937_64 (whose output is fixed by the
// standard) instead of std::*_distribution (whose output is not), so a seed gives the same case with
// every standard library.
#include "testing/case.h"

#include "cpu/oracle.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <thread>
#include <stdexcept>

#include "common/numeric.h"

namespace pagedattn {
namespace testing {

namespace {

constexpr uint16_t kF16NaN = 0x7e00;
constexpr uint16_t kBF16NaN = 0x7fc0;
constexpr uint8_t kU8Poison = 0xFF;
constexpr int kFitTries = 32;  // redraws of one sequence's (past, T) to fit the caps
constexpr double kPShare = 0.3;  // chance that a case shares prefix blocks between sequences
constexpr double kSqrt3 = 1.7320508075688772935274463415059;

struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t seed) : g(seed) {}
  int64_t uniform_int(int64_t lo, int64_t hi) {  // inclusive; lo <= hi
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    return lo + static_cast<int64_t>(span == 0 ? g() : g() % span);
  }
  double uniform() { return static_cast<double>(g() >> 11) * 0x1.0p-53; }  // [0, 1)
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  bool chance(double p) { return uniform() < p; }
  // Roughly standard normal, cheaply (filling a cache of millions of elements stays fast): the sum of
  // four 16-bit uniforms from one draw (Irwin-Hall), centred and scaled to unit variance; |x| < 3.47.
  double normal() {
    const uint64_t u = g();
    const double sum = static_cast<double>((u & 0xffff) + ((u >> 16) & 0xffff) + ((u >> 32) & 0xffff) + (u >> 48));
    return (sum / 65536.0 - 2.0) * kSqrt3;
  }
  template <typename T>
  const T& pick(const std::vector<T>& v) {
    if (v.empty()) throw std::invalid_argument("CaseConfig: a list of choices is empty");
    return v[static_cast<size_t>(uniform_int(0, static_cast<int64_t>(v.size()) - 1))];
  }
};

DType kv_dtype(KVPrecision p) {
  switch (p) {
    case KVPrecision::f16: return DType::f16;
    case KVPrecision::bf16: return DType::bf16;
    case KVPrecision::u8: return DType::u8;
    case KVPrecision::fp8: return DType::f8e4m3;
  }
  return DType::f16;
}

// Stores x into element i of a raw buffer of float dtype t (f32, f16, bf16), rounding to nearest even.
void store_float(uint8_t* data, DType t, int64_t i, float x) {
  switch (t) {
    case DType::f32: std::memcpy(data + 4 * i, &x, 4); break;
    case DType::f16: {
      uint16_t b = num::f32_to_f16_bits(x);
      std::memcpy(data + 2 * i, &b, 2);
      break;
    }
    case DType::bf16: {
      uint16_t b = num::f32_to_bf16_bits(x);
      std::memcpy(data + 2 * i, &b, 2);
      break;
    }
    default: throw std::invalid_argument("store_float: not a float dtype");
  }
}

void store_nan(uint8_t* data, DType t, int64_t i) {
  switch (t) {
    case DType::f32: store_float(data, t, i, std::numeric_limits<float>::quiet_NaN()); break;
    case DType::f16: std::memcpy(data + 2 * i, &kF16NaN, 2); break;
    case DType::bf16: std::memcpy(data + 2 * i, &kBF16NaN, 2); break;
    case DType::u8: data[i] = kU8Poison; break;
    case DType::f8e4m3: data[i] = 0x7f; break;  // e4m3's NaN
    default: throw std::invalid_argument("store_nan: unsupported dtype");
  }
}

// past_len drawn with extra weight on 0, exact multiples of the block size (+-1) and the maximum.
int draw_past(Rng& r, int lo, int hi, int bs) {
  if (hi <= lo) return lo;
  const double u = r.uniform();
  int v;
  if (u < 0.15) {
    v = 0;
  } else if (u < 0.35) {
    v = static_cast<int>(r.uniform_int(0, hi / bs)) * bs;
  } else if (u < 0.45) {
    v = static_cast<int>(r.uniform_int(0, hi / bs)) * bs + (r.chance(0.5) ? 1 : -1);
  } else if (u < 0.50) {
    v = hi;
  } else {
    v = static_cast<int>(r.uniform_int(lo, hi));
  }
  return std::clamp(v, lo, hi);
}

int draw_tokens(Rng& r, int lo, int hi) {
  if (hi <= lo) return lo;
  if (r.chance(0.2)) return lo;  // decode-like (T = 1 by default) often
  return static_cast<int>(r.uniform_int(lo, hi));
}

}  // namespace

Case make_random_case(uint64_t seed, const CaseConfig& cfg) {
  if (cfg.min_seqs < 1 || cfg.max_seqs < cfg.min_seqs || cfg.min_past < 0 || cfg.max_past < cfg.min_past ||
      cfg.min_tokens < 0 || cfg.max_tokens < cfg.min_tokens || cfg.extra_blocks < 0)
    throw std::invalid_argument("CaseConfig: empty or negative range");
  Rng r(seed);
  Case c;
  c.seed = seed;

  // --- shapes and precisions ----------------------------------------------------------------------
  const int G = r.pick(cfg.group_sizes);
  c.num_kv_heads = r.pick(cfg.kv_heads);
  c.num_heads = G * c.num_kv_heads;
  c.head_size = r.pick(cfg.head_sizes);
  if (cfg.p_value_head_size > 0 && r.chance(cfg.p_value_head_size)) {
    std::vector<int> dv;
    for (int d : cfg.value_head_sizes)
      if (d <= c.head_size) dv.push_back(d);
    if (!dv.empty()) c.value_head_size = r.pick(dv);
  }
  c.block_size = r.pick(cfg.block_sizes);
  c.kv = r.pick(cfg.kv_precisions);
  c.qdtype = r.pick(cfg.query_dtypes);
  c.write_kv = r.chance(cfg.p_write);
  c.want_scores = r.chance(cfg.p_scores);
  const int H = c.num_heads, Hk = c.num_kv_heads, D = c.head_size, Dv = c.Dv(), bs = c.block_size;

  // --- the batch: (past_len, T) per sequence within the caps ----------------------------------------
  const int want_seqs = static_cast<int>(r.uniform_int(cfg.min_seqs, cfg.max_seqs));
  int64_t tokens_left = cfg.max_total_tokens, context_left = cfg.max_total_context;
  std::vector<int> T;
  for (int s = 0; s < want_seqs; ++s) {
    int past = -1, t = -1;
    for (int k = 0; k < kFitTries; ++k) {
      int p0 = draw_past(r, cfg.min_past, cfg.max_past, bs), t0 = draw_tokens(r, cfg.min_tokens, cfg.max_tokens);
      if (t0 <= tokens_left && p0 + t0 <= context_left) {
        past = p0;
        t = t0;
        break;
      }
    }
    if (past < 0) {  // the smallest sequence the ranges allow, else stop the batch here
      past = cfg.min_past;
      t = cfg.min_tokens;
      if (t > tokens_left || past + t > context_left) {
        if (s < cfg.min_seqs) throw std::invalid_argument("CaseConfig: caps leave no room for min_seqs sequences");
        break;
      }
    }
    c.past_lens.push_back(past);
    T.push_back(t);
    tokens_left -= t;
    context_left -= past + t;
  }
  c.num_seqs = static_cast<int>(T.size());
  c.subsequence_begins.assign(1, 0);
  for (int t : T) c.subsequence_begins.push_back(c.subsequence_begins.back() + t);
  c.num_tokens = c.subsequence_begins.back();
  int max_ctx = 0;
  for (int s = 0; s < c.num_seqs; ++s) max_ctx = std::max(max_ctx, c.ctx(s));

  // --- block tables: a shuffled pool with extra_blocks unused ---------------------------------------
  std::vector<int> blocks_needed(c.num_seqs);
  int used_blocks = 0;
  for (int s = 0; s < c.num_seqs; ++s) {
    blocks_needed[s] = (c.ctx(s) + bs - 1) / bs;
    used_blocks += blocks_needed[s];
  }
  c.num_blocks = used_blocks + cfg.extra_blocks;
  std::vector<int32_t> pool(c.num_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  for (int i = c.num_blocks - 1; i > 0; --i) std::swap(pool[i], pool[r.uniform_int(0, i)]);  // Fisher-Yates
  c.block_indices_begins.assign(1, 0);
  for (int s = 0, next = 0; s < c.num_seqs; ++s) {
    for (int b = 0; b < blocks_needed[s]; ++b) c.block_indices.push_back(pool[next++]);
    // A table may be longer than ctx_s needs; entries past the used part are never read and may hold
    // anything: stale ids of real (poisoned or foreign) blocks, or garbage.
    if (r.chance(0.3)) {
      const int n = static_cast<int>(r.uniform_int(1, 3));
      for (int k = 0; k < n; ++k) {
        const int kind = static_cast<int>(r.uniform_int(0, 2));
        c.block_indices.push_back(kind == 0 ? std::numeric_limits<int32_t>::max()
                                  : kind == 1 ? -1
                                              : static_cast<int32_t>(r.uniform_int(0, std::max(0, c.num_blocks - 1))));
      }
    }
    c.block_indices_begins.push_back(static_cast<int32_t>(c.block_indices.size()));
  }
  // Prefix sharing: a sequence may read an earlier sequence's leading blocks where both hold only
  // cached (not written) positions. The blocks it gave up stay unused, poisoned.
  if (c.num_seqs > 1 && r.chance(kPShare)) {
    auto full_blocks = [&](int s) { return (c.write_kv ? c.past_lens[s] : c.ctx(s)) / bs; };
    for (int s = 1; s < c.num_seqs; ++s) {
      const int from = static_cast<int>(r.uniform_int(0, s - 1));
      const int k_max = std::min(full_blocks(s), full_blocks(from));
      if (k_max == 0 || !r.chance(0.5)) continue;
      const int k = static_cast<int>(r.uniform_int(1, k_max));
      for (int b = 0; b < k; ++b)
        c.block_indices[c.block_indices_begins[s] + b] = c.block_indices[c.block_indices_begins[from] + b];
    }
  }

  // --- attention options --------------------------------------------------------------------------
  c.scale = r.chance(0.5) ? 0.0f : static_cast<float>(r.uniform(0.3, 2.0) / std::sqrt(static_cast<double>(D)));
  if (max_ctx > 0 && r.chance(cfg.p_window)) {
    const int small = std::min(max_ctx, 2 * bs);
    c.sliding_window = static_cast<int>(r.chance(0.4) ? r.uniform_int(1, small) : r.uniform_int(1, max_ctx));
  }
  if (r.chance(cfg.p_alibi)) {
    c.alibi_slopes.resize(H);
    for (float& v : c.alibi_slopes) v = static_cast<float>(r.uniform(0.0, cfg.max_alibi_slope));
  }
  if (r.chance(cfg.p_sinks)) {
    c.sinks.resize(H);
    for (float& v : c.sinks) v = static_cast<float>(r.uniform(-2.0, 4.0));
  }
  if (r.chance(cfg.p_tree)) {  // a random tree per sequence: token t > 0 hangs below a parent < t
    c.qq_bias_begins.assign(1, 0);
    for (int s = 0; s < c.num_seqs; ++s) {
      const int n = T[s];
      const bool chain = r.chance(0.2);
      std::vector<int> parent(n, -1);
      for (int t = 1; t < n; ++t) parent[t] = chain ? t - 1 : static_cast<int>(r.uniform_int(0, t - 1));
      const size_t base = c.qq_bias.size();
      c.qq_bias.resize(base + static_cast<size_t>(n) * n, 0);
      for (int t = 0; t < n; ++t)
        for (int a = t; a >= 0; a = parent[a]) c.qq_bias[base + static_cast<size_t>(t) * n + a] = 1;
      c.qq_bias_begins.push_back(static_cast<int32_t>(c.qq_bias.size()));
    }
  }

  // Sliding window: positions before the first new token's window are seen by no token. Their slots
  // stay poisoned (NaN, never filled below), and half the time their blocks are freed as engines free
  // them: the table entries wholly before the window become -1 or garbage (params.h).
  std::vector<int> window_lo(c.num_seqs, 0);
  if (c.sliding_window > 0)
    for (int s = 0; s < c.num_seqs; ++s) {
      window_lo[s] = std::max(0, c.past_lens[s] - c.sliding_window + 1);
      if (r.chance(0.5))
        for (int b = 0; (b + 1) * bs <= window_lo[s]; ++b)
          c.block_indices[c.block_indices_begins[s] + b] = r.chance(0.5) ? -1 : std::numeric_limits<int32_t>::max();
    }

  // --- new tokens -----------------------------------------------------------------------------------
  const size_t qsz = dtype_size(c.qdtype);
  const double qstd = r.pick(std::vector<double>{0.5, 1.0, 2.0});
  c.query.resize(static_cast<size_t>(c.num_tokens) * H * D * qsz);
  for (int64_t i = 0; i < static_cast<int64_t>(c.num_tokens) * H * D; ++i)
    store_float(c.query.data(), c.qdtype, i, static_cast<float>(qstd * r.normal()));
  if (c.write_kv) {
    c.key.resize(static_cast<size_t>(c.num_tokens) * Hk * D * qsz);
    c.value.resize(static_cast<size_t>(c.num_tokens) * Hk * Dv * qsz);
    const int64_t nk = static_cast<int64_t>(c.num_tokens) * Hk * D, nv = static_cast<int64_t>(c.num_tokens) * Hk * Dv;
    for (int64_t i = 0; i < std::max(nk, nv); ++i) {  // (interleaved: Dv = D draws as before Dv existed)
      if (i < nk) store_float(c.key.data(), c.qdtype, i, static_cast<float>(r.normal()));
      if (i < nv) store_float(c.value.data(), c.qdtype, i, static_cast<float>(r.normal()));
    }
  }

  // --- the cache: random data where filled, poison everywhere else -----------------------------------
  const DType kvt = kv_dtype(c.kv);
  const int64_t rows = static_cast<int64_t>(c.num_blocks) * Hk * bs;  // one row = D elements
  c.key_cache.resize(static_cast<size_t>(rows) * D * dtype_size(kvt));
  c.value_cache.resize(static_cast<size_t>(rows) * Dv * dtype_size(kvt));
  if (c.kv == KVPrecision::u8) {
    c.key_scale.assign(rows, kF16NaN);
    c.key_min.assign(rows, kF16NaN);
    c.value_scale.assign(rows, kF16NaN);
    c.value_min.assign(rows, kF16NaN);
  }
  if (c.kv == KVPrecision::fp8) {  // one scale per kv head, or one for the whole cache
    const int n = r.chance(0.5) ? Hk : 1;
    for (std::vector<float>* v : {&c.key_scale_fp8, &c.value_scale_fp8}) {
      v->resize(static_cast<size_t>(n));
      for (float& x : *v) x = static_cast<float>(r.uniform(0.02, 0.5));
    }
  }
  for (int64_t i = 0; i < rows * D; ++i) store_nan(c.key_cache.data(), kvt, i);
  for (int64_t i = 0; i < rows * Dv; ++i) store_nan(c.value_cache.data(), kvt, i);
  // Positions [0, filled) of each sequence hold data: the past, plus the new tokens when they are not
  // written in by this call.
  auto fill_row = [&](std::vector<uint8_t>& data, std::vector<uint16_t>& scale, std::vector<uint16_t>& min,
                      int64_t row, int D) {
    if (c.kv == KVPrecision::u8) {
      // rows straddling zero, as keys and values after projections do: min = -(64..192 steps)
      for (int d = 0; d < D; ++d) data[row * D + d] = static_cast<uint8_t>(r.uniform_int(0, 255));
      const double sc = r.uniform(0.004, 0.03);
      scale[row] = num::f32_to_f16_bits(static_cast<float>(sc));
      min[row] = num::f32_to_f16_bits(static_cast<float>(-sc * r.uniform(64.0, 192.0)));
    } else if (c.kv == KVPrecision::fp8) {  // codes of normal values over e4m3's range (never NaN)
      for (int d = 0; d < D; ++d)
        data[row * D + d] = num::f32_to_e4m3_bits(static_cast<float>(r.normal() * 16.0));
    } else {
      for (int d = 0; d < D; ++d) store_float(data.data(), kvt, row * D + d, static_cast<float>(r.normal()));
    }
  };
  for (int s = 0; s < c.num_seqs; ++s) {
    const int filled = c.write_kv ? c.past_lens[s] : c.ctx(s);
    for (int pos = window_lo[s]; pos < filled; ++pos) {
      const int block = c.block_indices[c.block_indices_begins[s] + pos / bs];
      for (int kh = 0; kh < Hk; ++kh) {
        const int64_t row = (static_cast<int64_t>(block) * Hk + kh) * bs + pos % bs;
        fill_row(c.key_cache, c.key_scale, c.key_min, row, D);
        fill_row(c.value_cache, c.value_scale, c.value_min, row, Dv);
      }
    }
  }

  // --- outputs: poisoned --------------------------------------------------------------------------
  c.out.resize(static_cast<size_t>(c.num_tokens) * H * Dv * qsz);
  for (int64_t i = 0; i < static_cast<int64_t>(c.num_tokens) * H * Dv; ++i) store_nan(c.out.data(), c.qdtype, i);
  if (c.want_scores) {
    int64_t total_ctx = 0;
    for (int s = 0; s < c.num_seqs; ++s) total_ctx += c.ctx(s);
    c.scores.assign(total_ctx, std::numeric_limits<float>::quiet_NaN());
    // score_aggregation_window: absent (the last token) or per sequence -1 (all), 0 (none), 1..T+2
    if (r.chance(0.6))
      for (int s = 0; s < c.num_seqs; ++s)
        c.score_window.push_back(r.chance(0.2) ? -1 : r.chance(0.1) ? 0 : static_cast<int32_t>(r.uniform_int(1, T[s] + 2)));
  }
  if (cfg.p_lse > 0 && r.chance(cfg.p_lse)) {  // last, so that cases without it draw as before
    c.want_lse = true;
    c.lse.assign(static_cast<size_t>(c.num_tokens) * H, std::numeric_limits<float>::quiet_NaN());
  }
  return c;
}

Params Case::params() {
  auto view = [](void* data, DType t, std::initializer_list<int64_t> shape) {
    return TensorView::contiguous(data, t, Device::cpu, shape);
  };
  const int64_t H = num_heads, Hk = num_kv_heads, D = head_size;
  Params p;
  p.num_heads = num_heads;
  p.query = view(query.data(), qdtype, {num_tokens, H * D});
  if (write_kv) {
    p.key = view(key.data(), qdtype, {num_tokens, Hk * D});
    p.value = view(value.data(), qdtype, {num_tokens, Hk * Dv()});
  }
  const DType kvt = kv_dtype(kv);
  p.cache.key = view(key_cache.data(), kvt, {num_blocks, Hk, block_size, D});
  p.cache.value = view(value_cache.data(), kvt, {num_blocks, Hk, block_size, Dv()});
  if (kv == KVPrecision::u8) {
    p.cache.key_scale = view(key_scale.data(), DType::f16, {num_blocks, Hk, block_size});
    p.cache.key_min = view(key_min.data(), DType::f16, {num_blocks, Hk, block_size});
    p.cache.value_scale = view(value_scale.data(), DType::f16, {num_blocks, Hk, block_size});
    p.cache.value_min = view(value_min.data(), DType::f16, {num_blocks, Hk, block_size});
  }
  if (kv == KVPrecision::fp8) {
    p.cache.key_scale = view(key_scale_fp8.data(), DType::f32, {static_cast<int64_t>(key_scale_fp8.size())});
    p.cache.value_scale = view(value_scale_fp8.data(), DType::f32, {static_cast<int64_t>(value_scale_fp8.size())});
  }
  p.past_lens = view(past_lens.data(), DType::i32, {num_seqs});
  p.subsequence_begins = view(subsequence_begins.data(), DType::i32, {num_seqs + 1});
  p.block_indices = view(block_indices.data(), DType::i32, {static_cast<int64_t>(block_indices.size())});
  p.block_indices_begins = view(block_indices_begins.data(), DType::i32, {num_seqs + 1});
  if (scale > 0.0f) p.scale = scale;  // 0: not given, the op's default 1/sqrt(D)
  p.sliding_window = sliding_window;
  if (!alibi_slopes.empty()) p.alibi_slopes = view(alibi_slopes.data(), DType::f32, {H});
  if (!sinks.empty()) p.sinks = view(sinks.data(), DType::f32, {H});
  int max_ctx = 0;
  for (int s = 0; s < num_seqs; ++s) max_ctx = std::max(max_ctx, ctx(s));
  p.max_context_len = max_ctx;
  if (!qq_bias_begins.empty()) {
    p.qq_bias = view(qq_bias.data(), DType::u8, {static_cast<int64_t>(qq_bias.size())});
    p.qq_bias_begins = view(qq_bias_begins.data(), DType::i32, {num_seqs + 1});
  }
  p.out = view(out.data(), qdtype, {num_tokens, H * Dv()});
  if (want_scores) p.scores = view(scores.data(), DType::f32, {static_cast<int64_t>(scores.size())});
  if (want_lse) p.lse = view(lse.data(), DType::f32, {num_tokens, H});
  if (!score_window.empty())
    p.score_aggregation_window = view(score_window.data(), DType::i32, {static_cast<int64_t>(score_window.size())});
  return p;
}

std::string Case::describe() const {
  std::ostringstream os;
  os << "seed=" << seed << " seqs=" << num_seqs << " tokens=" << num_tokens << " H=" << num_heads
     << " Hk=" << num_kv_heads << " D=" << head_size << (Dv() != head_size ? " Dv=" + std::to_string(Dv()) : std::string())
     << " bs=" << block_size << " blocks=" << num_blocks
     << " kv=" << kv_precision_name(kv) << " q=" << dtype_name(qdtype) << " write=" << write_kv;
  if (scale > 0.0f) os << " scale=" << scale;
  if (sliding_window > 0) os << " window=" << sliding_window;
  if (!alibi_slopes.empty()) os << " alibi";
  if (!sinks.empty()) os << " sinks";
  if (!qq_bias.empty() || !qq_bias_begins.empty()) os << " tree";
  if (want_scores) os << " scores";
  if (want_lse) os << " lse";
  if (!score_window.empty()) {
    os << " score_window=[";
    for (size_t s = 0; s < score_window.size(); ++s) os << (s ? "," : "") << score_window[s];
    os << "]";
  }
  std::vector<int32_t> used;  // the blocks read, to spot prefix sharing
  for (int s = 0; s < num_seqs; ++s) {
    const int lo = sliding_window > 0 ? std::max(0, past_lens[s] - sliding_window + 1) : 0;
    for (int b = lo / block_size; b < (ctx(s) + block_size - 1) / block_size; ++b)
      used.push_back(block_indices[block_indices_begins[s] + b]);
  }
  std::sort(used.begin(), used.end());
  if (std::adjacent_find(used.begin(), used.end()) != used.end()) os << " shared-prefix";
  os << " past=[";
  for (int s = 0; s < num_seqs; ++s) os << (s ? "," : "") << past_lens[s];
  os << "] T=[";
  for (int s = 0; s < num_seqs; ++s) os << (s ? "," : "") << T(s);
  os << "]";
  return os.str();
}

LseCompare compare_lse(const float* got, const float* ref, int64_t n) {
  LseCompare c;
  for (int64_t i = 0; i < n; ++i) {
    const double r = ref[i], g = got[i];
    const double e = std::isinf(r) && r < 0 ? (g == r ? 0.0 : INFINITY) : std::fabs(g - r) / std::max(1.0, std::fabs(r));
    if (!(e <= c.worst)) {  // NaN counts as the worst
      c.worst = std::isnan(e) ? INFINITY : e;
      c.at = i;
    }
  }
  return c;
}

std::string LseCompare::describe(const float* got, const float* ref) const {
  std::ostringstream os;
  os << "worst " << worst;
  if (at >= 0) os << " at lse[" << at << "]: " << got[at] << " vs " << ref[at];
  return os.str();
}

float load_as_float(const uint8_t* data, DType t, int64_t i) {
  switch (t) {
    case DType::f32: {
      float f;
      std::memcpy(&f, data + 4 * i, 4);
      return f;
    }
    case DType::f16: {
      uint16_t b;
      std::memcpy(&b, data + 2 * i, 2);
      return num::f16_bits_to_f32(b);
    }
    case DType::bf16: {
      uint16_t b;
      std::memcpy(&b, data + 2 * i, 2);
      return num::bf16_bits_to_f32(b);
    }
    case DType::u8: return static_cast<float>(data[i]);
    case DType::f8e4m3: return num::e4m3_bits_to_f32(data[i]);
    case DType::i32: {
      int32_t v;
      std::memcpy(&v, data + 4 * i, 4);
      return static_cast<float>(v);
    }
  }
  return 0.0f;
}

namespace {
// The spacing of `t`'s values at |y| (y representable in t): 2^(exponent - mantissa bits), the
// subnormal spacing below the smallest normal.
double ulp_at(DType t, double y) {
  const int mantissa = t == DType::f16 ? 10 : 7;
  const int min_exp = t == DType::f16 ? -14 : -126;
  int e = 0;
  std::frexp(std::fabs(y), &e);  // |y| = m 2^e, m in [0.5, 1): the binade's exponent is e - 1
  return std::ldexp(1.0, std::max(e - 1, min_exp) - mantissa);
}
}  // namespace

// NOTE: the relative error's floor is kRelFloor * rms(b), so elements near zero are judged against the
// output's own scale instead of dividing by ~0. The same floor widens one rounding's spacing: an element
// that cancels to ~0 carries the sums' error, which scales with the terms, not with the element (the cpu
// backend's f16 out, seed 407329973 of `check --config full`: 3e-5 = 1.6e-4 rms(b) at an element of 0.012,
// from P's 16-bit split on AMX tiles).
Compare compare(const uint8_t* a, DType ta, const float* b, int64_t n) {
  constexpr double kRelFloor = 1e-3;
  Compare r;
  double ss_b = 0.0;
  for (int64_t i = 0; i < n; ++i) ss_b += static_cast<double>(b[i]) * b[i];
  const double rms_b = n > 0 ? std::sqrt(ss_b / static_cast<double>(n)) : 0.0;
  const double floor = kRelFloor * rms_b + std::numeric_limits<double>::min();
  const bool sixteen_bit = ta == DType::f16 || ta == DType::bf16;
  if (sixteen_bit) r.beyond_one_rounding = 0;
  double ss_diff = 0.0, worst = -1.0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = load_as_float(a, ta, i), y = b[i];
    if (!std::isfinite(x) && std::isfinite(y)) {
      if (r.nan_count++ == 0) r.worst_index = i;
      continue;
    }
    const double abs_err = std::fabs(x - y);
    const double rel_err = abs_err / (std::fabs(y) + floor);
    if (sixteen_bit && !(abs_err <= ulp_at(ta, y) + floor)) ++r.beyond_one_rounding;
    ss_diff += abs_err * abs_err;
    r.max_abs_err = std::max(r.max_abs_err, abs_err);
    if (r.nan_count == 0 && !(rel_err <= worst)) {  // NaN in b: reported as the worst
      worst = rel_err;
      r.worst_index = i;
    }
    r.max_rel_err = std::max(r.max_rel_err, rel_err);
    if (std::isnan(rel_err)) r.max_rel_err = rel_err;
  }
  r.rel_l2 = ss_b > 0.0 ? std::sqrt(ss_diff / ss_b) : std::sqrt(ss_diff);
  if (std::isnan(ss_diff)) r.rel_l2 = std::numeric_limits<double>::quiet_NaN();
  return r;
}

std::string Compare::describe() const {
  std::ostringstream os;
  os << "max_abs_err=" << max_abs_err << " max_rel_err=" << max_rel_err << " rel_l2=" << rel_l2
     << " worst_index=" << worst_index << " nan_or_inf=" << nan_count;
  if (beyond_one_rounding >= 0) os << " beyond_one_rounding=" << beyond_one_rounding;
  return os.str();
}

uint64_t base_seed(const char* binary, uint64_t fallback) {
  static const uint64_t seed = [&] {
    const char* env = std::getenv("PAGEDATTN_SEED");
    const uint64_t s = env && env[0]   ? std::strtoull(env, nullptr, 10)
                       : fallback != 0 ? fallback
                                       : (uint64_t{std::random_device{}()} << 20);
    std::printf("[ seed     ] %s base seed %llu (rerun with PAGEDATTN_SEED=%llu)\n", binary,
                static_cast<unsigned long long>(s), static_cast<unsigned long long>(s));
    std::fflush(stdout);
    return s;
  }();
  return seed;
}

void reference_forward(Case& c, int threads) {
  Params p = c.params();
  oracle::write_kv(p);
  // Sequence s alone: its metadata entries as one-sequence views (the oracle indexes query, out and the
  // block table by the absolute offsets they hold) and its slice of scores.
  std::vector<int64_t> scores_base(c.num_seqs + 1, 0);
  for (int s = 0; s < c.num_seqs; ++s) scores_base[s + 1] = scores_base[s] + c.ctx(s);
  auto one = [&](int s) {
    Params q = p;
    auto at = [](const TensorView& v, int64_t off, int64_t n) {
      return TensorView::contiguous(v.ptr<int32_t>() + off, DType::i32, Device::cpu, {n});
    };
    q.past_lens = at(p.past_lens, s, 1);
    q.subsequence_begins = at(p.subsequence_begins, s, 2);
    q.block_indices_begins = at(p.block_indices_begins, s, 2);
    if (p.qq_bias_begins.present()) q.qq_bias_begins = at(p.qq_bias_begins, s, 2);
    if (p.score_aggregation_window.present()) q.score_aggregation_window = at(p.score_aggregation_window, s, 1);
    if (p.scores.present())
      q.scores = TensorView::contiguous(c.scores.data() + scores_base[s], DType::f32, Device::cpu, {c.ctx(s)});
    oracle::attention(q);
  };
  std::atomic<int> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < std::max(1, threads); ++t)
    pool.emplace_back([&] {
      for (int s = next++; s < c.num_seqs; s = next++) one(s);
    });
  for (auto& th : pool) th.join();
}

// Calls fn(kh, which (0: key, 1: value), that row's new values, D, its first element) for every new key
// and value row, token by token (the order the edge-row draws depend on).
namespace {
template <typename Fn>
void for_each_new_row(Case& c, Fn fn) {
  const int Hk = c.num_kv_heads;
  for (int tok = 0; tok < c.num_tokens; ++tok)
    for (int kh = 0; kh < Hk; ++kh)
      for (int which = 0; which < 2; ++which) {
        const int D = which == 0 ? c.head_size : c.Dv();
        fn(kh, which, which == 0 ? c.key : c.value, D, (static_cast<int64_t>(tok) * Hk + kh) * D);
      }
}
}  // namespace

void apply_edge_rows(Case& c, uint64_t seed) {
  if (!c.write_kv) return;
  Rng r(seed);
  for_each_new_row(c, [&](int, int which, std::vector<uint8_t>& dst, int D, int64_t base) {
    const int kind = static_cast<int>(r.uniform_int(0, 8));
    double lo = 0.0, width = 0.0;  // the row: uniform in [lo, lo + width)
    switch (kind) {
      case 0: lo = 100.0, width = 0.1; break;  // far from zero: a zero point of -255000 overflowed f16
      case 1: lo = -100.1, width = 0.1; break;
      case 2: lo = r.pick(std::vector<double>{0.0, 100.05, -7.0, 1e-7, which ? 65504.0 : 3.0}); break;  // constant
      case 3: lo = 0.0, width = 1e-6; break;                                     // a subnormal range
      case 4: lo = which ? 60000.0 : 10.0, width = which ? 5504.0 : 0.1; break;  // values up to 65504
      case 5: lo = which ? -65504.0 : -1.0, width = which ? 131008.0 : 2.0; break;
      default: return;  // stays a random N(0, 1) row
    }
    for (int d = 0; d < D; ++d)
      store_float(dst.data(), c.qdtype, base + d, static_cast<float>(lo + width * r.uniform()));
  });
}

void apply_fp8_edge_rows(Case& c, uint64_t seed) {
  if (!c.write_kv || c.kv != KVPrecision::fp8) return;
  Rng r(seed);
  for_each_new_row(c, [&](int kh, int which, std::vector<uint8_t>& dst, int D, int64_t base) {
    const int kind = static_cast<int>(r.uniform_int(0, 3));
    if (kind == 3) return;  // stays a random N(0, 1) row
    const std::vector<float>& scales = which == 0 ? c.key_scale_fp8 : c.value_scale_fp8;
    const double sc = scales[scales.size() == 1 ? 0 : static_cast<size_t>(kh)];
    for (int d = 0; d < D; ++d) {
      const double sign = r.chance(0.5) ? -1.0 : 1.0;
      double x;         // in units of the scale
      if (kind == 0) {  // saturating: at and past 448, infinities among them
        x = r.chance(0.1) ? INFINITY : r.uniform(440.0, 1000.0);
      } else if (kind == 1) {  // e4m3 subnormals (multiples of 2^-9 below 2^-6) and zero
        x = r.chance(0.1) ? 0.0 : r.uniform(0.0, 1.0 / 64.0);
      } else {  // the midpoint between a normal code and the next: a tie, to even
        const uint8_t code = static_cast<uint8_t>(r.uniform_int(8, 0x7d));
        x = 0.5 * (num::e4m3_bits_to_f32(code) + num::e4m3_bits_to_f32(static_cast<uint8_t>(code + 1)));
      }
      store_float(dst.data(), c.qdtype, base + d, static_cast<float>(sign * x * sc));
    }
  });
}

DType mma_query_dtype(KVPrecision kv) { return kv == KVPrecision::bf16 ? DType::bf16 : DType::f16; }

void round_queries(Case& c, DType to) {
  const int64_t n = static_cast<int64_t>(c.num_tokens) * c.num_heads * c.head_size;
  for (int64_t i = 0; i < n; ++i) {
    const float q = load_as_float(c.query.data(), c.qdtype, i);
    store_float(c.query.data(), c.qdtype, i, to == DType::bf16 ? num::round_bf16(q) : num::round_f16(q));
  }
}

void reference_lse_as_mma_reads(const Case& input, Case& ref, int threads) {
  const DType mma = mma_query_dtype(input.kv);
  if (!input.want_lse || input.qdtype == mma) return;
  Case rounded = input;
  round_queries(rounded, mma);
  reference_forward(rounded, threads);
  ref.lse = std::move(rounded.lse);
}

void scale_values(Case& c, double f) {
  const int64_t n_new = c.write_kv ? static_cast<int64_t>(c.num_tokens) * c.num_kv_heads * c.Dv() : 0;
  for (int64_t i = 0; i < n_new; ++i)
    store_float(c.value.data(), c.qdtype, i, static_cast<float>(f * load_as_float(c.value.data(), c.qdtype, i)));
  if (c.kv == KVPrecision::u8) {
    for (std::vector<uint16_t>* v : {&c.value_scale, &c.value_min})
      for (uint16_t& h : *v) h = num::f32_to_f16_bits(static_cast<float>(f * num::f16_bits_to_f32(h)));
    return;
  }
  if (c.kv == KVPrecision::fp8) {
    for (float& x : c.value_scale_fp8) x = static_cast<float>(f * x);
    return;
  }
  const DType kvt = kv_dtype(c.kv);
  const int64_t n_cache = static_cast<int64_t>(c.value_cache.size() / dtype_size(kvt));
  for (int64_t i = 0; i < n_cache; ++i)
    store_float(c.value_cache.data(), kvt, i, static_cast<float>(f * load_as_float(c.value_cache.data(), kvt, i)));
}

}  // namespace testing
}  // namespace pagedattn
