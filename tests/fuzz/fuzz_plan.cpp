// libFuzzer target: arbitrary bytes -> pagedattn::Params and Options -> validate() and plan() on the cpu
// backend. The op itself never runs.
//
// The bytes first describe a call that is consistent (sequences, heads, head size, block size, block
// tables that cover every context, u8 parameters, trees, scores, windows, ALiBi, sinks), so that the
// deep rules of validate() and the cpu plan's work split are reached; then up to 4 mutations break one
// thing each (an ndim, a dimension to a boundary value, a dtype, a device, a stride, a null pointer,
// an absent or extra tensor, one metadata entry, a scalar).
//
// Memory, as the API's contract has it (params.h):
//   - host metadata (past_lens, begins, block tables, qq_bias, score_aggregation_window) is read by
//     validate() and plan(): each gets its own heap buffer of exactly numel * dtype_size bytes, so
//     AddressSanitizer reports any read past what its shape promises;
//   - device tensors (query, caches, out, scores, ...) are read only by run(): they point at unmapped
//     fake addresses, so plan() touching one crashes.
//
// Properties (a failed one aborts, which the fuzzer reports as a crash with its input):
//   - every exception is a pagedattn::ValidationError or pagedattn::UnsupportedError, and a
//     ValidationError names an input and a rule;
//   - plan() rejects (ValidationError) whatever validate() rejects;
//   - plan() accepts, on the cpu backend with every tensor on the cpu, whatever validate() accepts;
//   - AddressSanitizer and UndefinedBehaviorSanitizer (signed overflow, shifts, casts, ...) stay quiet.
//
// plan() is skipped (validate() still runs) for accepted calls whose plan would allocate a lot by design:
// the cpu plan's work list and scratch grow with num_tokens * H, D, the total context (with scores) and
// context / partition_tokens; see within_budget().
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "pagedattn/pagedattn.h"

namespace {

using pagedattn::Device;
using pagedattn::DType;
using pagedattn::Params;
using pagedattn::TensorView;

constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxHostElements = 1 << 16;  // a host tensor's buffer is allocated: keep it small
constexpr int kMaxSeqs = 6;

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_plan: PROPERTY FAILED: %s: %s\n", what, detail.c_str());
  std::abort();
}

int64_t checked_numel(const TensorView& t) {  // -1: not a well-formed shape (validate() rejects it unread)
  if (t.ndim < 1 || t.ndim > pagedattn::kMaxDims) return -1;
  int64_t n = 1;
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] < 0) return -1;
    if (t.shape[i] != 0 && n > std::numeric_limits<int64_t>::max() / t.shape[i]) return -1;
    n *= t.shape[i];
  }
  return n;
}

void set_contiguous(TensorView& t) {
  int64_t st = 1;
  for (int k = t.ndim - 1; k >= 0; --k) {
    t.stride[k] = st;
    if (t.shape[k] > 0 && st <= std::numeric_limits<int64_t>::max() / t.shape[k]) st *= t.shape[k];
  }
}

TensorView view(DType dt, Device dev, std::initializer_list<int64_t> shape) {
  TensorView t;
  t.dtype = dt;
  t.device = dev;
  t.ndim = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  set_contiguous(t);
  return t;
}

// Names every tensor of a Params, with whether validate() may read its data (host metadata).
struct Field {
  TensorView* t;
  bool host;
};

class Builder {
 public:
  explicit Builder(FuzzedDataProvider& in) : in_(in) {}

  Params p;
  pagedattn::Options opt;

