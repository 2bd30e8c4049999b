// Built when the CUDA backend is not: every cuda request gets a clear error.
#include "core/plan_impl.h"

namespace pagedattn {
bool cuda_available() { return false; }
namespace detail {
std::shared_ptr<PlanImpl> make_cuda_plan(const Params&, const Options&) {
  throw UnsupportedError("backend 'cuda': this build of pagedattn has no CUDA backend (configure with PAGEDATTN_CUDA=ON and nvcc)");
}
void cuda_merge_states(const std::vector<TensorView>&, const std::vector<TensorView>&, const TensorView&,
                       const TensorView&, void*) {
  throw UnsupportedError("backend 'cuda': this build of pagedattn has no CUDA backend (configure with PAGEDATTN_CUDA=ON and nvcc)");
}
}  // namespace detail
}  // namespace pagedattn
