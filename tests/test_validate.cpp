// Validation: every rule of the op (params.h) is checked before anything is written.
//
// Each test draws a small valid random case, breaks ONE rule, calls pagedattn::forward on the cpu
// backend and checks that
//   (a) a ValidationError names the right input and its what() is the readable sentence
//       "invalid input '<input>': <rule>" whose rule states the offending value/index, and
//   (b) out, scores, both caches and the u8 params are byte-identical to before (poison stays poison).
// Seeds: PAGEDATTN_SEED=<n> fixes the base seed; otherwise it is drawn and printed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "pagedattn/pagedattn.h"
#include "testing/case.h"

namespace {

using pagedattn::Backend;
using pagedattn::Device;
using pagedattn::DType;
using pagedattn::KVPrecision;
using pagedattn::Options;
using pagedattn::Plan;
using pagedattn::PlanInfo;
using pagedattn::Params;
using pagedattn::TensorView;
using pagedattn::ValidationError;
namespace pt = pagedattn::testing;

uint64_t base_seed() { return pagedattn::testing::base_seed("test_validate", 0); }

// Small shapes: the oracle runs in a blink, every feature can be forced on.
pt::CaseConfig small_cfg() {
  pt::CaseConfig cfg;
  cfg.min_seqs = 1;
  cfg.max_seqs = 4;
  cfg.max_past = 90;
  cfg.max_tokens = 6;
  cfg.group_sizes = {1, 2, 4};
  cfg.kv_heads = {1, 2};
  cfg.head_sizes = {16, 32};
  cfg.block_sizes = {16};
  return cfg;
}

// Every feature present: key/value written, tree mask, alibi, sinks, scores; 2+ sequences with >= 2
// full blocks of past (so each table starts with read-only entries) and >= 2 new tokens each.
pt::CaseConfig full_cfg(KVPrecision kv) {
  pt::CaseConfig cfg = small_cfg();
  cfg.min_seqs = 2;
  cfg.min_past = 32;
  cfg.min_tokens = 2;
  cfg.kv_heads = {2};
  cfg.kv_precisions = {kv};
  cfg.p_write = cfg.p_tree = cfg.p_alibi = cfg.p_sinks = cfg.p_scores = 1.0;
  return cfg;
}

// A drawn case; the seed of each draw is the base seed plus a per-process counter, and is printed.
pt::Case draw(const pt::CaseConfig& cfg) {
  static uint64_t counter = 0;
  const uint64_t seed = base_seed() + counter++;
  pt::Case c = pt::make_random_case(seed, cfg);
  std::printf("[ case     ] %s\n", c.describe().c_str());
  return c;
}

TensorView reshape(const TensorView& t, std::initializer_list<int64_t> dims) {
  return TensorView::contiguous(t.data, t.dtype, t.device, dims);
}

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Everything the op may write, plus its inputs (they must not change either).
std::vector<std::pair<std::string, std::vector<uint8_t>>> snapshot(const pt::Case& c) {
  return {{"out", c.out},
          {"scores", bytes_of(c.scores)},
          {"key_cache", c.key_cache},
          {"value_cache", c.value_cache},
          {"key_scale", bytes_of(c.key_scale)},
          {"key_min", bytes_of(c.key_min)},
          {"value_scale", bytes_of(c.value_scale)},
          {"value_min", bytes_of(c.value_min)},
          {"query", c.query},
          {"key", c.key},
          {"value", c.value}};
}

void expect_unchanged(const pt::Case& c, const std::vector<std::pair<std::string, std::vector<uint8_t>>>& before) {
  const auto after = snapshot(c);
  for (size_t i = 0; i < before.size(); ++i)
    EXPECT_TRUE(before[i].second == after[i].second)
        << before[i].first << " was written by a call that failed validation (" << c.describe() << ")";
}

// Calls `call`, expects a ValidationError naming `input` whose rule contains every fragment, and checks
// nothing was written.
void expect_rejected_by(const pt::Case& c, const Params& p, const std::string& input,
                        const std::vector<std::string>& fragments, const std::function<void(const Params&)>& call) {
  const auto before = snapshot(c);
  try {
    call(p);
    ADD_FAILURE() << "accepted an input that breaks a rule of '" << input << "' (" << c.describe() << ")";
  } catch (const ValidationError& e) {
    std::printf("[ rejected ] %s\n", e.what());
    EXPECT_EQ(e.input(), input) << e.what() << " (" << c.describe() << ")";
    EXPECT_EQ(std::string(e.what()), "invalid input '" + e.input() + "': " + e.rule());
    EXPECT_GE(e.rule().size(), 10u) << e.what();
    EXPECT_EQ(e.rule().find('\n'), std::string::npos) << e.what();
    for (const std::string& f : fragments)
      EXPECT_NE(e.rule().find(f), std::string::npos) << "rule \"" << e.rule() << "\" lacks \"" << f << "\"";
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a ValidationError for '" << input << "', got another exception: " << e.what();
  }
  expect_unchanged(c, before);
}

// The same through forward() on the cpu backend, and through validate() alone (so that the rule is
// pinned to validate(), not caught later by a backend).
void expect_rejected(const pt::Case& c, const Params& p, const std::string& input,
                     const std::vector<std::string>& fragments) {
  expect_rejected_by(c, p, input, fragments, [](const Params& q) { pagedattn::forward(q, {Backend::cpu}); });
  expect_rejected_by(c, p, input, fragments, [](const Params& q) { pagedattn::validate(q); });
}

void expect_accepted(const Params& p, const pt::Case& c) {
  try {
    pagedattn::forward(p, {Backend::cpu});
  } catch (const std::exception& e) {
    ADD_FAILURE() << "rejected a valid call: " << e.what() << " (" << c.describe() << ")";
  }
}

// Every tensor of Params with its input name, in field order; `host`: metadata read by plan().
struct Named {
  std::string name;
  TensorView* t;
  bool host;
};
std::vector<Named> tensors(Params& p) {
  return {{"query", &p.query, false},
          {"key", &p.key, false},
          {"value", &p.value, false},
          {"key_cache", &p.cache.key, false},
          {"value_cache", &p.cache.value, false},
          {"key_scale", &p.cache.key_scale, false},
          {"key_min", &p.cache.key_min, false},
          {"value_scale", &p.cache.value_scale, false},
          {"value_min", &p.cache.value_min, false},
          {"past_lens", &p.past_lens, true},
          {"subsequence_begins", &p.subsequence_begins, true},
          {"block_indices", &p.block_indices, true},
          {"block_indices_begins", &p.block_indices_begins, true},
          {"alibi_slopes", &p.alibi_slopes, false},
          {"sinks", &p.sinks, false},
          {"qq_bias", &p.qq_bias, true},
          {"qq_bias_begins", &p.qq_bias_begins, true},
          {"out", &p.out, false},
          {"scores", &p.scores, false}};
}

TensorView& by_name(Params& p, const std::string& name) {
  for (Named& n : tensors(p))
    if (n.name == name) return *n.t;
  throw std::invalid_argument("no tensor " + name);
}

std::string str(int64_t v) { return std::to_string(v); }

// ==================================================================================================
// valid cases
// ==================================================================================================

TEST(Validate, ValidCasesPass) {
  pt::CaseConfig cfg = small_cfg();
  cfg.p_window = cfg.p_alibi = cfg.p_sinks = cfg.p_tree = cfg.p_scores = 0.5;
  cfg.p_write = 0.7;
  cfg.min_tokens = 0;  // empty sequences are valid too
  for (int k = 0; k < 24; ++k) {
    pt::Case c = draw(k % 2 ? full_cfg(k % 4 == 1 ? KVPrecision::u8 : KVPrecision::bf16) : cfg);
    Params p = c.params();
    EXPECT_NO_THROW(pagedattn::validate(p)) << c.describe();
    expect_accepted(p, c);
    // the call ran: no poison left in out
    for (int64_t i = 0; i < static_cast<int64_t>(c.num_tokens) * c.num_heads * c.head_size; ++i)
      if (std::isnan(pt::load_as_float(c.out.data(), c.qdtype, i))) {
        ADD_FAILURE() << "out[" << i << "] still poisoned after a valid call (" << c.describe() << ")";
        break;
      }
  }
}

// The cpu plan's PlanInfo: what it runs on, as describe() prints it; the oracle has no work items.
TEST(Validate, CpuPlanInfo) {
  pt::Case c = draw(small_cfg());
  Options fast{Backend::cpu};
  fast.num_threads = 2;
  const Plan pl = pagedattn::plan(c.params(), fast);
  const PlanInfo i = pl.info();
  EXPECT_EQ(i.backend, Backend::cpu);
  EXPECT_FALSE(i.reference);
  EXPECT_EQ(i.threads, 2);
  EXPECT_GT(i.work_items, 0);
  EXPECT_GT(i.partition_tokens, 0);
  EXPECT_EQ(i.workspace_bytes, pl.workspace_bytes());
  EXPECT_NE(pl.describe().find("threads=2 "), std::string::npos) << pl.describe();
  Options oracle{Backend::cpu};
  oracle.cpu_reference = true;
  const PlanInfo r = pagedattn::plan(c.params(), oracle).info();
  EXPECT_TRUE(r.reference);
  EXPECT_EQ(r.work_items, 0);
  EXPECT_EQ(Plan().info().backend, Backend::cpu);  // an empty plan: the defaults
}

// Options out of range: a ValidationError naming the option, before anything else is checked.
TEST(Validate, NegativeOptionsRejected) {
  pt::Case c = draw(small_cfg());
  for (int which = 0; which < 2; ++which) {
    Options o{Backend::cpu};
    (which ? o.partition_tokens : o.num_threads) = -1;
    try {
      pagedattn::plan(c.params(), o);
      ADD_FAILURE() << "negative " << (which ? "partition_tokens" : "num_threads") << " accepted";
    } catch (const ValidationError& e) {
      EXPECT_EQ(e.input(), which ? "options.partition_tokens" : "options.num_threads");
    }
  }
}

// ==================================================================================================
// structure of every tensor: contiguity, null data, ndim, negative dims, host memory
// ==================================================================================================

class EveryTensor : public ::testing::TestWithParam<KVPrecision> {};

TEST_P(EveryTensor, MustBeContiguous) {
  pt::Case c = draw(full_cfg(GetParam()));
  const Params base = c.params();
  int tested = 0;
  for (size_t k = 0; k < tensors(const_cast<Params&>(base)).size(); ++k) {
    Params p = base;
    Named n = tensors(p)[k];
    int dim = -1;  // the last dimension > 1: doubling its stride breaks row-major order
    for (int i = 0; n.t->present() && i < n.t->ndim; ++i)
      if (n.t->shape[i] > 1) dim = i;
    if (dim < 0 || n.t->numel() == 0) continue;
    n.t->stride[dim] *= 2;
    SCOPED_TRACE(n.name);
    expect_rejected(c, p, n.name, {"must be contiguous"});
    ++tested;
  }
  EXPECT_GE(tested, 15) << "too few tensors present in " << c.describe();
}

TEST_P(EveryTensor, NonEmptyMustHaveData) {
  pt::Case c = draw(full_cfg(GetParam()));
  const Params base = c.params();
  for (size_t k = 0; k < tensors(const_cast<Params&>(base)).size(); ++k) {
    Params p = base;
    Named n = tensors(p)[k];
    if (!n.t->present() || n.t->numel() == 0) continue;
    n.t->data = nullptr;
    SCOPED_TRACE(n.name);
    expect_rejected(c, p, n.name, {"non-null"});
  }
}

TEST_P(EveryTensor, NdimAndDimsInRange) {
  pt::Case c = draw(full_cfg(GetParam()));
  const Params base = c.params();
  for (size_t k = 0; k < tensors(const_cast<Params&>(base)).size(); ++k) {
    Params p = base;
    Named n = tensors(p)[k];
    SCOPED_TRACE(n.name);
    n.t->ndim = pagedattn::kMaxDims + 1;
    expect_rejected(c, p, n.name, {"ndim", str(pagedattn::kMaxDims + 1)});
    n.t->ndim = -1;
    expect_rejected(c, p, n.name, {"ndim", "-1"});
    Params q = base;
    Named m = tensors(q)[k];
    if (!m.t->present()) continue;
    m.t->shape[0] = -3;
    expect_rejected(c, q, m.name, {"must be >= 0", "-3"});
  }
}

TEST_P(EveryTensor, HostTensorsMustBeHostMemory) {
  pt::Case c = draw(full_cfg(GetParam()));
  const Params base = c.params();
  int tested = 0;
  for (size_t k = 0; k < tensors(const_cast<Params&>(base)).size(); ++k) {
    Params p = base;
    Named n = tensors(p)[k];
    if (!n.host || !n.t->present()) continue;
    n.t->device = Device::cuda;
    SCOPED_TRACE(n.name);
    // forward() checks devices first; validate() itself dereferences these, so it checks them too
    expect_rejected(c, p, n.name, {"host memory"});
    ++tested;
  }
  EXPECT_EQ(tested, 6);
}

INSTANTIATE_TEST_SUITE_P(Validate, EveryTensor, ::testing::Values(KVPrecision::f16, KVPrecision::u8, KVPrecision::fp8),
                         [](const ::testing::TestParamInfo<KVPrecision>& i) {
                           return std::string(pagedattn::kv_precision_name(i.param));
                         });

TEST(Validate, ElementCountMustFitInt64) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  Params p = c.params();
  p.query.shape[0] = int64_t{1} << 40;
  p.query.shape[1] = int64_t{1} << 40;
  expect_rejected(c, p, "query", {"overflows int64"});
}