  // --- the consistent call ------------------------------------------------------------------------
  void build() {
    const int num_seqs = in_.ConsumeIntegralInRange(0, kMaxSeqs);
    const int64_t Hk = in_.ConsumeBool() ? in_.ConsumeIntegralInRange(1, 4) : in_.PickValueInArray({1, 2, 8, 16});
    const int64_t G = in_.ConsumeBool() ? in_.ConsumeIntegralInRange(1, 8) : in_.PickValueInArray({1, 16, 64, 65});
    const int64_t H = G * Hk;
    const int64_t D = in_.ConsumeBool() ? in_.PickValueInArray({1, 2, 8, 16, 32, 64, 128, 256})
                                        : in_.ConsumeIntegralInRange<int64_t>(1, 600);
    const int64_t bs = in_.ConsumeBool() ? in_.PickValueInArray({1, 2, 4, 8, 16, 32, 64})
                                         : in_.PickValueInArray<int64_t>({3, 1 << 10, 1 << 20, 1 << 26});
    const DType kv = in_.PickValueInArray({DType::f16, DType::bf16, DType::u8, DType::f8e4m3});
    const DType qd = in_.PickValueInArray({DType::f32, DType::f16, DType::bf16});
    const bool write = in_.ConsumeBool();

    std::vector<int32_t> past(num_seqs), sb(num_seqs + 1, 0), bib(num_seqs + 1, 0), table;
    std::vector<int64_t> ctx(num_seqs);
    int64_t max_ctx = 0, sum_ctx = 0, sum_t2 = 0;
    for (int s = 0; s < num_seqs; ++s) {
      const int32_t T = in_.ConsumeIntegralInRange(0, 12);
      switch (in_.ConsumeIntegralInRange(0, 7)) {
        case 0: past[s] = in_.ConsumeIntegral<int32_t>(); break;  // anything, negative included
        case 1:
          past[s] = in_.PickValueInArray<int32_t>({1 << 20, (1 << 30) - 1, 1 << 30, (1 << 30) + 1,
                                                   static_cast<int32_t>(kI32Max - 12), static_cast<int32_t>(kI32Max)});
          break;
        default: past[s] = in_.ConsumeIntegralInRange(0, 300);
      }
      sb[s + 1] = sb[s] + T;
      ctx[s] = int64_t{past[s]} + T;
      max_ctx = std::max(max_ctx, ctx[s]);
      sum_ctx += ctx[s];
      sum_t2 += int64_t{T} * T;
      // the table: ceil(ctx / bs) entries (+0..2), at most kMaxHostElements / 8 per sequence
      int64_t need = ctx[s] > 0 ? (ctx[s] + bs - 1) / bs : 0;
      need += in_.ConsumeIntegralInRange(0, 2) - (in_.ConsumeIntegralInRange(0, 15) == 0 ? 1 : 0);
      need = std::max<int64_t>(0, std::min<int64_t>(need, kMaxHostElements / 8));
      for (int64_t i = 0; i < need; ++i) table.push_back(static_cast<int32_t>(table.size()));  // distinct ids
      bib[s + 1] = static_cast<int32_t>(table.size());
    }
    const int64_t num_tokens = sb[num_seqs];
    // block ids: distinct (no write conflicts), shuffled, shared or out of range now and then
    int64_t num_blocks = static_cast<int64_t>(table.size()) + in_.ConsumeIntegralInRange(0, 3);
    switch (in_.ConsumeIntegralInRange(0, 5)) {
      case 0:  // reversed
        for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(table.size() - 1 - i);
        break;
      case 1:  // random ids in [-1, num_blocks]: sharing and out-of-range ids
        for (int32_t& b : table) b = in_.ConsumeIntegralInRange<int32_t>(-1, static_cast<int32_t>(num_blocks));
        break;
      case 2: num_blocks = in_.PickValueInArray<int64_t>({0, 1, kI32Max, kI32Max + 1}); break;
      default: break;
    }

    // the value head size: the key's, or another (validate() allows any, cuda refuses it)
    const int64_t Dv = in_.ConsumeIntegralInRange(0, 7) == 0 ? in_.ConsumeIntegralInRange<int64_t>(1, 300) : D;
    p.num_heads = static_cast<int>(H);
    p.query = dev(qd, {num_tokens, H * D});
    if (write) {
      p.key = dev(qd, {num_tokens, Hk * D});
      p.value = dev(qd, {num_tokens, Hk * Dv});
    }
    p.cache.key = dev(kv, {num_blocks, Hk, bs, D});
    p.cache.value = dev(kv, {num_blocks, Hk, bs, Dv});
    if (kv == DType::u8) {
      for (TensorView* t : {&p.cache.key_scale, &p.cache.key_min, &p.cache.value_scale, &p.cache.value_min})
        *t = dev(DType::f16, {num_blocks, Hk, bs});
    }
    if (kv == DType::f8e4m3) {  // a scale per kv head or one; its bytes (so its value) come from the input
      const int64_t n = in_.ConsumeBool() ? Hk : 1;
      p.cache.key_scale = dev(DType::f32, {n});
      p.cache.value_scale = dev(DType::f32, {n});
    }
    p.out = dev(qd, {num_tokens, H * Dv});
    p.past_lens = host_i32(past);
    p.subsequence_begins = host_i32(sb);
    p.block_indices = host_i32(table);
    p.block_indices_begins = host_i32(bib);
    p.max_context_len = static_cast<int>(std::min(kI32Max, max_ctx + in_.ConsumeIntegralInRange(0, 2)));

    if (in_.ConsumeBool()) {  // sliding window
      p.sliding_window = in_.ConsumeBool() ? in_.ConsumeIntegralInRange(1, 300) : in_.ConsumeIntegral<int32_t>();
    }
    switch (in_.ConsumeIntegralInRange(0, 4)) {                    // scale
      case 0: p.scale = in_.ConsumeFloatingPoint<float>(); break;  // anything: NaN, inf, negative, 0
      case 1: p.scale = 0.0f; break;
      case 2: p.scale = in_.ConsumeFloatingPointInRange(1e-3f, 2.0f); break;
      default: break;
    }
    if (in_.ConsumeBool()) p.alibi_slopes = dev(DType::f32, {H});
    if (in_.ConsumeBool()) p.sinks = dev(DType::f32, {H});
    if (in_.ConsumeBool() && sum_t2 <= kMaxHostElements) {  // tree mask: diagonal 1, the rest 0/1
      std::vector<uint8_t> bias;
      std::vector<int32_t> qb(num_seqs + 1, 0);
      for (int s = 0; s < num_seqs; ++s) {
        const int T = sb[s + 1] - sb[s];
        for (int t = 0; t < T; ++t)
          for (int u = 0; u < T; ++u) bias.push_back(t == u ? 1 : static_cast<uint8_t>(in_.ConsumeBool()));
        qb[s + 1] = qb[s] + T * T;
      }
      p.qq_bias = host_bytes(DType::u8, {static_cast<int64_t>(bias.size())}, bias.data(), bias.size());
      p.qq_bias_begins = host_i32(qb);
    }
    if (in_.ConsumeBool()) {
      p.scores = dev(DType::f32, {sum_ctx});
      if (in_.ConsumeBool()) {
        std::vector<int32_t> w(num_seqs);
        for (int32_t& x : w) x = in_.ConsumeIntegralInRange(-2, 14);
        p.score_aggregation_window = host_i32(w);
      }
    }

    opt.backend = in_.ConsumeIntegralInRange(0, 15) == 0 ? pagedattn::Backend::cuda : pagedattn::Backend::cpu;
    opt.num_threads = in_.ConsumeIntegralInRange(0, 4);
    opt.partition_tokens = in_.PickValueInArray({0, 0, 0, 0, -64, 1, 64, 512, 1 << 20});
    opt.deterministic = in_.ConsumeBool();
    opt.cpu_reference = in_.ConsumeIntegralInRange(0, 7) == 0;
    // (drawn last, so that the committed seeds decode as before)
    if (in_.ConsumeBool()) p.lse = dev(DType::f32, {num_tokens, H});
    if (in_.ConsumeIntegralInRange(0, 7) == 1) {  // a shard without the new tokens (usually: key absent)
      p.prefix_only = true;
      if (in_.ConsumeBool()) p.key = p.value = TensorView{};
    }
  }

