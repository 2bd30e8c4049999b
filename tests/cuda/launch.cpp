// GPU tests: How calls run: back-to-back plans, the merge's shapes, programmatic launch, CUDA graphs,
// and bad input (determinism: tests/cuda/invariant.cpp).
#include "common/numeric.h"
#include "core/tuning.h"
#include "cuda/suite.h"

using namespace gpu_suite;

// Two decode steps of one sequence on one cache, planned first and then run back to back (no host
// sync, no copy between their kernels): the second step's CTA over keys [past2 - 64, past2) starts
// its copies before its PDL wait and reads the row the first step has just written (the early-read
// contract, docs/design.md; partitions forced to 64 keys so that CTA exists). Reference: the oracle
// on the same two tokens as one chained call (token 1 sees token 0's row: the same semantics).
TEST(Cuda, BackToBackDecodeReadsTheRowJustWritten) {
  REQUIRE_GPU();
  CaseConfig cfg = few_query_config();
  cfg.min_seqs = cfg.max_seqs = 1;
  cfg.min_tokens = cfg.max_tokens = 2;
  cfg.p_write = 1.0;
  cfg.p_window = cfg.p_tree = cfg.p_scores = 0.0;
  const uint64_t seed0 = base_seed() + 1200000;
  std::printf("[back-to-back] base seed %llu\n", static_cast<unsigned long long>(seed0));
  Options opt{Backend::cuda};
  opt.partition_tokens = 64;
  for (int i = 0; i < case_count(24); ++i) {
    cfg.min_past = cfg.max_past = 64 * (2 + i) - 1;  // token 0 at 64k - 1, token 1 at 64k
    Case c = make_random_case(seed0 + i, cfg);
    Case ref = c;
    oracle::forward(ref.params());
    {
      DeviceCase d(c);
      const Params both = d.params();
      auto row = [](TensorView v, int i) {  // row i of a [2, W] view, as [1, W]
        v.data = static_cast<uint8_t*>(v.data) + i * v.stride[0] * static_cast<int64_t>(dtype_size(v.dtype));
        v.shape[0] = 1;
        return v;
      };
      int32_t past[2][1] = {{c.past_lens[0]}, {c.past_lens[0] + 1}};
      int32_t begins[2] = {0, 1};
      Params step[2] = {both, both};
      for (int t = 0; t < 2; ++t) {
        step[t].query = row(both.query, t);
        step[t].key = row(both.key, t);
        step[t].value = row(both.value, t);
        step[t].out = row(both.out, t);
        step[t].past_lens = TensorView::contiguous(past[t], DType::i32, Device::cpu, {1});
        step[t].subsequence_begins = TensorView::contiguous(begins, DType::i32, Device::cpu, {2});
      }
      const Plan p0 = plan(step[0], opt), p1 = plan(step[1], opt);
      p0.run(step[0]);
      p1.run(step[1]);
      d.download();
    }
    const int64_t n_out = static_cast<int64_t>(c.num_tokens) * c.num_heads * c.head_size;
    const std::vector<float> want = as_floats(ref.out, ref.qdtype, n_out);
    const Compare cmp = compare(c.out.data(), c.qdtype, want.data(), n_out);
    const std::string cache_msg = compare_cache(c, ref);
    EXPECT_TRUE(cmp.ok(tolerance(c.kv)) && cache_msg.empty())
        << "case " << c.describe() << "\n  out: " << cmp.describe() << "\n  cache: " << cache_msg;
  }
}

