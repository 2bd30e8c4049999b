// merge_states() on the cuda backend: one CTA per (row, head) combines the k partials' D values with
// weights exp(lse_i - max lse) (core/merge.cpp validates; the cpu version there is the reference).
#include <cuda_runtime.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/plan_impl.h"
#include "cuda/fwd/io.cuh"

namespace pagedattn {
namespace cuda {
namespace {

constexpr int kMaxParts = 64;  // partials per launch (the pointers travel as kernel parameters)

struct MergeStatesArgs {
  const void* outs[kMaxParts];
  const float* lses[kMaxParts];
  void* out;
  float* lse;  // or nullptr
  int k, H, D, in_io, out_io;
};

__global__ void merge_states_kernel(const __grid_constant__ MergeStatesArgs a) {
  __shared__ float w[kMaxParts];
  __shared__ float lse_out;
  const int64_t rh = blockIdx.x;  // row * H + head
  if (threadIdx.x == 0) {  // the partials' weights exp(lse_i - M), and the row's lse
    float M = -INFINITY;
    for (int i = 0; i < a.k; ++i) M = fmaxf(M, a.lses[i][rh]);
    float sum = 0.0f;
    for (int i = 0; i < a.k; ++i) {
      const float l = a.lses[i][rh];
      w[i] = M == -INFINITY || l == -INFINITY ? 0.0f : expf(l - M);
      sum += w[i];
    }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int i = 0; i < a.k; ++i) w[i] *= inv;
    lse_out = sum > 0.0f ? M + logf(sum) : -INFINITY;
  }
  __syncthreads();  // (also: every lse_i read before `lse`, which may alias one of them, is written)
  const int64_t base = rh * a.D;
  for (int d = threadIdx.x; d < a.D; d += blockDim.x) {  // each element read, then written, by one thread
    float acc = 0.0f;
    for (int i = 0; i < a.k; ++i)
      if (w[i] != 0.0f) acc += w[i] * load_io(a.outs[i], base + d, a.in_io);
    if (a.out_io == kIoF16) static_cast<__half*>(a.out)[base + d] = __float2half_rn(acc);
    else if (a.out_io == kIoBF16) static_cast<__nv_bfloat16*>(a.out)[base + d] = __float2bfloat16_rn(acc);
    else static_cast<float*>(a.out)[base + d] = acc;
  }
  if (threadIdx.x == 0 && a.lse != nullptr) a.lse[rh] = lse_out;
}

int io_of(DType t) { return t == DType::f16 ? kIoF16 : t == DType::bf16 ? kIoBF16 : kIoF32; }

}  // namespace
}  // namespace cuda

namespace detail {

void cuda_merge_states(const std::vector<TensorView>& outs, const std::vector<TensorView>& lses, const TensorView& out,
                       const TensorView& lse, void* stream) {
  const int k = static_cast<int>(outs.size());
  if (k > cuda::kMaxParts)
    throw UnsupportedError("merge_states on cuda: at most " + std::to_string(cuda::kMaxParts) +
                           " partials per call, got " + std::to_string(k) + " (merge in groups: it is exact)");
  const int64_t rows = lses[0].shape[0] * lses[0].shape[1];
  if (rows == 0) return;
  cuda::MergeStatesArgs a = {};
  for (int i = 0; i < k; ++i) {
    a.outs[i] = outs[i].data;
    a.lses[i] = static_cast<const float*>(lses[i].data);
  }
  a.out = out.data;
  a.lse = lse.present() ? static_cast<float*>(lse.data) : nullptr;
  a.k = k;
  a.H = static_cast<int>(lses[0].shape[1]);
  a.D = static_cast<int>(outs[0].shape[1] / lses[0].shape[1]);
  a.in_io = cuda::io_of(outs[0].dtype);
  a.out_io = cuda::io_of(out.dtype);
  const int threads = a.D >= 128 ? 128 : 32 * ((a.D + 31) / 32);
  cuda::merge_states_kernel<<<static_cast<unsigned>(rows), threads, 0, static_cast<cudaStream_t>(stream)>>>(a);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw RuntimeError(std::string("merge_states kernel launch: ") + cudaGetErrorString(e));
}

}  // namespace detail
}  // namespace pagedattn