  // --- mutations: each breaks (or bends) one thing -------------------------------------------------
  void mutate() {
    const int n = in_.ConsumeIntegralInRange(0, 4);
    for (int m = 0; m < n && in_.remaining_bytes() > 0; ++m) mutate_one();
  }

  bool all_on_cpu() {
    for (const Field& f : fields())
      if (f.t->present() && f.t->device != Device::cpu) return false;
    return true;
  }

  std::vector<Field> fields() {
    return {{&p.query, false},
            {&p.key, false},
            {&p.value, false},
            {&p.cache.key, false},
            {&p.cache.value, false},
            {&p.cache.key_scale, false},
            {&p.cache.key_min, false},
            {&p.cache.value_scale, false},
            {&p.cache.value_min, false},
            {&p.past_lens, true},
            {&p.subsequence_begins, true},
            {&p.block_indices, true},
            {&p.block_indices_begins, true},
            {&p.alibi_slopes, false},
            {&p.sinks, false},
            {&p.qq_bias, true},
            {&p.qq_bias_begins, true},
            {&p.out, false},
            {&p.scores, false},
            {&p.score_aggregation_window, true}};
  }

 private:
  FuzzedDataProvider& in_;
  std::vector<std::unique_ptr<uint8_t[]>> buffers_;
  uintptr_t next_fake_ = 0x1000;  // unmapped (below mmap_min_addr): any read of a device tensor faults

