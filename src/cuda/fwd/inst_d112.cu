#include "cuda/fwd/instantiate.cuh"

namespace pagedattn {
namespace cuda {
FwdKernelInfo fwd_kernel_info_d112(int kv, int row_tiles, const KernelChoice& c) {
  return fwd_kernel_info_for<112>(kv, row_tiles, c);
}
}  // namespace cuda
}  // namespace pagedattn
