// Thin wrappers over the PTX instructions the kernels use: async copies, ldmatrix, mma.sync,
// programmatic dependent launch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>
#include <type_traits>
#include <cstdio>

namespace pagedattn {
namespace cuda {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy through L2 only; src_bytes = 0 zero-fills the destination.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem)), "l"(gmem), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_16_u32(uint32_t smem_addr, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr), "l"(gmem), "r"(src_bytes) : "memory");
}
// The same copy with every byte valid (no source-size operand): the caller's address arithmetic folds
// into the instruction's immediate offsets. (An .L2::256B prefetch hint here measured 0.99-1.01x, run s8b.)
__device__ __forceinline__ void cp_async_16_full(uint32_t smem_addr, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// Every cp.async of this thread, committed to a group or not (mbarrier-tracked copies are not).
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* p) {  // addresses: lanes 0-15
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

// D = A (16x16, row) * B (16x8, col) + D, f32 accumulate.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma_16816<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                         uint32_t b1) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The top half of mma_16816: rows 0-7 of A (a[0], a[2]) and of D (d[0], d[1]); rows 8-15 of A are
// zero and their outputs are discarded (scratch registers that die at once), so d[2], d[3] are neither
// read nor written and a caller's accumulators for rows 8-15 are dead (ptxas spends most of the registers
// this frees on its schedule: fwd_kernel u8 D = 256 218 -> 196, D = 64 125 -> 128 at 4 CTAs per SM). For
// chunks of at most 8 rows (fwd_kernel's HR variants). (Its own asm: mma_16816 on a copied accumulator
// and zeroed rows gave the u8 HR kernels other machine code than runs hr1 / hr2 measured, bench/sass_same.sh.)
template <typename T>
__device__ __forceinline__ void mma_16816_top(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  float x2, x3;
  if constexpr (std::is_same<T, __half>::value) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%5}, {%7,%8}, {%0,%1,%9,%9};\n"
        : "+f"(d[0]), "+f"(d[1]), "=f"(x2), "=f"(x3)
        : "r"(a[0]), "r"(0u), "r"(a[2]), "r"(b0), "r"(b1), "f"(0.0f));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%5}, {%7,%8}, {%0,%1,%9,%9};\n"
        : "+f"(d[0]), "+f"(d[1]), "=f"(x2), "=f"(x3)
        : "r"(a[0]), "r"(0u), "r"(a[2]), "r"(b0), "r"(b1), "f"(0.0f));
  }
}
// mma_16816, or its top half (HR: chunks of at most 8 rows).
template <typename T, bool HR>
__device__ __forceinline__ void mma_rows(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (HR)
    mma_16816_top<T>(d, a, b0, b1);
  else
    mma_16816<T>(d, a, b0, b1);
}

// The transpose of an 8x8 matrix of 16-bit elements held as an MMA accumulator fragment (lane l: row l / 4,
// columns 2 (l % 4), +1): afterwards lane l holds row l / 4 of the transpose, i.e. column l / 4 of the input.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t r;
  asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(r) : "r"(x));
  return r;
}

// Named barrier over `threads` threads (a multiple of 32); id 0 is __syncthreads.
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Arrives at named barrier `id` without waiting (the other side waits with named_barrier).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Programmatic dependent launch (sm_90+): wait for the preceding grid's memory; let the next grid start.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Diagnostic build (-DPAGEDATTN_TIMELINE=1, bench/timeline.sh; off by default, and then these compile
// to nothing): thread 0 of each CTA stamps its phase boundaries (SM clock) and prints one line per CTA
// at its end: "TL <kernel> <grid x> <grid y> <bx> <by> <smid> <global ns at start> <global ns at end>
// <cycles 1..9>",
// the cycles counted from the first stamp; where the kernel timed spans (span_begin / span_end: fwd_kernel's
// partition flushes, which recur inside the key loop), field 9 is their summed duration instead.
#if defined(PAGEDATTN_TIMELINE) && PAGEDATTN_TIMELINE
struct Timeline {
  static constexpr int kMax = 10;
  long long c[kMax];
  long long span_sum = 0, span_t0 = 0;
  unsigned long long g0;
  __device__ Timeline() {
    if (threadIdx.x == 0) {
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g0));
      c[0] = clock64();
      for (int i = 1; i < kMax; ++i) c[i] = c[0] - 1;  // an unreached stamp prints -1
    }
  }
  __device__ void mark(int i) {
    if (threadIdx.x == 0 && i < kMax) c[i] = clock64();
  }
  __device__ void span_begin() {
    if (threadIdx.x == 0) span_t0 = clock64();
  }
  __device__ void span_end() {
    if (threadIdx.x == 0) span_sum += clock64() - span_t0;
  }
  __device__ void print(const char* kernel, int n) const {
    if (threadIdx.x != 0) return;
    unsigned long long g1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g1));
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    long long d[kMax];
    for (int i = 1; i < kMax; ++i) d[i] = i < n ? c[i] - c[0] : -1;
    if (span_sum > 0) d[kMax - 1] = span_sum;
    printf("TL %s %d %d %d %d %u %llu %llu %lld %lld %lld %lld %lld %lld %lld %lld %lld\n", kernel,
           static_cast<int>(gridDim.x), static_cast<int>(gridDim.y), static_cast<int>(blockIdx.x),
           static_cast<int>(blockIdx.y), smid, g0, g1, d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9]);
  }
};
#else
struct Timeline {
  __device__ void mark(int) {}
  __device__ void span_begin() {}
  __device__ void span_end() {}
  __device__ void print(const char*, int) const {}
};
#endif

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// Two floats -> one register of two f16 / bf16 (round to nearest), low half first.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_min(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fminf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

}  // namespace cuda
}  // namespace pagedattn
