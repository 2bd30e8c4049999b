// The split-D few-query kernel (experiment, PAGEDATTN_SPLIT_D=1): chunks of 1-2 row tiles (T*G <= 32)
// at D = 128 and 256, every KV kind.
//
// fwd_kernel gives each warp a 16-row tile and the whole head dimension: at D = 256 its O accumulator is
// 128 registers per thread, so two CTAs of 4 warps per SM (2 warps per scheduler), and at 32 rows two
// warps of a key group each read and convert the same K/V codes. Its time is the latency of those
// warps' instruction streams, not their count (runs s11d, s12a, s12b). Here the 4 warps of a CTA share
// one 32-key tile per step and split the work two ways:
//   S = Q K^T: warp w takes keys [8w, 8w + 8) of the tile for every row (each key read and converted once
//   per CTA), masks and exponentiates them, and writes its P columns to shared memory;
//   O += P V: warp w takes head dims [w D/4, (w+1) D/4) for every row and every key of the tile, P from
//   shared memory (ldmatrix, as Q), so O is D/4 columns per thread-row: 32 registers per row tile.
// That frees registers for three CTAs per SM (the ring is sized for it: 75 KB). The rows' softmax
// reference is shared by the warps (their P columns meet in one MMA): each warp computes P against it
// and votes, in the barrier that publishes P, whether one of its rows' maxima passed the reference by
// more than P.stale_log2; if any did (rare after the first tile), the warps exchange their maxima,
// move the reference, rescale O, l and c, and recompute P. Row sums (l, and the u8 zero-point term c)
// are per warp over its keys, summed across warps once at the end. Partials and output as fwd_kernel.
#pragma once

#include "cuda/fwd/kernel.cuh"

namespace pagedattn {
namespace cuda {

template <int D, int KV, int RT, int KPW = 32>
struct XdTraits {
  static_assert(D == 128 || D == 256, "split-D kernel: head size 128 or 256");
  static_assert(RT == 1 || RT == 2, "split-D kernel: 1 or 2 row tiles");
  static_assert(KPW == 32 || KPW == 64, "split-D kernel: 32- or 64-key tiles");
  using T = typename KvTraits<KV>::mma_t;
  using C = typename KvTraits<KV>::cache_t;
  static constexpr int kD = D;
  static constexpr bool kU8 = KV == kKvU8;
  static constexpr int kRows = RT * 16;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 128;
  static constexpr int kGroupThreads = 128;  // load_half: all threads copy each half
  static constexpr int kKPW = KPW;           // keys per tile (a half: K or V of the tile)
  static constexpr int kSub = kKPW / kWarps; // keys per warp in S
  static constexpr int kN1 = kSub / 8;       // S n-tiles per warp (8 keys each)
  static constexpr int kK3 = kKPW / 16;      // PV k-steps per tile
  static constexpr int kDW = D / kWarps;     // output columns per warp
  static constexpr int kN3 = kDW / 8;        // O n-tiles per warp
  static constexpr int kLdQ = kU8 ? D + 16 : D + 8;  // u8: 8-byte fragment loads without conflicts
  static constexpr int kLdKV = kU8 ? D + 16 : D + 8;
  static constexpr int kLdP = kKPW + 8;
  static constexpr int kLdRed = D + 4;
  static constexpr int kParBytes = (kU8 ? 4 : 1) * kKPW * 2;
  static constexpr int kHalfBytes = kKPW * kLdKV * static_cast<int>(sizeof(C)) + kParBytes;
  static constexpr int kCtas = 3;  // CTAs per SM the ring is sized for (228 KB per SM, 1 KB reserved per CTA)
  static constexpr int kBudget = 228 * 1024 / kCtas - 1024;
  static constexpr int kFixed = kRows * kLdQ * 2 + kRows * kLdP * 2 + kRows * 4 + kWarps * kRows * 16 + kRows * 16 + 256;
  static constexpr int kFit = (kBudget - kFixed) / kHalfBytes;
  static constexpr int kStages = kFit > 6 ? 6 : kFit;
  static_assert(kStages >= 3, "pipeline depth");
};

template <int D, int KV, int RT, int KPW = 32>
struct XdStorage {
  using Tr = XdTraits<D, KV, RT, KPW>;
  using T = typename Tr::T;
  using C = typename Tr::C;
  struct Half {  // the same layout as fwd_kernel's (load_half fills it)
    alignas(16) C kv[Tr::kKPW][Tr::kLdKV];
    alignas(16) uint16_t par[Tr::kU8 ? 4 : 1][Tr::kKPW];
  };
  union RingOrRed {  // the ring while streaming; the rows' outputs (f32) after
    Half ring[Tr::kStages];
    alignas(16) float red[Tr::kRows][Tr::kLdRed];
  };
  RingOrRed u;
  alignas(16) T q[Tr::kRows][Tr::kLdQ];
  alignas(16) T p[Tr::kRows][Tr::kLdP];
  float qsum[Tr::kRows];
  float4 xst[Tr::kWarps][Tr::kRows];  // per warp: (row max) for a reference move; (m, l, c) at the end
  float4 row_st[Tr::kRows];           // (M, L, M with sink, 1 / denominator)
};

template <int D, int KV, int RT, int KPW = 32>
__global__ void __launch_bounds__(128, 3) xd_kernel(const __grid_constant__ FwdParams P, const int item_offset) {
  using Tr = XdTraits<D, KV, RT, KPW>;
  using T = typename Tr::T;
  using Smem = XdStorage<D, KV, RT, KPW>;
  constexpr int kKPW = Tr::kKPW, kStages = Tr::kStages, kRows = Tr::kRows;
  constexpr int kN3 = Tr::kN3, kK3 = Tr::kK3, kN1 = Tr::kN1;
  constexpr bool kU8 = Tr::kU8;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);

