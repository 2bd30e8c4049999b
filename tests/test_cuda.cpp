// GPU tests: the cuda backend against the CPU oracle on seeded random cases (label `gpu`).
// Every test skips with a message when no CUDA device is visible.
//
// Tolerances (relative L2 error of `out` vs the oracle): f16 KV 2e-3, bf16 KV 1e-2, u8 KV 3e-3; NaN never.
// Written cache: f16/bf16 rows bit-identical; u8 codes differ by at most 1 on at most 1e-4 of the
// elements (division and rounding are IEEE on both sides, so we expect 0), parameters bit-identical.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <random>
#include <thread>

#include "cpu/oracle.h"
#include "testing/case.h"
#include "testing/device_case.h"

using namespace pagedattn;
using namespace pagedattn::testing;

namespace {

#define REQUIRE_GPU()                                                              \
  do {                                                                             \
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped"; \
  } while (0)

uint64_t base_seed() { return pagedattn::testing::base_seed("test_cuda", 20261129ull); }

// PAGEDATTN_GPU_CASES caps each suite's case count (the sanitizer run uses a small subset).
int case_count(int n) {
  const char* s = std::getenv("PAGEDATTN_GPU_CASES");
  return s ? std::min(n, std::max(1, std::atoi(s))) : n;
}

double tolerance(KVPrecision p) {
  switch (p) {
    case KVPrecision::f16: return 2e-3;
    case KVPrecision::bf16: return 1e-2;
    default: return 3e-3;
  }
}

struct Worst {
  double err = 0;
  std::string where;
  int cases = 0;
  int scores_cases = 0;
  double scores_err = 0;
};

std::vector<float> as_floats(const std::vector<uint8_t>& bytes, DType t, int64_t n) {
  std::vector<float> f(n);
  for (int64_t i = 0; i < n; ++i) f[i] = load_as_float(bytes.data(), t, i);
  return f;
}

// Compares the cache written by the GPU (c) with the oracle's (ref). Returns a failure message or "".
std::string compare_cache(const Case& c, const Case& ref) {
  if (c.kv != KVPrecision::u8) {
    if (c.key_cache != ref.key_cache) return "key cache differs from the oracle's write-in";
    if (c.value_cache != ref.value_cache) return "value cache differs from the oracle's write-in";
    return "";
  }
  int64_t off_by_one = 0;
  for (const auto* pair : {&c.key_cache, &c.value_cache}) {
    const auto& a = *pair;
    const auto& b = pair == &c.key_cache ? ref.key_cache : ref.value_cache;
    for (size_t i = 0; i < a.size(); ++i) {
      const int d = std::abs(static_cast<int>(a[i]) - static_cast<int>(b[i]));
      if (d > 1) return "u8 code differs by " + std::to_string(d) + " at byte " + std::to_string(i);
      off_by_one += d;
    }
  }
  const double frac = static_cast<double>(off_by_one) / static_cast<double>(2 * c.key_cache.size());
  if (frac > 1e-4) return "u8 codes off by one on " + std::to_string(frac) + " of elements";
  auto same_bits = [](const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i] != b[i] && !(((a[i] & 0x7c00) == 0x7c00) && ((b[i] & 0x7c00) == 0x7c00))) return false;
    return true;
  };
  if (!same_bits(c.key_scale, ref.key_scale) || !same_bits(c.key_min, ref.key_min) ||
      !same_bits(c.value_scale, ref.value_scale) || !same_bits(c.value_min, ref.value_min))
    return "u8 scale/min differs from the oracle's";
  return "";
}

// `n` seeded cases and their oracle references (computed in parallel on the host), to run on the GPU
// once or, under several switches, more than once (the oracle dominates a suite's time).
struct Suite {
  std::vector<Case> cases, refs;
};
// `tweak` (optional) changes each drawn case before its reference is computed.
Suite make_suite(const char* name, const CaseConfig& cfg, uint64_t seed0, int n,
                 const std::function<void(Case&)>& tweak = {}) {
  n = case_count(n);
  std::printf("[%s] base seed %llu (override with PAGEDATTN_SEED), %d cases\n", name,
              static_cast<unsigned long long>(seed0), n);
  std::fflush(stdout);
  Suite s;
  s.cases.resize(n);
  s.refs.resize(n);
  const unsigned workers = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  // Each worker takes the next case from a shared counter, the oracle's costliest cases first (its cost
  // is ~ sum over sequences of T * ctx * H * D): a case of 600 tokens over 33k keys costs 10^4 times a
  // decode, and a fixed round-robin split left workers idle behind the one that drew several of them.
  auto parallel = [&](const std::vector<int>& order, auto&& work) {
    std::atomic<int> next{0};
    std::vector<std::future<void>> fut;
    for (unsigned w = 0; w < workers; ++w)
      fut.push_back(std::async(std::launch::async, [&] {
        for (int k = next++; k < n; k = next++) work(order[k]);
      }));
    for (auto& f : fut) f.get();
  };
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  parallel(order, [&](int i) {
    s.cases[i] = make_random_case(seed0 + i, cfg);
    if (tweak) tweak(s.cases[i]);
  });
  std::vector<double> cost(n, 0.0);
  for (int i = 0; i < n; ++i) {
    const Case& c = s.cases[i];
    for (int q = 0; q < c.num_seqs; ++q)
      cost[i] += static_cast<double>(c.T(q)) * c.ctx(q) * c.num_heads * c.head_size;
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return cost[a] > cost[b]; });
  // (fewer cases than workers: each case's sequences spread over the spare ones)
  const int per_case = std::max(1, static_cast<int>(workers) / n);
  parallel(order, [&](int i) {
    s.refs[i] = s.cases[i];
    reference_forward(s.refs[i], per_case);
  });
  return s;
}

