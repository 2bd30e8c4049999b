// pagedattn — command-line tool.
//   pagedattn check --backend cpu|cuda --cases N --seed S [--config small|full]
//   pagedattn bench --backend cpu|cuda [--context 8192,32768] [--tokens 1,2,3,4,8] [--kv u8,f16] ...
// Every error (bad argument, bad input, runtime failure) is one line "pagedattn: error: ..." on stderr
// and a non-zero exit status.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench.h"
#include "check.h"
#include "pagedattn/pagedattn.h"

namespace {

using pagedattn::ValidationError;

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

int fail(const std::string& msg, int code) {
  std::fprintf(stderr, "pagedattn: error: %s\n", one_line(msg).c_str());
  return code;
}

// "8192", "8k" (x1024), "1m" (x1024^2) -> int; throws ValidationError naming the option.
int parse_count(const std::string& s, const char* option) {
  std::string t = s;
  long long mult = 1;
  if (!t.empty() && (t.back() == 'k' || t.back() == 'K')) mult = 1024, t.pop_back();
  else if (!t.empty() && (t.back() == 'm' || t.back() == 'M')) mult = 1024 * 1024, t.pop_back();
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(t, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (t.empty() || used != t.size())
    throw ValidationError(option, "expects integers (e.g. 8192 or 8k), got '" + s + "'");
  v *= mult;
  if (v < 1 || v > (1LL << 30)) throw ValidationError(option, "value out of range [1, 2^30]: '" + s + "'");
  return static_cast<int>(v);
}

std::vector<int> parse_counts(const std::vector<std::string>& v, const char* option) {
  std::vector<int> out;
  for (const std::string& s : v) out.push_back(parse_count(s, option));
  return out;
}

pagedattn::KVPrecision parse_kv(const std::string& s, const char* option = "--kv") {
  if (s == "f16") return pagedattn::KVPrecision::f16;
  if (s == "bf16") return pagedattn::KVPrecision::bf16;
  if (s == "u8") return pagedattn::KVPrecision::u8;
  if (s == "fp8") return pagedattn::KVPrecision::fp8;
  throw ValidationError(option, "each value must be u8, f16, bf16 or fp8, got '" + s + "'");
}

pagedattn::DType parse_qdtype(const std::string& s, const char* option = "--query") {
  if (s == "f16") return pagedattn::DType::f16;
  if (s == "bf16") return pagedattn::DType::bf16;
  if (s == "f32") return pagedattn::DType::f32;
  throw ValidationError(option, "must be f16, bf16 or f32, got '" + s + "'");
}

// "32/8/128" -> {H, Hk, D}; throws ValidationError naming the option.
pagedattn::tools::Shape parse_shape(const std::string& s, const char* option) {
  std::vector<std::string> parts{""};
  for (char c : s) {
    if (c == '/') parts.emplace_back();
    else parts.back() += c;
  }
  if (parts.size() != 3)
    throw ValidationError(option, "each shape must be H/Hk/D (e.g. 32/8/128), got '" + s + "'");
  return {parse_count(parts[0], option), parse_count(parts[1], option), parse_count(parts[2], option)};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pagedattn: paged attention for every step of speculative decoding at the cost of one KV read"};
  app.set_version_flag("--version", "pagedattn 0.1.0");
  app.require_subcommand(1);

  // --- check ---
  pagedattn::tools::CheckOptions copt;
  std::string check_backend = "cpu";
  CLI::App* check = app.add_subcommand("check", "random seeded cases of a backend against the CPU oracle");
  check->add_option("--backend", check_backend, "cpu | cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  check->add_option("--cases", copt.cases, "number of cases")->capture_default_str();
  check->add_option("--seed", copt.seed, "case i uses seed + i; 0: a fresh random seed (printed)")->capture_default_str();
  check->add_option("--config", copt.config,
                    "case ranges: small (<= 4 seqs, past <= 1024, T <= 16) | full (<= 8 seqs, past <= 3000, T <= 40)"
                    " | long (u8, 8 seqs, past 56k-66k, T <= 16, Hk = 1)")
      ->check(CLI::IsMember({"small", "full", "long"}))
      ->capture_default_str();
  check->add_option("--max-seqs", copt.max_seqs, "override the config's largest batch");
  check->add_option("--max-past", copt.max_past, "override the config's largest past_len");
  check->add_option("--max-tokens", copt.max_tokens, "override the config's largest T per sequence");
  check->add_option("--min-seqs", copt.min_seqs, "override the config's smallest batch");
  check->add_option("--min-past", copt.min_past, "override the config's smallest past_len");
  check->add_option("--min-tokens", copt.min_tokens, "override the config's smallest T per sequence");
  check->add_option("--kv", copt.kv, "KV precisions drawn from (f16,bf16,u8; fp8 on request)")->delimiter(',');
  check->add_option("--query", copt.query, "query dtypes drawn from (f32,f16,bf16)")->delimiter(',');
  check->add_option("--group", copt.groups, "GQA group sizes G = H / Hk drawn from")->delimiter(',');
  check->add_option("--kv-heads", copt.kv_heads, "kv head counts drawn from")->delimiter(',');
  check->add_option("--head-size", copt.head_sizes, "head sizes drawn from")->delimiter(',');
  check->add_option("--value-head-size", copt.value_head_sizes,
                    "value head sizes Dv: half the cases draw one (<= D), the rest Dv = D")->delimiter(',');
  check->add_option("--block-size", copt.block_sizes, "block sizes drawn from")->delimiter(',');
  check->add_option("--p-tree", copt.p_tree, "probability of a tree mask (qq_bias)");
  check->add_option("--p-window", copt.p_window, "probability of a sliding window");
  check->add_option("--p-scores", copt.p_scores, "probability of the scores output");
  check->add_option("--p-alibi", copt.p_alibi, "probability of ALiBi slopes");
  check->add_option("--p-sinks", copt.p_sinks, "probability of sinks");
  check->add_option("--p-lse", copt.p_lse, "probability of the lse output (default 0)");
  check->add_option("--partition-tokens", copt.partition_tokens,
                    "cuda: Options::partition_tokens (1048576: one partition per chunk, a CTA sums a whole context)");
  check->add_option("--threads", copt.threads, "oracle threads over a case's sequences (0: all cores)");
  check->add_flag("-v,--verbose", copt.verbose, "one line per case");
  check->add_option("--perturb", copt.perturb,
                    "self-test of the checker: add this to one output element of the backend (the check must fail)");

  // --- bench ---
  pagedattn::tools::BenchOptions bopt;
  std::string bench_backend = "cpu", query = "f16", prefill_query = "bf16";
  std::vector<std::string> contexts, tokens, kvs, prefill_contexts, prefill_shapes, prefill_kvs;
  std::vector<std::string> sweep_groups, sweep_head_sizes, sweep_trees;
  CLI::App* bench = app.add_subcommand(
      "bench", "the seed scenario: Qwen3.5-9B attention, T new tokens over an L-token paged cache, per N layers");
  bench->footer(
      "Defaults on cpu:  --context 8192,32768 --layers 1 --repeats 20 --fill random --scenario all\n"
      "                  (all on cpu: seed, then --batch-seqs 8 --batch-context 4096 x T=4)\n"
      "Defaults on cuda: --context 8192,32768,131072 --layers 8 --repeats 50 --fill op --scenario all\n"
      "                  (one CUDA graph of all layers per replay; layer copies rotate so caches exceed 3x L2)\n"
      "Scenario all: seed + batch on cpu; on cuda also prefill, chunk and mixed (one layer per call, random fill).\n"
      "Long-query defaults on cuda: --prefill-context 8192,32768 --chunk-past 32768 --chunk-tokens 1024\n"
      "                  --mixed-past 8192 --mixed-chunk 1024 --mixed-verifies 31 --mixed-verify-tokens 4\n"
      "           on cpu (tiny):  --prefill-context 256 --chunk-past 512 --chunk-tokens 64\n"
      "                  --mixed-past 512 --mixed-chunk 64 --mixed-verifies 3 --mixed-verify-tokens 4");
  bench->add_option("--backend", bench_backend, "cpu | cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  CLI::Option* o_ctx = bench->add_option("--context", contexts, "cached tokens L per sequence, list (8192,32k,...)")->delimiter(',');
  bench->add_option("--tokens", tokens, "new tokens T per sequence, list (default 1,2,3,4,8); T/T1 is relative to the first")
      ->delimiter(',');
  bench->add_option("--kv", kvs, "KV cache precisions, list of u8 | f16 | bf16 | fp8 (default u8,f16)")->delimiter(',');
  CLI::Option* o_layers = bench->add_option("--layers", bopt.layers, "layers, each its own cache");
  bench->add_option("--block-size", bopt.block_size, "tokens per cache block")->capture_default_str();
  bench->add_option("--batch", bopt.batch, "sequences in the seed scenario, each with the same context")->capture_default_str();
  CLI::Option* o_fill = bench->add_option("--fill", bopt.fill, "op: fill the cache by running the op on prefill chunks; random: write bytes directly")
                            ->check(CLI::IsMember({"op", "random"}));
  bench->add_option("--fill-chunk", bopt.fill_chunk, "tokens per prefill chunk of --fill op")->capture_default_str();
  CLI::Option* o_rep = bench->add_option("--repeats", bopt.repeats, "timed repeats (median reported)");
  bench->add_option("--warmup", bopt.warmup, "untimed repeats first")->capture_default_str();
  CLI::Option* o_scn =
      bench->add_option("--scenario", bopt.scenario,
                        "seed | batch (32 seqs x 8k x T=4) | prefill (from zero) | chunk (1024 at 32k) | "
                        "mixed (1 chunk + 31 verifies) | sweep (issue 21: D x G x T, chains and trees) | "
                        "split (issue 27: shards + merge_states against the whole call) | all")
          ->check(CLI::IsMember({"seed", "batch", "prefill", "chunk", "mixed", "sweep", "split", "all"}));
  CLI::Option* o_bseqs =
      bench->add_option("--batch-seqs", bopt.batch_seqs, "sequences of the batch scenario (cpu default 8)")->capture_default_str();
  CLI::Option* o_bctx =
      bench->add_option("--batch-context", bopt.batch_context, "context of the batch scenario (cpu default 4096)")->capture_default_str();
  bench->add_option("--batch-tokens", bopt.batch_tokens, "T of the batch scenario")->capture_default_str();
  CLI::Option* o_pctx =
      bench->add_option("--prefill-context", prefill_contexts, "prefill scenario: tokens L (= T, from zero), list")
          ->delimiter(',');
  bench->add_option("--prefill-shapes", prefill_shapes, "prefill scenario: shapes H/Hk/D, list (default 32/8/128,16/4/256)")
      ->delimiter(',');
  bench->add_option("--prefill-query", prefill_query, "prefill scenario: query/output dtype f16 | bf16")
      ->capture_default_str();
  bench->add_option("--prefill-kv", prefill_kvs, "prefill scenario: KV precisions, list (default bf16)")->delimiter(',');
  bench->add_option("--prefill-long-repeats", bopt.prefill_long_repeats,
                    "prefill scenario: at most this many repeats when L > 16384 (each call is long)")
      ->capture_default_str();
  CLI::Option* o_cpast = bench->add_option("--chunk-past", bopt.chunk_past, "chunk scenario: past_len (cuda 32768)");
  CLI::Option* o_ctok = bench->add_option("--chunk-tokens", bopt.chunk_tokens, "chunk scenario: T of the chunk (cuda 1024)");
  CLI::Option* o_mpast = bench->add_option("--mixed-past", bopt.mixed_past, "mixed scenario: past_len of every sequence (cuda 8192)");
  CLI::Option* o_mchunk = bench->add_option("--mixed-chunk", bopt.mixed_chunk, "mixed scenario: T of the prefill chunk (cuda 1024)");
  CLI::Option* o_mver = bench->add_option("--mixed-verifies", bopt.mixed_verifies, "mixed scenario: verify sequences (cuda 31)");
  bench->add_option("--mixed-verify-tokens", bopt.mixed_verify_tokens, "mixed scenario: T of each verify")
      ->capture_default_str();
  bench->add_option("--heads", bopt.heads, "query heads H")->capture_default_str();
  bench->add_option("--kv-heads", bopt.kv_heads, "kv heads Hk")->capture_default_str();
  bench->add_option("--head-size", bopt.head_size, "head size D")->capture_default_str();
  bench->add_option("--value-head-size", bopt.value_head_size, "value head size Dv (0: D)")->capture_default_str();
  bench->add_option("--query", query, "query/output dtype: f16 | bf16 | f32 (f32: cpu only)")->capture_default_str();
  bench->add_option("--seed", bopt.seed, "seed of the random contents and block tables")->capture_default_str();
  bench->add_option("--json", bopt.json, "also write the results (with device, date, commit) to this file");
  bench->add_flag("-v,--verbose", bopt.verbose, "print each configuration's plan");
  bench->add_option("--partition", bopt.partition_tokens, "cuda: force the KV partition size (Options::partition_tokens)")
      ->check(CLI::NonNegativeNumber);
  bool no_pdl = false;
  bench->add_flag("--no-pdl", no_pdl, "cuda: Options::programmatic_launch = false");
  bench->add_flag("--lse", bopt.lse, "every timed call also writes Params::lse ([tokens, H] f32)");
  bench->add_flag("--interleave", bopt.interleave,
                  "seed, batch and sweep: the T rows of one (kv, seqs, context) timed in rotation, one replay of each "
                  "in turn, each row the median of its own replays (every row under the same clock and power state); "
                  "default: each row's replays in one run");
  bench->add_option("--split-shards", bopt.split_shards, "split scenario: shards per context")->capture_default_str();
  bench->add_flag("--deterministic", bopt.deterministic,
                  "Options::deterministic: invariant rows (verify rows equal decodes, any batch)");
  bench->add_option("--sweep-groups", sweep_groups, "sweep scenario: groups G = H / Hk, list (default 1,2,4,8,16)")
      ->delimiter(',');
  bench->add_option("--sweep-head-sizes", sweep_head_sizes, "sweep scenario: head sizes D, list (default 64,128,256)")
      ->delimiter(',');
  bench->add_option("--sweep-trees", sweep_trees, "sweep scenario: draft trees of these node counts, list (default 16,32)")
      ->delimiter(',');
  bench->add_option("--sweep-kv-heads", bopt.sweep_kv_heads, "sweep scenario: kv heads Hk")->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    return fail(e.what(), 2);
  }

  try {
    if (check->parsed()) {
      copt.backend = pagedattn::parse_backend(check_backend);
      return pagedattn::tools::run_check(copt);
    }
    const bool cuda = bench_backend == "cuda";
    bopt.backend = pagedattn::parse_backend(bench_backend);
    bopt.contexts = contexts.empty() ? (cuda ? std::vector<int>{8192, 32768, 131072} : std::vector<int>{8192, 32768})
                                     : parse_counts(contexts, "--context");
    const bool sweep = bopt.scenario == "sweep";  // issue 21's rows: T = 1, 2, 4, 8, 16 (and trees)
    bopt.tokens = !tokens.empty() ? parse_counts(tokens, "--tokens")
                  : sweep         ? std::vector<int>{1, 2, 4, 8, 16}
                                  : std::vector<int>{1, 2, 3, 4, 8};
    if (!sweep_groups.empty()) bopt.sweep_groups = parse_counts(sweep_groups, "--sweep-groups");
    if (!sweep_head_sizes.empty()) bopt.sweep_head_sizes = parse_counts(sweep_head_sizes, "--sweep-head-sizes");
    if (!sweep_trees.empty()) bopt.sweep_trees = parse_counts(sweep_trees, "--sweep-trees");
    if (kvs.empty()) kvs = {"u8", "f16"};
    for (const std::string& k : kvs) bopt.kvs.push_back(parse_kv(k));
    bopt.qdtype = parse_qdtype(query);
    // cpu: issue 22's rows (seed shape, one layer per call, 8k and 32k, 8 x 4k at T=4), medians of 20
    if (o_layers->count() == 0) bopt.layers = cuda ? 8 : 1;
    if (o_rep->count() == 0) bopt.repeats = cuda ? 50 : 20;
    if (o_fill->count() == 0) bopt.fill = cuda ? "op" : "random";
    if (o_scn->count() == 0) bopt.scenario = "all";
    if (o_bseqs->count() == 0 && !cuda) bopt.batch_seqs = 8;
    if (o_bctx->count() == 0 && !cuda) bopt.batch_context = 4096;
    (void)o_ctx;
    if (!prefill_contexts.empty()) bopt.prefill_contexts = parse_counts(prefill_contexts, "--prefill-context");
    else if (!cuda) bopt.prefill_contexts = {256};
    (void)o_pctx;
    if (!prefill_shapes.empty()) {
      bopt.prefill_shapes.clear();
      for (const std::string& sh : prefill_shapes) bopt.prefill_shapes.push_back(parse_shape(sh, "--prefill-shapes"));
    }
    bopt.prefill_qdtype = parse_qdtype(prefill_query, "--prefill-query");
    if (!prefill_kvs.empty()) {
      bopt.prefill_kvs.clear();
      for (const std::string& k : prefill_kvs) bopt.prefill_kvs.push_back(parse_kv(k, "--prefill-kv"));
    }
    if (o_cpast->count() == 0) bopt.chunk_past = cuda ? 32768 : 512;
    if (o_ctok->count() == 0) bopt.chunk_tokens = cuda ? 1024 : 64;
    if (o_mpast->count() == 0) bopt.mixed_past = cuda ? 8192 : 512;
    if (o_mchunk->count() == 0) bopt.mixed_chunk = cuda ? 1024 : 64;
    if (o_mver->count() == 0) bopt.mixed_verifies = cuda ? 31 : 3;
    bopt.programmatic_launch = !no_pdl;
    return pagedattn::tools::run_bench(bopt);
  } catch (const pagedattn::Error& e) {
    return fail(e.what(), 1);
  } catch (const std::bad_alloc&) {
    return fail("out of host memory", 1);
  } catch (const std::exception& e) {
    return fail(e.what(), 1);
  }
}
