// A context split across calls, merged: Params::prefix_only shards, Params::lse and merge_states().
//
// Each case (seeded random: f16/bf16/u8/fp8 caches, T 1-16, trees, sinks, sliding windows and ALiBi; no
// scores) runs once whole, with lse, and once split: every sequence's cached context is cut at block boundaries into
// shards drawn at random (empty shards included); the shards before the last run with prefix_only (no
// key/value: nothing is written), the last one holds the rest of the cache and the new tokens (its call
// writes them, as the whole call does), the sinks and the tree mask among the new tokens (a prefix shard's
// keys precede every new token: all of them see all of its keys); a prefix shard's new_token_positions
// place the new tokens where they are relative to its keys (windows, ALiBi). merge_states() of the shards' (out, lse) must
// equal the whole call's (out, lse): f32 queries, relative L2 <= 1e-4 for out, |lse error| <= 1e-4 *
// max(1, |lse|). Both on the cpu backend's kernels and on the oracle (Options::cpu_reference).
// Seeds: PAGEDATTN_SEED=<n> fixes the base seed; otherwise it is drawn and printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "pagedattn/pagedattn.h"
#include "testing/case.h"

namespace {

using namespace pagedattn;
using namespace pagedattn::testing;

uint64_t seed0() { return base_seed("test_split", 0); }

CaseConfig split_config() {
  CaseConfig cfg;
  cfg.max_seqs = 4;
  cfg.max_past = 2000;
  cfg.max_tokens = 16;
  cfg.query_dtypes = {DType::f32};
  cfg.kv_precisions = {KVPrecision::f16, KVPrecision::bf16, KVPrecision::u8, KVPrecision::fp8};
  cfg.p_tree = cfg.p_window = cfg.p_alibi = 0.3;
  cfg.p_scores = 0.0;
  cfg.p_write = 1.0;  // the last shard writes the new tokens, as the whole call does
  return cfg;
}

TensorView host(void* data, DType t, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(data, t, Device::cpu, shape);
}

// Runs `c` split into `k` shards per sequence; returns the merged (out, lse).
void run_split(Case c, int k, std::mt19937_64& rng, const Options& opt, std::vector<float>& out,
               std::vector<float>& lse) {
  const int n = c.num_tokens, H = c.num_heads, D = c.head_size, bs = c.block_size;
  // shard boundaries per sequence: 0 = a_0 <= a_1 <= ... <= a_{k-1} <= past, multiples of bs
  std::vector<std::vector<int>> a(static_cast<size_t>(c.num_seqs));
  for (int s = 0; s < c.num_seqs; ++s) {
    std::uniform_int_distribution<int> cut(0, c.past_lens[s] / bs);
    std::vector<int> b{0};
    for (int i = 1; i < k; ++i) b.push_back(cut(rng) * bs);
    std::sort(b.begin(), b.end());
    a[static_cast<size_t>(s)] = b;
  }
  std::vector<std::vector<float>> outs(static_cast<size_t>(k)), lses(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) {
    const bool last = i == k - 1;
    std::vector<int32_t> past, table, table_begins{0}, positions;
    int max_ctx = 0;
    for (int s = 0; s < c.num_seqs; ++s) {
      const int lo = a[static_cast<size_t>(s)][static_cast<size_t>(i)];
      const int hi = last ? c.past_lens[s] : a[static_cast<size_t>(s)][static_cast<size_t>(i) + 1];
      past.push_back(hi - lo);
      positions.push_back(c.past_lens[s] - lo);  // the first new token, in the shard's positions
      const int ctx = last ? c.ctx(s) : hi;  // the positions this shard's table must cover (global)
      const int32_t* t = c.block_indices.data() + c.block_indices_begins[s];
      for (int blk = lo / bs; blk * bs < ctx; ++blk) table.push_back(t[blk]);
      table_begins.push_back(static_cast<int32_t>(table.size()));
      max_ctx = std::max(max_ctx, hi - lo + (last ? c.T(s) : 0));
    }
    outs[static_cast<size_t>(i)].assign(static_cast<size_t>(n) * H * D, NAN);
    lses[static_cast<size_t>(i)].assign(static_cast<size_t>(n) * H, NAN);
    Params p = c.params();
    p.past_lens = host(past.data(), DType::i32, {c.num_seqs});
    p.block_indices = host(table.data(), DType::i32, {static_cast<int64_t>(table.size())});
    p.block_indices_begins = host(table_begins.data(), DType::i32, {c.num_seqs + 1});
    p.max_context_len = max_ctx;
    p.out = host(outs[static_cast<size_t>(i)].data(), DType::f32, {n, int64_t{H} * D});
    p.lse = host(lses[static_cast<size_t>(i)].data(), DType::f32, {n, H});
    if (!last) {  // a shard without the new tokens: attends its cache, writes nothing, no sink, no tree
      p.prefix_only = true;
      p.key = p.value = TensorView{};
      p.sinks = TensorView{};
      p.qq_bias = p.qq_bias_begins = TensorView{};
      p.new_token_positions = host(positions.data(), DType::i32, {c.num_seqs});
    }
    forward(p, opt);
  }
  std::vector<TensorView> ov, lv;
  for (int i = 0; i < k; ++i) {
    ov.push_back(host(outs[static_cast<size_t>(i)].data(), DType::f32, {n, int64_t{H} * D}));
    lv.push_back(host(lses[static_cast<size_t>(i)].data(), DType::f32, {n, H}));
  }
  out.assign(static_cast<size_t>(n) * H * D, NAN);
  lse.assign(static_cast<size_t>(n) * H, NAN);
  merge_states(ov, lv, host(out.data(), DType::f32, {n, int64_t{H} * D}), host(lse.data(), DType::f32, {n, H}));
}

void check_split(const Options& opt, uint64_t base, int cases) {
  std::printf("[split] base seed %llu, %d cases (%s)\n", static_cast<unsigned long long>(base), cases,
              opt.cpu_reference ? "oracle" : "cpu kernels");
  double worst_out = 0, worst_lse = 0;
  for (int i = 0; i < cases; ++i) {
    Case whole = make_random_case(base + i, split_config());
    const Case split_from = whole;  // before the whole call writes the new tokens in
    whole.lse.assign(static_cast<size_t>(whole.num_tokens) * whole.num_heads, NAN);
    whole.want_lse = true;
    forward(whole.params(), opt);
    std::mt19937_64 rng(base + i);
    const int k = 2 + static_cast<int>(rng() % 3);  // 2..4 shards
    std::vector<float> out, lse;
    run_split(split_from, k, rng, opt, out, lse);
    const Compare co = compare(reinterpret_cast<const uint8_t*>(out.data()), DType::f32,
                               reinterpret_cast<const float*>(whole.out.data()), static_cast<int64_t>(out.size()));
    const LseCompare cl = compare_lse(lse.data(), whole.lse.data(), static_cast<int64_t>(lse.size()));
    worst_out = std::max(worst_out, co.rel_l2);
    worst_lse = std::max(worst_lse, cl.worst);
    EXPECT_TRUE(co.ok(1e-4) && cl.ok(kLseTolerance))
        << "case " << whole.describe() << ", " << k << " shards\n  out: " << co.describe()
        << "\n  lse: " << cl.describe(lse.data(), whole.lse.data());
  }
  std::printf("[split] worst out rel_l2 %.3e, worst lse error %.3e\n", worst_out, worst_lse);
}

}  // namespace

