// GPU tests: Options::deterministic's contract on the cuda backend (issue 24; tests/invariant_check.h
// says what is compared, tests/test_invariant.cpp runs the same on the cpu backend). Chain verify rows
// against their decodes and every sequence alone against the batch, byte for byte; trees against the
// batch only; the mode's results against the oracle; and without the mode some rows must differ.
#include "cuda/suite.h"
#include "invariant_check.h"

using namespace gpu_suite;

namespace {

void run_cuda(Case& c, const Options& opt) {
  DeviceCase d(c);
  forward(d.params(), opt);
  d.download();
}

// Case i of the chain suite: batches of 1-4 sequences, chains of 1-12 tokens over up to 3000 keys (one
// case in 8 up to 12000: more partitions), one in 5 with a sequence of up to 64 tokens (several chunks:
// a prefill chunk in the call); GQA groups up to 24 (one token per chunk above 16), native and padded
// head sizes, value heads of their own, every KV precision and query dtype, windows, ALiBi, sinks.
CaseConfig invariant_config(int i) {
  CaseConfig cfg;
  cfg.min_seqs = 1;
  cfg.max_seqs = 4;
  cfg.max_past = i % 8 == 7 ? 12000 : 3000;
  cfg.min_tokens = 1;
  cfg.max_tokens = i % 5 == 4 ? 64 : 12;
  cfg.group_sizes = {1, 2, 4, 8, 12, 16, 24, 32, 40};
  cfg.kv_heads = {1, 2};
  cfg.head_sizes = {64, 128, 256, 80, 96, 192};
  cfg.value_head_sizes = {64, 128};
  cfg.p_value_head_size = 0.15;
  cfg.block_sizes = {16, 32, 64};
  cfg.query_dtypes = {DType::f32, DType::f16, DType::bf16};
  cfg.kv_precisions = {KVPrecision::f16, KVPrecision::bf16, KVPrecision::u8, KVPrecision::fp8};
  cfg.p_tree = 0.0;
  cfg.p_scores = cfg.p_lse = 0.25;  // compared alone against the batch
  cfg.p_write = 1.0;
  cfg.max_total_context = 16000;
  return cfg;
}

// Batches that overfill a wave (runs of partitions per CTA: planner::Plan::span): 12-16 sequences of
// 4000-5000 keys over 2 or 4 kv heads are at least 12 x 15 x 2 = 360 partitions of 256 keys (an H200's
// wave is 264 CTAs), so each sequence's partitions run in CTAs of several, whose number follows the
// batch; alone, the same sequence runs one partition per CTA. Rows of up to 32 per kv head (fwd_kernel's
// runs take chunks of <= 32 rows, the key-split kernel's of any), every KV precision, head sizes 64 / 128 /
// 256.
CaseConfig spans_config(int i) {
  CaseConfig cfg = invariant_config(i);
  cfg.min_seqs = 12;
  cfg.max_seqs = 16;
  cfg.min_past = 4000;
  cfg.max_past = 5000;
  cfg.max_tokens = 8;
  cfg.group_sizes = {1, 2, 4};
  cfg.kv_heads = {2, 4};
  cfg.head_sizes = {64, 128, 256};
  cfg.p_value_head_size = 0;
  cfg.max_total_context = 1 << 30;
  return cfg;
}

// Runs of partitions on every flush layout (fwd_kernel's partition flush: FwdTraits::kFlushOwn, its own
// area or a ring slot, and the column blocks, follow the head size, the KV kind and the row tiles; f16 /
// bf16 at D = 64, 128, 256 on sm_90a: the key-split kernel's flush per warpgroup): one
// case per head size for a two-byte kind and one per byte-code width for u8 or fp8; G = 4 and T = 1..8,
// so chunks of 4-16 rows (1 row tile) and 20-32 (the 8-warp layout), 8-10 sequences of 4000-5000 keys
// over 4 kv heads (>= 8 x 15 x 4 = 480 partitions of 256 keys: runs on an H200).
CaseConfig layouts_config(int i) {
  static const int kTwoByte[] = {64, 80, 96, 112, 128, 192, 256};
  static const int kByteCode[] = {64, 96, 128, 192, 256};
  CaseConfig cfg = spans_config(i);
  const bool bytes = i >= 7;
  const int j = bytes ? (i - 7) % 5 : i;
  cfg.min_seqs = 8;
  cfg.max_seqs = 10;
  cfg.min_tokens = 1;
  cfg.max_tokens = 8;
  cfg.group_sizes = {4};
  cfg.kv_heads = {4};
  cfg.head_sizes = {bytes ? kByteCode[j] : kTwoByte[j]};
  cfg.kv_precisions = {bytes ? (j % 2 ? KVPrecision::fp8 : KVPrecision::u8)
                             : (j % 2 ? KVPrecision::bf16 : KVPrecision::f16)};
  return cfg;
}

InvariantMismatch run_cases(const char* name, uint64_t seed0, int n, bool deterministic, double p_tree,
                            bool expect_equal, int partition_tokens = 0, double p_window = 0.3,
                            CaseConfig (*config)(int) = invariant_config) {
  Options opt{Backend::cuda};
  opt.deterministic = deterministic;
  opt.partition_tokens = partition_tokens;
  std::printf("[%s] base seed %llu, %d cases\n", name, static_cast<unsigned long long>(seed0), n);
  InvariantMismatch total;
  for (int i = 0; i < n; ++i) {
    CaseConfig cfg = config(i);
    cfg.p_tree = p_tree;
    cfg.p_window = p_window;
    if (p_tree > 0) cfg.min_seqs = 2;
    const Case c = make_random_case(seed0 + i, cfg);
    const InvariantMismatch mm = check_invariant_case(c, opt, run_cuda);
    total += mm;
    if (expect_equal)
      EXPECT_EQ(mm.differ(), 0) << "case " << c.describe() << ": " << mm.decode_rows << " of " << mm.decodes
                                << " chain rows differ from their decode, " << mm.alone_rows << " of " << mm.rows
                                << " rows from the sequence alone, scores " << mm.score_sets_differ << ", lse "
                                << mm.lse_sets_differ;
  }
  std::printf("[%s] %d chain rows: %d differ from their decode; %d rows (the sequence alone, and with its blocks "
              "moved): %d differ; scores %d of %d, lse %d of %d differ\n", name, total.decodes, total.decode_rows,
              total.rows, total.alone_rows, total.score_sets_differ, total.score_sets, total.lse_sets_differ,
              total.lse_sets);
  return total;
}

// Two runs of the same case compared byte for byte (out row by row, lse, scores), as a tally over cases;
// each difference is a test failure naming the case and `between` (what the two runs differ in).
struct BytewiseTally {
  int rows = 0, differ = 0, lse_differ = 0, scores_differ = 0;
  void compare(const Case& c, const Case& a, const Case& b, const char* between) {
    const size_t o_row = a.out.size() / static_cast<size_t>(c.num_tokens);
    int case_rows = 0;
    for (int t = 0; t < c.num_tokens; ++t)
      case_rows += std::memcmp(a.out.data() + t * o_row, b.out.data() + t * o_row, o_row) != 0;
    auto same = [](const std::vector<float>& x, const std::vector<float>& y) {
      return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
    };
    const bool lse_same = same(a.lse, b.lse), scores_same = same(a.scores, b.scores);
    EXPECT_EQ(case_rows, 0) << "case " << c.describe() << ": rows differ between " << between;
    EXPECT_TRUE(lse_same) << "case " << c.describe() << ": lse differs between " << between;
    EXPECT_TRUE(scores_same) << "case " << c.describe() << ": scores differ between " << between;
    rows += c.num_tokens;
    differ += case_rows;
    lse_differ += !lse_same;
    scores_differ += !scores_same;
  }
};

}  // namespace

