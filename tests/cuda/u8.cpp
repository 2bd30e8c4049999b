// GPU tests: u8 caches: accuracy over long key sums and small value ranges, the rows written in, and the Hopper
// kernel's u8 path.
#include "cuda/suite.h"

using namespace gpu_suite;

// u8 accuracy over long key sums. The value side once folded the zero point as two sums ~128x the
// result, so the error grew with the keys a CTA summed (rel_l2 1.4e-2 at 8 x 64k, T = 16). Contexts of
// 56k-66k in batches of 8 (the planner then gives each CTA long partitions), every head size, G up to 16,
// T up to 16, f16 and bf16 queries; each case runs with the planner's partitions and again with one
// partition per chunk (a CTA sums a whole context), and one sequence of ~512k runs the same way. The
// oracle's cost (T * ctx * H * D) stays at tens of GFLOP per case (Hk = 1; G and T capped per D).
TEST(Cuda, U8LongContextAccuracy) {
  REQUIRE_GPU();
  struct Shape {
    int d;
    std::vector<int> groups;
    int max_tokens;
  };
  uint64_t seed = base_seed() + 5000000;
  for (const Shape& sh : {Shape{64, {1, 4, 16}, 16}, Shape{128, {1, 4, 8}, 16}, Shape{256, {1, 4, 8}, 8}}) {
    CaseConfig cfg = few_query_config();
    cfg.kv_precisions = {KVPrecision::u8};
    cfg.head_sizes = {sh.d};
    cfg.group_sizes = sh.groups;
    cfg.kv_heads = {1};
    cfg.min_seqs = cfg.max_seqs = 8;
    cfg.min_past = 56000;
    cfg.max_past = 66000;
    cfg.min_tokens = 1;
    cfg.max_tokens = sh.max_tokens;
    cfg.max_total_context = 8 * (66000 + 16);
    cfg.block_sizes = {16, 32};
    cfg.p_window = cfg.p_alibi = 0.1;  // both shorten what a row attends to
    const std::string name = "u8-long-d" + std::to_string(sh.d);
    const Suite suite = make_suite(name.c_str(), cfg, seed, 4);
    check_suite(name.c_str(), suite);
    check_suite((name + "-whole").c_str(), suite, whole_context_partitions());
    seed += 100;
  }
  CaseConfig one = few_query_config();
  one.kv_precisions = {KVPrecision::u8};
  one.head_sizes = {128};
  one.group_sizes = {1, 4};
  one.kv_heads = {1};
  one.min_seqs = one.max_seqs = 1;
  one.min_past = 500000;
  one.max_past = 524000;
  one.max_tokens = 4;
  one.max_total_context = 1 << 20;
  one.block_sizes = {32};
  one.p_window = one.p_alibi = 0.0;
  const Suite suite = make_suite("u8-512k", one, seed, 2);
  check_suite("u8-512k", suite);
  check_suite("u8-512k-whole", suite, whole_context_partitions());
}

// u8 value rows of small range (1e-3 to 1e-1 across a row) over ~64k keys, f16 and bf16 queries: the
// P V operand f16(p * vscale) fell into f16 subnormals (range 0.01: rel_l2 3.9e-2 emulated by
// bench/u8_pv_rounding.py) until the kernels scaled it by a power of two (u8_value_exp). Every u8
// kernel: few-query rows, 128-row chunks (G = 8, T = 16: the Hopper kernel), whole-context partitions.
TEST(Cuda, U8SmallValueRanges) {
  REQUIRE_GPU();
  uint64_t seed = base_seed() + 5200000;
  for (const int d : {64, 128, 256}) {
    CaseConfig cfg = few_query_config();
    cfg.kv_precisions = {KVPrecision::u8};
    cfg.head_sizes = {d};
    cfg.group_sizes = {1, 4, 8};
    cfg.kv_heads = {1};
    cfg.min_seqs = 2;
    cfg.max_seqs = 3;
    cfg.min_past = 56000;
    cfg.max_past = 66000;
    cfg.max_tokens = 16;
    cfg.max_total_context = 3 * (66000 + 16);
    cfg.block_sizes = {16, 32};
    cfg.p_window = cfg.p_alibi = 0.1;
    // value rows of range ~5 (scales 0.004-0.03, N(0, 1) rows) times f, f log-uniform in [2e-4, 2e-2]
    auto small_values = [](Case& c) {
      std::mt19937_64 g(c.seed);
      const double u = static_cast<double>(g() >> 11) * 0x1.0p-53;
      scale_values(c, 2e-4 * std::pow(100.0, u));
    };
    const std::string name = "u8-small-values-d" + std::to_string(d);
    const Suite suite = make_suite(name.c_str(), cfg, seed, 6, small_values);
    check_suite(name.c_str(), suite);
    check_suite((name + "-whole").c_str(), suite, whole_context_partitions());
    seed += 100;
  }
}

// u8 rows at the corners of the rule written in by the op (far from zero, constant, subnormal ranges,
// values up to 65504: the rows far from zero gave NaN with the earlier f16 zero point): the written
// parameters and codes equal the oracle's, the output is finite and within the u8 tolerance.
TEST(Cuda, U8EdgeRowsWrittenIn) {
  REQUIRE_GPU();
  CaseConfig cfg = few_query_config();
  cfg.kv_precisions = {KVPrecision::u8};
  cfg.p_write = 1.0;
  run_edited_suite("u8-edge-rows", cfg, base_seed() + 5100000, 48, apply_edge_rows);
}