  // A device tensor at its own fake address (16-byte aligned, never mapped).
  TensorView dev(DType dt, std::initializer_list<int64_t> shape) {
    TensorView t = view(dt, Device::cpu, shape);
    t.data = reinterpret_cast<void*>(next_fake_ += 0x100);
    return t;
  }

  // A host tensor over a fresh buffer of exactly numel * dtype_size bytes holding `bytes` (then fuzz bytes).
  TensorView host_bytes(DType dt, std::initializer_list<int64_t> shape, const void* bytes, size_t len) {
    TensorView t = view(dt, Device::cpu, shape);
    rehost(t, bytes, len);
    return t;
  }
  TensorView host_i32(const std::vector<int32_t>& v) {
    return host_bytes(DType::i32, {static_cast<int64_t>(v.size())}, v.data(), v.size() * sizeof(int32_t));
  }

  // Points t at a new buffer sized for its current shape and dtype, holding `bytes` first.
  void rehost(TensorView& t, const void* bytes, size_t len) {
    const int64_t n = checked_numel(t);
    const size_t size = n < 0 ? 0 : static_cast<size_t>(n) * pagedattn::dtype_size(t.dtype);
    buffers_.emplace_back(new uint8_t[size]);
    uint8_t* b = buffers_.back().get();
    const size_t keep = std::min(size, len);
    if (keep) std::memcpy(b, bytes, keep);
    for (size_t i = keep; i < size; ++i) b[i] = in_.ConsumeIntegral<uint8_t>();
    t.data = b;
  }

  // A new shape for a host tensor must keep its buffer allocatable; false: leave the tensor as it was.
  bool host_shape_ok(const TensorView& t) {
    const int64_t n = checked_numel(t);
    return n < 0 || n <= kMaxHostElements;
  }

  int64_t boundary_dim() {
    switch (in_.ConsumeIntegralInRange(0, 5)) {
      case 0: return -1;
      case 1:
        return in_.PickValueInArray<int64_t>(
            {kI32Max, kI32Max + 1, int64_t{1} << 40, int64_t{1} << 62, std::numeric_limits<int64_t>::max()});
      case 2: return in_.ConsumeIntegral<int64_t>();
      default: return in_.ConsumeIntegralInRange<int64_t>(0, 70);
    }
  }

  // x + [-2, 2], kept in int32
  int32_t nudge(int32_t x) {
    const int64_t v = int64_t{x} + in_.ConsumeIntegralInRange(-2, 2);
    return static_cast<int32_t>(std::max<int64_t>(std::numeric_limits<int32_t>::min(), std::min(kI32Max, v)));
  }