// ==================================================================================================
// heads, query, key/value
// ==================================================================================================

TEST(Validate, NumHeadsPositive) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  for (int h : {0, -4}) {
    Params p = c.params();
    p.num_heads = h;
    expect_rejected(c, p, "num_heads", {"> 0", str(h)});
  }
}

TEST(Validate, NumHeadsMultipleOfKvHeads) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));  // Hk = 2
  Params p = c.params();
  p.num_heads = c.num_heads + 1;
  expect_rejected(c, p, "num_heads", {"multiple", "Hk = " + str(c.num_kv_heads), str(c.num_heads + 1)});
}

TEST(Validate, HeadSizeConsistentBetweenQueryAndCache) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  const int64_t H = c.num_heads, Hk = c.num_kv_heads, D = c.head_size, N = c.num_tokens;
  {  // query rows hold H * D/2: the head size disagrees with the cache's D
    Params p = c.params();
    p.query = reshape(p.query, {N, H * D / 2});
    expect_rejected(c, p, "query", {"H*D", str(H * D), str(H * D / 2)});
  }
  {  // num_heads a multiple of Hk but not the query's
    Params p = c.params();
    p.num_heads = c.num_heads + c.num_kv_heads;
    expect_rejected(c, p, "query", {"H*D", str((H + Hk) * D)});
  }
  {
    Params p = c.params();
    p.key = reshape(p.key, {N, Hk * D / 2});
    expect_rejected(c, p, "key", {"Hk*D", str(Hk * D)});
  }
  {
    Params p = c.params();
    p.value = reshape(p.value, {N, Hk * D + 1});
    expect_rejected(c, p, "value", {"Hk*D", str(Hk * D + 1)});
  }
}

