// pagedattn — the op's inputs and outputs in one struct (OpenVINO PagedAttentionExtension semantics).
//
// Notation: num_seqs sequences; sequence s has T_s = subsequence_begins[s+1] - subsequence_begins[s]
// new tokens; num_tokens = sum_s T_s; H query heads, Hk kv heads, G = H / Hk, D head size;
// ctx_s = past_lens[s] + T_s keys after the write-in.
//
// Where each tensor lives: tensors marked (dev) are on the backend's device (host memory for the cpu
// backend, CUDA memory for the cuda backend); tensors marked (host) are always host memory: plan() reads
// them to validate the call and build the work list (the cuda backend copies them to the device at plan
// time; run() uses those copies, so re-plan when they change).
// Alignment (cuda backend): every (dev) tensor starts on a 16-byte boundary (what cudaMalloc and the
// caching allocators of PyTorch and OpenVINO return); a view that does not, e.g. one element into a
// larger tensor, is rejected with a ValidationError naming it, before anything is written.
#pragma once

#include <optional>

#include "pagedattn/types.h"

namespace pagedattn {

/// Precision of the paged KV cache.
enum class KVPrecision : int { f16 = 0, bf16 = 1, u8 = 2, fp8 = 3 };
const char* kv_precision_name(KVPrecision p);

/// The paged KV cache. Block b, kv head h, slot i holds the key (value) of one token.
///
/// u8 format (asymmetric, per token and kv head): an f16 scale, an f16 row minimum and D codes 0..255.
/// For one row x[0..D) of a new key (or value), in float:
///   c(v)  = min(max(v, -65504), 65504)          (the f16 range; NaN becomes -65504)
///   mn    = f16 rounded DOWN (toward -inf) of c(min_d x[d])      -> stored as `min`
///   s     = (c(max_d x[d]) - mn) / 255
///   scale = f16 rounded UP (toward +inf) of s; 0 when s == 0; then, while mn + 255 * scale > 65504
///           (in float), the next f16 below (the top code never reads back beyond f16's range)
///                                                                -> stored as `scale`
///   inv   = scale == 0 ? 0 : 1 / scale     (f32, rounded to nearest)
///   q[d]  = min(max(rint((c(x[d]) - mn) * inv), 0), 255)   (each operation rounded to f32; rint: half
///           to even)
/// and the row reads back as  x'[d] = mn + q[d] * scale  (the oracle evaluates it in double).
/// Every finite row within the f16 range reads back within half a step (scale / 2) of its input, plus
/// f32 rounding (3/4 of a step where the scale stepped down), and inside [-65504, 65504]; no parameter is
/// ever inf or NaN, whatever the row (constant f16 rows: scale 0, all codes 0, x' = mn; rows far from
/// zero, |x| up to 65504, subnormal ranges). Values beyond the f16 range (f32/bf16 inputs) saturate to
/// +-65504. The write-in and the kernels use the same code
/// (src/common/numeric.h), so a cache written by any backend reads back identically.
/// OpenVINO's layouts differ (docs/design.md): its CPU plugin stores an f32 scale and an f32 zero point
/// inline before each row's codes (x = (q - zp) * scale); converting ours to it is zp = -mn / scale.
///
/// fp8 format (vLLM's kv_cache_dtype="fp8" convention): e4m3 elements (DType::f8e4m3) with an f32 scale
/// per kv head ([Hk]) or one for the whole cache ([1]), for keys and values separately. An element reads
/// back as e4m3(code) * scale; the write-in stores e4m3(x / scale), the division rounded to f32 and the
/// conversion to nearest even, saturating at +-448 (+-inf too) and NaN to the NaN code 0x7f. A scale
/// must be finite and > 0 (the op does not read the scales to check them: they may live on the device).
struct KVCache {
  TensorView key;               // (dev) [num_blocks, Hk, block_size, D]  f16 | bf16 | u8 | f8e4m3
  TensorView value;             // (dev) [num_blocks, Hk, block_size, Dv] same dtype as key; the value
                                //       head size Dv may differ from the key head size D (DeepSeek-style
                                //       attention: D = 192, Dv = 128; cuda: multiples
                                //       of 16 up to D, and D a multiple of 16 from 32 to 256)
  TensorView key_scale;         // (dev) u8: [num_blocks, Hk, block_size] f16; fp8: [Hk] or [1] f32;
                                //       else absent
  TensorView key_min;           // (dev) [num_blocks, Hk, block_size] f16 row minimum; u8 only, else absent
  TensorView value_scale;       // (dev) as key_scale
  TensorView value_min;         // (dev) [num_blocks, Hk, block_size] f16 row minimum; u8 only, else absent

  KVPrecision precision() const;  // from key.dtype; throws ValidationError for other dtypes
  int64_t num_blocks() const { return key.shape[0]; }
  int64_t num_kv_heads() const { return key.shape[1]; }
  int64_t block_size() const { return key.shape[2]; }
  int64_t head_size() const { return key.shape[3]; }          // D: queries and keys
  int64_t value_head_size() const { return value.shape[3]; }  // Dv: values and the output
};

/// Every input and output of one call of the op.
struct Params {
  int num_heads = 0;             // H: query heads (= G * Hk)

