// `pagedattn check`: N seeded random cases of one backend against the CPU oracle.
//
// For each case: the oracle runs on one copy of the case, the backend on another (for cuda every (dev)
// tensor is copied to cudaMalloc'd memory and back). Compared: out (rel_l2 against the oracle), scores
// when present, and the whole cache afterwards (written rows and the NaN-poisoned rest): byte-identical
// for f16/bf16; for u8 the codes may differ by at most 1, on at most kMaxU8CodeDiffFraction of the
// written codes, and the f16 scales / row minima must be identical.
#include "check.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "buffer.h"
#include "common/numeric.h"
#include "cpu/oracle.h"
#include "testing/case.h"
#ifdef PAGEDATTN_WITH_CUDA
#include "testing/device_case.h"
#endif

namespace pagedattn {
namespace tools {

namespace {

constexpr double kTolCpu = 1e-5;    // cpu backend, f32 queries: f32 sums against the oracle's double
// cpu backend, f16 / bf16 out: both it and the oracle round once into the output dtype, so an element
// may sit one spacing (<= 2^-10 / 2^-7 of it) apart, and a small output's rel_l2 reaches that bound: a
// fixed 2e-4 failed a 128-element f16 output one spacing apart on some elements (seed 32848668, rel_l2
// 2.07e-4). The bound is the rel_l2 tolerance; every element is held to one spacing (Compare::
// beyond_one_rounding), which keeps the check as tight as the outputs' dtype allows.
constexpr double kTolCpuF16 = 0x1p-10 + kTolCpu;
constexpr double kTolCpuBf16 = 0x1p-7 + kTolCpu;
constexpr double kTolF16 = 2e-3;    // f16 query / f16 KV
constexpr double kTolBf16 = 1e-2;   // bf16 query or bf16 KV
constexpr double kTolU8 = 3e-3;     // u8 KV, against the oracle on the same codes
constexpr double kMaxU8CodeDiffFraction = 1e-4;

double tolerance(Backend b, KVPrecision kv, DType q) {
  if (b == Backend::cpu) return q == DType::f32 ? kTolCpu : q == DType::f16 ? kTolCpuF16 : kTolCpuBf16;
  double t = kv == KVPrecision::f16 ? kTolF16 : kv == KVPrecision::bf16 ? kTolBf16 : kTolU8;  // u8, fp8: 3e-3
  if (q == DType::bf16) t = std::max(t, kTolBf16);
  return t;
}

testing::CaseConfig make_check_config(const CheckOptions& opt) {
  testing::CaseConfig cfg;  // "full": the generator's defaults (the oracle test's ranges)
  if (opt.config == "small") {
    cfg.max_seqs = 4;
    cfg.max_past = 1024;
    cfg.max_tokens = 16;
  } else if (opt.config == "long") {
    // u8 over long key sums: batches of 8 at 56k-66k (the planner gives each CTA long partitions; add
    // --partition-tokens 1048576 for one partition per chunk), T <= 16, G <= 16, every head size
    cfg.kv_precisions = {KVPrecision::u8};
    cfg.min_seqs = cfg.max_seqs = 8;
    cfg.min_past = 56000;
    cfg.max_past = 66000;
    cfg.max_tokens = 16;
    cfg.kv_heads = {1};
    cfg.p_window = cfg.p_alibi = 0.1;
  } else if (opt.config != "full") {
    throw ValidationError("--config", "must be 'small', 'full' or 'long', got '" + opt.config + "'");
  }
  if (opt.backend == Backend::cuda) {
    cfg.query_dtypes = {DType::f16, DType::bf16};  // the CUDA kernels take f16/bf16 queries
    cfg.block_sizes = {16, 32, 64, 128};
    if (opt.config != "small") cfg.group_sizes = {1, 2, 4, 8, 16};
  } else {
    cfg.query_dtypes = {DType::f32, DType::f16, DType::bf16};
  }
  if (!opt.kv.empty()) {
    cfg.kv_precisions.clear();
    for (const std::string& k : opt.kv) {
      if (k == "f16") cfg.kv_precisions.push_back(KVPrecision::f16);
      else if (k == "bf16") cfg.kv_precisions.push_back(KVPrecision::bf16);
      else if (k == "u8") cfg.kv_precisions.push_back(KVPrecision::u8);
      else if (k == "fp8") cfg.kv_precisions.push_back(KVPrecision::fp8);
      else throw ValidationError("--kv", "must be f16, bf16, u8 or fp8, got '" + k + "'");
    }
  }
  if (!opt.query.empty()) {
    cfg.query_dtypes.clear();
    for (const std::string& q : opt.query) {
      if (q == "f32") cfg.query_dtypes.push_back(DType::f32);
      else if (q == "f16") cfg.query_dtypes.push_back(DType::f16);
      else if (q == "bf16") cfg.query_dtypes.push_back(DType::bf16);
      else throw ValidationError("--query", "must be f32, f16 or bf16, got '" + q + "'");
    }
  }
  if (!opt.groups.empty()) cfg.group_sizes = opt.groups;
  if (!opt.kv_heads.empty()) cfg.kv_heads = opt.kv_heads;
  if (!opt.head_sizes.empty()) cfg.head_sizes = opt.head_sizes;
  if (!opt.value_head_sizes.empty()) {
    cfg.value_head_sizes = opt.value_head_sizes;
    cfg.p_value_head_size = 0.5;
  }
  if (!opt.block_sizes.empty()) cfg.block_sizes = opt.block_sizes;
  if (opt.p_tree >= 0) cfg.p_tree = opt.p_tree;
  if (opt.p_window >= 0) cfg.p_window = opt.p_window;
  if (opt.p_scores >= 0) cfg.p_scores = opt.p_scores;
  if (opt.p_alibi >= 0) cfg.p_alibi = opt.p_alibi;
  if (opt.p_sinks >= 0) cfg.p_sinks = opt.p_sinks;
  cfg.p_lse = opt.p_lse;
  if (opt.min_seqs > 0) cfg.min_seqs = opt.min_seqs;
  if (opt.min_past >= 0) cfg.min_past = opt.min_past;
  if (opt.min_tokens > 0) cfg.min_tokens = opt.min_tokens;
  if (opt.max_seqs > 0) cfg.max_seqs = opt.max_seqs;
  if (opt.max_past >= 0) cfg.max_past = opt.max_past;
  if (opt.max_tokens > 0) cfg.max_tokens = opt.max_tokens;
  cfg.min_seqs = std::min(cfg.min_seqs, cfg.max_seqs);
  cfg.min_past = std::min(cfg.min_past, cfg.max_past);
  cfg.min_tokens = std::min(cfg.min_tokens, cfg.max_tokens);
  return cfg;
}

std::vector<float> to_float(const std::vector<uint8_t>& raw, DType t) {
  const int64_t n = static_cast<int64_t>(raw.size() / dtype_size(t));
  std::vector<float> f(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) f[static_cast<std::size_t>(i)] = testing::load_as_float(raw.data(), t, i);
  return f;
}

#ifdef PAGEDATTN_WITH_CUDA
// Runs the case on the cuda backend: every (dev) tensor copied to the device; outputs and the cache
// copied back into `c`'s host buffers.
void run_cuda(testing::Case& c, int partition_tokens) {
  testing::DeviceCase d(c);
  PA_CUDA(cudaDeviceSynchronize());  // pageable uploads complete before the op reads them
  Options o;
  o.backend = Backend::cuda;
  o.partition_tokens = partition_tokens;
  forward(d.params(), o);
  d.download();
}
#endif

struct CacheCheck {
  bool ok = true;
  std::string msg;
  int64_t u8_written = 0, u8_diffs = 0;
};

void compare_bytes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& ref, std::size_t elem,
                   const char* name, CacheCheck& r) {
  if (got.size() != ref.size() || std::memcmp(got.data(), ref.data(), got.size()) != 0) {
    std::size_t n = std::min(got.size(), ref.size()), first = n, count = 0;
    for (std::size_t i = 0; i < n; i += elem)
      if (std::memcmp(&got[i], &ref[i], elem) != 0) {
        if (first == n) first = i;
        ++count;
      }
    r.ok = false;
    std::ostringstream os;
    os << name << ": " << count << " elements differ from the oracle (first at element " << first / elem << ")";
    r.msg += (r.msg.empty() ? "" : "; ") + os.str();
  }
}

template <typename T>
std::vector<uint8_t> as_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

CacheCheck check_cache(const testing::Case& got, const testing::Case& ref) {
  CacheCheck r;
  if (got.kv != KVPrecision::u8) {  // f16/bf16 rounded, fp8 quantised: bit-exact
    const int es = got.kv == KVPrecision::fp8 ? 1 : 2;
    compare_bytes(got.key_cache, ref.key_cache, es, "key_cache", r);
    compare_bytes(got.value_cache, ref.value_cache, es, "value_cache", r);
    return r;
  }
  compare_bytes(as_bytes(got.key_scale), as_bytes(ref.key_scale), 2, "key_scale", r);
  compare_bytes(as_bytes(got.key_min), as_bytes(ref.key_min), 2, "key_min", r);
  compare_bytes(as_bytes(got.value_scale), as_bytes(ref.value_scale), 2, "value_scale", r);
  compare_bytes(as_bytes(got.value_min), as_bytes(ref.value_min), 2, "value_min", r);
  // NOTE: a code may differ by 1 where (x - min) / scale lands within rounding of a .5 boundary.
  int max_diff = 0;
  for (const auto* pair : {&got.key_cache, &got.value_cache}) {
    const std::vector<uint8_t>& g = *pair;
    const std::vector<uint8_t>& f = pair == &got.key_cache ? ref.key_cache : ref.value_cache;
    if (g.size() != f.size()) {
      r.ok = false;
      r.msg += "u8 cache sizes differ";
      return r;
    }
    for (std::size_t i = 0; i < g.size(); ++i) {
      const int d = std::abs(static_cast<int>(g[i]) - static_cast<int>(f[i]));
      if (d) {
        ++r.u8_diffs;
        max_diff = std::max(max_diff, d);
      }
    }
  }
  if (got.write_kv) r.u8_written = static_cast<int64_t>(got.num_tokens) * got.num_kv_heads * (got.head_size + got.Dv());
  if (max_diff > 1) {
    r.ok = false;
    r.msg += (r.msg.empty() ? "" : "; ") + std::string("u8 codes differ from the oracle by up to ") +
             std::to_string(max_diff) + " (" + std::to_string(r.u8_diffs) + " codes differ; allowed: 1)";
  }
  return r;
}

// Self-test of the checker: adds `delta` to the middle element of the backend's output.
void perturb_out(testing::Case& c, double delta) {
  const std::size_t es = dtype_size(c.qdtype);
  const int64_t i = static_cast<int64_t>(c.out.size() / es / 2);
  const float x = testing::load_as_float(c.out.data(), c.qdtype, i) + static_cast<float>(delta);
  uint8_t* at = c.out.data() + static_cast<std::size_t>(i) * es;
  if (c.qdtype == DType::f32) {
    std::memcpy(at, &x, 4);
  } else {
    const uint16_t h = c.qdtype == DType::f16 ? num::f32_to_f16_bits(x) : num::f32_to_bf16_bits(x);
    std::memcpy(at, &h, 2);
  }
}

struct PrecisionStats {
  int cases = 0, failed = 0;
  double worst = 0, tol = 0;
  uint64_t worst_seed = 0;
};

}  // namespace

int run_check(const CheckOptions& given) {
  CheckOptions opt = given;
  if (opt.seed == 0) opt.seed = std::random_device{}() | 1u;  // fresh cases each run; printed below
  if (opt.cases < 1) throw ValidationError("--cases", "must be >= 1, got " + std::to_string(opt.cases));
  const testing::CaseConfig cfg = make_check_config(opt);
#ifndef PAGEDATTN_WITH_CUDA
  if (opt.backend == Backend::cuda)
    throw UnsupportedError("backend 'cuda': this build of pagedattn has no CUDA backend (build with nvcc present)");
#else
  if (opt.backend == Backend::cuda && !cuda_available())
    throw UnsupportedError("backend 'cuda': no CUDA device is visible");
#endif

  std::printf("pagedattn check: backend=%s cases=%d seeds=%llu..%llu config=%s (seqs<=%d past<=%d T<=%d)\n",
              backend_name(opt.backend), opt.cases, static_cast<unsigned long long>(opt.seed),
              static_cast<unsigned long long>(opt.seed + opt.cases - 1), opt.config.c_str(), cfg.max_seqs,
              cfg.max_past, cfg.max_tokens);
  const auto t0 = std::chrono::steady_clock::now();

  std::map<std::string, PrecisionStats> stats;
  int passed = 0, failed = 0, unsupported = 0, shown = 0;
  int64_t u8_written = 0, u8_diffs = 0;
  bool aggregate_failed = false;
  double worst_ratio = -1;
  std::string worst_desc, worst_detail;

  for (int i = 0; i < opt.cases; ++i) {
    const uint64_t seed = opt.seed + static_cast<uint64_t>(i);
    const testing::Case base = testing::make_random_case(seed, cfg);
    const std::string key = std::string("kv=") + kv_precision_name(base.kv) + " q=" + dtype_name(base.qdtype);
    const double tol = tolerance(opt.backend, base.kv, base.qdtype);
    std::string fail;  // empty: passed
    std::string detail;
    double ratio = 0, err = 0;

    testing::Case ref = base;
    testing::Case got = base;
    bool skip = false;
    try {
      validate(ref.params());
    } catch (const ValidationError& e) {
      fail = std::string("the library rejected a generated case: ") + e.what();
    }
    if (fail.empty()) {
      const int threads =
          opt.threads > 0 ? opt.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
      testing::reference_forward(ref, threads);
      if (opt.backend == Backend::cuda) testing::reference_lse_as_mma_reads(base, ref, threads);
      try {
        if (opt.backend == Backend::cpu) {
          Options o;
          o.backend = Backend::cpu;
          forward(got.params(), o);
        } else {
#ifdef PAGEDATTN_WITH_CUDA
          run_cuda(got, opt.partition_tokens);
#endif
        }
      } catch (const UnsupportedError& e) {
        if (opt.backend != Backend::cuda) throw;
        skip = true;
        ++unsupported;
        if (opt.verbose) std::printf("  seed %llu unsupported: %s\n", static_cast<unsigned long long>(seed), e.what());
      } catch (const ValidationError& e) {
        fail = std::string("backend rejected the case: ") + e.what();
      } catch (const RuntimeError& e) {
        // A device fault may leave the CUDA context unusable: name the case and stop here.
        std::printf("  FAIL %s\n       runtime error: %s\n", base.describe().c_str(), e.what());
        std::printf("%d passed, %d failed before the runtime error; stopped\n", passed, failed + 1);
        return 1;
      }
    }
    if (skip) continue;

    if (fail.empty() && opt.perturb != 0) perturb_out(got, opt.perturb);
    if (fail.empty()) {
      const std::vector<float> ref_out = to_float(ref.out, ref.qdtype);
      const testing::Compare co =
          testing::compare(got.out.data(), got.qdtype, ref_out.data(), static_cast<int64_t>(ref_out.size()));
      err = co.rel_l2;
      ratio = co.nan_count ? 1e30 : co.rel_l2 / tol;
      detail = "out: " + co.describe();
      const bool beyond = opt.backend == Backend::cpu && co.beyond_one_rounding > 0;
      if (!co.ok(tol) || beyond) fail = "out " + co.describe() + " (tol " + std::to_string(tol) + ")";
      if (!ref.scores.empty()) {
        const testing::Compare cs =
            testing::compare(reinterpret_cast<const uint8_t*>(got.scores.data()), DType::f32, ref.scores.data(),
                             static_cast<int64_t>(ref.scores.size()));
        err = std::max(err, cs.rel_l2);
        ratio = std::max(ratio, cs.nan_count ? 1e30 : cs.rel_l2 / tol);
        detail += "; scores: " + cs.describe();
        if (!cs.ok(tol)) fail += (fail.empty() ? "" : "; ") + std::string("scores ") + cs.describe();
      }
      if (!ref.lse.empty()) {
        const testing::LseCompare cl =
            testing::compare_lse(got.lse.data(), ref.lse.data(), static_cast<int64_t>(ref.lse.size()));
        detail += "; lse: " + cl.describe(got.lse.data(), ref.lse.data());
        if (!cl.ok(testing::kLseTolerance))
          fail += (fail.empty() ? "" : "; ") + std::string("lse ") + cl.describe(got.lse.data(), ref.lse.data());
      }
      const CacheCheck cc = check_cache(got, ref);
      u8_written += cc.u8_written;
      u8_diffs += cc.u8_diffs;
      if (!cc.ok) fail += (fail.empty() ? "" : "; ") + cc.msg;
    } else {
      ratio = 1e30;
    }

    PrecisionStats& st = stats[key];
    ++st.cases;
    st.tol = tol;
    if (err >= st.worst) {
      st.worst = err;
      st.worst_seed = seed;
    }
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst_desc = base.describe();
      worst_detail = fail.empty() ? detail : fail;
    }
    if (fail.empty()) {
      ++passed;
      if (opt.verbose) std::printf("  ok   %s  %s\n", base.describe().c_str(), detail.c_str());
    } else {
      ++failed;
      ++st.failed;
      if (shown++ < opt.max_failures_shown || opt.verbose)
        std::printf("  FAIL %s\n       %s\n", base.describe().c_str(), fail.c_str());
    }
  }

  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%-16s %6s %6s %14s %10s  %s\n", "precision", "cases", "failed", "worst rel_l2", "tolerance",
              "worst seed");
  for (const auto& kv : stats)
    std::printf("%-16s %6d %6d %14.3e %10.1e  %llu\n", kv.first.c_str(), kv.second.cases, kv.second.failed,
                kv.second.worst, kv.second.tol, static_cast<unsigned long long>(kv.second.worst_seed));
  if (u8_written > 0) {
    const double frac = static_cast<double>(u8_diffs) / static_cast<double>(u8_written);
    std::printf("u8 cache codes differing from the oracle by 1: %lld of %lld written (%.2e; allowed %.0e)\n",
                static_cast<long long>(u8_diffs), static_cast<long long>(u8_written), frac, kMaxU8CodeDiffFraction);
    if (frac > kMaxU8CodeDiffFraction) {
      std::printf("FAIL: too many u8 codes differ from the oracle (%.2e > %.0e)\n", frac, kMaxU8CodeDiffFraction);
      aggregate_failed = true;
    }
  }
  if (!worst_desc.empty()) {
    std::printf("worst case (error / tolerance %.3g): %s\n", worst_ratio >= 1e30 ? INFINITY : worst_ratio,
                worst_desc.c_str());
    std::printf("  %s\n", worst_detail.c_str());
  }
  if (unsupported) std::printf("%d unsupported by the %s backend (not counted)\n", unsupported, backend_name(opt.backend));
  std::printf("%d passed, %d failed  (%.1f s)\n", passed, failed, secs);
  if (passed + failed == 0) {
    std::printf("pagedattn: error: no case was supported by the %s backend\n", backend_name(opt.backend));
    return 1;
  }
  return failed || aggregate_failed ? 1 : 0;
}

}  // namespace tools
}  // namespace pagedattn