TEST(Validate, QueryShapeAndDtype) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  {
    Params p = c.params();
    p.query = TensorView{};
    expect_rejected(c, p, "query", {"is required"});
  }
  {
    Params p = c.params();
    p.query = reshape(p.query, {c.num_tokens, c.num_heads, c.head_size});
    expect_rejected(c, p, "query", {"2-D"});
  }
  for (DType t : {DType::i32, DType::u8}) {
    Params p = c.params();
    p.query.dtype = t;
    expect_rejected(c, p, "query", {"f32, f16 or bf16", pagedattn::dtype_name(t)});
  }
}

TEST(Validate, NumTokensMustFitInt32) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  Params p = c.params();
  const int64_t big = int64_t{1} << 31;
  p.query = reshape(p.query, {big, int64_t{c.num_heads} * c.head_size});
  expect_rejected(c, p, "query", {"int32", str(big)});
}

TEST(Validate, HeadRowMustFitInt32) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  const int64_t Hk = c.num_kv_heads, D = c.head_size;
  const int64_t H = (std::numeric_limits<int32_t>::max() / D / Hk + 1) * Hk;  // a multiple of Hk, H*D > int32
  Params p = c.params();
  p.num_heads = static_cast<int>(H);
  expect_rejected(c, p, "num_heads", {"H*D = " + str(H * D), "fit int32"});
}

TEST(Validate, MetadataLengthsMustFitInt32) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  const int64_t big = int64_t{1} << 31;
  {  // nothing is read before the length is rejected
    Params p = c.params();
    p.past_lens = reshape(p.past_lens, {big});
    expect_rejected(c, p, "past_lens", {"num_seqs", str(big)});
  }
  {
    Params p = c.params();
    p.block_indices = reshape(p.block_indices, {big});
    expect_rejected(c, p, "block_indices", {"fit int32", str(big)});
  }
}

TEST(Validate, KeyAndValueBothOrNeither) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  {
    Params p = c.params();
    p.value = TensorView{};
    expect_rejected(c, p, "value", {"both or neither"});
  }
  {
    Params p = c.params();
    p.key = TensorView{};
    expect_rejected(c, p, "key", {"both or neither"});
  }
  {  // neither: valid (the rows are already in the cache)
    Params p = c.params();
    p.key = p.value = TensorView{};
    expect_accepted(p, c);
  }
}

TEST(Validate, KeyValueShapeAndDtype) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));  // query f32
  const int64_t N = c.num_tokens, HkD = int64_t{c.num_kv_heads} * c.head_size;
  for (const char* name : {"key", "value"}) {
    SCOPED_TRACE(name);
    {
      Params p = c.params();
      by_name(p, name).dtype = DType::f16;
      expect_rejected(c, p, name, {"query's", "f16"});
    }
    {
      Params p = c.params();
      by_name(p, name) = reshape(by_name(p, name), {N - 1, HkD});
      expect_rejected(c, p, name, {"num_tokens", str(N), str(N - 1)});
    }
    {
      Params p = c.params();
      by_name(p, name) = reshape(by_name(p, name), {N * HkD});
      expect_rejected(c, p, name, {"2-D"});
    }
  }
}

// ==================================================================================================
// cache
// ==================================================================================================