  // --- new tokens -----------------------------------------------------------------------------
  TensorView query;              // (dev) [num_tokens, H*D]  f32 | f16 | bf16
  TensorView key;                // (dev) [num_tokens, Hk*D] same dtype as query; the op WRITES these
                                 //       rows into the cache at positions past_len .. past_len+T-1
                                 //       before attending. Absent: those rows are already in the cache.
  TensorView value;              // (dev) [num_tokens, Hk*Dv] like key (Dv: the value cache's head size);
                                 //       present iff key is present

  // --- cache and its layout ---------------------------------------------------------------------
  KVCache cache;                 // (dev) see KVCache
  TensorView past_lens;          // (host) [num_seqs] i32, >= 0: tokens already cached per sequence
  TensorView subsequence_begins; // (host) [num_seqs+1] i32: token offsets of each sequence in query;
                                 //        starts at 0, non-decreasing, ends at num_tokens
  TensorView block_indices;      // (host) [n] i32: all block tables back to back
  TensorView block_indices_begins; // (host) [num_seqs+1] i32: sequence s's table is
                                 //        block_indices[begins[s] .. begins[s+1]); position p of
                                 //        sequence s lives in block table[p / block_size], slot
                                 //        p % block_size. The table must cover ctx_s positions.
                                 //        Entries read (valid ids in [0, num_blocks)): those covering
                                 //        positions [lo_s, ctx_s), lo_s = max(0, past_lens[s] -
                                 //        sliding_window + 1) with a window, else 0. Entries wholly
                                 //        before lo_s (blocks an engine freed) and past ctx_s may hold
                                 //        any value, -1 included; cache slots no token attends may
                                 //        hold anything, NaN and inf included.

  // --- attention options ------------------------------------------------------------------------
  std::optional<float> scale;    // softmax scale; absent or 0: 1/sqrt(D) (0 as OpenVINO reads it);
                                 // else finite and > 0
  int sliding_window = 0;        // 0 = none; else query at position i sees keys j with i - j < window
  TensorView alibi_slopes;       // (dev) [H] f32 or absent: score += slope[h] * (j - i), i = query pos
  TensorView sinks;              // (dev) [H] f32 or absent: a per-head logit (same units as the scaled
                                 //       score) that joins the softmax denominator: exp(sink) is added
                                 //       to sum_j exp(s_j); it attends to no value
  int max_context_len = 0;       // sizing hint: must be >= every ctx_s
  bool prefix_only = false;      // true: every new token attends all the cached keys [0, past_len) of its
                                 //       sequence and nothing else (no keys of the new tokens, so no
                                 //       causal limit among them); nothing is written and ctx_s = past_len.
                                 //       One shard of a context split across calls or devices that does
                                 //       not hold the new tokens, or the shared prefix of cascade attention;
                                 //       combined with the call that holds them through lse and
                                 //       merge_states() (docs/design.md, "Splitting a context"). key and
                                 //       value must be absent; no qq_bias or scores, no sinks (they go to
                                 //       the call with the new tokens, once); sliding_window and
                                 //       alibi_slopes only with new_token_positions
  TensorView new_token_positions;  // (host) [num_seqs] i32 or absent; prefix_only only: where each
                                 //       sequence's first new token sits in this shard's own positions
                                 //       (its cached keys are 0 .. past_len-1), >= past_len: new token t
                                 //       is at new_token_positions[s] + t for the window and ALiBi (a
                                 //       shard whose keys start at absolute position a, before new tokens
                                 //       at absolute P: P - a). Absent: past_len (the shard ends where the
                                 //       new tokens start)
  TensorView qq_bias;            // (host) [sum_s T_s^2] u8 or absent: tree mask among a sequence's new
                                 //        tokens, row-major T_s x T_s per sequence; entry (t, u) = 1 means
                                 //        new token t may attend new token u. Diagonal must be 1. Applied
                                 //        on top of causality (u <= t); the cached prefix is always visible.
  TensorView qq_bias_begins;     // (host) [num_seqs+1] i32 or absent (iff qq_bias absent):
                                 //        begins[s+1] - begins[s] = T_s^2, begins[0] = 0

  // --- outputs ----------------------------------------------------------------------------------
  TensorView out;                // (dev) [num_tokens, H*Dv] same dtype as query
  TensorView scores;             // (dev) [sum_s ctx_s] f32 or absent: for each sequence (back to back),
                                 //       for each key position j < ctx_s, the attention weight summed
                                 //       over all query heads and the last w_s new tokens of that
                                 //       sequence (w_s: score_aggregation_window)
  TensorView score_aggregation_window;  // (host) [num_seqs] i32 or absent (OpenVINO's input 13): w_s =
                                 //       window[s]; -1 or >= T_s: every new token, 0: none (scores 0);
                                 //       absent: w_s = 1 (the last new token, OpenVINO's default)
  TensorView lse;                // (dev) [num_tokens, H] f32 or absent: each row's log-sum-exp, the natural
                                 //       log of its softmax denominator: log(sum_j exp(s_j) + exp(sink_h)),
                                 //       s_j the scaled score (with ALiBi) of every key the row attends,
                                 //       the sink term when sinks are given; -inf for a row that attends
                                 //       no key and has no sink. out = sum_j exp(s_j - lse) v_j, so partial
                                 //       calls over disjoint keys combine exactly (FlashAttention's LSE).
                                 //       Both backends (cuda: from the rows' final statistics, one small
                                 //       kernel after the merge)
};

}  // namespace pagedattn
