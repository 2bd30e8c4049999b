// tools: `pagedattn bench` — the seed scenario of speculative-decoding verify (DESIGN.md section 6).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pagedattn/pagedattn.h"

namespace pagedattn {
namespace tools {

struct BenchOptions {
  Backend backend = Backend::cpu;
  // Model: Qwen3.5-9B attention.
  int heads = 16, kv_heads = 4, head_size = 256;
  int layers = 8;                          // each layer its own cache
  int block_size = 32;
  int batch = 1;                           // sequences, each with the same context
  std::vector<int> contexts;               // L: tokens already cached (past_len)
  std::vector<int> tokens;                 // T: new tokens per sequence
  std::vector<KVPrecision> kvs;
  DType qdtype = DType::f16;               // query, new key/value and output
  std::string fill = "random";             // random | op (the op itself on fill_chunk-token prefill chunks)
  int fill_chunk = 1024;
  std::string scenario = "seed";           // seed | batch | all
  int batch_seqs = 32, batch_context = 8192, batch_tokens = 4;  // the batch scenario
  int repeats = 3;
  int warmup = 3;
  uint64_t seed = 1;
  std::string json;                        // write results here when non-empty
  bool verbose = false;                    // print each config's plan
};

/// Runs the benchmark and prints the table. Returns the process exit code.
int run_bench(const BenchOptions& opt);

/// Device read ceiling in GB/s, measured on `stream` (a cudaStream_t): the CUDA backend's read-only
/// kernel (pagedattn::cuda::measure_read_ceiling_gbs) over a 2 GiB buffer (less when memory is short).
double measure_read_ceiling_gbs(void* stream);

/// Host read ceiling in GB/s: one thread summing a 256 MiB buffer (the cpu backend is single-threaded).
double measure_cpu_read_ceiling_gbs();

}  // namespace tools
}  // namespace pagedattn
