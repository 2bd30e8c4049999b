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
//   u8 only: scale and zero point   ctx * Hk * 2 * 2 * sizeof(f16)          (K and V; scale and zp)
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
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <unistd.h>

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

std::size_t kv_bytes(KVPrecision p) { return p == KVPrecision::u8 ? 1 : 2; }
DType kv_dtype(KVPrecision p) {
  return p == KVPrecision::f16 ? DType::f16 : p == KVPrecision::bf16 ? DType::bf16 : DType::u8;
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
void fill_tiled(Buffer& b, const std::vector<uint8_t>& pool) {
  for (std::size_t off = 0; off < b.bytes(); off += pool.size())
    b.upload(pool.data(), std::min(pool.size(), b.bytes() - off), off);
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
  Buffer key_scale, key_zp, value_scale, value_zp;                    // u8: [num_blocks, Hk, bs] f16
  Buffer query, key, value, out;                                      // [rows, H*D] / [rows, Hk*D]
};

// Host metadata of one call: `batch` sequences of `T` new tokens after `past` cached ones.
struct Meta {
  std::vector<int32_t> past_lens, subsequence_begins, block_indices, block_indices_begins;
  int max_context_len = 0;
  int num_tokens = 0;
};

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

  std::size_t cache_bytes() const {  // one layer's K and V cache and (u8) their scales/zero points
    const std::size_t slots = static_cast<std::size_t>(num_blocks) * opt.kv_heads * opt.block_size;
    std::size_t b = 2 * slots * opt.head_size * kv_bytes(kv);
    if (kv == KVPrecision::u8) b += 4 * slots * 2;
    return b;
  }

  Meta meta(int past, int T) const {
    Meta m;
    for (int s = 0; s < batch; ++s) {
      m.past_lens.push_back(past);
      m.subsequence_begins.push_back(s * T);
      m.block_indices_begins.push_back(s * blocks_per_seq);
    }
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
    L.value_cache = Buffer(dev, slots * opt.head_size * kv_bytes(kv));
    if (kv == KVPrecision::u8) {
      L.key_scale = Buffer(dev, slots * 2);
      L.key_zp = Buffer(dev, slots * 2);
      L.value_scale = Buffer(dev, slots * 2);
      L.value_zp = Buffer(dev, slots * 2);
    }
    allocate_io(L, io_rows);
  }
  void allocate_io(LayerBuffers& L, int rows) const {
    const std::size_t q = dtype_size(opt.qdtype);
    L.query = Buffer(dev, static_cast<std::size_t>(rows) * opt.heads * opt.head_size * q);
    L.out = Buffer(dev, static_cast<std::size_t>(rows) * opt.heads * opt.head_size * q);
    L.key = Buffer(dev, static_cast<std::size_t>(rows) * opt.kv_heads * opt.head_size * q);
    L.value = Buffer(dev, static_cast<std::size_t>(rows) * opt.kv_heads * opt.head_size * q);
  }

  // Params of one call over layer `cache` with inputs/outputs in `io` (may be the same buffers).
  Params params(const LayerBuffers& cache, const LayerBuffers& io, const Meta& m) const {
    Params p;
    p.num_heads = opt.heads;
    const int64_t H = opt.heads, Hk = opt.kv_heads, D = opt.head_size, n = m.num_tokens;
    p.query = TensorView::contiguous(io.query.data(), opt.qdtype, dev, {n, H * D});
    p.key = TensorView::contiguous(io.key.data(), opt.qdtype, dev, {n, Hk * D});
    p.value = TensorView::contiguous(io.value.data(), opt.qdtype, dev, {n, Hk * D});
    p.out = TensorView::contiguous(io.out.data(), opt.qdtype, dev, {n, H * D});
    const DType kt = kv_dtype(kv);
    p.cache.key = TensorView::contiguous(cache.key_cache.data(), kt, dev, {num_blocks, Hk, opt.block_size, D});
    p.cache.value = TensorView::contiguous(cache.value_cache.data(), kt, dev, {num_blocks, Hk, opt.block_size, D});
    if (kv == KVPrecision::u8) {
      auto sv = [&](const Buffer& b) {
        return TensorView::contiguous(b.data(), DType::f16, dev, {num_blocks, Hk, opt.block_size});
      };
      p.cache.key_scale = sv(cache.key_scale);
      p.cache.key_zero_point = sv(cache.key_zp);
      p.cache.value_scale = sv(cache.value_scale);
      p.cache.value_zero_point = sv(cache.value_zp);
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
    return p;
  }

  Options options(void* stream) const {
    Options o;
    o.backend = opt.backend;
    o.stream = stream;
    return o;
  }
};

// Fills the cache positions [0, context) of every sequence with random values.
void fill_random(Setup& S, LayerBuffers& L, std::mt19937_64& rng) {
  constexpr std::size_t kPoolBytes = 8u << 20;
  const DType kt = kv_dtype(S.kv);
  // NOTE: one pool per layer call would cost host time for nothing: values do not change the timing.
  static thread_local std::vector<uint8_t> pool_kv[3], pool_scale, pool_zp;
  std::vector<uint8_t>& pkv = pool_kv[static_cast<int>(S.kv)];
  if (pkv.empty()) pkv = random_pool(kt, kPoolBytes, -1.0f, 1.0f, rng);
  fill_tiled(L.key_cache, pkv);
  fill_tiled(L.value_cache, pkv);
  if (S.kv == KVPrecision::u8) {
    if (pool_scale.empty()) pool_scale = random_pool(DType::f16, 1u << 20, 2.0f / 255, 4.0f / 255, rng);
    if (pool_zp.empty()) pool_zp = random_pool(DType::f16, 1u << 20, 96.0f, 160.0f, rng);
    fill_tiled(L.key_scale, pool_scale);
    fill_tiled(L.value_scale, pool_scale);
    fill_tiled(L.key_zp, pool_zp);
    fill_tiled(L.value_zp, pool_zp);
  }
}

void fill_inputs(const BenchOptions& opt, LayerBuffers& L, std::mt19937_64& rng) {
  static thread_local std::vector<uint8_t> pool;
  if (pool.empty()) pool = random_pool(opt.qdtype, 4u << 20, -1.0f, 1.0f, rng);
  fill_tiled(L.query, pool);
  fill_tiled(L.key, pool);
  fill_tiled(L.value, pool);
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
  const double ctx = static_cast<double>(context) + T, Hk = opt.kv_heads, H = opt.heads, D = opt.head_size;
  const double qb = static_cast<double>(dtype_size(opt.qdtype)), n = static_cast<double>(batch) * opt.layers;
  Bytes b;
  b.kv = n * ctx * Hk * D * 2 * static_cast<double>(kv_bytes(kv));
  b.kv_params = kv == KVPrecision::u8 ? n * ctx * Hk * 2 * 2 * 2 : 0;
  b.q = n * T * H * D * qb;
  b.o = n * T * H * D * qb;
  b.new_kv = n * T * Hk * D * 2 * qb;
  return b;
}

struct Row {
  std::string kv;
  int batch = 1, context = 0, T = 0, layers = 0, sets = 1;
  double us = 0, us_min = 0, ratio = 0, gbs = 0, pct = 0;
  Bytes bytes;
};

// --- timing ------------------------------------------------------------------------------------------------
// Times `repeats` forwards of all layers; returns per-repeat microseconds.
std::vector<double> time_cpu(const std::vector<Plan>& plans, const std::vector<Params>& params, int warmup,
                             int repeats) {
  for (int w = 0; w < std::min(warmup, 1); ++w)
    for (std::size_t l = 0; l < plans.size(); ++l) plans[l].run(params[l]);
  std::vector<double> us;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    for (std::size_t l = 0; l < plans.size(); ++l) plans[l].run(params[l]);
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return us;
}

#ifdef PAGEDATTN_WITH_CUDA
// Captures each set's layers in one CUDA graph; replays them round-robin, each replay timed with events.
std::vector<double> time_cuda(const std::vector<std::vector<Plan>>& plans,
                              const std::vector<std::vector<Params>>& params, cudaStream_t stream, int warmup,
                              int repeats) {
  const std::size_t sets = plans.size();
  std::vector<cudaGraphExec_t> execs(sets, nullptr);
  struct Cleanup {
    std::vector<cudaGraphExec_t>& e;
    ~Cleanup() {
      for (auto x : e)
        if (x) cudaGraphExecDestroy(x);
    }
  } cleanup{execs};
  for (std::size_t s = 0; s < sets; ++s) {
    cudaGraph_t graph = nullptr;
    PA_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      for (std::size_t l = 0; l < plans[s].size(); ++l) plans[s][l].run(params[s][l]);
    } catch (...) {
      cudaStreamEndCapture(stream, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    PA_CUDA(cudaStreamEndCapture(stream, &graph));
    const cudaError_t e = cudaGraphInstantiate(&execs[s], graph, 0);
    cudaGraphDestroy(graph);
    cuda_check(e, "cudaGraphInstantiate (run() must be capturable in a CUDA graph)");
  }
  for (int w = 0; w < warmup; ++w)
    for (std::size_t s = 0; s < sets; ++s) PA_CUDA(cudaGraphLaunch(execs[s], stream));
  std::vector<cudaEvent_t> ev(static_cast<std::size_t>(repeats) + 1);
  for (auto& e : ev) PA_CUDA(cudaEventCreate(&e));
  std::vector<double> us;
  cudaError_t err = cudaEventRecord(ev[0], stream);
  for (int r = 0; r < repeats && err == cudaSuccess; ++r) {
    err = cudaGraphLaunch(execs[static_cast<std::size_t>(r) % sets], stream);
    if (err == cudaSuccess) err = cudaEventRecord(ev[static_cast<std::size_t>(r) + 1], stream);
  }
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  for (int r = 0; r < repeats && err == cudaSuccess; ++r) {
    float ms = 0;
    err = cudaEventElapsedTime(&ms, ev[static_cast<std::size_t>(r)], ev[static_cast<std::size_t>(r) + 1]);
    us.push_back(1000.0 * ms);
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

// Runs one (kv, batch, context) configuration for every T; appends rows.
void run_config(const BenchOptions& opt, const Env& env, KVPrecision kv, int batch, int context,
                const std::vector<int>& tokens, std::vector<Row>& rows) {
  const Device dev = opt.backend == Backend::cuda ? Device::cuda : Device::cpu;
  Setup S(opt, kv, dev);
  S.batch = batch;
  S.context = context;
  S.max_tokens = *std::max_element(tokens.begin(), tokens.end());
  S.blocks_per_seq = (context + S.max_tokens + opt.block_size - 1) / opt.block_size;
  const int64_t nb = static_cast<int64_t>(batch) * S.blocks_per_seq;
  if (nb > INT32_MAX) throw ValidationError("--context", "too many cache blocks for i32 block ids");
  S.num_blocks = static_cast<int>(nb);
  std::mt19937_64 rng(opt.seed ^ (static_cast<uint64_t>(context) << 20) ^ static_cast<uint64_t>(kv));
  S.tables.resize(static_cast<std::size_t>(S.num_blocks));
  std::iota(S.tables.begin(), S.tables.end(), 0);
  std::shuffle(S.tables.begin(), S.tables.end(), rng);  // paged: blocks in no particular order

  // Layer copies ("sets") so that the caches of one replay's layers are not served from L2.
  int sets = 1;
  const double per_set = static_cast<double>(S.cache_bytes()) * opt.layers;
  if (dev == Device::cuda && env.l2_bytes > 0)
    sets = std::max(1, std::min(64, static_cast<int>(std::ceil(3.0 * static_cast<double>(env.l2_bytes) / per_set))));

  std::vector<std::vector<LayerBuffers>> L(static_cast<std::size_t>(sets));
  for (auto& set : L) {
    set.resize(static_cast<std::size_t>(opt.layers));
    for (auto& ly : set) {
      S.allocate(ly, S.max_tokens * batch);
      fill_inputs(opt, ly, rng);
    }
  }
  sync_device(dev);
  const auto tf = Clock::now();
  int chunk = 0;
  for (auto& set : L) {
    if (opt.fill == "op")
      chunk = fill_by_op(S, set, env.stream, rng);
    else
      for (auto& ly : set) fill_random(S, ly, rng);
  }
  sync_device(dev);
  const double fill_s = std::chrono::duration<double>(Clock::now() - tf).count();
  if (opt.verbose)
    std::printf("# kv=%s seqs=%d context=%d: %d layer(s) x %d set(s), %.1f MB of cache per set; filled (%s%s) in %.1f s\n",
              kv_precision_name(kv), batch, context, opt.layers, sets, per_set / 1e6, opt.fill.c_str(),
              opt.fill == "op" ? (", " + std::to_string(chunk) + "-token chunks").c_str() : "", fill_s);
  std::fflush(stdout);

  double us_t1 = 0;
  for (int T : tokens) {
    const Meta m = S.meta(context, T);
    std::vector<std::vector<Plan>> plans(static_cast<std::size_t>(sets));
    std::vector<std::vector<Params>> params(static_cast<std::size_t>(sets));
    for (int s = 0; s < sets; ++s)
      for (int l = 0; l < opt.layers; ++l) {
        const LayerBuffers& ly = L[static_cast<std::size_t>(s)][static_cast<std::size_t>(l)];
        params[static_cast<std::size_t>(s)].push_back(S.params(ly, ly, m));
        plans[static_cast<std::size_t>(s)].push_back(plan(params[static_cast<std::size_t>(s)].back(), S.options(env.stream)));
      }
    if (opt.verbose) std::printf("%s\n", plans[0][0].describe().c_str());

    std::vector<double> us;
    if (dev == Device::cpu) {
      us = time_cpu(plans[0], params[0], opt.warmup, opt.repeats);
    } else {
#ifdef PAGEDATTN_WITH_CUDA
      us = time_cuda(plans, params, static_cast<cudaStream_t>(env.stream), opt.warmup, opt.repeats);
#endif
    }
    check_finite_out(L[0][0].out, opt.qdtype, static_cast<int64_t>(m.num_tokens) * opt.heads * opt.head_size);

    Row r;
    r.kv = kv_precision_name(kv);
    r.batch = batch;
    r.context = context;
    r.T = T;
    r.layers = opt.layers;
    r.sets = sets;
    r.us = median(us);
    r.us_min = *std::min_element(us.begin(), us.end());
    if (T == tokens.front()) us_t1 = r.us;
    r.ratio = us_t1 > 0 ? r.us / us_t1 : 0;
    r.bytes = bytes_moved(opt, kv, batch, context, T);
    r.gbs = r.bytes.total() / (r.us * 1e-6) / 1e9;
    r.pct = env.ceiling_gbs > 0 ? 100.0 * r.gbs / env.ceiling_gbs : 0;
    rows.push_back(r);
    std::printf("%-5s %5d %8d %3d %13.1f %7.2f %10.2f %9.1f %7.1f\n", r.kv.c_str(), r.batch, r.context, r.T, r.us,
                r.ratio, r.bytes.total() / 1e6, r.gbs, r.pct);
    std::fflush(stdout);
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

double measure_cpu_read_ceiling_gbs() {
  const std::size_t n = (std::size_t{256} << 20) / sizeof(uint64_t);
  std::vector<uint64_t> buf(n, 1);
  double best = 0;
  volatile uint64_t sink = 0;
  for (int r = 0; r < 3; ++r) {
    const auto t0 = Clock::now();
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (std::size_t i = 0; i + 4 <= n; i += 4) {
      s0 += buf[i];
      s1 += buf[i + 1];
      s2 += buf[i + 2];
      s3 += buf[i + 3];
    }
    sink = sink + s0 + s1 + s2 + s3;
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
  if (opt.scenario != "batch") {
    positive(opt.contexts, "--context");
    positive(opt.tokens, "--tokens");
  }
  if (opt.kvs.empty()) throw ValidationError("--kv", "must list at least one precision");
  if (opt.layers < 1) throw ValidationError("--layers", "must be >= 1");
  if (opt.repeats < 1) throw ValidationError("--repeats", "must be >= 1");
  if (opt.batch < 1) throw ValidationError("--batch", "must be >= 1");
  if (opt.fill != "op" && opt.fill != "random") throw ValidationError("--fill", "must be 'op' or 'random'");
  if (opt.fill_chunk < 1) throw ValidationError("--fill-chunk", "must be >= 1");
  if (opt.scenario != "seed" && opt.scenario != "batch" && opt.scenario != "all")
    throw ValidationError("--scenario", "must be 'seed', 'batch' or 'all'");
  if (opt.kv_heads < 1 || opt.heads < 1 || opt.heads % opt.kv_heads != 0)
    throw ValidationError("--heads", "must be a positive multiple of --kv-heads");
  if (opt.head_size < 1) throw ValidationError("--head-size", "must be >= 1");
  if (opt.block_size < 1) throw ValidationError("--block-size", "must be >= 1");
  if (opt.warmup < 0) throw ValidationError("--warmup", "must be >= 0");
  if (opt.scenario != "seed" && (opt.batch_seqs < 1 || opt.batch_context < 1 || opt.batch_tokens < 1))
    throw ValidationError("--batch-seqs/--batch-context/--batch-tokens", "must be >= 1");
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
    env.ceiling_gbs = measure_cpu_read_ceiling_gbs();
    env.ceiling_method = "one host thread summing 256 MiB, best of 3";
  }

  std::string kvlist;
  for (KVPrecision k : opt.kvs) kvlist += std::string(kvlist.empty() ? "" : ",") + kv_precision_name(k);
  std::printf("pagedattn bench: backend=%s device=\"%s\" commit=%s date=%s\n", backend_name(opt.backend),
              env.device.c_str(), env.commit.c_str(), env.date.c_str());
  std::printf("model: H=%d Hk=%d D=%d, %d layer(s), block_size=%d, query=%s, kv=%s, fill=%s, repeats=%d (median)%s\n",
              opt.heads, opt.kv_heads, opt.head_size, opt.layers, opt.block_size, dtype_name(opt.qdtype),
              kvlist.c_str(), opt.fill.c_str(), opt.repeats,
              opt.backend == Backend::cuda ? ", one CUDA graph of all layers per replay" : ", wall clock");
  std::printf("read ceiling: %.1f GB/s (%s)\n", env.ceiling_gbs, env.ceiling_method.c_str());
  std::printf("bytes moved per layer and sequence, ctx = L + T: K+V ctx*Hk*D*2*sizeof(kv)"
              " + u8 scale/zp ctx*Hk*2*2*2 + Q T*H*D*sizeof(q) + O T*H*D*sizeof(q) + new K/V T*Hk*D*2*sizeof(q)\n");

  std::vector<Row> rows;
  if (opt.scenario != "batch") {
    print_header(opt, opt.batch == 1 ? "seed scenario: one sequence" : "seed scenario");
    for (KVPrecision kv : opt.kvs)
      for (int L : opt.contexts) run_config(opt, env, kv, opt.batch, L, opt.tokens, rows);
  }
  std::vector<Slope> sl = slopes(rows);
  if (!sl.empty()) {
    std::printf("\nslope per 1k tokens of context:\n");
    for (const Slope& s : sl)
      std::printf("  kv=%-4s seqs=%d T=%d: slope %.2f %s / 1k tokens (%d -> %d)\n", s.kv.c_str(), s.batch, s.T,
                  std::fabs(s.us_per_1k) >= 1000 ? s.us_per_1k / 1000 : s.us_per_1k,
                  std::fabs(s.us_per_1k) >= 1000 ? "ms" : "us", s.from, s.to);
  }
  if (opt.scenario != "seed") {
    print_header(opt, "batch scenario");
    for (KVPrecision kv : opt.kvs)
      run_config(opt, env, kv, opt.batch_seqs, opt.batch_context, {opt.batch_tokens}, rows);
  }

  if (env.l2_bytes > 0) {
    std::string rotated;
    for (const Row& r : rows)
      if (r.sets > 1 && r.T == rows.front().T)
        rotated += " kv=" + r.kv + "/seqs=" + std::to_string(r.batch) + "/L=" + std::to_string(r.context) + ": " +
                   std::to_string(r.sets) + " sets;";
    std::printf("\nL2: %.1f MB; each replay's caches exceed 3x L2%s%s\n", static_cast<double>(env.l2_bytes) / 1e6,
                rotated.empty() ? "" : " by rotating copies of the layers:", rotated.c_str());
  }

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
    j["config"] = {{"heads", opt.heads},          {"kv_heads", opt.kv_heads}, {"head_size", opt.head_size},
                   {"layers", opt.layers},        {"block_size", opt.block_size},
                   {"query_dtype", dtype_name(opt.qdtype)},
                   {"fill", opt.fill},            {"repeats", opt.repeats}, {"scenario", opt.scenario},
                   {"timing", opt.backend == Backend::cuda ? "median of CUDA graph replays (cudaEvent)"
                                                           : "median wall clock"}};
    j["bytes_formula"] = {
        {"kv", "ctx*Hk*D*2*sizeof(kv), ctx = L+T"}, {"kv_params", "u8: ctx*Hk*2*2*sizeof(f16)"},
        {"q", "T*H*D*sizeof(q)"}, {"o", "T*H*D*sizeof(q)"}, {"new_kv", "T*Hk*D*2*sizeof(q)"},
        {"scope", "summed over sequences and layers"}};
    j["rows"] = nlohmann::json::array();
    for (const Row& r : rows)
      j["rows"].push_back({{"kv", r.kv},
                           {"seqs", r.batch},
                           {"context", r.context},
                           {"T", r.T},
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
