// GPU machine (sm_90a): do wgmma and mma.sync round the same k16 step the same way? Deterministic mode
// (docs/design.md, "Invariant rows") keeps a verify row's bits equal to its decode's by running both on
// fwd_kernel's mma.sync layouts; a wgmma form for 17-64 rows could join them only if a k16 step of
// wgmma.m64nNk16 gives the bits of mma.sync.m16n8k16 for the same operands, accumulator and k order.
// This draws random 64 x K and K x 64 operands (f16 or bf16, exponents spread over 2^-6..2^6, so that the
// products' alignment and the accumulator's rounding are exercised) and f32 accumulators (zero, or
// spread over 2^-4..2^8), runs the K / 16 k-steps on each instruction (wgmma: A from registers, the
// fragments mma.sync takes; B in shared memory, N-major, 128-byte swizzle, as wg_kernel's P V), and
// counts the outputs whose bits differ. Both wgmma operand forms: A from registers with B N-major (wg_kernel's
// P V), and A and B in shared memory, both K-major (its S = Q K^T).
//   build: the CMake target mma_rounding (CUDA builds with sm_90a), or nvcc -std=c++17 -O2
//          -gencode=arch=compute_90a,code=sm_90a -DPAGEDATTN_WITH_CUDA=1 -Isrc -Iinclude -Itools
//          bench/mma_rounding.cu -o mma_rounding
//   usage: mma_rounding [trials] [seed]      (prints one line per type and accumulator start; exit 1 on
//                                              any difference, 2 on a CUDA error)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "buffer.h"
#include "cuda/common/ptx.cuh"
#include "cuda/common/wgmma.cuh"

