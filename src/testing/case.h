// Internal (tests, CLI check and bench): random cases of the op that own their host buffers, and
// comparison helpers. Shared by tests/, tools/ and the Python tests' C++ side.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pagedattn/pagedattn.h"

namespace pagedattn {
namespace testing {

/// Ranges a random case is drawn from. Every field is inclusive; lists are chosen from uniformly.
struct CaseConfig {
  int min_seqs = 1, max_seqs = 8;
  int min_past = 0, max_past = 3000;
  int min_tokens = 1, max_tokens = 40;       // T per sequence
  std::vector<int> group_sizes = {1, 2, 4, 8};   // G = H / Hk
  std::vector<int> kv_heads = {1, 2};
  std::vector<int> head_sizes = {64, 128, 256};
  // the value head size Dv: with probability p_value_head_size one of value_head_sizes (those <= D; none:
  // Dv = D), else D (0: never drawn, so the other draws of a seed do not move)
  std::vector<int> value_head_sizes;
  double p_value_head_size = 0;
  std::vector<int> block_sizes = {16, 32, 64};
  std::vector<KVPrecision> kv_precisions = {KVPrecision::f16, KVPrecision::bf16, KVPrecision::u8};
  std::vector<DType> query_dtypes = {DType::f32};
  double p_window = 0.3, p_alibi = 0.3, p_sinks = 0.3, p_tree = 0.3, p_scores = 0.3;
  double p_lse = 0;                          // probability of the lse output (0: never drawn, so the
                                             // other draws of a seed do not move)
  double max_alibi_slope = 0.25;            // ALiBi slopes are drawn from [0, max_alibi_slope)
  double p_write = 0.9;                      // probability that key/value are given (written in)
  int extra_blocks = 4;                      // unused blocks in the pool (poisoned with NaN)
  int max_total_tokens = 1 << 30;            // cap on sum of T (cases are redrawn to fit)
  int max_total_context = 1 << 30;           // cap on sum of past_len + T
};

/// One call of the op with all its host buffers. Unused cache blocks, unused slots of partly filled
/// blocks, and the outputs are poisoned with NaN (0xFF for u8 codes, NaN for their f16 params).
struct Case {
  uint64_t seed = 0;
  int num_seqs = 0, num_tokens = 0;
  int num_heads = 0, num_kv_heads = 0, head_size = 0, block_size = 0, num_blocks = 0;
  int value_head_size = 0;   // Dv (value rows, the value cache and out); 0: head_size
  int Dv() const { return value_head_size > 0 ? value_head_size : head_size; }
  KVPrecision kv = KVPrecision::f16;
  DType qdtype = DType::f32;
  int sliding_window = 0;
  float scale = 0;                           // the value passed in Params::scale
  bool write_kv = true;                      // key/value given
  bool want_scores = false;
  bool want_lse = false;

  std::vector<int32_t> past_lens, subsequence_begins, block_indices, block_indices_begins;
  std::vector<uint8_t> qq_bias;              // empty: no tree mask
  std::vector<int32_t> qq_bias_begins;
  std::vector<float> alibi_slopes, sinks;    // empty: absent

  // raw bytes in the dtype of the tensor
  std::vector<uint8_t> query, key, value, out;        // [num_tokens, heads*D] in qdtype
  std::vector<uint8_t> key_cache, value_cache;        // [num_blocks, Hk, bs, D] in kv dtype
  std::vector<uint16_t> key_scale, key_min, value_scale, value_min;  // u8 only: [num_blocks, Hk, bs] f16
  std::vector<float> key_scale_fp8, value_scale_fp8;   // fp8 only: [Hk] or [1] f32
  std::vector<float> scores;                           // [sum ctx] or empty
  std::vector<float> lse;                              // [num_tokens, H] or empty
  std::vector<int32_t> score_window;                   // score_aggregation_window [num_seqs] or empty

