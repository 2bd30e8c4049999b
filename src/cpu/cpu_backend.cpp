// The cpu backend: the GPU's algorithm on cores.
//
// A sequence's new tokens are cut into chunks of at most kMaxRows / G tokens (the chunk's T*G query
// rows share every K/V row read); each chunk's key range [window start of its first token, causal limit
// of its last) is cut into partitions, so that the work items (chunk, kv head, partition) keep every
// thread busy. An item loads its query rows once (f32), streams its keys in tiles of kTile rows
// gathered through the block table and converted to f32 once for all rows (u8: min + code * scale), or
// for chunks of 4-12 rows read straight from the cache rows (cpu::scores_direct), computes S = Q K^T
// (bf16 queries on a bf16 cache: vdpbf16ps on the cache rows, cpu::scores_bf16dot; chunks of 16+ rows on
// AMX-BF16 tiles where the CPU has them, cpu::amx_scores, and P V there too), masks, the online
// softmax (log2 units) and O += P V (tile.h, vectorised and dispatched by ISA), and leaves (m, l, O) as
// a partial, or the final row when the chunk has one partition. Partials merge in partition order (sinks
// join there). Scores, when asked for, are recomputed per key tile against the rows' final (m, l).
// OpenMP threads; no allocation in run().
// Options::cpu_reference (or PAGEDATTN_CPU_ORACLE=1) runs the oracle instead: the reference of the tests.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "common/numeric.h"
#include "core/plan_impl.h"
#include "core/tensor_io.h"
#include "cpu/oracle.h"
#include "cpu/tile.h"