// Runs every case of `suite` on the GPU (a fresh copy of its inputs and cache each time) and compares
// it with its reference.
void check_suite(const char* name, const Suite& suite, const Options& opt = {Backend::cuda}) {
  const int n = static_cast<int>(suite.cases.size());
  std::map<KVPrecision, Worst> worst;
  int failures = 0;
  for (int i = 0; i < n; ++i) {
    Case c = suite.cases[i];
    const Case& ref = suite.refs[i];
    {
      DeviceCase d(c);
      forward(d.params(), opt);
      d.download();
    }
    const int64_t n_out = static_cast<int64_t>(c.num_tokens) * c.num_heads * c.head_size;
    const std::vector<float> want = as_floats(ref.out, ref.qdtype, n_out);
    const Compare cmp = compare(c.out.data(), c.qdtype, want.data(), n_out);
    const double tol = tolerance(c.kv);
    Worst& wk = worst[c.kv];
    wk.cases++;
    if (cmp.rel_l2 > wk.err || std::isnan(cmp.rel_l2)) {
      wk.err = cmp.rel_l2;
      wk.where = c.describe();
    }
    const std::string cache_msg = compare_cache(c, ref);
    std::string scores_msg;
    if (c.want_scores) {  // summed attention weights per key, each sequence on its own: out's tolerance
      wk.scores_cases++;
      int64_t base = 0;
      for (int s = 0; s < c.num_seqs; ++s) {
        const int64_t n = c.ctx(s);
        const Compare cs = compare(reinterpret_cast<const uint8_t*>(c.scores.data() + base), DType::f32,
                                   ref.scores.data() + base, n);
        if (n > 0 && (cs.rel_l2 > wk.scores_err || std::isnan(cs.rel_l2))) wk.scores_err = cs.rel_l2;
        if (n > 0 && !cs.ok(tol) && scores_msg.empty())
          scores_msg = "sequence " + std::to_string(s) + ": " + cs.describe();
        base += n;
      }
    }
    if (!cmp.ok(tol) || !cache_msg.empty() || !scores_msg.empty()) {
      ++failures;
      ADD_FAILURE() << "case " << c.describe() << "\n  out: " << cmp.describe() << " (tolerance " << tol << ")"
                    << (cache_msg.empty() ? "" : "\n  cache: " + cache_msg)
                    << (scores_msg.empty() ? "" : "\n  scores: " + scores_msg);
      if (failures > 10) break;
    }
  }
  for (const auto& [p, wk] : worst)
    std::printf("[%s] kv %-4s: %4d cases, worst rel_l2 %.3e  (%s); scores in %d cases, worst rel_l2 %.3e\n", name,
                kv_precision_name(p), wk.cases, wk.err, wk.where.c_str(), wk.scores_cases, wk.scores_err);
}

void run_suite(const char* name, const CaseConfig& cfg, uint64_t seed0, int n, const Options& opt = {Backend::cuda}) {
  check_suite(name, make_suite(name, cfg, seed0, n), opt);
}

CaseConfig few_query_config() {
  CaseConfig cfg;
  cfg.min_seqs = 1;
  cfg.max_seqs = 6;
  cfg.max_past = 3000;
  cfg.min_tokens = 1;
  cfg.max_tokens = 16;
  cfg.group_sizes = {1, 2, 4, 8, 16};
  cfg.kv_heads = {1, 2, 4};
  cfg.head_sizes = {64, 128, 256};
  cfg.block_sizes = {16, 32, 64, 128};
  cfg.query_dtypes = {DType::f16, DType::bf16};
  cfg.p_scores = 0.3;  // the optional scores output, compared like `out`
  cfg.max_total_context = 12000;
  return cfg;
}

}  // namespace

TEST(Cuda, FewQueryRandom) {
  REQUIRE_GPU();
  run_suite("few-query", few_query_config(), base_seed(), 320);
}

// Every copy path of the few-query kernel's K/V slices, for every head size, KV precision and block
// size: a slice in one cache block or over several (block_size < keys per slice), whole or cut by the
// partition's end (past_len + T rarely a multiple of 16). 4 random cases per (D, kv, block size),
// random T and G, so the row-tile variants (16-, 32- and 64-key slices) vary; same tolerances.
TEST(Cuda, BlockSizeGrid) {
  REQUIRE_GPU();
  uint64_t seed = base_seed() + 3000000;
  for (int d : {64, 128, 256}) {
    for (KVPrecision kv : {KVPrecision::f16, KVPrecision::bf16, KVPrecision::u8}) {
      for (int bs : {16, 32, 64, 128}) {
        CaseConfig cfg = few_query_config();
        cfg.head_sizes = {d};
        cfg.kv_precisions = {kv};
        cfg.block_sizes = {bs};
        cfg.min_past = 100;
        cfg.max_seqs = 3;
        const std::string name = "grid-d" + std::to_string(d) + "-" + kv_precision_name(kv) + "-bs" + std::to_string(bs);
        run_suite(name.c_str(), cfg, seed, 4);
        seed += 100;
      }
    }
  }
}

