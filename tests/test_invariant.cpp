// Options::deterministic on the cpu backend (issue 24's contract, tests/invariant_check.h; the cuda
// backend's run in tests/cuda/invariant.cpp): a chain verify's row t is bit-identical to the decode of
// the same prefix (T = 1, past_len + t, the same cache and options), and a sequence's rows do not depend
// on the rest of the batch (trees: the latter).
//
// Seeded random cases: chain verifies (no tree) of 1-12 tokens over up to 3000 cached keys, batches of
// 1-4 sequences, every KV precision (fp8 included) and query dtype, windows, ALiBi, sinks, GQA groups 1-8,
// head sizes 64/128/256 (value head sizes 32/64/128 in a fifth of the cases), written in by the op. The
// verify runs once; then every one of its tokens runs as a decode on the cache it wrote (key/value
// absent: the row is there), and every sequence runs alone. Each output row must equal the verify's
// byte for byte; and without Options::deterministic some must not (the test would otherwise pass for a
// reason other than the mode).
// Seeds: PAGEDATTN_SEED=<n> fixes the base seed; otherwise it is drawn and printed.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "pagedattn/pagedattn.h"
#include "invariant_check.h"
#include "testing/case.h"

namespace {

using namespace pagedattn;
using namespace pagedattn::testing;
using Mismatch = InvariantMismatch;

CaseConfig chain_config() {
  CaseConfig cfg;
  cfg.max_seqs = 4;
  cfg.max_past = 3000;
  cfg.min_tokens = 1;
  cfg.max_tokens = 12;
  cfg.query_dtypes = {DType::f32, DType::f16, DType::bf16};
  cfg.kv_precisions = {KVPrecision::f16, KVPrecision::bf16, KVPrecision::u8, KVPrecision::fp8};
  cfg.value_head_sizes = {32, 64, 128};  // a value head size of its own in some cases
  cfg.p_value_head_size = 0.2;
  cfg.p_tree = 0.0;
  cfg.p_scores = 0.3;  // compared alone against the batch
  cfg.p_lse = 0.3;
  cfg.p_write = 1.0;
  return cfg;
}

void run_cpu(Case& c, const Options& opt) { forward(c.params(), opt); }

// partition: 0 for the mode's own size (invariant_part: 8192 keys on 2 threads at Hk >= 4, so cases of
// up to 3000 keys fit one partition), or a forced size (Options::partition_tokens) so that the merge of
// several partitions is checked too.
Mismatch check_case(const Case& c, bool deterministic, int partition = 0) {
  Options opt{Backend::cpu};
  opt.deterministic = deterministic;
  opt.partition_tokens = partition;
  return check_invariant_case(c, opt, run_cpu);
}

}  // namespace

TEST(Invariant, VerifyRowsEqualDecodesAndTheSequenceAlone) {
  const uint64_t seed0 = base_seed("test_invariant", 0);
  const int cases = 150;
  std::printf("[invariant] base seed %llu, %d cases\n", static_cast<unsigned long long>(seed0), cases);
  int decodes = 0, rows = 0, bad_decode = 0, bad_alone = 0, outputs = 0, bad_outputs = 0;
  for (int i = 0; i < cases; ++i) {
    const Case c = make_random_case(seed0 + i, chain_config());
    const Mismatch mm = check_case(c, true, i % 2 ? 512 : 0);  // odd cases: 512-key partitions
    decodes += mm.decodes;
    rows += mm.rows;
    outputs += mm.score_sets + mm.lse_sets;
    bad_outputs += mm.score_sets_differ + mm.lse_sets_differ;
    bad_decode += mm.decode_rows;
    bad_alone += mm.alone_rows;
    EXPECT_EQ(mm.differ(), 0) << "case " << c.describe() << ": " << mm.decode_rows << " of " << mm.decodes
                              << " rows differ from their decode, " << mm.alone_rows << " of " << mm.rows
                              << " from the sequence alone, scores " << mm.score_sets_differ << ", lse "
                              << mm.lse_sets_differ;
  }
  std::printf("[invariant] %d chain rows: %d differ from their decode; %d rows (the sequence alone, and with its "
              "blocks moved): %d differ; scores and lse outputs: %d of %d differ\n", decodes, bad_decode, rows,
              bad_alone, bad_outputs, outputs);
}

// Trees (qq_bias): a sequence's rows alone and in the batch are the same.
TEST(Invariant, TreeRowsIndependentOfTheBatch) {
  const uint64_t seed0 = base_seed("test_invariant", 0) + 2000;
  CaseConfig cfg = chain_config();
  cfg.p_tree = 1.0;
  cfg.min_seqs = 2;
  int rows = 0, bad = 0;
  for (int i = 0; i < 40; ++i) {
    const Case c = make_random_case(seed0 + i, cfg);
    const Mismatch mm = check_case(c, true);
    rows += mm.rows;
    bad += mm.differ();
    EXPECT_EQ(mm.differ(), 0) << "case " << c.describe();
  }
  std::printf("[invariant] trees: %d of %d rows differ from the sequence alone\n", bad, rows);
}

// The same comparison without the mode finds differences (so the test above can fail).
TEST(Invariant, DefaultModeDiffers) {
  const uint64_t seed0 = base_seed("test_invariant", 0) + 1000;
  int rows = 0, bad = 0;
  for (int i = 0; i < 60; ++i) {
    const Mismatch mm = check_case(make_random_case(seed0 + i, chain_config()), false);
    rows += mm.decodes;
    bad += mm.decode_rows + mm.alone_rows;
  }
  std::printf("[invariant] default mode: %d of %d decode rows (plus the sequences alone) differ\n", bad, rows);
  EXPECT_GT(bad, 0) << "the default mode gave identical rows in every case: the invariance test proves nothing";
}