TEST(Validate, CacheShapeAndDtype) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  const int64_t nb = c.num_blocks, Hk = c.num_kv_heads, bs = c.block_size, D = c.head_size;
  for (const char* name : {"key_cache", "value_cache"}) {
    SCOPED_TRACE(name);
    {
      Params p = c.params();
      by_name(p, name) = TensorView{};
      expect_rejected(c, p, name, {"is required"});
    }
    {
      Params p = c.params();
      by_name(p, name) = reshape(by_name(p, name), {nb, Hk, bs * D});
      expect_rejected(c, p, name, {"4-D"});
    }
  }
  {
    Params p = c.params();
    p.cache.key.dtype = p.cache.value.dtype = DType::f32;
    expect_rejected(c, p, "key_cache", {"f16, bf16, u8 or f8e4m3", "f32"});
  }
  {
    Params p = c.params();
    p.cache.value.dtype = DType::bf16;
    expect_rejected(c, p, "value_cache", {"key_cache's", "bf16"});
  }
  {
    Params p = c.params();
    p.cache.value = reshape(p.cache.value, {nb - 1, Hk, bs, D});
    expect_rejected(c, p, "value_cache", {"shape must equal", str(nb - 1)});
  }
}

TEST(Validate, CacheDimsPositive) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  const int64_t nb = c.num_blocks, Hk = c.num_kv_heads, bs = c.block_size, D = c.head_size;
  struct Bad {
    std::initializer_list<int64_t> shape;
    std::string fragment;
  };
  for (const Bad& b : {Bad{{nb, 0, bs, D}, "kv heads"}, Bad{{nb, Hk, 0, D}, "block_size"},
                       Bad{{nb, Hk, bs, 0}, "head size"}}) {
    Params p = c.params();
    p.cache.key = reshape(p.cache.key, b.shape);
    p.cache.value = reshape(p.cache.value, b.shape);
    expect_rejected(c, p, "key_cache", {b.fragment, "> 0"});
  }
}

TEST(Validate, NumBlocksMustFitInt32) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  const int64_t big = int64_t{1} << 31;
  Params p = c.params();
  p.cache.key = reshape(p.cache.key, {big, c.num_kv_heads, c.block_size, c.head_size});
  p.cache.value = p.cache.key;
  expect_rejected(c, p, "key_cache", {"int32", str(big)});
}

TEST(Validate, U8CacheNeedsFourF16Params) {
  pt::Case c = draw(full_cfg(KVPrecision::u8));
  const int64_t nb = c.num_blocks, Hk = c.num_kv_heads, bs = c.block_size;
  for (const char* name : {"key_scale", "key_min", "value_scale", "value_min"}) {
    SCOPED_TRACE(name);
    {
      Params p = c.params();
      by_name(p, name) = TensorView{};
      expect_rejected(c, p, name, {"is required", "u8"});
    }
    {
      Params p = c.params();
      by_name(p, name).dtype = DType::bf16;
      expect_rejected(c, p, name, {"dtype must be f16", "bf16"});
    }
    {
      Params p = c.params();
      by_name(p, name) = reshape(by_name(p, name), {nb, Hk * bs});
      expect_rejected(c, p, name, {"3-D"});
    }
    {
      Params p = c.params();
      by_name(p, name) = reshape(by_name(p, name), {nb, Hk, bs / 2});
      expect_rejected(c, p, name, {"block_size", str(bs), str(bs / 2)});
    }
    {
      Params p = c.params();
      by_name(p, name) = reshape(by_name(p, name), {nb - 1, Hk, bs});
      expect_rejected(c, p, name, {"num_blocks", str(nb), str(nb - 1)});
    }
  }
}

TEST(Validate, ValueHeadSizeMayDifferOnlyInDimension3) {
  pt::CaseConfig cfg = full_cfg(KVPrecision::f16);
  cfg.head_sizes = {128};
  cfg.value_head_sizes = {64};
  cfg.p_value_head_size = 1.0;
  cfg.p_write = 1.0;
  pt::Case c = draw(cfg);
  ASSERT_EQ(c.Dv(), 64);
  EXPECT_NO_THROW(pagedattn::validate(c.params()));
  const int64_t N = c.num_tokens, H = c.num_heads, Hk = c.num_kv_heads;
  {
    Params p = c.params();
    p.cache.value = reshape(p.cache.value, {c.num_blocks, Hk, c.block_size / 2, 2 * 64});
    expect_rejected(c, p, "value_cache", {"in dimensions 0-2", "key_cache's"});
  }
  {
    Params p = c.params();
    p.value = reshape(p.value, {N, Hk * 128});  // as if Dv were D
    expect_rejected(c, p, "value", {"Hk*Dv", str(Hk * 64), str(Hk * 128)});
  }
  {
    Params p = c.params();
    p.out = reshape(p.out, {N / 1, H * 64 / 2});
    expect_rejected(c, p, "out", {"H*Dv", str(H * 64)});
  }
}

TEST(Validate, Fp8CacheNeedsF32ScalesPerHeadOrOne) {
  pt::Case c = draw(full_cfg(KVPrecision::fp8));
  const int64_t Hk = c.num_kv_heads;
  std::vector<float> buf(static_cast<size_t>(c.num_blocks) * Hk * c.block_size + Hk + 1, 1.0f);
  for (const char* name : {"key_scale", "value_scale"}) {
    SCOPED_TRACE(name);
    {
      Params p = c.params();
      by_name(p, name) = TensorView{};
      expect_rejected(c, p, name, {"is required", "f8e4m3"});
    }
    {
      Params p = c.params();
      by_name(p, name) = TensorView::contiguous(buf.data(), DType::f16, Device::cpu, {Hk});
      expect_rejected(c, p, name, {"dtype must be f32", "f16"});
    }
    {
      Params p = c.params();
      by_name(p, name) = TensorView::contiguous(buf.data(), DType::f32, Device::cpu, {Hk + 1});
      expect_rejected(c, p, name, {"Hk = " + str(Hk), "or 1", str(Hk + 1)});
    }
    {
      Params p = c.params();
      by_name(p, name) = TensorView::contiguous(buf.data(), DType::f32, Device::cpu, {1, Hk});
      expect_rejected(c, p, name, {"1-D", "[Hk] or [1]"});
    }
  }
  for (const char* name : {"key_min", "value_min"}) {  // u8's row minima have no place in an fp8 cache
    SCOPED_TRACE(name);
    Params p = c.params();
    by_name(p, name) = TensorView::contiguous(buf.data(), DType::f16, Device::cpu, {c.num_blocks, Hk, c.block_size});
    expect_rejected(c, p, name, {"must be absent", "f8e4m3"});
  }
  for (int64_t n : {Hk, int64_t{1}}) {  // both forms are accepted
    Params p = c.params();
    p.cache.key_scale = TensorView::contiguous(buf.data(), DType::f32, Device::cpu, {n});
    EXPECT_NO_THROW(pagedattn::validate(p)) << n;
  }
}

