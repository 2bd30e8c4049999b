// Head sizes other than 64, 128 and 256 (multiples of 16 from 32 to 256: Phi-2's 80, Phi-3's 96, 112,
// 160, 192, ...) on the cuda backend. 96 and 192 are native widths of fwd_kernel, and 80 and 112 for
// f16/bf16 caches; the others (and u8/fp8 at 80, 112) run on its padded variants at the next native
// width (the columns past the head size zero, never read from memory). Per size: few-query cases
// (decodes, verifies, trees, windows, sinks, ALiBi, scores, lse) and mixed batches with prefill chunks,
// every KV precision, against the oracle with the usual tolerances; the new widths get more cases.
#include "cuda/suite.h"

using namespace gpu_suite;

// Which width and variant a head size runs on: a native width unpadded, else the next native width
// above, padded (variant "pad").
TEST(Cuda, HeadSizesPickTheirWidth) {
  REQUIRE_GPU();
  CaseConfig cfg = few_query_config();
  cfg.group_sizes = {4};
  cfg.min_seqs = cfg.max_seqs = 1;
  cfg.min_tokens = cfg.max_tokens = 1;
  for (KVPrecision kv : {KVPrecision::f16, KVPrecision::u8}) {
    cfg.kv_precisions = {kv};
    const bool bytes = kv == KVPrecision::u8;
    for (auto [D, width] : std::vector<std::pair<int, int>>{
             {32, 64}, {80, bytes ? 96 : 80}, {96, 96}, {112, bytes ? 128 : 112}, {144, 192}, {160, 192},
             {192, 192}, {208, 256}}) {
      cfg.head_sizes = {D};
      const uint64_t seed = base_seed() + 7950000 + D;
      EXPECT_EQ(plan_info(cfg, seed, Options{Backend::cuda}).head_width, width) << "D = " << D;
      expect_launched(cfg, 1, 1, seed, 128, D == width ? "" : "pad");
    }
  }
}

TEST(Cuda, HeadSizesRandom) {
  REQUIRE_GPU();
  const std::vector<KVPrecision> every = {KVPrecision::f16, KVPrecision::bf16, KVPrecision::u8, KVPrecision::fp8};
  for (int D : {32, 48, 80, 96, 112, 144, 160, 192, 208, 240}) {
    const uint64_t seed = base_seed() + 7000000 + static_cast<uint64_t>(D) * 1000;
    CaseConfig fq = few_query_config();
    fq.head_sizes = {D};
    fq.kv_precisions = every;
    fq.p_lse = 0.3;
    const bool native = D == 80 || D == 96 || D == 112 || D == 192;  // (80, 112: f16/bf16)
    const std::string name = (native ? "native-D" : "padded-D") + std::to_string(D);
    const std::string a = name + "-few-query", b = name + "-mixed";
    run_suite(a.c_str(), fq, seed, native ? 48 : 12);
    CaseConfig mixed = mixed_config(300, 4000, 600, 12000);
    mixed.head_sizes = {D};
    mixed.kv_precisions = every;
    run_suite(b.c_str(), mixed, seed + 500, native ? 16 : 5);
  }
}

// Value heads narrower than the keys (DeepSeek-style 192/128, and others): the same padded variants,
// values and out Dv wide.
TEST(Cuda, ValueHeadSizeRandom) {
  REQUIRE_GPU();
  const std::vector<KVPrecision> every = {KVPrecision::f16, KVPrecision::bf16, KVPrecision::u8, KVPrecision::fp8};
  for (auto [D, Dv] :
       std::vector<std::pair<int, int>>{{192, 128}, {128, 64}, {256, 128}, {96, 80}, {64, 32}, {80, 64}, {112, 96}}) {
    CaseConfig fq = few_query_config();
    fq.head_sizes = {D};
    fq.value_head_sizes = {Dv};
    fq.p_value_head_size = 1.0;
    fq.kv_precisions = every;
    fq.p_lse = 0.3;
    const std::string a = "dv-" + std::to_string(D) + "/" + std::to_string(Dv) + "-few-query";
    run_suite(a.c_str(), fq, base_seed() + 7500000 + static_cast<uint64_t>(D) * 1000 + Dv, 12);
    CaseConfig mixed = mixed_config(300, 4000, 600, 12000);
    mixed.head_sizes = {D};
    mixed.value_head_sizes = {Dv};
    mixed.p_value_head_size = 1.0;
    mixed.kv_precisions = every;
    const std::string b = "dv-" + std::to_string(D) + "/" + std::to_string(Dv) + "-mixed";
    run_suite(b.c_str(), mixed, base_seed() + 7600000 + static_cast<uint64_t>(D) * 1000 + Dv, 5);
  }
}

// Long contexts at Phi-2's, Phi-3's and DeepSeek's key head sizes and 112: partitions and the merge at
// the new widths (80 and 112 for f16) and over padded rows (u8/fp8 80 and 112 on the 96 and 128 wide
// variants).
TEST(Cuda, HeadSizeLongContext) {
  REQUIRE_GPU();
  CaseConfig cfg = long_context_config(4000, 20000, 40000);
  cfg.head_sizes = {80, 96, 112, 192};
  cfg.kv_precisions = {KVPrecision::f16, KVPrecision::u8, KVPrecision::fp8};
  cfg.p_lse = 0.5;
  run_suite("head-sizes-long", cfg, base_seed() + 7900000, 10);
}
