#include <sstream>

#include "pagedattn/pagedattn.h"

namespace pagedattn {

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::u8: return 1;
    case DType::i32: return 4;
    case DType::f8e4m3: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::u8: return "u8";
    case DType::i32: return "i32";
    case DType::f8e4m3: return "f8e4m3";
  }
  return "?";
}

const char* device_name(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

const char* kv_precision_name(KVPrecision p) {
  switch (p) {
    case KVPrecision::f16: return "f16";
    case KVPrecision::bf16: return "bf16";
    case KVPrecision::u8: return "u8";
    case KVPrecision::fp8: return "fp8";
  }
  return "?";
}

const char* backend_name(Backend b) { return b == Backend::cpu ? "cpu" : "cuda"; }

Backend parse_backend(const std::string& name) {
  if (name == "cpu") return Backend::cpu;
  if (name == "cuda") return Backend::cuda;
  throw ValidationError("backend", "must be 'cpu' or 'cuda', got '" + name + "'");
}

int64_t TensorView::numel() const {
  if (ndim == 0) return 0;
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t expect = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    if (shape[i] != 1 && stride[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}

TensorView TensorView::contiguous(void* data, DType dtype, Device device, std::initializer_list<int64_t> shape) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.device = device;
  v.ndim = static_cast<int>(shape.size());
  if (v.ndim > kMaxDims) throw ValidationError("tensor", "at most 4 dimensions");
  int i = 0;
  for (int64_t s : shape) v.shape[i++] = s;
  int64_t st = 1;
  for (int k = v.ndim - 1; k >= 0; --k) {
    v.stride[k] = st;
    st *= v.shape[k];
  }
  return v;
}

std::string TensorView::describe() const {
  if (!present()) return "absent";
  std::ostringstream os;
  os << "[";
  for (int i = 0; i < ndim; ++i) os << (i ? ", " : "") << shape[i];
  os << "] " << dtype_name(dtype) << " " << device_name(device);
  return os.str();
}

ValidationError::ValidationError(std::string input, std::string rule)
    : Error("invalid input '" + input + "': " + rule), input_(std::move(input)), rule_(std::move(rule)) {}

KVPrecision KVCache::precision() const {
  switch (key.dtype) {
    case DType::f16: return KVPrecision::f16;
    case DType::bf16: return KVPrecision::bf16;
    case DType::u8: return KVPrecision::u8;
    case DType::f8e4m3: return KVPrecision::fp8;
    default:
      throw ValidationError("key_cache", std::string("dtype must be f16, bf16, u8 or f8e4m3, got ") + dtype_name(key.dtype));
  }
}

}  // namespace pagedattn
