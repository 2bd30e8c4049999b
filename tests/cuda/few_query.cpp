// GPU tests: Few-query chunks (decode, chain and tree verifies; <= 64 rows per kv head): the few-query kernel
// over every copy path, and the key-split Hopper kernel for 33-64 rows.
#include "cuda/suite.h"

using namespace gpu_suite;

TEST(Cuda, FewQueryRandom) {
  REQUIRE_GPU();
  run_suite("few-query", few_query_config(), base_seed(), 320);
}

// Every copy path of the few-query kernel's K/V slices, for every head size, KV precision and block
// size: a slice in one cache block or over several (block_size < keys per slice), whole or cut by the
// partition's end (past_len + T rarely a multiple of 16). 4 random cases per (D, kv, block size),
// random T and G, so the row-tile variants (16-, 32- and 64-key slices) vary; same tolerances.
TEST(Cuda, BlockSizeGrid) {
  REQUIRE_GPU();
  uint64_t seed = base_seed() + 3000000;
  for (int d : {64, 128, 256}) {
    for (KVPrecision kv : {KVPrecision::f16, KVPrecision::bf16, KVPrecision::u8}) {
      for (int bs : {16, 32, 64, 128}) {
        CaseConfig cfg = few_query_config();
        cfg.head_sizes = {d};
        cfg.kv_precisions = {kv};
        cfg.block_sizes = {bs};
        cfg.min_past = 100;
        cfg.max_seqs = 3;
        const std::string name = "grid-d" + std::to_string(d) + "-" + kv_precision_name(kv) + "-bs" + std::to_string(bs);
        run_suite(name.c_str(), cfg, seed, 4);
        seed += 100;
      }
    }
  }
}

// The few-query kernel's softmax reference (FwdParams::stale_log2) moves only when a slice's max passes
// it by more than 6-8 (log2 units). Steep ALiBi slopes (up to 4: scores rise by up to 5.8 per key
// toward the query) make every slice pass it by far more, so the rescale of O, l and the u8 value
// correction runs on most slices, with jumps of tens of units; a reference that lagged, or a rescale
// that missed one of them, would be off by factors of 2^8 and more. Long contexts, so many slices.
TEST(Cuda, RisingScores) {
  REQUIRE_GPU();
  CaseConfig cfg = long_context_config(500, 3000, 12000);
  cfg.p_alibi = 1.0;
  cfg.max_alibi_slope = 4.0;
  run_suite("rising-scores", cfg, base_seed() + 3500000, 48);
}

// The same on the Hopper kernel (wg_kernel), whose reference is as stale (every cache type but u8 in the
// key-split forms at D = 128 / 256, which fold the parameters and take the exact max): 40-64-row chunks
// on its key-split form, 128-row chunks on the two-warpgroup form.
TEST(Cuda, RisingScoresHopper) {
  REQUIRE_GPU();
  if (const char* why = no_wgmma()) GTEST_SKIP() << why;
  EnvGuard on("PAGEDATTN_WGMMA", ""), split("PAGEDATTN_WG_SPLIT", "");
  CaseConfig cfg = long_context_config(500, 3000, 12000);
  cfg.kv_precisions = {KVPrecision::f16, KVPrecision::bf16, KVPrecision::fp8, KVPrecision::u8};
  cfg.p_alibi = 1.0;
  cfg.max_alibi_slope = 4.0;
  cfg.group_sizes = {8};
  cfg.min_tokens = 5;
  cfg.max_tokens = 8;
  run_suite("rising-scores-wgs", cfg, base_seed() + 3510000, 40);
  cfg.group_sizes = {16};
  cfg.min_tokens = cfg.max_tokens = 8;
  run_suite("rising-scores-wg128", cfg, base_seed() + 3520000, 40);
}

TEST(Cuda, DecodeOnlyLongContext) {
  REQUIRE_GPU();
  CaseConfig cfg = long_context_config(4000, 20000, 40000);
  cfg.max_tokens = 1;
  run_suite("decode-long", cfg, base_seed() + 100000, 24);
}

