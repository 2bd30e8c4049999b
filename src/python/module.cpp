// pagedattn._C: the nanobind extension behind the `pagedattn` Python package.
//
// Tensors arrive as DLPack-capable arrays (NumPy, PyTorch, CuPy, ...) through nb::ndarray and become
// pagedattn::TensorView with no copy (pointer, shape, strides in elements, dtype, device). The pure-Python
// layer (python/pagedattn/__init__.py) allocates `out`, moves metadata to the host, picks the backend and
// the stream; this module only converts and calls the C++ API.
//
// Tensors travel in a dict {params.h field name: array or None} so that forward(), plan() and
// Plan.run() share one converter and the field names appear in exactly one place.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <string>
#include <vector>

#include "pagedattn/pagedattn.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace pagedattn {
namespace py {

namespace {

// The fields the op writes: they must be writable arrays (a read-only NumPy array is refused).
bool is_written(const std::string& name) {
  return name == "out" || name == "scores" || name == "lse" || name == "key_cache" || name == "value_cache" ||
         name == "key_scale" || name == "key_min" || name == "value_scale" || name == "value_min";
}

DType to_dtype(const nb::dlpack::dtype& t, const std::string& name) {
  using code = nb::dlpack::dtype_code;
  const auto c = static_cast<code>(t.code);
  if (t.lanes == 1) {
    if (c == code::Float && t.bits == 32) return DType::f32;
    if (c == code::Float && t.bits == 16) return DType::f16;
    if (c == code::Bfloat && t.bits == 16) return DType::bf16;
    if (c == code::UInt && t.bits == 8) return DType::u8;
    if (c == code::Bool && t.bits == 8) return DType::u8;  // bool masks (qq_bias) read as 0/1 bytes
    if (c == code::Int && t.bits == 32) return DType::i32;
    if (t.code == 10 && t.bits == 8) return DType::f8e4m3;  // kDLFloat8_e4m3fn (DLPack 1.1): float8_e4m3fn
  }
  static const char* kCodeNames[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  const std::string code_name = t.code < 7 ? kCodeNames[t.code] : "code " + std::to_string(t.code);
  throw ValidationError(name, "dtype " + code_name + std::to_string(t.bits) +
                                  (t.lanes != 1 ? "x" + std::to_string(t.lanes) : std::string()) +
                                  " is not supported (float32, float16, bfloat16, uint8, int32, float8_e4m3fn)");
}

// One array -> TensorView. `keep` holds the ndarray (and so the DLPack capsule) for the call's duration.
// The converted arrays of one call, held until the call returns (destroyed with the GIL held).
struct Keep {
  std::vector<nb::ndarray<nb::ro>> ro;
  std::vector<nb::ndarray<>> rw;
};

TensorView to_view(nb::handle obj, const std::string& name, Keep& keep) {
  TensorView v;
  if (obj.is_none()) return v;  // absent
  void* data = nullptr;
  size_t ndim = 0;
  nb::dlpack::dtype dt{};
  int device_type = 0;
  const int64_t* shape = nullptr;
  const int64_t* stride = nullptr;
  if (is_written(name)) {
    nb::ndarray<> a;
    if (!nb::try_cast(obj, a, /*convert=*/false)) {
      nb::ndarray<nb::ro> r;
      if (nb::try_cast(obj, r, false))
        throw ValidationError(name, "must be a writable array (the op writes it), got a read-only one");
      throw ValidationError(name, "must be an array with DLPack or the buffer protocol (numpy, torch, cupy), got " +
                                      std::string(nb::type_name(obj.type()).c_str()));
    }
    keep.rw.push_back(a);
    data = a.data();
    ndim = a.ndim();
    dt = a.dtype();
    device_type = a.device_type();
    shape = a.shape_ptr();
    stride = a.stride_ptr();
  } else {
    nb::ndarray<nb::ro> a;
    if (!nb::try_cast(obj, a, /*convert=*/false))
      throw ValidationError(name, "must be an array with DLPack or the buffer protocol (numpy, torch, cupy), got " +
                                      std::string(nb::type_name(obj.type()).c_str()));
    keep.ro.push_back(a);
    data = const_cast<void*>(a.data());
    ndim = a.ndim();
    dt = a.dtype();
    device_type = a.device_type();
    shape = a.shape_ptr();
    stride = a.stride_ptr();
  }
  if (ndim == 0) throw ValidationError(name, "must have at least one dimension, got a 0-d array");
  if (ndim > static_cast<size_t>(kMaxDims))
    throw ValidationError(name, "must have at most " + std::to_string(kMaxDims) + " dimensions, got " +
                                    std::to_string(ndim));
  v.data = data;
  v.dtype = to_dtype(dt, name);
  if (device_type == nb::device::cpu::value || device_type == nb::device::cuda_host::value)
    v.device = Device::cpu;
  else if (device_type == nb::device::cuda::value || device_type == nb::device::cuda_managed::value)
    v.device = Device::cuda;
  else
    throw ValidationError(name, "must be in cpu or cuda memory, got DLPack device type " + std::to_string(device_type));
  v.ndim = static_cast<int>(ndim);
  int64_t expect = 1;  // DLPack may omit strides (NULL = row-major)
  for (int i = v.ndim - 1; i >= 0; --i) {
    v.shape[i] = shape[i];
    v.stride[i] = stride ? stride[i] : expect;
    expect *= shape[i];
  }
  return v;
}

// max_context_len when the caller gave none: max_s past_lens[s] + T_s, read from the host metadata.
// Malformed metadata gives 0 here; validate() then reports the actual broken rule.
int default_max_context_len(const Params& p) {
  const TensorView &pl = p.past_lens, &sb = p.subsequence_begins;
  if (!pl.present() || !sb.present() || pl.ndim != 1 || sb.ndim != 1 || pl.dtype != DType::i32 ||
      sb.dtype != DType::i32 || pl.device != Device::cpu || sb.device != Device::cpu ||
      sb.shape[0] != pl.shape[0] + 1 || pl.stride[0] != 1 || sb.stride[0] != 1)
    return 0;
  const int32_t* past = pl.ptr<const int32_t>();
  const int32_t* begins = sb.ptr<const int32_t>();
  int64_t m = 0;
  for (int64_t s = 0; s < pl.shape[0]; ++s) {
    const int64_t c = int64_t{past[s]} + (int64_t{begins[s + 1]} - begins[s]);
    if (c > m) m = c;
  }
  return m > INT32_MAX ? INT32_MAX : static_cast<int>(m);
}

struct Scalars {
  int num_heads;
  std::optional<float> scale;
  int sliding_window;
  std::optional<int> max_context_len;
  bool prefix_only = false;
};

// Builds Params from {field name: array or None}; `keep` receives the converted arrays.
Params make_params(const nb::dict& tensors, const Scalars& s, Keep& keep) {
  Params p;
  static const char* kKnown[] = {"query", "key", "value", "key_cache", "value_cache", "key_scale",
                                 "key_min", "value_scale", "value_min", "past_lens",
                                 "subsequence_begins", "block_indices", "block_indices_begins",
                                 "alibi_slopes", "sinks", "qq_bias", "qq_bias_begins", "out", "scores",
                                 "score_aggregation_window", "lse", "new_token_positions"};
  for (auto [k, v] : tensors) {
    const std::string name = nb::cast<std::string>(k);
    bool known = false;
    for (const char* n : kKnown) known = known || name == n;
    if (!known) throw ValidationError(name, "is not an input of the op");
    (void)v;
  }
  auto get = [&](const char* name) -> TensorView {
    if (!tensors.contains(name)) return TensorView{};
    return to_view(tensors[name], name, keep);
  };
  p.num_heads = s.num_heads;
  p.query = get("query");
  p.key = get("key");
  p.value = get("value");
  p.cache.key = get("key_cache");
  p.cache.value = get("value_cache");
  p.cache.key_scale = get("key_scale");
  p.cache.key_min = get("key_min");
  p.cache.value_scale = get("value_scale");
  p.cache.value_min = get("value_min");
  p.past_lens = get("past_lens");
  p.subsequence_begins = get("subsequence_begins");
  p.block_indices = get("block_indices");
  p.block_indices_begins = get("block_indices_begins");
  p.scale = s.scale;
  p.sliding_window = s.sliding_window;
  p.alibi_slopes = get("alibi_slopes");
  p.sinks = get("sinks");
  p.qq_bias = get("qq_bias");
  p.qq_bias_begins = get("qq_bias_begins");
  p.out = get("out");
  p.scores = get("scores");
  p.score_aggregation_window = get("score_aggregation_window");
  p.lse = get("lse");
  p.new_token_positions = get("new_token_positions");
  p.prefix_only = s.prefix_only;
  p.max_context_len = s.max_context_len ? *s.max_context_len : default_max_context_len(p);
  return p;
}

Options make_options(const std::string& backend, bool deterministic, int partition_tokens, uintptr_t stream,
                     bool programmatic_launch, int num_threads, bool cpu_reference) {
  Options o;
  o.num_threads = num_threads;
  o.cpu_reference = cpu_reference;
  o.programmatic_launch = programmatic_launch;
  o.backend = parse_backend(backend);
  o.deterministic = deterministic;
  o.partition_tokens = partition_tokens;
  o.stream = reinterpret_cast<void*>(stream);
  return o;
}

// A plan plus the scalars it was made with (run() rebuilds Params from new tensors and these).
struct PyPlan {
  Plan plan;
  Scalars scalars;
  void run(const nb::dict& tensors) {
    pagedattn::py::Keep keep;
    Params p = make_params(tensors, scalars, keep);
    nb::gil_scoped_release release;
    plan.run(p);
  }
};

// C++ exceptions -> the Python classes of pagedattn/_errors.py (pure Python: ValidationError is also
// a ValueError, UnsupportedError a NotImplementedError). Most derived first.
void translate(const std::exception_ptr& e, void*) {
  auto raise = [](const char* cls_name, nb::tuple args) {
    nb::object cls = nb::module_::import_("pagedattn._errors").attr(cls_name);
    nb::object exc = nb::steal(PyObject_CallObject(cls.ptr(), args.ptr()));
    if (!exc.is_valid()) return;  // constructing the exception raised: that error stays set
    PyErr_SetObject(cls.ptr(), exc.ptr());
  };
  try {
    std::rethrow_exception(e);
  } catch (const ValidationError& ex) {
    raise("ValidationError", nb::make_tuple(ex.what(), ex.input(), ex.rule()));
  } catch (const UnsupportedError& ex) {
    raise("UnsupportedError", nb::make_tuple(ex.what()));
  } catch (const RuntimeError& ex) {
    raise("RuntimeError", nb::make_tuple(ex.what()));
  } catch (const Error& ex) {
    raise("Error", nb::make_tuple(ex.what()));
  }
}

}  // namespace
}  // namespace py
}  // namespace pagedattn