namespace pagedattn {
namespace detail {

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kMaxRows = 64;   // query rows per chunk (T*G); a longer sequence is cut into chunks
constexpr int kTile = 32;      // keys per tile
constexpr int kMinPart = 512;  // smallest partition (keys)
static_assert(kTile == cpu::kAmxTileKeys, "a key tile is one AMX key tile");
// Chunks of this many rows or more take the AMX tiles where the CPU has them (cpu::has_amx), before the
// decode without tiles: f16 caches from 16 rows (two bf16 parts on both sides of S and P V: 12 rows were
// level with the rows without tiles), one-part caches (bf16, fp8, u8) from 8 (at 32k, 8 / 12 rows: u8 0.78
// / 0.60x the time, fp8 1.00 / 0.65x, bf16 0.96 / 0.78x; 4 rows 1.3-1.6x slower: run cpu-amx, amxmin.txt)
inline int amx_min_rows(cpu::RowType t) { return t == cpu::RowType::f16 ? 16 : 8; }
// Options::deterministic on the cpu backend: each row's result depends only on its own keys, so a chain
// verify's row equals the decode of the same prefix and a sequence's rows do not depend on the batch:
// partitions at absolute multiples of invariant_part() keys, tiles on the absolute kTile grid and always
// kTile keys wide (keys outside the item zero-filled and masked), rows padded to a multiple of 4 (the S
// and P V kernels' register blocks: every (row, key) on the same instruction sequence). Where the AMX
// tiles run (has_amx, f16 / bf16 queries) every chunk of the mode takes them, decodes too: a tile's
// column (S^T) or row (P V) sums only its own row's operands, so a row's bits do not depend on the rows
// beside it. Against the rows without tiles for every chunk this took T = 3-8 from 1.01-2.26x the
// default's time to 0.87-1.01x (T = 2 0.95-1.23x) and T = 1 from 0.99-1.07x to 1.16-1.62x, the decodes'
// conversion of K and V into bf16 parts (bench/NOTES.md, run cpu-invamx).
constexpr int kInvariantPart = 2048;
// The invariant partition: the largest of 2048, 4096 and 8192 keys that still gives every thread two
// items at 8k keys (Hk x 8192 / part >= 2 x threads). It follows the model (Hk) and the machine's
// threads, which a verify and its decodes share, never the batch. Fewer, longer partitions save each
// item's cold first tile and the merge: 8192 against 2048 took f16 32k T = 1 / 2 0.90 / 0.94x and 8k
// T = 2 0.83x the time on 2 threads at Hk = 4 (bench/NOTES.md, run cpu-ipart).
inline int invariant_part(int hk, int threads) {
  int part = kInvariantPart;
  while (part < 4 * kInvariantPart && static_cast<int64_t>(hk) * 8192 / (2 * part) >= 2 * threads) part *= 2;
  return part;
}
static_assert(kTile % 4 == 0, "the invariant mode's tiles have no tail keys (direct path and tiles agree)");

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

int max_threads() {
#if defined(_OPENMP)
  return omp_get_max_threads();
#else
  return 1;
#endif
}

struct Chunk {
  int seq, t0, nt;  // tokens [t0, t0 + nt) of sequence seq
  int lo, hi;       // keys [lo, hi): the first token's window start, the last token's causal limit
  int parts, part;  // partitions of [lo, hi) at absolute multiples of `part` keys
  int64_t slot;     // first partial slot (parts > 1), per kv head: slot + hk * parts + p
};

struct Item {
  int chunk, hk, p;
  int kb, ke;  // keys [kb, ke)
};

class CpuPlan final : public PlanImpl {
 public:
  CpuPlan(const Params& p, const Options& opt) : planned_(p) {
    reference_ = opt.cpu_reference || env_int("PAGEDATTN_CPU_ORACLE", 0) != 0;
    if (reference_) return;
    threads_ = opt.num_threads > 0 ? opt.num_threads : env_int("PAGEDATTN_CPU_THREADS", max_threads());
    if (threads_ < 1) threads_ = max_threads();  // PAGEDATTN_CPU_THREADS=0 or not a number: all cores
    threads_ = std::max(1, threads_);
    invariant_ = opt.deterministic;
    num_seqs_ = static_cast<int>(p.past_lens.shape[0]);
    H_ = p.num_heads;
    Hk_ = static_cast<int>(p.cache.num_kv_heads());
    G_ = H_ / Hk_;
    D_ = static_cast<int>(p.cache.head_size());
    Dv_ = static_cast<int>(p.cache.value_head_size());
    const int32_t* past = p.past_lens.ptr<const int32_t>();
    const int32_t* sb = p.subsequence_begins.ptr<const int32_t>();
    past_.assign(past, past + num_seqs_);
    begins_.assign(sb, sb + num_seqs_ + 1);
    // the first new token's position: past_len, or (prefix_only) new_token_positions[s]
    qpos0_ = past_;
    if (p.new_token_positions.present())
      qpos0_.assign(p.new_token_positions.ptr<const int32_t>(), p.new_token_positions.ptr<const int32_t>() + num_seqs_);

    // --- chunks and partitions -----------------------------------------------------------------------
    if (G_ > kMaxRows)  // a chunk holds the G rows of at least one token: kMaxRows at most (the scratch)
      throw UnsupportedError("group size H/Hk = " + std::to_string(G_) + ": the cpu backend supports at most " +
                             std::to_string(kMaxRows));
    const int per_chunk = std::max(1, kMaxRows / G_);
    for (int s = 0; s < num_seqs_; ++s) {
      const int T = begins_[s + 1] - begins_[s];
      for (int t0 = 0; t0 < T; t0 += per_chunk) {
        Chunk c;
        c.seq = s;
        c.t0 = t0;
        c.nt = std::min(per_chunk, T - t0);
        c.hi = p.prefix_only ? past_[s] : past_[s] + t0 + c.nt;  // prefix_only: every cached key
        c.lo = p.sliding_window > 0 ? std::max(0, qpos0_[s] + t0 - p.sliding_window + 1) : 0;
        if (c.lo > c.hi) c.lo = c.hi;  // (prefix_only) a window that ends before the shard: no key
        chunks_.push_back(c);
      }
    }
    // partition size: whole ranges when the chunks alone give every thread 4 items; else the smallest
    // multiple of kMinPart that gives ~4 items per thread (Options::partition_tokens forces it)
    int64_t keys = 0;
    for (const Chunk& c : chunks_) keys += c.hi - c.lo;
    int part = 1 << 30;
    if (opt.partition_tokens > 0) {
      part = opt.partition_tokens;
    } else if (invariant_) {  // fixed absolute partitions (a multiple of kTile: tiles stay on the grid)
      part = invariant_part(Hk_, threads_);
    } else if (static_cast<int64_t>(chunks_.size()) * Hk_ < 4 * threads_ && keys > 0) {
      const int64_t want = 4 * static_cast<int64_t>(threads_) / Hk_ + 1;
      part = static_cast<int>(std::max<int64_t>(kMinPart, (keys / want + kMinPart - 1) / kMinPart * kMinPart));
    }
    int64_t slots = 0;
    for (Chunk& c : chunks_) {
      c.part = part;
      const int p0 = c.lo / part, p1 = c.hi > c.lo ? (c.hi - 1) / part + 1 : p0 + 1;
      c.parts = p1 - p0;
      c.slot = c.parts > 1 ? slots : -1;
      if (c.parts > 1) slots += static_cast<int64_t>(c.parts) * Hk_;
      const int ci = static_cast<int>(&c - chunks_.data());
      for (int hk = 0; hk < Hk_; ++hk)
        for (int q = p0; q < p1; ++q)
          items_.push_back(Item{ci, hk, q - p0, static_cast<int>(std::max<int64_t>(c.lo, int64_t{q} * part)),
                                static_cast<int>(std::min<int64_t>(c.hi, (int64_t{q} + 1) * part))});
    }
    // longest items first (dynamic schedule over a sorted list: the tail is short items)
    std::stable_sort(items_.begin(), items_.end(),
                     [](const Item& a, const Item& b) { return a.ke - a.kb > b.ke - b.kb; });
    for (const Chunk& c : chunks_)
      if (c.parts > 1) split_.push_back(static_cast<int>(&c - chunks_.data()));
    if (p.scores.present()) {  // key tiles of every sequence's context, and each sequence's offset
      score_base_.assign(num_seqs_ + 1, 0);
      for (int s = 0; s < num_seqs_; ++s) {
        const int ctx = past_[s] + begins_[s + 1] - begins_[s];
        score_base_[s + 1] = score_base_[s] + ctx;
        for (int j0 = 0; j0 < ctx; j0 += kTile) score_tiles_.emplace_back(s, j0);
      }
    }
    partials_.assign(static_cast<size_t>(slots) * kMaxRows * (Dv_ + 2), 0.0f);
    row_stats_.assign(static_cast<size_t>(begins_[num_seqs_]) * H_ * 2, 0.0f);
    // per-thread scratch: Q rows, K and V tiles, S/P, O, row state
    // (the V tile's room holds the scores pass's query row too: max(D, Dv) wide)
    const size_t dmax = static_cast<size_t>(std::max(D_, Dv_));
    scratch_stride_ = static_cast<size_t>(kMaxRows) * D_ + kTile * D_ + kTile * dmax + 2 * kMaxRows * kTile +
                      static_cast<size_t>(kMaxRows) * dmax + 3 * kMaxRows + kTile * dmax;
    // each thread's scratch starts on a 4 KB boundary: from the vector's 16-byte alignment every 64-byte
    // row access of the tile kernels could split two cache lines, by the heap's state (bf16 T = 8 at 8k:
    // 28-30 ms aligned, 35-39 ms as it fell; bench/NOTES.md, "The cpu backend's scratch alignment")
    scratch_stride_ = (scratch_stride_ + 1023) / 1024 * 1024;
    // chunks of amx_min_rows or more on AMX-BF16 where the CPU has it (tile.h), every chunk in the
    // invariant mode (its decodes take the verifies' arithmetic). Its operands after the f32 scratch.
    // f32 queries keep the f32 tiles: their tolerance (1e-5) is below what the tiles' bf16 parts of P keep.
    amx_ok_ = p.query.dtype != DType::f32 && cpu::has_amx(row_type(p.cache.precision()), D_, Dv_);
    amx_offset_ = scratch_stride_;
    if (amx_ok_) scratch_stride_ += (cpu::amx_bytes(kMaxRows, D_, Dv_) + 4095) / 4096 * 1024;
    // chunks of 4-12 rows (u8: 4) without the f32 tiles (tile.h). The invariant mode without AMX takes them too: on its
    // kTile-wide tiles (no tail keys) they run the tiles' arithmetic bit for bit (the same values: fp8
    // values / 2^8, u8 codes - 128, folds on both paths; tests/test_numeric.cpp DirectDecodeMatchesTheTiles),
    // keys outside the item reading a zero row.
    direct_ok_ = cpu::has_direct(row_type(p.cache.precision()), 4, D_, Dv_);
    // bf16 queries on a bf16 cache, every chunk: S by vdpbf16ps on the query's own bits and the cache rows
    // (cpu::scores_bf16dot), the scale applied to S; P V as before (tiles, or the rows for 4-12 rows). T = 2-8
    // 0.78-0.80x the f32 FMAs' time (run cpu-bf16dot). The invariant mode's chunks are whole 4 x 4 blocks
    // (rows padded to 4, tiles 32 keys wide), so every (row, key) gets the same instructions on its
    // decodes and its verifies.
    bf16dot_ok_ = p.query.dtype == DType::bf16 && p.cache.precision() == KVPrecision::bf16 && cpu::has_bf16dot(D_);
    // (u8: code 128, the centred zero)
    zero_row_.assign(static_cast<size_t>(std::max(D_, Dv_)) * 2, p.cache.precision() == KVPrecision::u8 ? 0x80 : 0);
    scratch_.assign(scratch_stride_ * threads_ + 1024, 0.0f);
  }