TEST(Split, MergedShardsEqualTheWholeCallOnTheCpuKernels) {
  Options opt{Backend::cpu};
  check_split(opt, seed0(), 120);
}

TEST(Split, MergedShardsEqualTheWholeCallOnTheOracle) {
  Options opt{Backend::cpu};
  opt.cpu_reference = true;
  check_split(opt, seed0() + 100000, 40);
}

// The merge alone: rows whose every partial saw no key (-inf) give 0 and -inf; `out` may alias an input.
TEST(Split, MergeOfEmptyPartialsAndInPlace) {
  const int n = 2, H = 2, D = 4;
  std::vector<float> o1(n * H * D, 1.0f), o2(n * H * D, 3.0f);
  std::vector<float> l1{-INFINITY, 0.0f, 0.0f, -INFINITY}, l2{-INFINITY, 0.0f, -INFINITY, -INFINITY};
  std::vector<float> lse(n * H, NAN);
  merge_states({host(o1.data(), DType::f32, {n, H * D}), host(o2.data(), DType::f32, {n, H * D})},
               {host(l1.data(), DType::f32, {n, H}), host(l2.data(), DType::f32, {n, H})},
               host(o1.data(), DType::f32, {n, H * D}), host(lse.data(), DType::f32, {n, H}));
  EXPECT_EQ(o1[0], 0.0f);                       // row 0 head 0: no key anywhere
  EXPECT_FLOAT_EQ(o1[D], 2.0f);                 // row 0 head 1: equal weights of 1 and 3
  EXPECT_FLOAT_EQ(lse[1], std::log(2.0f));
  EXPECT_FLOAT_EQ(o1[2 * D], 1.0f);             // row 1 head 0: only the first partial
  EXPECT_EQ(lse[3], -INFINITY);
}

