#include "cuda/fwd/instantiate.cuh"

namespace pagedattn {
namespace cuda {
FwdKernelInfo fwd_kernel_info_d256(int kv, int row_tiles, bool split_s, bool mt2, int wg) {
  return fwd_kernel_info_for<256>(kv, row_tiles, split_s, mt2, wg);
}
}  // namespace cuda
}  // namespace pagedattn
