// One decode step on the CPU backend through pagedattn's public API: one sequence with 100 cached
// tokens and one new token (H = 8 query heads, Hk = 2 kv heads, D = 64, f16 cache in blocks of 16).
// Prints the output's checksum; exits 1 on any error or a non-finite output.
#include <pagedattn/pagedattn.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

// A deterministic pseudo-random sequence (xorshift32).
struct Rng {
  uint32_t s = 0x9e3779b9u;
  uint32_t next() {
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    return s;
  }
  float uniform() { return static_cast<float>(next() >> 8) / 16777216.0f * 2.0f - 1.0f; }  // [-1, 1)
  // An f16 bit pattern of +-[0.5, 1): sign, exponent -1, random mantissa.
  uint16_t f16() { return static_cast<uint16_t>(((next() & 1u) << 15) | 0x3800u | (next() & 0x3ffu)); }
};

}  // namespace

int main() {
  using namespace pagedattn;
  constexpr int H = 8, Hk = 2, D = 64, block_size = 16, past = 100, T = 1;
  constexpr int num_blocks = (past + T + block_size - 1) / block_size;  // 7 blocks hold 101 tokens

  Rng rng;
  std::vector<float> q(T * H * D), k(T * Hk * D), v(T * Hk * D), out(T * H * D);
  for (float& x : q) x = rng.uniform();
  for (float& x : k) x = rng.uniform();
  for (float& x : v) x = rng.uniform();
  std::vector<uint16_t> kc(static_cast<size_t>(num_blocks) * Hk * block_size * D), vc(kc.size());
  for (uint16_t& x : kc) x = rng.f16();
  for (uint16_t& x : vc) x = rng.f16();
  std::vector<int32_t> table(num_blocks);
  for (int b = 0; b < num_blocks; ++b) table[b] = num_blocks - 1 - b;  // any order works
  int32_t past_lens[] = {past}, begins[] = {0, T}, table_begins[] = {0, num_blocks};

  Params p;
  p.num_heads = H;
  p.query = TensorView::contiguous(q.data(), DType::f32, Device::cpu, {T, H * D});
  p.key = TensorView::contiguous(k.data(), DType::f32, Device::cpu, {T, Hk * D});  // written at position 100
  p.value = TensorView::contiguous(v.data(), DType::f32, Device::cpu, {T, Hk * D});
  p.cache.key = TensorView::contiguous(kc.data(), DType::f16, Device::cpu, {num_blocks, Hk, block_size, D});
  p.cache.value = TensorView::contiguous(vc.data(), DType::f16, Device::cpu, {num_blocks, Hk, block_size, D});
  p.past_lens = TensorView::contiguous(past_lens, DType::i32, Device::cpu, {1});
  p.subsequence_begins = TensorView::contiguous(begins, DType::i32, Device::cpu, {2});
  p.block_indices = TensorView::contiguous(table.data(), DType::i32, Device::cpu, {num_blocks});
  p.block_indices_begins = TensorView::contiguous(table_begins, DType::i32, Device::cpu, {2});
  p.max_context_len = past + T;
  p.out = TensorView::contiguous(out.data(), DType::f32, Device::cpu, {T, H * D});

  try {
    Plan plan = pagedattn::plan(p, {Backend::cpu});
    plan.run(p);
  } catch (const ValidationError& e) {
    std::fprintf(stderr, "pagedattn_consumer: invalid input %s: %s\n", e.input().c_str(), e.rule().c_str());
    return 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "pagedattn_consumer: %s\n", e.what());
    return 1;
  }

  double sum = 0, sum_abs = 0;
  for (float x : out) {
    if (!std::isfinite(x)) {
      std::fprintf(stderr, "pagedattn_consumer: non-finite output %f\n", x);
      return 1;
    }
    sum += x;
    sum_abs += std::fabs(x);
  }
  // Each output is a convex combination of values in (-1, 1), so it is in (-1, 1) and not all zero.
  if (!(sum_abs > 0) || sum_abs >= out.size()) {
    std::fprintf(stderr, "pagedattn_consumer: implausible output (sum |out| = %f)\n", sum_abs);
    return 1;
  }
  std::printf("pagedattn_consumer: decode H=%d Hk=%d D=%d past=%d on the cpu backend: checksum sum=%.6f sum|x|=%.6f\n",
              H, Hk, D, past, sum, sum_abs);
  return 0;
}
