// Internal (host code): element i of a float tensor view (f32, f16, bf16) as f32, and f32 stored into
// one (rounded to nearest even). Other dtypes: load gives 0, store writes nothing. And an fp8 cache's
// scale of one kv head.
#pragma once

#include "common/numeric.h"
#include "pagedattn/types.h"

namespace pagedattn {
namespace detail {

inline float load_f(const TensorView& t, int64_t i) {
  switch (t.dtype) {
    case DType::f32: return t.ptr<const float>()[i];
    case DType::f16: return num::f16_bits_to_f32(t.ptr<const uint16_t>()[i]);
    case DType::bf16: return num::bf16_bits_to_f32(t.ptr<const uint16_t>()[i]);
    default: return 0.0f;
  }
}

inline void store_f(const TensorView& t, int64_t i, float x) {
  switch (t.dtype) {
    case DType::f32: t.ptr<float>()[i] = x; break;
    case DType::f16: t.ptr<uint16_t>()[i] = num::f32_to_f16_bits(x); break;
    case DType::bf16: t.ptr<uint16_t>()[i] = num::f32_to_bf16_bits(x); break;
    default: break;
  }
}

// fp8 caches: kv head hk's f32 scale (the view is [Hk], or [1] for the whole cache).
inline float fp8_scale(const TensorView& scale, int64_t hk) {
  return scale.ptr<const float>()[scale.shape[0] == 1 ? 0 : hk * scale.stride[0]];
}

}  // namespace detail
}  // namespace pagedattn
