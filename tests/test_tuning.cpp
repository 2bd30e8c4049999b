// The CUDA backend's tuning rules (core/tuning.h) without a GPU: the environment overrides as parsed,
// and each rule on the shapes its measurements name (the comments in tuning.cpp give the runs).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/tuning.h"

using namespace pagedattn::tuning;

namespace {

Overrides parse(const std::map<std::string, std::string>& env) {
  return parse_overrides([&](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(Tuning, OverridesDefaultWhenUnsetOrNotAValueTheyTake) {
  for (const Overrides& o : {parse({}), parse({{"PAGEDATTN_EARLY_READS", "1"}, {"PAGEDATTN_WGMMA", "32"},
                                              {"PAGEDATTN_MERGE_SPLIT", "3"}, {"PAGEDATTN_MERGE_BATCH", "2"},
                                              {"PAGEDATTN_WIDE_PREFILL", ""},
                                              {"PAGEDATTN_WG_SPLIT", "64"}, {"PAGEDATTN_MERGE_ROWWISE", "2"},
                                              {"PAGEDATTN_DETERMINISTIC_ROWS", "32"}, {"PAGEDATTN_HALF_ROWS", "1"},
                                              {"PAGEDATTN_HALF_PARTIALS", "1"}, {"PAGEDATTN_MERGE_COLS", "16"},
                                              {"PAGEDATTN_DETERMINISTIC_SPLIT", "2"}, {"PAGEDATTN_UNITS", "1"}})}) {
    EXPECT_TRUE(o.early_reads && o.stale_max && o.prefill_mt2 && o.wgmma_u8 && o.half_rows && o.half_partials &&
                o.units);
    EXPECT_EQ(o.wgmma, -1);
    EXPECT_EQ(o.wide_prefill, -1);
    EXPECT_EQ(o.merge_split, 0);
    EXPECT_EQ(o.merge_batch, 0);
    EXPECT_EQ(o.merge_cols, 0);
    EXPECT_EQ(o.wg_split, -1);
    EXPECT_EQ(o.merge_rowwise, -1);
    EXPECT_EQ(o.deterministic_rows, 0);
    EXPECT_EQ(o.deterministic_split, -1);
  }
  EXPECT_EQ(parse({{"PAGEDATTN_DETERMINISTIC_ROWS", "16"}}).deterministic_rows, 16);
  for (const char* v : {"", "0", "32", "100", "8192", "x"})
    EXPECT_EQ(parse({{"PAGEDATTN_MIN_PARTITION", v}}).min_partition, 0) << v;
  EXPECT_EQ(parse({{"PAGEDATTN_MIN_PARTITION", "192"}}).min_partition, 192);
}

// 256-key partitions for f16/bf16 at D <= 128, for u8 at D <= 128 but calls with 17-32-row sequences,
// for fp8 but such calls at D = 128; 128 otherwise (runs mp1-mp4); the override for every kind.
TEST(Tuning, MinPartition) {
  const Overrides none;
  using K = KvKind;
  for (bool mid : {false, true}) {
    EXPECT_EQ(min_partition(64, K::f16, mid, none), 256);
    EXPECT_EQ(min_partition(128, K::f16, mid, none), 256);
    EXPECT_EQ(min_partition(256, K::f16, mid, none), 128);
    EXPECT_EQ(min_partition(192, K::f16, mid, none), 128);
    EXPECT_EQ(min_partition(256, K::u8, mid, none), 128);
  }
  for (int d : {64, 128}) {
    EXPECT_EQ(min_partition(d, K::u8, false, none), 256);
    EXPECT_EQ(min_partition(d, K::u8, true, none), 128);
  }
  for (int d : {64, 128, 256}) EXPECT_EQ(min_partition(d, K::fp8, false, none), 256);
  EXPECT_EQ(min_partition(64, K::fp8, true, none), 256);
  EXPECT_EQ(min_partition(128, K::fp8, true, none), 128);
  EXPECT_EQ(min_partition(256, K::fp8, true, none), 256);  // the seed's T = 8 (run mp4)
  Overrides o;
  o.min_partition = 512;
  EXPECT_EQ(min_partition(256, K::u8, true, o), 512);
  EXPECT_EQ(min_partition(64, K::f16, false, o), 512);
}

// D = 64 one-byte codes in calls of <= 16 rows per kv head: a wave of 2 CTAs per SM where the one-wave
// partition at 3 would be short; nothing in deterministic mode or for other shapes; the override.
TEST(Tuning, ShortWave) {
  const Overrides none;
  using K = KvKind;
  EXPECT_EQ(short_wave_ctas_per_sm(64, K::u8, 3, false, false, none), 2);
  EXPECT_EQ(short_wave_ctas_per_sm(64, K::fp8, 3, false, false, none), 2);
  EXPECT_EQ(short_wave_ctas_per_sm(64, K::f16, 2, false, false, none), 0);
  EXPECT_EQ(short_wave_ctas_per_sm(64, K::u8, 2, false, false, none), 0);  // (sm_80's occupancy, say)
  EXPECT_EQ(short_wave_ctas_per_sm(64, K::u8, 3, true, false, none), 0);
  EXPECT_EQ(short_wave_ctas_per_sm(64, K::u8, 3, false, true, none), 0);
  for (int d : {80, 96, 128, 192, 256}) EXPECT_EQ(short_wave_ctas_per_sm(d, K::fp8, 3, false, false, none), 0) << d;
  EXPECT_EQ(short_wave_ctas_per_sm(64, K::u8, 3, false, false, parse({{"PAGEDATTN_SHORT_WAVE", "0"}})), 0);
  EXPECT_EQ(short_wave_ctas_per_sm(128, K::f16, 2, true, false, parse({{"PAGEDATTN_SHORT_WAVE", "1"}})), 1);
  EXPECT_EQ(short_wave_ctas_per_sm(128, K::f16, 2, true, true, parse({{"PAGEDATTN_SHORT_WAVE", "1"}})), 0);
  for (const char* v : {"", "9", "-1", "x"}) EXPECT_EQ(parse({{"PAGEDATTN_SHORT_WAVE", v}}).short_wave, -1) << v;
}

TEST(Tuning, HalfRows) {
  const Overrides none = parse({});
  using K = KvKind;
  for (int d : {64, 128, 256}) EXPECT_TRUE(half_rows(d, K::u8, false, none)) << d;
  EXPECT_TRUE(half_rows(64, K::fp8, false, none));
  for (int d : {128, 256}) EXPECT_FALSE(half_rows(d, K::fp8, false, none)) << d;
  for (int d : {64, 128, 256}) EXPECT_FALSE(half_rows(d, K::f16, false, none)) << d;
  for (int d : {80, 96, 112, 192}) EXPECT_FALSE(half_rows(d, K::u8, false, none)) << d;
  EXPECT_FALSE(half_rows(64, K::u8, true, none));
  EXPECT_FALSE(half_rows(64, K::u8, false, parse({{"PAGEDATTN_HALF_ROWS", "0"}})));
}
// fwd_kernel's KT variant: the one-byte kinds, off in deterministic mode; unset, the measured rule;
// PAGEDATTN_KEYS_ON_M=0 / 1 / 2 at every one-byte width.
TEST(Tuning, KeysOnM) {
  using K = KvKind;
  const Overrides none = parse({}), on = parse({{"PAGEDATTN_KEYS_ON_M", "1"}});
  const Overrides off = parse({{"PAGEDATTN_KEYS_ON_M", "0"}});
  EXPECT_EQ(none.keys_on_m, -1);
  EXPECT_EQ(parse({{"PAGEDATTN_KEYS_ON_M", "3"}}).keys_on_m, -1);
  EXPECT_EQ(off.keys_on_m, 0);
  // the measured rule (runs kt2, kt3): D = 256 one CTA per SM more, fp8 D = 128 at HR's count, else off
  EXPECT_EQ(keys_on_m(256, K::fp8, false, none), 2);
  EXPECT_EQ(keys_on_m(256, K::u8, false, none), 2);
  EXPECT_EQ(keys_on_m(128, K::fp8, false, none), 1);
  EXPECT_EQ(keys_on_m(128, K::u8, false, none), 0);
  EXPECT_EQ(keys_on_m(64, K::fp8, false, none), 0);
  EXPECT_EQ(keys_on_m(64, K::u8, false, none), 0);
  EXPECT_EQ(keys_on_m(256, K::f16, false, none), 0);
  EXPECT_EQ(keys_on_m(256, K::fp8, true, none), 0);
  // the override, at every one-byte width
  EXPECT_EQ(keys_on_m(64, K::fp8, false, on), 1);
  EXPECT_EQ(keys_on_m(128, K::u8, false, parse({{"PAGEDATTN_KEYS_ON_M", "2"}})), 2);
  EXPECT_EQ(keys_on_m(256, K::u8, false, off), 0);
  EXPECT_EQ(keys_on_m(256, K::fp8, true, on), 0);
  EXPECT_EQ(keys_on_m(128, K::f16, false, on), 0);
}
TEST(Tuning, OverridesParsed) {
  const Overrides o = parse({{"PAGEDATTN_EARLY_READS", "0"}, {"PAGEDATTN_STALE_MAX", "0"},
                             {"PAGEDATTN_PREFILL_MT2", "0"}, {"PAGEDATTN_WGMMA_U8", "0"}, {"PAGEDATTN_WGMMA", "64"},
                             {"PAGEDATTN_WIDE_PREFILL", "0"},
                             {"PAGEDATTN_MERGE_SPLIT", "4"}, {"PAGEDATTN_MERGE_BATCH", "8"}});
  EXPECT_FALSE(o.early_reads || o.stale_max || o.prefill_mt2 || o.wgmma_u8);
  EXPECT_EQ(o.wgmma, 64);
  EXPECT_EQ(o.wide_prefill, 0);
  EXPECT_EQ(o.merge_split, 4);
  EXPECT_EQ(o.merge_batch, 8);
  EXPECT_EQ(parse({{"PAGEDATTN_WIDE_PREFILL", "1"}}).wide_prefill, 1);
  EXPECT_FALSE(parse({{"PAGEDATTN_HALF_ROWS", "0"}}).half_rows);
  EXPECT_FALSE(parse({{"PAGEDATTN_HALF_PARTIALS", "0"}}).half_partials);
  EXPECT_EQ(parse({{"PAGEDATTN_WGMMA", "0"}}).wgmma, 0);
  EXPECT_EQ(parse({{"PAGEDATTN_WG_SPLIT", "0"}}).wg_split, 0);
  EXPECT_EQ(parse({{"PAGEDATTN_WG_SPLIT", "1"}}).wg_split, 1);
  EXPECT_EQ(parse({{"PAGEDATTN_WG_SPLIT", "2"}}).wg_split, 2);
  EXPECT_EQ(parse({{"PAGEDATTN_WG_SPLIT", "3"}}).wg_split, 3);
  EXPECT_EQ(parse({{"PAGEDATTN_MERGE_ROWWISE", "0"}}).merge_rowwise, 0);
  EXPECT_EQ(parse({{"PAGEDATTN_MERGE_ROWWISE", "1"}}).merge_rowwise, 1);
  EXPECT_EQ(parse({{"PAGEDATTN_MERGE_COLS", "4"}}).merge_cols, 4);
  EXPECT_EQ(parse({{"PAGEDATTN_MERGE_COLS", "8"}}).merge_cols, 8);
}

TEST(Tuning, HopperSplitSmall) {
  const Overrides none;
  using K = KvKind;
  EXPECT_TRUE(hopper_split_small(128, K::f16, 2, kSplitSmallKeyHeads, none));  // 64k at Hk = 4 (run ss1)
  EXPECT_TRUE(hopper_split_small(128, K::f16, 2, 8 * (8192 + 1) * 4, none));   // 8 x 8k decodes (ss3)
  EXPECT_FALSE(hopper_split_small(128, K::f16, 2, kSplitSmallKeyHeads - 1, none));
  EXPECT_FALSE(hopper_split_small(128, K::f16, 4, kSplitSmallKeyHeads * 4, none));  // 17-32 rows off it (D = 64)
  EXPECT_FALSE(hopper_split_small(128, K::f16, 2, (32768 + 8) * 4, none));          // a 32k verify (ss2)
  EXPECT_FALSE(hopper_split_small(128, K::f16, 2, 4 * (8192 + 4) * 4, none));       // 4 x 8k (ss3: D = 128 1.013x)
  EXPECT_FALSE(hopper_split_small(128, K::f16, 0, kSplitSmallKeyHeads * 4, none));  // the kernel off
  EXPECT_FALSE(hopper_split_small(128, K::u8, 4, kSplitSmallKeyHeads * 4, none));   // one-byte codes never
  EXPECT_FALSE(hopper_split_small(128, K::fp8, 4, kSplitSmallKeyHeads * 4, none));
  // D = 256 from 3 x 2^16 (run re2: a 48k sequence at Hk = 4 0.960-0.995x on the kernel; ss2: 32k level)
  EXPECT_TRUE(hopper_split_small(256, K::f16, 2, (49152 + 1) * 4, none));
  EXPECT_FALSE(hopper_split_small(256, K::f16, 2, (32768 + 8) * 4, none));
  EXPECT_FALSE(hopper_split_small(256, K::f16, 2, 4 * (8192 + 4) * 4, none));
  EXPECT_FALSE(hopper_split_small(64, K::f16, 2, (49152 + 1) * 4, none));
  EXPECT_TRUE(hopper_split_small(64, K::f16, 2, kSplitSmallKeyHeads, none));
  Overrides o;
  o.wg_split = 2;  // an override decides alone
  EXPECT_FALSE(hopper_split_small(128, K::f16, 2, kSplitSmallKeyHeads * 4, o));
}

TEST(Tuning, HopperShared) {
  const Overrides none;
  using K = KvKind;
  EXPECT_FALSE(hopper_shared(64, K::f16, 64, 8192, 4, 132, none));  // one 8k verify: one CTA per SM
  EXPECT_TRUE(hopper_shared(64, K::f16, 64, 32768, 4, 132, none));   // past 16k keys
  EXPECT_TRUE(hopper_shared(64, K::f16, 64, 8192, 512, 132, none));  // an 8k prefill's chunks fill the SMs
  EXPECT_FALSE(hopper_shared(64, K::f16, 64, kSplitShortKeys, 131, 132, none));
  EXPECT_FALSE(hopper_shared(128, K::f16, 64, 32768, 512, 132, none));  // D = 64 only
  EXPECT_FALSE(hopper_shared(64, K::u8, 64, 32768, 512, 132, none));    // 16-bit caches only
  EXPECT_FALSE(hopper_shared(64, K::fp8, 64, 32768, 512, 132, none));
  EXPECT_FALSE(hopper_shared(64, K::f16, 128, 32768, 512, 132, none));  // 64-key tiles only
  EXPECT_FALSE(hopper_shared(64, K::f16, 0, 32768, 512, 132, none));    // Hopper kernel off
  Overrides o;
  o.wg_shared = 1;
  EXPECT_TRUE(hopper_shared(64, K::f16, 64, 1024, 1, 132, o));
  EXPECT_FALSE(hopper_shared(64, K::u8, 64, 1024, 1, 132, o));
  o.wg_shared = 0;
  EXPECT_FALSE(hopper_shared(64, K::f16, 64, 131072, 512, 132, o));
  EXPECT_EQ(parse_overrides([](const char* n) { return std::string(n) == "PAGEDATTN_WG_SHARED" ? "0" : nullptr; }).wg_shared, 0);
  EXPECT_EQ(parse_overrides([](const char* n) { return std::string(n) == "PAGEDATTN_WG_SHARED" ? "1" : nullptr; }).wg_shared, 1);
  EXPECT_EQ(parse_overrides([](const char*) -> const char* { return nullptr; }).wg_shared, -1);
}

TEST(Tuning, HopperSplitShared) {  // the key-split kernel's two-CTA form (D = 64, f16/bf16)
  using K = KvKind;
  const Overrides none;
  const int64_t long_keys = kSplitShortKeys + 1;
  EXPECT_TRUE(hopper_split_shared(64, K::f16, 4, long_keys, 4, 132, none));    // one sequence past 16k keys
  EXPECT_TRUE(hopper_split_shared(64, K::f16, 4, long_keys, 66, 132, none));   // up to half the SMs (run x2s2)
  EXPECT_FALSE(hopper_split_shared(64, K::f16, 4, long_keys, 67, 132, none));  // larger batches: one CTA
  EXPECT_FALSE(hopper_split_shared(64, K::f16, 2, kSplitShortKeys, 4, 132, none));  // 8k: one CTA (run x2s1)
  EXPECT_FALSE(hopper_split_shared(128, K::f16, 4, long_keys, 4, 132, none));
  Overrides o;
  o.wgs_shared = 1;
  EXPECT_TRUE(hopper_split_shared(64, K::f16, 2, 1024, 128, 132, o));
  EXPECT_FALSE(hopper_split_shared(64, K::f16, 0, 1024, 4, 132, o));  // no chunk on the key-split kernel
  EXPECT_FALSE(hopper_split_shared(128, K::f16, 2, 1024, 4, 132, o));
  EXPECT_FALSE(hopper_split_shared(64, K::u8, 4, 1024, 4, 132, o));
  EXPECT_FALSE(hopper_split_shared(64, K::fp8, 4, 1024, 4, 132, o));
  o.wgs_shared = 0;
  EXPECT_FALSE(hopper_split_shared(64, K::f16, 4, long_keys, 4, 132, o));
  EXPECT_EQ(parse_overrides([](const char* n) { return std::string(n) == "PAGEDATTN_WGS_SHARED" ? "1" : nullptr; }).wgs_shared, 1);
  EXPECT_EQ(parse_overrides([](const char* n) { return std::string(n) == "PAGEDATTN_WGS_SHARED" ? "0" : nullptr; }).wgs_shared, 0);
}

TEST(Tuning, HopperKeyTile) {
  const Overrides none;
  EXPECT_EQ(hopper_key_tile(128, false, false, none), 0);  // not an sm_90 device of an sm_90a build
  EXPECT_EQ(hopper_key_tile(64, false, true, none), 64);
  EXPECT_EQ(hopper_key_tile(128, false, true, none), 64);  // 64-key tiles on the per-slot mbarrier ring
  EXPECT_EQ(hopper_key_tile(256, false, true, none), 32);
  EXPECT_EQ(hopper_key_tile(128, true, true, none), 64);  // u8: 64-key tiles
  EXPECT_EQ(hopper_key_tile(256, true, true, none), 32);
  Overrides o;
  o.wgmma_u8 = false;
  EXPECT_EQ(hopper_key_tile(128, true, true, o), 0);
  EXPECT_EQ(hopper_key_tile(128, false, true, o), 64);
  o = Overrides{};
  o.wgmma = 128;
  EXPECT_EQ(hopper_key_tile(128, false, true, o), 128);
  EXPECT_EQ(hopper_key_tile(256, false, true, o), 32);  // the tile choice applies at D <= 128 only
  EXPECT_EQ(hopper_key_tile(128, true, true, o), 64);
  EXPECT_EQ(hopper_key_tile(128, false, false, o), 0);  // an override does not turn it on
  o.wgmma = 0;
  EXPECT_EQ(hopper_key_tile(64, false, true, o), 0);
  EXPECT_EQ(hopper_key_tile(256, true, true, o), 0);
}

TEST(Tuning, WideKeyTile) {  // D = 64's 128-row chunks on 128-key tiles where they stream long partitions
  using K = KvKind;
  const Overrides none;
  const int64_t sms = 132, per_sm = kWideTileKeys * sms;
  auto tile = [&](int64_t rows, int64_t keys) {
    return wide_key_tile(64, K::f16, 64, long_key_heads(rows, keys, 4), sms, none);
  };
  // one sequence at Hk = 4 over 132 SMs: a 128k sequence of 128 rows (4 x 131072 keys)
  EXPECT_EQ(tile(128, 131072), 128);
  EXPECT_EQ(tile(256, 32768), 128);  // 32k, 256 rows
  EXPECT_EQ(tile(128, 32768), 64);   // 32k, 128 rows
  EXPECT_EQ(wide_key_tile(64, K::f16, 64, per_sm, sms, none), 128);  // the threshold itself
  EXPECT_EQ(wide_key_tile(64, K::f16, 64, per_sm - 1, sms, none), 64);
  EXPECT_EQ(tile(64 * 128 * 64, kSplitShortKeys), 64);  // 8k-16k contexts, however many chunks
  EXPECT_EQ(tile(64 * 128 * 64, kSplitShortKeys + 1), 128);
  EXPECT_EQ(long_key_heads(64, 131072, 4), 0);  // chunks of more than 64 rows only
  EXPECT_EQ(long_key_heads(65, 131072, 4), 4 * 131072);
  EXPECT_EQ(long_key_heads(129, 20000, 2), 2 * 2 * 20000);
  EXPECT_EQ(wide_key_tile(128, K::f16, 64, 64 * per_sm, sms, none), 64);  // D = 64 only
  EXPECT_EQ(wide_key_tile(64, K::u8, 64, 64 * per_sm, sms, none), 64);    // 16-bit caches only
  EXPECT_EQ(wide_key_tile(64, K::fp8, 64, 64 * per_sm, sms, none), 64);
  EXPECT_EQ(wide_key_tile(64, K::f16, 0, 64 * per_sm, sms, none), 0);  // the Hopper kernel off
  Overrides o;
  o.wgmma = 64;  // PAGEDATTN_WGMMA=64 keeps 64-key tiles
  EXPECT_EQ(wide_key_tile(64, K::f16, 64, 64 * per_sm, sms, o), 64);
  o = Overrides{};
  o.wg_shared = 1;  // PAGEDATTN_WG_SHARED=1: the two-CTA form (64-key tiles) wherever it may run
  EXPECT_EQ(wide_key_tile(64, K::f16, 64, 64 * per_sm, sms, o), 64);
  o.wg_shared = 0;
  EXPECT_EQ(wide_key_tile(64, K::f16, 64, 64 * per_sm, sms, o), 128);
}

TEST(Tuning, HopperSplit) {  // the least row tiles on the key-split kernel; 0: none
  const Overrides none;
  const int64_t short_keys = kSplitShortKeys, long_keys = kSplitShortKeys + 1;
  const KvKind f16 = KvKind::f16, u8 = KvKind::u8, fp8 = KvKind::fp8;
  EXPECT_EQ(hopper_split(128, f16, 128, long_keys, false, none), 2);  // D = 128: 17-64 rows at any context
  EXPECT_EQ(hopper_split(128, f16, 128, short_keys, false, none), 2);
  EXPECT_EQ(hopper_split(64, f16, 64, short_keys, false, none), 2);   // D = 64: 17-64 rows up to 16k keys,
  EXPECT_EQ(hopper_split(64, f16, 64, long_keys, false, none), 4);    // 33-64 beyond (run d5)
  EXPECT_EQ(hopper_split(64, f16, 64, long_keys, true, none), 2);     // ... 17-64 on the two-CTA form (x2s4)
  EXPECT_EQ(hopper_split(128, f16, 64, long_keys, true, none), 2);
  EXPECT_EQ(hopper_split(64, fp8, 64, long_keys, true, none), 4);     // (f16/bf16 only)
  EXPECT_EQ(hopper_split(256, f16, 32, long_keys, false, none), 2);   // D = 256: 17-64 rows (run d2)
  // u8 (runs u8s1, wp1, u8r17): D = 64 as fp8 (17-64 rows up to 16k keys, 33-64 beyond), 33-64 rows at
  // D = 128, at D = 256 up to 40k keys (a 32k verify)
  EXPECT_EQ(hopper_split(64, u8, 64, short_keys, false, none), 2);
  EXPECT_EQ(hopper_split(64, u8, 64, long_keys, false, none), 4);
  EXPECT_EQ(hopper_split(128, u8, 64, short_keys, false, none), 4);
  EXPECT_EQ(hopper_split(128, u8, 64, long_keys, false, none), 4);
  EXPECT_EQ(hopper_split(256, u8, 32, short_keys, false, none), 4);
  EXPECT_EQ(hopper_split(256, u8, 32, kSplitMidKeys, false, none), 4);
  EXPECT_EQ(hopper_split(256, u8, 32, kSplitMidKeys + 1, false, none), 0);
  EXPECT_EQ(hopper_split(128, f16, 0, short_keys, false, none), 0);   // the Hopper kernel off
  // fp8 (runs f8s1, f8s2): D = 64 as f16; D = 128 33-64 rows; D = 256 33-64 rows up to 16k keys
  EXPECT_EQ(hopper_split(64, fp8, 64, short_keys, false, none), 2);
  EXPECT_EQ(hopper_split(64, fp8, 64, long_keys, false, none), 4);
  EXPECT_EQ(hopper_split(128, fp8, 64, short_keys, false, none), 4);
  EXPECT_EQ(hopper_split(128, fp8, 64, long_keys, false, none), 4);
  EXPECT_EQ(hopper_split(256, fp8, 32, short_keys, false, none), 4);
  EXPECT_EQ(hopper_split(256, fp8, 32, long_keys, false, none), 0);
  EXPECT_EQ(hopper_split(128, fp8, 0, short_keys, false, none), 0);
  Overrides on;
  on.wg_split = 1;
  EXPECT_EQ(hopper_split(64, f16, 64, short_keys, false, on), 4);
  EXPECT_EQ(hopper_split(256, f16, 32, short_keys, false, on), 4);    // 33-64 rows only, D = 256 included
  EXPECT_EQ(hopper_split(256, fp8, 32, long_keys, false, on), 4);
  EXPECT_EQ(hopper_split(128, u8, 64, short_keys, false, on), 4);
  EXPECT_EQ(hopper_split(256, f16, 0, short_keys, false, on), 0);     // an override does not turn it on
  Overrides wider;
  wider.wg_split = 2;                                            // 17-64 rows
  EXPECT_EQ(hopper_split(64, f16, 64, long_keys, false, wider), 2);
  EXPECT_EQ(hopper_split(128, f16, 128, long_keys, false, wider), 2);
  EXPECT_EQ(hopper_split(128, fp8, 64, long_keys, false, wider), 2);
  EXPECT_EQ(hopper_split(256, u8, 32, long_keys, false, wider), 2);
  Overrides every;
  every.wg_split = 3;                                            // 1-64 rows
  EXPECT_EQ(hopper_split(256, f16, 32, long_keys, false, every), 1);
  EXPECT_EQ(hopper_split(64, u8, 64, short_keys, false, every), 1);
  EXPECT_EQ(hopper_split(128, f16, 0, long_keys, false, every), 0);
  Overrides off;
  off.wg_split = 0;
  EXPECT_EQ(hopper_split(128, f16, 128, short_keys, false, off), 0);
  EXPECT_EQ(hopper_split(128, fp8, 64, short_keys, false, off), 0);
}

TEST(Tuning, WideChunks) {
  const Overrides none;
  EXPECT_TRUE(wide_chunks(128, 0, true, none));
  EXPECT_FALSE(wide_chunks(256, 0, true, none));  // D = 256 on mma.sync: 0.88x
  EXPECT_TRUE(wide_chunks(256, 32, true, none));  // ... but the Hopper kernel takes them
  EXPECT_FALSE(wide_chunks(128, 0, false, none)); // the 8-row-tile variant does not fit
  Overrides o;
  o.wide_prefill = 1;
  EXPECT_TRUE(wide_chunks(256, 0, true, o));
  EXPECT_FALSE(wide_chunks(256, 0, false, o));
  o.wide_prefill = 0;
  EXPECT_FALSE(wide_chunks(64, 64, true, o));
}

TEST(Tuning, MergeSplit) {
  const Overrides none;
  EXPECT_EQ(merge_split(256, 4, 132, none), 4);    // decode, few rows: 4 column blocks (D / 64)
  EXPECT_EQ(merge_split(128, 4, 132, none), 2);
  EXPECT_EQ(merge_split(64, 4, 132, none), 1);
  EXPECT_EQ(merge_split(256, 40, 132, none), 2);   // 80 CTAs fit one per SM, 160 do not
  EXPECT_EQ(merge_split(256, 66, 132, none), 2);
  EXPECT_EQ(merge_split(256, 67, 132, none), 1);
  EXPECT_EQ(merge_split(256, 512, 132, none), 1);  // many rows: whole rows
  Overrides o;
  o.merge_split = 4;
  EXPECT_EQ(merge_split(256, 512, 132, o), 4);
  EXPECT_EQ(merge_split(128, 4, 132, o), 2);       // 4 > D / 64: the rule
  o.merge_split = 1;
  EXPECT_EQ(merge_split(256, 4, 132, o), 1);
}

TEST(Tuning, DeterministicMergeBlocks) {
  const Overrides none;
  // the groups stay D / 64 blocks' (deterministic_merge_split); the CTAs take the most blocks in one wave
  EXPECT_EQ(deterministic_merge_split(256), 4);
  EXPECT_EQ(deterministic_merge_blocks(256, 16, 132, none), 4);   // the seed's T = 1: 64 CTAs
  EXPECT_EQ(deterministic_merge_blocks(256, 64, 132, none), 2);   // T = 4: 128 CTAs
  EXPECT_EQ(deterministic_merge_blocks(256, 128, 132, none), 1);  // T = 8: 128 CTAs (not 4 waves of 512)
  EXPECT_EQ(deterministic_merge_blocks(128, 16, 132, none), 2);
  EXPECT_EQ(deterministic_merge_blocks(128, 128, 132, none), 1);
  EXPECT_EQ(deterministic_merge_blocks(192, 128, 132, none), 3);  // 32 groups: not over 1 or 2 blocks
  EXPECT_EQ(deterministic_merge_blocks(64, 4, 132, none), 1);
  EXPECT_EQ(deterministic_merge_blocks(80, 4, 132, none), 1);
  Overrides o;
  o.merge_split = 1;  // PAGEDATTN_MERGE_SPLIT: the blocks, never the groups
  EXPECT_EQ(deterministic_merge_blocks(256, 4, 132, o), 1);
  EXPECT_EQ(deterministic_merge_blocks(192, 4, 132, o), 3);
  o.merge_split = 4;
  EXPECT_EQ(deterministic_merge_blocks(256, 512, 132, o), 4);
  EXPECT_EQ(deterministic_merge_blocks(128, 512, 132, o), 1);  // 4 > D / 64 there: the rule
}

TEST(Tuning, MergeBatch) {
  const Overrides none;
  // D = 256, split 1: 512 threads over 64 float4 chunks, 8 partition groups
  EXPECT_EQ(merge_groups(256, 1), 8);
  EXPECT_EQ(merge_groups(256, 4), 32);
  EXPECT_EQ(merge_batch(256, 1, 8, 100, 132, none), 1);    // one partition per thread
  EXPECT_EQ(merge_batch(256, 1, 9, 100, 132, none), 4);    // 2 per thread
  EXPECT_EQ(merge_batch(256, 1, 32, 100, 132, none), 4);   // 4 per thread
  EXPECT_EQ(merge_batch(256, 1, 33, 100, 132, none), 8);   // 5 per thread, one wave
  EXPECT_EQ(merge_batch(256, 1, 33, 200, 132, none), 4);   // 5 per thread, more than one wave
  EXPECT_EQ(merge_batch(256, 2, 33, 100, 132, none), 4);   // 100 x 2 CTAs: not one wave
  Overrides o;
  o.merge_batch = 8;
  EXPECT_EQ(merge_batch(256, 1, 1, 100, 132, o), 8);
}

// Deterministic mode's merge: a CTA per row and column block up to 4 of them per SM, a thread per 4
// columns past that.
TEST(Tuning, MergeRowwise) {
  const Overrides none;
  EXPECT_FALSE(merge_rowwise(128, 4, 132, none));   // a lone sequence at T = 8 (G = 4, D = 256): 512 CTAs
  EXPECT_FALSE(merge_rowwise(132, 4, 132, none));   // 528: 4 per SM
  EXPECT_TRUE(merge_rowwise(133, 4, 132, none));
  EXPECT_TRUE(merge_rowwise(512, 4, 132, none));    // the 32 x 8k batch at T = 1 (G = 4, D = 256)
  EXPECT_FALSE(merge_rowwise(512, 1, 132, none));   // D = 64 (split 1): 512 CTAs
  Overrides o;
  o.merge_rowwise = 1;
  EXPECT_TRUE(merge_rowwise(1, 1, 132, o));
  o.merge_rowwise = 0;
  EXPECT_FALSE(merge_rowwise(100000, 4, 132, o));
}

TEST(Tuning, MergeCols8) {
  const Overrides none;
  EXPECT_FALSE(merge_cols8(128, 132, none));  // the 32 x 8k batch at T = 1 (512 rows, 4 per CTA at D = 256)
  EXPECT_TRUE(merge_cols8(132, 132, none));   // one CTA per SM
  EXPECT_TRUE(merge_cols8(512, 132, none));   // T = 4
  Overrides o;
  o.merge_cols = 8;
  EXPECT_TRUE(merge_cols8(1, 132, o));
  o.merge_cols = 4;
  EXPECT_FALSE(merge_cols8(100000, 132, o));
}

// Units of kFoldBlock partitions: on the key-split kernel's partials where they are f16; PAGEDATTN_UNITS=0 none.
TEST(Tuning, FoldBlock) {
  const Overrides none;
  EXPECT_EQ(fold_block(true, true, none), kFoldBlock);
  EXPECT_EQ(fold_block(true, false, none), 0);   // f32 partials (bf16 caches, PAGEDATTN_HALF_PARTIALS=0)
  EXPECT_EQ(fold_block(false, true, none), 0);   // fwd_kernel's layouts
  EXPECT_EQ(fold_block(true, true, parse({{"PAGEDATTN_UNITS", "0"}})), 0);
}

// Deterministic mode on the key-split Hopper kernel: f16/bf16 at its widths where it is on; the override
// both ways.
TEST(Tuning, DeterministicSplit) {
  const Overrides none;
  using K = KvKind;
  for (int d : {64, 128, 256}) {
    EXPECT_TRUE(deterministic_split(d, K::f16, d == 256 ? 32 : 64, none)) << d;
    EXPECT_FALSE(deterministic_split(d, K::f16, 0, none)) << d << ": the Hopper kernel off";
    EXPECT_FALSE(deterministic_split(d, K::u8, 64, none)) << d;
    EXPECT_FALSE(deterministic_split(d, K::fp8, 64, none)) << d;
  }
  for (int d : {80, 96, 112, 192}) EXPECT_FALSE(deterministic_split(d, K::f16, 64, none)) << d;
  EXPECT_FALSE(deterministic_split(128, K::f16, 64, parse({{"PAGEDATTN_DETERMINISTIC_SPLIT", "0"}})));
  EXPECT_TRUE(deterministic_split(128, K::f16, 64, parse({{"PAGEDATTN_DETERMINISTIC_SPLIT", "1"}})));
}

}  // namespace