namespace {

using namespace pagedattn::cuda;
constexpr int kM = 64, kN = 64, kK = 64;  // one warpgroup's 64 x 64 tile over 4 k-steps

__device__ uint32_t pack(uint16_t lo, uint16_t hi) { return lo | (static_cast<uint32_t>(hi) << 16); }

// One trial per CTA of 128 threads: out_sync / out_wg[trial][64][64] from the same A, B and C0.
template <typename T>
__global__ void __launch_bounds__(128) rounding_kernel(const uint16_t* A, const uint16_t* B, const float* C0,
                                                       float* out_sync, float* out_wg, float* out_ss) {
  __shared__ alignas(1024) uint16_t bs[kK * kN];   // B, k-rows of 64 columns (N-major)
  __shared__ alignas(1024) uint16_t as[kM * kK];   // A, rows of 64 k (K-major)
  __shared__ alignas(1024) uint16_t bts[kN * kK];  // B^T, n-rows of 64 k (K-major)
  const int trial = blockIdx.x, tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const uint16_t* a = A + static_cast<size_t>(trial) * kM * kK;
  const uint16_t* b = B + static_cast<size_t>(trial) * kK * kN;
  const float* c0 = C0 + static_cast<size_t>(trial) * kM * kN;
  // B (k-rows of 64 columns, 128 bytes): chunk c of row k at chunk c ^ (k % 8)
  for (int i = tid; i < kK * kN; i += 128) {
    const int k = i / kN, n = i % kN;
    bs[k * kN + (((n / 8) ^ (k % 8)) * 8) + n % 8] = b[i];
    bts[n * kK + (((k / 8) ^ (n % 8)) * 8) + k % 8] = b[i];
  }
  for (int i = tid; i < kM * kK; i += 128) {
    const int m = i / kK, k = i % kK;
    as[m * kK + (((k / 8) ^ (m % 8)) * 8) + k % 8] = a[i];
  }
  wg::fence_proxy_async();  // this thread's stores -> visible to the async proxy, then every thread's
  __syncthreads();
  const int r0 = 16 * warp;
  uint32_t af[kK / 16][4];  // mma.sync's A fragments of the warp's 16 rows (wgmma RS takes the same)
#pragma unroll
  for (int s = 0; s < kK / 16; ++s) {
    const uint16_t* lo = a + (r0 + g) * kK + 16 * s + 2 * t;
    const uint16_t* hi = a + (r0 + g + 8) * kK + 16 * s + 2 * t;
    af[s][0] = pack(lo[0], lo[1]);
    af[s][1] = pack(hi[0], hi[1]);
    af[s][2] = pack(lo[8], lo[9]);
    af[s][3] = pack(hi[8], hi[9]);
  }
  // (row, column) of accumulator i of n-tile n8: rows r0 + g (+ 8 for i >= 2), columns 8 n8 + 2 t + i % 2
  auto at = [&](int n8, int i) { return (r0 + g + 8 * (i / 2)) * kN + 8 * n8 + 2 * t + i % 2; };
  float dm[kN / 8][4];
#pragma unroll
  for (int n8 = 0; n8 < kN / 8; ++n8) {
#pragma unroll
    for (int i = 0; i < 4; ++i) dm[n8][i] = c0[at(n8, i)];
#pragma unroll
    for (int s = 0; s < kK / 16; ++s) {
      const int k0 = 16 * s + 2 * t, n = 8 * n8 + g;
      mma_16816<T>(dm[n8], af[s], pack(b[k0 * kN + n], b[(k0 + 1) * kN + n]),
                   pack(b[(k0 + 8) * kN + n], b[(k0 + 9) * kN + n]));
    }
  }
  float dw[kN / 2];
#pragma unroll
  for (int n8 = 0; n8 < kN / 8; ++n8)
#pragma unroll
    for (int i = 0; i < 4; ++i) dw[4 * n8 + i] = c0[at(n8, i)];
  const uint64_t bd = wg::desc_sw128(static_cast<uint32_t>(__cvta_generic_to_shared(bs)), kK * 128, 1024);
  wg::fence_regs(dw);
  wg::fence();
#pragma unroll
  for (int s = 0; s < kK / 16; ++s) wg::mma_rs_tb<T, kN>(dw, af[s], wg::desc_plus(bd, s * 16 * 128), 1);
  wg::commit();
  wg::wait<0>();
  wg::fence_regs(dw);
  float dss[kN / 2];
#pragma unroll
  for (int n8 = 0; n8 < kN / 8; ++n8)
#pragma unroll
    for (int i = 0; i < 4; ++i) dss[4 * n8 + i] = c0[at(n8, i)];
  const uint64_t ad = wg::desc_sw128(static_cast<uint32_t>(__cvta_generic_to_shared(as)), 16, 1024);
  const uint64_t btd = wg::desc_sw128(static_cast<uint32_t>(__cvta_generic_to_shared(bts)), 16, 1024);
  wg::fence_regs(dss);
  wg::fence();
#pragma unroll
  for (int s = 0; s < kK / 16; ++s) wg::mma_ss<T, kN>(dss, wg::desc_plus(ad, s * 32), wg::desc_plus(btd, s * 32), 1);
  wg::commit();
  wg::wait<0>();
  wg::fence_regs(dss);
  float* oss = out_ss + static_cast<size_t>(trial) * kM * kN;
  float* os = out_sync + static_cast<size_t>(trial) * kM * kN;
  float* ow = out_wg + static_cast<size_t>(trial) * kM * kN;
#pragma unroll
  for (int n8 = 0; n8 < kN / 8; ++n8)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      os[at(n8, i)] = dm[n8][i];
      ow[at(n8, i)] = dw[4 * n8 + i];
      oss[at(n8, i)] = dss[4 * n8 + i];
    }
}

// A 16-bit value with a random sign and mantissa and an exponent in [-6, 6] (f16: 5-bit exponent bias 15,
// 10-bit mantissa; bf16: bias 127, 7-bit mantissa).
uint16_t draw(std::mt19937& rng, bool bf16) {
  const uint32_t sign = rng() & 1u, e = static_cast<uint32_t>(static_cast<int>(rng() % 13) - 6);
  return bf16 ? static_cast<uint16_t>((sign << 15) | ((e + 127u) << 7) | (rng() & 0x7Fu))
              : static_cast<uint16_t>((sign << 15) | ((e + 15u) << 10) | (rng() & 0x3FFu));
}