// Calls whose chunks all have <= 8 rows (G x T <= 8: decodes at G <= 8, a G = 4 pair of tokens) run
// fwd_kernel's HR variant (the MMAs' top halves only; KernelChoice::hr): u8 at D = 64, 128, 256, fp8 at
// D = 64 (tuning::half_rows), with the KT variant off (PAGEDATTN_KEYS_ON_M=0: by default it takes D = 256
// and fp8 at D = 128). Chains and trees, window, ALiBi, sinks, scores; bands by G so that every
// case qualifies, then long
// contexts (many slices and partitions per CTA), under the 3 x 2^16 keys x kv heads from which f16/bf16
// decodes move to the key-split kernel (tuning::hopper_split_small).
TEST(Cuda, HalfRowsRandom) {
  REQUIRE_GPU();
  EnvGuard on("PAGEDATTN_HALF_ROWS", ""), kt_off("PAGEDATTN_KEYS_ON_M", "0");
  CaseConfig cfg = few_query_config();
  cfg.kv_precisions = {KVPrecision::u8, KVPrecision::fp8};
  CaseConfig one = cfg;
  one.group_sizes = {4};
  one.kv_precisions = {KVPrecision::u8};
  for (int d : {64, 128, 256}) {
    one.head_sizes = {d};
    expect_launched(one, 1, 2, base_seed() + 3700000 + d, 128, "hr");
  }
  one.kv_precisions = {KVPrecision::fp8};
  one.head_sizes = {64};
  expect_launched(one, 1, 2, base_seed() + 3700001, 128, "hr");
  // a call with a sequence of 9-16 rows (or more) keeps every chunk off it, its <= 8-row ones included
  CaseConfig mixed = cfg;
  mixed.kv_precisions = {KVPrecision::u8};
  mixed.group_sizes = {4};
  mixed.min_seqs = mixed.max_seqs = 4;
  mixed.max_tokens = 4;
  for (int i = 0; i < 8; ++i) {
    const uint64_t seed = base_seed() + 3700100 + i;
    const Case c = make_random_case(seed, mixed);
    int most = 0;
    for (int s = 0; s < c.num_seqs; ++s) most = std::max(most, c.subsequence_begins[s + 1] - c.subsequence_begins[s]);
    for (const PlanInfo::Launch& l : plan_info(mixed, seed, Options{Backend::cuda}).launches)
      EXPECT_EQ(l.variant == "hr", most * 4 <= 8) << "seed " << seed << ", longest sequence " << most << " tokens";
  }
  const int bands[4][2] = {{1, 8}, {2, 4}, {4, 2}, {8, 1}};  // G, the most tokens
  for (int b = 0; b < 4; ++b) {
    CaseConfig band = cfg;
    band.group_sizes = {bands[b][0]};
    band.max_tokens = bands[b][1];
    run_suite(("half-rows-g" + std::to_string(bands[b][0])).c_str(), band, base_seed() + 3710000 + 1000 * b, 50);
  }
  CaseConfig lng = long_context_config(4000, 20000, 40000);
  lng.kv_precisions = cfg.kv_precisions;
  lng.group_sizes = {4, 8};
  lng.max_tokens = 1;
  run_suite("half-rows-long", lng, base_seed() + 3720000, 24);
}