TEST(Cuda, InvariantVerifyRowsEqualDecodes) {
  REQUIRE_GPU();
  run_cases("invariant", base_seed() + 4100000, case_count(200), true, 0.0, true);
}

// Windows over more partitions than the merge has groups (64-key partitions: up to ~47 per row): a
// verify chunk may start a partition before its later tokens' windows, so the merge must group
// partitions by absolute index (MergeRow::part0), not by their place in the chunk.
TEST(Cuda, InvariantWindowsOverManyPartitions) {
  REQUIRE_GPU();
  run_cases("invariant-many-parts", base_seed() + 4150000, case_count(80), true, 0.0, true, 64, 1.0);
}

// Runs of partitions (batches that overfill a wave): a sequence alone and its chain verify's decodes
// run one partition per CTA, the batch several.
TEST(Cuda, InvariantRunsOfPartitions) {
  REQUIRE_GPU();
  run_cases("invariant-runs", base_seed() + 4170000, case_count(12), true, 0.0, true, 0, 0.3, spans_config);
}

TEST(Cuda, InvariantRunsOfPartitionsEveryLayout) {
  REQUIRE_GPU();
  Options opt{Backend::cuda};
  opt.deterministic = true;
  const uint64_t seed0 = base_seed() + 4180000;
  const int n = case_count(12);
  for (int i = 0; i < n; ++i) {  // each case's plan runs several partitions per CTA (else it tests no flush)
    const Case c = make_random_case(seed0 + i, layouts_config(i));
    const PlanInfo info = plan_info(layouts_config(i), seed0 + i, opt);
    ASSERT_GT(info.partition_tokens, 0) << c.describe();
    int64_t parts = 0;
    for (int s = 0; s < c.num_seqs; ++s) parts += c.past_lens[s] / info.partition_tokens;
    EXPECT_LT(info.work_items, parts * c.num_kv_heads) << c.describe() << ": no run of partitions";
  }
  run_cases("invariant-runs-layouts", seed0, n, true, 0.0, true, 0, 0.3, layouts_config);
}

