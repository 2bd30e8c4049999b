// Options::deterministic on the cpu backend (issue 24's contract there): a chain verify's row t is
// bit-identical to the decode of the same prefix (T = 1, past_len + t, the same cache and options), and
// a sequence's rows do not depend on the rest of the batch.
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
#include "testing/case.h"

namespace {

using namespace pagedattn;
using namespace pagedattn::testing;

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
  cfg.p_tree = cfg.p_scores = 0.0;
  cfg.p_write = 1.0;
  return cfg;
}

TensorView host_i32(std::vector<int32_t>& v) {
  return TensorView::contiguous(v.data(), DType::i32, Device::cpu, {static_cast<int64_t>(v.size())});
}

// Rows of `c` (after its verify ran) that differ from what the decodes / the sequences alone give.
struct Mismatch {
  int decode_rows = 0, alone_rows = 0, rows = 0;
};

Mismatch check_case(Case c, bool deterministic) {
  Options opt{Backend::cpu};
  opt.deterministic = deterministic;
  forward(c.params(), opt);  // the verify: writes the new rows, fills out
  const size_t qsz = dtype_size(c.qdtype);
  // a query row is H*D wide, an output row H*Dv (the value head size)
  const int64_t q_bytes = static_cast<int64_t>(c.num_heads) * c.head_size * static_cast<int64_t>(qsz);
  const int64_t row_bytes = static_cast<int64_t>(c.num_heads) * c.Dv() * static_cast<int64_t>(qsz);
  Mismatch mm;
  for (int s = 0; s < c.num_seqs; ++s) {
    const int tok0 = c.subsequence_begins[s], T = c.T(s);
    std::vector<int32_t> table(c.block_indices.begin() + c.block_indices_begins[s],
                               c.block_indices.begin() + c.block_indices_begins[s + 1]);
    std::vector<int32_t> table_begins{0, static_cast<int32_t>(table.size())};
    // each token as a decode of its prefix, on the cache the verify wrote
    for (int t = 0; t < T; ++t) {
      std::vector<int32_t> past{c.past_lens[s] + t}, begins{0, 1};
      std::vector<uint8_t> out(static_cast<size_t>(row_bytes));
      Params p = c.params();
      p.query = TensorView::contiguous(c.query.data() + (tok0 + t) * q_bytes, c.qdtype, Device::cpu,
                                       {1, int64_t{c.num_heads} * c.head_size});
      p.key = p.value = TensorView{};
      p.past_lens = host_i32(past);
      p.subsequence_begins = host_i32(begins);
      p.block_indices = host_i32(table);
      p.block_indices_begins = host_i32(table_begins);
      p.max_context_len = past[0] + 1;
      p.out = TensorView::contiguous(out.data(), c.qdtype, Device::cpu, {1, int64_t{c.num_heads} * c.Dv()});
      forward(p, opt);
      ++mm.rows;
      if (std::memcmp(out.data(), c.out.data() + (tok0 + t) * row_bytes, static_cast<size_t>(row_bytes)) != 0)
        ++mm.decode_rows;
    }
    // the sequence alone (its new rows written again: the same bytes)
    std::vector<int32_t> past{c.past_lens[s]}, begins{0, T};
    std::vector<uint8_t> out(static_cast<size_t>(T * row_bytes));
    const int64_t k_row = static_cast<int64_t>(c.num_kv_heads) * c.head_size * static_cast<int64_t>(qsz);
    const int64_t v_row = static_cast<int64_t>(c.num_kv_heads) * c.Dv() * static_cast<int64_t>(qsz);
    Params p = c.params();
    const int64_t HD = int64_t{c.num_heads} * c.head_size, HkD = int64_t{c.num_kv_heads} * c.head_size;
    const int64_t HDv = int64_t{c.num_heads} * c.Dv(), HkDv = int64_t{c.num_kv_heads} * c.Dv();
    p.query = TensorView::contiguous(c.query.data() + tok0 * q_bytes, c.qdtype, Device::cpu, {T, HD});
    p.key = TensorView::contiguous(c.key.data() + tok0 * k_row, c.qdtype, Device::cpu, {T, HkD});
    p.value = TensorView::contiguous(c.value.data() + tok0 * v_row, c.qdtype, Device::cpu, {T, HkDv});
    p.past_lens = host_i32(past);
    p.subsequence_begins = host_i32(begins);
    p.block_indices = host_i32(table);
    p.block_indices_begins = host_i32(table_begins);
    p.max_context_len = past[0] + T;
    p.out = TensorView::contiguous(out.data(), c.qdtype, Device::cpu, {T, HDv});
    forward(p, opt);
    for (int t = 0; t < T; ++t)
      if (std::memcmp(out.data() + t * row_bytes, c.out.data() + (tok0 + t) * row_bytes,
                      static_cast<size_t>(row_bytes)) != 0)
        ++mm.alone_rows;
  }
  return mm;
}

}  // namespace

TEST(Invariant, VerifyRowsEqualDecodesAndTheSequenceAlone) {
  const uint64_t seed0 = base_seed("test_invariant", 0);
  const int cases = 150;
  std::printf("[invariant] base seed %llu, %d cases\n", static_cast<unsigned long long>(seed0), cases);
  int rows = 0, bad_decode = 0, bad_alone = 0;
  for (int i = 0; i < cases; ++i) {
    const Case c = make_random_case(seed0 + i, chain_config());
    const Mismatch mm = check_case(c, true);
    rows += mm.rows;
    bad_decode += mm.decode_rows;
    bad_alone += mm.alone_rows;
    EXPECT_EQ(mm.decode_rows + mm.alone_rows, 0)
        << "case " << c.describe() << ": " << mm.decode_rows << " of " << mm.rows
        << " rows differ from their decode, " << mm.alone_rows << " from the sequence alone";
  }
  std::printf("[invariant] %d rows: %d differ from their decode, %d from the sequence alone\n", rows, bad_decode,
              bad_alone);
}

// The same comparison without the mode finds differences (so the test above can fail).
TEST(Invariant, DefaultModeDiffers) {
  const uint64_t seed0 = base_seed("test_invariant", 0) + 1000;
  int rows = 0, bad = 0;
  for (int i = 0; i < 60; ++i) {
    const Mismatch mm = check_case(make_random_case(seed0 + i, chain_config()), false);
    rows += mm.rows;
    bad += mm.decode_rows + mm.alone_rows;
  }
  std::printf("[invariant] default mode: %d of %d decode rows (plus the sequences alone) differ\n", bad, rows);
  EXPECT_GT(bad, 0) << "the default mode gave identical rows in every case: the invariance test proves nothing";
}