// The least partition as the backend wires it (tuning::min_partition: the cache kind, the key head
// size, and whether a sequence of the call has 17-32 rows per kv head): one sequence of 8000 keys at
// Hk = 4, G = 8, T = 1 (8 rows) and T = 4 (32 rows). Where the rule asks 256 keys the plan takes at least
// 256; everywhere it equals the plan with the rule's value forced through PAGEDATTN_MIN_PARTITION. On an
// H200 (132 SMs) the decodes and the 32-row chunks on fwd_kernel (two CTAs per SM: u8 and fp8 at D = 128
// / 256) fit one wave with 128 keys, so there a kind, head size or row count wired wrongly shows as 128
// against 256 or the reverse; 32-row chunks on the key-split kernel (one CTA per SM: f16/bf16, and the
// one-byte kinds at D = 64) take 256 from the wave rule alone and check nothing of the rule.
TEST(Cuda, LeastPartitionFollowsTheRule) {
  REQUIRE_GPU();
  if (std::getenv("PAGEDATTN_MIN_PARTITION") != nullptr) GTEST_SKIP() << "PAGEDATTN_MIN_PARTITION is set";
  CaseConfig cfg = few_query_config();
  cfg.min_seqs = cfg.max_seqs = 1;
  cfg.min_past = cfg.max_past = 8000;
  cfg.group_sizes = {8};
  cfg.kv_heads = {4};
  cfg.p_window = cfg.p_tree = cfg.p_scores = 0.0;
  const uint64_t seed = base_seed() + 1250000;
  std::printf("[least-partition] base seed %llu\n", static_cast<unsigned long long>(seed));
  const Options opt{Backend::cuda};
  for (KVPrecision kv : {KVPrecision::f16, KVPrecision::bf16, KVPrecision::u8, KVPrecision::fp8})
    for (int D : {64, 128, 256})
      for (int T : {1, 4}) {
        const bool mid = T * 8 > 16;
        const bool one_byte = kv == KVPrecision::u8 || kv == KVPrecision::fp8;
        const int want = !one_byte ? (D <= 128 ? 256 : 128)
                         : kv == KVPrecision::u8 ? (D <= 128 && !mid ? 256 : 128)
                                                 : (mid && D == 128 ? 128 : 256);
        cfg.kv_precisions = {kv};
        cfg.head_sizes = {D};
        cfg.min_tokens = cfg.max_tokens = T;
        const std::string where = std::string("kv ") + kv_precision_name(kv) + " D " + std::to_string(D) +
                                  " T " + std::to_string(T);
        const int got = plan_info(cfg, seed, opt).partition_tokens;
        if (want == 256) EXPECT_GE(got, 256) << where;
        int forced = 0;
        {
          EnvGuard min_part("PAGEDATTN_MIN_PARTITION", std::to_string(want).c_str());
          forced = plan_info(cfg, seed, opt).partition_tokens;
        }
        EXPECT_EQ(got, forced) << where;
      }
}

// The short-partition wave (tuning::short_wave_ctas_per_sm): a 32k decode with D = 64 one-byte codes, G = 8,
// Hk = 4 takes the 2-per-SM wave's partition where the kernel's own wave gives one under kShortWaveKeys
// (384 keys on 132 SMs x 3 CTAs), and the own wave's where not; a call with 32 rows per kv head and
// deterministic mode keep the own wave whatever PAGEDATTN_SHORT_WAVE says. Checked against the plans the
// override forces, so the device's SM count sets the expected values.
TEST(Cuda, ShortWaveFollowsItsRule) {
  REQUIRE_GPU();
  if (std::getenv("PAGEDATTN_SHORT_WAVE") != nullptr) GTEST_SKIP() << "PAGEDATTN_SHORT_WAVE is set";
  CaseConfig cfg = few_query_config();
  cfg.min_seqs = cfg.max_seqs = 1;
  cfg.min_past = cfg.max_past = 32000;
  cfg.max_total_context = 40000;
  cfg.group_sizes = {8};
  cfg.kv_heads = {4};
  cfg.head_sizes = {64};
  cfg.p_window = cfg.p_tree = cfg.p_scores = 0.0;
  const uint64_t seed = base_seed() + 1260000;
  std::printf("[short-wave] base seed %llu\n", static_cast<unsigned long long>(seed));
  for (KVPrecision kv : {KVPrecision::u8, KVPrecision::fp8})
    for (int T : {1, 4})
      for (bool det : {false, true}) {
        cfg.kv_precisions = {kv};
        cfg.min_tokens = cfg.max_tokens = T;
        Options opt{Backend::cuda};
        opt.deterministic = det;
        const std::string where = std::string("kv ") + kv_precision_name(kv) + " T " + std::to_string(T) +
                                  (det ? " deterministic" : "");
        auto part_with = [&](const char* wave) {
          EnvGuard g("PAGEDATTN_SHORT_WAVE", wave);
          return plan_info(cfg, seed, opt).partition_tokens;
        };
        const int got = plan_info(cfg, seed, opt).partition_tokens;
        const int own = part_with("0"), two = part_with("2");
        const bool rule = !det && T * 8 <= 16 && own < pagedattn::tuning::kShortWaveKeys;
        EXPECT_EQ(got, rule ? two : own) << where << ": own wave " << own << ", 2 per SM " << two;
        if (det) EXPECT_EQ(own, two) << where << ": the override moved deterministic mode";
        std::printf("[short-wave] %s: %d keys (own wave %d, 2 per SM %d)\n", where.c_str(), got, own, two);
      }
}