namespace {
// Few-query cases over long contexts (many partitions to merge): up to 3 sequences.
CaseConfig long_context_config(int min_past, int max_past, int max_total_context) {
  CaseConfig cfg = few_query_config();
  cfg.min_past = min_past;
  cfg.max_past = max_past;
  cfg.max_seqs = 3;
  cfg.max_total_context = max_total_context;
  return cfg;
}
}  // namespace

// The few-query kernel's softmax reference (FwdParams::stale_log2) moves only when a slice's max passes
// it by more than 6-8 (log2 units). Steep ALiBi slopes (up to 4: scores rise by up to 5.8 per key
// toward the query) make every slice pass it by far more, so the rescale of O, l and the u8 value
// correction runs on most slices, with jumps of tens of units; a reference that lagged, or a rescale
// that missed one of them, would be off by factors of 2^8 and more. Long contexts, so many slices.
TEST(Cuda, RisingScores) {
  REQUIRE_GPU();
  CaseConfig cfg = long_context_config(500, 3000, 12000);
  cfg.p_alibi = 1.0;
  cfg.max_alibi_slope = 4.0;
  run_suite("rising-scores", cfg, base_seed() + 3500000, 48);
}

TEST(Cuda, DecodeOnlyLongContext) {
  REQUIRE_GPU();
  CaseConfig cfg = long_context_config(4000, 20000, 40000);
  cfg.max_tokens = 1;
  run_suite("decode-long", cfg, base_seed() + 100000, 24);
}

// u8 accuracy over long key sums. The value side once folded the zero point as two sums ~128x the
// result, so the error grew with the keys a CTA summed (rel_l2 1.4e-2 at 8 x 64k, T = 16). Contexts of
// 56k-66k in batches of 8 (the planner then gives each CTA long partitions), every head size, G up to 16,
// T up to 16, f16 and bf16 queries; each case runs with the planner's partitions and again with one
// partition per chunk (a CTA sums a whole context), and one sequence of ~512k runs the same way. The
// oracle's cost (T * ctx * H * D) stays at tens of GFLOP per case (Hk = 1; G and T capped per D).
Options whole_context_partitions() {
  Options o{Backend::cuda};
  o.partition_tokens = 1 << 20;
  return o;
}
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
  const int n = case_count(48);
  const uint64_t seed0 = base_seed() + 5100000;
  std::printf("[u8-edge-rows] base seed %llu, %d cases\n", static_cast<unsigned long long>(seed0), n);
  Suite suite;
  for (int i = 0; i < n; ++i) {
    Case c = make_random_case(seed0 + i, cfg);
    apply_edge_rows(c, seed0 + i);
    suite.cases.push_back(c);
    oracle::forward(c.params());
    suite.refs.push_back(c);
  }
  check_suite("u8-edge-rows", suite);
}

// Mixed batches: decodes, verifies and prefill chunks of up to `max_tokens` tokens.
CaseConfig mixed_config(int max_tokens, int max_past, int max_total_tokens, int max_total_context) {
  CaseConfig cfg = few_query_config();
  cfg.min_tokens = 1;
  cfg.max_tokens = max_tokens;
  cfg.max_past = max_past;
  cfg.group_sizes = {1, 2, 4, 8};
  cfg.kv_heads = {1, 2};
  cfg.max_total_tokens = max_total_tokens;
  cfg.max_total_context = max_total_context;
  return cfg;
}

TEST(Cuda, TileAndMixedRandom) {
  REQUIRE_GPU();
  run_suite("tile-mixed", mixed_config(160, 2000, 400, 8000), base_seed() + 200000, 200);
}

// f32 queries, new keys / values and outputs (the op's io type may be f32; every other suite draws f16
// or bf16): the query and new-row loads take load_io_n's f32 branch (16-byte float4 loads), the outputs
// store_io4's, in the few-query, tile and Hopper kernels alike. First run: the session after 6.
TEST(Cuda, F32QueriesRandom) {
  REQUIRE_GPU();
  CaseConfig cfg = mixed_config(160, 2000, 400, 8000);
  cfg.query_dtypes = {DType::f32};
  run_suite("f32-queries", cfg, base_seed() + 2900000, 40);
}

TEST(Cuda, TileLongContextRandom) {
  REQUIRE_GPU();
  // Issue 4's range: T 17..2048 (the longest in LongPrefillAndChunk), past_len 0..32k, every KV precision
  // and head size; few heads so that the oracle (16 host threads) keeps up.
  CaseConfig cfg = few_query_config();
  cfg.min_seqs = 1;
  cfg.max_seqs = 3;
  cfg.min_tokens = 17;
  cfg.max_tokens = 600;
  cfg.max_past = 32768;
  cfg.group_sizes = {1, 2, 4, 8};
  cfg.kv_heads = {1};
  cfg.max_total_tokens = 600;
  cfg.max_total_context = 34000;
  run_suite("tile-long", cfg, base_seed() + 700000, 120);
}