  const int hk = blockIdx.y;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const planner::WorkItem w = P.items[item_offset + blockIdx.x];
  const int G = P.G;
  const int rows = w.nt * G;
  const int past = w.past, tok0 = w.tok0, t_seq = w.t_seq;
  const int32_t* table = P.block_indices + w.table;
  if (lane == 0 && warp == 0 && w.kv_begin < w.kv_end)
    asm volatile("prefetch.global.L1 [%0];\n" ::"l"(table + (w.kv_begin >> P.block_size_log2)));
  // early reads before the PDL wait: as fwd_kernel (the same contract, docs/design.md)
  const bool early = P.pdl_early_reads && w.kv_end <= past;
  const int n_tiles = (w.kv_end - w.kv_begin + kKPW - 1) / kKPW;
  const int n_halves = 2 * n_tiles;
  auto issue = [&](int h) {
    if (h < n_halves)
      load_half<Tr>(sm.u.ring[h % kStages], h % 2, P, table, hk, w.kv_begin + (h / 2) * kKPW, w.kv_end, tid);
    cp_async_commit();
  };
  constexpr int kAhead = kStages - 1;
  auto prologue_rest = [&]() {
#pragma unroll
    for (int s = 1; s < kAhead; ++s) issue(s);
  };
  if (early) issue(0);
  pdl_wait();
  fused_write_in<D, KV>(P, w, table, hk, warp, Tr::kWarps, lane);
  if (!early) issue(0);
  auto store_q = [&](int r, int ch, uint4 v) { *reinterpret_cast<uint4*>(&sm.q[r][ch * 8]) = v; };
  stage_q<T, kRows, D, Tr::kThreads>(P, tok0 + w.t0, hk, G, rows, tid, store_q, prologue_rest,
                                      kU8 ? sm.qsum : nullptr);
  __syncthreads();

  // Q fragments (A operand of S, row tile mt, k-step ks). u8: the K codes' k order (see fwd_kernel's
  // load_qf): k = 2i+b -> d = 4i+b, k = 8+2i+b -> d = 4i+2+b, so rows g and g+8 each give one 8-byte load.
  auto q_frag = [&](uint32_t (&f)[4], int mt, int ks) {
    if constexpr (kU8) {
      const int r = mt * 16 + lane / 4, d = ks * 16 + 4 * (lane % 4);
      const uint2 a = *reinterpret_cast<const uint2*>(&sm.q[r][d]);
      const uint2 b = *reinterpret_cast<const uint2*>(&sm.q[r + 8][d]);
      f[0] = a.x;
      f[1] = b.x;
      f[2] = a.y;
      f[3] = b.y;
    } else {
      ldmatrix_x4(f, &sm.q[mt * 16 + (lane % 16)][ks * 16 + (lane / 16) * 8]);
    }
  };