// Every merge layout, forced (PAGEDATTN_MERGE_SPLIT and PAGEDATTN_MERGE_BATCH; the plan picks them by
// its merge rows and partitions): few-query cases with long contexts (many partitions, so batches of 4
// or 8 with a remainder, and batch 1 over many partitions), same tolerances. A split above D/64 falls back.
TEST(Cuda, MergeSplitsRandom) {
  REQUIRE_GPU();
  const Suite suite = make_suite("merge-split", long_context_config(2000, 12000, 30000), base_seed() + 1300000, 24);
  for (const char* split : {"1", "2", "4"}) {
    for (const char* batch : {"1", "4", "8"}) {
      EnvGuard gs("PAGEDATTN_MERGE_SPLIT", split);
      EnvGuard gb("PAGEDATTN_MERGE_BATCH", batch);
      check_suite((std::string("merge-split-") + split + "-batch-" + batch).c_str(), suite);
    }
  }
}

// The cuda backend's alignment rule (params.h): every tensor it reads or writes starts on a 16-byte
// boundary. A query or output one element past an aligned address (a caller's view into a larger
// tensor) is rejected naming the tensor, and nothing is written: the output, both caches and the
// shifted buffer keep their bits.
TEST(Cuda, UnalignedBufferRejected) {
  REQUIRE_GPU();
  const Suite suite = make_suite("unaligned", few_query_config(), base_seed() + 1400000, 8);
  for (const char* name : {"query", "out"}) {
    for (const Case& c0 : suite.cases) {
      Case c = c0;
      c.out.assign(c.out.size(), 0xFF);  // poison (all-ones bits: NaN in f16/bf16)
      const Case before = c;
      const bool q = std::string(name) == "query";
      const size_t n = q ? c.query.size() : c.out.size();
      std::vector<uint8_t> shifted(q ? c.query : c.out);
      DeviceCase d(c);
      Params p = d.params();
      void* buf = nullptr;
      ASSERT_EQ(cudaSuccess, cudaMalloc(&buf, n + 16));
      uint8_t* view = static_cast<uint8_t*>(buf) + dtype_size(c.qdtype);
      ASSERT_EQ(cudaSuccess, cudaMemcpy(view, shifted.data(), n, cudaMemcpyHostToDevice));
      (q ? p.query : p.out).data = view;
      try {
        forward(p, Options{Backend::cuda});
        ADD_FAILURE() << name << " one element off 16 bytes was accepted: " << c.describe();
      } catch (const ValidationError& e) {
        EXPECT_NE(std::string(e.what()).find(std::string("'") + name + "'"), std::string::npos) << e.what();
      }
      d.download();
      std::vector<uint8_t> after(n);
      ASSERT_EQ(cudaSuccess, cudaMemcpy(after.data(), view, n, cudaMemcpyDeviceToHost));
      ASSERT_EQ(cudaSuccess, cudaFree(buf));
      EXPECT_EQ(before.out, c.out) << name << ": " << c.describe();
      EXPECT_EQ(before.key_cache, c.key_cache) << name << ": " << c.describe();
      EXPECT_EQ(before.value_cache, c.value_cache) << name << ": " << c.describe();
      EXPECT_EQ(shifted, after) << name << ": " << c.describe();
    }
  }
}