TEST(Cuda, LongPrefillAndChunk) {
  REQUIRE_GPU();
  CaseConfig cfg = few_query_config();
  cfg.min_seqs = cfg.max_seqs = 1;
  cfg.group_sizes = {2};
  cfg.kv_heads = {1};
  cfg.head_sizes = {64};
  cfg.min_tokens = 1024;
  cfg.max_tokens = 2048;
  cfg.min_past = 0;
  cfg.max_past = 32768;
  cfg.p_tree = 0.0;
  run_suite("long-prefill", cfg, base_seed() + 300000, 4);
}

namespace {
// Sets an environment switch of the cuda backend for one scope (plans read them at plan time) and
// restores what was there.
struct EnvGuard {
  const char* name;
  bool had;
  std::string old;
  EnvGuard(const char* n, const char* v) : name(n), had(std::getenv(n) != nullptr), old(had ? std::getenv(n) : "") {
    setenv(n, v, 1);
  }
  ~EnvGuard() {
    if (had) setenv(name, old.c_str(), 1); else unsetenv(name);
  }
};

// The plan of a random case under `opt` (to check that a switch took effect).
PlanInfo plan_info(const CaseConfig& cfg, uint64_t seed, const Options& opt) {
  Case c = make_random_case(seed, cfg);
  DeviceCase d(c);
  return plan(d.params(), opt).info();
}

// Chunks of 100+ tokens over long contexts with one kv head: several partitions per chunk (partials and
// the merge), from the case mix of `cfg`.
CaseConfig long_chunks(CaseConfig cfg) {
  cfg.min_seqs = 1;
  cfg.max_seqs = 2;
  cfg.min_tokens = 100;
  cfg.max_past = 20000;
  cfg.kv_heads = {1};
  cfg.max_total_context = 24000;
  return cfg;
}

// Why the wgmma kernels cannot run here (nullptr when they can): they need sm_90a code in the build and
// an sm_90 device.
const char* no_wgmma() {
#ifndef PAGEDATTN_HAS_SM90A
  return "this build has no sm_90a code (CMAKE_CUDA_ARCHITECTURES without 90a): no wgmma kernel";
#else
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
    return "cannot query the device";
  return major == 9 && minor == 0 ? nullptr : "the wgmma kernels need an sm_90 device";
#endif
}

// One sequence of T in [min_tokens, max_tokens] drawn from `cfg`, planned with the cuda defaults:
// its description must contain every string of `expect` (kernel variants as their info reports them).
// One sequence of `min_tokens`..`max_tokens` tokens from `cfg`: some launch of its plan runs `threads`
// threads per CTA on the kernel variant `variant` (PlanInfo::Launch; nullptr: any variant).
void expect_launched(CaseConfig cfg, int min_tokens, int max_tokens, uint64_t seed, int threads,
                     const char* variant = nullptr) {
  cfg.min_seqs = cfg.max_seqs = 1;
  cfg.min_tokens = min_tokens;
  cfg.max_tokens = max_tokens;
  const PlanInfo info = plan_info(cfg, seed, Options{Backend::cuda});
  std::string seen;
  bool found = false;
  for (const PlanInfo::Launch& l : info.launches) {
    found = found || (l.threads == threads && (variant == nullptr || l.variant == variant));
    seen += " [rt=" + std::to_string(l.row_tiles) + " threads=" + std::to_string(l.threads) + " '" + l.variant + "']";
  }
  EXPECT_TRUE(found) << "no launch of " << threads << " threads" << (variant ? std::string(" on '") + variant + "'" : "")
                     << "; launched:" << seen;
}
}  // namespace

// Wide prefill tiles (PAGEDATTN_WIDE_PREFILL=1): 128-row chunks at every head size on the default
// 8-row-tile kernels (on sm_90a the Hopper kernel, elsewhere mma.sync), the same cases and
// tolerances as the tile suites.
TEST(Cuda, WidePrefillTilesRandom) {
  REQUIRE_GPU();
  EnvGuard guard("PAGEDATTN_WIDE_PREFILL", "1");
  run_suite("wide-prefill", mixed_config(300, 4000, 600, 12000), base_seed() + 800000, 100);
}

// The 8-warp mma.sync 128-row variant (one row tile per warp) for f16/bf16 too: the path of builds
// without the Hopper kernel when two row tiles per warp are off (PAGEDATTN_PREFILL_MT2=0).
TEST(Cuda, WidePrefillOneRowTilePerWarpRandom) {
  REQUIRE_GPU();
  EnvGuard wide("PAGEDATTN_WIDE_PREFILL", "1"), mt2("PAGEDATTN_PREFILL_MT2", "0"), wg("PAGEDATTN_WGMMA", "0");
  CaseConfig cfg = mixed_config(300, 4000, 600, 12000);
  CaseConfig f16 = cfg;
  f16.kv_precisions = {KVPrecision::f16};
  expect_launched(f16, 200, 300, base_seed() + 2100000, 256);
  run_suite("wide-prefill-mt1", cfg, base_seed() + 2100000, 40);
}