// Units folded by the attention CTAs (planner::Plan::folded: runs of at least tuning::kFoldBlock
// partitions, f16 caches on the key-split kernel, chunks of <= 32 rows): 12-16 sequences of 4000-5000 keys
// over 4 kv heads, no window, are >= 12 x 16 x 4 = 768 partitions of 256 keys, runs of 8 or more on 132 SMs
// (one CTA per SM); alone, each sequence's merge folds its units from its partitions' partials.
CaseConfig folds_config(int i) {
  CaseConfig cfg = spans_config(i);
  cfg.kv_heads = {4};
  cfg.kv_precisions = {KVPrecision::f16};
  cfg.p_window = 0.0;
  return cfg;
}
TEST(Cuda, InvariantUnitsFoldedByTheirCtas) {
  REQUIRE_GPU();
  Options opt{Backend::cuda};
  opt.deterministic = true;
  const uint64_t seed0 = base_seed() + 4190000;
  const int n = case_count(6);
  for (int i = 0; i < n; ++i) {  // each case's batch folds its units (else it tests the merge's units only)
    const PlanInfo info = plan_info(folds_config(i), seed0 + i, opt);
    EXPECT_TRUE(info.folded_units) << "case " << i << ": the batch's CTAs fold no units";
  }
  run_cases("invariant-units", seed0, n, true, 0.0, true, 0, 0.0, folds_config);
}