NB_MODULE(_C, m) {
  using namespace pagedattn;
  using pagedattn::py::PyPlan;
  using pagedattn::py::Scalars;
  m.doc() = "pagedattn native module (use the `pagedattn` package, not this module directly)";
  nb::register_exception_translator(&pagedattn::py::translate);
  // Plans kept in module globals are alive at interpreter exit; that is not a leak worth a warning.
  nb::set_leak_warnings(false);

#ifdef PAGEDATTN_WITH_CUDA
  m.attr("built_with_cuda") = true;
#else
  m.attr("built_with_cuda") = false;
#endif
  m.def("cuda_available", &pagedattn::cuda_available,
        "True when this build has the CUDA backend and a CUDA device is visible.");

  nb::class_<PyPlan>(m, "Plan")
      .def("run", &PyPlan::run, "tensors"_a, "Runs the planned op on {field: array} (same shapes/dtypes).")
      .def("describe", [](const PyPlan& p) { return p.plan.describe(); })
      .def_prop_ro("backend", [](const PyPlan& p) { return std::string(backend_name(p.plan.backend())); })
      .def_prop_ro("workspace_bytes", [](const PyPlan& p) { return p.plan.workspace_bytes(); })
      .def_prop_ro("info", [](const PyPlan& p) {  // PlanInfo as a dict (launches: a list of dicts)
        const PlanInfo i = p.plan.info();
        nb::dict d;
        d["backend"] = std::string(backend_name(i.backend));
        d["reference"] = i.reference;
        d["threads"] = i.threads;
        d["cpu_isa"] = i.cpu_isa;
        d["partition_tokens"] = i.partition_tokens;
        d["wave_ctas"] = i.wave_ctas;
        d["head_width"] = i.head_width;
        d["work_items"] = i.work_items;
        nb::list launches;
        for (const PlanInfo::Launch& l : i.launches) {
          nb::dict x;
          x["row_tiles"] = l.row_tiles;
          x["ctas"] = l.ctas;
          x["threads"] = l.threads;
          x["variant"] = l.variant;
          launches.append(x);
        }
        d["launches"] = launches;
        d["merge_rows"] = i.merge_rows;
        d["merge_split"] = i.merge_split;
        d["merge_batch"] = i.merge_batch;
        d["merge_rowwise"] = i.merge_rowwise;
        d["separate_kv_write"] = i.separate_kv_write;
        d["pdl"] = i.pdl;
        d["early_reads"] = i.early_reads;
        d["workspace_bytes"] = i.workspace_bytes;
        return d;
      });

  m.def(
      "plan",
      [](const nb::dict& tensors, int num_heads, std::optional<float> scale, int sliding_window,
         std::optional<int> max_context_len, const std::string& backend, bool deterministic, int partition_tokens,
         uintptr_t stream, bool programmatic_launch, int num_threads, bool cpu_reference, bool prefix_only) {
        Scalars s{num_heads, scale, sliding_window, max_context_len, prefix_only};
        pagedattn::py::Keep keep;
        Params p = pagedattn::py::make_params(tensors, s, keep);
        Options o = pagedattn::py::make_options(backend, deterministic, partition_tokens, stream, programmatic_launch,
                                                     num_threads, cpu_reference);
        auto* pp = new PyPlan{Plan(), s};
        try {
          nb::gil_scoped_release release;
          pp->plan = pagedattn::plan(p, o);
        } catch (...) {
          delete pp;
          throw;
        }
        return pp;
      },
      "tensors"_a, "num_heads"_a, "scale"_a.none(), "sliding_window"_a, "max_context_len"_a.none(), "backend"_a,
      "deterministic"_a, "partition_tokens"_a, "stream"_a, "programmatic_launch"_a = true, "num_threads"_a = 0,
      "cpu_reference"_a = false, "prefix_only"_a = false, nb::rv_policy::take_ownership,
      "Validates and plans the op; see pagedattn.plan.");

  m.def(
      "forward",
      [](const nb::dict& tensors, int num_heads, std::optional<float> scale, int sliding_window,
         std::optional<int> max_context_len, const std::string& backend, bool deterministic, int partition_tokens,
         uintptr_t stream, bool programmatic_launch, int num_threads, bool cpu_reference, bool prefix_only) {
        Scalars s{num_heads, scale, sliding_window, max_context_len, prefix_only};
        pagedattn::py::Keep keep;
        Params p = pagedattn::py::make_params(tensors, s, keep);
        Options o = pagedattn::py::make_options(backend, deterministic, partition_tokens, stream, programmatic_launch,
                                                     num_threads, cpu_reference);
        nb::gil_scoped_release release;
        pagedattn::forward(p, o);
      },
      "tensors"_a, "num_heads"_a, "scale"_a.none(), "sliding_window"_a, "max_context_len"_a.none(), "backend"_a,
      "deterministic"_a, "partition_tokens"_a, "stream"_a, "programmatic_launch"_a = true, "num_threads"_a = 0,
      "cpu_reference"_a = false, "prefix_only"_a = false,
      "Validates, plans and runs the op; see pagedattn.forward.");

  m.def(
      "merge_states",
      [](const nb::list& outs, const nb::list& lses, nb::handle out, nb::handle lse, const std::string& backend,
         uintptr_t stream) {
        pagedattn::py::Keep keep;
        std::vector<TensorView> ov, lv;
        for (size_t i = 0; i < outs.size(); ++i)
          ov.push_back(pagedattn::py::to_view(outs[i], "outs[" + std::to_string(i) + "]", keep));
        for (size_t i = 0; i < lses.size(); ++i)
          lv.push_back(pagedattn::py::to_view(lses[i], "lses[" + std::to_string(i) + "]", keep));
        const TensorView o = pagedattn::py::to_view(out, "out", keep);
        const TensorView l = pagedattn::py::to_view(lse, "lse", keep);
        Options opt = pagedattn::py::make_options(backend, false, 0, stream, true, 0, false);
        nb::gil_scoped_release release;
        pagedattn::merge_states(ov, lv, o, l, opt);
      },
      "outs"_a, "lses"_a, "out"_a.none(), "lse"_a.none(), "backend"_a, "stream"_a,
      "Combines partial (out, lse) pairs; see pagedattn.merge_states.");
}
