// GPU tests: Prefill and mixed batches: 64- and 128-row chunks on every kernel variant (mma.sync and Hopper).
#include "core/tuning.h"
#include "cuda/suite.h"

using namespace gpu_suite;

TEST(Cuda, TileAndMixedRandom) {
  REQUIRE_GPU();
  run_suite("tile-mixed", mixed_config(160, 2000, 400, 8000), base_seed() + 200000, 200);
}

// f32 queries, new keys / values and outputs (the op's io type may be f32; every other suite draws f16
// or bf16): the query and new-row loads take load_io_n's f32 branch (16-byte float4 loads), the outputs
// store_io4's, in the few-query, tile and Hopper kernels alike. First run: the session after 6.
TEST(Cuda, F32QueriesRandom) {
  REQUIRE_GPU();
  CaseConfig cfg = mixed_config(160, 2000, 400, 8000);
  cfg.query_dtypes = {DType::f32};
  run_suite("f32-queries", cfg, base_seed() + 2900000, 40);
}

TEST(Cuda, TileLongContextRandom) {
  REQUIRE_GPU();
  // Issue 4's range: T 17..2048 (the longest in LongPrefillAndChunk), past_len 0..32k, every KV precision
  // and head size; few heads so that the oracle (16 host threads) keeps up.
  CaseConfig cfg = few_query_config();
  cfg.min_seqs = 1;
  cfg.max_seqs = 3;
  cfg.min_tokens = 17;
  cfg.max_tokens = 600;
  cfg.max_past = 32768;
  cfg.group_sizes = {1, 2, 4, 8};
  cfg.kv_heads = {1};
  cfg.max_total_tokens = 600;
  cfg.max_total_context = 34000;
  run_suite("tile-long", cfg, base_seed() + 700000, 120);
}

TEST(Cuda, LongPrefillAndChunk) {
  REQUIRE_GPU();
  CaseConfig cfg = few_query_config();
  cfg.min_seqs = cfg.max_seqs = 1;
  cfg.group_sizes = {2};
  cfg.kv_heads = {1};
  cfg.head_sizes = {64};
  cfg.min_tokens = 1024;
  cfg.max_tokens = 2048;
  cfg.min_past = 0;
  cfg.max_past = 32768;
  cfg.p_tree = 0.0;
  run_suite("long-prefill", cfg, base_seed() + 300000, 4);
}

// Wide prefill tiles (PAGEDATTN_WIDE_PREFILL=1): 128-row chunks at every head size on the default
// 8-row-tile kernels (on sm_90a the Hopper kernel, elsewhere mma.sync), the same cases and
// tolerances as the tile suites.
TEST(Cuda, WidePrefillTilesRandom) {
  REQUIRE_GPU();
  EnvGuard guard("PAGEDATTN_WIDE_PREFILL", "1");
  run_suite("wide-prefill", mixed_config(300, 4000, 600, 12000), base_seed() + 800000, 100);
}

// The 8-warp mma.sync 128-row variant (one row tile per warp) for f16/bf16 too: the path of builds
// without the Hopper kernel when two row tiles per warp are off (PAGEDATTN_PREFILL_MT2=0).
TEST(Cuda, WidePrefillOneRowTilePerWarpRandom) {
  REQUIRE_GPU();
  EnvGuard wide("PAGEDATTN_WIDE_PREFILL", "1"), mt2("PAGEDATTN_PREFILL_MT2", "0"), wg("PAGEDATTN_WGMMA", "0");
  CaseConfig cfg = mixed_config(300, 4000, 600, 12000);
  CaseConfig f16 = cfg;
  f16.kv_precisions = {KVPrecision::f16};
  expect_launched(f16, 200, 300, base_seed() + 2100000, 256);
  run_suite("wide-prefill-mt1", cfg, base_seed() + 2100000, 40);
}

// Two row tiles per warp in the 128-row prefill variant (the default at D <= 128 for f16/bf16 KV where
// the Hopper kernel is not used; PAGEDATTN_WGMMA=0 keeps it from replacing it here): the tile cases.
TEST(Cuda, PrefillTwoRowTilesPerWarpRandom) {
  REQUIRE_GPU();
  EnvGuard guard("PAGEDATTN_WGMMA", "0");
  CaseConfig cfg = mixed_config(300, 4000, 600, 12000);
  cfg.head_sizes = {64, 128};
  CaseConfig f16 = cfg;  // one long f16 prefill: 128-row chunks on 4 warps, where the variant exists
  f16.kv_precisions = {KVPrecision::f16};
  expect_launched(f16, 200, 300, base_seed() + 1500000, 128, "mt2");
  run_suite("prefill-mt2", cfg, base_seed() + 1500000, 80);
}

