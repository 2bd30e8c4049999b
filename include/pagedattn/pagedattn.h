// pagedattn — paged attention for every step of speculative decoding at the cost of one KV read.
//
//   pagedattn::Params p;            // fill inputs/outputs (see params.h)
//   pagedattn::forward(p, {pagedattn::Backend::cpu});
// or, to keep host work out of the hot loop and capture run() in a CUDA graph:
//   auto plan = pagedattn::plan(p, opts);   // host: validates, builds the work list, sizes the workspace
//   plan.run(p);                            // device: no host synchronisation
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pagedattn/params.h"
#include "pagedattn/types.h"

namespace pagedattn {

enum class Backend : int { cpu = 0, cuda = 1 };
const char* backend_name(Backend b);
/// Parses "cpu" / "cuda"; throws ValidationError otherwise.
Backend parse_backend(const std::string& name);
/// True when this build has the CUDA backend and a CUDA device is visible.
bool cuda_available();

struct Options {
  Backend backend = Backend::cpu;
  void* stream = nullptr;        // cudaStream_t for the cuda backend; nullptr = default stream
  bool deterministic = false;    // invariant rows (both backends): each row depends only on its own keys
                                 // (and, on cuda, the device: its SM count sizes the partitions), so a
                                 // chain verify's row t is bit-identical to the decode of the same
                                 // prefix, and a sequence's rows to the sequence run alone, in any batch
                                 // (trees: the latter), on one device type and build. cuda: slower, with
                                 // a larger workspace (docs/
                                 // design.md "Invariant rows" and "Known gaps"); tests/test_invariant.cpp
                                 // (cpu), tests/cuda/invariant.cpp (cuda)
  int partition_tokens = 0;      // cuda: force the KV partition size (multiple of 64); 0 = planner decides
  bool programmatic_launch = true;  // cuda, sm_90+: the op's kernels may start while the previous kernel
                                 // in the stream drains, and read cache rows before past_lens before
                                 // waiting for it (docs/design.md). Turn off if the kernel just before
                                 // the op writes such rows after it lets its dependents start
                                 // (griddepcontrol.launch_dependents), or for PTX's strict guarantee
  int num_threads = 0;           // cpu: worker threads; 0 = PAGEDATTN_CPU_THREADS, else all cores
  bool cpu_reference = false;    // cpu: run the oracle (double-precision loops, one thread) instead of
                                 // the fast kernels: the reference the tests compare against (also
                                 // PAGEDATTN_CPU_ORACLE=1)
};

/// What a plan decided (Plan::info()), for engines that log or check it and for tests; describe()
/// prints the same facts.
struct PlanInfo {
  /// One launch of the attention kernel (cuda): the chunks of one row-tile class.
  struct Launch {
    int row_tiles = 0;          // 16-row tiles per chunk (1, 2, 4, 8)
    int64_t ctas = 0;           // CTAs: work items x kv heads
    int threads = 0;            // per CTA
    std::string variant;        // "" (fwd_kernel), "mt2", "wg<keys>" (+"u8" / "f8") / "wgs<keys>" (+"f8") (wg_kernel)
  };
  Backend backend = Backend::cpu;
  bool reference = false;       // cpu: the oracle runs (Options::cpu_reference)
  int threads = 0;              // cpu: worker threads
  std::string cpu_isa;          // cpu: the SIMD level of its loops ("avx512", "avx2", "baseline")
  int partition_tokens = 0;     // keys per KV partition (0: whole ranges / the oracle; cuda deterministic
                                // mode: the first chunk's, as each token's depends on the keys it sees)
  int head_width = 0;           // cuda: the kernels' head-size width (the key head size, or the native
                                // width it is padded up to: docs/design.md, "Head sizes")
  int64_t wave_ctas = 0;        // cuda: attention CTAs in one wave (SMs x the CTAs per SM of the variant that
                                // runs 1-16-row chunks), which sizes deterministic mode's partitions
  int64_t work_items = 0;       // (chunk, kv head, partition) items (cpu) / attention CTAs (cuda)
  std::vector<Launch> launches; // cuda: in launch order
  int merge_rows = 0;           // cuda: rows whose partitions the merge kernel combines
  int merge_split = 0;          // cuda: merge CTAs per row
  int merge_batch = 0;          // cuda: partition loads in flight per merge thread
  bool merge_rowwise = false;   // cuda, deterministic mode: the merge runs a thread per 4 columns of a row
                                // (many rows; merge_split and merge_batch then do not apply)
  bool folded_units = false;   // cuda, deterministic mode: the attention CTAs fold their runs of partitions into
                                // units of 8 (chunks of <= 32 rows; docs/design.md, "Invariant rows")
  bool separate_kv_write = false;  // cuda: the write-in as its own launch (a sequence in several chunks)
  bool pdl = false;             // cuda: programmatic dependent launch
  bool early_reads = false;     // cuda: cache reads before the PDL wait
  std::size_t workspace_bytes = 0;
};

namespace detail {
class PlanImpl;
}

/// The host half of a call: validated inputs, the work list and the workspace.
class Plan {
 public:
  Plan() = default;
  explicit Plan(std::shared_ptr<detail::PlanImpl> impl) : impl_(std::move(impl)) {}
  /// Runs the op. `p` must have the shapes, dtypes and host metadata that were planned; tensors may
  /// point elsewhere. Throws ValidationError when shapes or dtypes differ from the plan.
  void run(const Params& p) const;
  Backend backend() const;
  /// The planner's decisions in a few lines (also printed at plan time when PAGEDATTN_PRINT_PLAN=1).
  std::string describe() const;
  /// The planner's decisions as data.
  PlanInfo info() const;
  /// Device workspace bytes owned by this plan.
  std::size_t workspace_bytes() const;
  bool valid() const { return impl_ != nullptr; }

 private:
  std::shared_ptr<detail::PlanImpl> impl_;
};

/// Validates every input (throws ValidationError naming the input and the rule; nothing is written),
/// then builds the backend's plan.
Plan plan(const Params& p, const Options& opt = {});
inline void run(const Plan& pl, const Params& p) { pl.run(p); }
/// plan() then run().
void forward(const Params& p, const Options& opt = {});

/// Checks every rule of the op (see params.h); throws ValidationError on the first broken rule.
void validate(const Params& p);

/// Combines k partial results of the same rows, each from a call over a disjoint part of the keys with
/// Params::lse (a context split across calls or devices, cascade attention; docs/design.md, "Splitting
/// a context"): lse = log(sum_i exp(lse_i)), out = sum_i exp(lse_i - lse) out_i, in double per row and
/// head. outs[i]: [num_tokens, H*D] f32 | f16 | bf16, one dtype; lses[i]: [num_tokens, H] f32; out: [num_tokens,
/// H*D] f32 | f16 | bf16 (may be one of outs); lse: [num_tokens, H] f32 or absent (may be one of lses).
/// A row and head whose every lse_i is -inf gets out 0 and lse -inf. Tensors on the backend's device
/// (cuda: at most 64 partials per call, on opt.stream, capturable). Throws ValidationError naming the input.
void merge_states(const std::vector<TensorView>& outs, const std::vector<TensorView>& lses, const TensorView& out,
                  const TensorView& lse = {}, const Options& opt = {});

}  // namespace pagedattn