  void mutate_one() {
    std::vector<Field> fs = fields();
    const Field f = fs[in_.ConsumeIntegralInRange<size_t>(0, fs.size() - 1)];
    TensorView& t = *f.t;
    const TensorView before = t;
    switch (in_.ConsumeIntegralInRange(0, 10)) {
      case 0:  // ndim, in and out of [0, 4]
        t.ndim = in_.ConsumeIntegralInRange(-1, pagedattn::kMaxDims + 1);
        if (t.ndim >= 1 && t.ndim <= pagedattn::kMaxDims) set_contiguous(t);
        break;
      case 1: {  // one dimension
        if (t.ndim < 1 || t.ndim > pagedattn::kMaxDims) return;
        t.shape[in_.ConsumeIntegralInRange(0, t.ndim - 1)] = boundary_dim();
        set_contiguous(t);
        break;
      }
      case 2: t.dtype = static_cast<DType>(in_.ConsumeIntegralInRange(-1, 5)); break;
      case 3: t.device = t.device == Device::cpu ? Device::cuda : Device::cpu; break;
      case 4:  // a stride
        if (t.ndim < 1 || t.ndim > pagedattn::kMaxDims) return;
        t.stride[in_.ConsumeIntegralInRange(0, t.ndim - 1)] = in_.ConsumeIntegralInRange<int64_t>(-2, 100);
        return;  // same buffer: a non-contiguous host view is rejected before it is read
      case 5: t.data = nullptr; return;
      case 6:  // absent <-> present ([n] of some dtype)
        if (t.present()) {
          t = TensorView{};
          return;
        }
        t = dev(in_.PickValueInArray({DType::f32, DType::f16, DType::u8, DType::i32, DType::f8e4m3}),
                {in_.ConsumeIntegralInRange<int64_t>(0, 16)});
        break;   // a host tensor gets a real buffer below
      case 7: {  // one metadata entry (i32, or a qq_bias byte)
        if (!f.host || t.data == nullptr || checked_numel(t) <= 0) return;
        const int64_t i = in_.ConsumeIntegralInRange<int64_t>(0, checked_numel(t) - 1);
        if (t.dtype == DType::i32)
          t.ptr<int32_t>()[i] = in_.ConsumeBool() ? in_.ConsumeIntegral<int32_t>() : nudge(t.ptr<int32_t>()[i]);
        else if (t.dtype == DType::u8)
          t.ptr<uint8_t>()[i] = in_.ConsumeIntegral<uint8_t>();
        return;
      }
      case 8: p.num_heads = in_.ConsumeBool() ? in_.ConsumeIntegral<int>() : nudge(p.num_heads); return;
      case 9: p.sliding_window = in_.ConsumeIntegral<int>(); return;
      default: p.max_context_len = in_.ConsumeBool() ? in_.ConsumeIntegral<int>() : nudge(p.max_context_len); return;
    }
    if (!f.host) return;
    if (!host_shape_ok(t)) {
      t = before;
      return;
    }
    // a host tensor's buffer always matches its (new) shape and dtype; the old contents come first
    const int64_t old_n = checked_numel(before);
    rehost(t, before.data, old_n < 0 || before.data == nullptr ? 0 : old_n * pagedattn::dtype_size(before.dtype));
  }
};

// Plans whose allocations grow with the call's size by design (see the file comment) are skipped. The
// estimate follows the cpu plan's documented shape: chunks of at most 64 query rows (a sequence's T*G
// rows per kv head), each cut into key partitions (Options::partition_tokens; Options::deterministic: one
// per 2048 keys, cpu_backend.cpp's kInvariantPart; else about 4 per thread),
// one partial (64 rows x (Dv + 2) floats) per chunk, kv head and partition; scores keep a tile list
// over the whole context.
bool within_budget(const Params& p, const pagedattn::Options& opt) {
  const int64_t num_tokens = p.query.shape[0], H = p.num_heads, Hk = p.cache.key.shape[1],
                D = std::max(p.cache.key.shape[3], p.cache.value.shape[3]);  // the wider of the key and value rows
  const int64_t G = H / Hk, threads = std::max(1, opt.num_threads), per_chunk = std::max<int64_t>(1, 64 / G);
  if (num_tokens * H > (int64_t{1} << 20) || D > (1 << 14)) return false;
  const int32_t* past = p.past_lens.ptr<const int32_t>();
  const int32_t* sb = p.subsequence_begins.ptr<const int32_t>();
  double sum_ctx = 0, partial_rows = 0;  // in double: the estimate itself must not overflow
  for (int64_t s = 0; s < p.past_lens.shape[0]; ++s) {
    const int64_t T = int64_t{sb[s + 1]} - sb[s], ctx = past[s] + T;
    const double parts = opt.partition_tokens > 0 ? double(ctx) / opt.partition_tokens + 2
                         : opt.deterministic      ? double(ctx) / 2048 + 2
                                                  : 8.0 * threads + 2;
    sum_ctx += ctx;
    partial_rows += double((T + per_chunk - 1) / per_chunk) * 64 * Hk * parts;
  }
  if (partial_rows * (D + 2) * 4 > double(1 << 28)) return false;  // 256 MB of partials
  if (p.scores.present() && sum_ctx > double(1 << 24)) return false;
  return true;
}