// The Hopper prefill kernel (wg_kernel: wgmma, 128-row chunks, every KV precision; the default on sm_90
// devices with a build that has sm_90a code; key tiles 64/128 at D <= 128, 32 at D = 256): the tile
// cases plus long chunks over a long context (partials and the merge), with the default tile, then
// with each tile forced at D <= 128 (PAGEDATTN_WGMMA=64/128); same tolerances.
TEST(Cuda, HopperPrefillRandom) {
  REQUIRE_GPU();
  if (const char* why = no_wgmma()) GTEST_SKIP() << why;
  // the default selection, whatever the caller's environment says
  EnvGuard on("PAGEDATTN_WGMMA", ""), wide("PAGEDATTN_WIDE_PREFILL", ""), u8("PAGEDATTN_WGMMA_U8", "");
  CaseConfig cfg = mixed_config(300, 4000, 600, 12000);
  cfg.head_sizes = {64, 128, 256};
  cfg.group_sizes = {1, 3, 4, 6, 8, 16};  // also G that does not divide the 128 rows
  CaseConfig lng = long_chunks(cfg);
  CaseConfig f16 = cfg;  // one long f16 prefill: 128-row chunks on the Hopper kernel
  f16.kv_precisions = {KVPrecision::f16};
  f16.head_sizes = {256};
  expect_launched(f16, 200, 300, base_seed() + 1700000, 384, "wg32");  // (two consumer warpgroups, a producer)
  run_suite("prefill-wg", cfg, base_seed() + 1700000, 100);
  run_suite("prefill-wg-long", lng, base_seed() + 1800000, 24);
  // partitions forced to 192 keys: a partition's second 128-key tile is half empty, and every other
  // partition begins at 64 mod 128
  Options forced{Backend::cuda};
  forced.partition_tokens = 192;
  run_suite("prefill-wg-p192", lng, base_seed() + 2200000, 12, forced);
  cfg.head_sizes = lng.head_sizes = f16.head_sizes = {64, 128};
  const Suite tiles = make_suite("prefill-wg64/128", cfg, base_seed() + 1900000, 40);
  const Suite tiles_long = make_suite("prefill-wg64/128-long", lng, base_seed() + 2000000, 12);
  for (const char* keys : {"64", "128"}) {
    EnvGuard guard("PAGEDATTN_WGMMA", keys);
    // each head size: wg64, and wg128 at D = 64, have a producer warpgroup (384 threads); wg128 at D = 128
    // 256 (its 3-slot ring has no producer)
    for (const int d : {64, 128}) {
      CaseConfig one = f16;
      one.head_sizes = {d};
      expect_launched(one, 200, 300, base_seed() + 1900000, std::string(keys) == "64" || d == 64 ? 384 : 256,
                      (std::string("wg") + keys).c_str());
    }
    check_suite((std::string("prefill-wg") + keys).c_str(), tiles);
    check_suite((std::string("prefill-wg") + keys + "-long").c_str(), tiles_long);
  }
  {  // D = 64 on two CTAs per SM (tuning::hopper_shared: past 16k keys or with many chunks) wherever it may run
    EnvGuard keys("PAGEDATTN_WGMMA", ""), shared("PAGEDATTN_WG_SHARED", "1");
    f16.head_sizes = {64};
    expect_launched(f16, 200, 300, base_seed() + 1900000, 256, "wg64x2");
    check_suite("prefill-wg64x2", tiles);
    check_suite("prefill-wg64x2-long", tiles_long);
  }
}

// D = 64's 128-row f16/bf16 chunks on 128-key tiles where they stream long partitions (tuning::wide_key_tile:
// past 16k keys and from kWideTileKeys keys per SM over the call's 128-row chunks times their keys and
// kv heads), else on 64-key tiles (two CTAs per SM past 16k keys: "wg64x2"); then oracle cases on the
// rule's path.
TEST(Cuda, WideKeyTileFollowsItsRule) {
  REQUIRE_GPU();
  if (const char* why = no_wgmma()) GTEST_SKIP() << why;
  EnvGuard keys("PAGEDATTN_WGMMA", ""), shared("PAGEDATTN_WG_SHARED", "");
  int dev = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
  CaseConfig cfg = long_context_config(32000, 32000, 40000);
  cfg.kv_precisions = {KVPrecision::f16, KVPrecision::bf16};
  cfg.kv_heads = {4};
  cfg.group_sizes = {8};
  cfg.head_sizes = {64};
  cfg.p_window = 0.0;  // (a window would cut the keys below the rule's)
  const uint64_t seed = base_seed() + 2400000;
  // T = 32 (256 rows: two 128-row chunks) and T = 16 (one chunk) over 32000 keys at Hk = 4
  for (const int t : {16, 32}) {
    const bool long_tiles = tuning::long_key_heads(t * 8, 32000 + t, 4) >= tuning::kWideTileKeys * sms;
    SCOPED_TRACE("T = " + std::to_string(t) + ", " + std::to_string(sms) + " SMs");
    expect_launched(cfg, t, t, seed + t, long_tiles ? 384 : 256, long_tiles ? "wg128" : "wg64x2");
  }
  // 16k keys and fewer: 64-key tiles however many chunks (T = 250: 16 chunks x 4 kv heads, on two CTAs per
  // SM where those fill the SMs)
  CaseConfig short_keys = cfg;
  short_keys.min_past = short_keys.max_past = static_cast<int>(tuning::kSplitShortKeys) - 384;  // (+ T = 250)
  const bool two = 16 * 4 >= sms;
  expect_launched(short_keys, 250, 250, seed + 1, two ? 256 : 384, two ? "wg64x2" : "wg64");
  cfg.min_tokens = cfg.max_tokens = 32;
  cfg.min_seqs = cfg.max_seqs = 1;
  run_suite("wide-key-tile", cfg, seed, 6);
}

// 64-row prefill chunks at every head size (PAGEDATTN_WIDE_PREFILL=0; the default at D = 256, and the
// path of devices where the 8-row-tile variant does not fit).
TEST(Cuda, NarrowPrefillTilesRandom) {
  REQUIRE_GPU();
  EnvGuard guard("PAGEDATTN_WIDE_PREFILL", "0");
  run_suite("narrow-prefill", mixed_config(300, 4000, 600, 12000), base_seed() + 1100000, 60);
}
