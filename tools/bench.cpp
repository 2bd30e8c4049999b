// `pagedattn bench`: the seed scenario of speculative-decoding verify (DESIGN.md section 6).
//
// For each KV precision and context L: `layers` caches (one per layer) hold L tokens of `batch`
// sequences. Then, for each T, one forward of T new tokens per sequence with past_len = L is timed per
// `layers` layers (the op writes the new rows at L .. L+T-1 each repeat: the same positions again).
//   cpu:  wall clock of the layers' forwards, median of --repeats.
//   cuda: one plan per layer; the layers' run() calls captured in ONE CUDA graph on a non-default
//         stream; the graph replayed --repeats times, each replay timed with events; median. When the
//         caches of all layers are smaller than 3x L2, extra copies of the layers are allocated and the
//         replays rotate over them so that L2 does not serve the cache.
//
// Bytes moved per layer and sequence (ctx = L + T):
//   K and V in the attended range   ctx * Hk * D * 2 * sizeof(kv)
//   u8 only: scale and row minimum ctx * Hk * 2 * 2 * sizeof(f16)          (K and V; scale and min)
//   Q read                          T * H * D * sizeof(q)
//   O written                       T * H * D * sizeof(q)
//   new K/V rows read               T * Hk * D * 2 * sizeof(q)
#include "bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <unistd.h>
#if defined(_OPENMP)
#include <omp.h>
#endif

#include "buffer.h"
#include "common/numeric.h"
#include "testing/case.h"
#ifdef PAGEDATTN_WITH_CUDA
#include "cuda/bench_util.h"
#endif

namespace pagedattn {
namespace tools {

namespace {

using Clock = std::chrono::steady_clock;

std::size_t kv_bytes(KVPrecision p) { return p == KVPrecision::u8 || p == KVPrecision::fp8 ? 1 : 2; }
DType kv_dtype(KVPrecision p) {
  return p == KVPrecision::f16    ? DType::f16
         : p == KVPrecision::bf16 ? DType::bf16
         : p == KVPrecision::fp8  ? DType::f8e4m3
                                  : DType::u8;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// --- run-time facts for the report -------------------------------------------------------------------
std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string git_commit() {
  // The GPU machine gets a copy of the tree without .git: bench/gpu.sh passes the commit along.
  if (const char* env = std::getenv("PAGEDATTN_COMMIT"); env != nullptr && env[0] != 0) return env;
#ifdef PAGEDATTN_GIT_COMMIT
  return PAGEDATTN_GIT_COMMIT;
#else
  // The executable lives in the build folder inside the checkout: ask git there, then in the cwd.
  std::string dir = ".";
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    exe[n] = 0;
    dir = exe;
    dir = dir.substr(0, dir.find_last_of('/'));
  }
  for (const std::string& d : {dir, std::string(".")}) {
    const std::string cmd = "git -C '" + d + "' rev-parse --short HEAD 2>/dev/null";
    if (FILE* f = popen(cmd.c_str(), "r")) {
      char buf[128] = {0};
      const bool got = std::fgets(buf, sizeof(buf), f) != nullptr;
      const int rc = pclose(f);
      if (got && rc == 0 && buf[0]) {
        // "+dirty": the working tree differs from the commit (the figures are not that commit's)
        const std::string diff = "git -C '" + d + "' diff --quiet HEAD -- >/dev/null 2>&1";
        return trim(buf) + (std::system(diff.c_str()) != 0 ? "+dirty" : "");
      }
    }
  }
  return "unknown";
#endif
}

std::string utc_date() {
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string cpu_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      const auto c = line.find(':');
      if (c != std::string::npos) return trim(line.substr(c + 2));
    }
  return "unknown cpu";
}

// --- random contents ---------------------------------------------------------------------------------
// A pool of random bytes that are valid values of `t` (finite, in [lo, hi]); u8: any byte.
std::vector<uint8_t> random_pool(DType t, std::size_t bytes, float lo, float hi, std::mt19937_64& rng) {
  std::vector<uint8_t> pool(bytes);
  std::uniform_real_distribution<float> u(lo, hi);
  if (t == DType::u8) {
    for (auto& b : pool) b = static_cast<uint8_t>(rng() & 0xff);
  } else if (t == DType::f8e4m3) {
    for (auto& b : pool) b = num::f32_to_e4m3_bits(u(rng));
  } else if (t == DType::f32) {
    for (std::size_t i = 0; i + 4 <= bytes; i += 4) {
      const float x = u(rng);
      std::memcpy(&pool[i], &x, 4);
    }
  } else {
    for (std::size_t i = 0; i + 2 <= bytes; i += 2) {
      const float x = u(rng);
      const uint16_t h = t == DType::f16 ? num::f32_to_f16_bits(x) : num::f32_to_bf16_bits(x);
      std::memcpy(&pool[i], &h, 2);
    }
  }
  return pool;
}

// Fills `b` with copies of `pool` (its size a multiple of the element size).
// `b` <- the pool repeated from byte `start` on (wrapping at its end).
void fill_tiled(Buffer& b, const std::vector<uint8_t>& pool, std::size_t start = 0) {
  start %= pool.size();
  for (std::size_t off = 0; off < b.bytes();) {
    const std::size_t n = std::min(pool.size() - start, b.bytes() - off);
    b.upload(pool.data() + start, n, off);
    off += n;
    start = 0;
  }
}

void sync_device(Device d) {
#ifdef PAGEDATTN_WITH_CUDA
  if (d == Device::cuda) PA_CUDA(cudaDeviceSynchronize());
#else
  (void)d;
#endif
}

void fill_byte(Buffer& b, uint8_t v) {
  if (b.bytes() == 0) return;
  if (b.device() == Device::cpu) {
    std::memset(b.data(), v, b.bytes());
  } else {
#ifdef PAGEDATTN_WITH_CUDA
    PA_CUDA(cudaMemset(b.data(), v, b.bytes()));
    PA_CUDA(cudaDeviceSynchronize());  // NOTE: the op runs on a non-blocking stream, unordered with this
#endif
  }
}

// --- one layer's buffers -------------------------------------------------------------------------------
struct LayerBuffers {
  Buffer key_cache, value_cache;                                      // [num_blocks, Hk, bs, D]
  Buffer key_scale, key_min, value_scale, value_min;                    // u8: [num_blocks, Hk, bs] f16
  Buffer query, key, value, out;                                      // [rows, H*D] / [rows, Hk*D]
  Buffer lse;                                                         // --lse: [rows, H] f32
};

// Host metadata of one call: `batch` sequences of `T` new tokens after `past` cached ones (and, for a
// tree verify, each sequence's qq_bias mask).
struct Meta {
  std::vector<int32_t> past_lens, subsequence_begins, block_indices, block_indices_begins;
  int max_context_len = 0;
  int num_tokens = 0;
  std::vector<uint8_t> qq_bias;
  std::vector<int32_t> qq_bias_begins;
};

// A draft tree of T nodes in qq_bias form (row-major T x T): node i's parent is (i - 1) / 2 (a binary
// tree, breadth first), and a node attends itself and its ancestors.
std::vector<uint8_t> binary_tree_mask(int T) {
  std::vector<uint8_t> m(static_cast<std::size_t>(T) * T, 0);
  for (int t = 0; t < T; ++t)
    for (int u = t;; u = (u - 1) / 2) {
      m[static_cast<std::size_t>(t) * T + u] = 1;
      if (u == 0) break;
    }
  return m;
}

struct Setup {
  const BenchOptions& opt;
  KVPrecision kv;
  Device dev;
  int batch = 1;
  int context = 0;
  int max_tokens = 0;                  // largest T of the timed calls
  int blocks_per_seq = 0, num_blocks = 0;
  std::vector<int32_t> tables;         // batch block tables back to back (a shuffled permutation)

  Setup(const BenchOptions& o, KVPrecision k, Device d) : opt(o), kv(k), dev(d) {}

  std::size_t cache_bytes() const {  // one layer's K and V cache and (u8) their scales/row minima
    const std::size_t slots = static_cast<std::size_t>(num_blocks) * opt.kv_heads * opt.block_size;
    std::size_t b = slots * (opt.head_size + opt.dv()) * kv_bytes(kv);
    if (kv == KVPrecision::u8) b += 4 * slots * 2;
    return b;
  }

  Meta meta(int past, int T, bool tree = false) const {
    Meta m;
    const std::vector<uint8_t> mask = tree ? binary_tree_mask(T) : std::vector<uint8_t>{};
    for (int s = 0; s < batch; ++s) {
      m.past_lens.push_back(past);
      m.subsequence_begins.push_back(s * T);
      m.block_indices_begins.push_back(s * blocks_per_seq);
      if (tree) {
        m.qq_bias_begins.push_back(static_cast<int32_t>(m.qq_bias.size()));
        m.qq_bias.insert(m.qq_bias.end(), mask.begin(), mask.end());
      }
    }
    if (tree) m.qq_bias_begins.push_back(static_cast<int32_t>(m.qq_bias.size()));
    m.subsequence_begins.push_back(batch * T);
    m.block_indices_begins.push_back(batch * blocks_per_seq);
    m.block_indices = tables;
    m.max_context_len = past + T;
    m.num_tokens = batch * T;
    return m;
  }

