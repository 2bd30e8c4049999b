// tools: `pagedattn bench` — the seed scenario of speculative-decoding verify (DESIGN.md section 6), the
// batch scenario, and the long-query scenarios: prefill from zero, a chunk of prefill, a mixed batch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pagedattn/pagedattn.h"

namespace pagedattn {
namespace tools {

/// An attention shape: query heads H, kv heads Hk, head size D.
struct Shape {
  int heads = 0, kv_heads = 0, head_size = 0;
};

struct BenchOptions {
  Backend backend = Backend::cpu;
  // Model: Qwen3.5-9B attention.
  int heads = 16, kv_heads = 4, head_size = 256;
  int value_head_size = 0;                 // Dv (0: head_size); the value cache, new values and out
  int dv() const { return value_head_size > 0 ? value_head_size : head_size; }
  int layers = 8;                          // each layer its own cache
  int block_size = 32;
  int batch = 1;                           // sequences, each with the same context
  std::vector<int> contexts;               // L: tokens already cached (past_len)
  std::vector<int> tokens;                 // T: new tokens per sequence
  std::vector<KVPrecision> kvs;
  DType qdtype = DType::f16;               // query, new key/value and output
  std::string fill = "random";             // random | op (the op itself on fill_chunk-token prefill chunks)
  int fill_chunk = 1024;
  // seed | batch | prefill | chunk | mixed | sweep | split | all (cpu: seed + batch; cuda: every scenario
  // but sweep and split). split: one sequence per (kv, context, T) cut into split_shards shards at block
  // boundaries, each its own call with lse (all but the last prefix_only), then merge_states; against
  // the whole call with lse, and merge_states alone
  std::string scenario = "seed";
  // sweep: one sequence per (head size D, group G = H / Hk with Hk = sweep_kv_heads, kv, context): chain
  // verifies of every T in `tokens`, and trees of sweep_trees nodes (qq_bias: node i's parent is
  // (i - 1) / 2); then batch_seqs x batch_context at T = 1, 4, 8 per D with G = 8
  std::vector<int> sweep_groups{1, 2, 4, 8, 16};
  std::vector<int> sweep_head_sizes{64, 128, 256};
  std::vector<int> sweep_trees{16, 32};
  int sweep_kv_heads = 4;
  int batch_seqs = 32, batch_context = 8192, batch_tokens = 4;  // the batch scenario
  // prefill: from zero (past_len 0), T = L new tokens, one layer per replay, for each shape and L
  std::vector<int> prefill_contexts{8192, 32768};
  std::vector<Shape> prefill_shapes{{32, 8, 128}, {16, 4, 256}};
  DType prefill_qdtype = DType::bf16;
  std::vector<KVPrecision> prefill_kvs{KVPrecision::bf16};
  int prefill_long = 16384;                // L above this: at most prefill_long_repeats timed repeats
  int prefill_long_repeats = 10;
  // chunk: one sequence, chunk_tokens new tokens at past_len chunk_past (shape heads/kv_heads/head_size,
  // query qdtype, every kv in kvs)
  int chunk_past = 32768, chunk_tokens = 1024;
  // mixed: one call of 1 chunk of mixed_chunk tokens + mixed_verifies sequences of mixed_verify_tokens,
  // all at past_len mixed_past; also each part alone
  int mixed_past = 8192, mixed_chunk = 1024, mixed_verifies = 31, mixed_verify_tokens = 4;
  int repeats = 3;
  int warmup = 3;
  uint64_t seed = 1;
  std::string json;                        // write results here when non-empty
  bool verbose = false;                    // print each config's plan
  int partition_tokens = 0;                // Options::partition_tokens (0: the planner decides)
  bool programmatic_launch = true;         // Options::programmatic_launch
  bool deterministic = false;              // Options::deterministic
  bool lse = false;                        // every timed call also writes Params::lse
  bool interleave = false;                 // seed/batch/sweep: a configuration's calls timed in rotation
  int split_shards = 2;                    // split: shards per context (issue 27)
};

/// Runs the benchmark and prints the table. Returns the process exit code.
int run_bench(const BenchOptions& opt);

/// Device read ceiling in GB/s, measured on `stream` (a cudaStream_t): the CUDA backend's read-only
/// kernel (pagedattn::cuda::measure_read_ceiling_gbs) over a 2 GiB buffer (less when memory is short).
double measure_read_ceiling_gbs(void* stream);

/// Host read ceiling in GB/s: `threads` threads (the cpu backend's) summing their slices of a 512 MiB buffer.
double measure_cpu_read_ceiling_gbs(int threads);

}  // namespace tools
}  // namespace pagedattn