  // the thread's rows: lane/4 and lane/4 + 8 of each row tile (S and O share the layout)
  int row_qpos[RT][2], row_lo[RT][2];
  bool row_valid[RT][2];
  float row_slope2[RT][2], row_qsum[RT][2];
  const uint8_t* row_qq[RT][2];
#pragma unroll
  for (int mt = 0; mt < RT; ++mt) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int r = mt * 16 + lane / 4 + 8 * hf;
      const bool valid = r < rows;
      const int t = w.t0 + (valid ? r / G : 0);
      const int h = hk * G + (valid ? r % G : 0);
      row_valid[mt][hf] = valid;
      row_qpos[mt][hf] = past + t;
      row_lo[mt][hf] = P.sliding_window > 0 ? past + t - P.sliding_window + 1 : INT_MIN;
      row_slope2[mt][hf] = (valid && P.alibi != nullptr) ? P.alibi[h] * kLog2e : 0.0f;
      row_qq[mt][hf] = (valid && P.qq_bias != nullptr)
                           ? P.qq_bias + P.qq_bias_begins[w.seq] + static_cast<int64_t>(t) * t_seq
                           : nullptr;
      row_qsum[mt][hf] = kU8 ? sm.qsum[r] : 0.0f;
    }
  }

  // Shared softmax reference (the same in every warp), per-warp partial l and c over the warp's keys.
  const float stale = P.stale_log2;
  float row_m[RT][2], row_l[RT][2], row_c[RT][2];
  float o[RT][kN3][4];
#pragma unroll
  for (int mt = 0; mt < RT; ++mt) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      row_m[mt][hf] = -INFINITY;
      row_l[mt][hf] = row_c[mt][hf] = 0.0f;
    }
