// tools: an owning byte buffer on the host or on the CUDA device, and small CUDA helpers.
// CUDA code is compiled only when the CUDA backend is built (PAGEDATTN_WITH_CUDA).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "pagedattn/pagedattn.h"

#ifdef PAGEDATTN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace pagedattn {
namespace tools {

#ifdef PAGEDATTN_WITH_CUDA
/// Throws RuntimeError naming the call when a CUDA runtime call fails.
inline void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw RuntimeError(std::string(what) + ": " + cudaGetErrorString(e));
}
#define PA_CUDA(call) ::pagedattn::tools::cuda_check((call), #call)
#endif

/// Owning, move-only byte buffer on the host (malloc) or on the CUDA device (cudaMalloc).
class Buffer {
 public:
  Buffer() = default;
  Buffer(Device dev, std::size_t bytes) : dev_(dev), bytes_(bytes) {
    if (bytes == 0) return;
    if (dev == Device::cpu) {
      ptr_ = std::malloc(bytes);
      if (!ptr_) throw RuntimeError("malloc(" + std::to_string(bytes) + " bytes) failed");
    } else {
#ifdef PAGEDATTN_WITH_CUDA
      cudaError_t e = cudaMalloc(&ptr_, bytes);
      if (e != cudaSuccess) {
        ptr_ = nullptr;
        throw RuntimeError("cudaMalloc(" + std::to_string(bytes) + " bytes): " + cudaGetErrorString(e));
      }
#else
      throw UnsupportedError("a cuda buffer was requested but this build has no CUDA backend");
#endif
    }
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept { swap(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    Buffer tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  ~Buffer() { release(); }

  void* data() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return dev_; }

  /// Copies `n` host bytes from `src` to byte offset `off` of this buffer.
  void upload(const void* src, std::size_t n, std::size_t off = 0) {
    if (n == 0) return;
    check_range(n, off);
    char* dst = static_cast<char*>(ptr_) + off;
    if (dev_ == Device::cpu) {
      std::memcpy(dst, src, n);
    } else {
#ifdef PAGEDATTN_WITH_CUDA
      PA_CUDA(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
#endif
    }
  }
  /// Copies `n` bytes at byte offset `off` of this buffer to host memory `dst`.
  void download(void* dst, std::size_t n, std::size_t off = 0) const {
    if (n == 0) return;
    check_range(n, off);
    const char* src = static_cast<const char*>(ptr_) + off;
    if (dev_ == Device::cpu) {
      std::memcpy(dst, src, n);
    } else {
#ifdef PAGEDATTN_WITH_CUDA
      PA_CUDA(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost));
#endif
    }
  }

 private:
  void check_range(std::size_t n, std::size_t off) const {
    if (off > bytes_ || n > bytes_ - off)
      throw RuntimeError("buffer copy out of range: " + std::to_string(n) + " bytes at offset " +
                         std::to_string(off) + " of a " + std::to_string(bytes_) + "-byte buffer");
  }
  void swap(Buffer& o) noexcept {
    std::swap(dev_, o.dev_);
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
  }
  void release() noexcept {
    if (!ptr_) return;
    if (dev_ == Device::cpu) {
      std::free(ptr_);
    } else {
#ifdef PAGEDATTN_WITH_CUDA
      cudaFree(ptr_);
#endif
    }
    ptr_ = nullptr;
  }

  Device dev_ = Device::cpu;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace tools
}  // namespace pagedattn