  void run(const Params& p) override {
    check_same_signature(planned_, p);
    validate(p);  // cheap on the host
    if (reference_) {
      oracle::forward(p);
      return;
    }
    write_in(p);
    const float scale = p.scale && *p.scale != 0.0f ? *p.scale : 1.0f / std::sqrt(static_cast<float>(D_));
    const int n_items = static_cast<int>(items_.size());
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads_)
    for (int i = 0; i < n_items; ++i) attend(p, items_[i], scale, thread_scratch());
    merge(p);
    if (p.scores.present()) score(p, scale);
  }

  Backend backend() const override { return Backend::cpu; }
  std::string describe() const override {
    std::ostringstream os;
    os << "pagedattn plan: backend=cpu" << (reference_ ? " (oracle)" : "")
       << " num_seqs=" << planned_.past_lens.numel() << " num_tokens=" << planned_.query.shape[0];
    if (!reference_)
      os << " threads=" << threads_ << " isa=" << cpu::isa_name() << (amx_ok_ ? "+amx" : "")
         << " chunks=" << chunks_.size() << " items=" << items_.size()
         << " partition=" << (chunks_.empty() ? 0 : chunks_[0].part) << " tile=" << kTile;
    return os.str();
  }
  std::size_t workspace_bytes() const override {
    return (partials_.size() + row_stats_.size() + scratch_.size()) * sizeof(float);
  }
  PlanInfo info() const override {
    PlanInfo i;
    i.backend = Backend::cpu;
    i.reference = reference_;
    if (!reference_) {
      i.threads = threads_;
      i.cpu_isa = cpu::isa_name();
      i.partition_tokens = chunks_.empty() ? 0 : chunks_[0].part;
      i.work_items = static_cast<int64_t>(items_.size());
    }
    i.workspace_bytes = workspace_bytes();
    return i;
  }

 private:
  float* thread_scratch() {
#if defined(_OPENMP)
    const int t = omp_get_thread_num();
#else
    const int t = 0;
#endif
    const uintptr_t base = (reinterpret_cast<uintptr_t>(scratch_.data()) + 4095) & ~uintptr_t{4095};
    return reinterpret_cast<float*>(base) + scratch_stride_ * static_cast<size_t>(t);
  }

  // Cache row (block, kv head, slot) of position pos of sequence s, as an element index of D-rows.
  int64_t cache_row(const Params& p, int s, int pos, int hk) const {
    const int bs = static_cast<int>(p.cache.block_size());
    const int32_t* table = p.block_indices.ptr<const int32_t>() + p.block_indices_begins.ptr<const int32_t>()[s];
    return (static_cast<int64_t>(table[pos / bs]) * Hk_ + hk) * bs + pos % bs;
  }