// Two row tiles per warp in the 128-row prefill variant (the default at D <= 128 for f16/bf16 KV where
// the Hopper kernel is not used; PAGEDATTN_WGMMA=0 keeps it from replacing it here): the tile cases.
TEST(Cuda, PrefillTwoRowTilesPerWarpRandom) {
  REQUIRE_GPU();
  EnvGuard guard("PAGEDATTN_WGMMA", "0");
  CaseConfig cfg = mixed_config(300, 4000, 600, 12000);
  cfg.head_sizes = {64, 128};
  CaseConfig f16 = cfg;  // one long f16 prefill: 128-row chunks on 4 warps, where the variant exists
  f16.kv_precisions = {KVPrecision::f16};
  expect_launched(f16, 200, 300, base_seed() + 1500000, 128, "mt2");
  run_suite("prefill-mt2", cfg, base_seed() + 1500000, 80);
}

// The Hopper prefill kernel (wg_kernel: wgmma, 128-row chunks, every KV precision; the default on sm_90
// devices with a build that has sm_90a code; key tiles 64/128 at D <= 128, 32 at D = 256): the tile
// cases plus long chunks over a long context (partials and the merge), with the default tile, then
// with each tile forced at D <= 128 (PAGEDATTN_WGMMA=64/128); same tolerances.
TEST(Cuda, HopperPrefillRandom) {
  REQUIRE_GPU();
  if (const char* why = no_wgmma()) GTEST_SKIP() << why;
  // the default selection, whatever the caller's environment says
  EnvGuard on("PAGEDATTN_WGMMA", ""), wide("PAGEDATTN_WIDE_PREFILL", ""), u8("PAGEDATTN_WGMMA_U8", "");
  CaseConfig cfg = mixed_config(300, 4000, 600, 12000);
  cfg.head_sizes = {64, 128, 256};
  cfg.group_sizes = {1, 3, 4, 6, 8, 16};  // also G that does not divide the 128 rows
  CaseConfig lng = long_chunks(cfg);
  CaseConfig f16 = cfg;  // one long f16 prefill: 128-row chunks on the Hopper kernel
  f16.kv_precisions = {KVPrecision::f16};
  f16.head_sizes = {256};
  expect_launched(f16, 200, 300, base_seed() + 1700000, 256, "wg32");
  run_suite("prefill-wg", cfg, base_seed() + 1700000, 100);
  run_suite("prefill-wg-long", lng, base_seed() + 1800000, 24);
  // partitions forced to 192 keys: a partition's second 128-key tile is half empty, and every other
  // partition begins at 64 mod 128
  Options forced{Backend::cuda};
  forced.partition_tokens = 192;
  run_suite("prefill-wg-p192", lng, base_seed() + 2200000, 12, forced);
  cfg.head_sizes = lng.head_sizes = f16.head_sizes = {64, 128};
  const Suite tiles = make_suite("prefill-wg64/128", cfg, base_seed() + 1900000, 40);
  const Suite tiles_long = make_suite("prefill-wg64/128-long", lng, base_seed() + 2000000, 12);
  for (const char* keys : {"64", "128"}) {
    EnvGuard guard("PAGEDATTN_WGMMA", keys);
    expect_launched(f16, 200, 300, base_seed() + 1900000, 256, (std::string("wg") + keys).c_str());
    check_suite((std::string("prefill-wg") + keys).c_str(), tiles);
    check_suite((std::string("prefill-wg") + keys + "-long").c_str(), tiles_long);
  }
}

// Few-query chunks (<= 64 rows: decode, chain and tree verify) on the one-warpgroup Hopper kernel
// (PAGEDATTN_WGMMA_DECODE=1, an experiment; u8 here on mma.sync, on it in HopperU8Random): the few-query cases and
// long contexts with many partitions, same tolerances.
TEST(Cuda, FewQueryHopperRandom) {
  REQUIRE_GPU();
  if (const char* why = no_wgmma()) GTEST_SKIP() << why;
  EnvGuard on("PAGEDATTN_WGMMA", ""), wide("PAGEDATTN_WIDE_PREFILL", ""), dec("PAGEDATTN_WGMMA_DECODE", "1");
  EnvGuard no_u8("PAGEDATTN_WGMMA_U8", "0");  // u8 on the wgq kernel: HopperU8Random
  CaseConfig f16 = few_query_config();
  f16.kv_precisions = {KVPrecision::f16};
  f16.group_sizes = {1, 2, 4, 8};  // T <= 8: at most 64 rows, one chunk of <= 4 row tiles
  f16.head_sizes = {256};
  expect_launched(f16, 1, 8, base_seed() + 2300000, 128, "wgq32");
  f16.head_sizes = {128};
  f16.kv_precisions = {KVPrecision::bf16};
  expect_launched(f16, 1, 8, base_seed() + 2300001, 128, "wgq64");
  run_suite("few-query-wgq", few_query_config(), base_seed() + 2300000, 160);
  CaseConfig lng = long_context_config(4000, 20000, 40000);
  run_suite("few-query-wgq-long", lng, base_seed() + 2400000, 24);
}

