// Options::deterministic's contract (issue 24), checked the same way on both backends
// (tests/test_invariant.cpp: cpu; tests/cuda/invariant.cpp: cuda):
//   - a chain verify's row t (all heads) is bit-identical to the row a decode of that token gives
//     (T = 1, past_len + t, the same cache and options);
//   - a sequence's rows (and its scores and lse outputs) are bit-identical alone and inside the batch,
//     and alone with its blocks moved to other block ids (trees included: for a tree the contract is this one only; a node's row is not
//     its decode's, its ancestors sit at other cache positions than a chain's).
// The verify runs once (it writes the new rows); then every chain token runs as a decode on the cache it
// wrote (key/value absent: the row is there), and every sequence runs alone (its rows written again:
// the same bytes). A runner executes one call of a Case on its backend and leaves the outputs in the
// Case's host buffers.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <type_traits>
#include <vector>

#include "pagedattn/pagedattn.h"
#include "testing/case.h"

namespace pagedattn {
namespace testing {

using CaseRunner = std::function<void(Case&, const Options&)>;

// Rows of a case (after its verify ran) that differ from what the decodes / the sequences alone give.
struct InvariantMismatch {
  int decode_rows = 0, decodes = 0;  // chain rows against their decodes
  int alone_rows = 0, rows = 0;      // every row against its sequence alone (twice: its blocks moved)
  int score_sets_differ = 0, score_sets = 0;  // a sequence's scores output, the same way
  int lse_sets_differ = 0, lse_sets = 0;      // a sequence's lse rows, the same way
  int differ() const { return decode_rows + alone_rows + score_sets_differ + lse_sets_differ; }
  InvariantMismatch& operator+=(const InvariantMismatch& o) {
    decode_rows += o.decode_rows, decodes += o.decodes, alone_rows += o.alone_rows, rows += o.rows;
    score_sets_differ += o.score_sets_differ, score_sets += o.score_sets;
    lse_sets_differ += o.lse_sets_differ, lse_sets += o.lse_sets;
    return *this;
  }
};

// Sequence s's tokens [t0, t0 + nt) of `c` as a call of their own: past_len + t0, its block table, the
// same cache, window, ALiBi, sinks; key/value given only if `write` (and present in c); its tree mask
// only for the whole sequence.
inline Case sub_case(const Case& c, int s, int t0, int nt, bool write) {
  Case a = c;
  const int tok = c.subsequence_begins[s] + t0;
  const size_t q = dtype_size(c.qdtype);
  const size_t q_row = static_cast<size_t>(c.num_heads) * c.head_size * q;
  const size_t k_row = static_cast<size_t>(c.num_kv_heads) * c.head_size * q;
  const size_t v_row = static_cast<size_t>(c.num_kv_heads) * c.Dv() * q;
  const size_t o_row = static_cast<size_t>(c.num_heads) * c.Dv() * q;
  a.num_seqs = 1;
  a.num_tokens = nt;
  a.past_lens = {c.past_lens[s] + t0};
  a.subsequence_begins = {0, nt};
  a.block_indices.assign(c.block_indices.begin() + c.block_indices_begins[s],
                         c.block_indices.begin() + c.block_indices_begins[s + 1]);
  a.block_indices_begins = {0, static_cast<int32_t>(a.block_indices.size())};
  a.query.assign(c.query.begin() + tok * q_row, c.query.begin() + (tok + nt) * q_row);
  a.write_kv = write && c.write_kv;
  if (a.write_kv) {
    a.key.assign(c.key.begin() + tok * k_row, c.key.begin() + (tok + nt) * k_row);
    a.value.assign(c.value.begin() + tok * v_row, c.value.begin() + (tok + nt) * v_row);
  } else {
    a.key.clear();
    a.value.clear();
  }
  a.qq_bias.clear();
  a.qq_bias_begins.clear();
  if (!c.qq_bias_begins.empty() && t0 == 0 && nt == c.T(s)) {
    a.qq_bias.assign(c.qq_bias.begin() + c.qq_bias_begins[s], c.qq_bias.begin() + c.qq_bias_begins[s + 1]);
    a.qq_bias_begins = {0, static_cast<int32_t>(a.qq_bias.size())};
  }
  a.out.assign(nt * o_row, 0xff);  // NaN in every float type
  // the scores and lse outputs for the whole sequence only (a decode's scores are another quantity:
  // they sum the last token's row, not the verify's last w rows)
  const bool whole = t0 == 0 && nt == c.T(s);
  a.want_scores = whole && c.want_scores;
  a.scores.assign(a.want_scores ? c.ctx(s) : 0, std::numeric_limits<float>::quiet_NaN());
  a.score_window.clear();
  if (a.want_scores && !c.score_window.empty()) a.score_window = {c.score_window[s]};
  a.want_lse = whole && c.want_lse;
  a.lse.assign(a.want_lse ? static_cast<size_t>(nt) * c.num_heads : 0, std::numeric_limits<float>::quiet_NaN());
  return a;
}

// Moves a one-sequence case's blocks to new block ids: a copy of each of its blocks (codes, u8
// parameters) appended to the pool, the table pointing at the copies (the old blocks stay, unused).
inline void relocate_blocks(Case& a) {
  const size_t k_block = a.key_cache.size() / a.num_blocks, v_block = a.value_cache.size() / a.num_blocks;
  const size_t p_block = static_cast<size_t>(a.num_kv_heads) * a.block_size;  // u8 parameters per block
  auto append_copy = [](auto& v, size_t from, size_t n) {  // (a copy first: insert may reallocate v)
    const std::vector<typename std::decay_t<decltype(v)>::value_type> block(v.begin() + from, v.begin() + from + n);
    v.insert(v.end(), block.begin(), block.end());
  };
  const int32_t pool = a.num_blocks;
  for (int32_t& b : a.block_indices) {
    if (b < 0 || b >= pool) continue;  // a poisoned entry past the context (never read)
    const int32_t nb = a.num_blocks++;
    append_copy(a.key_cache, b * k_block, k_block);
    append_copy(a.value_cache, b * v_block, v_block);
    for (std::vector<uint16_t>* v : {&a.key_scale, &a.key_min, &a.value_scale, &a.value_min})
      if (!v->empty()) append_copy(*v, b * p_block, p_block);
    b = nb;
  }
}

inline bool is_tree(const Case& c, int s) {
  return !c.qq_bias_begins.empty() && c.qq_bias_begins[s + 1] > c.qq_bias_begins[s];
}

inline InvariantMismatch check_invariant_case(Case c, const Options& opt, const CaseRunner& run) {
  run(c, opt);  // the verify: writes the new rows, fills out
  const size_t o_row = static_cast<size_t>(c.num_heads) * c.Dv() * dtype_size(c.qdtype);
  InvariantMismatch mm;
  size_t score0 = 0;  // the sequence's first entry in `scores` ([sum of ctx])
  for (int s = 0; s < c.num_seqs; ++s) {
    const int tok0 = c.subsequence_begins[s], T = c.T(s);
    if (!is_tree(c, s)) {
      for (int t = 0; t < T; ++t) {
        Case d = sub_case(c, s, t, 1, false);
        run(d, opt);
        ++mm.decodes;
        if (std::memcmp(d.out.data(), c.out.data() + (tok0 + t) * o_row, o_row) != 0) ++mm.decode_rows;
      }
    }
    // alone, on its own block ids, then on copies of its blocks at other ids (the block table layout)
    for (int moved = 0; moved < 2; ++moved) {
      Case a = sub_case(c, s, 0, T, true);
      if (moved) relocate_blocks(a);
      run(a, opt);
      for (int t = 0; t < T; ++t) {
        ++mm.rows;
        if (std::memcmp(a.out.data() + t * o_row, c.out.data() + (tok0 + t) * o_row, o_row) != 0) ++mm.alone_rows;
      }
      if (a.want_scores) {
        ++mm.score_sets;
        if (std::memcmp(a.scores.data(), c.scores.data() + score0, a.scores.size() * sizeof(float)) != 0)
          ++mm.score_sets_differ;
      }
      if (a.want_lse) {
        ++mm.lse_sets;
        if (std::memcmp(a.lse.data(), c.lse.data() + static_cast<size_t>(tok0) * c.num_heads,
                        a.lse.size() * sizeof(float)) != 0)
          ++mm.lse_sets_differ;
      }
    }
    score0 += c.ctx(s);
  }
  return mm;
}

}  // namespace testing
}  // namespace pagedattn