  void allocate(LayerBuffers& L, int io_rows) const {
    const std::size_t slots = static_cast<std::size_t>(num_blocks) * opt.kv_heads * opt.block_size;
    L.key_cache = Buffer(dev, slots * opt.head_size * kv_bytes(kv));
    L.value_cache = Buffer(dev, slots * opt.dv() * kv_bytes(kv));
    if (kv == KVPrecision::u8) {
      L.key_scale = Buffer(dev, slots * 2);
      L.key_min = Buffer(dev, slots * 2);
      L.value_scale = Buffer(dev, slots * 2);
      L.value_min = Buffer(dev, slots * 2);
    }
    if (kv == KVPrecision::fp8) {  // one f32 scale per kv head, keys and values: 1/16 (random codes of
                                   // [-1, 1] read back in [-1/16, 1/16]; the op's write-in divides by it)
      const std::vector<float> sc(static_cast<std::size_t>(opt.kv_heads), 1.0f / 16);
      L.key_scale = Buffer(dev, sc.size() * sizeof(float));
      L.value_scale = Buffer(dev, sc.size() * sizeof(float));
      L.key_scale.upload(sc.data(), sc.size() * sizeof(float));
      L.value_scale.upload(sc.data(), sc.size() * sizeof(float));
    }
    allocate_io(L, io_rows);
  }
  void allocate_io(LayerBuffers& L, int rows) const {
    const std::size_t q = dtype_size(opt.qdtype);
    L.query = Buffer(dev, static_cast<std::size_t>(rows) * opt.heads * opt.head_size * q);
    L.out = Buffer(dev, static_cast<std::size_t>(rows) * opt.heads * opt.dv() * q);
    L.key = Buffer(dev, static_cast<std::size_t>(rows) * opt.kv_heads * opt.head_size * q);
    L.value = Buffer(dev, static_cast<std::size_t>(rows) * opt.kv_heads * opt.dv() * q);
    if (opt.lse) L.lse = Buffer(dev, static_cast<std::size_t>(rows) * opt.heads * sizeof(float));
  }

  // Params of one call over layer `cache` with inputs/outputs in `io` (may be the same buffers).
  Params params(const LayerBuffers& cache, const LayerBuffers& io, const Meta& m) const {
    Params p;
    p.num_heads = opt.heads;
    const int64_t H = opt.heads, Hk = opt.kv_heads, D = opt.head_size, Dv = opt.dv(), n = m.num_tokens;
    p.query = TensorView::contiguous(io.query.data(), opt.qdtype, dev, {n, H * D});
    p.key = TensorView::contiguous(io.key.data(), opt.qdtype, dev, {n, Hk * D});
    p.value = TensorView::contiguous(io.value.data(), opt.qdtype, dev, {n, Hk * Dv});
    p.out = TensorView::contiguous(io.out.data(), opt.qdtype, dev, {n, H * Dv});
    if (io.lse.data() != nullptr) p.lse = TensorView::contiguous(io.lse.data(), DType::f32, dev, {n, H});
    const DType kt = kv_dtype(kv);
    p.cache.key = TensorView::contiguous(cache.key_cache.data(), kt, dev, {num_blocks, Hk, opt.block_size, D});
    p.cache.value = TensorView::contiguous(cache.value_cache.data(), kt, dev, {num_blocks, Hk, opt.block_size, Dv});
    if (kv == KVPrecision::u8) {
      auto sv = [&](const Buffer& b) {
        return TensorView::contiguous(b.data(), DType::f16, dev, {num_blocks, Hk, opt.block_size});
      };
      p.cache.key_scale = sv(cache.key_scale);
      p.cache.key_min = sv(cache.key_min);
      p.cache.value_scale = sv(cache.value_scale);
      p.cache.value_min = sv(cache.value_min);
    }
    if (kv == KVPrecision::fp8) {
      p.cache.key_scale = TensorView::contiguous(cache.key_scale.data(), DType::f32, dev, {Hk});
      p.cache.value_scale = TensorView::contiguous(cache.value_scale.data(), DType::f32, dev, {Hk});
    }
    auto host_i32 = [](const std::vector<int32_t>& v) {
      return TensorView::contiguous(const_cast<int32_t*>(v.data()), DType::i32, Device::cpu,
                                    {static_cast<int64_t>(v.size())});
    };
    p.past_lens = host_i32(m.past_lens);
    p.subsequence_begins = host_i32(m.subsequence_begins);
    p.block_indices = host_i32(m.block_indices);
    p.block_indices_begins = host_i32(m.block_indices_begins);
    p.max_context_len = m.max_context_len;
    if (!m.qq_bias.empty()) {
      p.qq_bias = TensorView::contiguous(const_cast<uint8_t*>(m.qq_bias.data()), DType::u8, Device::cpu,
                                         {static_cast<int64_t>(m.qq_bias.size())});
      p.qq_bias_begins = host_i32(m.qq_bias_begins);
    }
    return p;
  }

