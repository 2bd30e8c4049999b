// Internal (tests, CLI): a Case's device tensors copied to CUDA memory. Built with the cuda backend only.
#pragma once

#include <vector>

#include "testing/case.h"

namespace pagedattn {
namespace testing {

/// Owns CUDA copies of every (dev) tensor of a Case; params() gives views with the (dev) tensors on
/// the GPU and the (host) metadata pointing at the Case's host buffers (so the Case must outlive it).
class DeviceCase {
 public:
  explicit DeviceCase(Case& c);
  ~DeviceCase();
  DeviceCase(const DeviceCase&) = delete;
  DeviceCase& operator=(const DeviceCase&) = delete;
  Params params() const { return params_; }
  /// Copies out, scores, lse and the cache (codes and u8 parameters) back into the Case's host buffers.
  void download();

 private:
  void* copy(TensorView& v);
  Case& c_;
  Params params_;
  std::vector<void*> allocs_;
};

}  // namespace testing
}  // namespace pagedattn