TEST(Validate, NonU8CacheMustNotHaveParams) {
  for (KVPrecision kv : {KVPrecision::f16, KVPrecision::bf16}) {
    pt::Case c = draw(full_cfg(kv));
    std::vector<uint16_t> buf(static_cast<size_t>(c.num_blocks) * c.num_kv_heads * c.block_size);
    for (const char* name : {"key_scale", "key_min", "value_scale", "value_min"}) {
      SCOPED_TRACE(name);
      Params p = c.params();
      by_name(p, name) = TensorView::contiguous(buf.data(), DType::f16, Device::cpu,
                                                {c.num_blocks, c.num_kv_heads, c.block_size});
      expect_rejected(c, p, name, {"must be absent", pagedattn::kv_precision_name(kv)});
    }
  }
}

// ==================================================================================================
// out, scores, alibi_slopes, sinks
// ==================================================================================================

TEST(Validate, OutLikeQuery) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));  // query f32
  const int64_t N = c.num_tokens, HD = int64_t{c.num_heads} * c.head_size;
  {
    Params p = c.params();
    p.out = TensorView{};
    expect_rejected(c, p, "out", {"is required"});
  }
  {
    Params p = c.params();
    p.out.dtype = DType::bf16;
    expect_rejected(c, p, "out", {"query's", "bf16"});
  }
  {
    Params p = c.params();
    p.out = reshape(p.out, {N - 1, HD});
    expect_rejected(c, p, "out", {"num_tokens", str(N), str(N - 1)});
  }
  {
    Params p = c.params();
    p.out = reshape(p.out, {N, HD / 2});
    expect_rejected(c, p, "out", {"H*D", str(HD), str(HD / 2)});
  }
  {
    Params p = c.params();
    p.out = reshape(p.out, {N * HD});
    expect_rejected(c, p, "out", {"2-D"});
  }
}

TEST(Validate, ScoresF32SumOfContexts) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  const int64_t n = static_cast<int64_t>(c.scores.size());
  int64_t sum_ctx = 0;
  for (int s = 0; s < c.num_seqs; ++s) sum_ctx += c.ctx(s);
  ASSERT_EQ(n, sum_ctx);
  {
    Params p = c.params();
    p.scores.dtype = DType::f16;
    expect_rejected(c, p, "scores", {"dtype must be f32", "f16"});
  }
  {
    Params p = c.params();
    p.scores = reshape(p.scores, {1, n});
    expect_rejected(c, p, "scores", {"1-D"});
  }
  {
    Params p = c.params();
    p.scores = reshape(p.scores, {n - 1});
    expect_rejected(c, p, "scores", {str(sum_ctx) + " entries", "got " + str(n - 1)});
  }
}

TEST(Validate, AlibiAndSinksF32PerHead) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  const int64_t H = c.num_heads;
  for (const char* name : {"alibi_slopes", "sinks"}) {
    SCOPED_TRACE(name);
    {
      Params p = c.params();
      by_name(p, name).dtype = DType::f16;
      expect_rejected(c, p, name, {"dtype must be f32", "f16"});
    }
    {
      Params p = c.params();
      by_name(p, name) = reshape(by_name(p, name), {H - 1});
      expect_rejected(c, p, name, {"num_heads", str(H), "got " + str(H - 1)});
    }
    {
      Params p = c.params();
      by_name(p, name) = reshape(by_name(p, name), {1, H});
      expect_rejected(c, p, name, {"1-D"});
    }
  }
}

// ==================================================================================================
// i32 metadata: presence, dtype, ndim, lengths
// ==================================================================================================

TEST(Validate, MetadataI32OneD) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  for (const char* name :
       {"past_lens", "subsequence_begins", "block_indices", "block_indices_begins", "qq_bias_begins"}) {
    SCOPED_TRACE(name);
    {
      Params p = c.params();
      by_name(p, name).dtype = DType::f32;
      expect_rejected(c, p, name, {"dtype must be i32", "f32"});
    }
    {
      Params p = c.params();
      by_name(p, name) = reshape(by_name(p, name), {1, by_name(p, name).shape[0]});
      expect_rejected(c, p, name, {"1-D"});
    }
    if (std::string(name) != "qq_bias_begins") {  // absent qq_bias_begins is its own rule below
      Params p = c.params();
      by_name(p, name) = TensorView{};
      expect_rejected(c, p, name, {"is required"});
    }
  }
}

TEST(Validate, BeginsHaveNumSeqsPlusOneEntries) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  const int64_t S = c.num_seqs;
  for (const char* name : {"subsequence_begins", "block_indices_begins", "qq_bias_begins"}) {
    SCOPED_TRACE(name);
    Params p = c.params();
    by_name(p, name) = reshape(by_name(p, name), {S});
    expect_rejected(c, p, name, {"num_seqs+1 = " + str(S + 1) + " entries", "got " + str(S)});
  }
}

// ==================================================================================================
// metadata contents
// ==================================================================================================

TEST(Validate, PastLensNonNegative) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  const int s = c.num_seqs - 1;
  c.past_lens[s] = -5;
  expect_rejected(c, c.params(), "past_lens", {">= 0", "-5", "past_lens[" + str(s) + "]"});
}

TEST(Validate, SubsequenceBeginsStartsAtZero) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  c.subsequence_begins[0] = 1;
  expect_rejected(c, c.params(), "subsequence_begins", {"start at 0", "got 1"});
}

TEST(Validate, SubsequenceBeginsNonDecreasing) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));  // >= 2 sequences
  c.subsequence_begins[1] = c.subsequence_begins[2] + 1;
  expect_rejected(c, c.params(), "subsequence_begins", {"non-decreasing", "sequence 1"});
}

TEST(Validate, SubsequenceBeginsEndsAtNumTokens) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  c.subsequence_begins[c.num_seqs] -= 1;
  expect_rejected(c, c.params(), "subsequence_begins",
                  {"num_tokens = " + str(c.num_tokens), "got " + str(c.num_tokens - 1)});
}

TEST(Validate, MaxContextLenCoversEverySequence) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  int max_ctx = 0, first = -1;
  for (int s = 0; s < c.num_seqs; ++s) max_ctx = std::max(max_ctx, c.ctx(s));
  for (int s = c.num_seqs - 1; s >= 0; --s)
    if (c.ctx(s) == max_ctx) first = s;
  {
    Params p = c.params();
    p.max_context_len = max_ctx - 1;
    expect_rejected(c, p, "max_context_len", {"sequence " + str(first), str(max_ctx), str(max_ctx - 1)});
  }
  {
    Params p = c.params();
    p.max_context_len = -1;
    expect_rejected(c, p, "max_context_len", {">= 0", "-1"});
  }
}

