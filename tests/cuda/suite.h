// Shared by the GPU test files (tests/cuda/*.cpp, one executable `test_cuda`, label `gpu`): the case
// suites, the checks against the CPU oracle, the case families and the plan helpers. Every test skips
// with a message when no CUDA device is visible.
//
// Tolerances (relative L2 error of `out` vs the oracle): f16 KV 2e-3, bf16 KV 1e-2, u8 KV 3e-3, fp8 KV
// 3e-3 with f16 (and f32) queries and 1e-2 with bf16 ones (issue 23's bounds); NaN never.
// Written cache: f16/bf16/fp8 rows bit-identical; u8 codes differ by at most 1 on at most 1e-4 of the
// elements (division and rounding are IEEE on both sides, so we expect 0), parameters bit-identical.
#pragma once

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
#include <set>
#include <thread>

#include "cpu/oracle.h"
#include "testing/case.h"
#include "testing/device_case.h"

namespace gpu_suite {
using namespace pagedattn;
using namespace pagedattn::testing;

#define REQUIRE_GPU()                                                              \
  do {                                                                             \
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped"; \
  } while (0)

inline uint64_t base_seed() { return pagedattn::testing::base_seed("test_cuda", 20261129ull); }

// PAGEDATTN_GPU_CASES caps each suite's case count (the sanitizer run uses a small subset).
inline int case_count(int n) {
  const char* s = std::getenv("PAGEDATTN_GPU_CASES");
  return s ? std::min(n, std::max(1, std::atoi(s))) : n;
}

inline double tolerance(KVPrecision p, DType query = DType::f16) {
  switch (p) {
    case KVPrecision::f16: return 2e-3;
    case KVPrecision::bf16: return 1e-2;
    case KVPrecision::fp8: return query == DType::bf16 ? 1e-2 : 3e-3;
    default: return 3e-3;
  }
}

// lse against the oracle's, within this of max(1, |lse|). u8: the kernel forms for 17 rows and more
// dequantise the codes to f16 before their MMAs (wg_kernel's producer; D = 64's key-split form since
// 9213b7a), so each score carries the f16 rounding of its key (relative 2^-11 at most per element), and a
// row with one or a few keys keeps that error whole in its lse. Run fx8t measured up to 1.2e-3; a
// simulation of one-key rows under the suites' draws (query std up to 2, u8 cache rows of RMS up to 2.9)
// gave tails to 4.6e-3, about 1e-4 of such rows past 3e-3: hence 1e-2. Out stays within its own
// tolerance. The other kinds read their values exactly.
inline double lse_tolerance(KVPrecision p) { return p == KVPrecision::u8 ? 1e-2 : kLseTolerance; }

struct Worst {
  double err = 0;
  std::string where;
  int cases = 0;
  int scores_cases = 0;
  double scores_err = 0;
};

inline std::vector<float> as_floats(const std::vector<uint8_t>& bytes, DType t, int64_t n) {
  std::vector<float> f(n);
  for (int64_t i = 0; i < n; ++i) f[i] = load_as_float(bytes.data(), t, i);
  return f;
}

// Compares the cache written by the GPU (c) with the oracle's (ref). Returns a failure message or "".
inline std::string compare_cache(const Case& c, const Case& ref) {
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
inline Suite make_suite(const char* name, const CaseConfig& cfg, uint64_t seed0, int n,
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
    reference_lse_as_mma_reads(s.cases[i], s.refs[i], per_case);
  });
  return s;
}

// Runs every case of `suite` on the GPU (a fresh copy of its inputs and cache each time) and compares
// it with its reference.
inline void check_suite(const char* name, const Suite& suite, const Options& opt = {Backend::cuda}) {
  const int n = static_cast<int>(suite.cases.size());
  std::map<KVPrecision, Worst> worst;
  std::map<std::string, int> variants;  // kernel variant -> cases whose plan launched it (PlanInfo)
  int failures = 0;
  for (int i = 0; i < n; ++i) {
    Case c = suite.cases[i];
    const Case& ref = suite.refs[i];
    {
      DeviceCase d(c);
      std::set<std::string> launched;
      for (const PlanInfo::Launch& l : plan(d.params(), opt).info().launches)
        launched.insert(l.variant.empty() ? "fwd" : l.variant);
      for (const std::string& v : launched) ++variants[v];
      forward(d.params(), opt);
      d.download();
    }
    const int64_t n_out = static_cast<int64_t>(c.num_tokens) * c.num_heads * c.Dv();
    const std::vector<float> want = as_floats(ref.out, ref.qdtype, n_out);
    const Compare cmp = compare(c.out.data(), c.qdtype, want.data(), n_out);
    const double tol = tolerance(c.kv, c.qdtype);
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
    std::string lse_msg;
    if (c.want_lse) {
      const LseCompare cl = compare_lse(c.lse.data(), ref.lse.data(), static_cast<int64_t>(ref.lse.size()));
      if (!cl.ok(lse_tolerance(c.kv))) lse_msg = cl.describe(c.lse.data(), ref.lse.data());
    }
    if (!cmp.ok(tol) || !cache_msg.empty() || !scores_msg.empty() || !lse_msg.empty()) {
      ++failures;
      ADD_FAILURE() << "case " << c.describe() << "\n  out: " << cmp.describe() << " (tolerance " << tol << ")"
                    << (cache_msg.empty() ? "" : "\n  cache: " + cache_msg)
                    << (scores_msg.empty() ? "" : "\n  scores: " + scores_msg)
                    << (lse_msg.empty() ? "" : "\n  lse: " + lse_msg);
      if (failures > 10) break;
    }
  }
  for (const auto& [p, wk] : worst)
    std::printf("[%s] kv %-4s: %4d cases, worst rel_l2 %.3e  (%s); scores in %d cases, worst rel_l2 %.3e\n", name,
                kv_precision_name(p), wk.cases, wk.err, wk.where.c_str(), wk.scores_cases, wk.scores_err);
  std::string kernels;  // which kernel variants the cases ran on ("fwd": fwd_kernel's default variants)
  for (const auto& [v, k] : variants) kernels += " " + v + " " + std::to_string(k);
  std::printf("[%s] cases per kernel variant:%s\n", name, kernels.c_str());
}

// `n` seeded cases with write-in whose new rows `edit` replaces (e.g. testing::apply_edge_rows), each
// with its oracle reference; then checked like any suite.
inline void run_edited_suite(const char* name, const CaseConfig& cfg, uint64_t seed0, int n,
                             void (*edit)(Case&, uint64_t)) {
  n = case_count(n);
  std::printf("[%s] base seed %llu, %d cases\n", name, static_cast<unsigned long long>(seed0), n);
  const int threads = static_cast<int>(std::max(1u, std::min(16u, std::thread::hardware_concurrency())));
  Suite suite;
  for (int i = 0; i < n; ++i) {
    Case c = make_random_case(seed0 + i, cfg);
    edit(c, seed0 + i);
    Case ref = c;
    reference_forward(ref, threads);
    reference_lse_as_mma_reads(c, ref, threads);  // (as make_suite: lse of f32 queries as the MMAs read them)
    suite.cases.push_back(std::move(c));
    suite.refs.push_back(std::move(ref));
  }
  check_suite(name, suite);
}

inline void run_suite(const char* name, const CaseConfig& cfg, uint64_t seed0, int n, const Options& opt = {Backend::cuda}) {
  check_suite(name, make_suite(name, cfg, seed0, n), opt);
}

// The row bands where every chunk of the few-query cases has 33-64 rows (T * G in that range for each
// sequence): G = 4 with T 9-16, G = 8 with T 5-8, G = 16 with T 3-4; `n` cases each, suites named
// `prefix` + "-g<G>" + `suffix`, seeds seed0 + 1000 * band.
inline void run_row_bands_33_64(const std::string& prefix, const CaseConfig& cfg, uint64_t seed0, int n,
                                const std::string& suffix = "") {
  const int bands[3][3] = {{4, 9, 16}, {8, 5, 8}, {16, 3, 4}};
  for (int b = 0; b < 3; ++b) {
    CaseConfig band = cfg;
    band.group_sizes = {bands[b][0]};
    band.min_tokens = bands[b][1];
    band.max_tokens = bands[b][2];
    run_suite((prefix + "-g" + std::to_string(bands[b][0]) + suffix).c_str(), band, seed0 + 1000 * b, n);
  }
}

inline CaseConfig few_query_config() {
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

// Few-query cases over long contexts (many partitions to merge): up to 3 sequences.
inline CaseConfig long_context_config(int min_past, int max_past, int max_total_context) {
  CaseConfig cfg = few_query_config();
  cfg.min_past = min_past;
  cfg.max_past = max_past;
  cfg.max_seqs = 3;
  cfg.max_total_context = max_total_context;
  return cfg;
}

// Options with one partition per chunk: every CTA sums a whole context.
inline Options whole_context_partitions() {
  Options o{Backend::cuda};
  o.partition_tokens = 1 << 20;
  return o;
}

// Mixed batches: decodes, verifies and prefill chunks of up to `max_tokens` tokens.
inline CaseConfig mixed_config(int max_tokens, int max_past, int max_total_tokens, int max_total_context) {
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
inline PlanInfo plan_info(const CaseConfig& cfg, uint64_t seed, const Options& opt) {
  Case c = make_random_case(seed, cfg);
  DeviceCase d(c);
  return plan(d.params(), opt).info();
}

// Chunks of 100+ tokens over long contexts with one kv head: several partitions per chunk (partials and
// the merge), from the case mix of `cfg`.
inline CaseConfig long_chunks(CaseConfig cfg) {
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
inline const char* no_wgmma() {
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

// One sequence of `min_tokens`..`max_tokens` tokens from `cfg`: some launch of its plan runs `threads`
// threads per CTA on the kernel variant `variant` (PlanInfo::Launch; nullptr: any variant).
inline void expect_launched(CaseConfig cfg, int min_tokens, int max_tokens, uint64_t seed, int threads,
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

// 128-row chunks of a one-byte cache (u8, fp8: `kind` names it in the variants, "u8" / "f8") on the
// Hopper kernel: a D = 256 and a D = 128 sequence of 200-300 tokens launch its two key tiles
// ("wg32<kind>", "wg64<kind>"), then the prefill suites of `cfg` (60 cases, and 16 over long contexts).
inline void run_hopper_byte_suites(const CaseConfig& cfg, const std::string& kind, const std::string& name,
                                   uint64_t seed) {
  CaseConfig one = cfg;
  one.head_sizes = {256};
  expect_launched(one, 200, 300, seed, 384, ("wg32" + kind).c_str());  // (two consumer warpgroups, a producer)
  one.head_sizes = {128};
  expect_launched(one, 200, 300, seed + 1, 384, ("wg64" + kind).c_str());
  run_suite(("prefill-wg-" + name).c_str(), cfg, seed, 60);
  run_suite(("prefill-wg-" + name + "-long").c_str(), long_chunks(cfg), seed + 100000, 16);
}

}  // namespace gpu_suite
