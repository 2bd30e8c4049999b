// plan / run / forward: validation, then dispatch to the backend chosen in Options.
#include <cstdio>
#include <cstdlib>

#include "core/plan_impl.h"

namespace pagedattn {

namespace {
void check_device(const Params& p, Backend b) {
  const Device want = b == Backend::cpu ? Device::cpu : Device::cuda;
  auto check = [&](const TensorView& t, const char* name) {
    if (t.present() && t.device != want)
      throw ValidationError(name, std::string("must be on the ") + device_name(want) + " device for the " +
                                      backend_name(b) + " backend, got " + device_name(t.device));
  };
  auto check_host = [&](const TensorView& t, const char* name) {
    if (t.present() && t.device != Device::cpu)
      throw ValidationError(name, "must be host memory (plan() reads it), got cuda");
  };
  check(p.query, "query");
  check(p.key, "key");
  check(p.value, "value");
  check(p.cache.key, "key_cache");
  check(p.cache.value, "value_cache");
  check(p.cache.key_scale, "key_scale");
  check(p.cache.key_min, "key_min");
  check(p.cache.value_scale, "value_scale");
  check(p.cache.value_min, "value_min");
  check(p.alibi_slopes, "alibi_slopes");
  check(p.sinks, "sinks");
  check(p.out, "out");
  check(p.scores, "scores");
  check(p.lse, "lse");
  check_host(p.past_lens, "past_lens");
  check_host(p.subsequence_begins, "subsequence_begins");
  check_host(p.block_indices, "block_indices");
  check_host(p.block_indices_begins, "block_indices_begins");
  check_host(p.qq_bias, "qq_bias");
  check_host(p.qq_bias_begins, "qq_bias_begins");
  check_host(p.score_aggregation_window, "score_aggregation_window");
}
}  // namespace

Plan plan(const Params& p, const Options& opt) {
  if (opt.num_threads < 0)
    throw ValidationError("options.num_threads", "must be >= 0 (0: PAGEDATTN_CPU_THREADS, else all cores), got " +
                                                     std::to_string(opt.num_threads));
  if (opt.partition_tokens < 0)
    throw ValidationError("options.partition_tokens", "must be >= 0 (0: the planner decides), got " +
                                                          std::to_string(opt.partition_tokens));
  check_device(p, opt.backend);
  validate(p);
  std::shared_ptr<detail::PlanImpl> impl = opt.backend == Backend::cpu ? detail::make_cpu_plan(p, opt)
                                                                       : detail::make_cuda_plan(p, opt);
  const char* env = std::getenv("PAGEDATTN_PRINT_PLAN");
  if (env && env[0] && env[0] != '0') std::fprintf(stderr, "%s\n", impl->describe().c_str());
  return Plan(std::move(impl));
}

void Plan::run(const Params& p) const {
  if (!impl_) throw ValidationError("plan", "run() on an empty Plan: call pagedattn::plan() first");
  impl_->run(p);
}
Backend Plan::backend() const { return impl_ ? impl_->backend() : Backend::cpu; }
std::string Plan::describe() const { return impl_ ? impl_->describe() : std::string("(empty plan)"); }
std::size_t Plan::workspace_bytes() const { return impl_ ? impl_->workspace_bytes() : 0; }
PlanInfo Plan::info() const { return impl_ ? impl_->info() : PlanInfo{}; }

void forward(const Params& p, const Options& opt) { plan(p, opt).run(p); }

namespace detail {

void check_same_signature(const Params& a, const Params& b) {
  auto same = [](const TensorView& x, const TensorView& y, const char* name) {
    bool ok = x.present() == y.present() && x.dtype == y.dtype && x.device == y.device && x.ndim == y.ndim;
    for (int i = 0; ok && i < x.ndim; ++i) ok = x.shape[i] == y.shape[i] && x.stride[i] == y.stride[i];
    if (!ok)
      throw ValidationError(name, "differs from the planned call (planned " + x.describe() + ", got " +
                                      y.describe() + "): re-plan");
  };
  if (a.num_heads != b.num_heads) throw ValidationError("num_heads", "differs from the planned call: re-plan");
  same(a.query, b.query, "query");
  same(a.key, b.key, "key");
  same(a.value, b.value, "value");
  same(a.cache.key, b.cache.key, "key_cache");
  same(a.cache.value, b.cache.value, "value_cache");
  same(a.cache.key_scale, b.cache.key_scale, "key_scale");
  same(a.cache.key_min, b.cache.key_min, "key_min");
  same(a.cache.value_scale, b.cache.value_scale, "value_scale");
  same(a.cache.value_min, b.cache.value_min, "value_min");
  same(a.alibi_slopes, b.alibi_slopes, "alibi_slopes");
  same(a.sinks, b.sinks, "sinks");
  same(a.out, b.out, "out");
  same(a.scores, b.scores, "scores");
  same(a.lse, b.lse, "lse");
  same(a.score_aggregation_window, b.score_aggregation_window, "score_aggregation_window");
  if (a.scale != b.scale) throw ValidationError("scale", "differs from the planned call: re-plan");
  if (a.sliding_window != b.sliding_window)
    throw ValidationError("sliding_window", "differs from the planned call (the work list depends on it): re-plan");
  if (a.prefix_only != b.prefix_only)
    throw ValidationError("prefix_only", "differs from the planned call (the work list depends on it): re-plan");
}

}  // namespace detail
}  // namespace pagedattn