// Chains across a change of partition size. Deterministic mode sizes a token's partitions by the keys it
// sees (planner::deterministic_partition: the least multiple of 256 keys that fits a kv head's share of
// one wave), so with 8 kv heads the size steps every (wave / 8) x 256 keys. Each case puts its sequences'
// chains across such a step: the verify is cut where the size changes (a short sequence in two chunks,
// its rows written by the write kernel: FwdParams::write_all) while each decode runs whole. Sequences
// of one case share their past and draw T from 1 up, so some cross the step and some do not (an uncut
// sequence beside a cut one is written by the write kernel too, and alone by its own CTAs). The same
// cases then run against the oracle (out and the cache rows written in). The other invariant suites
// (<= 16k keys, 1-2 kv heads) never reach a step on an H200: this suite is the cut path's coverage.
TEST(Cuda, InvariantChainsAcrossPartitionSizes) {
  REQUIRE_GPU();
  Options opt{Backend::cuda};
  opt.deterministic = true;
  CaseConfig cfg = invariant_config(0);
  cfg.kv_heads = {8};
  cfg.p_value_head_size = 0;
  cfg.min_seqs = 2;
  cfg.max_seqs = 3;
  cfg.p_window = 0;  // (a window caps the keys a token sees: no step)
  cfg.max_total_context = 1 << 30;
  const uint64_t seed0 = base_seed() + 4170000;
  std::printf("[invariant-size-steps] base seed %llu\n", static_cast<unsigned long long>(seed0));
  InvariantMismatch total;
  int cut = 0;  // cases cut at a step (T * G <= 32 everywhere: no other cut makes the write-in separate)
  Suite oracle;
  const int threads = static_cast<int>(std::max(1u, std::min(16u, std::thread::hardware_concurrency())));
  const int n = case_count(24);  // (~2.5 s each on the H200: contexts of up to ~20k keys, 8 kv heads)
  for (int i = 0; i < n; ++i) {
    const uint64_t seed = seed0 + 1 + i;
    std::mt19937_64 rng(seed);
    auto uni = [&](int64_t a, int64_t b) { return std::uniform_int_distribution<int64_t>(a, b)(rng); };
    CaseConfig c_cfg = cfg;
    const int g = 1 << uni(0, 2);
    c_cfg.group_sizes = {g};
    c_cfg.head_sizes = {uni(0, 1) ? 64 : 128};
    c_cfg.kv_precisions = {cfg.kv_precisions[uni(0, static_cast<int64_t>(cfg.kv_precisions.size()) - 1)]};
    // the wave (SMs x the decode variant's CTAs per SM: its head size and precision) sets the step
    CaseConfig probe = c_cfg;
    probe.min_past = probe.max_past = 100;
    probe.min_tokens = probe.max_tokens = 1;
    const int64_t wave = plan_info(probe, seed, opt).wave_ctas;
    ASSERT_GT(wave, 0);
    const int64_t step = std::max<int64_t>(1, wave / 8) * 256;  // keys between two sizes
    // token t sees past + t + 1 keys; the step at k * step keys lies between tokens 0 and T - 1 of a
    // sequence of T tokens (T * G <= 32: one chunk by the row rule)
    const int T = static_cast<int>(uni(2, std::min(12, 32 / g)));
    const int64_t k = uni(1, std::max<int64_t>(1, 20000 / step));
    c_cfg.min_tokens = 1;
    c_cfg.max_tokens = T;
    c_cfg.min_past = c_cfg.max_past = static_cast<int>(k * step - uni(1, T - 1));
    Case c = make_random_case(seed, c_cfg);
    if (c.write_kv) {
      DeviceCase d(c);
      cut += plan(d.params(), opt).info().separate_kv_write ? 1 : 0;
    }
    const InvariantMismatch mm = check_invariant_case(c, opt, run_cuda);
    total += mm;
    EXPECT_EQ(mm.differ(), 0) << "case " << c.describe() << " (step " << step << " keys): " << mm.decode_rows
                              << " of " << mm.decodes << " chain rows differ from their decode, " << mm.alone_rows
                              << " of " << mm.rows << " rows from the sequence alone";
    Case ref = c;
    reference_forward(ref, threads);
    reference_lse_as_mma_reads(c, ref, threads);  // (as make_suite does)
    oracle.cases.push_back(c);
    oracle.refs.push_back(std::move(ref));
  }
  std::printf("[invariant-size-steps] %d chain rows: %d differ from their decode; %d rows (alone, moved): %d "
              "differ; %d of %d cases cut at a step\n", total.decodes, total.decode_rows, total.rows,
              total.alone_rows, cut, n);
  EXPECT_GT(cut, n / 4) << "few verifies were cut where their partition size changes: the cases test little";
  check_suite("invariant-size-steps-oracle", oracle, opt);
}

