// pagedattn — basic types: dtypes, devices, tensor views, errors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace pagedattn {

/// Element types a tensor view may hold.
/// f8e4m3: OCP FP8 E4M3FN (1 sign, 4 exponent bits with bias 7, 3 mantissa bits; no inf; 0x7f/0xff NaN;
/// largest finite 448), PyTorch's float8_e4m3fn.
enum class DType : int { f32 = 0, f16 = 1, bf16 = 2, u8 = 3, i32 = 4, f8e4m3 = 5 };

/// Where a tensor's memory lives.
enum class Device : int { cpu = 0, cuda = 1 };

/// Size of one element in bytes.
std::size_t dtype_size(DType t);
/// "f32", "f16", "bf16", "u8", "i32", "f8e4m3".
const char* dtype_name(DType t);
const char* device_name(Device d);

constexpr int kMaxDims = 4;

/// A non-owning view of a strided tensor. Strides are in elements.
/// An optional input is *absent* when `ndim == 0` (the default-constructed view).
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  int ndim = 0;
  int64_t shape[kMaxDims] = {0, 0, 0, 0};
  int64_t stride[kMaxDims] = {0, 0, 0, 0};

  bool present() const { return ndim > 0; }
  int64_t numel() const;
  bool is_contiguous() const;
  int64_t size(int i) const { return shape[i]; }
  template <typename T>
  T* ptr() const { return static_cast<T*>(data); }

  /// A contiguous (row-major) view over `data`.
  static TensorView contiguous(void* data, DType dtype, Device device, std::initializer_list<int64_t> shape);
  /// "[3, 4] f16 cpu"
  std::string describe() const;
};

/// Base of every error pagedattn throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// An input breaks a rule of the op. `input()` names the input, `rule()` states the rule.
/// Thrown before anything is written to outputs or the cache.
class ValidationError : public Error {
 public:
  ValidationError(std::string input, std::string rule);
  const std::string& input() const { return input_; }
  const std::string& rule() const { return rule_; }

 private:
  std::string input_, rule_;
};

/// A valid call that this backend (or this build) does not support.
class UnsupportedError : public Error {
 public:
  using Error::Error;
};

/// A failure of the underlying runtime (CUDA error, allocation failure).
class RuntimeError : public Error {
 public:
  using Error::Error;
};

}  // namespace pagedattn