  Options options(void* stream) const {
    Options o;
    o.backend = opt.backend;
    o.stream = stream;
    o.partition_tokens = opt.partition_tokens;
    o.programmatic_launch = opt.programmatic_launch;
    o.deterministic = opt.deterministic;
    return o;
  }
};

// Fills the cache positions [0, context) of every sequence with random values.
void fill_random(Setup& S, LayerBuffers& L, std::mt19937_64& rng) {
  constexpr std::size_t kPoolBytes = 8u << 20;
  const DType kt = kv_dtype(S.kv);
  // NOTE: one pool per layer call would cost host time for nothing: values do not change the timing.
  static thread_local std::vector<uint8_t> pool_kv[4], pool_scale, pool_min;
  std::vector<uint8_t>& pkv = pool_kv[static_cast<int>(S.kv)];
  if (pkv.empty()) pkv = random_pool(kt, kPoolBytes, -1.0f, 1.0f, rng);
  fill_tiled(L.key_cache, pkv);
  fill_tiled(L.value_cache, pkv);
  if (S.kv == KVPrecision::u8) {
    if (pool_scale.empty()) pool_scale = random_pool(DType::f16, 1u << 20, 2.0f / 255, 4.0f / 255, rng);
    if (pool_min.empty()) pool_min = random_pool(DType::f16, 1u << 20, -2.0f, -1.0f, rng);
    fill_tiled(L.key_scale, pool_scale);
    fill_tiled(L.value_scale, pool_scale);
    fill_tiled(L.key_min, pool_min);
    fill_tiled(L.value_min, pool_min);
  }
}

// Queries, keys and values from one pool, each from its own random 256-byte-aligned start: from one start
// the query rows equalled key rows of the inputs, and --fill op wrote those keys at every chunk, so a
// query met copies of itself every chunk (timing depended on it: bench/NOTES.md, runs mw2-mw6).
void fill_inputs(const BenchOptions& opt, LayerBuffers& L, std::mt19937_64& rng) {
  static thread_local std::vector<uint8_t> pool;
  if (pool.empty()) pool = random_pool(opt.qdtype, 4u << 20, -1.0f, 1.0f, rng);
  auto start = [&] { return static_cast<std::size_t>(rng() % (pool.size() / 256)) * 256; };
  fill_tiled(L.query, pool, start());
  fill_tiled(L.key, pool, start());
  fill_tiled(L.value, pool, start());
  fill_byte(L.out, 0xff);  // NaN: the timed calls must overwrite it
}

// Fills the cache by running the op itself on prefill chunks: positions [0, context) of each sequence.
// Returns the chunk size used (the backend may not support long chunks yet: then 64/G tokens).
int fill_by_op(Setup& S, std::vector<LayerBuffers>& layers, void* stream, std::mt19937_64& rng) {
  const BenchOptions& opt = S.opt;
  int chunk = std::max(1, std::min(opt.fill_chunk, S.context));
  for (int attempt = 0; attempt < 2; ++attempt) {
    LayerBuffers io;
    S.allocate_io(io, chunk * S.batch);
    fill_inputs(opt, io, rng);
    sync_device(S.dev);  // NOTE: pageable uploads may still be in flight; the op runs on another stream
    try {
      for (int pos = 0; pos < S.context; pos += chunk) {
        if (pos > 0) {  // each chunk its own keys and values (once the previous chunk's calls are done)
          sync_device(S.dev);
          fill_inputs(opt, io, rng);
          sync_device(S.dev);
        }
        const int c = std::min(chunk, S.context - pos);
        const Meta m = S.meta(pos, c);
        for (LayerBuffers& L : layers) forward(S.params(L, io, m), S.options(stream));
      }
      sync_device(S.dev);
      return chunk;
    } catch (const UnsupportedError& e) {
      const int small = std::max(1, std::min(16, 64 / std::max(1, opt.heads / opt.kv_heads)));
      if (attempt > 0 || chunk <= small) throw;
      std::printf("note: --fill op: %d-token chunks unsupported (%s); filling with %d-token chunks\n", chunk,
                  e.what(), small);
      chunk = small;
    }
  }
  return chunk;
}

// Checks that a timed call wrote finite values to `out` (it was poisoned with NaN).
void check_finite_out(const Buffer& out, DType t, int64_t n) {
  std::vector<uint8_t> host(static_cast<std::size_t>(n) * dtype_size(t));
  out.download(host.data(), host.size());
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(testing::load_as_float(host.data(), t, i)))
      throw RuntimeError("bench: output element " + std::to_string(i) +
                         " is not finite after the timed call (the op did not write it, or produced NaN/inf)");
}

// --- bytes moved (see the header comment) ----------------------------------------------------------------
struct Bytes {
  double kv = 0, kv_params = 0, q = 0, o = 0, new_kv = 0;
  double total() const { return kv + kv_params + q + o + new_kv; }
};

Bytes bytes_moved(const BenchOptions& opt, KVPrecision kv, int batch, int context, int T) {
  const double ctx = static_cast<double>(context) + T, Hk = opt.kv_heads, H = opt.heads, D = opt.head_size,
               Dv = opt.dv();
  const double qb = static_cast<double>(dtype_size(opt.qdtype)), n = static_cast<double>(batch) * opt.layers;
  Bytes b;
  b.kv = n * ctx * Hk * (D + Dv) * static_cast<double>(kv_bytes(kv));
  b.kv_params = kv == KVPrecision::u8 ? n * ctx * Hk * 2 * 2 * 2 : 0;
  b.q = n * T * H * D * qb;
  b.o = n * T * H * Dv * qb;
  b.new_kv = n * T * Hk * (D + Dv) * qb;
  return b;
}

struct Row {
  std::string kv;
  int batch = 1, context = 0, T = 0, layers = 0, sets = 1;
  int head_size = 0, value_head_size = 0, group = 0;  // D, Dv and G = H / Hk (rows per kv head: T * G)
  bool tree = false;             // T nodes of a draft tree (qq_bias), else a chain
  bool interleaved = false;      // timed in rotation with its configuration's other calls (--interleave)
  double us = 0, us_min = 0, ratio = 0, gbs = 0, pct = 0;
  Bytes bytes;
};

// --- timing ------------------------------------------------------------------------------------------------
// One replay's work: run(set) issues every call of copy `set` of the layers (cuda: on the bench stream,
// captured into one CUDA graph per set).
using Enqueue = std::function<void(std::size_t set)>;

// Calls timed in rotation: run(call, set) issues every call of copy `set` of the layers of `call`. Each
// round replays every call once, in order (call 0, 1, ..., then the next round), so that calls timed
// together see the same clock and power state (--interleave); one call is the plain case.
using EnqueueCall = std::function<void(std::size_t call, std::size_t set)>;

// Times `repeats` rounds of set 0 (wall clock); returns each call's per-repeat microseconds.
std::vector<std::vector<double>> time_cpu(const EnqueueCall& run, std::size_t calls, int warmup, int repeats) {
  for (int w = 0; w < std::min(warmup, 1); ++w)
    for (std::size_t c = 0; c < calls; ++c) run(c, 0);
  std::vector<std::vector<double>> us(calls);
  for (int r = 0; r < repeats; ++r)
    for (std::size_t c = 0; c < calls; ++c) {
      const auto t0 = Clock::now();
      run(c, 0);
      us[c].push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
  return us;
}

#ifdef PAGEDATTN_WITH_CUDA
// Captures each (call, set) in one CUDA graph; replay k (round k / calls) runs call k % calls on set
// k % sets, so that consecutive replays never read the same copy of the caches (each set is reused only
// every `sets` replays, as with one call); each replay timed with events.
std::vector<std::vector<double>> time_cuda(const EnqueueCall& run, std::size_t calls, std::size_t sets,
                                           cudaStream_t stream, int warmup, int repeats) {
  std::vector<cudaGraphExec_t> execs(calls * sets, nullptr);  // [call][set]
  struct Cleanup {
    std::vector<cudaGraphExec_t>& e;
    ~Cleanup() {
      for (auto x : e)
        if (x) cudaGraphExecDestroy(x);
    }
  } cleanup{execs};
  for (std::size_t c = 0; c < calls; ++c)
    for (std::size_t s = 0; s < sets; ++s) {
      cudaGraph_t graph = nullptr;
      PA_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      try {
        run(c, s);
      } catch (...) {
        cudaStreamEndCapture(stream, &graph);
        if (graph) cudaGraphDestroy(graph);
        throw;
      }
      PA_CUDA(cudaStreamEndCapture(stream, &graph));
      const cudaError_t e = cudaGraphInstantiate(&execs[c * sets + s], graph, 0);
      cudaGraphDestroy(graph);
      cuda_check(e, "cudaGraphInstantiate (run() must be capturable in a CUDA graph)");
    }
  for (int w = 0; w < warmup; ++w)
    for (std::size_t c = 0; c < calls; ++c)
      for (std::size_t s = 0; s < sets; ++s) PA_CUDA(cudaGraphLaunch(execs[c * sets + s], stream));
  const std::size_t n = static_cast<std::size_t>(repeats) * calls;  // replays, round by round
  std::vector<cudaEvent_t> ev(n + 1);
  for (auto& e : ev) PA_CUDA(cudaEventCreate(&e));
  std::vector<std::vector<double>> us(calls);
  cudaError_t err = cudaEventRecord(ev[0], stream);
  for (std::size_t k = 0; k < n && err == cudaSuccess; ++k) {
    err = cudaGraphLaunch(execs[(k % calls) * sets + k % sets], stream);
    if (err == cudaSuccess) err = cudaEventRecord(ev[k + 1], stream);
  }
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  for (std::size_t k = 0; k < n && err == cudaSuccess; ++k) {
    float ms = 0;
    err = cudaEventElapsedTime(&ms, ev[k], ev[k + 1]);
    us[k % calls].push_back(1000.0 * ms);
  }
  for (auto& e : ev) cudaEventDestroy(e);
  cuda_check(err, "timing the CUDA graph replays");
  return us;
}
#endif

struct Env {
  std::string device, commit, date;
  double ceiling_gbs = 0;
  std::string ceiling_method;
  std::size_t l2_bytes = 0;
  void* stream = nullptr;
};

std::vector<std::vector<double>> time_rotation(Device dev, const Env& env, std::size_t calls, std::size_t sets,
                                               const EnqueueCall& run, int warmup, int repeats) {
  if (dev == Device::cpu) return time_cpu(run, calls, warmup, repeats);
#ifdef PAGEDATTN_WITH_CUDA
  return time_cuda(run, calls, sets, static_cast<cudaStream_t>(env.stream), warmup, repeats);
#else
  (void)env, (void)sets;
  throw UnsupportedError("bench: this build has no CUDA backend");
#endif
}

// One call (its `sets` copies replayed round-robin); per-replay microseconds.
std::vector<double> time_replays(Device dev, const Env& env, std::size_t sets, const Enqueue& run, int warmup,
                                 int repeats) {
  return time_rotation(dev, env, 1, sets, [&](std::size_t, std::size_t s) { run(s); }, warmup, repeats).front();
}

// Each set's plans run in turn (one layer each).
std::vector<double> time_plans(Device dev, const Env& env, const std::vector<std::vector<Plan>>& plans,
                               const std::vector<std::vector<Params>>& params, int warmup, int repeats) {
  return time_replays(dev, env, plans.size(), [&](std::size_t s) {
    for (std::size_t l = 0; l < plans[s].size(); ++l) plans[s][l].run(params[s][l]);
  }, warmup, repeats);
}

// Copies of the layers so that one replay's caches (per_set bytes) together exceed 3x L2 (cuda only).
int rotation_sets(const Env& env, Device dev, double per_set) {
  if (dev != Device::cuda || env.l2_bytes == 0 || per_set <= 0) return 1;
  return std::max(1, std::min(64, static_cast<int>(std::ceil(3.0 * static_cast<double>(env.l2_bytes) / per_set))));
}

// The layers of one (kv, batch, context) configuration with room for `max_tokens` new tokens per sequence:
// S sized (block tables a shuffled permutation), `sets` copies of the layers so that the caches of one
// replay's layers are not served from L2 (cuda), inputs and caches filled (--fill).
std::vector<std::vector<LayerBuffers>> prepare_layers(Setup& S, const Env& env, int batch, int context,
                                                      int max_tokens, std::mt19937_64& rng) {
  const BenchOptions& opt = S.opt;
  S.batch = batch;
  S.context = context;
  S.max_tokens = max_tokens;
  S.blocks_per_seq = (context + S.max_tokens + opt.block_size - 1) / opt.block_size;
  const int64_t nb = static_cast<int64_t>(batch) * S.blocks_per_seq;
  if (nb > INT32_MAX) throw ValidationError("--context", "too many cache blocks for i32 block ids");
  S.num_blocks = static_cast<int>(nb);
  S.tables.resize(static_cast<std::size_t>(S.num_blocks));
  std::iota(S.tables.begin(), S.tables.end(), 0);
  std::shuffle(S.tables.begin(), S.tables.end(), rng);  // paged: blocks in no particular order

  const double per_set = static_cast<double>(S.cache_bytes()) * opt.layers;
  const int sets = rotation_sets(env, S.dev, per_set);
  std::vector<std::vector<LayerBuffers>> L(static_cast<std::size_t>(sets));
  for (auto& set : L) {
    set.resize(static_cast<std::size_t>(opt.layers));
    for (auto& ly : set) {
      S.allocate(ly, S.max_tokens * batch);
      fill_inputs(opt, ly, rng);
    }
  }
  sync_device(S.dev);
  const auto tf = Clock::now();
  int chunk = 0;
  for (auto& set : L) {
    if (opt.fill == "op")
      chunk = fill_by_op(S, set, env.stream, rng);
    else
      for (auto& ly : set) fill_random(S, ly, rng);
  }
  sync_device(S.dev);
  const double fill_s = std::chrono::duration<double>(Clock::now() - tf).count();
  if (opt.verbose)
    std::printf("# kv=%s seqs=%d context=%d: %d layer(s) x %d set(s), %.1f MB of cache per set; filled (%s%s) in %.1f s\n",
              kv_precision_name(S.kv), batch, context, opt.layers, sets, per_set / 1e6, opt.fill.c_str(),
              opt.fill == "op" ? (", " + std::to_string(chunk) + "-token chunks").c_str() : "", fill_s);
  std::fflush(stdout);
  return L;
}

// Runs one (kv, batch, context) configuration for every T of `tokens` (chains), then of `trees` (draft
// trees of T nodes); appends rows. T/T1 is relative to the first chain.
void run_config(const BenchOptions& opt, const Env& env, KVPrecision kv, int batch, int context,
                const std::vector<int>& tokens, std::vector<Row>& rows, const std::vector<int>& trees = {}) {
  const Device dev = opt.backend == Backend::cuda ? Device::cuda : Device::cpu;
  Setup S(opt, kv, dev);
  int max_tokens = *std::max_element(tokens.begin(), tokens.end());
  for (int T : trees) max_tokens = std::max(max_tokens, T);
  std::mt19937_64 rng(opt.seed ^ (static_cast<uint64_t>(context) << 20) ^ static_cast<uint64_t>(kv));
  std::vector<std::vector<LayerBuffers>> L = prepare_layers(S, env, batch, context, max_tokens, rng);
  const int sets = static_cast<int>(L.size());

  double us_t1 = 0;
  const bool sweep = opt.scenario == "sweep";
  struct Call {
    int T;
    bool tree;
    Meta m;
    std::vector<std::vector<Plan>> plans;    // [set][layer]
    std::vector<std::vector<Params>> params;
  };
  auto make_call = [&](int T, bool tree) {
    Call c{T, tree, S.meta(context, T, tree), std::vector<std::vector<Plan>>(static_cast<std::size_t>(sets)),
           std::vector<std::vector<Params>>(static_cast<std::size_t>(sets))};
    for (int s = 0; s < sets; ++s)
      for (int l = 0; l < opt.layers; ++l) {
        const LayerBuffers& ly = L[static_cast<std::size_t>(s)][static_cast<std::size_t>(l)];
        c.params[static_cast<std::size_t>(s)].push_back(S.params(ly, ly, c.m));
        c.plans[static_cast<std::size_t>(s)].push_back(plan(c.params[static_cast<std::size_t>(s)].back(), S.options(env.stream)));
      }
    if (opt.verbose) std::printf("%s\n", c.plans[0][0].describe().c_str());
    return c;
  };
  auto run_call = [](const Call& c, std::size_t s) {
    for (std::size_t l = 0; l < c.plans[s].size(); ++l) c.plans[s][l].run(c.params[s][l]);
  };
  // the call's output (layer 0 of set 0) rows all finite (the buffer starts poisoned with NaN)
  auto check_call = [&](const Call& c) {
    check_finite_out(L[0][0].out, opt.qdtype, static_cast<int64_t>(c.m.num_tokens) * opt.heads * opt.dv());
  };
  std::vector<std::pair<int, bool>> order;  // (T, tree)
  for (int T : tokens) order.emplace_back(T, false);
  for (int T : trees) order.emplace_back(T, true);
  auto emit = [&](const Call& c, const std::vector<double>& us) {
    Row r;
    r.kv = kv_precision_name(kv);
    r.batch = batch;
    r.context = context;
    r.T = c.T;
    r.layers = opt.layers;
    r.sets = sets;
    r.head_size = opt.head_size;
    r.value_head_size = opt.dv();
    r.group = opt.heads / opt.kv_heads;
    r.tree = c.tree;
    r.interleaved = opt.interleave && order.size() > 1;
    r.us = median(us);
    r.us_min = *std::min_element(us.begin(), us.end());
    if (!c.tree && c.T == tokens.front()) us_t1 = r.us;
    r.ratio = us_t1 > 0 ? r.us / us_t1 : 0;
    r.bytes = bytes_moved(opt, kv, batch, context, c.T);
    r.gbs = r.bytes.total() / (r.us * 1e-6) / 1e9;
    r.pct = env.ceiling_gbs > 0 ? 100.0 * r.gbs / env.ceiling_gbs : 0;
    rows.push_back(r);
    if (sweep)
      std::printf("%4d %3d %-5s %5d %8d %-5s %3d %5d %13.1f %7.2f %10.2f %9.1f %7.1f\n", r.head_size, r.group,
                  r.kv.c_str(), r.batch, r.context, c.tree ? "tree" : "chain", r.T, r.T * r.group, r.us, r.ratio,
                  r.bytes.total() / 1e6, r.gbs, r.pct);
    else
      std::printf("%-5s %5d %8d %3d %13.1f %7.2f %10.2f %9.1f %7.1f\n", r.kv.c_str(), r.batch, r.context, r.T, r.us,
                  r.ratio, r.bytes.total() / 1e6, r.gbs, r.pct);
    std::fflush(stdout);
  };
  if (!opt.interleave) {  // one call at a time: its plans, its replays, its row
    for (const auto& [T, tree] : order) {
      const Call c = make_call(T, tree);
      const std::vector<double> us = time_rotation(dev, env, 1, static_cast<std::size_t>(sets),
                                                   [&](std::size_t, std::size_t s) { run_call(c, s); }, opt.warmup,
                                                   opt.repeats).front();
      check_call(c);
      emit(c, us);
    }
    return;
  }
  // --interleave: every call's plans first, then rounds of one replay of each call in turn
  std::vector<Call> calls;
  for (const auto& [T, tree] : order) calls.push_back(make_call(T, tree));
  const std::vector<std::vector<double>> us = time_rotation(
      dev, env, calls.size(), static_cast<std::size_t>(sets),
      [&](std::size_t c, std::size_t s) { run_call(calls[c], s); }, opt.warmup, opt.repeats);
  for (std::size_t i = 0; i < calls.size(); ++i) {
    fill_byte(L[0][0].out, 0xff);  // each call's own output checked: poisoned, one more run, finite
    sync_device(dev);
    run_call(calls[i], 0);
    sync_device(dev);
    check_call(calls[i]);
    emit(calls[i], us[i]);
  }
}

struct Slope {
  std::string kv;
  int batch = 1, T = 0, from = 0, to = 0;
  double us_per_1k = 0;
};

std::vector<Slope> slopes(const std::vector<Row>& rows) {
  std::vector<Slope> out;
  for (const Row& a : rows) {
    // a: the smallest context of its (kv, batch, T); b: the largest
    bool smallest = true;
    const Row* b = &a;
    for (const Row& x : rows) {
      if (x.kv != a.kv || x.batch != a.batch || x.T != a.T) continue;
      if (x.context < a.context) smallest = false;
      if (x.context > b->context) b = &x;
    }
    if (!smallest || b->context == a.context) continue;
    Slope s;
    s.kv = a.kv;
    s.batch = a.batch;
    s.T = a.T;
    s.from = a.context;
    s.to = b->context;
    s.us_per_1k = (b->us - a.us) / ((b->context - a.context) / 1024.0);
    out.push_back(s);
  }
  return out;
}

void print_header(const BenchOptions& opt, const char* title) {
  std::printf("\n%s\n", title);
  char us_col[32];
  std::snprintf(us_col, sizeof(us_col), "us/%d layers", opt.layers);
  std::printf("%-5s %5s %8s %3s %13s %7s %10s %9s %7s\n", "kv", "seqs", "context", "T", us_col,
              "T/T1", "MB moved", "GB/s", "% ceil");
}

// The sweep of issue 21: per head size D and group G (H = G * Hk), every kv and context, one sequence:
// chains of every T and trees; then the batch scenario's sequences and context (cuda 32 x 8k) at T = 1, 4,
// 8 per D at G = 8. The options' own --heads/--kv-heads/--head-size are not used.
void run_sweep(const BenchOptions& opt, const Env& env, std::vector<Row>& rows) {
  std::printf("\nsweep scenario: one sequence per row (rows per kv head = T * G; trees: qq_bias, node i's parent"
              " (i - 1) / 2), then %d sequences x %d\n", opt.batch_seqs, opt.batch_context);
  char us_col[32];
  std::snprintf(us_col, sizeof(us_col), "us/%d layers", opt.layers);
  std::printf("%4s %3s %-5s %5s %8s %-5s %3s %5s %13s %7s %10s %9s %7s\n", "D", "G", "kv", "seqs", "context",
              "shape", "T", "rows", us_col, "T/T1", "MB moved", "GB/s", "% ceil");
  for (int D : opt.sweep_head_sizes)
    for (int G : opt.sweep_groups) {
      BenchOptions o = opt;
      o.head_size = D;
      o.kv_heads = opt.sweep_kv_heads;
      o.heads = G * opt.sweep_kv_heads;
      for (KVPrecision kv : opt.kvs)
        for (int L : opt.contexts) run_config(o, env, kv, 1, L, opt.tokens, rows, opt.sweep_trees);
    }
  for (int D : opt.sweep_head_sizes) {
    BenchOptions o = opt;
    o.head_size = D;
    o.kv_heads = opt.sweep_kv_heads;
    o.heads = 8 * opt.sweep_kv_heads;
    for (KVPrecision kv : opt.kvs) run_config(o, env, kv, opt.batch_seqs, opt.batch_context, {1, 4, 8}, rows);
  }
}

// --- the split scenario (issue 27): a context cut into shards, merged through lse -------------------------
struct SplitRow {
  std::string kv;
  int context = 0, T = 0, shards = 0, layers = 0, sets = 1;
  double us_whole = 0, us_split = 0, us_merge = 0;  // medians per replay of all layers
  double rel_l2 = 0;                                // split-and-merged out against the whole call's
};

// Per (kv, context, T), one sequence with lse: the whole call; the shards, each its own call (the context
// cut at block boundaries into opt.split_shards near-equal parts; all but the last prefix_only, the last
// holding the rest and writing the new tokens), then merge_states of their (out, lse) into out; and
// merge_states alone. The shards run one after another here (on one device: cascade attention's cost);
// across devices each shard runs on its own and only the merge adds to the critical path.
void run_split(const BenchOptions& base, const Env& env, std::vector<SplitRow>& rows) {
  BenchOptions opt = base;
  opt.lse = true;
  const Device dev = opt.backend == Backend::cuda ? Device::cuda : Device::cpu;
  const int64_t H = opt.heads, D = opt.head_size;
  std::printf("\nsplit scenario: one sequence's context in %d shards at block boundaries (all but the last"
              " prefix_only), each with lse, merged by merge_states; us per %d layers\n", opt.split_shards, opt.layers);
  std::printf("%-5s %8s %3s %6s %12s %12s %9s %12s %14s %10s\n", "kv", "context", "T", "shards", "whole",
              "split+merge", "ratio", "merge", "merge/layer", "rel_l2");
  for (KVPrecision kv : opt.kvs)
    for (int context : opt.contexts) {
      const int k = std::max(1, std::min(opt.split_shards, context / opt.block_size));
      if (k < 2) continue;  // fewer than two whole blocks: nothing to split
      Setup S(opt, kv, dev);
      std::mt19937_64 rng(opt.seed ^ (static_cast<uint64_t>(context) << 20) ^ static_cast<uint64_t>(kv));
      std::vector<std::vector<LayerBuffers>> L =
          prepare_layers(S, env, 1, context, *std::max_element(opt.tokens.begin(), opt.tokens.end()), rng);
      const std::size_t sets = L.size();
      const int ctx_blocks = context / opt.block_size;  // whole blocks of the cached context, cut among shards
      for (int T : opt.tokens) {
        const Meta whole = S.meta(context, T);
        // shard i holds blocks [cut[i], cut[i+1]) of the table; the last also the partial block and the new tokens
        std::vector<int> cut(static_cast<std::size_t>(k) + 1);
        for (int i = 0; i <= k; ++i) cut[static_cast<std::size_t>(i)] = static_cast<int>(int64_t{ctx_blocks} * i / k);
        cut[static_cast<std::size_t>(k)] = S.blocks_per_seq;
        std::vector<Meta> metas(static_cast<std::size_t>(k));
        for (int i = 0; i < k; ++i) {
          Meta& m = metas[static_cast<std::size_t>(i)];
          const int b0 = cut[static_cast<std::size_t>(i)], b1 = cut[static_cast<std::size_t>(i) + 1];
          const bool last = i == k - 1;
          const int past = last ? context - b0 * opt.block_size : (b1 - b0) * opt.block_size;
          m.past_lens = {past};
          m.subsequence_begins = {0, T};
          m.block_indices.assign(S.tables.begin() + b0, S.tables.begin() + b1);
          m.block_indices_begins = {0, b1 - b0};
          m.max_context_len = past + T;
          m.num_tokens = T;
        }
        // per set and layer: each shard's out and lse, its params and plan; the merge's views
        struct Part {
          Buffer out, lse;
        };
        std::vector<std::vector<std::vector<Part>>> parts(sets);
        std::vector<std::vector<Params>> p_whole(sets), p_shards(sets);
        std::vector<std::vector<Plan>> pl_whole(sets), pl_shards(sets);
        std::vector<std::vector<std::vector<TensorView>>> m_outs(sets), m_lses(sets);
        std::vector<std::vector<TensorView>> m_out(sets), m_lse(sets);
        const Options o = S.options(env.stream);
        for (std::size_t st = 0; st < sets; ++st)
          for (int l = 0; l < opt.layers; ++l) {
            const LayerBuffers& ly = L[st][static_cast<std::size_t>(l)];
            p_whole[st].push_back(S.params(ly, ly, whole));
            pl_whole[st].push_back(plan(p_whole[st].back(), o));
            parts[st].emplace_back();
            std::vector<TensorView> outs, lses;
            for (int i = 0; i < k; ++i) {
              Part pt{Buffer(dev, static_cast<std::size_t>(T) * H * D * dtype_size(opt.qdtype)),
                      Buffer(dev, static_cast<std::size_t>(T) * H * sizeof(float))};
              Params p = S.params(ly, ly, metas[static_cast<std::size_t>(i)]);
              p.out = TensorView::contiguous(pt.out.data(), opt.qdtype, dev, {T, H * D});
              p.lse = TensorView::contiguous(pt.lse.data(), DType::f32, dev, {T, H});
              if (i < k - 1) {
                p.prefix_only = true;
                p.key = p.value = TensorView{};
              }
              outs.push_back(p.out);
              lses.push_back(p.lse);
              p_shards[st].push_back(p);
              pl_shards[st].push_back(plan(p, o));
              parts[st].back().push_back(std::move(pt));
            }
            m_outs[st].push_back(outs);
            m_lses[st].push_back(lses);
            m_out[st].push_back(p_whole[st].back().out);
            m_lse[st].push_back(p_whole[st].back().lse);
          }
        const int64_t n_out = int64_t{T} * H * D;
        auto out_host = [&] {
          sync_device(dev);
          std::vector<uint8_t> h(static_cast<std::size_t>(n_out) * dtype_size(opt.qdtype));
          L[0][0].out.download(h.data(), h.size());
          return h;
        };
        auto merge = [&](std::size_t st, int l) {
          merge_states(m_outs[st][static_cast<std::size_t>(l)], m_lses[st][static_cast<std::size_t>(l)],
                       m_out[st][static_cast<std::size_t>(l)], m_lse[st][static_cast<std::size_t>(l)], o);
        };
        SplitRow r;
        r.kv = kv_precision_name(kv);
        r.context = context;
        r.T = T;
        r.shards = k;
        r.layers = opt.layers;
        r.sets = static_cast<int>(sets);
        // every call writes the same new tokens into the same slots, so the replays can run in any order
        r.us_whole = median(time_plans(dev, env, pl_whole, p_whole, opt.warmup, opt.repeats));
        check_finite_out(L[0][0].out, opt.qdtype, n_out);
        const std::vector<uint8_t> want = out_host();
        for (auto& set : L)
          for (auto& ly : set) fill_byte(ly.out, 0xff);  // NaN: the merge must overwrite it
        r.us_split = median(time_replays(dev, env, sets, [&](std::size_t st) {
          for (int l = 0; l < opt.layers; ++l) {
            for (int i = 0; i < k; ++i) {
              const std::size_t j = static_cast<std::size_t>(l) * k + i;
              pl_shards[st][j].run(p_shards[st][j]);
            }
            merge(st, l);
          }
        }, opt.warmup, opt.repeats));
        check_finite_out(L[0][0].out, opt.qdtype, n_out);
        const std::vector<uint8_t> got = out_host();
        std::vector<float> want_f(static_cast<std::size_t>(n_out));
        for (int64_t i = 0; i < n_out; ++i) want_f[static_cast<std::size_t>(i)] = testing::load_as_float(want.data(), opt.qdtype, i);
        r.rel_l2 = testing::compare(got.data(), opt.qdtype, want_f.data(), n_out).rel_l2;
        // two roundings of the output to the query dtype (the shards', then the merge's) against one
        const double tol = opt.qdtype == DType::f32 ? 1e-5 : opt.qdtype == DType::f16 ? 2e-3 : 1.6e-2;
        if (!(r.rel_l2 <= tol))
          throw RuntimeError("bench split: the merged out differs from the whole call's (rel_l2 " +
                             std::to_string(r.rel_l2) + " > " + std::to_string(tol) + ")");
        r.us_merge = median(time_replays(dev, env, sets, [&](std::size_t st) {
          for (int l = 0; l < opt.layers; ++l) merge(st, l);
        }, opt.warmup, opt.repeats));
        rows.push_back(r);
        std::printf("%-5s %8d %3d %6d %12.1f %12.1f %9.3f %12.2f %14.2f %10.2e\n", r.kv.c_str(), context, T, k,
                    r.us_whole, r.us_split, r.us_split / r.us_whole, r.us_merge, r.us_merge / opt.layers, r.rel_l2);
        std::fflush(stdout);
      }
    }
}

// --- long-query scenarios: prefill from zero, a prefill chunk, a mixed batch ------------------------------
// FLOPs: 4*H*D per (query, key) pair. Query t (0-based) of a sequence with past_len P attends P+t+1 keys
// (causal), so a sequence counts T*L_eff pairs with L_eff = P + (T+1)/2 (prefill from zero: (L+1)/2).
const char* const kFlopsFormula =
    "FLOPs = 4*T*L_eff*D*H per sequence, L_eff = past_len + (T+1)/2 (causal average; prefill from zero: (L+1)/2)";

struct Seq {
  int past = 0, T = 0;
};

double flops_of(const BenchOptions& o, const std::vector<Seq>& seqs) {
  double pairs = 0;
  for (const Seq& q : seqs) pairs += static_cast<double>(q.T) * (q.past + (q.T + 1) / 2.0);
  return 4.0 * o.heads * o.head_size * pairs;
}

Bytes bytes_of(const BenchOptions& o, KVPrecision kv, const std::vector<Seq>& seqs) {  // o.layers = 1
  Bytes b;
  for (const Seq& q : seqs) {
    const Bytes x = bytes_moved(o, kv, 1, q.past, q.T);
    b.kv += x.kv;
    b.kv_params += x.kv_params;
    b.q += x.q;
    b.o += x.o;
    b.new_kv += x.new_kv;
  }
  return b;
}

// The sequences of the calls over one cache; `sets` copies of the cache (and of the io rows) to rotate.
struct SeqCache {
  std::vector<Seq> seqs;
  std::vector<std::vector<int32_t>> tables;  // per sequence: a slice of a shuffled permutation of the blocks
  std::vector<LayerBuffers> sets;            // one layer each
};

// Sizes S.num_blocks for `seqs`, allocates the sets (rotate: enough to exceed 3x L2 on cuda, else one),
// fills the inputs (out poisoned) and, when `fill`, the caches with random values.
SeqCache make_cache(Setup& S, const Env& env, const std::vector<Seq>& seqs, bool rotate, bool fill,
                    std::mt19937_64& rng) {
  const int bs = S.opt.block_size;
  SeqCache c;
  c.seqs = seqs;
  int64_t nb = 0, rows = 0;
  for (const Seq& q : seqs) {
    nb += (static_cast<int64_t>(q.past) + q.T + bs - 1) / bs;
    rows += q.T;
  }
  if (nb > INT32_MAX) throw ValidationError("--block-size", "too many cache blocks for i32 block ids");
  S.num_blocks = static_cast<int>(nb);
  S.batch = static_cast<int>(seqs.size());
  std::vector<int32_t> perm(static_cast<std::size_t>(nb));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);  // paged: blocks in no particular order
  std::size_t at = 0;
  for (const Seq& q : seqs) {
    const std::size_t n = static_cast<std::size_t>((static_cast<int64_t>(q.past) + q.T + bs - 1) / bs);
    c.tables.emplace_back(perm.begin() + static_cast<std::ptrdiff_t>(at), perm.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
  }
  const int sets = rotate ? rotation_sets(env, S.dev, static_cast<double>(S.cache_bytes())) : 1;
  c.sets.resize(static_cast<std::size_t>(sets));
  for (LayerBuffers& ly : c.sets) {
    S.allocate(ly, static_cast<int>(rows));
    fill_inputs(S.opt, ly, rng);
    if (fill) fill_random(S, ly, rng);
  }
  sync_device(S.dev);
  return c;
}

// The metadata of one call over the sequences `pick` of `c` (their new rows back to back from row 0).
Meta meta_of(const SeqCache& c, const std::vector<int>& pick) {
  Meta m;
  m.subsequence_begins.push_back(0);
  m.block_indices_begins.push_back(0);
  for (int i : pick) {
    const Seq& q = c.seqs[static_cast<std::size_t>(i)];
    const auto& t = c.tables[static_cast<std::size_t>(i)];
    m.past_lens.push_back(q.past);
    m.num_tokens += q.T;
    m.subsequence_begins.push_back(m.num_tokens);
    m.block_indices.insert(m.block_indices.end(), t.begin(), t.end());
    m.block_indices_begins.push_back(static_cast<int32_t>(m.block_indices.size()));
    m.max_context_len = std::max(m.max_context_len, q.past + q.T);
  }
  return m;
}

std::vector<int> range(int from, int to) {
  std::vector<int> v;
  for (int i = from; i < to; ++i) v.push_back(i);
  return v;
}

// Times the call `m` (one plan per set; cuda: one graph per set, replays rotating over the sets); checks
// that the call overwrote its poisoned output. Returns per-replay microseconds.
std::vector<double> time_call(const Setup& S, const Env& env, SeqCache& c, const Meta& m, int warmup, int repeats) {
  for (LayerBuffers& ly : c.sets) fill_byte(ly.out, 0xff);  // NaN
  sync_device(S.dev);
  std::vector<std::vector<Plan>> plans(c.sets.size());
  std::vector<std::vector<Params>> params(c.sets.size());
  for (std::size_t s = 0; s < c.sets.size(); ++s) {
    params[s].push_back(S.params(c.sets[s], c.sets[s], m));
    plans[s].push_back(plan(params[s].back(), S.options(env.stream)));
  }
  if (S.opt.verbose) std::printf("%s\n", plans[0][0].describe().c_str());
  const std::vector<double> us = time_plans(S.dev, env, plans, params, warmup, repeats);
  check_finite_out(c.sets[0].out, S.opt.qdtype, static_cast<int64_t>(m.num_tokens) * S.opt.heads * S.opt.head_size);
  return us;
}

BenchOptions one_layer(const BenchOptions& opt, const Shape& sh, DType q) {
  BenchOptions o = opt;
  o.heads = sh.heads;
  o.kv_heads = sh.kv_heads;
  o.head_size = sh.head_size;
  o.qdtype = q;
  o.layers = 1;
  return o;
}

std::string shape_name(const BenchOptions& o) {
  return std::to_string(o.heads) + "/" + std::to_string(o.kv_heads) + "/" + std::to_string(o.head_size);
}

// One timed call of the prefill and chunk scenarios.
struct LongRow {
  std::string shape, kv, q;
  int past = 0, T = 0, sets = 1, repeats = 0;
  double us = 0, us_min = 0, flops = 0, tflops = 0, gbs = 0;
  Bytes bytes;
};

void print_long_header(const char* title) {
  std::printf("\n%s\n", title);
  std::printf("%-11s %-5s %-5s %8s %6s %5s %12s %9s %10s %9s\n", "H/Hk/D", "kv", "q", "past", "T", "reps",
              "us/call", "TFLOP/s", "MB moved", "GB/s");
}

LongRow time_long(const BenchOptions& o, const Env& env, KVPrecision kv, const Seq& q, bool rotate, bool fill,
                  int repeats) {
  const Device dev = o.backend == Backend::cuda ? Device::cuda : Device::cpu;
  Setup S(o, kv, dev);
  std::mt19937_64 rng(o.seed ^ (static_cast<uint64_t>(q.past) << 20) ^ (static_cast<uint64_t>(q.T) << 40) ^
                      static_cast<uint64_t>(kv));
  SeqCache c = make_cache(S, env, {q}, rotate, fill, rng);
  const std::vector<double> us = time_call(S, env, c, meta_of(c, {0}), o.warmup, repeats);
  LongRow r;
  r.shape = shape_name(o);
  r.kv = kv_precision_name(kv);
  r.q = dtype_name(o.qdtype);
  r.past = q.past;
  r.T = q.T;
  r.sets = static_cast<int>(c.sets.size());
  r.repeats = repeats;
  r.us = median(us);
  r.us_min = *std::min_element(us.begin(), us.end());
  r.flops = flops_of(o, {q});
  r.tflops = r.flops / (r.us * 1e-6) / 1e12;
  r.bytes = bytes_of(o, kv, {q});
  r.gbs = r.bytes.total() / (r.us * 1e-6) / 1e9;
  std::printf("%-11s %-5s %-5s %8d %6d %5d %12.1f %9.4g %10.2f %9.1f\n", r.shape.c_str(), r.kv.c_str(), r.q.c_str(),
              r.past, r.T, r.repeats, r.us, r.tflops, r.bytes.total() / 1e6, r.gbs);
  std::fflush(stdout);
  return r;
}

// prefill: from zero, T = L new tokens (the op writes them into the cache, then attends causally).
void run_prefill(const BenchOptions& opt, const Env& env, std::vector<LongRow>& rows) {
  print_long_header("prefill scenario: one sequence from zero (past_len 0, T = L new tokens, causal), one layer per call");
  for (const Shape& sh : opt.prefill_shapes) {
    const BenchOptions o = one_layer(opt, sh, opt.prefill_qdtype);
    for (KVPrecision kv : opt.prefill_kvs)
      for (int L : opt.prefill_contexts) {
        const int reps = L > opt.prefill_long ? std::min(opt.repeats, opt.prefill_long_repeats) : opt.repeats;
        // NOTE: no rotation: the call's working set is its own new rows, read several times (compute bound)
        rows.push_back(time_long(o, env, kv, {0, L}, /*rotate=*/false, /*fill=*/false, reps));
      }
  }
  if (opt.repeats > opt.prefill_long_repeats)
    for (int L : opt.prefill_contexts)
      if (L > opt.prefill_long) {
        std::printf("(L > %d: %d repeats instead of %d, each call is long)\n", opt.prefill_long,
                    std::min(opt.repeats, opt.prefill_long_repeats), opt.repeats);
        break;
      }
}

// chunk: one chunk of prefill after a long cached context (random contents).
void run_chunk(const BenchOptions& opt, const Env& env, std::vector<LongRow>& rows) {
  print_long_header("chunk scenario: one prefill chunk after a cached context (random cache contents), one layer per call");
  const BenchOptions o = one_layer(opt, {opt.heads, opt.kv_heads, opt.head_size}, opt.qdtype);
  for (KVPrecision kv : opt.kvs)
    rows.push_back(time_long(o, env, kv, {opt.chunk_past, opt.chunk_tokens}, /*rotate=*/true, /*fill=*/true, opt.repeats));
}

// mixed: 1 prefill chunk + V verifies in one call, against each part alone.
struct MixedRow {
  std::string shape, kv, q;
  int past = 0, chunk = 0, verifies = 0, verify_T = 0, sets = 1;
  double us_mixed = 0, us_chunk = 0, us_verifies = 0, sum = 0, ratio = 0, flops = 0, tflops = 0, gbs = 0;
  Bytes bytes;
};

void run_mixed(const BenchOptions& opt, const Env& env, std::vector<MixedRow>& rows) {
  std::printf("\nmixed scenario: one call of 1 prefill chunk + %d verifies of T=%d, all at past_len %d (random cache contents),"
              " vs each part alone\n",
              opt.mixed_verifies, opt.mixed_verify_tokens, opt.mixed_past);
  std::printf("%-11s %-5s %-5s %8s %6s %12s %12s %12s %12s %10s %9s %9s\n", "H/Hk/D", "kv", "q", "past", "chunk",
              "us mixed", "us chunk", "us verifies", "us sum", "mixed/sum", "TFLOP/s", "GB/s");
  const BenchOptions o = one_layer(opt, {opt.heads, opt.kv_heads, opt.head_size}, opt.qdtype);
  const Device dev = o.backend == Backend::cuda ? Device::cuda : Device::cpu;
  std::vector<Seq> seqs{{opt.mixed_past, opt.mixed_chunk}};
  for (int v = 0; v < opt.mixed_verifies; ++v) seqs.push_back({opt.mixed_past, opt.mixed_verify_tokens});
  const int n = static_cast<int>(seqs.size());
  for (KVPrecision kv : opt.kvs) {
    Setup S(o, kv, dev);
    std::mt19937_64 rng(o.seed ^ (static_cast<uint64_t>(opt.mixed_past) << 20) ^ (uint64_t{0x5a} << 40) ^
                        static_cast<uint64_t>(kv));
    SeqCache c = make_cache(S, env, seqs, /*rotate=*/true, /*fill=*/true, rng);
    MixedRow r;
    r.us_mixed = median(time_call(S, env, c, meta_of(c, range(0, n)), o.warmup, o.repeats));
    r.us_chunk = median(time_call(S, env, c, meta_of(c, {0}), o.warmup, o.repeats));
    r.us_verifies = opt.mixed_verifies > 0 ? median(time_call(S, env, c, meta_of(c, range(1, n)), o.warmup, o.repeats)) : 0;
    r.shape = shape_name(o);
    r.kv = kv_precision_name(kv);
    r.q = dtype_name(o.qdtype);
    r.past = opt.mixed_past;
    r.chunk = opt.mixed_chunk;
    r.verifies = opt.mixed_verifies;
    r.verify_T = opt.mixed_verify_tokens;
    r.sets = static_cast<int>(c.sets.size());
    r.sum = r.us_chunk + r.us_verifies;
    r.ratio = r.sum > 0 ? r.us_mixed / r.sum : 0;
    r.flops = flops_of(o, seqs);
    r.tflops = r.flops / (r.us_mixed * 1e-6) / 1e12;
    r.bytes = bytes_of(o, kv, seqs);
    r.gbs = r.bytes.total() / (r.us_mixed * 1e-6) / 1e9;
    rows.push_back(r);
    std::printf("%-11s %-5s %-5s %8d %6d %12.1f %12.1f %12.1f %12.1f %10.3f %9.4g %9.1f\n", r.shape.c_str(),
                r.kv.c_str(), r.q.c_str(), r.past, r.chunk, r.us_mixed, r.us_chunk, r.us_verifies, r.sum, r.ratio,
                r.tflops, r.gbs);
    std::fflush(stdout);
  }
}

nlohmann::json bytes_json(const Bytes& b) {
  return {{"kv", b.kv}, {"kv_params", b.kv_params}, {"q", b.q}, {"o", b.o}, {"new_kv", b.new_kv}};
}

nlohmann::json long_rows_json(const std::vector<LongRow>& rows) {
  nlohmann::json a = nlohmann::json::array();
  for (const LongRow& r : rows)
    a.push_back({{"shape", r.shape}, {"kv", r.kv}, {"query_dtype", r.q}, {"past", r.past}, {"T", r.T},
                 {"sets", r.sets}, {"repeats", r.repeats}, {"us", r.us}, {"us_min", r.us_min}, {"flops", r.flops},
                 {"tflops", r.tflops}, {"bytes", r.bytes.total()}, {"bytes_terms", bytes_json(r.bytes)},
                 {"gbs", r.gbs}});
  return a;
}

}  // namespace

// --- read ceilings --------------------------------------------------------------------------------------------
double measure_read_ceiling_gbs(void* stream) {
#ifdef PAGEDATTN_WITH_CUDA
  std::size_t free_b = 0, total_b = 0;
  PA_CUDA(cudaMemGetInfo(&free_b, &total_b));
  std::size_t size = std::size_t{2} << 30;  // 2 GiB: far beyond L2
  while (size > (std::size_t{64} << 20) && size > free_b / 2) size /= 2;
  return cuda::measure_read_ceiling_gbs(size, 20, stream);
#else
  (void)stream;
  throw UnsupportedError("measure_read_ceiling_gbs: this build has no CUDA backend");
#endif
}

// `threads` threads (the cpu backend's count) each summing their slice of a 512 MiB buffer they first
// touched; best of 3.
double measure_cpu_read_ceiling_gbs(int threads) {
  const std::size_t n = (std::size_t{512} << 20) / sizeof(uint64_t);
  std::unique_ptr<uint64_t[]> buf(new uint64_t[n]);
  threads = std::max(1, threads);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::size_t i = 0; i < n; ++i) buf[i] = 1;
  double best = 0;
  volatile uint64_t sink = 0;
  for (int r = 0; r < 3; ++r) {
    const auto t0 = Clock::now();
    uint64_t total = 0;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : total)
    for (std::size_t i = 0; i < n; i += 4) total += buf[i] + buf[i + 1] + buf[i + 2] + buf[i + 3];
    sink = sink + total;
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, static_cast<double>(n * sizeof(uint64_t)) / s / 1e9);
  }
  return best;
}