TEST(Cuda, InvariantTreeRowsIndependentOfTheBatch) {
  REQUIRE_GPU();
  run_cases("invariant-trees", base_seed() + 4200000, case_count(40), true, 1.0, true);
}

// Without the mode the same comparison finds rows that differ (so the tests above can fail).
TEST(Cuda, InvariantDefaultModeDiffers) {
  REQUIRE_GPU();
  const InvariantMismatch mm = run_cases("invariant-default", base_seed() + 4300000, case_count(60), false, 0.0, false);
  EXPECT_GT(mm.differ(), 0)
      << "the default mode gave identical rows in every case: the invariance tests prove nothing";
}

// The mode's results against the oracle (its own plans: every chunk of one variant, all through the
// merge, key ranges from partition starts, u8's E per row), with the usual tolerances.
TEST(Cuda, InvariantModeMatchesTheOracle) {
  REQUIRE_GPU();
  Options opt{Backend::cuda};
  opt.deterministic = true;
  CaseConfig cfg = invariant_config(4);  // chains, and sequences of up to 64 tokens
  cfg.max_past = 6000;
  cfg.p_tree = 0.3;
  cfg.p_scores = 0.3;
  cfg.p_write = 0.9;
  run_suite("invariant-oracle", cfg, base_seed() + 4400000, 120, opt);
}

// Deterministic mode's two merge kernels (tuning::merge_rowwise: a CTA per row and column block for
// calls of up to a wave of them, a thread per 8 or 4 columns past that) give the same bits: each case runs
// with either forced, out and lse compared byte for byte, merge_kernel in each of its layouts (the
// mode's D / 64 column blocks per row, and at D = 128 / 256 one or two blocks whose threads fold the
// groups of several: PAGEDATTN_MERGE_SPLIT) and merge_rows_kernel at both thread widths
// (PAGEDATTN_MERGE_COLS). 64-key partitions put up to ~190 partitions on a row
// (several per merge group, chunks starting mid-group: MergeRow::part0). The batch suites above compare
// the kernels across calls too (a batch of many rows against its sequences alone).
TEST(Cuda, InvariantMergeKernelsAgree) {
  REQUIRE_GPU();
  Options opt{Backend::cuda};
  opt.deterministic = true;
  opt.partition_tokens = 64;
  const uint64_t seed0 = base_seed() + 4500000;
  const int n = case_count(60);
  std::printf("[invariant-merge-kernels] base seed %llu, %d cases\n", static_cast<unsigned long long>(seed0), n);
  BytewiseTally tally;
  for (int i = 0; i < n; ++i) {
    CaseConfig cfg = invariant_config(i);
    cfg.head_sizes = {64, 80, 96, 112, 128, 192, 256};  // every kernel width (merge groups 32/25/21/18)
    cfg.p_tree = 0.3;
    cfg.p_lse = 0.5;
    cfg.p_scores = 0.3;  // the scores kernel reads the merge's row statistics
    const Case c = make_random_case(seed0 + i, cfg);
    Case by_cta = c, by_thread = c, by_row = c, by_halves = c, by_cols4 = c;
    {
      EnvGuard e("PAGEDATTN_MERGE_ROWWISE", "0");
      run_cuda(by_cta, opt);
      EnvGuard one("PAGEDATTN_MERGE_SPLIT", "1");
      {
        DeviceCase d(by_row);  // (192's groups do not divide over fewer blocks: it keeps D / 64 = 3)
        const PlanInfo info = plan(d.params(), opt).info();
        ASSERT_EQ(info.merge_split, info.head_width == 192 ? 3 : 1)
            << "PAGEDATTN_MERGE_SPLIT=1 did not take effect at width " << info.head_width;
      }
      run_cuda(by_row, opt);
      EnvGuard two("PAGEDATTN_MERGE_SPLIT", "2");
      run_cuda(by_halves, opt);
    }
    {
      EnvGuard e("PAGEDATTN_MERGE_ROWWISE", "1");
      EnvGuard cols8("PAGEDATTN_MERGE_COLS", "8");  // (the default takes 8 only where its CTAs fill the SMs)
      if (i == 0) {
        DeviceCase d(by_thread);
        ASSERT_TRUE(plan(d.params(), opt).info().merge_rowwise) << "PAGEDATTN_MERGE_ROWWISE=1 did not take effect";
      }
      run_cuda(by_thread, opt);
      EnvGuard cols4("PAGEDATTN_MERGE_COLS", "4");
      run_cuda(by_cols4, opt);
    }
    tally.compare(c, by_cta, by_thread, "the merge kernels");
    tally.compare(c, by_cols4, by_thread, "the row-wise merge at 4 and 8 columns per thread");
    tally.compare(c, by_row, by_thread, "one merge CTA per row and the row-wise merge");
    tally.compare(c, by_halves, by_thread, "two merge CTAs per row and the row-wise merge");
  }
  std::printf(
      "[invariant-merge-kernels] %d tokens' rows compared (merge_kernel's 3 layouts and the row-wise "
      "merge at 4 columns per thread against it at 8): %d differ; lse %d cases, scores %d cases differ\n",
      tally.rows, tally.differ, tally.lse_differ, tally.scores_differ);
}

