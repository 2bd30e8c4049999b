#include "testing/device_case.h"

#include <cuda_runtime.h>

#include <string>

namespace pagedattn {
namespace testing {

namespace {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw RuntimeError(std::string(what) + ": " + cudaGetErrorString(e));
}
std::size_t bytes_of(const TensorView& v) { return static_cast<std::size_t>(v.numel()) * dtype_size(v.dtype); }
}  // namespace

void* DeviceCase::copy(TensorView& v) {
  if (!v.present()) return nullptr;
  void* d = nullptr;
  const std::size_t n = bytes_of(v);
  check(cudaMalloc(&d, n ? n : 16), "cudaMalloc");
  allocs_.push_back(d);
  if (n) check(cudaMemcpy(d, v.data, n, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  v.data = d;
  v.device = Device::cuda;
  return d;
}

DeviceCase::DeviceCase(Case& c) : c_(c) {
  params_ = c.params();
  copy(params_.query);
  copy(params_.key);
  copy(params_.value);
  copy(params_.cache.key);
  copy(params_.cache.value);
  copy(params_.cache.key_scale);
  copy(params_.cache.key_min);
  copy(params_.cache.value_scale);
  copy(params_.cache.value_min);
  copy(params_.alibi_slopes);
  copy(params_.sinks);
  copy(params_.out);
  copy(params_.scores);
  copy(params_.lse);
}

DeviceCase::~DeviceCase() {
  for (void* p : allocs_) cudaFree(p);
}

void DeviceCase::download() {
  check(cudaDeviceSynchronize(), "kernel execution");
  const Params host = c_.params();
  auto back = [](const TensorView& dev, const TensorView& h) {
    if (!dev.present()) return;
    const std::size_t n = bytes_of(h);
    if (n) check(cudaMemcpy(h.data, dev.data, n, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  };
  back(params_.out, host.out);
  back(params_.scores, host.scores);
  back(params_.lse, host.lse);
  back(params_.cache.key, host.cache.key);
  back(params_.cache.value, host.cache.value);
  back(params_.cache.key_scale, host.cache.key_scale);
  back(params_.cache.key_min, host.cache.key_min);
  back(params_.cache.value_scale, host.cache.value_scale);
  back(params_.cache.value_min, host.cache.value_min);
}

}  // namespace testing
}  // namespace pagedattn
