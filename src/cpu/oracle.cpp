// The CPU oracle: the op's semantics (params.h) in plain loops. Every backend is checked against it,
// so it stays obvious: gather through the block table, pass 1 max, pass 2 exp-sum, pass 3 normalise.
// Sums run in double. Views are read through their strides.
#include "cpu/oracle.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/numeric.h"
#include "core/tensor_io.h"

namespace pagedattn {
namespace oracle {

namespace {

// --- element access through strides ----------------------------------------------------------------
int64_t offset(const TensorView& v, int64_t i0) { return i0 * v.stride[0]; }
int64_t offset(const TensorView& v, int64_t i0, int64_t i1) { return i0 * v.stride[0] + i1 * v.stride[1]; }
int64_t offset(const TensorView& v, int64_t i0, int64_t i1, int64_t i2) {
  return i0 * v.stride[0] + i1 * v.stride[1] + i2 * v.stride[2];
}
int64_t offset(const TensorView& v, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return i0 * v.stride[0] + i1 * v.stride[1] + i2 * v.stride[2] + i3 * v.stride[3];
}

float load(const TensorView& v, int64_t off) {
  switch (v.dtype) {
    case DType::f32: return v.ptr<const float>()[off];
    case DType::f16: return num::f16_bits_to_f32(v.ptr<const uint16_t>()[off]);
    case DType::bf16: return num::bf16_bits_to_f32(v.ptr<const uint16_t>()[off]);
    case DType::u8: return static_cast<float>(v.ptr<const uint8_t>()[off]);
    case DType::i32: return static_cast<float>(v.ptr<const int32_t>()[off]);
    case DType::f8e4m3: return num::e4m3_bits_to_f32(v.ptr<const uint8_t>()[off]);
  }
  return 0.0f;
}

// Stores x rounded to the view's float dtype (f32, f16, bf16: round to nearest even).
void store(const TensorView& v, int64_t off, float x) {
  switch (v.dtype) {
    case DType::f32: v.ptr<float>()[off] = x; break;
    case DType::f16: v.ptr<uint16_t>()[off] = num::f32_to_f16_bits(x); break;
    case DType::bf16: v.ptr<uint16_t>()[off] = num::f32_to_bf16_bits(x); break;
    default: break;  // not an output dtype of the op
  }
}

int32_t load_i32(const TensorView& v, int64_t i) { return v.ptr<const int32_t>()[offset(v, i)]; }

struct Layout {
  int num_seqs, H, Hk, G, D, Dv, block_size;  // D: queries and keys; Dv: values and out
  KVPrecision kv;
};

Layout layout_of(const Params& p) {
  Layout L;
  L.num_seqs = static_cast<int>(p.past_lens.shape[0]);
  L.H = p.num_heads;
  L.Hk = static_cast<int>(p.cache.num_kv_heads());
  L.G = L.H / L.Hk;
  L.D = static_cast<int>(p.cache.head_size());
  L.Dv = static_cast<int>(p.cache.value_head_size());
  L.block_size = static_cast<int>(p.cache.block_size());
  L.kv = p.cache.precision();
  return L;
}

// Position `pos` of sequence s lives in block table[pos / block_size], slot pos % block_size.
struct Slot {
  int64_t block, slot;
};
Slot slot_of(const Params& p, const Layout& L, int s, int64_t pos) {
  int64_t entry = load_i32(p.block_indices_begins, s) + pos / L.block_size;
  return {load_i32(p.block_indices, entry), pos % L.block_size};
}

// Writes one row x[0..D) of a key (or value) into `data` at (block, kh, slot), quantising for u8 and fp8.
void write_row(const TensorView& data, const TensorView& scale, const TensorView& min, KVPrecision kv,
               Slot at, int kh, const std::vector<float>& x) {
  const int D = static_cast<int>(x.size());
  if (kv == KVPrecision::u8) {
    float mn = x[0], mx = x[0];
    for (int d = 1; d < D; ++d) {
      mn = std::min(mn, x[d]);
      mx = std::max(mx, x[d]);
    }
    num::U8Params qp = num::u8_params(mn, mx);
    scale.ptr<uint16_t>()[offset(scale, at.block, kh, at.slot)] = qp.scale_bits;
    min.ptr<uint16_t>()[offset(min, at.block, kh, at.slot)] = qp.min_bits;
    for (int d = 0; d < D; ++d) data.ptr<uint8_t>()[offset(data, at.block, kh, at.slot, d)] = num::u8_quantize(x[d], qp);
  } else if (kv == KVPrecision::fp8) {
    const float sc = detail::fp8_scale(scale, kh);
    for (int d = 0; d < D; ++d)
      data.ptr<uint8_t>()[offset(data, at.block, kh, at.slot, d)] = num::f32_to_e4m3_bits(x[d] / sc);
  } else {
    for (int d = 0; d < D; ++d) store(data, offset(data, at.block, kh, at.slot, d), x[d]);
  }
}

// Reads one row of a key (or value) from the cache as float (dequantising u8 and fp8).
// u8: min + code * scale, in double (then float: within one f32 rounding of the exact value).
void read_row(const TensorView& data, const TensorView& scale, const TensorView& min, KVPrecision kv, Slot at,
              int kh, float* x, int D) {
  if (kv == KVPrecision::u8) {
    const double sc = num::f16_bits_to_f32(scale.ptr<const uint16_t>()[offset(scale, at.block, kh, at.slot)]);
    const double mn = num::f16_bits_to_f32(min.ptr<const uint16_t>()[offset(min, at.block, kh, at.slot)]);
    for (int d = 0; d < D; ++d)
      x[d] = static_cast<float>(mn + sc * data.ptr<const uint8_t>()[offset(data, at.block, kh, at.slot, d)]);
  } else if (kv == KVPrecision::fp8) {  // code * scale: exact in double, then one f32 rounding
    const double sc = detail::fp8_scale(scale, kh);
    for (int d = 0; d < D; ++d)
      x[d] = static_cast<float>(sc * num::e4m3_bits_to_f32(data.ptr<const uint8_t>()[offset(data, at.block, kh, at.slot, d)]));
  } else {
    for (int d = 0; d < D; ++d) x[d] = load(data, offset(data, at.block, kh, at.slot, d));
  }
}

// q . k in double, over eight interleaved partial sums (one chain would be bound by the latency of
// the double add; any order is exact to far below the backends' tolerances).
double dot(const float* q, const float* k, int D) {
  double a[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
  int d = 0;
  for (; d + 8 <= D; d += 8)
    for (int e = 0; e < 8; ++e) a[e] += static_cast<double>(q[d + e]) * k[d + e];
  for (; d < D; ++d) a[0] += static_cast<double>(q[d]) * k[d];
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

}  // namespace

void write_kv(const Params& p) {
  if (!p.key.present()) return;
  const Layout L = layout_of(p);
  const KVCache& c = p.cache;
  std::vector<float> row(L.D), vrow(L.Dv);
  for (int s = 0; s < L.num_seqs; ++s) {
    const int past = load_i32(p.past_lens, s);
    const int tok0 = load_i32(p.subsequence_begins, s);
    const int T = load_i32(p.subsequence_begins, s + 1) - tok0;
    for (int t = 0; t < T; ++t) {
      const Slot at = slot_of(p, L, s, past + t);
      for (int kh = 0; kh < L.Hk; ++kh) {
        for (int d = 0; d < L.D; ++d) row[d] = load(p.key, offset(p.key, tok0 + t, kh * L.D + d));
        write_row(c.key, c.key_scale, c.key_min, L.kv, at, kh, row);
        for (int d = 0; d < L.Dv; ++d) vrow[d] = load(p.value, offset(p.value, tok0 + t, kh * L.Dv + d));
        write_row(c.value, c.value_scale, c.value_min, L.kv, at, kh, vrow);
      }
    }
  }
}

void attention(const Params& p) {
  const Layout L = layout_of(p);
  const KVCache& c = p.cache;
  const double scale = p.scale && *p.scale != 0.0f ? static_cast<double>(*p.scale)
                                                   : 1.0 / std::sqrt(static_cast<double>(L.D));
  int64_t scores_base = 0;  // start of sequence s in p.scores

  for (int s = 0; s < L.num_seqs; ++s) {
    const int past = load_i32(p.past_lens, s);
    const int tok0 = load_i32(p.subsequence_begins, s);
    const int T = load_i32(p.subsequence_begins, s + 1) - tok0;
    const int ctx = p.prefix_only ? past : past + T;  // prefix_only: the cached keys only
    // the first new token's position: past_len, or (prefix_only) new_token_positions[s]
    const int64_t qpos0 = p.new_token_positions.present() ? load_i32(p.new_token_positions, s) : past;

    // Gather this sequence's keys and values through the block table: [Hk][ctx][D] as float. Keys
    // before the first new token's sliding window are seen by no token: their blocks are not read
    // (their table entries may hold anything, params.h).
    std::vector<float> K(static_cast<size_t>(L.Hk) * ctx * L.D), V(static_cast<size_t>(L.Hk) * ctx * L.Dv);
    const int lo = p.sliding_window > 0 ? static_cast<int>(std::max<int64_t>(0, qpos0 - p.sliding_window + 1)) : 0;
    for (int j = lo; j < ctx; ++j) {
      const Slot at = slot_of(p, L, s, j);
      for (int kh = 0; kh < L.Hk; ++kh) {
        read_row(c.key, c.key_scale, c.key_min, L.kv, at, kh, &K[(static_cast<size_t>(kh) * ctx + j) * L.D], L.D);
        read_row(c.value, c.value_scale, c.value_min, L.kv, at, kh, &V[(static_cast<size_t>(kh) * ctx + j) * L.Dv],
                 L.Dv);
      }
    }

    // scores count the last w new tokens (score_aggregation_window; absent: 1; -1 or >= T: all)
    const int w = p.score_aggregation_window.present() ? load_i32(p.score_aggregation_window, s) : 1;
    const int t_scored = w < 0 || w >= T ? 0 : T - w;  // first new token whose weights are summed
    std::vector<double> score(ctx), weight_sum(ctx, 0.0), acc(L.Dv);
    std::vector<char> visible(ctx);
    for (int t = 0; t < T; ++t) {
      const int64_t i = qpos0 + t;  // this token's position

      // Which keys this token sees: causal, then sliding window, then the tree among new tokens.
      for (int j = 0; j < ctx; ++j) {
        bool v = j <= i;
        if (p.sliding_window > 0 && i - j >= p.sliding_window) v = false;
        if (p.qq_bias.present() && j >= past) {
          const int64_t u = j - past;
          const int64_t e = load_i32(p.qq_bias_begins, s) + static_cast<int64_t>(t) * T + u;
          if (p.qq_bias.ptr<const uint8_t>()[offset(p.qq_bias, e)] == 0) v = false;
        }
        visible[j] = v;
      }

      for (int h = 0; h < L.H; ++h) {
        const int kh = h / L.G;
        const double slope = p.alibi_slopes.present() ? load(p.alibi_slopes, offset(p.alibi_slopes, h)) : 0.0;

        // scores: scale * q.k (+ alibi)
        std::vector<float> q(L.D);
        for (int d = 0; d < L.D; ++d) q[d] = load(p.query, offset(p.query, tok0 + t, h * L.D + d));
        for (int j = 0; j < ctx; ++j) {
          if (!visible[j]) continue;
          const float* k = &K[(static_cast<size_t>(kh) * ctx + j) * L.D];
          score[j] = scale * dot(q.data(), k, L.D) + slope * static_cast<double>(j - i);
        }

        // pass 1: max (the sink joins the softmax, so it joins the max too)
        const bool has_sink = p.sinks.present();
        const double sink = has_sink ? load(p.sinks, offset(p.sinks, h)) : 0.0;
        double mx = has_sink ? sink : -INFINITY;
        for (int j = 0; j < ctx; ++j)
          if (visible[j]) mx = std::max(mx, score[j]);

        // pass 2: exp and sum
        double sum = has_sink ? std::exp(sink - mx) : 0.0;
        for (int j = 0; j < ctx; ++j) {
          if (!visible[j]) continue;
          score[j] = std::exp(score[j] - mx);
          sum += score[j];
        }
        if (p.lse.present())  // log of the denominator; -inf for a row with no key and no sink
          p.lse.ptr<float>()[offset(p.lse, tok0 + t, h)] =
              sum > 0.0 ? static_cast<float>(mx + std::log(sum)) : -INFINITY;

        // pass 3: normalise and accumulate the values, four keys per sweep over acc
        std::fill(acc.begin(), acc.end(), 0.0);
        double w4[4];
        const float* v4[4];
        int n4 = 0;
        for (int j = 0; j <= ctx; ++j) {
          if (j < ctx && visible[j]) {
            w4[n4] = score[j] / sum;
            if (t >= t_scored) weight_sum[j] += w4[n4];
            v4[n4++] = &V[(static_cast<size_t>(kh) * ctx + j) * L.Dv];
          }
          if (n4 == 4) {
            for (int d = 0; d < L.Dv; ++d)
              acc[d] += (w4[0] * v4[0][d] + w4[1] * v4[1][d]) + (w4[2] * v4[2][d] + w4[3] * v4[3][d]);
            n4 = 0;
          } else if (j == ctx) {  // the last one to three keys
            for (int e = 0; e < n4; ++e)
              for (int d = 0; d < L.Dv; ++d) acc[d] += w4[e] * v4[e][d];
          }
        }
        for (int d = 0; d < L.Dv; ++d) store(p.out, offset(p.out, tok0 + t, h * L.Dv + d), static_cast<float>(acc[d]));
      }
    }

    if (p.scores.present())
      for (int j = 0; j < ctx; ++j)
        p.scores.ptr<float>()[offset(p.scores, scores_base + j)] = static_cast<float>(weight_sum[j]);
    scores_base += ctx;
  }
}

void forward(const Params& p) {
  write_kv(p);
  attention(p);
}

}  // namespace oracle
}  // namespace pagedattn