// u8 and fp8 calls whose chunks all have <= 8 rows on fwd_kernel's KT variant (keys as the MMAs' M
// dimension: S^T = K Q^T, O^T = V^T P^T; KernelChoice::kt) at D = 64, 128, 256, at both CTA counts
// (PAGEDATTN_KEYS_ON_M=1: "kt", =2: "kt+", but u8 at D = 64, 4 per SM either way): the bands of
// HalfRowsRandom (chains and trees, window, ALiBi, sinks, scores), long contexts, and calls with a
// sequence of 9+ rows, which keep every chunk off it. Without the switch, the measured rule
// (tuning::keys_on_m): "kt+" at D = 256, "kt" for fp8 at D = 128, "hr" elsewhere.
TEST(Cuda, KeysOnMRandom) {
  REQUIRE_GPU();
  {
    EnvGuard unset("PAGEDATTN_KEYS_ON_M", ""), hr("PAGEDATTN_HALF_ROWS", "");
    CaseConfig one = few_query_config();
    one.group_sizes = {4};
    for (KVPrecision kv : {KVPrecision::fp8, KVPrecision::u8}) {
      one.kv_precisions = {kv};
      for (int d : {64, 128, 256}) {
        one.head_sizes = {d};
        const char* expected = d == 256 ? "kt+" : d == 128 && kv == KVPrecision::fp8 ? "kt" : "hr";
        expect_launched(one, 1, 2, base_seed() + 3730000 + d, 128, expected);
      }
    }
  }
  for (int k = 1; k <= 2; ++k) {
    EnvGuard on("PAGEDATTN_KEYS_ON_M", std::to_string(k).c_str());
    const std::string variant = k == 1 ? "kt" : "kt+";
    const uint64_t seed0 = base_seed() + 3730000 + 100000 * k;
    CaseConfig cfg = few_query_config();
    cfg.kv_precisions = {KVPrecision::fp8, KVPrecision::u8};
    CaseConfig one = cfg;
    one.group_sizes = {4};
    for (KVPrecision kv : {KVPrecision::fp8, KVPrecision::u8}) {
      one.kv_precisions = {kv};
      for (int d : {64, 128, 256}) {
        one.head_sizes = {d};
        expect_launched(one, 1, 2, seed0 + d, 128, kv == KVPrecision::u8 && d == 64 ? "kt" : variant.c_str());
      }
    }
    CaseConfig mixed = cfg;
    mixed.kv_precisions = {KVPrecision::fp8};
    mixed.group_sizes = {4};
    mixed.min_seqs = mixed.max_seqs = 4;
    mixed.max_tokens = 4;
    for (int i = 0; i < 8; ++i) {
      const uint64_t seed = seed0 + 1000 + i;
      const Case c = make_random_case(seed, mixed);
      int most = 0;
      for (int s = 0; s < c.num_seqs; ++s) most = std::max(most, c.subsequence_begins[s + 1] - c.subsequence_begins[s]);
      for (const PlanInfo::Launch& l : plan_info(mixed, seed, Options{Backend::cuda}).launches)
        EXPECT_EQ(l.variant == variant, most * 4 <= 8) << "seed " << seed << ", longest sequence " << most << " tokens";
    }
    const int bands[4][2] = {{1, 8}, {2, 4}, {4, 2}, {8, 1}};  // G, the most tokens
    for (int b = 0; b < 4; ++b) {
      CaseConfig band = cfg;
      band.group_sizes = {bands[b][0]};
      band.max_tokens = bands[b][1];
      run_suite((variant + "-g" + std::to_string(bands[b][0])).c_str(), band, seed0 + 10000 + 1000 * b, 50);
    }
    CaseConfig lng = long_context_config(4000, 20000, 40000);
    lng.kv_precisions = cfg.kv_precisions;
    lng.group_sizes = {4, 8};
    lng.max_tokens = 1;
    run_suite((variant + "-long").c_str(), lng, seed0 + 20000, 20);
  }
}