// Deterministic mode's f16/bf16 chunks on the key-split Hopper kernel (tuning::deterministic_split): on an
// sm_90 device every launch of a decode, a verify of 16 or 32 rows and a chunk of 64 is its own-partials
// variant ("wgs32inv" at D = 256, "wgs64inv" below), and PAGEDATTN_DETERMINISTIC_SPLIT=0 takes fwd_kernel's WKV = 4 variants
// ("inv1", "inv") instead. The suites above then test its partials per warpgroup (alone, in runs, trees).
TEST(Cuda, InvariantKeySplitKernelTakesTwoByteCaches) {
  REQUIRE_GPU();
  if (const char* why = no_wgmma()) GTEST_SKIP() << why;
  Options opt{Backend::cuda};
  opt.deterministic = true;
  const uint64_t seed0 = base_seed() + 4750000;
  for (const int d : {64, 128, 256})
    for (const KVPrecision kv : {KVPrecision::f16, KVPrecision::bf16})
      for (const int t : {1, 4, 8, 16}) {
        CaseConfig cfg = invariant_config(0);
        cfg.head_sizes = {d};
        cfg.kv_precisions = {kv};
        cfg.group_sizes = {4};
        cfg.p_value_head_size = 0;
        cfg.min_seqs = cfg.max_seqs = 1;
        cfg.min_tokens = cfg.max_tokens = t;
        cfg.min_past = cfg.max_past = 3000;
        const uint64_t seed = seed0 + static_cast<uint64_t>(d * 100 + t);
        const std::string want = d == 256 ? "wgs32inv" : "wgs64inv";
        for (const PlanInfo::Launch& l : plan_info(cfg, seed, opt).launches)
          EXPECT_EQ(l.variant, want) << "D " << d << " T " << t << " rt " << l.row_tiles;
        EnvGuard off("PAGEDATTN_DETERMINISTIC_SPLIT", "0");
        for (const PlanInfo::Launch& l : plan_info(cfg, seed, opt).launches)
          EXPECT_EQ(l.variant.rfind("inv", 0), 0u) << "D " << d << " T " << t << ": " << l.variant;
      }
}