  // The op's write-in: the new tokens' key and value rows into the cache (u8 and fp8: quantised by the
  // rules of params.h, the same code as the CUDA kernels and the oracle).
  void write_in(const Params& p) {
    if (!p.key.present()) return;
    const KVPrecision kv = p.cache.precision();
    const int n = begins_[num_seqs_] * Hk_;
#pragma omp parallel for num_threads(threads_)
    for (int idx = 0; idx < n; ++idx) {
      const int tok = idx / Hk_, hk = idx % Hk_;
      const int s = static_cast<int>(std::upper_bound(begins_.begin(), begins_.end(), tok) - begins_.begin()) - 1;
      const int64_t row = cache_row(p, s, past_[s] + tok - begins_[s], hk);
      for (int which = 0; which < 2; ++which) {
        const TensorView& src = which ? p.value : p.key;
        const TensorView& dst = which ? p.cache.value : p.cache.key;
        const int dd = which ? Dv_ : D_;  // the value head size may differ
        const int64_t base = (static_cast<int64_t>(tok) * Hk_ + hk) * dd;
        if (kv == KVPrecision::u8) {
          float mn = load_f(src, base), mx = mn;
          for (int d = 1; d < dd; ++d) {
            const float x = load_f(src, base + d);
            mn = std::fmin(mn, x);
            mx = std::fmax(mx, x);
          }
          const num::U8Params qp = num::u8_params(mn, mx);
          uint8_t* codes = dst.ptr<uint8_t>() + row * dd;
          for (int d = 0; d < dd; ++d) codes[d] = num::u8_quantize(load_f(src, base + d), qp);
          (which ? p.cache.value_scale : p.cache.key_scale).ptr<uint16_t>()[row] = qp.scale_bits;
          (which ? p.cache.value_min : p.cache.key_min).ptr<uint16_t>()[row] = qp.min_bits;
        } else if (kv == KVPrecision::fp8) {
          const float sc = fp8_scale(which ? p.cache.value_scale : p.cache.key_scale, hk);
          uint8_t* codes = dst.ptr<uint8_t>() + row * dd;
          for (int d = 0; d < dd; ++d) codes[d] = num::f32_to_e4m3_bits(load_f(src, base + d) / sc);
        } else {
          uint16_t* out = dst.ptr<uint16_t>() + row * dd;
          for (int d = 0; d < dd; ++d) {
            const float x = load_f(src, base + d);
            out[d] = kv == KVPrecision::f16 ? num::f32_to_f16_bits(x) : num::f32_to_bf16_bits(x);
          }
        }
      }
    }
  }

  static cpu::RowType row_type(KVPrecision kv) {
    return kv == KVPrecision::f16    ? cpu::RowType::f16
           : kv == KVPrecision::bf16 ? cpu::RowType::bf16
           : kv == KVPrecision::fp8  ? cpu::RowType::fp8
                                     : cpu::RowType::u8;
  }

  // fp8 caches are read as their values / 2^8 (exact in f16 and f32) on every path, tiles or not: 2^8 x
  // the key scale goes into q, 2^8 x the value scale into o at the end (the scales are per kv head or per
  // cache, so nothing per key). One arithmetic for the direct path and the tiles keeps the invariant
  // mode's rows equal whichever path a chunk takes.
  static constexpr float kFp8Fold = 256.0f;

  // Keys [j0, j0 + n) of item's sequence and kv head -> f32 rows of `dst` (K or V); u8 `centred`: the
  // codes - 128 (attend's fold), else the values.
  void load_tile(const Params& p, int s, int hk, int j0, int n, bool value, float* dst, bool centred = false) const {
    const KVPrecision kv = p.cache.precision();
    const TensorView& data = value ? p.cache.value : p.cache.key;
    const cpu::RowType rt = row_type(kv);
    const int64_t esize = dtype_size(data.dtype), dd = value ? Dv_ : D_;
    for (int k = 0; k < n; ++k) {
      const int64_t row = cache_row(p, s, j0 + k, hk);
      float sc = 1.0f / kFp8Fold, mn = 0.0f;  // (fp8: the values / 2^8, unscaled)
      if (kv == KVPrecision::u8 && centred) {
        sc = 1.0f, mn = -128.0f;  // (exact)
      } else if (kv == KVPrecision::u8) {
        sc = num::f16_bits_to_f32((value ? p.cache.value_scale : p.cache.key_scale).ptr<const uint16_t>()[row]);
        mn = num::f16_bits_to_f32((value ? p.cache.value_min : p.cache.key_min).ptr<const uint16_t>()[row]);
      }
      cpu::load_row(dst + static_cast<int64_t>(k) * dd, static_cast<const char*>(data.data) + row * dd * esize, rt, dd,
                    sc, mn);
    }
  }

  // The next tile's rows (keys [j0, j0 + n): K, then V) into `pf`, its lines spread over the ticks of a
  // tile of `rows` x `keys`. The next tile's rows are read while the current one is computed (block
  // transitions defeat the hardware prefetcher); prefetched with each row load instead, the prefetches
  // stalled the loads and the arithmetic ran with the memory idle: f16 32k T = 1 took the time of the
  // loads alone plus the arithmetic alone (bench/NOTES.md, "The cpu backend's prefetch inside the arithmetic").
  void plan_prefetch(cpu::Prefetch& pf, const Params& p, int s, int hk, int j0, int n, int rows, int keys, bool direct,
                     bool amx) const {
    static_assert(2 * kTile <= cpu::Prefetch::kRows, "a tile's K and V rows fit the prefetch list");
    pf.clear();
    const int64_t es = static_cast<int64_t>(dtype_size(p.cache.key.dtype)), kbytes = D_ * es, vbytes = Dv_ * es;
    int64_t rows_at[kTile];
    for (int k = 0; k < n; ++k) rows_at[k] = cache_row(p, s, j0 + k, hk);
    for (int which = 0; which < 2; ++which)
      for (int k = 0; k < n; ++k) {
        const int64_t rb = which ? vbytes : kbytes;
        pf.add(static_cast<const char*>(which ? p.cache.value.data : p.cache.key.data) + rows_at[k] * rb,
               static_cast<int>(rb));
      }
    const int ticks =
        std::max(1, amx ? cpu::amx_ticks(rows, keys, D_, Dv_) : cpu::tile_ticks(rows, keys, D_, Dv_, direct));
    pf.per = std::max(1, (pf.lines() + ticks - 1) / ticks);
  }