  int T(int s) const { return subsequence_begins[s + 1] - subsequence_begins[s]; }
  int ctx(int s) const { return past_lens[s] + T(s); }
  /// Views of this case's host buffers (device = cpu).
  Params params();
  /// One line: seed, shapes, precisions, options.
  std::string describe() const;
};

/// The base seed of a test binary: PAGEDATTN_SEED when set, else `fallback` (0: a fresh random seed).
/// Printed once, with how to rerun; the first call's arguments fix it for the process.
uint64_t base_seed(const char* binary, uint64_t fallback);

/// Draws a random valid case (deterministic in `seed`).
Case make_random_case(uint64_t seed, const CaseConfig& cfg);

/// The oracle on `c` (write-in, then attention) with its sequences spread over `threads` threads:
/// the same results as oracle::forward(c.params()), for long batches in a fraction of the time.
void reference_forward(Case& c, int threads);

/// Replaces rows of the new tokens' keys and values (write_kv cases) with rows at the corners of the u8
/// rule of params.h: far from zero ([100, 100.1)), constant, a subnormal range, and (values) up to
/// +-65504; a third of the rows stay random. Deterministic in `seed`.
void apply_edge_rows(Case& c, uint64_t seed);

/// fp8 caches (write_kv cases): replaces rows of the new tokens' keys and values with rows at the corners
/// of the e4m3 write-in rule (params.h), relative to the kv head's scale: saturating (|x / scale| in
/// [440, 1000), +-inf among them), e4m3's subnormal range (|x / scale| < 2^-6, zero included) and
/// midpoints between neighbouring codes (ties to even); a quarter of the rows stay random. Never NaN.
/// Deterministic in `seed`.
void apply_fp8_edge_rows(Case& c, uint64_t seed);

/// Multiplies every value of `c` by f: the new value rows, and the cached value rows (u8: their scale
/// and minimum, rounded to f16, so the codes stay; fp8: the value scale; f16/bf16: each element,
/// rounded). Poison stays NaN.
/// For value rows of small range (u8: scales in f16's subnormal range when f is small).
void scale_values(Case& c, double f);

/// The type the cuda kernels' MMAs read the queries in: bf16 with bf16 caches, f16 with f16 and u8 ones
/// (docs/design.md). A query of another dtype is rounded to it before S = Q K^T.
DType mma_query_dtype(KVPrecision kv);

/// Rounds every query of `c` to `to` (round to nearest even), stored back in c.qdtype: the queries as the
/// kernels' MMAs see them.
void round_queries(Case& c, DType to);

/// For a comparison with the cuda backend: `ref`'s lse (ref is `input` after reference_forward) replaced
/// by the oracle's on the queries as the MMAs read them, where input's query dtype is not the MMA's. An
/// lse held to kLseTolerance needs it: a f16 query rounded to bf16 moves a score by up to 2^-9 of
/// sum |q k| (run 2026-12-01-d1: 1.2e-2 against the unrounded oracle). No-op without lse.
void reference_lse_as_mma_reads(const Case& input, Case& ref, int threads);

/// Reads element i of a raw buffer of dtype `t` as float.
float load_as_float(const uint8_t* data, DType t, int64_t i);

/// Result of comparing an output with a reference.
struct Compare {
  double max_abs_err = 0, max_rel_err = 0;   // rel: |a-b| / (|b| + atol_floor)
  double rel_l2 = 0;                         // ||a-b|| / ||b||
  int64_t worst_index = -1;
  int64_t nan_count = 0;                     // NaN or inf in `a` where `b` is finite
  // f16 / bf16 `a` only (else -1): elements more than one rounding of that dtype from `b`, i.e. with
  // |a-b| > ulp(b) + 1e-3 rms(b) (the floor: the sums' error on an element that cancels to ~0)
  int64_t beyond_one_rounding = -1;
  bool ok(double tol) const { return nan_count == 0 && rel_l2 <= tol; }
  std::string describe() const;
};
/// Compares `a` (n elements of dtype ta) with reference `b` (n floats).
Compare compare(const uint8_t* a, DType ta, const float* b, int64_t n);

/// Log-sum-exp rows (Params::lse) against a reference, in natural-log units: the worst
/// |got - ref| / max(1, |ref|) and where; a -inf reference must be met exactly; NaN or a mismatched
/// -inf counts as infinite. The suites' tolerance is kLseTolerance.
struct LseCompare {
  double worst = 0;
  int64_t at = -1;
  bool ok(double tol) const { return worst <= tol; }
  std::string describe(const float* got, const float* ref) const;
};
LseCompare compare_lse(const float* got, const float* ref, int64_t n);
constexpr double kLseTolerance = 1e-4;

}  // namespace testing
}  // namespace pagedattn