#pragma unroll
    for (int n = 0; n < kN3; ++n) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
  }
  const uint32_t k64 = P.u8_exp_byte;
  // the thread's first key of the tile in S n-tile n: kc0 + 8 n
  const int kc0 = warp * Tr::kSub + 2 * (lane % 4);

  for (int it = 0; it < n_tiles; ++it) {
    const int js = w.kv_begin + it * kKPW;
    // ---- K half: S for the warp's 8 keys, every row ----
    cp_async_wait<kAhead - 1>();
    __syncthreads();
    issue(2 * it + kStages - 1);
    const auto& hk_half = sm.u.ring[(2 * it) % kStages];
    float s[RT][kN1][4];
#pragma unroll
    for (int mt = 0; mt < RT; ++mt)
#pragma unroll
      for (int n = 0; n < kN1; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
    if constexpr (kU8) {
#pragma unroll
      for (int ks = 0; ks < D / 16; ks += 4) {
#pragma unroll
        for (int n = 0; n < kN1; ++n) {
          uint32_t r4[4];
          ldmatrix_x4(r4, &hk_half.kv[warp * Tr::kSub + n * 8 + (lane % 8)][(ks + lane / 8) * 16]);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const uint32_t b0 = u8x2_biased(r4[e], kSelB01), b1 = u8x2_biased(r4[e], kSelB23);
#pragma unroll
            for (int mt = 0; mt < RT; ++mt) {
              uint32_t qf[4];
              q_frag(qf, mt, ks + e);
              mma_16816<T>(s[mt][n], qf, b0, b1);
            }
          }
        }
      }
    } else {
#pragma unroll
      for (int ks = 0; ks < D / 16; ks += 2) {
#pragma unroll
        for (int n = 0; n < kN1; ++n) {
          uint32_t b[4];  // k-steps ks and ks+1 of the warp's keys 8n..8n+7
          ldmatrix_x4(b, &hk_half.kv[warp * Tr::kSub + n * 8 + (lane % 8)][ks * 16 + (lane / 8) * 8]);
#pragma unroll
          for (int mt = 0; mt < RT; ++mt) {
            uint32_t qf[4];
            q_frag(qf, mt, ks);
            mma_16816<T>(s[mt][n], qf, b[0], b[1]);
            q_frag(qf, mt, ks + 1);
            mma_16816<T>(s[mt][n], qf, b[2], b[3]);
          }
        }
      }
    }
    // scores in log2 units with masks; element (n, e): row hf = e / 2, key js + kc0 + 8 n + e % 2
    float2 kscale[kN1], kzp[kN1], vscale[kN1], vzp[kN1];
#pragma unroll
    for (int n = 0; n < kN1; ++n) {
      kscale[n] = vscale[n] = make_float2(1.0f, 1.0f);
      kzp[n] = vzp[n] = make_float2(0.0f, 0.0f);
      if constexpr (kU8) {
        const int kc = kc0 + 8 * n;
        kscale[n] = __half22float2(*reinterpret_cast<const __half2*>(&hk_half.par[0][kc]));
        kzp[n] = __half22float2(*reinterpret_cast<const __half2*>(&hk_half.par[1][kc]));
        vscale[n] = __half22float2(*reinterpret_cast<const __half2*>(&hk_half.par[2][kc]));
        vzp[n] = __half22float2(*reinterpret_cast<const __half2*>(&hk_half.par[3][kc]));
      }
    }
    float mx[RT][2];
    bool need = false;
#pragma unroll
    for (int mt = 0; mt < RT; ++mt) {
      mx[mt][0] = mx[mt][1] = -INFINITY;
#pragma unroll
      for (int n = 0; n < kN1; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int hf = e / 2;
          const int j = js + kc0 + 8 * n + (e % 2);
          float raw = s[mt][n][e];
          if constexpr (kU8)
            raw = (e % 2 ? kscale[n].y : kscale[n].x) *
                  (raw - ((e % 2 ? kzp[n].y : kzp[n].x) + kU8Bias) * row_qsum[mt][hf]);
          const bool vis = row_valid[mt][hf] && j < w.kv_end && j <= row_qpos[mt][hf] && j >= row_lo[mt][hf] &&
                           (row_qq[mt][hf] == nullptr || j < past || row_qq[mt][hf][j - past] != 0);
          const float sv =
              vis ? raw * P.scale_log2 + row_slope2[mt][hf] * static_cast<float>(j - row_qpos[mt][hf]) : -INFINITY;
          s[mt][n][e] = sv;
          mx[mt][hf] = fmaxf(mx[mt][hf], sv);
        }
      }
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        mx[mt][hf] = fmaxf(mx[mt][hf], __shfl_xor_sync(0xffffffffu, mx[mt][hf], 1));
        mx[mt][hf] = fmaxf(mx[mt][hf], __shfl_xor_sync(0xffffffffu, mx[mt][hf], 2));
        need |= mx[mt][hf] > row_m[mt][hf] + stale;
      }
    }
    // P against the reference -> shared memory, with the warp's l and c terms of this tile
    float sum[RT][2], cz[RT][2];
    auto make_p = [&]() {
#pragma unroll
      for (int mt = 0; mt < RT; ++mt) {
        sum[mt][0] = sum[mt][1] = cz[mt][0] = cz[mt][1] = 0.0f;
#pragma unroll
        for (int n = 0; n < kN1; ++n) {
          float p[4];
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int hf = e / 2;
            const float pe = s[mt][n][e] == -INFINITY ? 0.0f : fast_exp2(s[mt][n][e] - row_m[mt][hf]);
            sum[mt][hf] += pe;
            if constexpr (kU8) {
              // NOTE: masked keys may carry NaN parameters (unwritten slots): never multiply them
              p[e] = pe != 0.0f ? __half2float(__float2half_rn(pe * (e % 2 ? vscale[n].y : vscale[n].x))) : 0.0f;
              cz[mt][hf] += pe != 0.0f ? p[e] * (e % 2 ? vzp[n].y : vzp[n].x) : 0.0f;
            } else {
              p[e] = pe;
            }
          }
          const int r = mt * 16 + lane / 4, kc = kc0 + 8 * n;
          *reinterpret_cast<uint32_t*>(&sm.p[r][kc]) = pack2<T>(p[0], p[1]);
          *reinterpret_cast<uint32_t*>(&sm.p[r + 8][kc]) = pack2<T>(p[2], p[3]);
        }
      }
    };
    make_p();
    // ---- V half (and the vote): P and V visible to every warp ----
    cp_async_wait<kAhead - 1>();
    const bool moved = __syncthreads_or(need);
    issue(2 * it + kStages);
    if (moved) {  // CTA-uniform: some warp's row passed the reference; move it by the maxima of all warps
      if (lane % 4 == 0) {
#pragma unroll
        for (int mt = 0; mt < RT; ++mt)
#pragma unroll
          for (int hf = 0; hf < 2; ++hf) sm.xst[warp][mt * 16 + lane / 4 + 8 * hf].x = mx[mt][hf];
      }
      __syncthreads();
#pragma unroll
      for (int mt = 0; mt < RT; ++mt) {
        float alpha[2];
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int r = mt * 16 + lane / 4 + 8 * hf;
          float m_all = sm.xst[0][r].x;
#pragma unroll
          for (int x = 1; x < Tr::kWarps; ++x) m_all = fmaxf(m_all, sm.xst[x][r].x);
          const float m_old = row_m[mt][hf];
          const float m_new = m_all > m_old + stale ? m_all : m_old;
          alpha[hf] = m_new != m_old && m_old != -INFINITY ? fast_exp2(m_old - m_new) : 1.0f;
          row_m[mt][hf] = m_new;
          row_l[mt][hf] *= alpha[hf];
          row_c[mt][hf] *= alpha[hf];
        }
#pragma unroll
        for (int n = 0; n < kN3; ++n) {
          o[mt][n][0] *= alpha[0];
          o[mt][n][1] *= alpha[0];
          o[mt][n][2] *= alpha[1];
          o[mt][n][3] *= alpha[1];
        }
      }
      make_p();
      __syncthreads();  // the new P visible (and the maxima read before the next move writes them)
    }