  void attend(const Params& p, const Item& it, float scale, float* scr) {
    const Chunk& c = chunks_[it.chunk];
    const int s = c.seq, past = past_[s], T = begins_[s + 1] - begins_[s], qbase = qpos0_[s];
    const int rows = c.nt * G_;
    const size_t dmax = static_cast<size_t>(std::max(D_, Dv_));
    float* q = scr;                                 // [rows][D]
    float* kt = q + static_cast<size_t>(kMaxRows) * D_;   // [kTile][D]
    float* vt = kt + kTile * D_;                    // [kTile][Dv]
    float* sc = vt + kTile * dmax;                  // [rows][kTile] scores, then P
    float* o = sc + 2 * kMaxRows * kTile;           // [rows][Dv]
    float* m = o + static_cast<size_t>(kMaxRows) * dmax;   // [rows]
    float* l = m + kMaxRows;
    // invariant (Options::deterministic): rows padded to a multiple of 4 through the S and P V kernels
    const int rows_k = invariant_ ? (rows + 3) / 4 * 4 : rows;
    // 4, 8 or 12 rows of an f16, bf16 or fp8 cache, 4 of a u8 cache: S and P V straight from the cache rows
    // (cpu::scores_direct). u8 rows come as code - 128 there (the GPU kernels' centring), and so do the
    // invariant mode's u8 tiles (one arithmetic for both paths, as fp8's fold): S = scale * (q . (codes -
    // 128)) + (min + 128 scale) * sum(q) per key, and P V takes p * scale per key plus sum(p * (min + 128
    // scale)) per row, kept apart in `ob` and added to O at the end. The default mode's u8 tiles apply
    // scale and minimum per element instead (the fold's per-key steps cost those rows 1.06-1.19x).
    const cpu::RowType rt = row_type(p.cache.precision());
    const bool amx = amx_ok_ && (invariant_ || rows_k >= amx_min_rows(rt)),
               direct = !amx && direct_ok_ && cpu::has_direct(rt, rows_k, D_, Dv_), fold = rt == cpu::RowType::fp8,
               affine = rt == cpu::RowType::u8 && (direct || invariant_ || amx), bf16dot = bf16dot_ok_ && !amx;
    uint16_t* qh = reinterpret_cast<uint16_t*>(kt);  // bf16dot: the query rows' bits (K needs no tile)
    float qsum[kMaxRows], ob[kMaxRows], ks[kTile], km[kTile], vs[kTile], vm[kTile];
    uint16_t meta[4][kTile];  // u8: the tile's f16 scales and minima (K, then V)
    const float kfold = fold ? fp8_scale(p.cache.key_scale, it.hk) : 1.0f;
    // query rows: row r = token t0 + r / G, head hk * G + r % G; scaled to log2 units
    const float qs = scale * kLog2e;
    for (int r = 0; r < rows; ++r) {
      const int64_t base = static_cast<int64_t>(begins_[s] + c.t0 + r / G_) * H_ * D_ +
                           static_cast<int64_t>(it.hk * G_ + r % G_) * D_;
      float* qr = q + static_cast<size_t>(r) * D_;
      if (bf16dot) {  // (S's only reader of the query)
        std::memcpy(qh + static_cast<size_t>(r) * D_, p.query.ptr<const uint16_t>() + base, sizeof(uint16_t) * D_);
      } else {
        // the query's own values (amx: into o, which amx_setup packs them from; o is free until then)
        float* raw = amx ? o + static_cast<size_t>(r) * D_ : qr;
        if (p.query.dtype == DType::f32)
          std::memcpy(raw, p.query.ptr<const float>() + base, sizeof(float) * D_);
        else
          cpu::load_row(raw, p.query.ptr<const uint16_t>() + base,
                        p.query.dtype == DType::f16 ? cpu::RowType::f16 : cpu::RowType::bf16, D_, 1.0f, 0.0f);
        if (!amx || affine) {  // (the AMX tiles read only raw; u8's fold sums the scaled rows)
          for (int d = 0; d < D_; ++d) qr[d] = raw[d] * qs;
          if (fold)
            for (int d = 0; d < D_; ++d) qr[d] = qr[d] * kFp8Fold * kfold;
        }
      }
      m[r] = -INFINITY;
      l[r] = 0.0f;
    }
    if (bf16dot)
      std::fill(qh + static_cast<size_t>(rows) * D_, qh + static_cast<size_t>(rows_k) * D_, uint16_t{0});
    else
      std::fill(q + static_cast<size_t>(rows) * D_, q + static_cast<size_t>(rows_k) * D_, 0.0f);
    if (affine)
      for (int r = 0; r < rows_k; ++r) {
        float a = 0.0f;
        for (int d = 0; d < D_; ++d) a += q[static_cast<size_t>(r) * D_ + d];
        qsum[r] = a;
        ob[r] = 0.0f;
      }
    cpu::Amx ax;
    if (amx) ax = cpu::amx_setup(scr + amx_offset_, rt, rows_k, D_, Dv_, o, p.query.dtype == DType::bf16 ? 1 : 2);
    std::fill(o, o + static_cast<size_t>(amx ? ax.rows_pad : rows_k) * Dv_, 0.0f);
    if (amx) cpu::amx_begin();
    const float* alibi = p.alibi_slopes.present() ? p.alibi_slopes.ptr<const float>() : nullptr;
    const uint8_t* qq = p.qq_bias.present() ? p.qq_bias.ptr<const uint8_t>() + p.qq_bias_begins.ptr<const int32_t>()[s] : nullptr;
    const void* krow[kTile];
    const void* vrow[kTile];
    // Tiles of kTile keys from the item's first key; invariant: on the absolute kTile grid and always
    // kTile wide, the keys [a, b) of the item loaded and the rest of the tile zero (and masked below)
    cpu::Prefetch pf;
    for (int j0 = invariant_ ? it.kb / kTile * kTile : it.kb; j0 < it.ke; j0 += kTile) {
      const int a = std::max(j0, it.kb), b = std::min(j0 + kTile, it.ke);
      const int n = invariant_ ? kTile : b - j0;
      pf.drain();  // what the previous tile's ticks left of this one
      plan_prefetch(pf, p, s, it.hk, b, b < it.ke ? std::min(kTile, it.ke - b) : 0, rows_k, n, direct, amx);
      auto load = [&](bool value, float* dst) {
        const size_t dd = static_cast<size_t>(value ? Dv_ : D_);
        if (a > j0) std::fill(dst, dst + static_cast<size_t>(a - j0) * dd, 0.0f);
        load_tile(p, s, it.hk, a, b - a, value, dst + static_cast<size_t>(a - j0) * dd, affine);
        if (j0 + n > b) std::fill(dst + static_cast<size_t>(b - j0) * dd, dst + static_cast<size_t>(n) * dd, 0.0f);
      };
      // the rows' addresses and u8 factors; an invariant tile's keys outside [a, b) read zeros (u8: code
      // 128) and take factors 0
      if (direct || affine || bf16dot || amx) {
        const int64_t es = static_cast<int64_t>(dtype_size(p.cache.key.dtype));
        for (int k = 0; k < n; ++k) {
          if (j0 + k < a || j0 + k >= b) {
            krow[k] = vrow[k] = zero_row_.data();
            meta[0][k] = meta[1][k] = meta[2][k] = meta[3][k] = 0;
            continue;
          }
          const int64_t row = cache_row(p, s, j0 + k, it.hk);
          krow[k] = static_cast<const char*>(p.cache.key.data) + row * D_ * es;
          vrow[k] = static_cast<const char*>(p.cache.value.data) + row * Dv_ * es;
          if (affine) {
            meta[0][k] = p.cache.key_scale.ptr<const uint16_t>()[row];
            meta[1][k] = p.cache.key_min.ptr<const uint16_t>()[row];
            meta[2][k] = p.cache.value_scale.ptr<const uint16_t>()[row];
            meta[3][k] = p.cache.value_min.ptr<const uint16_t>()[row];
          }
        }
        if (affine) {  // the f16 factors converted 32 at a time; zeros stay zeros
          float* f[4] = {ks, km, vs, vm};
          for (int i = 0; i < 4; ++i) cpu::load_row(f[i], meta[i], cpu::RowType::f16, n, 1.0f, 0.0f);
          for (int k = 0; k < n; ++k) {
            km[k] += 128.0f * ks[k];
            vm[k] += 128.0f * vs[k];
          }
        }
      }
      if (amx) {  // S of the query's own values: the scale (and fp8's fold) on the way out
        cpu::amx_scores(ax, sc, kTile, krow, n, fold ? qs * kFp8Fold * kfold : qs, &pf);
      } else if (bf16dot) {
        cpu::scores_bf16dot(sc, kTile, qh, rows_k, krow, n, D_, &pf);
        for (int r = 0; r < rows_k; ++r)
          for (int k = 0; k < n; ++k) sc[r * kTile + k] *= qs;
      } else if (direct) {
        cpu::scores_direct(sc, kTile, q, rows_k, krow, rt, n, D_, &pf);
      } else {
        load(false, kt);
        cpu::scores(sc, kTile, q, rows_k, kt, n, D_, &pf);
      }
      if (affine)
        for (int r = 0; r < rows_k; ++r)
          for (int k = 0; k < n; ++k) sc[r * kTile + k] = sc[r * kTile + k] * ks[k] + km[k] * qsum[r];
      // masks (causal, window, tree), ALiBi, online softmax. An interior tile (every key visible to
      // every row: before the first row's causal limit, inside the last row's window, in the cached
      // prefix when there is a tree) without ALiBi needs only the row max.
      const bool interior = alibi == nullptr && a == j0 && b == j0 + n && j0 + n <= qbase + c.t0 + 1 &&
                            (p.sliding_window == 0 || j0 >= qbase + c.t0 + c.nt - p.sliding_window) &&
                            (qq == nullptr || j0 + n <= past);
      bool any = false;
      for (int r = 0; r < rows; ++r) {
        const int t = c.t0 + r / G_, qpos = qbase + t;
        const int lo = p.sliding_window > 0 ? qpos - p.sliding_window + 1 : 0;
        const float slope = alibi ? alibi[it.hk * G_ + r % G_] * kLog2e : 0.0f;
        float* sr = sc + static_cast<size_t>(r) * kTile;
        float mx = -INFINITY;
        if (interior) {
          mx = cpu::row_max(sr, n);
        } else {
          for (int k = 0; k < n; ++k) {
            const int j = j0 + k;
            const bool vis = j >= a && j < b && j <= qpos && j >= lo &&
                             (qq == nullptr || j < past || qq[static_cast<int64_t>(t) * T + (j - past)] != 0);
            sr[k] = vis ? sr[k] + slope * static_cast<float>(j - qpos) : -INFINITY;
            mx = std::max(mx, sr[k]);
          }
        }
        if (mx == -INFINITY) {  // nothing visible in this tile for this row
          std::fill(sr, sr + n, 0.0f);
          continue;
        }
        any = true;
        const float m_new = std::max(m[r], mx);
        if (m_new != m[r]) {
          const float a = m[r] == -INFINITY ? 0.0f : std::exp2(m[r] - m_new);
          cpu::scale_row(o + static_cast<size_t>(r) * Dv_, a, Dv_);
          if (affine) ob[r] *= a;
          l[r] *= a;
          m[r] = m_new;
        }
        l[r] += cpu::exp2_sum(sr, sr, n, m[r]);
      }
      if (!any) continue;
      if (affine)
        for (int r = 0; r < rows_k; ++r) {  // (the sum in cpu::kSumLanes lanes, tile.h)
          float* sr = sc + r * kTile;
          float lanes[cpu::kSumLanes] = {};
          const int nl = n - n % cpu::kSumLanes;
          for (int k0 = 0; k0 < nl; k0 += cpu::kSumLanes) {
#pragma omp simd
            for (int l = 0; l < cpu::kSumLanes; ++l) {
              lanes[l] += sr[k0 + l] * vm[k0 + l];
              sr[k0 + l] *= vs[k0 + l];
            }
          }
          for (int k = nl; k < n; ++k) {
            lanes[k - nl] += sr[k] * vm[k];
            sr[k] *= vs[k];
          }
          ob[r] += cpu::lane_sum16(lanes);
        }
      if (amx) {
        cpu::amx_accumulate(ax, o, sc, kTile, vrow, n, &pf);
      } else if (direct) {
        cpu::accumulate_direct(o, sc, kTile, rows_k, vrow, rt, n, Dv_, &pf);
      } else {
        load(true, vt);
        cpu::accumulate(o, sc, kTile, rows_k, vt, n, Dv_, &pf);
      }
    }
    if (amx) cpu::amx_end();
    if (affine)
      for (int r = 0; r < rows; ++r)
        for (int d = 0; d < Dv_; ++d) o[static_cast<size_t>(r) * Dv_ + d] += ob[r];
    if (fold) {  // o's rows times 2^8 (exact), then times the value scale
      const float vfold = fp8_scale(p.cache.value_scale, it.hk);
      for (int r = 0; r < rows; ++r) {
        cpu::scale_row(o + static_cast<size_t>(r) * Dv_, kFp8Fold, Dv_);
        cpu::scale_row(o + static_cast<size_t>(r) * Dv_, vfold, Dv_);
      }
    }
    if (c.parts > 1) {  // partial: (m, l, O) per row
      float* dst = partials_.data() + static_cast<size_t>(c.slot + it.hk * c.parts + it.p) * kMaxRows * (Dv_ + 2);
      for (int r = 0; r < rows; ++r) {
        float* pr = dst + static_cast<size_t>(r) * (Dv_ + 2);
        pr[0] = m[r];
        pr[1] = l[r];
        std::memcpy(pr + 2, o + static_cast<size_t>(r) * Dv_, sizeof(float) * Dv_);
      }
    } else {
      for (int r = 0; r < rows; ++r) finish_row(p, c, it.hk, r, m[r], l[r], o + static_cast<size_t>(r) * Dv_);
    }
  }