TEST(Validate, PastPlusTokensOverflowingInt32IsCaught) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  const int s = c.num_seqs - 1;
  Params p = c.params();  // views first: Case's own int arithmetic on ctx would overflow
  c.past_lens[s] = std::numeric_limits<int32_t>::max();
  p.max_context_len = std::numeric_limits<int32_t>::max();
  const int64_t ctx = int64_t{std::numeric_limits<int32_t>::max()} + c.T(s);
  expect_rejected(c, p, "max_context_len", {"sequence " + str(s), str(ctx)});
}

TEST(Validate, BlockIndicesBeginsStartsAtZero) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  c.block_indices_begins[0] = 1;
  expect_rejected(c, c.params(), "block_indices_begins", {"start at 0", "got 1"});
}

TEST(Validate, BlockIndicesBeginsNonDecreasing) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  c.block_indices_begins[1] = c.block_indices_begins[2] + 1;
  expect_rejected(c, c.params(), "block_indices_begins", {"non-decreasing", "sequence 1"});
}

TEST(Validate, BlockIndicesBeginsEndsAtLength) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  const int64_t n = static_cast<int64_t>(c.block_indices.size());
  c.block_indices.push_back(0);  // one more entry, not covered by the begins
  expect_rejected(c, c.params(), "block_indices_begins", {"length of block_indices = " + str(n + 1), str(n)});
}

TEST(Validate, BlockTableMustCoverContext) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  const int s = c.num_seqs - 1;
  const int needed = (c.ctx(s) + c.block_size - 1) / c.block_size;
  // cut the last sequence's table to one entry fewer than it needs
  c.block_indices.resize(c.block_indices_begins[s] + needed - 1);
  c.block_indices_begins[s + 1] = static_cast<int32_t>(c.block_indices.size());
  expect_rejected(c, c.params(), "block_indices",
                  {"table of sequence " + str(s), "has " + str(needed - 1) + " entries", "needs " + str(needed)});
}

TEST(Validate, BlockIdsInUsedPartInRange) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  std::mt19937_64 rng(c.seed);
  const int s = static_cast<int>(rng() % c.num_seqs);
  const int used = (c.ctx(s) + c.block_size - 1) / c.block_size;
  // the entries read: from the block of the first new token's window start (params.h)
  const int first = c.sliding_window > 0 ? std::max(0, c.past_lens[s] - c.sliding_window + 1) / c.block_size : 0;
  const int k = c.block_indices_begins[s] + first + static_cast<int>(rng() % (used - first));
  const int32_t saved = c.block_indices[k];
  for (int32_t bad : {c.num_blocks, -1, std::numeric_limits<int32_t>::max()}) {
    c.block_indices[k] = bad;
    expect_rejected(c, c.params(), "block_indices",
                    {"block id " + str(bad) + " at block_indices[" + str(k) + "] (sequence " + str(s) +
                     ") is outside [0, " + str(c.num_blocks) + ")"});
  }
  c.block_indices[k] = saved;
}

// Runs `c` on the cpu backend with block tables `bi` (and `bib`, or c's own begins) after restoring its
// poisoned outputs and original cache from `fresh` (a snapshot); returns (out, scores) bytes.
std::pair<std::vector<uint8_t>, std::vector<uint8_t>> run_with_tables(
    pt::Case& c, const std::vector<std::pair<std::string, std::vector<uint8_t>>>& fresh, std::vector<int32_t>& bi,
    std::vector<int32_t>* bib = nullptr) {
  c.out = fresh[0].second;
  std::memcpy(c.scores.data(), fresh[1].second.data(), fresh[1].second.size());
  c.key_cache = fresh[2].second;
  c.value_cache = fresh[3].second;
  Params p = c.params();
  p.block_indices = TensorView::contiguous(bi.data(), DType::i32, Device::cpu, {static_cast<int64_t>(bi.size())});
  if (bib != nullptr)
    p.block_indices_begins = TensorView::contiguous(bib->data(), DType::i32, Device::cpu, {c.num_seqs + 1});
  expect_accepted(p, c);
  return std::make_pair(c.out, bytes_of(c.scores));
}

// Entries past the used part of a table are never read: garbage there is accepted and changes nothing.
TEST(Validate, GarbagePastUsedPartIsIgnored) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  // tables cut to exactly their used part
  std::vector<int32_t> exact, exact_begins{0}, padded, padded_begins{0};
  for (int s = 0; s < c.num_seqs; ++s) {
    const int used = (c.ctx(s) + c.block_size - 1) / c.block_size;
    for (int i = 0; i < used; ++i) {
      exact.push_back(c.block_indices[c.block_indices_begins[s] + i]);
      padded.push_back(exact.back());
    }
    for (int32_t junk : {-7, c.num_blocks, std::numeric_limits<int32_t>::max(), exact.back()}) padded.push_back(junk);
    exact_begins.push_back(static_cast<int32_t>(exact.size()));
    padded_begins.push_back(static_cast<int32_t>(padded.size()));
  }
  const auto fresh = snapshot(c);
  const auto a = run_with_tables(c, fresh, exact, &exact_begins);
  const auto b = run_with_tables(c, fresh, padded, &padded_begins);
  EXPECT_TRUE(a == b) << "garbage past the used part of the tables changed the result (" << c.describe() << ")";
}

