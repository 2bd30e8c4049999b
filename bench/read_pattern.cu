// The read pattern of deterministic mode's batch merge, alone: is 1.0-1.5 TB/s (runs rt1, lf1, q1) the
// pattern's own rate or the merge kernels'? The 32 x 8k batch at T = 8 (D = 256, f16 partials) leaves, per
// (sequence, kv head), 64 partials of 32 rows x 512 bytes, one slot each; a slot holds `pitch` rows, so a
// row's 64 pieces lie pitch x 512 bytes apart (32 KB at the wg form's 64-row slots). Three reads of the
// same 134 MB, each a median of 20 timed launches after 3 warm-ups:
//   rows:   a thread per 8 bytes of a row (64 per row), each walking the row's 64 partials with 16 loads in
//           flight (the merges' order: a row's pieces one slot apart);
//   slots:  the same bytes in address order, 16-byte grid-stride loads (each slot's used rows, 16 KB runs);
//   copy:   one contiguous buffer of the same bytes, grid-stride 16-byte loads (the read ceiling).
//   usage: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a bench/read_pattern.cu -o rp && ./rp [pitch...]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                                    \
  do {                                                                                              \
    cudaError_t e_ = (x);                                                                           \
    if (e_ != cudaSuccess) {                                                                        \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                                 \
      std::exit(1);                                                                                 \
    }                                                                                               \
  } while (0)

constexpr int kItems = 128;  // 32 sequences x 4 kv heads
constexpr int kParts = 64;   // partials per row (32 partitions x 2 warpgroups)
constexpr int kRows = 32;    // rows of a slot that are read (T = 8 x G = 4)
constexpr int kPiece8 = 64;  // 8-byte words per row piece (D = 256 halves)
constexpr int kInFlight = 16;

// A thread per 8-byte word of a row; the row's pieces p = 0..kParts-1 at slot (item kParts + p).
__global__ void rows_kernel(const uint2* __restrict__ ws, int pitch, unsigned* sink) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  const int word = t % kPiece8, row = (t / kPiece8) % kRows, item = t / kPiece8 / kRows;
  if (item >= kItems) return;
  unsigned acc = 0;
  const uint2* base = ws + (static_cast<size_t>(item) * kParts * pitch + row) * kPiece8 + word;
  const size_t stride = static_cast<size_t>(pitch) * kPiece8;
  for (int p0 = 0; p0 < kParts; p0 += kInFlight) {
    uint2 v[kInFlight];
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) v[i] = __ldcg(base + (p0 + i) * stride);
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) acc += v[i].x ^ v[i].y;
  }
  if (acc == 0x9e3779b9u) atomicAdd(sink, acc);
}
// The same bytes in address order: 16-byte loads, grid-stride over each slot's used rows (16 KB runs, a
// slot's unused rows skipped), as a copy would stream them.
__global__ void slots_kernel(const uint4* __restrict__ ws, int pitch, unsigned* sink) {
  constexpr int kRow16 = kPiece8 / 2;  // 16-byte units per row piece
  const size_t n = static_cast<size_t>(kItems) * kParts * kRows * kRow16;
  unsigned acc = 0;
  for (size_t u = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; u < n;
       u += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t slot = u / (kRows * kRow16), off = u % (kRows * kRow16);
    const uint4 v = __ldcg(ws + slot * pitch * kRow16 + off);
    acc += v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) atomicAdd(sink, acc);
}
__global__ void copy_kernel(const uint4* __restrict__ p, size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcs(p + i);
    acc += v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) atomicAdd(sink, acc);
}

template <typename Launch>
static float median_us(Launch launch) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) launch();
  std::vector<float> t;
  for (int i = 0; i < 20; ++i) {
    CHECK(cudaEventRecord(a));
    launch();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1000.0f);
  }
  CHECK(cudaGetLastError());
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main(int argc, char** argv) {
  std::vector<int> pitches;
  for (int i = 1; i < argc; ++i) pitches.push_back(std::atoi(argv[i]));
  if (pitches.empty()) pitches = {32, 33, 64, 65};
  const double bytes = static_cast<double>(kItems) * kParts * kRows * kPiece8 * 8;  // read by each kernel
  unsigned* sink;
  CHECK(cudaMalloc(&sink, sizeof(unsigned)));
  const int threads = 256;
  const int blocks = kItems * kRows * kPiece8 / threads;
  std::printf("%.1f MB read per launch (%d items x %d partials x %d rows x 512 B)\n", bytes / 1e6, kItems, kParts, kRows);
  for (const int pitch : pitches) {
    if (pitch < kRows) continue;
    uint2* ws;
    const size_t words = static_cast<size_t>(kItems) * kParts * pitch * kPiece8;
    CHECK(cudaMalloc(&ws, words * sizeof(uint2)));
    CHECK(cudaMemset(ws, 1, words * sizeof(uint2)));
    const float r = median_us([&] { rows_kernel<<<blocks, threads>>>(ws, pitch, sink); });
    int sms = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const float s = median_us([&] { slots_kernel<<<sms * 4, 512>>>(reinterpret_cast<const uint4*>(ws), pitch, sink); });
    std::printf("pitch %3d rows (%6.1f KB apart): rows %7.1f us %6.0f GB/s   slots %7.1f us %6.0f GB/s\n", pitch,
                pitch * 512 / 1024.0, r, bytes / r / 1e3, s, bytes / s / 1e3);
    CHECK(cudaFree(ws));
  }
  uint4* flat;
  const size_t n16 = static_cast<size_t>(bytes) / 16;
  CHECK(cudaMalloc(&flat, n16 * 16));
  CHECK(cudaMemset(flat, 1, n16 * 16));
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const float c = median_us([&] { copy_kernel<<<sms * 4, 512>>>(flat, n16, sink); });
  std::printf("copy (contiguous): %7.1f us %6.0f GB/s\n", c, bytes / c / 1e3);
  CHECK(cudaFree(flat));
  CHECK(cudaFree(sink));
  return 0;
}