// Chunks of 33-64 rows on the key-split Hopper kernel (wg_kernel's SPLIT, "wgs<keys>"): two
// warpgroups over alternate key tiles of one 64-row tile, combined at the end; f16/bf16 at every head
// size. Chains and trees, G up to 16 (the few-query cases: chunks of <= 64 rows; those of 33-64 rows
// run on it).
TEST(Cuda, FewQuerySplitRandom) {
  REQUIRE_GPU();
  if (const char* why = no_wgmma()) GTEST_SKIP() << why;
  EnvGuard on("PAGEDATTN_WGMMA", ""), split("PAGEDATTN_WG_SPLIT", "");
  CaseConfig cfg = few_query_config();
  cfg.kv_precisions = {KVPrecision::f16, KVPrecision::bf16};
  cfg.min_tokens = 2;  // 33-64 rows need T * G > 32
  cfg.group_sizes = {4, 8, 16};
  CaseConfig one = cfg;
  one.group_sizes = {8};
  for (int d : {64, 128}) {
    one.head_sizes = {d};
    expect_launched(one, 5, 8, base_seed() + 3100000 + d, 256, "wgs64");
  }
  one.head_sizes = {256};
  expect_launched(one, 5, 8, base_seed() + 3100001, 256, "wgs32");
  // Every chunk of 33-64 rows (T * G in that range for each sequence), so every case runs on the kernel:
  // G = 4 with T 9-16, G = 8 with T 5-8, G = 16 with T 3-4 (trees, window, ALiBi, sinks, scores as the
  // few-query cases draw them).
  run_row_bands_33_64("few-query-wgs", cfg, base_seed() + 3100000, 110);
  // the mixed few-query cases (chunks of every size, some on it) and long contexts
  run_suite("few-query-wgs-mixed", cfg, base_seed() + 3150000, 80);
  CaseConfig lng = long_context_config(4000, 20000, 40000);
  lng.kv_precisions = cfg.kv_precisions;
  lng.group_sizes = {8};
  lng.min_tokens = 5;
  lng.max_tokens = 8;
  run_suite("few-query-wgs-long", lng, base_seed() + 3200000, 24);
  // 17-32-row chunks (G = 8, T 3-4: 24-32 rows): on it by default at D >= 128, and at D = 64 while no
  // sequence of the call sees more than 16k keys (tuning::hopper_split)
  one.head_sizes = {256};
  expect_launched(one, 3, 4, base_seed() + 3100002, 256, "wgs32");
  for (int d : {64, 128}) {
    one.head_sizes = {d};
    expect_launched(one, 3, 4, base_seed() + 3100003 + d, 256, "wgs64");
  }
  CaseConfig b32 = cfg;
  b32.group_sizes = {8};
  b32.min_tokens = 3;
  b32.max_tokens = 4;
  run_suite("few-query-wgs-17-32", b32, base_seed() + 3250000, 60);
  // ... over long contexts (many partitions) at D = 128, where they take it at every length; at D = 64
  // past 16k keys they stay on fwd_kernel (2 row tiles: 4 warps, no variant name) unless the kernel's
  // two-CTA form takes them (FewQuerySplitTwoCtasRandom; off here)
  CaseConfig b32_long = long_context_config(4000, 30000, 60000);
  b32_long.kv_precisions = cfg.kv_precisions;
  b32_long.head_sizes = {128};
  b32_long.group_sizes = {8};
  b32_long.min_tokens = 3;
  b32_long.max_tokens = 4;
  run_suite("few-query-wgs-17-32-long", b32_long, base_seed() + 3260000, 16);
  CaseConfig d64_long = b32_long;
  d64_long.head_sizes = {64};
  d64_long.min_past = d64_long.max_past = 17000;
  d64_long.p_window = 0.0;  // (a window under 16k keys would make the call a short one)
  EnvGuard one_cta("PAGEDATTN_WGS_SHARED", "0");
  expect_launched(d64_long, 3, 4, base_seed() + 3100005, 128, "");
}