  // The row's final output (sink joins the denominator), its log-sum-exp (Params::lse; m and l are in
  // log2 units) and its (m, l) for the scores.
  void finish_row(const Params& p, const Chunk& c, int hk, int r, float m, float l, float* o) {
    const int h = hk * G_ + r % G_;
    const int64_t tok = begins_[c.seq] + c.t0 + r / G_;
    if (p.sinks.present()) {
      const float sink = p.sinks.ptr<const float>()[h] * kLog2e;
      const float mn = std::max(m, sink);
      const float a = m == -INFINITY ? 0.0f : std::exp2(m - mn);
      l = l * a + std::exp2(sink - mn);
      cpu::scale_row(o, a, Dv_);
      m = mn;
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const int64_t base = tok * H_ * Dv_ + static_cast<int64_t>(h) * Dv_;
    for (int d = 0; d < Dv_; ++d) store_f(p.out, base + d, o[d] * inv);
    if (p.lse.present())
      p.lse.ptr<float>()[tok * H_ + h] = l > 0.0f ? (m + std::log2(l)) * kLn2 : -INFINITY;
    row_stats_[static_cast<size_t>(tok * H_ + h) * 2] = m;
    row_stats_[static_cast<size_t>(tok * H_ + h) * 2 + 1] = l;
  }

  // Partitions of each (chunk, kv head, row) combined in partition order.
  void merge(const Params& p) {
    const int n = static_cast<int>(split_.size()) * Hk_;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads_)
    for (int idx = 0; idx < n; ++idx) {
      const Chunk& c = chunks_[split_[idx / Hk_]];
      const int hk = idx % Hk_;
      float* o = thread_scratch();  // Dv floats
      const float* base = partials_.data() + static_cast<size_t>(c.slot + hk * c.parts) * kMaxRows * (Dv_ + 2);
      for (int r = 0; r < c.nt * G_; ++r) {
        float M = -INFINITY;
        for (int q = 0; q < c.parts; ++q) M = std::max(M, base[(static_cast<size_t>(q) * kMaxRows + r) * (Dv_ + 2)]);
        float L = 0.0f;
        std::fill(o, o + Dv_, 0.0f);
        for (int q = 0; q < c.parts; ++q) {
          const float* pr = base + (static_cast<size_t>(q) * kMaxRows + r) * (Dv_ + 2);
          if (pr[0] == -INFINITY) continue;
          const float a = std::exp2(pr[0] - M);
          L += pr[1] * a;
          for (int d = 0; d < Dv_; ++d) o[d] += pr[2 + d] * a;
        }
        finish_row(p, c, hk, r, M, L, o);
      }
    }
  }