#pragma unroll
    for (int mt = 0; mt < RT; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        row_l[mt][hf] += sum[mt][hf];
        row_c[mt][hf] += cz[mt][hf];
      }
    // ---- O += P V for the warp's D/4 columns ----
    const auto& hv = sm.u.ring[(2 * it + 1) % kStages];
#pragma unroll
    for (int kk = 0; kk < kK3; ++kk) {
      uint32_t pf[RT][4];
#pragma unroll
      for (int mt = 0; mt < RT; ++mt) ldmatrix_x4(pf[mt], &sm.p[mt * 16 + (lane % 16)][kk * 16 + (lane / 16) * 8]);
      const int key = kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8;
      if constexpr (kU8) {
        // as fwd_kernel's value step: n-tile 4b+{0,1,2,3} holds d = 32b + {0,1,16,17} + 2 * col
#pragma unroll
        for (int bl = 0; bl < Tr::kDW / 32; ++bl) {
          const int b = warp * (Tr::kDW / 32) + bl;
          uint32_t r4[4];
          ldmatrix_x4_trans(r4, &hv.kv[key][32 * b + (lane / 16) * 16]);
          const uint32_t v0 = u8x2_to_half2(r4[0], kSelB02, k64), v1 = u8x2_to_half2(r4[1], kSelB02, k64);
          const uint32_t v2 = u8x2_to_half2(r4[0], kSelB13, k64), v3 = u8x2_to_half2(r4[1], kSelB13, k64);
          const uint32_t v4 = u8x2_to_half2(r4[2], kSelB02, k64), v5 = u8x2_to_half2(r4[3], kSelB02, k64);
          const uint32_t v6 = u8x2_to_half2(r4[2], kSelB13, k64), v7 = u8x2_to_half2(r4[3], kSelB13, k64);
#pragma unroll
          for (int mt = 0; mt < RT; ++mt) {
            mma_16816<T>(o[mt][4 * bl + 0], pf[mt], v0, v1);
            mma_16816<T>(o[mt][4 * bl + 1], pf[mt], v2, v3);
            mma_16816<T>(o[mt][4 * bl + 2], pf[mt], v4, v5);
            mma_16816<T>(o[mt][4 * bl + 3], pf[mt], v6, v7);
          }
        }
      } else {
#pragma unroll
        for (int n = 0; n < kN3; n += 2) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, &hv.kv[key][(warp * kN3 + n + lane / 16) * 8]);
#pragma unroll
          for (int mt = 0; mt < RT; ++mt) {
            mma_16816<T>(o[mt][n], pf[mt], b[0], b[1]);
            mma_16816<T>(o[mt][n + 1], pf[mt], b[2], b[3]);
          }
        }
      }
    }
  }
  cp_async_wait<0>();
  // NOTE: after the fused write-in and its fence (see fwd_kernel): keep the trigger after every cache write
  pdl_launch_dependents();

  // --- rows: the quad's partial sums, then the warps' (each over its keys), in a fixed order -----------