// Programmatic dependent launch off (Options::programmatic_launch = false): plain stream order, no
// early cache reads; the few-query cases, same tolerances.
TEST(Cuda, WithoutProgrammaticLaunch) {
  REQUIRE_GPU();
  Options opt{Backend::cuda};
  opt.programmatic_launch = false;
  const PlanInfo info = plan_info(few_query_config(), base_seed() + 1000000, opt);
  EXPECT_FALSE(info.pdl || info.early_reads) << "PDL still on";
  run_suite("no-pdl", few_query_config(), base_seed() + 1000000, 60, opt);
}

TEST(Cuda, GraphReplayMatchesDirectRun) {
  REQUIRE_GPU();
  CaseConfig cfg = few_query_config();
  cfg.p_write = 1.0;
  const uint64_t seed = base_seed() + 500000;
  std::printf("[graph] seed %llu\n", static_cast<unsigned long long>(seed));
  Case c = make_random_case(seed, cfg);
  Case ref = c;
  oracle::forward(ref.params());
  DeviceCase d(c);
  cudaStream_t stream;
  ASSERT_EQ(cudaSuccess, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Options opt{Backend::cuda};
  opt.stream = stream;
  Plan pl = plan(d.params(), opt);
  ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaSuccess, cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  pl.run(d.params());
  ASSERT_EQ(cudaSuccess, cudaStreamEndCapture(stream, &graph));
  ASSERT_EQ(cudaSuccess, cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i) ASSERT_EQ(cudaSuccess, cudaGraphLaunch(exec, stream));
  ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(stream));
  d.download();
  const int64_t n_out = static_cast<int64_t>(c.num_tokens) * c.num_heads * c.head_size;
  const std::vector<float> want = as_floats(ref.out, ref.qdtype, n_out);
  const Compare cmp = compare(c.out.data(), c.qdtype, want.data(), n_out);
  EXPECT_TRUE(cmp.ok(tolerance(c.kv))) << c.describe() << ": " << cmp.describe();
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(Cuda, BadInputWritesNothing) {
  REQUIRE_GPU();
  CaseConfig cfg = few_query_config();
  cfg.p_write = 1.0;
  Case c = make_random_case(base_seed() + 600000, cfg);
  const Case before = c;
  DeviceCase d(c);
  Params p = d.params();
  std::vector<int32_t> bad = c.block_indices;
  bad[0] = c.num_blocks + 7;  // out of range
  p.block_indices.data = bad.data();
  EXPECT_THROW(forward(p, {Backend::cuda}), ValidationError);
  d.download();
  EXPECT_EQ(before.out, c.out);
  EXPECT_EQ(before.key_cache, c.key_cache);
  EXPECT_EQ(before.value_cache, c.value_cache);
}

// What the cpu backend runs and the cuda one does not: key or value head sizes that are not multiples
// of 16 (and value heads wider than the keys); refused with UnsupportedError at plan time, before
// anything is written.
TEST(Cuda, UnsupportedInputsWriteNothing) {
  REQUIRE_GPU();
  // forward() of case `seed` (its params changed by `edit`) throws UnsupportedError; out and the caches stay
  auto refused = [](const CaseConfig& cfg, uint64_t seed, const std::function<void(Params&)>& edit) {
    Case c = make_random_case(seed, cfg);
    const Case before = c;
    {
      DeviceCase d(c);
      Params p = d.params();
      edit(p);
      EXPECT_THROW(forward(p, {Backend::cuda}), UnsupportedError) << c.describe();
      d.download();
    }
    EXPECT_EQ(before.out, c.out);
    EXPECT_EQ(before.key_cache, c.key_cache);
    EXPECT_EQ(before.value_cache, c.value_cache);
  };
  CaseConfig cfg = few_query_config();
  cfg.p_write = 1.0;
  cfg.head_sizes = {72};  // not a multiple of 16
  refused(cfg, base_seed() + 610001, [](Params&) {});
  cfg.head_sizes = {128};
  cfg.value_head_sizes = {40};  // a value head size that is not a multiple of 16
  cfg.p_value_head_size = 1.0;
  refused(cfg, base_seed() + 610002, [](Params&) {});
}

// The lse output (Params::lse): every case asks for it; decodes, verifies and prefill chunks, one and
// several partitions (the merge kernel's rows), sinks; each row's lse against the oracle's
// (lse_tolerance: 1e-4 of max(1, |lse|), u8 1e-2).
TEST(Cuda, LseRandom) {
  REQUIRE_GPU();
  CaseConfig fq = few_query_config();
  fq.p_lse = 1.0;
  run_suite("lse-few-query", fq, base_seed() + 3700000, 120);
  CaseConfig mixed = mixed_config(300, 4000, 600, 12000);
  mixed.p_lse = 1.0;
  run_suite("lse-mixed", mixed, base_seed() + 3800000, 60);
  CaseConfig lng = long_context_config(4000, 20000, 40000);
  lng.p_lse = 1.0;
  run_suite("lse-long", lng, base_seed() + 3900000, 16);
}

// A context split in two on the cuda backend (Params::prefix_only for the first shard of every sequence,
// cut at a random block boundary, empty shards included; the second holds the rest, the new tokens, the
// sinks and the tree mask), each shard with lse; merged on the host with merge_states, against the whole call on the
// GPU: out within the KV kind's tolerance, lse within 1e-4 of max(1, |lse|). Windows and ALiBi: the first
// shard places the new tokens with new_token_positions (a window can end before that shard, or hide it
// from the later tokens of a chunk only: rows with no key, out 0 and lse -inf).
TEST(Cuda, SplitContextMerges) {
  REQUIRE_GPU();
  CaseConfig cfg = few_query_config();
  cfg.p_scores = 0.0;  // (rejected with prefix_only)
  cfg.p_write = 1.0;
  cfg.kv_precisions = {KVPrecision::f16, KVPrecision::bf16, KVPrecision::u8, KVPrecision::fp8};
  cfg.query_dtypes = {DType::f32, DType::f16};
  const uint64_t seed = base_seed() + 4000000;
  const int n_cases = case_count(40);
  std::printf("[split-cuda] base seed %llu, %d cases\n", static_cast<unsigned long long>(seed), n_cases);
  int64_t rows_without_keys = 0;
  for (int i = 0; i < n_cases; ++i) {
    Case whole = make_random_case(seed + i, cfg);
    whole.want_lse = true;
    whole.lse.assign(static_cast<size_t>(whole.num_tokens) * whole.num_heads, NAN);
    Case split = whole;  // before the whole call writes the new tokens in
    {
      DeviceCase d(whole);
      forward(d.params(), Options{Backend::cuda});
      d.download();
    }
    const int n = split.num_tokens, H = split.num_heads, D = split.head_size, bs = split.block_size;
    std::mt19937_64 rng(seed + i);
    std::vector<int> cut(split.num_seqs);
    for (int s = 0; s < split.num_seqs; ++s) cut[s] = static_cast<int>(rng() % (split.past_lens[s] / bs + 1)) * bs;
    std::vector<std::vector<uint8_t>> outs(2);
    std::vector<std::vector<float>> lses(2);
    DeviceCase d(split);
    for (int shard = 0; shard < 2; ++shard) {
      std::vector<int32_t> past, table, begins{0};
      int max_ctx = 0;
      for (int s = 0; s < split.num_seqs; ++s) {
        const int lo = shard == 0 ? 0 : cut[s], hi = shard == 0 ? cut[s] : split.past_lens[s];
        const int top = shard == 0 ? hi : split.ctx(s);
        const int32_t* t = split.block_indices.data() + split.block_indices_begins[s];
        for (int b = lo / bs; b * bs < top; ++b) table.push_back(t[b]);
        begins.push_back(static_cast<int32_t>(table.size()));
        past.push_back(hi - lo);
        max_ctx = std::max(max_ctx, top - lo);
      }
      void* dout = nullptr;
      void* dlse = nullptr;
      const size_t out_bytes = static_cast<size_t>(n) * H * D * dtype_size(split.qdtype);
      ASSERT_EQ(cudaMalloc(&dout, std::max<size_t>(out_bytes, 16)), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&dlse, std::max<size_t>(static_cast<size_t>(n) * H * 4, 16)), cudaSuccess);
      Params p = d.params();
      auto host_i32 = [](std::vector<int32_t>& v) {
        return TensorView::contiguous(v.data(), DType::i32, Device::cpu, {static_cast<int64_t>(v.size())});
      };
      p.past_lens = host_i32(past);
      p.block_indices = host_i32(table);
      p.block_indices_begins = host_i32(begins);
      p.max_context_len = max_ctx;
      p.out = TensorView::contiguous(dout, split.qdtype, Device::cuda, {n, int64_t{H} * D});
      p.lse = TensorView::contiguous(dlse, DType::f32, Device::cuda, {n, H});
      std::vector<int32_t> positions(split.past_lens.begin(), split.past_lens.end());  // shard 0 starts at key 0
      if (shard == 0) {
        p.prefix_only = true;
        p.key = p.value = p.sinks = p.qq_bias = p.qq_bias_begins = TensorView{};
        if (split.sliding_window != 0 || !split.alibi_slopes.empty()) p.new_token_positions = host_i32(positions);
      }
      // poisoned: every row is written (rows with no key as 0 and -inf)
      ASSERT_EQ(cudaMemset(dout, 0xff, std::max<size_t>(out_bytes, 16)), cudaSuccess);
      ASSERT_EQ(cudaMemset(dlse, 0xff, std::max<size_t>(static_cast<size_t>(n) * H * 4, 16)), cudaSuccess);
      forward(p, Options{Backend::cuda});
      outs[shard].resize(out_bytes);
      lses[shard].resize(static_cast<size_t>(n) * H);
      EXPECT_EQ(cudaMemcpy(outs[shard].data(), dout, out_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(cudaMemcpy(lses[shard].data(), dlse, lses[shard].size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      cudaFree(dout);
      cudaFree(dlse);
    }
    if (split.sliding_window > 0)  // rows the window hides shard 0 from (when it holds keys)
      for (int s = 0; s < split.num_seqs; ++s)
        for (int t = 0; t < split.T(s); ++t)
          if (cut[s] > 0 && split.past_lens[s] + t - split.sliding_window + 1 >= cut[s]) ++rows_without_keys;
    std::vector<float> merged(static_cast<size_t>(n) * H * D), merged_lse(static_cast<size_t>(n) * H);
    std::vector<TensorView> ov, lv;
    for (int shard = 0; shard < 2; ++shard) {
      ov.push_back(TensorView::contiguous(outs[shard].data(), split.qdtype, Device::cpu, {n, int64_t{H} * D}));
      lv.push_back(TensorView::contiguous(lses[shard].data(), DType::f32, Device::cpu, {n, H}));
    }
    merge_states(ov, lv, TensorView::contiguous(merged.data(), DType::f32, Device::cpu, {n, int64_t{H} * D}),
                 TensorView::contiguous(merged_lse.data(), DType::f32, Device::cpu, {n, H}));
    const std::vector<float> want = as_floats(whole.out, whole.qdtype, static_cast<int64_t>(merged.size()));
    const Compare co = compare(reinterpret_cast<const uint8_t*>(merged.data()), DType::f32, want.data(),
                               static_cast<int64_t>(merged.size()));
    const LseCompare cl = compare_lse(merged_lse.data(), whole.lse.data(), static_cast<int64_t>(merged_lse.size()));
    EXPECT_TRUE(co.ok(tolerance(split.kv, split.qdtype)) && cl.ok(kLseTolerance))
        << "case " << split.describe() << "\n  out: " << co.describe()
        << "\n  lse: " << cl.describe(merged_lse.data(), whole.lse.data());
  }
  std::printf("[split-cuda] %lld query tokens saw no key of the first shard (its window starts past it)\n",
              static_cast<long long>(rows_without_keys));
}

// merge_states on the cuda backend against the cpu one: k partials (f16 / bf16 / f32, some rows -inf in
// one or every partial), out in f32 and in the partials' dtype, in place too.
TEST(Cuda, MergeStatesMatchesTheHost) {
  REQUIRE_GPU();
  std::mt19937_64 rng(base_seed() + 4100000);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    const int n = 7, H = 4, D = 128, k = 3;
    const size_t esz = dtype_size(dt), elems = static_cast<size_t>(n) * H * D;
    std::vector<std::vector<uint8_t>> outs(k, std::vector<uint8_t>(elems * esz));
    std::vector<std::vector<float>> lses(k, std::vector<float>(static_cast<size_t>(n) * H));
    for (int i = 0; i < k; ++i) {
      for (size_t e = 0; e < elems; ++e) {
        const float x = u(rng);
        if (dt == DType::f32) reinterpret_cast<float*>(outs[i].data())[e] = x;
        else reinterpret_cast<uint16_t*>(outs[i].data())[e] =
            dt == DType::f16 ? num::f32_to_f16_bits(x) : num::f32_to_bf16_bits(x);
      }
      for (float& l : lses[i]) l = u(rng);
    }
    lses[0][0] = lses[1][0] = lses[2][0] = -INFINITY;  // row 0 head 0: no key anywhere
    lses[1][5] = -INFINITY;
    // host reference
    std::vector<float> want(elems), want_lse(static_cast<size_t>(n) * H);
    std::vector<TensorView> ho, hl;
    for (int i = 0; i < k; ++i) {
      ho.push_back(TensorView::contiguous(outs[i].data(), dt, Device::cpu, {n, H * D}));
      hl.push_back(TensorView::contiguous(lses[i].data(), DType::f32, Device::cpu, {n, H}));
    }
    merge_states(ho, hl, TensorView::contiguous(want.data(), DType::f32, Device::cpu, {n, H * D}),
                 TensorView::contiguous(want_lse.data(), DType::f32, Device::cpu, {n, H}));
    // device
    std::vector<void*> dev;
    auto up = [&](const void* src, size_t bytes) {
      void* d = nullptr;
      EXPECT_EQ(cudaMalloc(&d, std::max<size_t>(bytes, 16)), cudaSuccess);
      EXPECT_EQ(cudaMemcpy(d, src, bytes, cudaMemcpyHostToDevice), cudaSuccess);
      dev.push_back(d);
      return d;
    };
    std::vector<TensorView> dO, dL;
    for (int i = 0; i < k; ++i) {
      dO.push_back(TensorView::contiguous(up(outs[i].data(), outs[i].size()), dt, Device::cuda, {n, H * D}));
      dL.push_back(TensorView::contiguous(up(lses[i].data(), lses[i].size() * 4), DType::f32, Device::cuda, {n, H}));
    }
    std::vector<float> zeros(elems, 0.0f);
    const TensorView out = TensorView::contiguous(up(zeros.data(), elems * 4), DType::f32, Device::cuda, {n, H * D});
    const TensorView lse = TensorView::contiguous(up(zeros.data(), want_lse.size() * 4), DType::f32, Device::cuda, {n, H});
    merge_states(dO, dL, out, lse, Options{Backend::cuda});
    merge_states(dO, dL, dO[0], dL[0], Options{Backend::cuda});  // in place: out = outs[0], lse = lses[0]
    std::vector<float> got(elems), got_lse(want_lse.size());
    std::vector<uint8_t> got_inplace(elems * esz);
    std::vector<float> got_inplace_lse(want_lse.size());
    ASSERT_EQ(cudaMemcpy(got.data(), out.data, elems * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got_lse.data(), lse.data, got_lse.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got_inplace.data(), dO[0].data, got_inplace.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got_inplace_lse.data(), dL[0].data, got_inplace_lse.size() * 4, cudaMemcpyDeviceToHost),
              cudaSuccess);
    for (void* d : dev) cudaFree(d);
    const Compare c = compare(reinterpret_cast<const uint8_t*>(got.data()), DType::f32, want.data(),
                              static_cast<int64_t>(elems));
    const Compare ci = compare(got_inplace.data(), dt, want.data(), static_cast<int64_t>(elems));
    EXPECT_TRUE(c.ok(1e-5)) << dtype_name(dt) << " out: " << c.describe();
    EXPECT_TRUE(ci.ok(dt == DType::bf16 ? 1e-2 : 2e-3)) << dtype_name(dt) << " in place: " << ci.describe();
    EXPECT_EQ(got[0], 0.0f);
    for (const std::vector<float>* g : {&got_lse, &got_inplace_lse}) {
      const LseCompare cl = compare_lse(g->data(), want_lse.data(), static_cast<int64_t>(want_lse.size()));
      EXPECT_TRUE(cl.ok(1e-5)) << dtype_name(dt) << " lse: " << cl.describe(g->data(), want_lse.data());
    }
  }
}
