// merge_states(): k partial results of the same rows (each from a call over a disjoint part of the
// keys, with Params::lse) combined into the exact result of one call over all of them.
#include <cmath>
#include <string>
#include <vector>

#include "core/plan_impl.h"
#include "core/tensor_io.h"
#include "pagedattn/pagedattn.h"

namespace pagedattn {

namespace {

[[noreturn]] void fail(const std::string& input, const std::string& rule) { throw ValidationError(input, rule); }

std::string item(const char* list, size_t i) { return std::string(list) + "[" + std::to_string(i) + "]"; }

// A 2-D row-major tensor of `rows` rows and `cols` columns, of one of `dtypes`, on `device`.
void check_2d(const TensorView& t, const std::string& name, int64_t rows, int64_t cols, bool any_float,
              Device device) {
  if (!t.present()) fail(name, "is required, got an absent tensor");
  if (t.ndim != 2) fail(name, "must be 2-D, got " + t.describe());
  if (any_float ? !(t.dtype == DType::f32 || t.dtype == DType::f16 || t.dtype == DType::bf16)
                : t.dtype != DType::f32)
    fail(name, std::string("dtype must be ") + (any_float ? "f32, f16 or bf16" : "f32") + ", got " +
                   dtype_name(t.dtype));
  if ((rows >= 0 && t.shape[0] != rows) || (cols >= 0 && t.shape[1] != cols))
    fail(name, "shape must be [" + std::to_string(rows) + ", " + std::to_string(cols) + "], got " + t.describe());
  if (t.stride[1] != 1 || t.stride[0] != t.shape[1]) fail(name, "must be contiguous (row-major), got " + t.describe());
  if (t.device != device)
    fail(name, std::string("must be on the ") + device_name(device) + " device, got " + device_name(t.device));
  if (t.numel() > 0 && t.data == nullptr) fail(name, "data must be non-null");
}

}  // namespace

void merge_states(const std::vector<TensorView>& outs, const std::vector<TensorView>& lses, const TensorView& out,
                  const TensorView& lse, const Options& opt) {
  if (outs.empty()) fail("outs", "must hold at least one partial result");
  if (lses.size() != outs.size())
    fail("lses", "must hold one lse per partial output (" + std::to_string(outs.size()) + "), got " +
                     std::to_string(lses.size()));
  const Device dev = opt.backend == Backend::cuda ? Device::cuda : Device::cpu;
  check_2d(lses[0], item("lses", 0), -1, -1, false, dev);
  check_2d(outs[0], item("outs", 0), -1, -1, true, dev);
  const int64_t n = lses[0].shape[0], H = lses[0].shape[1], cols = outs[0].shape[1];
  if (H < 1) fail(item("lses", 0), "must have at least one head (dimension 1), got " + lses[0].describe());
  if (outs[0].shape[0] != n || cols % H != 0)
    fail(item("outs", 0), "shape must be [" + std::to_string(n) + ", H*D] with H = " + std::to_string(H) +
                              " (lses[0]'s dimension 1), got " + outs[0].describe());
  for (size_t i = 1; i < outs.size(); ++i) {
    check_2d(outs[i], item("outs", i), n, cols, true, dev);
    if (outs[i].dtype != outs[0].dtype) fail(item("outs", i), "dtype must equal outs[0]'s");
    check_2d(lses[i], item("lses", i), n, H, false, dev);
  }
  check_2d(out, "out", n, cols, true, dev);
  if (lse.present()) check_2d(lse, "lse", n, H, false, dev);
  if (opt.backend == Backend::cuda) {  // one CTA per (row, head), on opt.stream
    detail::cuda_merge_states(outs, lses, out, lse, opt.stream);
    return;
  }

  // Per (row, head): M = max_i lse_i; w_i = exp(lse_i - M); out = sum_i w_i out_i / sum_i w_i and
  // lse = M + log(sum_i w_i), in double. Every partial of a row is read before the row is written, so
  // `out` (and `lse`) may be one of the inputs.
  const int64_t D = cols / H;
  const size_t k = outs.size();
  std::vector<double> w(k), acc(static_cast<size_t>(D));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t h = 0; h < H; ++h) {
      double M = -INFINITY;
      for (size_t i = 0; i < k; ++i) M = std::fmax(M, static_cast<double>(lses[i].ptr<const float>()[r * H + h]));
      double sum = 0.0;
      for (size_t i = 0; i < k; ++i) {
        const double l = lses[i].ptr<const float>()[r * H + h];
        w[i] = M == -INFINITY || l == -INFINITY ? 0.0 : std::exp(l - M);
        sum += w[i];
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      for (size_t i = 0; i < k; ++i)
        if (w[i] != 0.0)
          for (int64_t d = 0; d < D; ++d) acc[static_cast<size_t>(d)] += w[i] * detail::load_f(outs[i], r * cols + h * D + d);
      for (int64_t d = 0; d < D; ++d)
        detail::store_f(out, r * cols + h * D + d, sum > 0.0 ? static_cast<float>(acc[static_cast<size_t>(d)] / sum) : 0.0f);
      if (lse.present()) lse.ptr<float>()[r * H + h] = sum > 0.0 ? static_cast<float>(M + std::log(sum)) : -INFINITY;
    }
}

}  // namespace pagedattn