// u8 caches on the Hopper kernels (the default for 128-row chunks, PAGEDATTN_WGMMA_U8=0 off: codes
// converted to f16 in shared memory, scales and zero points folded as in fwd_kernel): prefill chunks,
// then few-query chunks with PAGEDATTN_WGMMA_DECODE=1 (an experiment); u8 tolerances.
TEST(Cuda, HopperU8Random) {
  REQUIRE_GPU();
  if (const char* why = no_wgmma()) GTEST_SKIP() << why;
  EnvGuard on("PAGEDATTN_WGMMA", ""), wide("PAGEDATTN_WIDE_PREFILL", ""), u8("PAGEDATTN_WGMMA_U8", "");
  EnvGuard no_dec("PAGEDATTN_WGMMA_DECODE", "");
  CaseConfig cfg = mixed_config(300, 4000, 600, 12000);
  cfg.kv_precisions = {KVPrecision::u8};
  cfg.head_sizes = {64, 128, 256};
  cfg.group_sizes = {1, 3, 4, 8, 16};
  CaseConfig one = cfg;
  one.head_sizes = {256};
  expect_launched(one, 200, 300, base_seed() + 2500000, 256, "wg32u8");
  one.head_sizes = {128};
  expect_launched(one, 200, 300, base_seed() + 2500001, 256, "wg64u8");
  run_suite("prefill-wg-u8", cfg, base_seed() + 2500000, 60);
  run_suite("prefill-wg-u8-long", long_chunks(cfg), base_seed() + 2600000, 16);
  EnvGuard dec("PAGEDATTN_WGMMA_DECODE", "1");
  CaseConfig fq = few_query_config();
  fq.kv_precisions = {KVPrecision::u8};
  CaseConfig fq1 = fq;
  fq1.group_sizes = {1, 2, 4, 8};  // T <= 8: at most 64 rows
  fq1.head_sizes = {256};
  expect_launched(fq1, 1, 8, base_seed() + 2700000, 128, "wgq32u8");
  fq1.head_sizes = {64};
  expect_launched(fq1, 1, 8, base_seed() + 2700001, 128, "wgq64u8");
  run_suite("few-query-wgq-u8", fq, base_seed() + 2700000, 80);
  CaseConfig fql = long_context_config(4000, 20000, 40000);
  fql.kv_precisions = {KVPrecision::u8};
  run_suite("few-query-wgq-u8-long", fql, base_seed() + 2800000, 16);
}

// Chunks of 33-64 rows on the key-split Hopper kernel (wg_kernel's SPLIT, "wgs<keys>"): two
// warpgroups over alternate key tiles of one 64-row tile, combined at the end; f16/bf16 at every head
// size. Chains and trees, G up to 16 (the few-query cases: chunks of <= 64 rows; those of 33-64 rows
// run on it).
TEST(Cuda, FewQuerySplitRandom) {
  REQUIRE_GPU();
  if (const char* why = no_wgmma()) GTEST_SKIP() << why;
  EnvGuard on("PAGEDATTN_WGMMA", ""), dec("PAGEDATTN_WGMMA_DECODE", ""), split("PAGEDATTN_WG_SPLIT", "");
  CaseConfig cfg = few_query_config();
  cfg.kv_precisions = {KVPrecision::f16, KVPrecision::bf16};
  cfg.min_tokens = 2;  // 33-64 rows need T * G > 32
  cfg.group_sizes = {4, 8, 16};
  CaseConfig one = cfg;
  one.group_sizes = {8};
  for (int d : {64, 128}) {
    one.head_sizes = {d};
    expect_launched(one, 5, 8, base_seed() + 3100000 + d, 256, "wgs64");
  }
  one.head_sizes = {256};
  expect_launched(one, 5, 8, base_seed() + 3100001, 256, "wgs32");
  run_suite("few-query-wgs", cfg, base_seed() + 3100000, 240);
  CaseConfig lng = long_context_config(4000, 20000, 40000);
  lng.kv_precisions = cfg.kv_precisions;
  run_suite("few-query-wgs-long", lng, base_seed() + 3200000, 24);
}

// 64-row prefill chunks at every head size (PAGEDATTN_WIDE_PREFILL=0; the default at D = 256, and the
// path of devices where the 8-row-tile variant does not fit).
TEST(Cuda, NarrowPrefillTilesRandom) {
  REQUIRE_GPU();
  EnvGuard guard("PAGEDATTN_WIDE_PREFILL", "0");
  run_suite("narrow-prefill", mixed_config(300, 4000, 600, 12000), base_seed() + 1100000, 60);
}