  // scores[j] of each sequence: the weights of its last w new tokens summed over heads, recomputed per
  // key tile from the final row statistics (fixed order: kv head, token, head). S comes from the f32 tiles
  // here; a u8 decode's statistics came from the affine fold and bf16 queries' from vdpbf16ps
  // (cpu::scores_bf16dot), so their weights can differ from attend's in the last bits (the sum of a row's
  // weights 1 within roundings).
  void score(const Params& p, float scale) {
    const std::vector<std::pair<int, int>>& tiles = score_tiles_;
    const std::vector<int64_t>& base = score_base_;
    const float qs = scale * kLog2e;
    const int n_tiles = static_cast<int>(tiles.size());
#pragma omp parallel for schedule(dynamic, 4) num_threads(threads_)
    for (int ti = 0; ti < n_tiles; ++ti) {
      const int s = tiles[ti].first, j0 = tiles[ti].second, past = past_[s], T = begins_[s + 1] - begins_[s];
      const int n = std::min(kTile, past + T - j0);
      const int w = p.score_aggregation_window.present() ? p.score_aggregation_window.ptr<const int32_t>()[s] : 1;
      const int t_lo = w < 0 || w >= T ? 0 : T - w;
      const int lo_seq = p.sliding_window > 0 ? std::max(0, past - p.sliding_window + 1) : 0;
      float* scr = thread_scratch();
      float* kt = scr;
      float* qrow = kt + kTile * D_;
      float acc[kTile] = {};
      const float* alibi = p.alibi_slopes.present() ? p.alibi_slopes.ptr<const float>() : nullptr;
      const uint8_t* qq = p.qq_bias.present() ? p.qq_bias.ptr<const uint8_t>() + p.qq_bias_begins.ptr<const int32_t>()[s] : nullptr;
      const int first = std::max(j0, lo_seq);  // keys before the first token's window: never read
      if (first >= j0 + n) {
        for (int k = 0; k < n; ++k) p.scores.ptr<float>()[base[s] + j0 + k] = 0.0f;
        continue;
      }
      const bool fp8 = p.cache.precision() == KVPrecision::fp8;
      for (int hk = 0; hk < Hk_; ++hk) {
        const float kfold = fp8 ? fp8_scale(p.cache.key_scale, hk) : 1.0f;
        load_tile(p, s, hk, first, j0 + n - first, false, kt);
        for (int t = t_lo; t < T; ++t) {
          const int qpos = past + t;
          const int lo = p.sliding_window > 0 ? qpos - p.sliding_window + 1 : 0;
          for (int g = 0; g < G_; ++g) {
            const int h = hk * G_ + g;
            const int64_t qb = static_cast<int64_t>(begins_[s] + t) * H_ * D_ + static_cast<int64_t>(h) * D_;
            for (int d = 0; d < D_; ++d) qrow[d] = load_f(p.query, qb + d) * qs;
            if (fp8)  // (kFp8Fold, as attend's rows)
              for (int d = 0; d < D_; ++d) qrow[d] = qrow[d] * kFp8Fold * kfold;
            const float M = row_stats_[static_cast<size_t>((begins_[s] + t) * H_ + h) * 2];
            const float L = row_stats_[static_cast<size_t>((begins_[s] + t) * H_ + h) * 2 + 1];
            const float slope = alibi ? alibi[h] * kLog2e : 0.0f;
            float sv[kTile];
            cpu::scores(sv, kTile, qrow, 1, kt, j0 + n - first, D_);
            for (int k = first - j0; k < n; ++k) {
              const int j = j0 + k;
              const bool vis = j <= qpos && j >= lo && (qq == nullptr || j < past || qq[static_cast<int64_t>(t) * T + (j - past)] != 0);
              if (vis && L > 0.0f) acc[k] += std::exp2(sv[k - (first - j0)] + slope * static_cast<float>(j - qpos) - M) / L;
            }
          }
        }
      }
      for (int k = 0; k < n; ++k) p.scores.ptr<float>()[base[s] + j0 + k] = acc[k];
    }
  }

