// tools: `pagedattn check` — random cases of one backend against the CPU oracle.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pagedattn/pagedattn.h"

namespace pagedattn {
namespace tools {

struct CheckOptions {
  Backend backend = Backend::cpu;
  int cases = 100;
  uint64_t seed = 1;            // case i uses seed + i; 0: a fresh random base seed (printed)
  std::string config = "small"; // small | full | long (see make_check_config)
  int max_seqs = 0;             // 0: the config's value
  int max_past = -1;            // -1: the config's value
  int max_tokens = 0;           // 0: the config's value
  int min_seqs = 0;             // 0: the config's value
  int min_past = -1;            // -1: the config's value
  int min_tokens = 0;           // 0: the config's value
  std::vector<std::string> kv;  // empty: the config's KV precisions (f16 | bf16 | u8)
  std::vector<std::string> query;  // empty: the config's query dtypes (f32 | f16 | bf16)
  std::vector<int> groups, kv_heads, head_sizes, block_sizes;  // empty: the config's
  std::vector<int> value_head_sizes;  // non-empty: half the cases draw Dv from those <= D (else Dv = D)
  double p_tree = -1, p_window = -1, p_scores = -1, p_alibi = -1, p_sinks = -1;  // < 0: the config's
  double p_lse = 0;             // probability of the lse output
  int partition_tokens = 0;     // > 0: Options::partition_tokens for the backend (e.g. 1048576: one
                                // partition per chunk, a CTA sums a whole context)
  int threads = 0;              // oracle threads over a case's sequences; 0: all cores
  int max_failures_shown = 5;
  bool verbose = false;         // one line per case
  double perturb = 0;           // self-test: added to one output element of the backend; check must fail
};

/// Runs the check; prints a summary. Returns the process exit code (0: all passed, 1: a failure).
int run_check(const CheckOptions& opt);

}  // namespace tools
}  // namespace pagedattn