// Chunks of 1-16 rows on the key-split Hopper kernel (PAGEDATTN_WG_SPLIT=3 puts every chunk of <= 64
// rows there; its 64-row tile holds 1-16 rows as it holds 17-32): the plans launch it for decodes at
// every head size, then chains and trees in bands where every chunk has <= 16 rows (G = 1 with T up to
// 16 ... G = 16 with T = 1), mixed with long contexts (many partitions, their merge), f16/bf16 caches.
TEST(Cuda, FewQuerySplitSmallChunksRandom) {
  REQUIRE_GPU();
  if (const char* why = no_wgmma()) GTEST_SKIP() << why;
  EnvGuard on("PAGEDATTN_WGMMA", ""), split("PAGEDATTN_WG_SPLIT", "3"), rule("PAGEDATTN_WGS_SHARED", "");
  CaseConfig cfg = few_query_config();
  cfg.kv_precisions = {KVPrecision::f16, KVPrecision::bf16};
  cfg.p_lse = 0.3;  // (the optional lse output, [tokens, H], compared with the oracle's)
  CaseConfig one = cfg;
  one.group_sizes = {4};
  one.head_sizes = {256};
  expect_launched(one, 1, 1, base_seed() + 3400000, 256, "wgs32");
  for (int d : {64, 128}) {
    one.head_sizes = {d};
    expect_launched(one, 1, 4, base_seed() + 3400000 + d, 256, "wgs64");
  }
  const int bands[5][2] = {{1, 16}, {2, 8}, {4, 4}, {8, 2}, {16, 1}};  // G, the most tokens: <= 16 rows
  for (int b = 0; b < 5; ++b) {
    CaseConfig band = cfg;
    band.group_sizes = {bands[b][0]};
    band.max_tokens = bands[b][1];
    const std::string name = "few-query-wgs-1-16-g" + std::to_string(bands[b][0]);
    run_suite(name.c_str(), band, base_seed() + 3410000 + 1000 * b, 36);
  }
  CaseConfig lng = long_context_config(20000, 40000, 80000);
  lng.kv_precisions = cfg.kv_precisions;
  lng.group_sizes = {4};
  lng.max_tokens = 4;
  run_suite("few-query-wgs-1-16-long", lng, base_seed() + 3460000, 16);
}

// The rule that sends 1-16-row chunks there (tuning::hopper_split_small: f16/bf16, the call's such
// sequences holding >= 2^18 keys times kv heads, 3 x 2^16 at D = 256): one 66-70k-token sequence at Hk = 4
// launches the kernel at D = 256 and 128 (T = 1-4, G = 1 / 4; D = 64 its two-CTA form), eight 8k decodes
// launch it, a 48k sequence at D = 256 too; a 63k sequence at D = 128 (just under 2^18), a 40k one at
// D = 256, four 8k decodes and u8 / fp8 caches stay on fwd_kernel; then oracle cases
// of such calls (chains, trees, ALiBi, sinks, scores, lse as the few-query cases draw them).
TEST(Cuda, SmallChunksFollowTheirWork) {
  REQUIRE_GPU();
  if (const char* why = no_wgmma()) GTEST_SKIP() << why;
  EnvGuard on("PAGEDATTN_WGMMA", ""), split("PAGEDATTN_WG_SPLIT", ""), rule("PAGEDATTN_WGS_SHARED", "");
  CaseConfig cfg = long_context_config(66000, 70000, 72000);
  cfg.kv_precisions = {KVPrecision::f16, KVPrecision::bf16};
  cfg.kv_heads = {4};
  cfg.group_sizes = {1, 4};
  cfg.max_tokens = 4;
  cfg.p_window = 0.0;  // (a window would cut the keys below the rule's)
  cfg.p_lse = 0.3;
  const uint64_t seed = base_seed() + 3470000;
  auto on_split = [&](const CaseConfig& c, uint64_t s) {
    bool any = false;
    for (const PlanInfo::Launch& l : plan_info(c, s, Options{Backend::cuda}).launches)
      any = any || l.variant.rfind("wgs", 0) == 0;
    return any;
  };
  CaseConfig one = cfg;
  one.head_sizes = {256};
  expect_launched(one, 1, 4, seed, 256, "wgs32");
  one.head_sizes = {128};
  expect_launched(one, 1, 4, seed + 1, 256, "wgs64");
  one.head_sizes = {64};
  expect_launched(one, 1, 4, seed + 4, 256, "wgs64x2");  // (past 16k keys: the two-CTA form)
  one.head_sizes = {128};
  CaseConfig near = one;
  near.min_past = near.max_past = 63000;  // (63000 + T) x 4 < 2^18
  EXPECT_FALSE(on_split(near, seed + 2)) << "a 63k sequence at Hk = 4, T <= 4";
  CaseConfig batch = one;
  batch.min_past = batch.max_past = 8192;
  batch.min_tokens = batch.max_tokens = 1;
  batch.max_total_context = 8 * 8193;
  batch.min_seqs = batch.max_seqs = 8;
  EXPECT_TRUE(on_split(batch, seed + 5)) << "eight 8k decodes at Hk = 4 (2^18 keys times kv heads)";
  batch.min_seqs = batch.max_seqs = 4;
  EXPECT_FALSE(on_split(batch, seed + 6)) << "four 8k decodes at Hk = 4";
  CaseConfig d256 = one;
  d256.head_sizes = {256};
  d256.min_past = d256.max_past = 49152;  // (49152 + T) x 4 >= 3 x 2^16, D = 256's threshold
  EXPECT_TRUE(on_split(d256, seed + 7)) << "a 48k sequence at D = 256, Hk = 4";
  d256.min_past = d256.max_past = 40000;  // (40000 + T) x 4 < 3 x 2^16
  EXPECT_FALSE(on_split(d256, seed + 8)) << "a 40k sequence at D = 256, Hk = 4";
  for (KVPrecision kv : {KVPrecision::u8, KVPrecision::fp8}) {
    CaseConfig bytes = one;
    bytes.kv_precisions = {kv};
    bytes.min_tokens = bytes.max_tokens = 1;
    EXPECT_FALSE(on_split(bytes, seed + 3)) << kv_precision_name(kv);
  }
  run_suite("small-chunks-long", cfg, seed + 10, 8);
}