// u8 caches on the Hopper kernels (the default for 128-row chunks, PAGEDATTN_WGMMA_U8=0 off: codes
// converted to f16 in shared memory, scales and zero points folded as in fwd_kernel): prefill chunks;
// u8 tolerances.
TEST(Cuda, HopperU8Random) {
  REQUIRE_GPU();
  if (const char* why = no_wgmma()) GTEST_SKIP() << why;
  EnvGuard on("PAGEDATTN_WGMMA", ""), wide("PAGEDATTN_WIDE_PREFILL", ""), u8("PAGEDATTN_WGMMA_U8", "");
  CaseConfig cfg = mixed_config(300, 4000, 600, 12000);
  cfg.kv_precisions = {KVPrecision::u8};
  cfg.head_sizes = {64, 128, 256};
  cfg.group_sizes = {1, 3, 4, 8, 16};
  run_hopper_byte_suites(cfg, "u8", "u8", base_seed() + 2500000);
}

// u8 chunks on the key-split Hopper kernel ("wgs<keys>u8": codes converted in place in f16's ring, the
// per-key parameters in arrays of their own; dequantised at D = 64, folded per key at D = 128 / 256). The
// plans follow tuning::hopper_split (33-64 rows at D = 128, at D = 256 up to 40k keys, 17-64 at D = 64 up
// to 16k keys and 33-64 beyond, fwd_kernel elsewhere); then, with the kernel forced (PAGEDATTN_WG_SPLIT=1:
// 33-64 rows at every head size and length), chains and trees in the row bands where every chunk of these
// cases takes it (G = 4 with T 9-16, G = 8 with T 5-8, G = 16 with T 3-4), mixed few-query cases and long
// contexts (many partitions, their merge), per query dtype; and 17-32-row chunks (PAGEDATTN_WG_SPLIT=2).
// u8 tolerances.
TEST(Cuda, U8SplitRandom) {
  REQUIRE_GPU();
  if (const char* why = no_wgmma()) GTEST_SKIP() << why;
  EnvGuard on("PAGEDATTN_WGMMA", ""), split("PAGEDATTN_WG_SPLIT", ""), bytes("PAGEDATTN_WGMMA_U8", "");
  CaseConfig one = few_query_config();
  one.kv_precisions = {KVPrecision::u8};
  one.group_sizes = {8};
  for (int d : {64, 128, 256}) {
    one.head_sizes = {d};
    expect_launched(one, 5, 8, base_seed() + 5300000 + d, 384, d == 256 ? "wgs32u8" : "wgs64u8");  // 40-64 rows
  }
  one.head_sizes = {64};
  expect_launched(one, 3, 4, base_seed() + 5300164, 384, "wgs64u8");  // D = 64: 24-32 rows too (short keys)
  CaseConfig far = long_context_config(17000, 17000, 40000);   // past 16k keys: D = 64 and 128 still
  far.kv_precisions = {KVPrecision::u8};
  far.p_window = 0.0;  // (a window under 16k keys would make the call a short one)
  far.group_sizes = {8};
  for (int d : {64, 128}) {
    far.head_sizes = {d};
    expect_launched(far, 5, 8, base_seed() + 5300300 + d, 384, "wgs64u8");
  }
  CaseConfig farther = long_context_config(41000, 41000, 48000);  // D = 256 past 40k keys: fwd_kernel
  farther.kv_precisions = {KVPrecision::u8};
  farther.p_window = 0.0;
  farther.group_sizes = {8};
  farther.head_sizes = {256};
  expect_launched(farther, 5, 8, base_seed() + 5300302, 128, "");  // (fwd_kernel's 4 row tiles: 4 warps)
  EnvGuard all("PAGEDATTN_WG_SPLIT", "1");
  one.head_sizes = {256};
  expect_launched(one, 5, 8, base_seed() + 5300257, 384, "wgs32u8");
  for (DType q : {DType::f32, DType::f16, DType::bf16}) {
    const uint64_t seed = base_seed() + 5400000 + 100000 * static_cast<int>(q);
    CaseConfig cfg = few_query_config();
    cfg.kv_precisions = {KVPrecision::u8};
    cfg.query_dtypes = {q};
    const std::string qn = q == DType::f32 ? " q=f32" : q == DType::f16 ? " q=f16" : " q=bf16";
    run_row_bands_33_64("u8-wgs", cfg, seed, 40, qn);
    run_suite(("u8-wgs-mixed" + qn).c_str(), cfg, seed + 5000, 30);
    CaseConfig lng = long_context_config(4000, 20000, 40000);
    lng.kv_precisions = {KVPrecision::u8};
    lng.query_dtypes = {q};
    lng.group_sizes = {8};
    lng.min_tokens = 5;
    lng.max_tokens = 8;
    run_suite(("u8-wgs-long" + qn).c_str(), lng, seed + 6000, 10);
  }
  // 17-32 rows (G = 8, T 3-4) on it when forced
  EnvGuard two("PAGEDATTN_WG_SPLIT", "2");
  for (int d : {64, 128, 256}) {
    one.head_sizes = {d};
    expect_launched(one, 3, 4, base_seed() + 5310000 + d, 384, d == 256 ? "wgs32u8" : "wgs64u8");
  }
  CaseConfig b32 = few_query_config();
  b32.kv_precisions = {KVPrecision::u8};
  b32.group_sizes = {8};
  b32.min_tokens = 3;
  b32.max_tokens = 4;
  run_suite("u8-wgs-17-32", b32, base_seed() + 5500000, 40);
}