// Deterministic mode's two layouts for 17-32-row chunks give the same bits: the 8-warp variant (sm_90)
// and 16-row chunks (devices whose shared memory cannot hold that variant, sm_80; forced here by
// PAGEDATTN_DETERMINISTIC_ROWS=16). Each case, with G = 4 and T = 5..8 so that every chunk has 20-32
// rows, runs with either; out, lse and scores compared byte for byte. Where the device holds the 8-warp
// variant at every width (227 KB per block: sm_90) every case must have run it without the switch; on
// sm_80 both runs take 16-row chunks and the comparison says nothing.
TEST(Cuda, InvariantSixteenRowChunksAgree) {
  REQUIRE_GPU();
  // (fwd_kernel's layouts for every kind: f16 / bf16 off the key-split Hopper kernel, which has one)
  EnvGuard split("PAGEDATTN_DETERMINISTIC_SPLIT", "0");
  Options opt{Backend::cuda};
  opt.deterministic = true;
  const uint64_t seed0 = base_seed() + 4700000;
  const int n = case_count(60);
  std::printf("[invariant-16-row-chunks] base seed %llu, %d cases\n", static_cast<unsigned long long>(seed0), n);
  BytewiseTally tally;
  int wide_cases = 0;
  auto max_row_tiles = [&](const CaseConfig& cfg, uint64_t seed) {
    int rt = 0;
    for (const PlanInfo::Launch& l : plan_info(cfg, seed, opt).launches) rt = std::max(rt, l.row_tiles);
    return rt;
  };
  for (int i = 0; i < n; ++i) {
    CaseConfig cfg = invariant_config(i);
    cfg.head_sizes = {64, 80, 96, 112, 128, 192, 256};
    cfg.group_sizes = {4};
    cfg.min_tokens = 5;
    cfg.max_tokens = 8;
    cfg.p_tree = 0.3;
    cfg.p_lse = 0.5;
    cfg.p_scores = 0.3;
    const Case c = make_random_case(seed0 + i, cfg);
    Case eight_warp = c, sixteen = c;
    wide_cases += max_row_tiles(cfg, seed0 + i) == 2;
    run_cuda(eight_warp, opt);
    {
      EnvGuard e("PAGEDATTN_DETERMINISTIC_ROWS", "16");
      ASSERT_EQ(max_row_tiles(cfg, seed0 + i), 1) << "PAGEDATTN_DETERMINISTIC_ROWS=16 did not take effect";
      run_cuda(sixteen, opt);
    }
    tally.compare(c, eight_warp, sixteen, "the layouts");
  }
  std::printf("[invariant-16-row-chunks] %d tokens' rows (%d of %d cases on the 8-warp variant): %d differ "
              "between the layouts; lse %d cases, scores %d cases differ\n", tally.rows, wide_cases, n,
              tally.differ, tally.lse_differ, tally.scores_differ);
  int dev = 0, optin = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), cudaSuccess);
  if (optin >= 227 * 1024) EXPECT_EQ(wide_cases, n) << "cases that did not run the 8-warp variant without the switch";
}

// The thread-per-columns merge against the oracle (forced for every call, so small cases run it too).
TEST(Cuda, InvariantRowwiseMergeMatchesTheOracle) {
  REQUIRE_GPU();
  EnvGuard e("PAGEDATTN_MERGE_ROWWISE", "1");
  Options opt{Backend::cuda};
  opt.deterministic = true;
  CaseConfig cfg = invariant_config(7);  // up to 12000 keys
  cfg.p_tree = 0.3;
  cfg.p_scores = 0.3;
  cfg.p_lse = 0.3;
  run_suite("invariant-oracle-rowwise", cfg, base_seed() + 4600000, 60, opt);
}