#pragma unroll
  for (int mt = 0; mt < RT; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf)
#pragma unroll
      for (int x = 1; x <= 2; x *= 2) {
        row_l[mt][hf] += __shfl_xor_sync(0xffffffffu, row_l[mt][hf], x);
        if constexpr (kU8) row_c[mt][hf] += __shfl_xor_sync(0xffffffffu, row_c[mt][hf], x);
      }
  __syncthreads();  // every warp is done with the ring, P and the maxima
  if (lane % 4 == 0) {
#pragma unroll
    for (int mt = 0; mt < RT; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf)
        sm.xst[warp][mt * 16 + lane / 4 + 8 * hf] = make_float4(row_m[mt][hf], row_l[mt][hf], row_c[mt][hf], 0.0f);
  }
  __syncthreads();
  if (tid < rows) {
    const int r = tid;
    const float M = sm.xst[0][r].x;  // the shared reference
    float L = 0.0f;
#pragma unroll
    for (int x = 0; x < Tr::kWarps; ++x) L += sm.xst[x][r].y;
    // the sink joins the max (as in the merge and fwd_kernel)
    float Ms = M, inv = 1.0f / L;
    if (w.slot < 0 && P.sinks != nullptr) {
      const float sink2 = P.sinks[hk * G + r % G] * kLog2e;
      Ms = fmaxf(M, sink2);
      const float f = fast_exp2(M - Ms);
      const float den = L * f + fast_exp2(sink2 - Ms);
      inv = f / den;
      L = den;
    }
    sm.row_st[r] = make_float4(M, L, Ms, inv);
  }
  // the warp's columns of each row, less the u8 zero-point term of all warps, -> red
#pragma unroll
  for (int mt = 0; mt < RT; ++mt) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int r = mt * 16 + lane / 4 + 8 * hf;
      float czr = 0.0f;
      if constexpr (kU8) {
#pragma unroll
        for (int x = 0; x < Tr::kWarps; ++x) czr += sm.xst[x][r].z;
      }
#pragma unroll
      for (int n = 0; n < kN3; ++n) {
        const int c = o_col<kU8>(warp * kN3 + n, lane);
        sm.u.red[r][c] = o[mt][n][2 * hf] - czr;
        sm.u.red[r][c + (kU8 ? 2 : 1)] = o[mt][n][2 * hf + 1] - czr;
      }
    }
  }
  __syncthreads();
  for (int idx = tid; idx < rows * (D / 4); idx += Tr::kThreads) {
    const int r = idx / (D / 4), c = (idx % (D / 4)) * 4;
    const float4 st = sm.row_st[r];
    const float4 acc = *reinterpret_cast<const float4*>(&sm.u.red[r][c]);
    const int h = hk * G + r % G;
    const int64_t token = tok0 + w.t0 + r / G;
    if (w.slot < 0) {
      const float inv = st.w;
      if (P.row_stats != nullptr && c == 0)
        *reinterpret_cast<float2*>(P.row_stats + (token * P.H + h) * 2) = make_float2(st.z, st.y);
      store_io4(P.out, token * P.H * D + static_cast<int64_t>(h) * D + c, P.io_dtype,
                make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv));
    } else {
      const int64_t slot = (w.slot + static_cast<int64_t>(hk) * w.num_parts) * P.slot_rows + r;
      *reinterpret_cast<float4*>(P.ws_o + slot * D + c) = acc;
      if (c == 0) *reinterpret_cast<float2*>(P.ws_ml + slot * 2) = make_float2(st.x, st.y);
    }
  }
}

}  // namespace cuda
}  // namespace pagedattn