int run_bench(const BenchOptions& opt) {
  // --- arguments ---
  auto positive = [](const std::vector<int>& v, const char* name) {
    if (v.empty()) throw ValidationError(name, "must list at least one value");
    for (int x : v)
      if (x < 1) throw ValidationError(name, "every value must be >= 1, got " + std::to_string(x));
  };
  const bool cuda = opt.backend == Backend::cuda;
  const bool all = opt.scenario == "all";
  // all: seed + batch; on cuda also the long-query scenarios (prefill, chunk, mixed)
  const bool do_seed = all || opt.scenario == "seed", do_batch = all || opt.scenario == "batch";
  const bool do_prefill = opt.scenario == "prefill" || (all && cuda);
  const bool do_chunk = opt.scenario == "chunk" || (all && cuda);
  const bool do_mixed = opt.scenario == "mixed" || (all && cuda);
  const bool do_sweep = opt.scenario == "sweep";
  const bool do_split = opt.scenario == "split";
  if (do_split && opt.split_shards < 2) throw ValidationError("--split-shards", "must be >= 2");
  if (do_seed || do_sweep || do_split) {
    positive(opt.contexts, "--context");
    positive(opt.tokens, "--tokens");
  }
  if (do_sweep) {
    positive(opt.sweep_groups, "--sweep-groups");
    positive(opt.sweep_head_sizes, "--sweep-head-sizes");
    for (int T : opt.sweep_trees)
      if (T < 1) throw ValidationError("--sweep-trees", "every tree needs >= 1 node, got " + std::to_string(T));
    if (opt.sweep_kv_heads < 1) throw ValidationError("--sweep-kv-heads", "must be >= 1");
  }
  if (opt.kvs.empty()) throw ValidationError("--kv", "must list at least one precision");
  if (opt.layers < 1) throw ValidationError("--layers", "must be >= 1");
  if (opt.repeats < 1) throw ValidationError("--repeats", "must be >= 1");
  if (opt.batch < 1) throw ValidationError("--batch", "must be >= 1");
  if (opt.fill != "op" && opt.fill != "random") throw ValidationError("--fill", "must be 'op' or 'random'");
  if (opt.fill_chunk < 1) throw ValidationError("--fill-chunk", "must be >= 1");
  if (!(do_seed || do_batch || do_prefill || do_chunk || do_mixed || do_sweep || do_split))
    throw ValidationError("--scenario", "must be 'seed', 'batch', 'prefill', 'chunk', 'mixed', 'sweep', 'split' or 'all'");
  if (opt.kv_heads < 1 || opt.heads < 1 || opt.heads % opt.kv_heads != 0)
    throw ValidationError("--heads", "must be a positive multiple of --kv-heads");
  if (opt.head_size < 1) throw ValidationError("--head-size", "must be >= 1");
  if (opt.value_head_size < 0) throw ValidationError("--value-head-size", "must be >= 0 (0: the head size)");
  if (opt.block_size < 1) throw ValidationError("--block-size", "must be >= 1");
  if (opt.warmup < 0) throw ValidationError("--warmup", "must be >= 0");
  if (do_batch && (opt.batch_seqs < 1 || opt.batch_context < 1 || opt.batch_tokens < 1))
    throw ValidationError("--batch-seqs/--batch-context/--batch-tokens", "must be >= 1");
  if (do_prefill) {
    positive(opt.prefill_contexts, "--prefill-context");
    if (opt.prefill_shapes.empty()) throw ValidationError("--prefill-shapes", "must list at least one shape");
    for (const Shape& sh : opt.prefill_shapes)
      if (sh.kv_heads < 1 || sh.heads < 1 || sh.heads % sh.kv_heads != 0 || sh.head_size < 1)
        throw ValidationError("--prefill-shapes", "each shape H/Hk/D needs H a positive multiple of Hk and D >= 1");
    if (opt.prefill_kvs.empty()) throw ValidationError("--prefill-kv", "must list at least one precision");
    if (opt.prefill_long_repeats < 1) throw ValidationError("--prefill-long-repeats", "must be >= 1");
  }
  if (do_chunk && (opt.chunk_past < 0 || opt.chunk_tokens < 1))
    throw ValidationError("--chunk-past/--chunk-tokens", "need past >= 0 and tokens >= 1");
  if (do_mixed && (opt.mixed_past < 0 || opt.mixed_chunk < 1 || opt.mixed_verifies < 0 || opt.mixed_verify_tokens < 1))
    throw ValidationError("--mixed-past/--mixed-chunk/--mixed-verifies/--mixed-verify-tokens",
                          "need past >= 0, chunk >= 1, verifies >= 0, verify tokens >= 1");
  if (!opt.json.empty()) {  // fail now rather than after the run
    std::ofstream f(opt.json);
    if (!f) throw ValidationError("--json", "cannot open '" + opt.json + "' for writing");
  }

  Env env;
  env.commit = git_commit();
  env.date = utc_date();
#ifdef PAGEDATTN_WITH_CUDA
  struct StreamGuard {
    cudaStream_t s = nullptr;
    ~StreamGuard() {
      if (s) cudaStreamDestroy(s);
    }
  } stream_guard;
#endif
  if (opt.backend == Backend::cuda) {
#ifdef PAGEDATTN_WITH_CUDA
    if (!cuda_available()) throw UnsupportedError("backend 'cuda': no CUDA device is visible");
    int dev = 0;
    PA_CUDA(cudaGetDevice(&dev));
    cudaDeviceProp prop{};
    PA_CUDA(cudaGetDeviceProperties(&prop, dev));
    env.device = prop.name;
    env.l2_bytes = static_cast<std::size_t>(prop.l2CacheSize);
    PA_CUDA(cudaStreamCreateWithFlags(&stream_guard.s, cudaStreamNonBlocking));
    env.stream = stream_guard.s;
    env.ceiling_gbs = measure_read_ceiling_gbs(env.stream);
    env.ceiling_method = "read kernel over 2 GiB (16-byte streaming loads), median of 20";
#else
    throw UnsupportedError("backend 'cuda': this build of pagedattn has no CUDA backend (build with nvcc present)");
#endif
  } else {
    env.device = cpu_name();
    // the threads the cpu backend runs on (PAGEDATTN_CPU_THREADS, else all cores)
    int threads = 1;
#if defined(_OPENMP)
    threads = omp_get_max_threads();
#endif
    if (const char* e = std::getenv("PAGEDATTN_CPU_THREADS"); e != nullptr && std::atoi(e) > 0) threads = std::atoi(e);
    env.ceiling_gbs = measure_cpu_read_ceiling_gbs(threads);
    env.ceiling_method = std::to_string(threads) + " host threads summing 512 MiB, best of 3";
  }

  std::string kvlist;
  for (KVPrecision k : opt.kvs) kvlist += std::string(kvlist.empty() ? "" : ",") + kv_precision_name(k);
  std::printf("pagedattn bench: backend=%s device=\"%s\" commit=%s date=%s\n", backend_name(opt.backend),
              env.device.c_str(), env.commit.c_str(), env.date.c_str());
  std::printf("model: H=%d Hk=%d D=%d, %d layer(s), block_size=%d, query=%s, kv=%s, fill=%s, repeats=%d (median)%s%s\n",
              opt.heads, opt.kv_heads, opt.head_size, opt.layers, opt.block_size, dtype_name(opt.qdtype),
              kvlist.c_str(), opt.fill.c_str(), opt.repeats,
              opt.backend == Backend::cuda ? ", one CUDA graph of all layers per replay" : ", wall clock",
              opt.interleave ? ", seed/batch/sweep: a configuration's T rows in rotation (--interleave)" : "");
  std::printf("read ceiling: %.1f GB/s (%s)\n", env.ceiling_gbs, env.ceiling_method.c_str());
  std::printf("bytes moved per layer and sequence, ctx = L + T: K+V ctx*Hk*D*2*sizeof(kv)"
              " + u8 scale/min ctx*Hk*2*2*2 + Q T*H*D*sizeof(q) + O T*H*D*sizeof(q) + new K/V T*Hk*D*2*sizeof(q)\n");

  if (do_prefill || do_chunk || do_mixed) std::printf("%s\n", kFlopsFormula);

  std::vector<Row> rows;
  if (do_seed) {
    print_header(opt, opt.batch == 1 ? "seed scenario: one sequence" : "seed scenario");
    for (KVPrecision kv : opt.kvs)
      for (int L : opt.contexts) run_config(opt, env, kv, opt.batch, L, opt.tokens, rows);
  }
  if (do_sweep) run_sweep(opt, env, rows);
  std::vector<SplitRow> split_rows;
  if (do_split) run_split(opt, env, split_rows);
  std::vector<Slope> sl = do_sweep ? std::vector<Slope>{} : slopes(rows);
  if (!sl.empty()) {
    std::printf("\nslope per 1k tokens of context:\n");
    for (const Slope& s : sl)
      std::printf("  kv=%-4s seqs=%d T=%d: slope %.2f %s / 1k tokens (%d -> %d)\n", s.kv.c_str(), s.batch, s.T,
                  std::fabs(s.us_per_1k) >= 1000 ? s.us_per_1k / 1000 : s.us_per_1k,
                  std::fabs(s.us_per_1k) >= 1000 ? "ms" : "us", s.from, s.to);
  }
  if (do_batch) {
    print_header(opt, "batch scenario");
    for (KVPrecision kv : opt.kvs)
      run_config(opt, env, kv, opt.batch_seqs, opt.batch_context, {opt.batch_tokens}, rows);
  }

  std::vector<LongRow> prefill_rows, chunk_rows;
  std::vector<MixedRow> mixed_rows;
  if (do_prefill) run_prefill(opt, env, prefill_rows);
  if (do_chunk) run_chunk(opt, env, chunk_rows);
  if (do_mixed) run_mixed(opt, env, mixed_rows);

  if (env.l2_bytes > 0 && !rows.empty()) {
    std::string rotated;
    for (const Row& r : rows)
      if (r.sets > 1 && r.T == rows.front().T)
        rotated += " kv=" + r.kv + "/seqs=" + std::to_string(r.batch) + "/L=" + std::to_string(r.context) + ": " +
                   std::to_string(r.sets) + " sets;";
    std::printf("\nL2: %.1f MB; each replay's caches exceed 3x L2%s%s\n", static_cast<double>(env.l2_bytes) / 1e6,
                rotated.empty() ? "" : " by rotating copies of the layers:", rotated.c_str());
  }
  if (env.l2_bytes > 0 && (!chunk_rows.empty() || !mixed_rows.empty())) {
    std::string sets;
    for (const LongRow& r : chunk_rows) sets += " chunk kv=" + r.kv + ": " + std::to_string(r.sets) + ";";
    for (const MixedRow& r : mixed_rows) sets += " mixed kv=" + r.kv + ": " + std::to_string(r.sets) + ";";
    std::printf("chunk/mixed: copies of the cache rotated so that the replays' caches exceed 3x L2:%s\n", sets.c_str());
  }
  if (!prefill_rows.empty() && opt.backend == Backend::cuda)
    std::printf("prefill: no rotation (one call's working set is its own new rows; the call is compute bound)\n");

  if (!opt.json.empty()) {
    nlohmann::json j;
    j["tool"] = "pagedattn bench";
    j["backend"] = backend_name(opt.backend);
    j["device"] = env.device;
    j["date"] = env.date;
    j["commit"] = env.commit;
    j["ceiling_gbs"] = env.ceiling_gbs;
    j["ceiling_method"] = env.ceiling_method;
    j["l2_bytes"] = env.l2_bytes;
    j["config"] = {{"heads", opt.heads},          {"kv_heads", opt.kv_heads}, {"head_size", opt.head_size}, {"value_head_size", opt.dv()},
                   {"layers", opt.layers},        {"block_size", opt.block_size},
                   {"query_dtype", dtype_name(opt.qdtype)},
                   {"fill", opt.fill},            {"repeats", opt.repeats}, {"scenario", opt.scenario},
                   {"lse", opt.lse},
                   {"timing", std::string(opt.backend == Backend::cuda ? "median of CUDA graph replays (cudaEvent)"
                                                                       : "median wall clock") +
                                  (opt.interleave ? "; seed, batch and sweep: each configuration's rows in rotation (--interleave)" : "")}};
    j["bytes_formula"] = {
        {"kv", "ctx*Hk*(D+Dv)*sizeof(kv), ctx = L+T"}, {"kv_params", "u8: ctx*Hk*2*2*sizeof(f16)"},
        {"q", "T*H*D*sizeof(q)"}, {"o", "T*H*Dv*sizeof(q)"}, {"new_kv", "T*Hk*(D+Dv)*sizeof(q)"},
        {"scope", "summed over sequences and layers"}};
    j["rows"] = nlohmann::json::array();
    for (const Row& r : rows)
      j["rows"].push_back({{"kv", r.kv},
                           {"seqs", r.batch},
                           {"context", r.context},
                           {"T", r.T},
                           {"head_size", r.head_size}, {"value_head_size", r.value_head_size},
                           {"group", r.group},
                           {"tree", r.tree},
                           {"interleaved", r.interleaved},
                           {"rows_per_kv_head", r.T * r.group},
                           {"layers", r.layers},
                           {"sets", r.sets},
                           {"us", r.us},
                           {"us_min", r.us_min},
                           {"t_over_t1", r.ratio},
                           {"bytes", r.bytes.total()},
                           {"bytes_terms",
                            {{"kv", r.bytes.kv},
                             {"kv_params", r.bytes.kv_params},
                             {"q", r.bytes.q},
                             {"o", r.bytes.o},
                             {"new_kv", r.bytes.new_kv}}},
                           {"gbs", r.gbs},
                           {"pct_ceiling", r.pct}});
    j["slopes"] = nlohmann::json::array();
    for (const Slope& s : sl)
      j["slopes"].push_back({{"kv", s.kv}, {"seqs", s.batch}, {"T", s.T}, {"from", s.from}, {"to", s.to},
                             {"us_per_1k_tokens", s.us_per_1k}});
    if (do_split) {
      nlohmann::json a = nlohmann::json::array();
      for (const SplitRow& r : split_rows)
        a.push_back({{"kv", r.kv}, {"context", r.context}, {"T", r.T}, {"shards", r.shards}, {"layers", r.layers},
                     {"sets", r.sets}, {"us_whole", r.us_whole}, {"us_split_and_merge", r.us_split},
                     {"us_merge", r.us_merge}, {"us_merge_per_layer", r.us_merge / r.layers},
                     {"rel_l2_split_vs_whole", r.rel_l2}});
      j["split"] = {{"what", "one sequence with lse: the whole call; the context in shards (block boundaries, all but "
                             "the last prefix_only) run in turn, then merge_states; merge_states alone"},
                    {"rows", a}};
    }
    if (do_prefill || do_chunk || do_mixed) j["flops_formula"] = kFlopsFormula;
    if (do_prefill)
      j["prefill"] = {{"what", "one sequence from zero: past_len 0, T = L new tokens, causal; one layer per call"},
                      {"rows", long_rows_json(prefill_rows)}};
    if (do_chunk)
      j["chunk"] = {{"what", "one sequence: T new tokens at past_len; random cache contents; one layer per call"},
                    {"rows", long_rows_json(chunk_rows)}};
    if (do_mixed) {
      nlohmann::json a = nlohmann::json::array();
      for (const MixedRow& r : mixed_rows)
        a.push_back({{"shape", r.shape}, {"kv", r.kv}, {"query_dtype", r.q}, {"past", r.past}, {"chunk", r.chunk},
                     {"verifies", r.verifies}, {"verify_T", r.verify_T}, {"sets", r.sets}, {"repeats", opt.repeats},
                     {"us_mixed", r.us_mixed}, {"us_chunk_alone", r.us_chunk}, {"us_verifies_alone", r.us_verifies},
                     {"us_sum", r.sum}, {"mixed_over_sum", r.ratio}, {"flops", r.flops}, {"tflops", r.tflops},
                     {"bytes", r.bytes.total()}, {"bytes_terms", bytes_json(r.bytes)}, {"gbs", r.gbs}});
      j["mixed"] = {{"what", "one call: 1 prefill chunk + verifies, all at past_len; and each part alone (medians)"},
                    {"rows", a}};
    }
    std::ofstream f(opt.json);
    if (!f) throw ValidationError("--json", "cannot open '" + opt.json + "' for writing");
    f << j.dump(2) << "\n";
    if (!f) throw RuntimeError("writing '" + opt.json + "' failed");
    std::printf("\nwrote %s\n", opt.json.c_str());
  }
  return 0;
}

}  // namespace tools
}  // namespace pagedattn
