// validate(): every rule of the op (params.h), checked on the host before anything is written.
//
// It only reads. It throws ValidationError(input, rule) on the FIRST broken rule; `input` is the
// params.h field name (the cache tensors are key_cache / value_cache / key_scale / ...), `rule` states
// the requirement and the offending value or index.
//
// Order of the checks (the first failure wins, so tests that break one rule rely on it):
//   1. tensor structure: ndim in range, no negative dims, element count fits int64, host tensors
//      (metadata) in host memory, contiguous, non-null data when non-empty   (every tensor, in field order)
//   2. shapes and dtypes: num_heads, query, key/value, cache (+ u8 params), H = G * Hk, out,
//      alibi_slopes, sinks, i32 metadata, qq_bias(_begins), scores dtype/ndim
//   3. scalar options: scale, sliding_window, max_context_len >= 0
//   4. metadata contents: past_lens, subsequence_begins, max_context_len vs ctx_s, scores length,
//      block_indices_begins, table lengths, block ids, write/read conflicts, qq_bias(_begins)
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "pagedattn/pagedattn.h"

namespace pagedattn {

namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

[[noreturn]] void fail(const char* input, const std::string& rule) { throw ValidationError(input, rule); }

template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// An offsets array [num_seqs+1]: starts at 0, never decreases, ends at `end` (`end_what` names it).
void check_begins(const char* name, const int32_t* b, int64_t num_seqs, int64_t end, const std::string& end_what) {
  if (b[0] != 0) fail(name, cat("must start at 0, got ", b[0], " at ", name, "[0]"));
  for (int64_t s = 0; s < num_seqs; ++s)
    if (b[s + 1] < b[s])
      fail(name, cat("must be non-decreasing, got ", b[s], " then ", b[s + 1], " at ", name, "[", s, "..", s + 1,
                     "] (sequence ", s, ")"));
  if (b[num_seqs] != end)
    fail(name, cat("must end at ", end_what, ", got ", b[num_seqs], " at ", name, "[", num_seqs, "]"));
}

std::string shape_of(const TensorView& t) {
  std::ostringstream os;
  os << "[";
  for (int i = 0; i < t.ndim; ++i) os << (i ? ", " : "") << t.shape[i];
  os << "]";
  return os.str();
}

// --- 1. structure of one tensor view ---------------------------------------------------------------
// `host`: plan() reads it on the host (metadata); validate() itself dereferences these.
void check_structure(const TensorView& t, const char* name, bool host) {
  if (t.ndim < 0 || t.ndim > kMaxDims)
    fail(name, cat("ndim must be in [0, ", kMaxDims, "] (0 = absent), got ", t.ndim));
  if (!t.present()) return;
  int64_t n = 1;
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] < 0) fail(name, cat("dimension ", i, " must be >= 0, got ", t.shape[i]));
    if (t.shape[i] != 0 && n > std::numeric_limits<int64_t>::max() / t.shape[i])
      fail(name, cat("element count of shape ", shape_of(t), " overflows int64"));
    n *= t.shape[i];
  }
  if (host && t.device != Device::cpu)
    fail(name, cat("must be host memory (plan() reads it), got ", device_name(t.device)));
  if (n == 0) return;  // an empty tensor has no layout and needs no data
  if (!t.is_contiguous()) {
    std::ostringstream st;
    st << "[";
    for (int i = 0; i < t.ndim; ++i) st << (i ? ", " : "") << t.stride[i];
    st << "]";
    fail(name, cat("must be contiguous (row-major), got shape ", shape_of(t), " with strides ", st.str()));
  }
  if (t.data == nullptr) fail(name, cat("data must be non-null for a non-empty tensor ", t.describe()));
}

// --- 2. shape / dtype helpers ------------------------------------------------------------------------
void require_present(const TensorView& t, const char* name, const char* what) {
  if (!t.present()) fail(name, cat("is required (", what, "), got an absent tensor"));
}

void require_ndim(const TensorView& t, const char* name, int ndim, const char* what) {
  if (t.ndim != ndim) fail(name, cat("must be ", ndim, "-D ", what, ", got ", t.describe()));
}

