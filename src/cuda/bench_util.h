// Internal: helpers for the benchmark (built with the cuda backend only).
#pragma once

#include <cstddef>

namespace pagedattn {
namespace cuda {

/// Read ceiling of the device: a kernel that reads a `bytes` buffer once (16-byte streaming loads),
/// median of `iters` timed runs; returns GB/s (1e9 bytes per second) of bytes READ.
double measure_read_ceiling_gbs(std::size_t bytes, int iters, void* stream);

}  // namespace cuda
}  // namespace pagedattn
