#include "core/planner.h"

#include <algorithm>
#include <climits>
#include <sstream>
#include <stdexcept>

namespace pagedattn {
namespace planner {

namespace {
struct Chunk {
  int seq, t0, nt, lo, hi;  // key range [lo, hi)
  int part;                 // deterministic: the chunk's partition size (0: the plan's)
};

// 0, 1, 2, 3 for chunks of <= 16, 32, 64, 128 rows (1, 2, 4, 8 row tiles: the kernel variants)
int row_tile_class(int rows) { return rows <= 16 ? 0 : rows <= 32 ? 1 : rows <= 64 ? 2 : 3; }

int64_t count_parts(const std::vector<Chunk>& chunks, int part) {
  int64_t n = 0;
  for (const Chunk& c : chunks) n += (int64_t{c.hi} + part - 1) / part - c.lo / part;
  return n;
}
}  // namespace

Plan make_plan(const Inputs& in) {
  if (in.group < 1 || in.group > kMaxRows) throw std::invalid_argument("group size must be in [1, 64]");
  if (in.max_rows % 16 != 0 || in.max_rows < 16 || in.max_rows > kMaxRowsWide || in.max_rows < in.group)
    throw std::invalid_argument("max_rows must be 16, 32, 64 or 128 (a multiple of 16 up to 128) and >= group");
  const bool wg_partials = in.deterministic && in.wg_partials;
  const int max_rows = wg_partials ? kMaxRows : in.deterministic ? deterministic_rows(in.group, in.max_rows) : in.max_rows;
  const int max_tokens_per_chunk = max_rows / in.group;
  if (!in.positions.empty() && in.positions.size() != in.past_lens.size())
    throw std::invalid_argument("positions: one per sequence, or none");
  Plan plan;
  std::vector<Chunk> chunks;
  for (size_t s = 0; s < in.past_lens.size(); ++s) {
    const int T = in.tokens[s], past = in.past_lens[s];
    const int qpos0 = in.positions.empty() ? past : in.positions[s];  // the first new token's position
    if (T == 0) continue;
    // token t's key range [its window start, its causal limit)
    auto lo_of = [&](int t) {
      return in.sliding_window > 0 ? static_cast<int>(std::max<int64_t>(0, int64_t{qpos0} + t - in.sliding_window + 1)) : 0;
    };
    auto hi_of = [&](int t) { return in.prefix_only ? past : past + t + 1; };
    auto part_of = [&](int t) {  // deterministic: token t's own partition size
      if (!in.deterministic || in.forced_partition > 0) return 0;
      return deterministic_partition(std::max(1, hi_of(t) - lo_of(t)), in.num_kv_heads,
                                     int64_t{in.num_sms} * std::max(1, in.ctas_per_sm));
    };
    for (int a = 0; a < T;) {  // runs of tokens with one partition size (the whole sequence by default)
      const int part_a = part_of(a);
      int b = a + 1;
      while (b < T && part_of(b) == part_a) ++b;
      const int n = b - a;
      const int nchunks = (n + max_tokens_per_chunk - 1) / max_tokens_per_chunk;
      const int per = (n + nchunks - 1) / nchunks;  // balanced chunks
      for (int t0 = a; t0 < b; t0 += per) {
        Chunk c;
        c.seq = static_cast<int>(s);
        c.t0 = t0;
        c.nt = std::min(per, b - t0);
        c.part = part_a;
        c.hi = hi_of(t0 + c.nt - 1);  // causal limit of the chunk's last token
        c.lo = lo_of(t0);             // the window's start for its first token (the later ones' are later)
        if (c.lo >= c.hi) {  // prefix_only: an empty shard, or one that ends before the window
          plan.empty.push_back(EmptyChunk{c.seq, c.t0, c.nt});
          continue;
        }
        c.lo = c.lo / kBlockKV * kBlockKV;
        chunks.push_back(c);
      }
      a = b;
    }
  }

  // --- partition size: the smallest (multiple of kBlockKV, >= min_partition) that keeps one wave --
  int per_sm = std::max(1, in.ctas_per_sm);
  {
    int wg = INT_MAX;  // every chunk on the Hopper kernel: its occupancy (Inputs::wg_ctas_per_sm)
    for (const Chunk& c : chunks) {
      const int k = row_tile_class(c.nt * in.group);
      wg = in.wg_ctas_per_sm[k] > 0 ? std::min(wg, in.wg_ctas_per_sm[k]) : 0;
      if (wg == 0) break;
    }
    if (!chunks.empty() && wg > 0 && wg != INT_MAX) {
      per_sm = wg;
    } else {
      for (const Chunk& c : chunks) {  // the least occupancy of the chunks' fwd_kernel variants
        const int k = row_tile_class(c.nt * in.group);
        if (in.wg_ctas_per_sm[k] == 0 && in.fwd_ctas_per_sm[k] > 0) per_sm = std::min(per_sm, in.fwd_ctas_per_sm[k]);
      }
    }
  }
  const int64_t target = static_cast<int64_t>(in.num_sms) * per_sm;
  int part;
  if (in.forced_partition > 0) {
    part = (in.forced_partition + kBlockKV - 1) / kBlockKV * kBlockKV;
  } else if (in.deterministic) {
    part = chunks.empty() ? kDeterministicStep : chunks.front().part;  // (each chunk has its own)
  } else {
    int max_hi = kBlockKV;
    for (const Chunk& c : chunks) max_hi = std::max(max_hi, c.hi);
    auto one_wave = [&](int64_t wave) {  // the least partition whose CTAs fit `wave`
      int p = std::max(kBlockKV, in.min_partition / kBlockKV * kBlockKV);
      while (p < max_hi && count_parts(chunks, p) * in.num_kv_heads > wave) p += kBlockKV;
      p = std::min(p, (max_hi + kBlockKV - 1) / kBlockKV * kBlockKV);
      return std::max(p, kBlockKV);
    };
    part = one_wave(target);
    const int64_t short_wave = static_cast<int64_t>(in.num_sms) * in.short_ctas_per_sm;
    if (short_wave > 0 && short_wave < target && part < in.short_wave_keys) part = one_wave(short_wave);
  }
  plan.partition_tokens = part;
  plan.chunk_rows = max_rows;
  // deterministic: a chunk's key range starts at its first partition's start, so the kernel's tiles
  // and key groups lie on the absolute grid whatever the window start (keys before it are masked)
  for (Chunk& c : chunks) {
    if (c.part == 0) c.part = part;
    if (in.deterministic) c.lo = c.lo / c.part * c.part;
  }

  // --- deterministic: partitions per CTA (WorkItem::part), by the call's CTA count -----------------
  auto parts_of = [](const Chunk& c) { return static_cast<int>((int64_t{c.hi} + c.part - 1) / c.part) - c.lo / c.part; };
  auto spans = [&](const Chunk& c) { return in.deterministic && c.nt * in.group <= (wg_partials ? kMaxRows : kMaxSpanRows); };
  int span = 1;
  if (in.deterministic && in.forced_partition == 0) {
    int max_parts = 1;
    for (const Chunk& c : chunks)
      if (spans(c)) max_parts = std::max(max_parts, parts_of(c));
    auto ctas_at = [&](int s) {
      int64_t n = 0;
      for (const Chunk& c : chunks) n += spans(c) ? (parts_of(c) + s - 1) / s : parts_of(c);
      return n * in.num_kv_heads;
    };
    while (span < max_parts && ctas_at(span) > target) ++span;
  }
  // Inputs::fold_block: runs of at least a block take whole blocks (span rounded up to blocks)
  const int fb = wg_partials ? in.fold_block : 0;
  if (fb < 0) throw std::invalid_argument("fold_block must be >= 0");
  const bool folded = fb > 0 && span >= fb;
  if (folded) span = (span + fb - 1) / fb * fb;
  plan.span = span;
  plan.folded = folded;

  // --- work items and partial slots ---------------------------------------------------------------
  int slot = 0;
  const int per_part = wg_partials ? 2 : 1;  // partial slots per partition (Inputs::wg_partials)
  for (const Chunk& c : chunks) {
    const int part = c.part;
    const int p0 = c.lo / part, p1 = static_cast<int>((int64_t{c.hi} + part - 1) / part);
    const int nparts = p1 - p0;
    const int rows = c.nt * in.group;
    const int rt = 1 << row_tile_class(rows);  // kernel variants: row tiles
    // runs of partitions, or (units: Inputs::fold_block) of whole blocks with one slot per (block, warpgroup)
    const bool units = folded && spans(c) && rows <= kFoldRows;
    const int k = units ? fb : 1;                          // partitions per step of a run
    const int q0 = p0 / k, nsteps = (p1 + k - 1) / k - q0;  // the chunk's steps
    const int per_step = units ? 2 : per_part;             // partial slots per step
    const int nitems = spans(c) ? (nsteps + span / k - 1) / (span / k) : nsteps;
    for (int i = 0, q = q0; i < nitems; ++i) {
      const int e = q0 + static_cast<int>(int64_t{nsteps} * (i + 1) / nitems);  // balanced runs [q, e)
      WorkItem w;
      w.seq = c.seq;
      w.t0 = c.t0;
      w.nt = c.nt;
      w.kv_begin = static_cast<int32_t>(std::max<int64_t>(c.lo, int64_t{q} * k * part));
      w.kv_end = static_cast<int32_t>(std::min<int64_t>(c.hi, int64_t{e} * k * part));
      w.num_parts = per_step * nsteps;
      w.slot = nparts > 1 || in.deterministic ? slot + per_step * (q - q0) : -1;
      w.row_tiles = rt;
      w.part = units || e - q > 1 ? part : 0;  // (units: a run of one partition folds it into its unit too)
      w.past = w.tok0 = w.t_seq = w.table = 0;
      plan.items.push_back(w);
      q = e;
    }
    if (nparts > 1 || in.deterministic) {
      plan.merges.push_back(MergeItem{c.seq, c.t0, c.nt, slot, per_step * nsteps, per_step * q0, part, units ? 0 : fb});
      slot += per_step * nsteps * in.num_kv_heads;
    }
    plan.max_row_tiles = std::max(plan.max_row_tiles, rt);
  }
  plan.num_slots = slot;
  plan.slot_rows = 16 * plan.max_row_tiles;  // partial slots as wide as the widest chunk, not max_rows
  plan.ctas = static_cast<int64_t>(plan.items.size()) * in.num_kv_heads;
  std::stable_sort(plan.items.begin(), plan.items.end(), [](const WorkItem& a, const WorkItem& b) {
    if (a.row_tiles != b.row_tiles) return a.row_tiles < b.row_tiles;
    return (a.kv_end - a.kv_begin) > (b.kv_end - b.kv_begin);
  });
  return plan;
}

std::string Plan::describe() const {
  std::ostringstream os;
  int counts[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};  // index: row tiles
  for (const WorkItem& w : items) counts[w.row_tiles]++;
  os << "partition_tokens=" << partition_tokens << " items=" << items.size() << " ctas=" << ctas;
  if (span > 1) os << " span=" << span;
  if (folded) os << " folded";
  os
     << " (row tiles 1/2/4/8: " << counts[1] << "/" << counts[2] << "/" << counts[4] << "/" << counts[8] << ")"
     << " merges=" << merges.size() << " partial_slots=" << num_slots;
  return os.str();
}

}  // namespace planner
}  // namespace pagedattn