void require_dim(const TensorView& t, const char* name, int dim, int64_t want, const std::string& what) {
  if (t.shape[dim] != want)
    fail(name, cat("dimension ", dim, " must be ", what, " = ", want, ", got ", t.shape[dim], " (shape ",
                   shape_of(t), ")"));
}

void require_dtype(const TensorView& t, const char* name, DType want) {
  if (t.dtype != want) fail(name, cat("dtype must be ", dtype_name(want), ", got ", dtype_name(t.dtype)));
}

const int32_t* i32_data(const TensorView& t) { return t.ptr<const int32_t>(); }

// An i32 1-D host vector; `len` >= 0: it must have `len` entries, named `len_what` ("num_seqs+1").
void require_i32_vector(const TensorView& t, const char* name, const char* shape, int64_t len = -1,
                        const char* len_what = "") {
  require_ndim(t, name, 1, shape);
  require_dtype(t, name, DType::i32);
  if (len >= 0 && t.shape[0] != len) fail(name, cat("must have ", len_what, " = ", len, " entries, got ", t.shape[0]));
}

}  // namespace

void validate(const Params& p) {
  const KVCache& c = p.cache;

  // ---- 1. structure of every tensor ------------------------------------------------------------------
  check_structure(p.query, "query", false);
  check_structure(p.key, "key", false);
  check_structure(p.value, "value", false);
  check_structure(c.key, "key_cache", false);
  check_structure(c.value, "value_cache", false);
  check_structure(c.key_scale, "key_scale", false);
  check_structure(c.key_min, "key_min", false);
  check_structure(c.value_scale, "value_scale", false);
  check_structure(c.value_min, "value_min", false);
  check_structure(p.past_lens, "past_lens", true);
  check_structure(p.subsequence_begins, "subsequence_begins", true);
  check_structure(p.block_indices, "block_indices", true);
  check_structure(p.block_indices_begins, "block_indices_begins", true);
  check_structure(p.alibi_slopes, "alibi_slopes", false);
  check_structure(p.sinks, "sinks", false);
  check_structure(p.qq_bias, "qq_bias", true);
  check_structure(p.qq_bias_begins, "qq_bias_begins", true);
  check_structure(p.score_aggregation_window, "score_aggregation_window", true);
  check_structure(p.new_token_positions, "new_token_positions", true);
  check_structure(p.out, "out", false);
  check_structure(p.scores, "scores", false);
  check_structure(p.lse, "lse", false);

  // ---- 2. shapes and dtypes -----------------------------------------------------------------------------
  if (p.num_heads <= 0) fail("num_heads", cat("must be > 0, got ", p.num_heads));
  const int64_t H = p.num_heads;

  // query: [num_tokens, H*D] f32 | f16 | bf16
  require_present(p.query, "query", "[num_tokens, H*D] f32|f16|bf16");
  require_ndim(p.query, "query", 2, "[num_tokens, H*D]");
  if (p.query.dtype != DType::f32 && p.query.dtype != DType::f16 && p.query.dtype != DType::bf16)
    fail("query", cat("dtype must be f32, f16 or bf16, got ", dtype_name(p.query.dtype)));
  const int64_t num_tokens = p.query.shape[0];
  if (num_tokens > kInt32Max)
    fail("query", cat("num_tokens (dimension 0) must fit int32 (<= ", kInt32Max, "), got ", num_tokens));

  // cache: [num_blocks, Hk, block_size, D], key and value alike
  require_present(c.key, "key_cache", "[num_blocks, Hk, block_size, D] f16|bf16|u8|f8e4m3");
  require_ndim(c.key, "key_cache", 4, "[num_blocks, Hk, block_size, D]");
  if (c.key.dtype != DType::f16 && c.key.dtype != DType::bf16 && c.key.dtype != DType::u8 &&
      c.key.dtype != DType::f8e4m3)
    fail("key_cache", cat("dtype must be f16, bf16, u8 or f8e4m3, got ", dtype_name(c.key.dtype)));
  require_present(c.value, "value_cache", "key_cache's shape but for the value head size Dv, its dtype");
  require_ndim(c.value, "value_cache", 4, "[num_blocks, Hk, block_size, Dv]");
  if (c.value.dtype != c.key.dtype)
    fail("value_cache", cat("dtype must equal key_cache's (", dtype_name(c.key.dtype), "), got ",
                            dtype_name(c.value.dtype)));
  for (int i = 0; i < 3; ++i)
    if (c.value.shape[i] != c.key.shape[i])
      fail("value_cache", cat("shape must equal key_cache's ", shape_of(c.key), " in dimensions 0-2 (the value head "
                              "size may differ), got ", shape_of(c.value)));
  const int64_t num_blocks = c.key.shape[0], Hk = c.key.shape[1], block_size = c.key.shape[2],
                D = c.key.shape[3], Dv = c.value.shape[3];
  if (num_blocks > kInt32Max)
    fail("key_cache", cat("num_blocks (dimension 0) must fit int32 (block ids are i32), got ", num_blocks));
  if (Hk <= 0) fail("key_cache", cat("number of kv heads (dimension 1) must be > 0, got ", Hk));
  if (block_size <= 0) fail("key_cache", cat("block_size (dimension 2) must be > 0, got ", block_size));
  if (D <= 0) fail("key_cache", cat("head size D (dimension 3) must be > 0, got ", D));
  if (Dv <= 0) fail("value_cache", cat("value head size Dv (dimension 3) must be > 0, got ", Dv));

  // u8 params: all four present as [num_blocks, Hk, block_size] f16; fp8: the two scales as [Hk] or [1]
  // f32 and no minima; absent for f16/bf16 caches
  {
    const bool u8 = c.key.dtype == DType::u8, fp8 = c.key.dtype == DType::f8e4m3;
    const TensorView* params[4] = {&c.key_scale, &c.key_min, &c.value_scale, &c.value_min};
    const char* names[4] = {"key_scale", "key_min", "value_scale", "value_min"};
    for (int k = 0; k < 4; ++k) {
      const TensorView& t = *params[k];
      if (fp8 && k % 2 == 0) {  // the scales
        require_present(t, names[k], "an f8e4m3 cache needs an f32 scale per kv head ([Hk]) or one ([1])");
        require_ndim(t, names[k], 1, "[Hk] or [1]");
        require_dtype(t, names[k], DType::f32);
        if (t.shape[0] != Hk && t.shape[0] != 1)
          fail(names[k], cat("must have Hk = ", Hk, " entries (one per kv head) or 1, got ", t.shape[0]));
        continue;
      }
      if (fp8) {
        if (t.present()) fail(names[k], cat("must be absent for an f8e4m3 cache (u8 caches only), got ", t.describe()));
        continue;
      }
      if (!u8) {
        if (t.present())
          fail(names[k], cat("must be absent for a ", dtype_name(c.key.dtype), " cache (u8 caches only), got ",
                             t.describe()));
        continue;
      }
      require_present(t, names[k], "a u8 cache needs [num_blocks, Hk, block_size] f16 params");
      require_ndim(t, names[k], 3, "[num_blocks, Hk, block_size]");
      require_dtype(t, names[k], DType::f16);
      require_dim(t, names[k], 0, num_blocks, "num_blocks");
      require_dim(t, names[k], 1, Hk, "Hk");
      require_dim(t, names[k], 2, block_size, "block_size");
    }
  }

  // heads: H = G * Hk; query's row is H*D
  if (H % Hk != 0)
    fail("num_heads", cat("must be a multiple of the cache's kv heads Hk = ", Hk, ", got ", H));
  // D and Dv first (a cache of 0 blocks has a valid shape with any D; the fuzz target's input e2b4d036 had
  // Dv ~ 2.8e18, and H*Dv overflowed int64): H is an int, so H*D and H*Dv fit int64 after these
  if (D > kInt32Max) fail("key_cache", cat("head size D (dimension 3) must fit int32, got ", D));
  if (Dv > kInt32Max) fail("value_cache", cat("value head size Dv (dimension 3) must fit int32, got ", Dv));
  if (H * D > kInt32Max)
    fail("num_heads", cat("H*D = ", H * D, " (num_heads ", H, " x head size ", D, ") must fit int32 (<= ", kInt32Max, ")"));
  require_dim(p.query, "query", 1, H * D, cat("H*D (num_heads ", H, " x head size ", D, ")"));
  if (H * Dv > kInt32Max)
    fail("num_heads", cat("H*Dv = ", H * Dv, " (num_heads ", H, " x value head size ", Dv, ") must fit int32 (<= ",
                          kInt32Max, ")"));

  // key / value: both or neither, [num_tokens, Hk*D] in query's dtype
  if (p.key.present() != p.value.present()) {
    if (p.key.present()) fail("value", "must be present when key is present (both or neither)");
    fail("key", "must be present when value is present (both or neither)");
  }
  if (p.key.present()) {
    const TensorView* kv[2] = {&p.key, &p.value};
    const char* names[2] = {"key", "value"};
    for (int k = 0; k < 2; ++k) {
      require_ndim(*kv[k], names[k], 2, k == 0 ? "[num_tokens, Hk*D]" : "[num_tokens, Hk*Dv]");
      if (kv[k]->dtype != p.query.dtype)
        fail(names[k], cat("dtype must equal query's (", dtype_name(p.query.dtype), "), got ",
                           dtype_name(kv[k]->dtype)));
      require_dim(*kv[k], names[k], 0, num_tokens, "num_tokens (query's dimension 0)");
      const int64_t d = k == 0 ? D : Dv;
      require_dim(*kv[k], names[k], 1, Hk * d,
                  cat(k == 0 ? "Hk*D (kv heads " : "Hk*Dv (kv heads ", Hk, k == 0 ? " x head size " : " x value head size ",
                      d, ")"));
    }
  }

  // out: query's dtype, [num_tokens, H*Dv]
  require_present(p.out, "out", "[num_tokens, H*Dv] in query's dtype");
  require_ndim(p.out, "out", 2, "[num_tokens, H*Dv]");
  if (p.out.dtype != p.query.dtype)
    fail("out", cat("dtype must equal query's (", dtype_name(p.query.dtype), "), got ", dtype_name(p.out.dtype)));
  require_dim(p.out, "out", 0, num_tokens, "num_tokens (query's dimension 0)");
  require_dim(p.out, "out", 1, H * Dv, cat("H*Dv (num_heads ", H, " x value head size ", Dv, ")"));

  // alibi_slopes, sinks: [H] f32 or absent
  if (p.alibi_slopes.present()) {
    require_ndim(p.alibi_slopes, "alibi_slopes", 1, "[H]");
    require_dtype(p.alibi_slopes, "alibi_slopes", DType::f32);
    require_dim(p.alibi_slopes, "alibi_slopes", 0, H, "num_heads");
  }
  if (p.sinks.present()) {
    require_ndim(p.sinks, "sinks", 1, "[H]");
    require_dtype(p.sinks, "sinks", DType::f32);
    require_dim(p.sinks, "sinks", 0, H, "num_heads");
  }

  // i32 metadata
  require_present(p.past_lens, "past_lens", "[num_seqs] i32");
  require_i32_vector(p.past_lens, "past_lens", "[num_seqs]");
  const int64_t num_seqs = p.past_lens.shape[0];
  if (num_seqs > kInt32Max - 1) fail("past_lens", cat("num_seqs must be < ", kInt32Max, ", got ", num_seqs));
  require_present(p.subsequence_begins, "subsequence_begins", "[num_seqs+1] i32");
  require_i32_vector(p.subsequence_begins, "subsequence_begins", "[num_seqs+1]", num_seqs + 1, "num_seqs+1");
  require_present(p.block_indices, "block_indices", "[n] i32");
  require_i32_vector(p.block_indices, "block_indices", "[n]");
  if (p.block_indices.shape[0] > kInt32Max)
    fail("block_indices", cat("length must fit int32 (its begins are i32), got ", p.block_indices.shape[0]));
  require_present(p.block_indices_begins, "block_indices_begins", "[num_seqs+1] i32");
  require_i32_vector(p.block_indices_begins, "block_indices_begins", "[num_seqs+1]", num_seqs + 1, "num_seqs+1");

  // qq_bias: u8 1-D and qq_bias_begins i32 [num_seqs+1], both or neither
  if (p.qq_bias.present() != p.qq_bias_begins.present()) {
    if (p.qq_bias.present()) fail("qq_bias_begins", "must be present when qq_bias is present (both or neither)");
    fail("qq_bias", "must be present when qq_bias_begins is present (both or neither)");
  }
  if (p.qq_bias.present()) {
    require_ndim(p.qq_bias, "qq_bias", 1, "[sum_s T_s^2]");
    require_dtype(p.qq_bias, "qq_bias", DType::u8);
    require_i32_vector(p.qq_bias_begins, "qq_bias_begins", "[num_seqs+1]", num_seqs + 1, "num_seqs+1");
  }

  // score_aggregation_window: i32 [num_seqs] or absent, each >= -1
  if (p.score_aggregation_window.present()) {
    require_i32_vector(p.score_aggregation_window, "score_aggregation_window", "[num_seqs]", num_seqs, "num_seqs");
    const int32_t* w = i32_data(p.score_aggregation_window);
    for (int64_t s = 0; s < num_seqs; ++s)
      if (w[s] < -1)
        fail("score_aggregation_window", cat("must be >= -1 (-1: every new token), got ", w[s],
                                             " at score_aggregation_window[", s, "]"));
  }

  // lse: [num_tokens, H] f32 or absent
  if (p.lse.present()) {
    require_ndim(p.lse, "lse", 2, "[num_tokens, H]");
    require_dtype(p.lse, "lse", DType::f32);
    require_dim(p.lse, "lse", 0, num_tokens, "num_tokens");
    require_dim(p.lse, "lse", 1, H, "num_heads");
  }

  // scores: [sum ctx] f32 or absent (its length is checked once ctx_s is known)
  if (p.scores.present()) {
    require_ndim(p.scores, "scores", 1, "[sum_s ctx_s]");
    require_dtype(p.scores, "scores", DType::f32);
  }

  // ---- 3. scalar options ------------------------------------------------------------------------------
  if (p.scale.has_value() && !(std::isfinite(*p.scale) && *p.scale >= 0.f))
    fail("scale", cat("must be finite and > 0 when given (0: the default 1/sqrt(D)), got ", *p.scale));
  if (p.sliding_window < 0) fail("sliding_window", cat("must be >= 0 (0 = none), got ", p.sliding_window));
  if (p.max_context_len < 0) fail("max_context_len", cat("must be >= 0, got ", p.max_context_len));
  if (p.prefix_only) {  // a shard of the cached context: nothing written; positions from new_token_positions
    if (p.key.present()) fail("key", "must be absent with prefix_only (nothing is written)");
    if (p.sliding_window != 0 && !p.new_token_positions.present())
      fail("sliding_window", "needs new_token_positions with prefix_only (where the new tokens sit relative to the shard)");
    if (p.alibi_slopes.present() && !p.new_token_positions.present())
      fail("alibi_slopes", "needs new_token_positions with prefix_only (where the new tokens sit relative to the shard)");
    if (p.qq_bias.present()) fail("qq_bias", "must be absent with prefix_only (the new tokens attend no new key)");
    if (p.scores.present()) fail("scores", "must be absent with prefix_only");
    if (p.sinks.present())
      fail("sinks", "must be absent with prefix_only (give them to the call that holds the new tokens: once)");
  }

  if (p.new_token_positions.present()) {
    if (!p.prefix_only) fail("new_token_positions", "must be absent without prefix_only");
    require_i32_vector(p.new_token_positions, "new_token_positions", "[num_seqs]", num_seqs, "num_seqs");
  }

  // ---- 4. metadata contents ------------------------------------------------------------------------------
  const int32_t* past = i32_data(p.past_lens);
  const int32_t* sb = i32_data(p.subsequence_begins);
  const int32_t* bi = i32_data(p.block_indices);
  const int32_t* bib = i32_data(p.block_indices_begins);
  const int64_t n_indices = p.block_indices.shape[0];

  for (int64_t s = 0; s < num_seqs; ++s)
    if (past[s] < 0) fail("past_lens", cat("must be >= 0, got ", past[s], " at past_lens[", s, "]"));
  // the position of each sequence's first new token: past_len, or new_token_positions (>= past_len)
  std::vector<int64_t> qpos0(past, past + num_seqs);
  if (p.new_token_positions.present()) {
    const int32_t* np = i32_data(p.new_token_positions);
    for (int64_t s = 0; s < num_seqs; ++s) {
      if (np[s] < past[s])
        fail("new_token_positions", cat("must be >= past_len (the shard's keys precede the new tokens), got ", np[s],
                                        " < ", past[s], " at new_token_positions[", s, "]"));
      qpos0[s] = np[s];
    }
  }

  check_begins("subsequence_begins", sb, num_seqs, num_tokens,
               cat("num_tokens = ", num_tokens, " (query's dimension 0)"));

  // ctx_s = past_s + T_s, in int64 (past_s + T_s may overflow int32; max_context_len bounds it)
  std::vector<int64_t> ctx(static_cast<size_t>(num_seqs));
  int64_t sum_ctx = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    ctx[s] = int64_t{past[s]} + (p.prefix_only ? 0 : int64_t{sb[s + 1]} - sb[s]);  // prefix_only: the cache only
    // (without new_token_positions, max_context_len >= past + T bounds the positions)
    if (p.new_token_positions.present() && qpos0[s] + (int64_t{sb[s + 1]} - sb[s]) > kInt32Max)
      fail("new_token_positions", cat("the new tokens' positions must fit int32: sequence ", s, " ends at ",
                                      qpos0[s] + (int64_t{sb[s + 1]} - sb[s])));
    if (ctx[s] > p.max_context_len)
      fail("max_context_len", cat("must be >= every past_len + T; sequence ", s, " has past_len ", past[s],
                                  " + T ", sb[s + 1] - sb[s], " = ", ctx[s], " > ", p.max_context_len));
    sum_ctx += ctx[s];
  }
  if (p.scores.present() && p.scores.shape[0] != sum_ctx)
    fail("scores", cat("must have sum_s (past_len + T) = ", sum_ctx, " entries, got ", p.scores.shape[0]));

  check_begins("block_indices_begins", bib, num_seqs, n_indices, cat("the length of block_indices = ", n_indices));

  // Each table must cover ctx_s positions: ceil(ctx_s / block_size) entries; it may be longer.
  // Only that used part is read, so only its ids are checked: entries past it are never read by any
  // backend and may hold anything (engines leave stale or garbage ids there). With a sliding window,
  // entries whose block lies wholly before the window of the sequence's first new token (positions
  // < past_len - window + 1, which no new token sees) are not read either: engines free those blocks,
  // so they may hold anything too, -1 included.
  std::vector<int64_t> used(static_cast<size_t>(num_seqs)), first(static_cast<size_t>(num_seqs), 0);
  for (int64_t s = 0; s < num_seqs; ++s) {
    used[s] = (ctx[s] + block_size - 1) / block_size;
    if (p.sliding_window > 0)
      first[s] = std::min(used[s], std::max<int64_t>(0, qpos0[s] - p.sliding_window + 1) / block_size);
    const int64_t have = int64_t{bib[s + 1]} - bib[s];
    if (have < used[s])
      fail("block_indices", cat("table of sequence ", s, " (block_indices[", bib[s], "..", bib[s + 1], ")) has ",
                                have, " entries; past_len + T = ", ctx[s], " at block_size ", block_size,
                                " needs ", used[s]));
  }
  for (int64_t s = 0; s < num_seqs; ++s)
    for (int64_t i = first[s]; i < used[s]; ++i) {
      const int64_t k = bib[s] + i;
      if (bi[k] < 0 || bi[k] >= num_blocks)
        fail("block_indices", cat("block id ", bi[k], " at block_indices[", k, "] (sequence ", s,
                                  ") is outside [0, ", num_blocks, ")"));
    }

  // Write/read conflicts (only when key/value are written). A sequence WRITES the blocks of its table
  // entries floor(past/bs) .. floor((past+T-1)/bs) (T > 0); it READS all its used entries. The rule
  // checked, at block granularity: a block that is written appears exactly once among the used
  // entries of all tables of the call. So
  //   - no block is in two sequences' write ranges (nor twice in one sequence's write range: two
  //     positions would land on the same slot), and
  //   - no block written by one sequence is read by another sequence (nor read by the same sequence
  //     through a second table entry, which would alias positions).
  // Blocks that are only read may be shared freely (prefix sharing).
  if (p.key.present()) {
    struct Use {
      int64_t seq, index;
    };
    std::unordered_map<int32_t, Use> writer;
    for (int64_t s = 0; s < num_seqs; ++s) {
      const int64_t T = int64_t{sb[s + 1]} - sb[s];
      if (T == 0) continue;
      for (int64_t i = past[s] / block_size; i <= (past[s] + T - 1) / block_size; ++i) {
        const int64_t k = bib[s] + i;
        auto [it, inserted] = writer.emplace(bi[k], Use{s, k});
        if (!inserted)
          fail("block_indices", cat("block ", bi[k], " is written by sequence ", it->second.seq, " (block_indices[",
                                    it->second.index, "]) and by sequence ", s, " (block_indices[", k,
                                    "]): a written block may appear only once in the used tables"));
      }
    }
    if (!writer.empty())
      for (int64_t s = 0; s < num_seqs; ++s)
        for (int64_t i = first[s]; i < used[s]; ++i) {
          const int64_t k = bib[s] + i;
          auto it = writer.find(bi[k]);
          if (it != writer.end() && it->second.index != k)
            fail("block_indices", cat("block ", bi[k], " is written by sequence ", it->second.seq,
                                      " (block_indices[", it->second.index, "]) and read by sequence ", s,
                                      " (block_indices[", k, "]): a written block may appear only once in the "
                                      "used tables"));
        }
  }

  // Tree mask. Every entry must be 0 or 1 and the diagonal 1. Entries above the diagonal (u > t) are
  // allowed to be 1: causality applies on top (params.h), so they are ignored, not rejected.
  if (p.qq_bias.present()) {
    const int32_t* qb = i32_data(p.qq_bias_begins);
    const uint8_t* bias = p.qq_bias.ptr<const uint8_t>();
    if (qb[0] != 0) fail("qq_bias_begins", cat("must start at 0, got ", qb[0], " at qq_bias_begins[0]"));
    for (int64_t s = 0; s < num_seqs; ++s) {
      const int64_t T = int64_t{sb[s + 1]} - sb[s];
      if (int64_t{qb[s + 1]} - qb[s] != T * T)
        fail("qq_bias_begins", cat("qq_bias_begins[", s + 1, "] - qq_bias_begins[", s, "] must be T^2 = ", T * T,
                                   " (sequence ", s, " has T = ", T, "), got ", int64_t{qb[s + 1]} - qb[s]));
    }
    if (p.qq_bias.shape[0] != qb[num_seqs])
      fail("qq_bias", cat("must have sum_s T_s^2 = ", qb[num_seqs], " entries, got ", p.qq_bias.shape[0]));
    for (int64_t s = 0; s < num_seqs; ++s) {
      const int64_t T = int64_t{sb[s + 1]} - sb[s];
      for (int64_t t = 0; t < T; ++t)
        for (int64_t u = 0; u < T; ++u) {
          const int64_t k = qb[s] + t * T + u;
          if (bias[k] > 1)
            fail("qq_bias", cat("entries must be 0 or 1, got ", int{bias[k]}, " at qq_bias[", k, "] (sequence ", s,
                                ", token ", t, ", token ", u, ")"));
          if (t == u && bias[k] != 1)
            fail("qq_bias", cat("diagonal entries must be 1 (a token sees itself), got 0 at qq_bias[", k,
                                "] (sequence ", s, ", token ", t, ")"));
        }
    }
  }
}

}  // namespace pagedattn