// The key-split kernel's two-CTA-per-SM form at D = 64 ("wgs64x2": 3 slots per ring, registers bounded to
// 128; KernelChoice::wgs_shared): the rule (tuning::hopper_split_shared: past 16k keys, few chunks; there
// it takes 17-32-row chunks too), then
// forced on: the plans launch it for 17-64-row chunks, then chains and trees in the bands where every
// chunk takes it, mixed few-query cases and long contexts, f16/bf16 caches.
TEST(Cuda, FewQuerySplitTwoCtasRandom) {
  REQUIRE_GPU();
  if (const char* why = no_wgmma()) GTEST_SKIP() << why;
  EnvGuard on("PAGEDATTN_WGMMA", ""), split("PAGEDATTN_WG_SPLIT", ""), rule("PAGEDATTN_WGS_SHARED", "");
  CaseConfig cfg = few_query_config();
  cfg.kv_precisions = {KVPrecision::f16, KVPrecision::bf16};
  cfg.head_sizes = {64};
  CaseConfig one = cfg;
  one.group_sizes = {8};
  expect_launched(one, 5, 8, base_seed() + 3300002, 256, "wgs64");  // few-query contexts: one CTA per SM
  CaseConfig far = long_context_config(17000, 17000, 40000);
  far.kv_precisions = cfg.kv_precisions;
  far.p_window = 0.0;  // (a window under 16k keys would make the call a short one)
  far.head_sizes = {64};
  far.group_sizes = {8};
  expect_launched(far, 5, 8, base_seed() + 3300003, 256, "wgs64x2");  // one sequence past 16k keys
  expect_launched(far, 3, 4, base_seed() + 3300004, 256, "wgs64x2");  // ... 24-32 rows too (hopper_split)
  EnvGuard two("PAGEDATTN_WGS_SHARED", "1");
  expect_launched(one, 5, 8, base_seed() + 3300000, 256, "wgs64x2");  // 40-64 rows
  expect_launched(one, 3, 4, base_seed() + 3300001, 256, "wgs64x2");  // 24-32 rows (up to 16k keys)
  run_row_bands_33_64("few-query-wgs64x2", cfg, base_seed() + 3310000, 60);
  run_suite("few-query-wgs64x2-mixed", cfg, base_seed() + 3350000, 40);
  CaseConfig lng = long_context_config(4000, 20000, 40000);
  lng.kv_precisions = cfg.kv_precisions;
  lng.head_sizes = {64};
  lng.group_sizes = {8};
  lng.min_tokens = 5;
  lng.max_tokens = 8;
  run_suite("few-query-wgs64x2-long", lng, base_seed() + 3360000, 16);
}