TEST(Split, BadInputsAreNamed) {
  std::vector<float> o(8, 0.0f), l(2, 0.0f);
  const TensorView out = host(o.data(), DType::f32, {1, 8}), lse = host(l.data(), DType::f32, {1, 2});
  auto named = [](const std::function<void()>& f, const std::string& input) {
    try {
      f();
    } catch (const ValidationError& e) {
      EXPECT_NE(std::string(e.what()).find("'" + input + "'"), std::string::npos) << e.what();
      return;
    }
    ADD_FAILURE() << "no ValidationError for " << input;
  };
  named([&] { merge_states({}, {}, out); }, "outs");
  named([&] { merge_states({out}, {}, out); }, "lses");
  named([&] { merge_states({out}, {host(l.data(), DType::f32, {1, 3})}, out); }, "outs[0]");
  named([&] { merge_states({out}, {lse}, host(o.data(), DType::f32, {1, 4})); }, "out");
  // prefix_only excludes writes; windows and ALiBi need the new tokens' positions
  CaseConfig cfg = split_config();
  cfg.p_tree = cfg.p_window = cfg.p_alibi = cfg.p_sinks = 0.0;
  cfg.min_seqs = cfg.max_seqs = 2;
  Case c = make_random_case(seed0(), cfg);
  Params p = c.params();
  p.prefix_only = true;
  named([&] { forward(p, Options{Backend::cpu}); }, "key");
  p.key = p.value = TensorView{};
  p.sliding_window = 4;
  named([&] { forward(p, Options{Backend::cpu}); }, "sliding_window");
  p.sliding_window = 0;
  std::vector<float> slopes(static_cast<size_t>(c.num_heads), -0.1f);
  p.alibi_slopes = host(slopes.data(), DType::f32, {c.num_heads});
  named([&] { forward(p, Options{Backend::cpu}); }, "alibi_slopes");
  std::vector<int32_t> pos = {c.past_lens[0] - 1, c.past_lens[1]};  // before the shard's last key
  p.new_token_positions = host(pos.data(), DType::i32, {2});
  named([&] { forward(p, Options{Backend::cpu}); }, "new_token_positions");
  pos[0] = c.past_lens[0] + 100;
  p.new_token_positions = host(pos.data(), DType::i32, {1});  // one per sequence
  named([&] { forward(p, Options{Backend::cpu}); }, "new_token_positions");
  p.new_token_positions = host(pos.data(), DType::i32, {2});
  EXPECT_NO_THROW(validate(p));
  if (c.T(0) > 0) {  // the new tokens' positions must fit int32
    pos[0] = std::numeric_limits<int32_t>::max();
    named([&] { forward(p, Options{Backend::cpu}); }, "new_token_positions");
    pos[0] = c.past_lens[0] + 100;
  }
  p.prefix_only = false;  // only with prefix_only
  p.key = c.params().key;
  p.value = c.params().value;
  named([&] { forward(p, Options{Backend::cpu}); }, "new_token_positions");
}
