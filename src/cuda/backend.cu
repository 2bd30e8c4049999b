// The cuda backend: plan (host: CUDA-specific checks, work list, metadata upload, workspace) and run
// (device: one attention launch per kernel variant in use, then the merge; no host synchronisation).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/plan_impl.h"
#include "core/planner.h"
#include "core/tuning.h"
#include "cuda/bench_util.h"
#include "cuda/fwd/launch.h"
#include "cuda/fwd/merge.cuh"
#include "cuda/fwd/scores.cuh"

namespace pagedattn {

bool cuda_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

namespace cuda {

#define PA_CUDA_CHECK(expr)                                                                               \
  do {                                                                                                    \
    cudaError_t err_ = (expr);                                                                            \
    if (err_ != cudaSuccess)                                                                              \
      throw RuntimeError(std::string("CUDA error in ") + #expr + ": " + cudaGetErrorString(err_));        \
  } while (0)

FwdKernelInfo fwd_kernel_info(int head_size, int kv, int row_tiles, const KernelChoice& c) {
  switch (head_size) {
    case 64: return fwd_kernel_info_d64(kv, row_tiles, c);
    case 80: return fwd_kernel_info_d80(kv, row_tiles, c);
    case 96: return fwd_kernel_info_d96(kv, row_tiles, c);
    case 112: return fwd_kernel_info_d112(kv, row_tiles, c);
    case 128: return fwd_kernel_info_d128(kv, row_tiles, c);
    case 192: return fwd_kernel_info_d192(kv, row_tiles, c);
    case 256: return fwd_kernel_info_d256(kv, row_tiles, c);
    default:
      throw UnsupportedError("kernel width " + std::to_string(head_size) +
                             ": the cuda backend's kernels are 64, 80, 96, 112, 128, 192 and 256 wide");
  }
}

// The merge: one CTA per query row and column block; `split` (1, 2 or 4, at most D / 64) column blocks
// per row, `batch` (1, 4 or 8) partitions per thread in flight (see CudaPlan: merge_split_, merge_batch_).
// kGroupSplit > kSplit (deterministic mode, whose groups are those of D / 64 blocks): each thread folds
// kGroupSplit / kSplit groups, `batch` partitions of each in flight.
// units (a row with MergeRow::fold): merge_kernel's kUnits variants (D = 64, 128, 256 on deterministic mode's
// groups: the key-split kernel's widths).
template <int D, int kSplit, int kGroupSplit, bool kUnits>
void launch_merge_du(const FwdParams& P, int num_rows, int batch, cudaStream_t stream, bool pdl) {
  const dim3 grid(num_rows, kSplit), block(kMergeThreads);
  if constexpr (kGroupSplit != kSplit)  // (one batch: 8 loads in flight per thread, CudaPlan::merge_batch_)
    launch_ex(merge_kernel<D, kSplit, 8 * kSplit / kGroupSplit, kGroupSplit, kUnits>, grid, block, 0, stream, pdl, P);
  else if (batch == 8)
    launch_ex(merge_kernel<D, kSplit, 8, kGroupSplit, kUnits>, grid, block, 0, stream, pdl, P);
  else if (batch == 4)
    launch_ex(merge_kernel<D, kSplit, 4, kGroupSplit, kUnits>, grid, block, 0, stream, pdl, P);
  else
    launch_ex(merge_kernel<D, kSplit, 1, kGroupSplit, kUnits>, grid, block, 0, stream, pdl, P);
}
template <int D, int kSplit, int kGroupSplit = kSplit>
void launch_merge_d(const FwdParams& P, int num_rows, int batch, bool units, cudaStream_t stream, bool pdl) {
  if constexpr ((D == 64 || D == 128 || D == 256) && kGroupSplit == D / 64) {
    if (units) return launch_merge_du<D, kSplit, kGroupSplit, true>(P, num_rows, batch, stream, pdl);
  }
  if (units) throw RuntimeError("merge: no unit kernel for D=" + std::to_string(D));
  launch_merge_du<D, kSplit, kGroupSplit, false>(P, num_rows, batch, stream, pdl);
}
// Deterministic mode's merge of many rows (tuning::merge_rowwise): one thread per 8 columns of a row
// (merge_row_cols; 4 at D = 80, 112, or all widths with cols8 off), whole rows per CTA.
template <int D, int kC>
void launch_merge_rows_dc(const FwdParams& P, int num_rows, cudaStream_t stream, bool pdl) {
  constexpr int kRows = merge_rows_per_cta(D, kC);  // (whole rows per CTA)
  const dim3 grid(static_cast<unsigned>((num_rows + kRows - 1) / kRows)), block(kMergeRowThreads);
  launch_ex(merge_rows_kernel<D, kC>, grid, block, 0, stream, pdl, P, num_rows);
}
template <int D>
void launch_merge_rows_d(const FwdParams& P, int num_rows, bool cols8, cudaStream_t stream, bool pdl) {
  if (cols8 && merge_row_cols(D) == 8) launch_merge_rows_dc<D, merge_row_cols(D)>(P, num_rows, stream, pdl);
  else launch_merge_rows_dc<D, 4>(P, num_rows, stream, pdl);
}
void launch_merge_rows(const FwdParams& P, int head_size, int num_rows, bool cols8, cudaStream_t stream, bool pdl) {
  switch (head_size) {
    case 64: launch_merge_rows_d<64>(P, num_rows, cols8, stream, pdl); break;
    case 80: launch_merge_rows_d<80>(P, num_rows, cols8, stream, pdl); break;
    case 96: launch_merge_rows_d<96>(P, num_rows, cols8, stream, pdl); break;
    case 112: launch_merge_rows_d<112>(P, num_rows, cols8, stream, pdl); break;
    case 128: launch_merge_rows_d<128>(P, num_rows, cols8, stream, pdl); break;
    case 192: launch_merge_rows_d<192>(P, num_rows, cols8, stream, pdl); break;
    case 256: launch_merge_rows_d<256>(P, num_rows, cols8, stream, pdl); break;
    default: throw RuntimeError("merge: no row kernel for D=" + std::to_string(head_size));
  }
}
void launch_merge(const FwdParams& P, int head_size, int num_rows, int split, int batch, int group_split, bool units,
                  cudaStream_t stream, bool pdl) {
  switch ((head_size * 8 + split) * 8 + group_split) {
    case (64 * 8 + 1) * 8 + 1: launch_merge_d<64, 1>(P, num_rows, batch, units, stream, pdl); break;
    case (80 * 8 + 1) * 8 + 1: launch_merge_d<80, 1>(P, num_rows, batch, units, stream, pdl); break;
    case (96 * 8 + 1) * 8 + 1: launch_merge_d<96, 1>(P, num_rows, batch, units, stream, pdl); break;
    case (112 * 8 + 1) * 8 + 1: launch_merge_d<112, 1>(P, num_rows, batch, units, stream, pdl); break;
    case (192 * 8 + 1) * 8 + 1: launch_merge_d<192, 1>(P, num_rows, batch, units, stream, pdl); break;
    case (192 * 8 + 2) * 8 + 2: launch_merge_d<192, 2>(P, num_rows, batch, units, stream, pdl); break;
    case (192 * 8 + 3) * 8 + 3: launch_merge_d<192, 3>(P, num_rows, batch, units, stream, pdl); break;
    case (128 * 8 + 1) * 8 + 1: launch_merge_d<128, 1>(P, num_rows, batch, units, stream, pdl); break;
    case (128 * 8 + 2) * 8 + 2: launch_merge_d<128, 2>(P, num_rows, batch, units, stream, pdl); break;
    case (128 * 8 + 1) * 8 + 2: launch_merge_d<128, 1, 2>(P, num_rows, batch, units, stream, pdl); break;
    case (256 * 8 + 1) * 8 + 1: launch_merge_d<256, 1>(P, num_rows, batch, units, stream, pdl); break;
    case (256 * 8 + 2) * 8 + 2: launch_merge_d<256, 2>(P, num_rows, batch, units, stream, pdl); break;
    case (256 * 8 + 4) * 8 + 4: launch_merge_d<256, 4>(P, num_rows, batch, units, stream, pdl); break;
    case (256 * 8 + 1) * 8 + 4: launch_merge_d<256, 1, 4>(P, num_rows, batch, units, stream, pdl); break;
    case (256 * 8 + 2) * 8 + 4: launch_merge_d<256, 2, 4>(P, num_rows, batch, units, stream, pdl); break;
    default:
      throw RuntimeError("merge: no kernel for D=" + std::to_string(head_size) + " split " + std::to_string(split) +
                         " groups of split " + std::to_string(group_split));
  }
}

// --- read ceiling: every byte of a buffer read once, 16 bytes per load ------------------------------
__global__ void read_kernel(const uint4* __restrict__ p, int64_t n, uint32_t* sink) {
  uint32_t acc = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcs(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;  // keeps the loads alive; practically never taken
}

double measure_read_ceiling_gbs(std::size_t bytes, int iters, void* stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  void* buf = nullptr;
  uint32_t* sink = nullptr;
  PA_CUDA_CHECK(cudaMalloc(&buf, bytes));
  PA_CUDA_CHECK(cudaMalloc(&sink, 4));
  PA_CUDA_CHECK(cudaMemsetAsync(buf, 0x5a, bytes, stream));
  int dev = 0, sms = 0;
  PA_CUDA_CHECK(cudaGetDevice(&dev));
  PA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int64_t n = static_cast<int64_t>(bytes / 16);
  cudaEvent_t e0, e1;
  PA_CUDA_CHECK(cudaEventCreate(&e0));
  PA_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int i = 0; i < iters + 3; ++i) {
    PA_CUDA_CHECK(cudaEventRecord(e0, stream));
    read_kernel<<<sms * 8, 512, 0, stream>>>(static_cast<const uint4*>(buf), n, sink);
    PA_CUDA_CHECK(cudaEventRecord(e1, stream));
    PA_CUDA_CHECK(cudaEventSynchronize(e1));
    float t = 0;
    PA_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
    if (i >= 3) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(buf);
  cudaFree(sink);
  return static_cast<double>(bytes) / (med * 1e-3) / 1e9;
}

namespace {

// lse = -inf for rows that attend no key (a prefix_only sequence without cache: no kernel visits them).
__global__ void lse_empty_kernel(float* __restrict__ lse, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) lse[i] = -INFINITY;
}

// A device allocation owned by the plan.
struct DeviceBuffer {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
  void alloc(std::size_t n) {
    bytes = n;
    if (n) PA_CUDA_CHECK(cudaMalloc(&ptr, n));
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
};

template <typename T>
void upload(DeviceBuffer& b, const T* host, std::size_t count, cudaStream_t s) {
  b.alloc(std::max<std::size_t>(count * sizeof(T), 16));
  if (count) PA_CUDA_CHECK(cudaMemcpyAsync(b.ptr, host, count * sizeof(T), cudaMemcpyHostToDevice, s));
}

int kv_kind(KVPrecision p) {
  switch (p) {
    case KVPrecision::f16: return kKvF16;
    case KVPrecision::bf16: return kKvBF16;
    case KVPrecision::fp8: return kKvF8;
    default: return kKvU8;
  }
}
int io_type(DType t) { return t == DType::f16 ? kIoF16 : t == DType::bf16 ? kIoBF16 : kIoF32; }

bool aligned16(const TensorView& t) { return !t.present() || (reinterpret_cast<uintptr_t>(t.data) % 16) == 0; }
bool aligned4(const TensorView& t) { return !t.present() || (reinterpret_cast<uintptr_t>(t.data) % 4) == 0; }

class CudaPlan final : public detail::PlanImpl {
 public:
  CudaPlan(const Params& p, const Options& opt) : planned_(p), stream_(static_cast<cudaStream_t>(opt.stream)) {
    const KVCache& c = p.cache;
    Dk_ = static_cast<int>(c.head_size());
    Hk_ = static_cast<int>(c.num_kv_heads());
    H_ = p.num_heads;
    G_ = H_ / Hk_;
    kv_ = kv_kind(c.precision());
    // the kernels' width, the key head size padded up to the next native one: 64, 96, 128, 192, 256, and
    // for f16/bf16 caches also 80 and 112 (docs/design.md, "Head sizes")
    const bool bytes_kv = kv_ == kKvU8 || kv_ == kKvF8;
    D_ = Dk_ <= 64 ? 64 : Dk_ <= 80 && !bytes_kv ? 80 : Dk_ <= 96 ? 96 : Dk_ <= 112 && !bytes_kv ? 112
       : Dk_ <= 128 ? 128 : Dk_ <= 192 ? 192 : 256;
    const int bs = static_cast<int>(c.block_size());
    Dv_ = static_cast<int>(c.value_head_size());
    if (Dk_ % 16 != 0 || Dk_ < 32 || Dk_ > 256)
      throw UnsupportedError("head size " + std::to_string(Dk_) +
                             ": the cuda backend supports multiples of 16 from 32 to 256");
    if (Dv_ % 16 != 0 || Dv_ < 16 || Dv_ > Dk_)
      throw UnsupportedError("value head size " + std::to_string(Dv_) + " (key head size " + std::to_string(Dk_) +
                             "): the cuda backend supports multiples of 16 up to the key head size");
    choice_.pad = Dk_ != D_ || Dv_ != D_;
    if (bs < 16 || (bs & (bs - 1)) != 0)
      throw UnsupportedError("block_size " + std::to_string(bs) + ": the cuda backend needs a power of two >= 16");
    if (G_ > planner::kMaxRows)
      throw UnsupportedError("group size H/Hk = " + std::to_string(G_) + ": the cuda backend supports at most 64");
    bs_log2_ = 0;
    while ((1 << bs_log2_) < bs) ++bs_log2_;

    // --- work list --------------------------------------------------------------------------------
    const int num_seqs = static_cast<int>(p.past_lens.numel());
    const int32_t* past = p.past_lens.ptr<int32_t>();
    const int32_t* sb = p.subsequence_begins.ptr<int32_t>();
    planner::Inputs in;
    for (int s = 0; s < num_seqs; ++s) {
      in.past_lens.push_back(past[s]);
      in.tokens.push_back(sb[s + 1] - sb[s]);
    }
    // prefix_only with new_token_positions: the kernels take the query positions (window, ALiBi, the
    // causal test) from WorkItem::past; the keys stop at the shard's length through kv_end, and nothing
    // else reads past_len under prefix_only (no write-in, tree or scores)
    if (p.new_token_positions.present())
      in.positions.assign(p.new_token_positions.ptr<const int32_t>(), p.new_token_positions.ptr<const int32_t>() + num_seqs);
    const std::vector<int32_t>& qpos0 = in.positions.empty() ? in.past_lens : in.positions;
    in.group = G_;
    in.num_kv_heads = Hk_;
    in.sliding_window = p.sliding_window;
    in.prefix_only = p.prefix_only;
    int dev = 0;
    PA_CUDA_CHECK(cudaGetDevice(&dev));
    PA_CUDA_CHECK(cudaDeviceGetAttribute(&in.num_sms, cudaDevAttrMultiProcessorCount, dev));
    int cc_major = 0;
    PA_CUDA_CHECK(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, dev));
    pdl_ = cc_major >= 9 && opt.programmatic_launch;
    // The tuning rules and their environment overrides (A/B runs): core/tuning.{h,cpp}.
    const tuning::Overrides env = tuning::read_overrides();
    early_reads_ = env.early_reads;  // early cache reads under PDL (see the kernel)
    stale_max_ = env.stale_max;      // fwd_kernel's stale softmax reference (FwdParams::stale_log2)
    half_partials_ = env.half_partials;
    // 8-row-tile chunks on 4 warps of two row tiles (fwd_kernel's MT = 2, D <= 128, f16/bf16): the
    // default where the Hopper kernel is not used; 1.20x faster than 8 warps of one row tile on bf16
    // prefill from zero at D = 128 (H200, run s4a).
    choice_.mt2 = env.prefill_mt2;
    int cc_minor = 0;
    PA_CUDA_CHECK(cudaDeviceGetAttribute(&cc_minor, cudaDevAttrComputeCapabilityMinor, dev));
    bool hopper = false;
#ifdef PAGEDATTN_HAS_SM90A
    hopper = cc_major == 9 && cc_minor == 0;
#endif
    // (fp8 takes u8's rules for 128-row chunks, one-byte codes converted into f16 tiles, and its own for
    // the key-split kernel, where it converts them in place: tuning::hopper_split)
    const bool bytes = kv_ == kKvU8 || kv_ == kKvF8;
    const tuning::KvKind kind = kv_ == kKvU8 ? tuning::KvKind::u8 : kv_ == kKvF8 ? tuning::KvKind::fp8 : tuning::KvKind::f16;
    // (a padded head size runs on fwd_kernel only, and so does a width without Hopper kernels: 80, 96,
    // 112, 192)
    const int key_tile = choice_.pad || !has_hopper_kernels(D_) ? 0 : tuning::hopper_key_tile(D_, bytes, hopper, env);
    // deterministic mode: one layout for every chunk (docs/design.md, "Invariant rows"): f16/bf16 on the
    // key-split Hopper kernel with a partial per warpgroup (tuning::deterministic_split), else fwd_kernel's
    // WKV = 4 variants
    choice_.wg_partials = opt.deterministic && tuning::deterministic_split(D_, kind, key_tile, env);
    choice_.wg = opt.deterministic && !choice_.wg_partials ? 0 : key_tile;
    choice_.invariant = opt.deterministic && !choice_.wg_partials;
    int64_t max_keys = 0;   // the longest key range of the call (a window caps it)
    int64_t wide_ctas = 0;  // chunks of more than 64 rows, as 128-row chunks, times the kv heads
    int64_t long_key_heads = 0;  // tuning::wide_key_tile's sum
    int64_t split_ctas = 0;  // sequences of 17-64 rows (one chunk each) times the kv heads
    int64_t small_key_heads = 0;  // sequences of <= 16 rows: their keys times the kv heads
    bool mid_rows = false;   // a sequence of 17-32 rows (tuning::min_partition)
    bool above_16_rows = false;  // a sequence of more than 16 rows (tuning::short_wave_ctas_per_sm)
    int64_t max_rows = 0;    // the most rows of a sequence (KernelChoice::hr)
    for (int s = 0; s < num_seqs; ++s) {
      const int64_t all_keys = int64_t{past[s]} + (p.prefix_only ? 0 : sb[s + 1] - sb[s]);
      const int64_t keys = p.sliding_window > 0 ? std::min<int64_t>(all_keys, p.sliding_window) : all_keys;
      max_keys = std::max(max_keys, keys);
      const int64_t rows = int64_t{sb[s + 1] - sb[s]} * G_;
      if (rows > 64) wide_ctas += (rows + 127) / 128 * Hk_;
      long_key_heads += tuning::long_key_heads(rows, keys, Hk_);
      if (rows > 16 && rows <= 64) split_ctas += Hk_;
      if (rows > 16 && rows <= 32) mid_rows = true;
      if (rows > 16) above_16_rows = true;
      max_rows = std::max(max_rows, rows);
      if (rows > 0 && rows <= 16) small_key_heads += keys * Hk_;
    }
    choice_.wg = tuning::wide_key_tile(D_, kind, choice_.wg, long_key_heads, in.num_sms, env);
    // (the key-split kernel's two-CTA form, where it runs, also takes D = 64's 17-32-row chunks past 16k keys;
    // 1-16-row chunks take the kernel by the call's work for them where 17-32-row ones take it already,
    // tuning::hopper_split_small)
    choice_.wgs_shared = tuning::hopper_split_shared(D_, kind, tuning::hopper_split(D_, kind, choice_.wg, max_keys, false, env),
                                                     max_keys, split_ctas, in.num_sms, env);
    choice_.wg_split = tuning::hopper_split(D_, kind, choice_.wg, max_keys, choice_.wgs_shared, env);
    if (tuning::hopper_split_small(D_, kind, choice_.wg_split, small_key_heads, env)) choice_.wg_split = 1;
    choice_.wg_shared = tuning::hopper_shared(D_, kind, choice_.wg, max_keys, wide_ctas, in.num_sms, env);
    if (choice_.wg_partials) {  // every chunk (<= 64 rows) on the one-CTA key-split form, whatever the call
      choice_.wg_split = 1;
      choice_.wgs_shared = false;
    }
    // every sequence of <= 8 rows, so every chunk (a sequence of <= 16 rows is one chunk): the KT variant,
    // else the HR variant
    const bool eight_rows = max_rows <= 8 && !choice_.pad;
    choice_.hr = eight_rows && has_hr_kernels(D_, kv_) && tuning::half_rows(D_, kind, opt.deterministic, env);
    choice_.kt = eight_rows && has_kt_kernels(D_, kv_) ? tuning::keys_on_m(D_, kind, opt.deterministic, env) : 0;
    in.ctas_per_sm = fwd_kernel_info(D_, kv_, 1, choice_).ctas_per_sm();
    in.short_ctas_per_sm =
        tuning::short_wave_ctas_per_sm(D_, kind, in.ctas_per_sm, above_16_rows, opt.deterministic, env);
    in.short_wave_keys = tuning::kShortWaveKeys;
    for (int k = 0; k < 4; ++k) {  // row-tile classes: their kernel's own occupancy (planner.h)
      const FwdKernelInfo info = fwd_kernel_info(D_, kv_, 1 << k, choice_);
      (std::strncmp(info.variant, "wg", 2) == 0 ? in.wg_ctas_per_sm : in.fwd_ctas_per_sm)[k] = info.ctas_per_sm();
    }
    in.deterministic = opt.deterministic;
    in.wg_partials = choice_.wg_partials;
    // units of tuning::kFoldBlock partitions where the partials are f16 (FwdParams::ws_half below: the
    // kernel's fold passes them through shared memory as the merge reads them); bf16 keeps f32 partials
    in.fold_block = tuning::fold_block(choice_.wg_partials, half_partials_ && kv_ != kKvBF16, env);
    in.forced_partition = opt.partition_tokens;
    in.min_partition = tuning::min_partition(D_, kind, mid_rows, env);
    int optin = 0;
    PA_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    const bool wide_fits = static_cast<int>(fwd_kernel_info(D_, kv_, 8, choice_).smem_bytes) <= optin;
    if (tuning::wide_chunks(D_, choice_.wg, wide_fits, env)) in.max_rows = planner::kMaxRowsWide;
    // deterministic: 17-32-row chunks on the 8-warp layout where it fits (227 KB: sm_90), else chunks of
    // one row tile (G <= 16; planner::deterministic_rows; G > 16 needs the layout: the shared-memory
    // check below names it); PAGEDATTN_DETERMINISTIC_ROWS=16 takes that layout on sm_90 too
    if (opt.deterministic && !choice_.wg_partials && G_ <= 16 &&
        (env.deterministic_rows == 16 || static_cast<int>(fwd_kernel_info(D_, kv_, 2, choice_).smem_bytes) > optin))
      in.max_rows = 16;
    // (Not adopted, removed after 5a4d0c0: 16-row chunks, e.g. T=8 at G=4 as two CTAs over the same keys,
    // 0.93x at 8k T=8 but 1.15-1.33x slower at 32k/128k (runs s4a, s7d); a sequence's chunks over one
    // partition adjacent in the grid, 1.00x on the chunk scenario.)
    wl_ = planner::make_plan(in);
    // (the HR and KT variants hold 8 rows: shared-memory arrays of 8; max_rows above keeps every chunk
    // there)
    if (choice_.hr || choice_.kt)
      for (const planner::WorkItem& w : wl_.items)
        if (w.row_tiles == 1 && int64_t{w.nt} * G_ > 8)
          throw std::logic_error("pagedattn: a chunk of " + std::to_string(int64_t{w.nt} * G_) +
                                 " rows planned for the 8-row variant");
    wave_ctas_ = int64_t{in.num_sms} * std::max(1, in.ctas_per_sm);
    const int32_t* bib = p.block_indices_begins.ptr<int32_t>();
    for (planner::WorkItem& w : wl_.items) {
      w.past = qpos0[w.seq];
      w.tok0 = sb[w.seq];
      w.t_seq = sb[w.seq + 1] - sb[w.seq];
      w.table = bib[w.seq];
      // a sequence in several chunks: one write-in launch instead of every chunk rewriting its rows; a
      // short one (cut by deterministic mode's partition sizes, not by the chunking rule that the write
      // kernel applies) has every row written there
      if (w.nt < w.t_seq) {
        separate_write_ = true;
        if (static_cast<int64_t>(w.t_seq) * G_ <= wl_.chunk_rows) write_all_ = true;
      }
    }
    num_seqs_ = num_seqs;
    // prefix_only chunks with no key (an empty shard, or one wholly before the window) have no item;
    // their rows are out 0 and lse -inf, set before the launches
    for (const planner::EmptyChunk& e : wl_.empty) empty_rows_.emplace_back(sb[e.seq] + e.t0, e.nt);
    num_tokens_ = sb[num_seqs];

    // one launch per kernel variant (items are sorted by row tiles; row-tile counts that share a kernel
    // share its launch)
    for (size_t i = 0; i < wl_.items.size();) {
      const auto launcher = fwd_kernel_info(D_, kv_, wl_.items[i].row_tiles, choice_).launch;
      size_t j = i;
      while (j < wl_.items.size() &&
             fwd_kernel_info(D_, kv_, wl_.items[j].row_tiles, choice_).launch == launcher)
        ++j;
      launches_.push_back(Launch{wl_.items[i].row_tiles, static_cast<int>(i), static_cast<int>(j - i)});
      i = j;
    }
    int smem_optin = 0;
    PA_CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    for (const Launch& l : launches_) {
      const FwdKernelInfo info = fwd_kernel_info(D_, kv_, l.rt, choice_);
      if (static_cast<int>(info.smem_bytes) > smem_optin)
        throw UnsupportedError("this kernel variant (D=" + std::to_string(D_) + ", " + std::to_string(l.rt) +
                               " row tiles) needs " + std::to_string(info.smem_bytes) +
                               " bytes of shared memory per block; this device allows " + std::to_string(smem_optin));
      PA_CUDA_CHECK(info.prepare());  // per plan, so every device in the process gets the opt-in
      smem_.push_back(info.smem_bytes);
    }
    std::vector<MergeRow> rows;
    for (const planner::MergeItem& m : wl_.merges) {
      for (int r = 0; r < m.nt * G_; ++r) {
        for (int hk = 0; hk < Hk_; ++hk) {
          rows.push_back(MergeRow{sb[m.seq] + m.t0 + r / G_, hk * G_ + r % G_, m.slot + hk * m.num_parts, r, m.num_parts,
                                  opt.deterministic ? m.part0 : 0, m.fold});
        }
      }
    }
    num_merge_rows_ = static_cast<int>(rows.size());
    merge_units_ = std::any_of(rows.begin(), rows.end(), [](const MergeRow& r) { return r.fold > 0; });
    int max_parts = 0;
    for (const MergeRow& r : rows) max_parts = std::max(max_parts, r.num_parts);
    // deterministic: the groups of D / 64 column blocks, whatever the batch (a row's groups set which
    // partitions each fold takes, so they must not depend on the call); the CTAs may hold fewer, wider
    // blocks (merge_kernel's kGroupSplit: the same bits; tuning::deterministic_merge_blocks)
    merge_split_ = opt.deterministic ? tuning::deterministic_merge_blocks(D_, num_merge_rows_, in.num_sms, env)
                                     : tuning::merge_split(D_, num_merge_rows_, in.num_sms, env);
    merge_group_split_ = opt.deterministic ? tuning::deterministic_merge_split(D_) : merge_split_;
    merge_batch_ = merge_group_split_ != merge_split_  // (launch_merge_d: 8 loads in flight over a thread's groups)
                       ? 8
                       : tuning::merge_batch(D_, merge_split_, max_parts, num_merge_rows_, in.num_sms, env);
    merge_rowwise_ = opt.deterministic && tuning::merge_rowwise(num_merge_rows_, merge_group_split_, in.num_sms, env);
    merge_cols8_ = tuning::merge_cols8((num_merge_rows_ + merge_rows_per_cta(D_, 8) - 1) / merge_rows_per_cta(D_, 8),
                                       in.num_sms, env);

    // --- metadata to the device (read by run) ----------------------------------------------------
    // NOTE: copied into plan-owned vectors first: if the caller's buffers are pinned, cudaMemcpyAsync
    // returns before reading them, and the caller may reuse them as soon as plan() returns.
    auto keep = [&](const TensorView& t, std::size_t n) {
      const uint8_t* b = static_cast<const uint8_t*>(t.data);
      host_.emplace_back(b, b + n * dtype_size(t.dtype));
      return host_.back().data();
    };
    const std::size_t n_bi = static_cast<std::size_t>(p.block_indices.numel());
    upload(d_past_, reinterpret_cast<const int32_t*>(keep(p.past_lens, num_seqs)), num_seqs, stream_);
    upload(d_sb_, reinterpret_cast<const int32_t*>(keep(p.subsequence_begins, num_seqs + 1)), num_seqs + 1, stream_);
    upload(d_bi_, reinterpret_cast<const int32_t*>(keep(p.block_indices, n_bi)), n_bi, stream_);
    upload(d_bib_, reinterpret_cast<const int32_t*>(keep(p.block_indices_begins, num_seqs + 1)), num_seqs + 1,
           stream_);
    if (p.qq_bias.present()) {
      const std::size_t n_qq = static_cast<std::size_t>(p.qq_bias.numel());
      upload(d_qq_, keep(p.qq_bias, n_qq), n_qq, stream_);
      upload(d_qqb_, reinterpret_cast<const int32_t*>(keep(p.qq_bias_begins, num_seqs + 1)), num_seqs + 1, stream_);
    }
    upload(d_items_, wl_.items.data(), wl_.items.size(), stream_);
    merge_rows_ = std::move(rows);
    upload(d_merge_, merge_rows_.data(), merge_rows_.size(), stream_);
    if (p.scores.present()) {  // 32-key tiles of every sequence's context; final row statistics
      std::vector<ScoreTile> tiles;
      int64_t base = 0;
      for (int s = 0; s < num_seqs; ++s) {
        const int T = sb[s + 1] - sb[s], ctx = past[s] + T;
        // the last w new tokens count (score_aggregation_window; absent: 1; -1 or >= T: all)
        const int w = p.score_aggregation_window.present() ? p.score_aggregation_window.ptr<const int32_t>()[s] : 1;
        const int t_lo = w < 0 || w >= T ? 0 : T - w;
        for (int j0 = 0; j0 < ctx; j0 += kScoreKeys) tiles.push_back(ScoreTile{s, j0, base, t_lo});
        base += ctx;
      }
      num_score_tiles_ = static_cast<int>(tiles.size());
      upload(d_score_tiles_, tiles.data(), tiles.size(), stream_);
    }
    if (p.scores.present())  // each row's final (max', den), for the scores pass
      row_stats_.alloc(std::max<std::size_t>(static_cast<std::size_t>(sb[num_seqs]) * H_ * 2 * sizeof(float), 16));
    const std::size_t ws_bytes = static_cast<std::size_t>(wl_.num_slots) * wl_.slot_rows * D_ * sizeof(float);
    if (ws_bytes > (std::size_t{4} << 30))
      throw UnsupportedError("the partials workspace would take " + std::to_string(ws_bytes >> 20) +
                             " MiB (" + std::to_string(wl_.num_slots) +
                             " partition slots): raise Options::partition_tokens or leave deterministic mode off");
    ws_o_.alloc(ws_bytes + 16);
    ws_ml_.alloc(static_cast<std::size_t>(wl_.num_slots) * wl_.slot_rows * 2 * sizeof(float) + 16);

    scale_ = p.scale && *p.scale != 0.0f ? *p.scale : 1.0f / std::sqrt(static_cast<float>(Dk_));
  }

  void run(const Params& p) override {
    detail::check_same_signature(planned_, p);
    const TensorView* need_align[] = {&p.query, &p.key, &p.value, &p.out, &p.cache.key, &p.cache.value,
                                      &p.cache.key_scale, &p.cache.key_min, &p.cache.value_scale,
                                      &p.cache.value_min, &p.lse};
    const char* names[] = {"query", "key", "value", "out", "key_cache", "value_cache",
                           "key_scale", "key_min", "value_scale", "value_min", "lse"};
    const bool fp8 = kv_ == kKvF8;
    for (int i = 0; i < 11; ++i) {
      const bool scalars = fp8 && (i == 6 || i == 8);  // fp8's scales: f32 [Hk] or [1], read one at a time
      if (!(scalars ? aligned4(*need_align[i]) : aligned16(*need_align[i])))
        throw ValidationError(names[i], scalars ? "the cuda backend needs 4-byte aligned data"
                                                : "the cuda backend needs 16-byte aligned data");
    }

    FwdParams P = {};
    P.q = p.query.data;
    P.out = p.out.data;
    P.k_new = p.key.present() ? p.key.data : nullptr;
    P.v_new = p.value.present() ? p.value.data : nullptr;
    P.k_cache = p.cache.key.data;
    P.v_cache = p.cache.value.data;
    if (fp8) {
      P.k_head_scale = p.cache.key_scale.ptr<float>();
      P.v_head_scale = p.cache.value_scale.ptr<float>();
      P.k_head_scale_stride = p.cache.key_scale.numel() == 1 ? 0 : 1;
      P.v_head_scale_stride = p.cache.value_scale.numel() == 1 ? 0 : 1;
    } else {
      P.k_scale = static_cast<uint16_t*>(p.cache.key_scale.data);
      P.k_min = static_cast<uint16_t*>(p.cache.key_min.data);
      P.v_scale = static_cast<uint16_t*>(p.cache.value_scale.data);
      P.v_min = static_cast<uint16_t*>(p.cache.value_min.data);
    }
    P.past_lens = d_past_.as<int32_t>();
    P.subseq_begins = d_sb_.as<int32_t>();
    P.block_indices = d_bi_.as<int32_t>();
    P.block_indices_begins = d_bib_.as<int32_t>();
    P.qq_bias = d_qq_.as<uint8_t>();
    P.qq_bias_begins = d_qqb_.as<int32_t>();
    P.alibi = p.alibi_slopes.present() ? p.alibi_slopes.ptr<float>() : nullptr;
    P.sinks = p.sinks.present() ? p.sinks.ptr<float>() : nullptr;
    P.items = d_items_.as<planner::WorkItem>();
    P.merge_rows = d_merge_.as<MergeRow>();
    P.ws_o = ws_o_.as<float>();
    P.ws_ml = ws_ml_.as<float>();
    if (p.scores.present()) P.row_stats = row_stats_.as<float>();
    P.lse = p.lse.present() ? p.lse.ptr<float>() : nullptr;
    if (p.scores.present()) {
      P.scores = p.scores.ptr<float>();
      P.score_tiles = d_score_tiles_.as<ScoreTile>();
    }
    P.H = H_;
    P.Hk = Hk_;
    P.G = G_;
    P.D = D_;
    P.Dk = Dk_;
    P.Dv = Dv_;
    P.block_size_log2 = bs_log2_;
    P.sliding_window = p.sliding_window;
    P.scale_log2 = scale_ * kLog2e;
    P.io_dtype = io_type(p.query.dtype);
    P.slot_rows = wl_.slot_rows;
    P.chunk_rows = wl_.chunk_rows;
    P.write_all = write_all_ ? 1 : 0;
    P.pdl_early_reads = pdl_ && early_reads_ ? 1 : 0;
    P.u8_exp_byte = 0x64u;
    P.stale_log2 = kv_ != kKvU8 ? 8.0f : 6.0f;  // FwdParams::stale_log2
    if (!stale_max_) P.stale_log2 = 0.0f;
    // Partials as f16 O / l where the values fit f16 (f16 caches; u8's f16 min + code * scale; fp8's codes,
    // |x| <= 448, the value scale applied by the merge), in calls whose partial slots hold <= 64 rows: half
    // the partial bytes each partition writes and the merge reads. Run hp1 (H100, same call, f32 / f16
    // partials): seed rows at 32k / 128k 1.002-1.040, sweep medians 1.001-1.018 up to 64 rows; but u8 at
    // 65-128 rows 0.957-0.994 and both kinds at 129-256 0.974-1.016, so the 128-row forms keep f32. bf16
    // values may not fit f16: bf16 caches keep f32.
    P.ws_half = half_partials_ && kv_ != kKvBF16 && wl_.slot_rows <= 64 ? 1 : 0;
    P.fold_block = wl_.folded ? tuning::kFoldBlock : 0;

    for (const auto& [t0, nt] : empty_rows_) {  // rows with no key (prefix_only, Plan::empty): out 0, lse -inf
      const std::size_t row_bytes = static_cast<std::size_t>(H_) * Dv_ * dtype_size(p.out.dtype);
      PA_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(p.out.data) + t0 * row_bytes, 0, nt * row_bytes, stream_));
      if (P.lse != nullptr) {
        const int64_t n = static_cast<int64_t>(nt) * H_;
        lse_empty_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream_>>>(P.lse + static_cast<int64_t>(t0) * H_, n);
        PA_CUDA_CHECK(cudaGetLastError());
      }
    }
    if (P.k_new != nullptr && separate_write_) {  // rows of multi-chunk sequences (the rest stay fused)
      fwd_kernel_info(D_, kv_, 1).launch_write(P, num_tokens_, num_seqs_, stream_, pdl_);
      PA_CUDA_CHECK(cudaGetLastError());
    }
    for (const Launch& l : launches_) {
      fwd_kernel_info(D_, kv_, l.rt, choice_).launch(P, l.offset, l.count, stream_, pdl_);
      PA_CUDA_CHECK(cudaGetLastError());
    }
    if (num_merge_rows_ > 0) {
      if (merge_rowwise_)
        launch_merge_rows(P, D_, num_merge_rows_, merge_cols8_, stream_, pdl_);
      else
        launch_merge(P, D_, num_merge_rows_, merge_split_, merge_batch_, merge_group_split_, merge_units_, stream_,
                     pdl_);
      PA_CUDA_CHECK(cudaGetLastError());
    }
    if (P.scores != nullptr && num_score_tiles_ > 0) {
      fwd_kernel_info(D_, kv_, 1).launch_scores(P, num_score_tiles_, stream_, pdl_);
      PA_CUDA_CHECK(cudaGetLastError());
    }
  }

  Backend backend() const override { return Backend::cuda; }

  std::string describe() const override {
    std::ostringstream os;
    const PlanInfo pi = info();
    os << "pagedattn plan: backend=cuda D=" << Dk_ << (Dv_ != Dk_ ? "/" + std::to_string(Dv_) : std::string()) << (choice_.pad ? " (padded to " + std::to_string(D_) + ")" : "") << " H=" << H_ << " Hk=" << Hk_ << " G=" << G_
       << " kv=" << kv_precision_name(planned_.cache.precision()) << " block_size=" << (1 << bs_log2_) << " "
       << wl_.describe() << " launches=";
    for (size_t i = 0; i < pi.launches.size(); ++i) {
      const PlanInfo::Launch& l = pi.launches[i];
      os << (i ? "," : "") << "[rt=" << l.row_tiles << " ctas=" << launches_[i].count << "x" << Hk_
         << " threads=" << l.threads << " smem=" << smem_[i] / 1024
         << "KiB per_sm=" << fwd_kernel_info(D_, kv_, l.row_tiles, choice_).ctas_per_sm()
         << (l.variant.empty() ? std::string() : " " + l.variant) << "]";
    }
    os << " merge_rows=" << pi.merge_rows;
    if (pi.merge_rowwise)
      os << " merge=rowwise";
    else
      os << "x" << pi.merge_split << " merge_batch=" << pi.merge_batch;
    os
       << " kv_write=" << (pi.separate_kv_write ? "separate" : "fused")
       << " pdl=" << (pi.pdl ? (pi.early_reads ? "on+early-reads" : "on") : "off");
    os << " workspace=" << pi.workspace_bytes / 1024 << "KiB";
    return os.str();
  }

  PlanInfo info() const override {
    PlanInfo pi;
    pi.backend = Backend::cuda;
    pi.partition_tokens = wl_.partition_tokens;
    pi.wave_ctas = wave_ctas_;
    pi.head_width = D_;
    pi.work_items = wl_.ctas;
    for (const Launch& l : launches_) {  // what the launched kernels are (from their info)
      const FwdKernelInfo k = fwd_kernel_info(D_, kv_, l.rt, choice_);
      pi.launches.push_back(PlanInfo::Launch{l.rt, static_cast<int64_t>(l.count) * Hk_, k.threads, k.variant});
    }
    pi.merge_rows = num_merge_rows_;
    pi.merge_split = merge_split_;
    pi.merge_batch = merge_batch_;
    pi.merge_rowwise = merge_rowwise_;
    pi.folded_units = wl_.folded;
    pi.separate_kv_write = separate_write_;
    pi.pdl = pdl_;
    pi.early_reads = pdl_ && early_reads_;
    pi.workspace_bytes = workspace_bytes();
    return pi;
  }

  std::size_t workspace_bytes() const override {
    return ws_o_.bytes + ws_ml_.bytes + d_items_.bytes + d_merge_.bytes + d_bi_.bytes + d_qq_.bytes +
           d_score_tiles_.bytes + row_stats_.bytes;
  }

 private:
  struct Launch {
    int rt, offset, count;
  };
  Params planned_;
  cudaStream_t stream_;
  int D_ = 0, Dk_ = 0, Dv_ = 0, H_ = 0, Hk_ = 0, G_ = 1, kv_ = 0, bs_log2_ = 0;  // D_: the kernels' width, Dk_: the call's
  bool pdl_ = false;
  bool early_reads_ = true;
  bool stale_max_ = true;  // FwdParams::stale_log2 > 0 (PAGEDATTN_STALE_MAX=0: off)
  bool half_partials_ = true;  // FwdParams::ws_half where the cache allows (PAGEDATTN_HALF_PARTIALS=0: off)
  // kernel variants besides the defaults: mt2 (on; PAGEDATTN_PREFILL_MT2=0), wg (the Hopper prefill
  // kernel's key tile; sm_90a builds on sm_90 devices), wg_split (its key-split form)
  KernelChoice choice_{true, 0, 0};
  bool separate_write_ = false;  // KV write-in as its own launch (some sequence has several chunks)
  bool write_all_ = false;       // ... of every sequence's rows (FwdParams::write_all)
  int64_t wave_ctas_ = 0;        // PlanInfo::wave_ctas
  int num_seqs_ = 0, num_tokens_ = 0;
  std::vector<std::pair<int, int>> empty_rows_;  // (first token, tokens) of rows with no key (prefix_only)
  float scale_ = 1.0f;
  planner::Plan wl_;
  std::vector<Launch> launches_;
  std::vector<std::size_t> smem_;
  int num_merge_rows_ = 0;
  int merge_split_ = 1;  // merge CTAs per row (column blocks)
  int merge_group_split_ = 1;  // the column blocks whose partition groups the merge folds (deterministic: D / 64)
  int merge_batch_ = 1;  // partition loads in flight per merge thread
  bool merge_rowwise_ = false;  // deterministic mode, many rows: merge_rows_kernel (tuning::merge_rowwise)
  bool merge_units_ = false;  // a row with MergeRow::fold: merge_kernel's kUnits variant
  bool merge_cols8_ = true;  // merge_rows_kernel at 8 columns per thread (tuning::merge_cols8, merge_row_cols)
  std::vector<std::vector<uint8_t>> host_;  // plan-owned copies of the host metadata (see upload)
  std::vector<MergeRow> merge_rows_;
  int num_score_tiles_ = 0;
  DeviceBuffer d_past_, d_sb_, d_bi_, d_bib_, d_qq_, d_qqb_, d_items_, d_merge_, ws_o_, ws_ml_;
  DeviceBuffer d_score_tiles_, row_stats_;  // scores and lse outputs only
};

}  // namespace
}  // namespace cuda

namespace detail {
std::shared_ptr<PlanImpl> make_cuda_plan(const Params& p, const Options& opt) {
  if (!cuda_available()) throw UnsupportedError("backend 'cuda': no CUDA device is visible");
  return std::make_shared<cuda::CudaPlan>(p, opt);
}
}  // namespace detail

}  // namespace pagedattn
