// Internal: the interface every backend's plan implements.
#pragma once

#include <string>

#include "pagedattn/pagedattn.h"

namespace pagedattn {
namespace detail {

class PlanImpl {
 public:
  virtual ~PlanImpl() = default;
  virtual void run(const Params& p) = 0;
  virtual Backend backend() const = 0;
  virtual std::string describe() const = 0;
  virtual PlanInfo info() const = 0;
  virtual std::size_t workspace_bytes() const { return 0; }
};

// Each backend provides a factory; `p` has been validated.
std::shared_ptr<PlanImpl> make_cpu_plan(const Params& p, const Options& opt);
std::shared_ptr<PlanImpl> make_cuda_plan(const Params& p, const Options& opt);  // throws when not built
// merge_states() on the cuda backend (src/cuda/merge_states.cu), inputs validated by core/merge.cpp;
// throws when not built
void cuda_merge_states(const std::vector<TensorView>& outs, const std::vector<TensorView>& lses, const TensorView& out,
                       const TensorView& lse, void* stream);

// Throws ValidationError when `p` differs from the planned call in a shape, dtype or device.
void check_same_signature(const Params& planned, const Params& p);

}  // namespace detail
}  // namespace pagedattn