// FUZZ_PLAN_DUMP=1: prints the decoded call (to read a crash's input: ./fuzz_plan crash-file).
void dump(const Params& p, const pagedattn::Options& opt) {
  auto i32 = [](const TensorView& t) {
    std::string s = t.describe();
    if (t.present() && t.dtype == DType::i32 && t.device == Device::cpu && t.data && checked_numel(t) >= 0) {
      s += " {";
      for (int64_t i = 0; i < std::min<int64_t>(checked_numel(t), 32); ++i)
        s += (i ? ", " : "") + std::to_string(t.ptr<int32_t>()[i]);
      s += checked_numel(t) > 32 ? ", ...}" : "}";
    }
    return s;
  };
  std::fprintf(stderr,
               "num_heads %d sliding_window %d max_context_len %d scale %s\n"
               "query %s key %s value %s out %s\nkey_cache %s value_cache %s key_scale %s\n"
               "past_lens %s\nsubsequence_begins %s\nblock_indices %s\nblock_indices_begins %s\n"
               "alibi %s sinks %s qq_bias %s qq_bias_begins %s scores %s score_aggregation_window %s\n"
               "options: backend %s num_threads %d partition_tokens %d deterministic %d cpu_reference %d\n",
               p.num_heads, p.sliding_window, p.max_context_len, p.scale ? std::to_string(*p.scale).c_str() : "none",
               p.query.describe().c_str(), p.key.describe().c_str(), p.value.describe().c_str(),
               p.out.describe().c_str(), p.cache.key.describe().c_str(), p.cache.value.describe().c_str(),
               p.cache.key_scale.describe().c_str(), i32(p.past_lens).c_str(), i32(p.subsequence_begins).c_str(),
               i32(p.block_indices).c_str(), i32(p.block_indices_begins).c_str(), p.alibi_slopes.describe().c_str(),
               p.sinks.describe().c_str(), p.qq_bias.describe().c_str(), i32(p.qq_bias_begins).c_str(),
               p.scores.describe().c_str(), i32(p.score_aggregation_window).c_str(),
               pagedattn::backend_name(opt.backend), opt.num_threads, opt.partition_tokens, opt.deterministic,
               opt.cpu_reference);
}

void check_error(const pagedattn::ValidationError& e, const char* where) {
  if (e.input().empty() || e.rule().empty() || std::strlen(e.what()) == 0)
    fail(where, std::string("a ValidationError without an input or a rule: '") + e.what() + "'");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  Builder b(in);
  b.build();
  b.mutate();
  const Params& p = b.p;
  static const bool kDump = std::getenv("FUZZ_PLAN_DUMP") != nullptr;
  if (kDump) dump(p, b.opt);

  enum class Outcome { accepted, rejected, unsupported };
  auto attempt = [](const char* where, auto&& call, std::string* message) {
    try {
      call();
      return Outcome::accepted;
    } catch (const pagedattn::ValidationError& e) {
      check_error(e, where);
      *message = e.what();
      return Outcome::rejected;
    } catch (const pagedattn::UnsupportedError& e) {
      *message = e.what();
      return Outcome::unsupported;
    } catch (const std::exception& e) {
      fail(where, std::string("an exception other than ValidationError / UnsupportedError: ") + e.what());
    } catch (...) {
      fail(where, "a non-std exception");
    }
  };

  std::string vmsg, pmsg;
  const Outcome v = attempt(
      "validate()", [&] { pagedattn::validate(p); }, &vmsg);
  if (v == Outcome::accepted && !within_budget(p, b.opt)) return 0;
  const Outcome pl = attempt(
      "plan()",
      [&] {
        pagedattn::Plan plan = pagedattn::plan(p, b.opt);
        if (!plan.valid() || plan.backend() != b.opt.backend) fail("plan()", "an invalid plan or the wrong backend");
        (void)plan.describe();
        (void)plan.workspace_bytes();
      },
      &pmsg);
  if (v == Outcome::rejected && pl != Outcome::rejected)
    fail("plan()", "did not reject what validate() rejected: " + vmsg);
  // Options are plan()'s alone (validate() sees only Params): negative counts must be rejected there,
  // naming the option; valid options never make plan() reject what validate() accepted
  const bool bad_options = b.opt.num_threads < 0 || b.opt.partition_tokens < 0;
  if (bad_options && (pl != Outcome::rejected || pmsg.find("options.") == std::string::npos))
    fail("plan()", "did not reject negative options (num_threads / partition_tokens) by name: " + pmsg);
  if (!bad_options && v == Outcome::accepted && pl == Outcome::rejected && b.opt.backend == pagedattn::Backend::cpu &&
      b.all_on_cpu())
    fail("plan()", "rejected what validate() accepted (cpu backend, every tensor on the cpu): " + pmsg);
  return 0;
}