// Two decode steps of one sequence on one cache, planned first and then run back to back (no host
// sync, no copy between their kernels): the second step's CTA over keys [past2 - 64, past2) starts
// its copies before its PDL wait and reads the row the first step has just written (the early-read
// contract, docs/design.md; partitions forced to 64 keys so that CTA exists). Reference: the oracle
// on the same two tokens as one chained call (token 1 sees token 0's row: the same semantics).
TEST(Cuda, BackToBackDecodeReadsTheRowJustWritten) {
  REQUIRE_GPU();
  CaseConfig cfg = few_query_config();
  cfg.min_seqs = cfg.max_seqs = 1;
  cfg.min_tokens = cfg.max_tokens = 2;
  cfg.p_write = 1.0;
  cfg.p_window = cfg.p_tree = cfg.p_scores = 0.0;
  const uint64_t seed0 = base_seed() + 1200000;
  std::printf("[back-to-back] base seed %llu\n", static_cast<unsigned long long>(seed0));
  Options opt{Backend::cuda};
  opt.partition_tokens = 64;
  for (int i = 0; i < case_count(24); ++i) {
    cfg.min_past = cfg.max_past = 64 * (2 + i) - 1;  // token 0 at 64k - 1, token 1 at 64k
    Case c = make_random_case(seed0 + i, cfg);
    Case ref = c;
    oracle::forward(ref.params());
    {
      DeviceCase d(c);
      const Params both = d.params();
      auto row = [](TensorView v, int i) {  // row i of a [2, W] view, as [1, W]
        v.data = static_cast<uint8_t*>(v.data) + i * v.stride[0] * static_cast<int64_t>(dtype_size(v.dtype));
        v.shape[0] = 1;
        return v;
      };
      int32_t past[2][1] = {{c.past_lens[0]}, {c.past_lens[0] + 1}};
      int32_t begins[2] = {0, 1};
      Params step[2] = {both, both};
      for (int t = 0; t < 2; ++t) {
        step[t].query = row(both.query, t);
        step[t].key = row(both.key, t);
        step[t].value = row(both.value, t);
        step[t].out = row(both.out, t);
        step[t].past_lens = TensorView::contiguous(past[t], DType::i32, Device::cpu, {1});
        step[t].subsequence_begins = TensorView::contiguous(begins, DType::i32, Device::cpu, {2});
      }
      const Plan p0 = plan(step[0], opt), p1 = plan(step[1], opt);
      p0.run(step[0]);
      p1.run(step[1]);
      d.download();
    }
    const int64_t n_out = static_cast<int64_t>(c.num_tokens) * c.num_heads * c.head_size;
    const std::vector<float> want = as_floats(ref.out, ref.qdtype, n_out);
    const Compare cmp = compare(c.out.data(), c.qdtype, want.data(), n_out);
    const std::string cache_msg = compare_cache(c, ref);
    EXPECT_TRUE(cmp.ok(tolerance(c.kv)) && cache_msg.empty())
        << "case " << c.describe() << "\n  out: " << cmp.describe() << "\n  cache: " << cache_msg;
  }
}

// Every merge layout, forced (PAGEDATTN_MERGE_SPLIT and PAGEDATTN_MERGE_BATCH; the plan picks them by
// its merge rows and partitions): few-query cases with long contexts (many partitions, so batches of 4
// or 8 with a remainder, and batch 1 over many partitions), same tolerances. A split above D/64 falls back.
TEST(Cuda, MergeSplitsRandom) {
  REQUIRE_GPU();
  const Suite suite = make_suite("merge-split", long_context_config(2000, 12000, 30000), base_seed() + 1300000, 24);
  for (const char* split : {"1", "2", "4"}) {
    for (const char* batch : {"1", "4", "8"}) {
      EnvGuard gs("PAGEDATTN_MERGE_SPLIT", split);
      EnvGuard gb("PAGEDATTN_MERGE_BATCH", batch);
      check_suite((std::string("merge-split-") + split + "-batch-" + batch).c_str(), suite);
    }
  }
}

// The cuda backend's alignment rule (params.h): every tensor it reads or writes starts on a 16-byte
// boundary. A query or output one element past an aligned address (a caller's view into a larger
// tensor) is rejected naming the tensor, and nothing is written: the output, both caches and the
// shifted buffer keep their bits.
TEST(Cuda, UnalignedBufferRejected) {
  REQUIRE_GPU();
  const Suite suite = make_suite("unaligned", few_query_config(), base_seed() + 1400000, 8);
  for (const char* name : {"query", "out"}) {
    for (const Case& c0 : suite.cases) {
      Case c = c0;
      c.out.assign(c.out.size(), 0xFF);  // poison (all-ones bits: NaN in f16/bf16)
      const Case before = c;
      const bool q = std::string(name) == "query";
      const size_t n = q ? c.query.size() : c.out.size();
      std::vector<uint8_t> shifted(q ? c.query : c.out);
      DeviceCase d(c);
      Params p = d.params();
      void* buf = nullptr;
      ASSERT_EQ(cudaSuccess, cudaMalloc(&buf, n + 16));
      uint8_t* view = static_cast<uint8_t*>(buf) + dtype_size(c.qdtype);
      ASSERT_EQ(cudaSuccess, cudaMemcpy(view, shifted.data(), n, cudaMemcpyHostToDevice));
      (q ? p.query : p.out).data = view;
      try {
        forward(p, Options{Backend::cuda});
        ADD_FAILURE() << name << " one element off 16 bytes was accepted: " << c.describe();
      } catch (const ValidationError& e) {
        EXPECT_NE(std::string(e.what()).find(std::string("'") + name + "'"), std::string::npos) << e.what();
      }
      d.download();
      std::vector<uint8_t> after(n);
      ASSERT_EQ(cudaSuccess, cudaMemcpy(after.data(), view, n, cudaMemcpyDeviceToHost));
      ASSERT_EQ(cudaSuccess, cudaFree(buf));
      EXPECT_EQ(before.out, c.out) << name << ": " << c.describe();
      EXPECT_EQ(before.key_cache, c.key_cache) << name << ": " << c.describe();
      EXPECT_EQ(before.value_cache, c.value_cache) << name << ": " << c.describe();
      EXPECT_EQ(shifted, after) << name << ": " << c.describe();
    }
  }
}

