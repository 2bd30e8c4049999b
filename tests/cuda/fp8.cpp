// fp8 (e4m3) caches on the cuda backend: fwd_kernel converts the codes to f16 in its fragment loads
// (cvt.rn.f16x2.e4m3x2), the kv head's key scale joins the softmax scale and its value scale the output.
// Every path (decodes, verifies and trees, chunked prefill, mixed batches, long contexts with merges,
// scores, lse), one suite per query dtype: f16 queries within 3e-3, bf16 within 1e-2 (suite.h). The
// write-in is bit-identical to the oracle's quantiser (numeric.h's f32_to_e4m3_bits), at the rule's
// corners too: saturation, infinities, e4m3 subnormals, ties; NaN inputs become the NaN code 0x7f.
#include "cuda/suite.h"

using namespace gpu_suite;

namespace {
CaseConfig fp8(CaseConfig cfg, DType query) {
  cfg.kv_precisions = {KVPrecision::fp8};
  cfg.query_dtypes = {query};
  cfg.p_lse = 0.3;
  return cfg;
}
}  // namespace

TEST(Cuda, Fp8Random) {
  REQUIRE_GPU();
  for (DType q : {DType::f16, DType::bf16}) {
    const bool f16 = q == DType::f16;
    const uint64_t seed = base_seed() + (f16 ? 6000000 : 6100000);
    run_suite(f16 ? "fp8-few-query q=f16" : "fp8-few-query q=bf16", fp8(few_query_config(), q), seed, 120);
    run_suite(f16 ? "fp8-mixed q=f16" : "fp8-mixed q=bf16", fp8(mixed_config(300, 4000, 600, 12000), q),
              seed + 10000, 40);
    run_suite(f16 ? "fp8-long q=f16" : "fp8-long q=bf16", fp8(long_context_config(4000, 20000, 40000), q),
              seed + 20000, 8);
    run_suite(f16 ? "fp8-long-chunks q=f16" : "fp8-long-chunks q=bf16",
              fp8(long_chunks(mixed_config(300, 4000, 600, 12000)), q), seed + 30000, 8);
  }
}

// New keys and values at the corners of the write-in rule (testing::apply_fp8_edge_rows): the cache
// bit-identical to the oracle's, the output within the tolerance.
TEST(Cuda, Fp8EdgeRowsWrittenIn) {
  REQUIRE_GPU();
  CaseConfig cfg = fp8(mixed_config(200, 2000, 300, 6000), DType::f16);  // fused and separate write-in
  cfg.query_dtypes = {DType::f16, DType::bf16, DType::f32};
  cfg.p_write = 1.0;
  run_edited_suite("fp8-edge-rows", cfg, base_seed() + 6200000, 32, apply_fp8_edge_rows);
}

// NaN in a new key or value row: written as e4m3's NaN code 0x7f, as the oracle writes it (test_numeric
// checks that rule; the outputs of rows that see it are NaN on both sides and not compared).
TEST(Cuda, Fp8NaNWrittenAsNaNCode) {
  REQUIRE_GPU();
  CaseConfig cfg = fp8(few_query_config(), DType::f16);
  cfg.p_write = 1.0;
  for (int i = 0; i < case_count(8); ++i) {
    Case c = make_random_case(base_seed() + 6300000 + i, cfg);
    const int64_t n_new = static_cast<int64_t>(c.num_tokens) * c.num_kv_heads * c.head_size;
    const uint16_t nan_bits = (i % 2) ? 0xfe00u : 0x7e00u;  // f16 NaN, both signs
    for (int64_t e = i; e < n_new; e += 97) reinterpret_cast<uint16_t*>((i % 3) ? c.key.data() : c.value.data())[e] = nan_bits;
    Case ref = c;
    oracle::forward(ref.params());
    {
      DeviceCase d(c);
      forward(d.params(), Options{Backend::cuda});
      d.download();
    }
    // (bit-identical rows: the row's other codes show it was written, not left poisoned)
    EXPECT_EQ(compare_cache(c, ref), "") << c.describe();
  }
}