  Params planned_;
  bool reference_ = false;
  bool invariant_ = false;  // Options::deterministic: see invariant_part
  bool bf16dot_ok_ = false;  // see cpu::scores_bf16dot
  bool direct_ok_ = false;  // the kind and level allow chunks without f32 tiles (cpu::has_direct)
  bool amx_ok_ = false;     // the CPU, kind and head sizes allow AMX tiles (cpu::has_amx)
  size_t amx_offset_ = 0;   // where a thread's AMX operands start in its scratch (floats)
  std::vector<uint8_t> zero_row_;  // the direct path's rows outside an invariant tile's keys
  int threads_ = 1, num_seqs_ = 0, H_ = 0, Hk_ = 0, G_ = 1, D_ = 0, Dv_ = 0;  // D: queries, keys; Dv: values, out
  std::vector<int32_t> past_, begins_;
  std::vector<int32_t> qpos0_;  // each sequence's first new token's position (past_len, or new_token_positions)
  std::vector<Chunk> chunks_;
  std::vector<Item> items_;
  std::vector<int> split_;                          // chunks with more than one partition
  std::vector<std::pair<int, int>> score_tiles_;    // scores: (sequence, first key) of each key tile
  std::vector<int64_t> score_base_;                 // scores: offset of each sequence
  std::vector<float> partials_, row_stats_, scratch_;
  size_t scratch_stride_ = 0;
};
}  // namespace

std::shared_ptr<PlanImpl> make_cpu_plan(const Params& p, const Options& opt) { return std::make_shared<CpuPlan>(p, opt); }

}  // namespace detail
}  // namespace pagedattn