// Programmatic dependent launch off (Options::programmatic_launch = false): plain stream order, no
// early cache reads; the few-query cases, same tolerances.
TEST(Cuda, WithoutProgrammaticLaunch) {
  REQUIRE_GPU();
  Options opt{Backend::cuda};
  opt.programmatic_launch = false;
  const PlanInfo info = plan_info(few_query_config(), base_seed() + 1000000, opt);
  EXPECT_FALSE(info.pdl || info.early_reads) << "PDL still on";
  run_suite("no-pdl", few_query_config(), base_seed() + 1000000, 60, opt);
}

TEST(Cuda, DeterministicModeIsBatchInvariant) {
  REQUIRE_GPU();
  // A sequence's output rows must be bit-identical whether it runs alone or inside a batch.
  CaseConfig cfg = few_query_config();
  cfg.min_seqs = cfg.max_seqs = 4;
  cfg.p_write = 0.0;  // the cache already holds the new rows: both runs see identical caches
  cfg.p_tree = 0.0;
  cfg.min_past = 1000;
  const uint64_t seed = base_seed() + 400000;
  std::printf("[deterministic] seed %llu\n", static_cast<unsigned long long>(seed));
  Case batch = make_random_case(seed, cfg);
  Options opt{Backend::cuda};
  opt.deterministic = true;
  {
    DeviceCase d(batch);
    forward(d.params(), opt);
    d.download();
  }
  // the last sequence alone: same cache, metadata cut to it
  Case alone = batch;
  const int s = batch.num_seqs - 1;
  const int tb = batch.subsequence_begins[s], T = batch.T(s);
  const int row = batch.num_heads * batch.head_size;
  const size_t esz = dtype_size(batch.qdtype);
  alone.num_seqs = 1;
  alone.num_tokens = T;
  alone.past_lens = {batch.past_lens[s]};
  alone.subsequence_begins = {0, T};
  alone.block_indices = std::vector<int32_t>(batch.block_indices.begin() + batch.block_indices_begins[s],
                                             batch.block_indices.begin() + batch.block_indices_begins[s + 1]);
  alone.block_indices_begins = {0, static_cast<int32_t>(alone.block_indices.size())};
  alone.query = std::vector<uint8_t>(batch.query.begin() + tb * row * esz, batch.query.begin() + (tb + T) * row * esz);
  alone.out.assign(T * row * esz, 0xff);
  alone.alibi_slopes = batch.alibi_slopes;
  alone.sinks = batch.sinks;
  alone.scores.clear();
  alone.want_scores = false;
  {
    DeviceCase d(alone);
    forward(d.params(), opt);
    d.download();
  }
  EXPECT_EQ(0, std::memcmp(alone.out.data(), batch.out.data() + tb * row * esz, T * row * esz))
      << "deterministic mode: output of sequence " << s << " depends on the batch (" << batch.describe() << ")";
}

TEST(Cuda, GraphReplayMatchesDirectRun) {
  REQUIRE_GPU();
  CaseConfig cfg = few_query_config();
  cfg.p_write = 1.0;
  const uint64_t seed = base_seed() + 500000;
  std::printf("[graph] seed %llu\n", static_cast<unsigned long long>(seed));
  Case c = make_random_case(seed, cfg);
  Case ref = c;
  oracle::forward(ref.params());
  DeviceCase d(c);
  cudaStream_t stream;
  ASSERT_EQ(cudaSuccess, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Options opt{Backend::cuda};
  opt.stream = stream;
  Plan pl = plan(d.params(), opt);
  ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaSuccess, cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  pl.run(d.params());
  ASSERT_EQ(cudaSuccess, cudaStreamEndCapture(stream, &graph));
  ASSERT_EQ(cudaSuccess, cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i) ASSERT_EQ(cudaSuccess, cudaGraphLaunch(exec, stream));
  ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(stream));
  d.download();
  const int64_t n_out = static_cast<int64_t>(c.num_tokens) * c.num_heads * c.head_size;
  const std::vector<float> want = as_floats(ref.out, ref.qdtype, n_out);
  const Compare cmp = compare(c.out.data(), c.qdtype, want.data(), n_out);
  EXPECT_TRUE(cmp.ok(tolerance(c.kv))) << c.describe() << ": " << cmp.describe();
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(Cuda, BadInputWritesNothing) {
  REQUIRE_GPU();
  CaseConfig cfg = few_query_config();
  cfg.p_write = 1.0;
  Case c = make_random_case(base_seed() + 600000, cfg);
  const Case before = c;
  DeviceCase d(c);
  Params p = d.params();
  std::vector<int32_t> bad = c.block_indices;
  bad[0] = c.num_blocks + 7;  // out of range
  p.block_indices.data = bad.data();
  EXPECT_THROW(forward(p, {Backend::cuda}), ValidationError);
  d.download();
  EXPECT_EQ(before.out, c.out);
  EXPECT_EQ(before.key_cache, c.key_cache);
  EXPECT_EQ(before.value_cache, c.value_cache);
}