template <typename T>
int run(const char* name, int trials, uint32_t seed, bool zero_acc) {
  const bool bf16 = std::is_same<T, __nv_bfloat16>::value;
  std::mt19937 rng(seed);
  std::vector<uint16_t> a(static_cast<size_t>(trials) * kM * kK), b(static_cast<size_t>(trials) * kK * kN);
  std::vector<float> c(static_cast<size_t>(trials) * kM * kN);
  for (auto& x : a) x = draw(rng, bf16);
  for (auto& x : b) x = draw(rng, bf16);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& x : c) x = zero_acc ? 0.0f : std::ldexp(u(rng), static_cast<int>(rng() % 13) - 4);
  using pagedattn::Device;
  using pagedattn::tools::Buffer;
  Buffer da(Device::cuda, a.size() * 2), db(Device::cuda, b.size() * 2), dc(Device::cuda, c.size() * 4),
      ds(Device::cuda, c.size() * 4), dw(Device::cuda, c.size() * 4), dss(Device::cuda, c.size() * 4);
  da.upload(a.data(), a.size() * 2);
  db.upload(b.data(), b.size() * 2);
  dc.upload(c.data(), c.size() * 4);
  rounding_kernel<T><<<trials, 128>>>(static_cast<const uint16_t*>(da.data()), static_cast<const uint16_t*>(db.data()),
                                      static_cast<const float*>(dc.data()), static_cast<float*>(ds.data()),
                                      static_cast<float*>(dw.data()), static_cast<float*>(dss.data()));
  PA_CUDA(cudaGetLastError());
  PA_CUDA(cudaDeviceSynchronize());
  std::vector<float> s(c.size()), w(c.size()), w2(c.size());
  ds.download(s.data(), s.size() * 4);
  dw.download(w.data(), w.size() * 4);
  dss.download(w2.data(), w2.size() * 4);
  // a reference in double: the two must also compute the product (a wrong fragment layout differs from it)
  double worst = 0.0;
  for (int tr = 0; tr < trials && tr < 8; ++tr)
    for (int m = 0; m < kM; ++m)
      for (int n = 0; n < kN; ++n) {
        double ref = c[(static_cast<size_t>(tr) * kM + m) * kN + n], mag = std::fabs(ref);
        for (int k = 0; k < kK; ++k) {
          auto val = [&](uint16_t h) {
            return bf16 ? static_cast<double>(__bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(&h)))
                        : static_cast<double>(__half2float(*reinterpret_cast<const __half*>(&h)));
          };
          const double p = val(a[(static_cast<size_t>(tr) * kM + m) * kK + k]) * val(b[(static_cast<size_t>(tr) * kK + k) * kN + n]);
          ref += p;
          mag += std::fabs(p);
        }
        const double got = s[(static_cast<size_t>(tr) * kM + m) * kN + n];
        worst = std::fmax(worst, std::fabs(got - ref) / mag);
      }
  // outputs whose bits differ from mma.sync's, and by how many units in the last place at most
  auto compare = [&](const std::vector<float>& o, size_t& differ, long long& max_ulp) {
    differ = 0;
    max_ulp = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      int32_t x, y;
      std::memcpy(&x, &s[i], 4);
      std::memcpy(&y, &o[i], 4);
      if (x != y) {
        ++differ;
        max_ulp = std::max<long long>(max_ulp, std::llabs(static_cast<long long>(x) - y));
      }
    }
  };
  size_t differ_rs, differ_ss;
  long long ulp_rs, ulp_ss;
  compare(w, differ_rs, ulp_rs);
  compare(w2, differ_ss, ulp_ss);
  std::printf("%-5s acc=%-6s trials %d, outputs %zu (K = %d: %d k-steps): bits differ from mma.sync in %zu "
              "(wgmma A in registers; max %lld ulp) and %zu (A in shared memory; max %lld ulp); mma.sync vs "
              "double: worst |err| / sum|terms| %.2e\n",
              name, zero_acc ? "zero" : "random", trials, s.size(), kK, kK / 16, differ_rs, ulp_rs, differ_ss,
              ulp_ss, worst);
  return differ_rs == 0 && differ_ss == 0 && worst < 1e-4 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) try {
  const int trials = argc > 1 ? std::atoi(argv[1]) : 2048;
  const uint32_t seed = argc > 2 ? static_cast<uint32_t>(std::atoi(argv[2])) : 20261206u;
  std::printf("mma_rounding: seed %u\n", seed);
  int bad = 0;
  bad |= run<__half>("f16", trials, seed, true);
  bad |= run<__half>("f16", trials, seed + 1, false);
  bad |= run<__nv_bfloat16>("bf16", trials, seed + 2, true);
  bad |= run<__nv_bfloat16>("bf16", trials, seed + 3, false);
  return bad;
} catch (const std::exception& e) {
  std::fprintf(stderr, "mma_rounding: %s\n", e.what());
  return 2;
}