// fp8 caches on the Hopper kernel (128-row chunks: the default on sm_90a, as for u8; codes converted to
// f16 tiles in shared memory by cvt), per query dtype, and the same chunks on fwd_kernel's 8-row-tile
// variant (PAGEDATTN_WGMMA_U8=0, the path of other devices).
TEST(Cuda, HopperFp8Random) {
  REQUIRE_GPU();
  if (const char* why = no_wgmma()) GTEST_SKIP() << why;
  EnvGuard on("PAGEDATTN_WGMMA", ""), wide("PAGEDATTN_WIDE_PREFILL", ""), bytes("PAGEDATTN_WGMMA_U8", "");
  CaseConfig cfg = fp8(mixed_config(300, 4000, 600, 12000), DType::f16);
  cfg.query_dtypes = {DType::f16, DType::bf16};
  cfg.group_sizes = {1, 3, 4, 8, 16};
  run_hopper_byte_suites(cfg, "f8", "fp8", base_seed() + 6400000);
  EnvGuard off("PAGEDATTN_WGMMA_U8", "0");
  run_suite("prefill-mma-fp8", cfg, base_seed() + 6600000, 30);
}

// fp8 chunks on the key-split Hopper kernel ("wgs<keys>f8": codes converted in place in f16's ring, the
// scales as on fwd_kernel), per query dtype, where tuning::hopper_split sends them: 17-64 rows at D = 64
// (33-64 past 16k keys), 33-64 rows at D = 128, and at D = 256 up to 16k keys. The plans launch it (and
// fwd_kernel where the rule says so), then chains and trees in the row bands where every chunk of these
// cases takes it (G = 4 with T 9-16, G = 8 with T 5-8, G = 16 with T 3-4; few-query contexts stay under
// 16k keys), 17-32-row chunks at D = 64, mixed few-query cases, and long contexts at D = 64 and 128.
TEST(Cuda, Fp8SplitRandom) {
  REQUIRE_GPU();
  if (const char* why = no_wgmma()) GTEST_SKIP() << why;
  EnvGuard on("PAGEDATTN_WGMMA", ""), split("PAGEDATTN_WG_SPLIT", ""), bytes("PAGEDATTN_WGMMA_U8", "");
  CaseConfig one = fp8(few_query_config(), DType::f16);
  one.group_sizes = {8};
  for (int d : {64, 128, 256}) {
    one.head_sizes = {d};
    expect_launched(one, 5, 8, base_seed() + 6700000 + d, 384, d == 256 ? "wgs32f8" : "wgs64f8");  // 40-64 rows
  }
  one.head_sizes = {64};
  expect_launched(one, 3, 4, base_seed() + 6710064, 384, "wgs64f8");  // 24-32 rows at D = 64
  for (int d : {128, 256}) {  // ... at D = 128 and 256 on fwd_kernel's 2 row tiles (4 warps, no variant name)
    one.head_sizes = {d};
    expect_launched(one, 3, 4, base_seed() + 6710000 + d, 128, "");
  }
  CaseConfig far = fp8(long_context_config(17000, 17000, 40000), DType::f16);  // D = 256 past 16k keys
  far.p_window = 0.0;  // (a window under 16k keys would make the call a short one)
  far.head_sizes = {256};
  far.group_sizes = {8};
  expect_launched(far, 5, 8, base_seed() + 6720000, 128, "");  // (4 row tiles: 4 warps)
  for (DType q : {DType::f16, DType::bf16}) {
    const bool f16 = q == DType::f16;
    const uint64_t seed = base_seed() + (f16 ? 6800000 : 6900000);
    CaseConfig cfg = fp8(few_query_config(), q);
    const std::string qn = f16 ? " q=f16" : " q=bf16";
    run_row_bands_33_64("fp8-wgs", cfg, seed, 60, qn);
    CaseConfig b32 = cfg;  // 17-32 rows at D = 64 (G = 8, T 3-4)
    b32.group_sizes = {8};
    b32.min_tokens = 3;
    b32.max_tokens = 4;
    b32.head_sizes = {64};
    run_suite(("fp8-wgs-g8-17-32-d64" + qn).c_str(), b32, seed + 3000, 30);
    run_suite(f16 ? "fp8-wgs-mixed q=f16" : "fp8-wgs-mixed q=bf16", cfg, seed + 5000, 40);
    CaseConfig lng = fp8(long_context_config(4000, 20000, 40000), q);
    lng.head_sizes = {64, 128};
    lng.group_sizes = {8};
    lng.min_tokens = 5;
    lng.max_tokens = 8;
    run_suite(f16 ? "fp8-wgs-long q=f16" : "fp8-wgs-long q=bf16", lng, seed + 6000, 12);
  }
}