// Blocks wholly before the first new token's sliding window are seen by no token: engines free them.
// Their entries may hold -1 or garbage (accepted), and the result equals that of a table with valid ids
// there (nothing of those blocks is read; their slots hold NaN poison in the drawn cases).
TEST(Validate, FreedBlocksBeforeTheWindowAreNotRead) {
  pt::CaseConfig cfg = full_cfg(KVPrecision::f16);
  cfg.min_past = 64;
  cfg.p_window = 1.0;
  for (int attempt = 0; attempt < 20; ++attempt) {
    pt::Case c = draw(cfg);
    std::vector<int32_t> valid = c.block_indices, freed = c.block_indices;
    int n_freed = 0;
    for (int s = 0; s < c.num_seqs; ++s) {
      const int lo = std::max(0, c.past_lens[s] - c.sliding_window + 1);
      for (int b = 0; (b + 1) * c.block_size <= lo; ++b, ++n_freed) {
        const int k = c.block_indices_begins[s] + b;
        valid[k] = b % c.num_blocks;  // some real block (maybe another sequence's)
        freed[k] = b % 2 ? -1 : std::numeric_limits<int32_t>::min();
      }
    }
    if (n_freed == 0) continue;  // the window starts in the first block: nothing to free
    const auto fresh = snapshot(c);
    const auto a = run_with_tables(c, fresh, valid);
    const auto b = run_with_tables(c, fresh, freed);
    EXPECT_TRUE(a == b) << "freed entries before the window changed the result (" << c.describe() << ")";
    const int64_t n = static_cast<int64_t>(c.num_tokens) * c.num_heads * c.head_size;
    for (int64_t i = 0; i < n; ++i)
      ASSERT_TRUE(std::isfinite(pt::load_as_float(b.first.data(), c.qdtype, i))) << "out[" << i << "] not finite";
    return;
  }
  GTEST_SKIP() << "no drawn case had a block wholly before its window";
}

// ==================================================================================================
// write/read conflicts between tables
// ==================================================================================================

// Cases for the conflict rules: no sliding window, so every used entry of a table is read (entries
// wholly before a window are not, and the drawn cases free some of them).
pt::CaseConfig conflict_cfg() {
  pt::CaseConfig cfg = full_cfg(KVPrecision::f16);
  cfg.p_window = 0.0;
  return cfg;
}

struct Tables {
  pt::Case& c;
  int entry(int s, int i) const { return c.block_indices_begins[s] + i; }
  int first_write(int s) const { return entry(s, c.past_lens[s] / c.block_size); }  // T >= 1
};

TEST(Validate, BlockWrittenByTwoSequences) {
  pt::Case c = draw(conflict_cfg());
  Tables t{c};
  const int k0 = t.first_write(0), k1 = t.first_write(1);
  const int32_t w = c.block_indices[k0];
  c.block_indices[k1] = w;
  expect_rejected(c, c.params(), "block_indices",
                  {"block " + str(w) + " is written by sequence 0 (block_indices[" + str(k0) +
                   "]) and by sequence 1 (block_indices[" + str(k1) + "])"});
}

TEST(Validate, BlockWrittenByOneSequenceReadByAnother) {
  pt::Case c = draw(conflict_cfg());  // past >= 2 blocks: entry 0 is read-only
  Tables t{c};
  const int k0 = t.first_write(0), r1 = t.entry(1, 0);
  const int32_t w = c.block_indices[k0];
  c.block_indices[r1] = w;
  expect_rejected(c, c.params(), "block_indices",
                  {"block " + str(w) + " is written by sequence 0 (block_indices[" + str(k0) +
                   "]) and read by sequence 1 (block_indices[" + str(r1) + "])"});
}

TEST(Validate, BlockWrittenAndReadThroughTwoEntriesOfOneTable) {
  pt::Case c = draw(conflict_cfg());
  Tables t{c};
  const int k0 = t.first_write(0), r0 = t.entry(0, 0);
  const int32_t w = c.block_indices[k0];
  c.block_indices[r0] = w;
  expect_rejected(c, c.params(), "block_indices",
                  {"written by sequence 0 (block_indices[" + str(k0) + "]) and read by sequence 0"});
}

TEST(Validate, SharedReadOnlyBlocksAreAccepted) {
  pt::Case c = draw(conflict_cfg());
  Tables t{c};
  // prefix sharing: sequence 1 reads sequence 0's first (full, read-only) block
  c.block_indices[t.entry(1, 0)] = c.block_indices[t.entry(0, 0)];
  expect_accepted(c.params(), c);
}

TEST(Validate, SharedBlocksWithoutWriteAreAccepted) {
  pt::Case c = draw(conflict_cfg());
  Tables t{c};
  // without key/value nothing is written: two sequences may share even their last blocks
  c.block_indices[t.first_write(1)] = c.block_indices[t.first_write(0)];
  Params p = c.params();
  p.key = p.value = TensorView{};
  expect_accepted(p, c);
}

// ==================================================================================================
// tree mask
// ==================================================================================================

TEST(Validate, QqBiasBothOrNeither) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  {
    Params p = c.params();
    p.qq_bias_begins = TensorView{};
    expect_rejected(c, p, "qq_bias_begins", {"both or neither"});
  }
  {
    Params p = c.params();
    p.qq_bias = TensorView{};
    expect_rejected(c, p, "qq_bias", {"both or neither"});
  }
}

TEST(Validate, QqBiasU8OneD) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  {
    Params p = c.params();
    p.qq_bias.dtype = DType::i32;
    expect_rejected(c, p, "qq_bias", {"dtype must be u8", "i32"});
  }
  {
    Params p = c.params();
    p.qq_bias = reshape(p.qq_bias, {1, p.qq_bias.shape[0]});
    expect_rejected(c, p, "qq_bias", {"1-D"});
  }
}

TEST(Validate, QqBiasBeginsStartAtZeroAndStepBySquares) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  {
    pt::Case d = c;
    d.qq_bias_begins[0] = 1;
    expect_rejected(d, d.params(), "qq_bias_begins", {"start at 0", "got 1"});
  }
  {
    const int s = c.num_seqs - 1, T = c.T(s);
    c.qq_bias_begins[s + 1] += 1;
    expect_rejected(c, c.params(), "qq_bias_begins",
                    {"T^2 = " + str(T * T), "sequence " + str(s), "got " + str(T * T + 1)});
  }
}

TEST(Validate, QqBiasLengthIsSumOfSquares) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  const int64_t n = static_cast<int64_t>(c.qq_bias.size());
  Params p = c.params();
  p.qq_bias = reshape(p.qq_bias, {n - 1});
  expect_rejected(c, p, "qq_bias", {str(n) + " entries", "got " + str(n - 1)});
}

TEST(Validate, QqBiasZeroOrOne) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  std::mt19937_64 rng(c.seed);
  const int k = static_cast<int>(rng() % c.qq_bias.size());
  c.qq_bias[k] = 2;
  expect_rejected(c, c.params(), "qq_bias", {"0 or 1", "got 2", "qq_bias[" + str(k) + "]"});
}

