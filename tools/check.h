// tools: `pagedattn check` — random cases of one backend against the CPU oracle.
#pragma once

#include <cstdint>
#include <string>

#include "pagedattn/pagedattn.h"

namespace pagedattn {
namespace tools {

struct CheckOptions {
  Backend backend = Backend::cpu;
  int cases = 100;
  uint64_t seed = 1;            // case i uses seed + i
  std::string config = "small"; // small | full (see make_check_config)
  int max_seqs = 0;             // 0: the config's value
  int max_past = -1;            // -1: the config's value
  int max_tokens = 0;           // 0: the config's value
  int max_failures_shown = 5;
  bool verbose = false;         // one line per case
  double perturb = 0;           // self-test: added to one output element of the backend; check must fail
};

/// Runs the check; prints a summary. Returns the process exit code (0: all passed, 1: a failure).
int run_check(const CheckOptions& opt);

}  // namespace tools
}  // namespace pagedattn