TEST(Validate, QqBiasDiagonalIsOne) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  const int s = c.num_seqs - 1, T = c.T(s), t = T - 1;
  const int k = c.qq_bias_begins[s] + t * T + t;
  c.qq_bias[k] = 0;
  expect_rejected(c, c.params(), "qq_bias",
                  {"diagonal", "qq_bias[" + str(k) + "]", "sequence " + str(s), "token " + str(t)});
}

// Causality applies on top of the tree mask: entries above the diagonal are accepted and ignored.
TEST(Validate, QqBiasAboveDiagonalIgnored) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  const auto fresh = snapshot(c);
  auto run_with_upper = [&](uint8_t v) {
    for (int s = 0; s < c.num_seqs; ++s)
      for (int t = 0; t < c.T(s); ++t)
        for (int u = t + 1; u < c.T(s); ++u) c.qq_bias[c.qq_bias_begins[s] + t * c.T(s) + u] = v;
    c.out = fresh[0].second;
    std::memcpy(c.scores.data(), fresh[1].second.data(), fresh[1].second.size());
    c.key_cache = fresh[2].second;
    c.value_cache = fresh[3].second;
    expect_accepted(c.params(), c);
    return std::make_pair(c.out, bytes_of(c.scores));
  };
  const auto zero = run_with_upper(0);
  const auto one = run_with_upper(1);
  EXPECT_TRUE(zero == one) << "entries above the diagonal of qq_bias changed the result (" << c.describe() << ")";
}

// ==================================================================================================
// scalar options
// ==================================================================================================

TEST(Validate, ScaleFiniteAndPositive) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  for (float bad : {-0.5f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    Params p = c.params();
    p.scale = bad;
    expect_rejected(c, p, "scale", {"finite and > 0"});
  }
  Params p = c.params();
  p.scale.reset();  // absent: the default 1/sqrt(D)
  expect_accepted(p, c);
}

// scale = 0 reads as the default 1/sqrt(D), as OpenVINO's op reads it: the same output bits as absent.
TEST(Validate, ScaleZeroIsTheDefault) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  const auto fresh = snapshot(c);
  Params p = c.params();
  p.scale.reset();
  pagedattn::forward(p, {Backend::cpu});
  const std::vector<uint8_t> absent = c.out;
  c.out = fresh[0].second;
  c.key_cache = fresh[2].second;
  c.value_cache = fresh[3].second;
  p = c.params();
  p.scale = 0.0f;
  pagedattn::forward(p, {Backend::cpu});
  EXPECT_TRUE(absent == c.out) << c.describe();
}

TEST(Validate, ScoreAggregationWindow) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  std::vector<int32_t> w(c.num_seqs, 1), short_w(c.num_seqs > 1 ? c.num_seqs - 1 : 2, 1);
  Params p = c.params();
  w[c.num_seqs - 1] = -2;
  p.score_aggregation_window = TensorView::contiguous(w.data(), DType::i32, Device::cpu, {c.num_seqs});
  expect_rejected(c, p, "score_aggregation_window", {">= -1", "score_aggregation_window[" + str(c.num_seqs - 1) + "]"});
  p.score_aggregation_window =
      TensorView::contiguous(short_w.data(), DType::i32, Device::cpu, {static_cast<int64_t>(short_w.size())});
  expect_rejected(c, p, "score_aggregation_window", {"num_seqs"});
  w[c.num_seqs - 1] = -1;
  p.score_aggregation_window = TensorView::contiguous(w.data(), DType::i32, Device::cpu, {c.num_seqs});
  expect_accepted(p, c);
}

TEST(Validate, SlidingWindowNonNegative) {
  pt::Case c = draw(full_cfg(KVPrecision::f16));
  Params p = c.params();
  p.sliding_window = -2;
  expect_rejected(c, p, "sliding_window", {">= 0", "-2"});
}

// ==================================================================================================
// Plan::run with a call that differs from the planned one
// ==================================================================================================

TEST(Validate, RunRejectsADifferentSignature) {
  pt::CaseConfig cfg = full_cfg(KVPrecision::f16);
  pt::Case a = draw(cfg);
  pt::Case b = draw(cfg);
  for (int k = 0; k < 50 && b.num_tokens == a.num_tokens && b.num_heads == a.num_heads; ++k) b = draw(cfg);
  ASSERT_TRUE(b.num_tokens != a.num_tokens || b.num_heads != a.num_heads) << "could not draw a different shape";
  const pagedattn::Plan plan = pagedattn::plan(a.params(), {Backend::cpu});
  // b is a valid call on its own, but not the planned one
  const std::string input = b.num_heads != a.num_heads ? "num_heads" : "query";
  expect_rejected_by(b, b.params(), input, {"differs from the planned call", "re-plan"},
                     [&](const Params& q) { plan.run(q); });
  {  // same call with a reshaped output
    Params p = a.params();
    p.out = reshape(p.out, {int64_t{a.num_tokens} * a.num_heads * a.head_size});
    expect_rejected_by(a, p, "out", {"differs from the planned call"}, [&](const Params& q) { plan.run(q); });
  }
  {  // same tensors with another window or scale: the work list depends on them
    Params p = a.params();
    p.sliding_window = a.sliding_window + 5;
    expect_rejected_by(a, p, "sliding_window", {"differs from the planned call"}, [&](const Params& q) { plan.run(q); });
    p = a.params();
    p.scale = 0.5f * (p.scale ? *p.scale : 1.0f);
    expect_rejected_by(a, p, "scale", {"differs from the planned call"}, [&](const Params& q) { plan.run(q); });
  }
  // the planned call itself runs
  EXPECT_NO_THROW(plan.run(a.params())) << a.describe();
}

}  // namespace

// A group larger than the cpu kernels' 64-row chunks (H = 80 over one kv head) is refused at plan time
// with UnsupportedError and nothing written (it overran the kernels' scratch before); the oracle
// (Options::cpu_reference) takes it.
TEST(Validate, CpuKernelsRefuseGroupsOver64) {
  pt::CaseConfig cfg = small_cfg();
  cfg.group_sizes = {80};
  cfg.kv_heads = {1};
  cfg.p_write = 1.0;
  pt::Case c = draw(cfg);
  const auto before = snapshot(c);
  EXPECT_THROW(pagedattn::forward(c.params(), {Backend::cpu}), pagedattn::UnsupportedError);
  EXPECT_TRUE(snapshot(c) == before) << "the refused call wrote";
  Options ref{Backend::cpu};
  ref.cpu_reference = true;
  EXPECT_NO_THROW(pagedattn::forward(c.params(), ref));
}
