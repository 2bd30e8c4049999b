// Planner (src/core/planner.h): the CUDA backend's work list, checked on the CPU.
//
// Random batches (decode, chain/tree verify sized, prefill; GQA ratios; sliding windows; SM counts)
// are planned and every plan is checked against the rules the kernel relies on:
//   - chunks of a sequence partition its T new tokens, each chunk has nt * G <= kMaxRows rows, and a
//     sequence has the fewest chunks that allows (so few-query sequences are one chunk);
//   - for each chunk, its items' key ranges are disjoint and cover exactly [lo, hi), hi = past + t0 + nt
//     (causal limit of its last token), lo = 0 or, with a sliding window, the window start of its first
//     token rounded down to kBlockKV; every key a token of the chunk may see (params.h: i - j < window)
//     is inside, and the first tile holds at least one of them;
//   - kv_begin is a multiple of kBlockKV and partitions are aligned to absolute multiples of
//     partition_tokens; row_tiles is the smallest of 1/2/4/8 with 16 * row_tiles >= nt * G;
//   - partial slots: one-partition chunks write out directly (slot -1); the items of a chunk with
//     num_parts > 1 have distinct slots in [slot, slot + num_parts); chunk slot ranges
//     [slot, slot + num_parts * Hk) do not overlap and lie below num_slots; merges list exactly those chunks,
//     each with its first partition's absolute index (part0);
//   - ctas == items * Hk; without forcing/determinism the partition is the smallest candidate (a
//     multiple of kBlockKV from Inputs::min_partition up, never below it unless the keys are fewer)
//     that fits one wave (ctas <= num_sms * ctas_per_sm, or
//     the least wg_ctas_per_sm of the chunks' row-tile classes when every chunk's is nonzero, else the
//     least of ctas_per_sm and the nonzero fwd_ctas_per_sm of the chunks' classes not on the Hopper kernel)
//     whenever one-partition-per-chunk fits, and one partition per chunk otherwise;
//   - deterministic mode gives a sequence the same partition boundaries alone or in any batch, chunks
//     of deterministic_rows(G) rows (one key-group layout for all), key ranges from a partition start, and a
//     partial slot and a merge for every chunk;
//     forced_partition is honoured (rounded up to kBlockKV).
// Seeds: PAGEDATTN_SEED=<n> fixes the base seed; otherwise it is drawn and printed. Case i uses base + i.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "core/planner.h"
#include "testing/case.h"

namespace {

namespace pl = pagedattn::planner;
using pl::Inputs;
using pl::Plan;
using pl::WorkItem;

uint64_t base_seed() { return pagedattn::testing::base_seed("test_planner", 0); }

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }

template <typename T>
std::string list(const std::vector<T>& v, size_t max_shown = 24) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size() && i < max_shown; ++i) os << (i ? "," : "") << v[i];
  if (v.size() > max_shown) os << ",... (" << v.size() << ")";
  os << "]";
  return os.str();
}

std::string describe(const Inputs& in) {
  std::ostringstream os;
  os << "past_lens=" << list(in.past_lens) << " tokens=" << list(in.tokens) << " G=" << in.group
     << " Hk=" << in.num_kv_heads << " window=" << in.sliding_window << " sms=" << in.num_sms
     << " prefix_only=" << in.prefix_only << " ctas_per_sm=" << in.ctas_per_sm << " wg_ctas_per_sm=" << in.wg_ctas_per_sm[0] << "," << in.wg_ctas_per_sm[1]
     << "," << in.wg_ctas_per_sm[2] << "," << in.wg_ctas_per_sm[3] << " deterministic=" << in.deterministic
     << " wg_partials=" << in.wg_partials << " fold_block=" << in.fold_block
     << " forced_partition=" << in.forced_partition << " min_partition=" << in.min_partition
     << " positions=" << list(in.positions);
  return os.str();
}

std::string describe(const WorkItem& w) {
  std::ostringstream os;
  os << "{seq " << w.seq << " t0 " << w.t0 << " nt " << w.nt << " kv [" << w.kv_begin << "," << w.kv_end
     << ") slot " << w.slot << " parts " << w.num_parts << " row_tiles " << w.row_tiles << " part " << w.part << "}";
  return os.str();
}

// --- random inputs ---------------------------------------------------------------------------------
Inputs random_inputs(std::mt19937_64& rng) {
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto pick = [&](std::initializer_list<int> v) { return *(v.begin() + uni(0, static_cast<int>(v.size()) - 1)); };
  Inputs in;
  in.group = pick({1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 21, 32, 48, 64});
  in.num_kv_heads = pick({1, 1, 2, 4, 8, 16});
  const int shape = uni(0, 4);  // 0: decode, 1: verify sized, 2: prefill, 3: mixed, 4: tiny contexts
  const int num_seqs = shape == 2 ? uni(1, 6) : uni(1, pick({4, 16, 64, 200}));
  const int max_past = pick({0, 63, 64, 700, 5000, 40000});
  for (int s = 0; s < num_seqs; ++s) {
    int T;
    switch (shape == 3 ? uni(0, 2) : std::min(shape, 2)) {
      case 0: T = uni(0, 9) == 0 ? 0 : 1; break;
      case 1: T = uni(0, 17); break;
      default: T = uni(0, 9) == 0 ? 0 : uni(1, pick({64, 300, 1100})); break;
    }
    in.tokens.push_back(T);
    in.past_lens.push_back(shape == 4 ? uni(0, 130) : uni(0, max_past));
  }
  if (uni(0, 2) == 0) in.sliding_window = pick({1, 2, 63, 64, 65, 128, 255, 1000, 4096}) + uni(0, 1) * uni(0, 500);
  in.prefix_only = uni(0, 4) == 0;
  // a shard before the new tokens (validate() asks for their positions with a window and prefix_only)
  if (in.prefix_only && (in.sliding_window > 0 || uni(0, 3) == 0))
    for (int s = 0; s < num_seqs; ++s)
      in.positions.push_back(in.past_lens[s] + uni(0, 1) * uni(0, pick({1, 63, 1000, 20000})));
  in.num_sms = pick({1, 4, 78, 108, 132, 132});
  in.ctas_per_sm = pick({0, 1, 1, 2, 3, 4});
  if (uni(0, 2) == 0)  // chunks of some row-tile classes on the Hopper kernel, with their own occupancy
    for (int& w : in.wg_ctas_per_sm) w = uni(0, 1) * pick({1, 1, 2});
  if (uni(0, 2) == 0)  // fwd_kernel variants of their own occupancy (D = 64's u8 decodes at 4 per SM)
    for (int& f : in.fwd_ctas_per_sm) f = uni(0, 1) * pick({1, 2, 3, 4});
  in.deterministic = uni(0, 5) == 0;
  if (uni(0, 5) == 0) in.forced_partition = pick({1, 63, 64, 65, 128, 256, 300, 512, 1024, 4096});
  if (uni(0, 3) == 0) in.min_partition = pick({64, 256, 512});  // (tuning::min_partition, its override)
  if (uni(0, 3) == 0) {  // (tuning::short_wave_ctas_per_sm)
    in.short_ctas_per_sm = pick({1, 2, 3});
    in.short_wave_keys = pick({256, 1024, 4096});
  }
  in.wg_partials = uni(0, 1) == 0;  // (deterministic mode only)
  return in;
}

// The chunks of a plan, keyed by (seq, t0), with their items ordered by kv_begin.
struct ChunkView {
  int nt = 0;
  std::vector<WorkItem> items;
};
std::map<std::pair<int, int>, ChunkView> chunks_of(const Plan& plan) {
  std::map<std::pair<int, int>, ChunkView> m;
  for (const WorkItem& w : plan.items) {
    ChunkView& c = m[{w.seq, w.t0}];
    c.nt = w.nt;
    c.items.push_back(w);
  }
  for (auto& kv : m)
    std::sort(kv.second.items.begin(), kv.second.items.end(),
              [](const WorkItem& a, const WorkItem& b) { return a.kv_begin < b.kv_begin; });
  return m;
}

// Partitions a chunk [lo, hi) needs when cut at absolute multiples of `part`.
int64_t parts_needed(int lo, int hi, int part) { return ceil_div(hi, part) - lo / part; }

// The one-wave target: num_sms x the attention kernel's occupancy (when every chunk runs on the Hopper
// kernel, the least occupancy of their classes: Inputs::wg_ctas_per_sm; else the least of ctas_per_sm
// and the fwd_kernel classes' own, Inputs::fwd_ctas_per_sm, of the chunks not on the Hopper kernel).
int64_t wave_target(const Inputs& in, const std::map<std::pair<int, int>, ChunkView>& chunks) {
  int wg = INT_MAX, fwd = std::max(1, in.ctas_per_sm);
  for (const auto& kv : chunks) {
    const int rows = kv.second.nt * in.group;
    const int k = rows <= 16 ? 0 : rows <= 32 ? 1 : rows <= 64 ? 2 : 3;
    wg = std::min(wg, in.wg_ctas_per_sm[k]);
    if (in.wg_ctas_per_sm[k] == 0 && in.fwd_ctas_per_sm[k] > 0) fwd = std::min(fwd, in.fwd_ctas_per_sm[k]);
  }
  const int per_sm = !chunks.empty() && wg > 0 && wg != INT_MAX ? wg : fwd;
  return static_cast<int64_t>(in.num_sms) * per_sm;
}

// A plan's items with each run of partitions (WorkItem::part, deterministic mode) as one item per
// partition: what the kernel computes, partial by partial.
std::vector<WorkItem> per_partition(const Plan& plan) {
  std::vector<WorkItem> out;
  for (const WorkItem& w : plan.items) {
    if (w.part == 0) {
      out.push_back(w);
      continue;
    }
    for (int b = w.kv_begin, n = 0; b < w.kv_end; b += w.part, ++n) {
      WorkItem v = w;
      v.kv_begin = b;
      v.kv_end = std::min(w.kv_end, b + w.part);
      v.slot = w.slot + n;
      v.part = 0;
      out.push_back(v);
    }
  }
  return out;
}

// --- the rules ---------------------------------------------------------------------------------------
void check_flat_plan(const Inputs& in, const Plan& plan);

bool wg_partials(const Inputs& in) { return in.deterministic && in.wg_partials; }
// Rows of the chunks that may run several partitions per item (deterministic mode): fwd_kernel's flush
// takes 32, the key-split kernel's own partials any chunk
int span_rows(const Inputs& in) { return wg_partials(in) ? pl::kMaxRows : pl::kMaxSpanRows; }

// Inputs::wg_partials: two partial slots per partition (slots 2 (p - p0) and 2 (p - p0) + 1 of the chunk's
// range), so every slot, count and first index is even; halved, the plan must keep every other rule.
Plan halve_wg_partials(const Plan& plan) {
  Plan h = plan;
  EXPECT_EQ(plan.num_slots % 2, 0);
  for (WorkItem& w : h.items) {
    EXPECT_TRUE(w.slot % 2 == 0 && w.num_parts % 2 == 0) << "slot " << w.slot << " parts " << w.num_parts;
    w.slot /= 2;
    w.num_parts /= 2;
  }
  for (pl::MergeItem& m : h.merges) {
    EXPECT_TRUE(m.slot % 2 == 0 && m.num_parts % 2 == 0 && m.part0 % 2 == 0)
        << "merge slot " << m.slot << " parts " << m.num_parts << " part0 " << m.part0;
    m.slot /= 2;
    m.num_parts /= 2;
    m.part0 /= 2;
  }
  h.num_slots /= 2;
  return h;
}

// A plan's items in the order the kernels take them; items that run several partitions (deterministic
// mode, WorkItem::part) then stand for one item per partition in check_flat_plan's rules.
void check_plan(const Inputs& in, const Plan& two_per_part) {
  const Plan plan = wg_partials(in) ? halve_wg_partials(two_per_part) : two_per_part;
  const int Hk = in.num_kv_heads;
  EXPECT_EQ(plan.ctas, static_cast<int64_t>(plan.items.size()) * Hk);
  // order: row tiles ascending, then longest key range first
  for (size_t i = 1; i < plan.items.size(); ++i) {
    const WorkItem &a = plan.items[i - 1], &b = plan.items[i];
    EXPECT_TRUE(a.row_tiles < b.row_tiles ||
                (a.row_tiles == b.row_tiles && a.kv_end - a.kv_begin >= b.kv_end - b.kv_begin))
        << "items " << i - 1 << " and " << i << " out of order: " << describe(a) << " then " << describe(b);
  }
  Plan flat = plan;
  flat.items = per_partition(plan);
  std::map<std::pair<int, int>, int> runs;  // (seq, t0) -> the chunk's longest run of partitions
  std::map<std::pair<int, int>, int> shortest;
  for (const WorkItem& w : plan.items) {
    SCOPED_TRACE(describe(w));
    const int n = w.part == 0 ? 1 : static_cast<int>(ceil_div(w.kv_end - w.kv_begin, w.part));
    if (w.part != 0) {
      EXPECT_TRUE(in.deterministic && in.forced_partition <= 0) << "a run of partitions outside deterministic mode";
      EXPECT_LE(w.nt * in.group, span_rows(in)) << "a run of partitions in a chunk of more rows than the flush takes";
      EXPECT_EQ(w.part % pl::kDeterministicStep, 0);
      EXPECT_EQ(w.kv_begin % w.part, 0) << "a run starts inside a partition";
      EXPECT_GT(n, 1) << "a run of one partition has part != 0";
    }
    EXPECT_LE(n, plan.span) << "a run longer than Plan::span";
    const auto key = std::make_pair(w.seq, w.t0);
    runs[key] = std::max(runs[key], n);
    shortest[key] = shortest.count(key) ? std::min(shortest[key], n) : n;
  }
  for (const auto& kv : runs) EXPECT_LE(kv.second - shortest[kv.first], 1) << "runs of a chunk not balanced";
  std::stable_sort(flat.items.begin(), flat.items.end(), [](const WorkItem& a, const WorkItem& b) {
    if (a.row_tiles != b.row_tiles) return a.row_tiles < b.row_tiles;
    return (a.kv_end - a.kv_begin) > (b.kv_end - b.kv_begin);
  });
  flat.ctas = static_cast<int64_t>(flat.items.size()) * Hk;
  // the span: the least that fits one wave (1 outside deterministic mode, or when one partition per item fits)
  const auto chunks = chunks_of(flat);
  auto ctas_at = [&](int span) {
    int64_t n = 0;
    for (const auto& kv : chunks) {
      const int np = static_cast<int>(kv.second.items.size());
      n += kv.second.nt * in.group <= span_rows(in) ? ceil_div(np, span) : np;
    }
    return n * Hk;
  };
  EXPECT_GE(plan.span, 1);
  if (!in.deterministic || in.forced_partition > 0) {
    EXPECT_EQ(plan.span, 1);
  } else {
    const int64_t target = wave_target(in, chunks);
    EXPECT_EQ(ctas_at(plan.span), plan.ctas) << "items are not the chunks' balanced runs of Plan::span";
    if (plan.span > 1) {
      EXPECT_GT(ctas_at(plan.span - 1), target) << "span " << plan.span - 1 << " would fit one wave";
      EXPECT_TRUE(ctas_at(plan.span) <= target || ctas_at(plan.span) == ctas_at(plan.span + 1))
          << "span " << plan.span << " neither fits one wave nor is the longest run";
    }
  }
  check_flat_plan(in, flat);
}

void check_flat_plan(const Inputs& in, const Plan& plan) {
  const int G = in.group, Hk = in.num_kv_heads, P = plan.partition_tokens;
  const int num_seqs = static_cast<int>(in.past_lens.size());
  // deterministic mode: chunks of deterministic_rows(G) rows, so every chunk has the same row tiles (with
  // wg_partials 64, every chunk on the key-split kernel's one 64-row tile)
  const int max_rows = wg_partials(in)     ? pl::kMaxRows
                       : in.deterministic ? pl::deterministic_rows(G, in.max_rows)
                                          : in.max_rows;
  const int max_tokens_per_chunk = max_rows / G;
  EXPECT_EQ(plan.chunk_rows, max_rows) << "chunk_rows is the chunking rule's max_rows";
  EXPECT_EQ(plan.slot_rows, 16 * plan.max_row_tiles) << "partial slots are as wide as the widest chunk";
  for (const WorkItem& w : plan.items)
    EXPECT_LE(w.nt * G, plan.slot_rows) << "a chunk's rows do not fit its partial slot: " << describe(w);

  // partition size
  ASSERT_GT(P, 0);
  EXPECT_EQ(P % pl::kBlockKV, 0) << "partition_tokens " << P << " is not a multiple of kBlockKV";
  if (in.forced_partition > 0)
    EXPECT_EQ(P, round_up(in.forced_partition, pl::kBlockKV))
        << "forced_partition " << in.forced_partition << " not honoured";
  else if (in.deterministic)
    EXPECT_EQ(P % pl::kDeterministicStep, 0) << "deterministic mode: partitions of whole steps";
  // the partition size of token t of sequence s: deterministic mode gives each token its own, from the
  // keys it sees (deterministic_partition), else the plan's
  auto token_part = [&](int s, int t) {
    if (!in.deterministic || in.forced_partition > 0) return P;
    const int past = in.past_lens[s], q = (in.positions.empty() ? past : in.positions[s]) + t;
    const int first = in.sliding_window > 0 ? std::max(0, q - in.sliding_window + 1) : 0;
    const int end = in.prefix_only ? past : past + t + 1;
    return pl::deterministic_partition(std::max(1, end - first), Hk,
                                       int64_t{in.num_sms} * std::max(1, in.ctas_per_sm));
  };

  // items, one by one
  int max_rt = 1;
  for (const WorkItem& w : plan.items) {
    SCOPED_TRACE(describe(w));
    ASSERT_GE(w.seq, 0);
    ASSERT_LT(w.seq, num_seqs);
    const int T = in.tokens[w.seq];
    EXPECT_GE(w.t0, 0);
    EXPECT_GE(w.nt, 1);
    EXPECT_LE(w.t0 + w.nt, T) << "chunk runs past the sequence's T=" << T;
    EXPECT_LE(w.nt * G, max_rows) << "too many query rows for one CTA";
    if (in.deterministic && !wg_partials(in))  // 1 and 2 row tiles share their key groups (deterministic_rows)
      EXPECT_TRUE(max_rows <= 32 ? w.row_tiles <= 2 : w.row_tiles == 4)
          << "deterministic mode: chunks of one key-group layout";
    const int rows = w.nt * G;
    const int smallest_rt = rows <= 16 ? 1 : rows <= 32 ? 2 : rows <= 64 ? 4 : 8;
    EXPECT_TRUE(w.row_tiles == 1 || w.row_tiles == 2 || w.row_tiles == 4 || (w.row_tiles == 8 && in.max_rows == 128))
        << "no such kernel variant";
    EXPECT_GE(w.row_tiles, ceil_div(rows, 16)) << "row tiles too few for " << rows << " rows";
    EXPECT_EQ(w.row_tiles, smallest_rt) << "row tiles not the smallest variant for " << rows << " rows";
    EXPECT_EQ(w.kv_begin % pl::kBlockKV, 0) << "kv_begin not a multiple of kBlockKV";
    EXPECT_LT(w.kv_begin, w.kv_end) << "empty key range";
    EXPECT_GE(w.kv_begin, 0);
    // one partition: [kv_begin, kv_end) inside [p*Pw, (p+1)*Pw)
    const int Pw = token_part(w.seq, w.t0);
    EXPECT_EQ(w.kv_begin / Pw, (w.kv_end - 1) / Pw) << "key range crosses a partition boundary (P=" << Pw << ")";
    EXPECT_GE(w.num_parts, 1);
    if (w.num_parts == 1 && !in.deterministic) EXPECT_EQ(w.slot, -1) << "a one-partition chunk writes out directly";
    max_rt = std::max(max_rt, w.row_tiles);
  }
  EXPECT_EQ(plan.max_row_tiles, max_rt);

  // chunks
  const auto chunks = chunks_of(plan);
  std::vector<std::vector<std::pair<int, int>>> seq_chunks(num_seqs);  // (t0, nt)
  std::vector<std::tuple<int, int, int>> slot_ranges;                   // (begin, end, seq)
  std::set<std::tuple<int, int, int, int, int>> expected_merges;
  std::map<std::pair<int, int>, int> first_part;  // (seq, t0) -> absolute index of the chunk's first partition
  int64_t one_part_ctas = 0;
  for (const auto& kv : chunks) {
    const int s = kv.first.first, t0 = kv.first.second;
    const ChunkView& c = kv.second;
    SCOPED_TRACE("chunk seq " + std::to_string(s) + " t0 " + std::to_string(t0) + " nt " + std::to_string(c.nt));
    seq_chunks[s].push_back({t0, c.nt});
    one_part_ctas += Hk;
    const int Pc = token_part(s, t0);  // the chunk's partition size: every token's
    for (int t = t0 + 1; t < t0 + c.nt; ++t)
      EXPECT_EQ(token_part(s, t), Pc) << "token " << t << " has another partition size than its chunk's first";
    const int past = in.past_lens[s], qpos0 = in.positions.empty() ? past : in.positions[s];
    const int hi = in.prefix_only ? past : past + t0 + c.nt;
    int lo = 0;
    const int lo_align = in.deterministic ? Pc : pl::kBlockKV;  // deterministic: from a partition start
    if (in.sliding_window > 0) lo = std::max(0, qpos0 + t0 - in.sliding_window + 1) / lo_align * lo_align;
    // coverage: disjoint, contiguous, exactly [lo, hi)
    for (const WorkItem& w : c.items) EXPECT_EQ(w.nt, c.nt) << "items of one chunk disagree on nt";
    EXPECT_EQ(c.items.front().kv_begin, lo) << "chunk's key range starts at the wrong key";
    EXPECT_EQ(c.items.back().kv_end, hi) << "chunk's key range ends at the wrong key (causal limit " << hi << ")";
    for (size_t i = 1; i < c.items.size(); ++i)
      EXPECT_EQ(c.items[i - 1].kv_end, c.items[i].kv_begin)
          << "gap or overlap between " << describe(c.items[i - 1]) << " and " << describe(c.items[i]);
    // partition boundaries inside the chunk are exactly the absolute multiples of Pc
    for (size_t i = 0; i + 1 < c.items.size(); ++i)
      EXPECT_EQ(c.items[i].kv_end % Pc, 0) << "inner cut not at a multiple of P=" << Pc << ": " << describe(c.items[i]);
    EXPECT_EQ(static_cast<int64_t>(c.items.size()), parts_needed(lo, hi, Pc));
    // semantics (params.h): token t at q = qpos0 + t sees keys j <= q with q - j < window; prefix_only:
    // only the shard's keys j < past
    for (int t = t0; t < t0 + c.nt; ++t) {
      const int q = qpos0 + t;
      const int first = in.sliding_window > 0 ? std::max(0, q - in.sliding_window + 1) : 0;
      const int last = in.prefix_only ? past - 1 : q;
      if (first > last) continue;  // no key (prefix_only: its window starts past the shard)
      EXPECT_LE(lo, first) << "token " << t << " sees key " << first << " outside the chunk's range";
      EXPECT_GE(hi, last + 1) << "token " << t << " sees key " << last << " outside the chunk's range";
    }
    const int first_needed = in.sliding_window > 0 ? std::max(0, qpos0 + t0 - in.sliding_window + 1) : 0;
    EXPECT_LT(first_needed - lo, lo_align) << "first tile (partition) holds no key any token of the chunk sees";
    // slots
    const int np = static_cast<int>(c.items.size());
    std::set<int> slots;
    for (const WorkItem& w : c.items) {
      EXPECT_EQ(w.num_parts, np) << "num_parts disagrees with the chunk's item count";
      if (np > 1 || in.deterministic) slots.insert(w.slot);
    }
    if (np > 1 || in.deterministic) {  // deterministic mode: every chunk through the merge
      EXPECT_EQ(static_cast<int>(slots.size()), np) << "items of one chunk share a partial slot";
      const int base = *slots.begin();
      EXPECT_GE(base, 0);
      EXPECT_EQ(*slots.rbegin(), base + np - 1) << "slots of a chunk are not slot .. slot + num_parts - 1";
      EXPECT_LE(base + np * Hk, plan.num_slots) << "slot range past num_slots";
      slot_ranges.emplace_back(base, base + np * Hk, s);
      expected_merges.insert({s, t0, c.nt, base, np});
      first_part[{s, t0}] = c.items.front().kv_begin / Pc;
    }
  }
  // slot ranges of different chunks (all kv heads) do not overlap
  std::sort(slot_ranges.begin(), slot_ranges.end());
  for (size_t i = 1; i < slot_ranges.size(); ++i)
    EXPECT_LE(std::get<1>(slot_ranges[i - 1]), std::get<0>(slot_ranges[i]))
        << "slot ranges overlap: [" << std::get<0>(slot_ranges[i - 1]) << "," << std::get<1>(slot_ranges[i - 1])
        << ") and [" << std::get<0>(slot_ranges[i]) << "," << std::get<1>(slot_ranges[i]) << ")";
  EXPECT_GE(plan.num_slots, 0);
  if (slot_ranges.empty()) EXPECT_EQ(plan.num_slots, 0);

  // merges: exactly the multi-partition chunks, once each
  std::set<std::tuple<int, int, int, int, int>> merges;
  for (const pl::MergeItem& m : plan.merges) {
    // part0: the chunk's first partition by absolute index (the merge groups partitions by it)
    const int want_part0 = first_part[std::make_pair(m.seq, m.t0)];
    EXPECT_EQ(m.part0, want_part0) << "merge of seq " << m.seq << " t0 " << m.t0 << ": part0";
    EXPECT_EQ(m.part, token_part(m.seq, m.t0)) << "merge of seq " << m.seq << " t0 " << m.t0 << ": part";
    EXPECT_TRUE(merges.insert({m.seq, m.t0, m.nt, m.slot, m.num_parts}).second)
        << "merge listed twice: seq " << m.seq << " t0 " << m.t0;
  }
  EXPECT_EQ(merges, expected_merges) << "merges are not exactly the chunks with num_parts > 1 (deterministic: all)";

  // chunks without a key (Plan::empty): prefix_only only, and no token of theirs sees a key
  for (const pl::EmptyChunk& e : plan.empty) {
    SCOPED_TRACE("empty chunk seq " + std::to_string(e.seq) + " t0 " + std::to_string(e.t0) + " nt " + std::to_string(e.nt));
    ASSERT_GE(e.seq, 0);
    ASSERT_LT(e.seq, num_seqs);
    EXPECT_TRUE(in.prefix_only) << "only a prefix_only shard has tokens that see no key";
    const int past = in.past_lens[e.seq], qpos0 = in.positions.empty() ? past : in.positions[e.seq];
    const int first = in.sliding_window > 0 ? std::max(0, qpos0 + e.t0 - in.sliding_window + 1) : 0;
    EXPECT_GE(first, past) << "the chunk's first token sees key " << first << " of " << past;
    EXPECT_TRUE(chunks.find({e.seq, e.t0}) == chunks.end()) << "an empty chunk also has items";
    seq_chunks[e.seq].push_back({e.t0, e.nt});
  }

  // chunks of each sequence (with items or empty) partition [0, T) into the fewest chunks of <= kMaxRows / G
  // tokens (deterministic mode: of each run of tokens with one partition size)
  for (int s = 0; s < num_seqs; ++s) {
    auto& v = seq_chunks[s];
    std::sort(v.begin(), v.end());
    const int T = in.tokens[s];
    int next = 0;
    for (const auto& c : v) {
      EXPECT_EQ(c.first, next) << "seq " << s << ": chunks do not tile its tokens (gap/overlap at " << next << ")";
      next = c.first + c.second;
    }
    EXPECT_EQ(next, T) << "seq " << s << ": chunks cover " << next << " of " << T << " tokens";
    int64_t fewest = 0;
    for (int a = 0; a < T;) {
      int b = a + 1;
      while (b < T && token_part(s, b) == token_part(s, a)) ++b;
      fewest += ceil_div(b - a, max_tokens_per_chunk);
      a = b;
    }
    EXPECT_EQ(static_cast<int64_t>(v.size()), fewest) << "seq " << s << ": not the fewest chunks";
  }

  // one wave, with the smallest partition that gives it
  if (in.forced_partition <= 0 && !in.deterministic) {
    int64_t target = wave_target(in, chunks);
    int max_hi = 0;
    for (const auto& kv : chunks) max_hi = std::max(max_hi, kv.second.items.back().kv_end);
    auto ctas_at = [&](int part) {
      int64_t n = 0;
      for (const auto& kv : chunks)
        n += parts_needed(kv.second.items.front().kv_begin, kv.second.items.back().kv_end, part);
      return n * Hk;
    };
    const int least = std::max(pl::kBlockKV, in.min_partition / pl::kBlockKV * pl::kBlockKV);
    if (in.short_ctas_per_sm > 0 && !chunks.empty()) {  // the short-partition wave: where the one-wave
      int p = least;                                    // partition is under short_wave_keys
      while (p < max_hi && ctas_at(p) > target) p += pl::kBlockKV;
      const int64_t short_wave = static_cast<int64_t>(in.num_sms) * in.short_ctas_per_sm;
      if (p < in.short_wave_keys && short_wave < target) target = short_wave;  // (never a larger wave)
    }
    if (!chunks.empty()) {  // never below the least partition, unless the longest key range is shorter
      EXPECT_GE(P, std::min(least, (max_hi + pl::kBlockKV - 1) / pl::kBlockKV * pl::kBlockKV))
          << "partition below min_partition " << in.min_partition;
    }
    if (one_part_ctas <= target) {
      EXPECT_LE(plan.ctas, target) << "more than one wave although one partition per chunk would fit";
      for (int part = in.min_partition; part < P && part < max_hi; part += pl::kBlockKV)
        EXPECT_GT(ctas_at(part), target) << "partition " << part << " < " << P << " would fit one wave";
    } else {
      EXPECT_EQ(plan.ctas, one_part_ctas) << "chunks cannot fit one wave: expected one partition per chunk";
    }
  }
}

void run_random(int cases, uint64_t offset, int max_rows = pl::kMaxRows) {
  for (int i = 0; i < cases; ++i) {
    const uint64_t seed = base_seed() + offset + static_cast<uint64_t>(i);
    std::mt19937_64 rng(seed);
    Inputs in = random_inputs(rng);
    in.max_rows = max_rows;
    in.group = std::min(in.group, max_rows);  // a chunk holds at least one token's rows
    SCOPED_TRACE("case seed " + std::to_string(seed) + " (base + " + std::to_string(offset + i) + "): " + describe(in));
    const Plan plan = pl::make_plan(in);
    check_plan(in, plan);
    // a pure function: the same inputs give the same plan
    const Plan again = pl::make_plan(in);
    EXPECT_EQ(again.describe(), plan.describe());
    if (::testing::Test::HasFailure()) {
      std::printf("[ failed   ] case seed %llu: %s\n  plan: %s\n", static_cast<unsigned long long>(seed),
                  describe(in).c_str(), plan.describe().c_str());
      return;  // one failing case is enough to read
    }
  }
}

TEST(Planner, RandomBatchesKeepEveryRule) { run_random(1500, 0); }

// Wide prefill tiles (128-row chunks, 8 row tiles; the CUDA default at D <= 128 and on Hopper).
TEST(Planner, RandomBatchesWideChunks) { run_random(500, 2000000, pl::kMaxRowsWide); }
// Narrow chunks (16 and 32 rows: few-query sequences split by rows; no backend plans them today).
TEST(Planner, RandomBatchesNarrowChunks) {
  run_random(300, 3000000, 16);
  run_random(300, 3100000, 32);
}

// Deterministic and forced modes, drawn on their own so each case exercises them.
TEST(Planner, RandomForcedAndDeterministic) {
  int runs = 0;  // deterministic plans with runs of partitions (Plan::span > 1)
  for (int i = 0; i < 600; ++i) {
    const uint64_t seed = base_seed() + 1000000 + static_cast<uint64_t>(i);
    std::mt19937_64 rng(seed);
    Inputs in = random_inputs(rng);
    in.deterministic = (i % 2) == 0;
    in.forced_partition = (i % 3) == 0 ? 0 : std::uniform_int_distribution<int>(1, 3000)(rng);
    SCOPED_TRACE("case seed " + std::to_string(seed) + ": " + describe(in));
    const Plan plan = pl::make_plan(in);
    check_plan(in, plan);
    runs += plan.span > 1;
    if (HasFailure()) return;
  }
  std::printf("deterministic plans with runs of partitions: %d of 100\n", runs);
  EXPECT_GT(runs, 0) << "no case exercised runs of partitions";
}

// Deterministic mode: a sequence's partition boundaries do not depend on the rest of the batch (so its
// result is bitwise the same alone or batched). They may depend on the device (the SM count sizes the
// partitions), which a call does not change.
TEST(Planner, DeterministicBoundariesIndependentOfBatch) {
  using Cut = std::tuple<int, int, int, int, int>;  // t0, nt, kv_begin, kv_end, num_parts
  for (int i = 0; i < 400; ++i) {
    const uint64_t seed = base_seed() + 2000000 + static_cast<uint64_t>(i);
    std::mt19937_64 rng(seed);
    Inputs batch = random_inputs(rng);
    batch.deterministic = true;
    batch.forced_partition = 0;
    SCOPED_TRACE("case seed " + std::to_string(seed) + ": " + describe(batch));
    const Plan bp = pl::make_plan(batch);
    std::vector<std::vector<Cut>> batched(batch.past_lens.size());
    for (const WorkItem& w : per_partition(bp)) batched[w.seq].emplace_back(w.t0, w.nt, w.kv_begin, w.kv_end, w.num_parts);
    for (size_t s = 0; s < batch.past_lens.size(); ++s) {
      Inputs alone = batch;
      alone.past_lens = {batch.past_lens[s]};
      alone.tokens = {batch.tokens[s]};
      if (!batch.positions.empty()) alone.positions = {batch.positions[s]};
      const Plan ap = pl::make_plan(alone);
      std::vector<Cut> cuts;
      for (const WorkItem& w : per_partition(ap)) cuts.emplace_back(w.t0, w.nt, w.kv_begin, w.kv_end, w.num_parts);
      std::sort(cuts.begin(), cuts.end());
      std::sort(batched[s].begin(), batched[s].end());
      EXPECT_EQ(cuts, batched[s]) << "seq " << s << " (past " << batch.past_lens[s] << ", T " << batch.tokens[s]
                                  << ") is cut differently alone than in the batch";
    }
    if (HasFailure()) return;
  }
}

// Deterministic mode: the items a decode of a chain verify's token t gets (past + t, T = 1) are the
// verify's items for that token's chunk, key range for key range, except that the verify's last ones
// reach further and, with a window, may begin earlier (keys the token does not see): the same
// partitions, starts and variant.
TEST(Planner, DeterministicDecodeItemsArePrefixesOfTheVerifys) {
  for (int i = 0; i < 400; ++i) {
    const uint64_t seed = base_seed() + 2500000 + static_cast<uint64_t>(i);
    std::mt19937_64 rng(seed);
    auto uni = [&](int a, int b) { return std::uniform_int_distribution<int>(a, b)(rng); };
    Inputs v;
    v.group = std::vector<int>{1, 2, 3, 4, 8, 16, 24, 64}[uni(0, 7)];
    v.num_kv_heads = uni(1, 4);
    v.past_lens = {uni(0, 1) ? uni(0, 3000) : uni(0, 40000)};
    v.tokens = {uni(1, 40)};
    v.sliding_window = uni(0, 1) ? 0 : uni(1, 5000);
    v.deterministic = true;
    v.num_sms = uni(1, 132);
    v.ctas_per_sm = uni(1, 4);
    SCOPED_TRACE("case seed " + std::to_string(seed) + ": " + describe(v));
    const Plan vp = pl::make_plan(v);
    for (int t = 0; t < v.tokens[0]; ++t) {
      Inputs d = v;
      d.past_lens = {v.past_lens[0] + t};
      d.tokens = {1};
      const Plan dp = pl::make_plan(d);
      std::vector<WorkItem> vi, di = per_partition(dp);
      // (the verify's chunk may also start partitions before token t's window: no key of them is the
      // token's, and the merge skips a partition whose max is -inf)
      const int lo_t = v.sliding_window > 0 ? std::max(0, d.past_lens[0] - v.sliding_window + 1) : 0;
      for (const WorkItem& w : per_partition(vp))
        if (w.t0 <= t && t < w.t0 + w.nt && w.kv_begin <= d.past_lens[0] && w.kv_end > lo_t) vi.push_back(w);
      auto by_begin = [](const WorkItem& a, const WorkItem& b) { return a.kv_begin < b.kv_begin; };
      std::sort(vi.begin(), vi.end(), by_begin);
      std::sort(di.begin(), di.end(), by_begin);
      ASSERT_EQ(vi.size(), di.size()) << "token " << t << ": partitions differ";
      for (size_t k = 0; k < di.size(); ++k) {
        EXPECT_EQ(vi[k].kv_begin, di[k].kv_begin) << "token " << t;
        EXPECT_GE(vi[k].kv_end, di[k].kv_end) << "token " << t;
        EXPECT_EQ(std::max(vi[k].row_tiles, 2), std::max(di[k].row_tiles, 2))
            << "token " << t << ": another key-group layout (1 and 2 row tiles share theirs)";
        EXPECT_GE(di[k].slot, 0) << "token " << t << ": the decode writes out directly, not through the merge";
      }
    }
    if (HasFailure()) return;
  }
}

// Deterministic mode's plan of `seqs` sequences of 8k keys at T new tokens each (Hk = 4, 132 SMs).
Inputs deterministic_8k(int group, int ctas_per_sm, int seqs, int T) {
  Inputs in;
  in.group = group;
  in.num_kv_heads = 4;
  in.num_sms = 132;
  in.ctas_per_sm = ctas_per_sm;
  in.deterministic = true;
  in.past_lens.assign(seqs, 8192 - T);
  in.tokens.assign(seqs, T);
  return in;
}

// Deterministic mode on a batch whose partitions overfill a wave: the 32 x 8k batch (G = 8, Hk = 4, 132
// SMs x 2 CTAs) has 32 partitions of 256 keys per sequence and kv head, 4096 CTAs of one partition; in
// runs of 16 partitions it is 256 CTAs, and a lone sequence keeps one partition per CTA.
TEST(Planner, DeterministicRunsOfPartitionsForBatches) {
  for (const int T : {1, 4, 8}) {
    const Inputs in = deterministic_8k(8, 2, 32, T);
    const Plan p = pl::make_plan(in);
    SCOPED_TRACE("T = " + std::to_string(T) + ": " + p.describe());
    check_plan(in, p);
    EXPECT_EQ(p.partition_tokens, 256);
    if (T * in.group <= pl::kMaxSpanRows) {
      EXPECT_EQ(p.span, 16);
      EXPECT_EQ(p.ctas, 256);
    } else {  // 64 rows: two chunks of 32 rows per sequence, each run over all 32 partitions
      EXPECT_EQ(p.span, 32);
      EXPECT_EQ(p.ctas, 32 * 2 * 4);
    }
    EXPECT_EQ(pl::make_plan(deterministic_8k(8, 2, 1, T)).span, 1) << "a lone sequence's partitions fit one wave";
  }
}

// Deterministic mode on the key-split Hopper kernel (Inputs::wg_partials): chunks of up to 64 rows, each in
// runs of partitions where a wave needs them, two partial slots per partition. The seed's 32 x 8k batch
// (G = 4, Hk = 4, 132 SMs x 1 CTA): 32 partitions of 256 keys per sequence and kv head, in runs of 32 (128
// CTAs), 2 x 4096 slots; a lone sequence one partition per CTA.
TEST(Planner, DeterministicWgPartials) {
  auto inputs = [](int seqs, int T) {
    Inputs in = deterministic_8k(4, 1, seqs, T);
    for (int& w : in.wg_ctas_per_sm) w = 1;
    in.wg_partials = true;
    return in;
  };
  for (const int T : {1, 4, 8, 16}) {
    const Inputs in = inputs(32, T);
    const Plan p = pl::make_plan(in);
    SCOPED_TRACE("T = " + std::to_string(T) + ": " + p.describe());
    check_plan(in, p);
    EXPECT_EQ(p.partition_tokens, 256);
    EXPECT_EQ(p.chunk_rows, 64);
    EXPECT_EQ(p.span, 32);
    EXPECT_EQ(p.ctas, 32 * 4);
    EXPECT_EQ(p.num_slots, 32 * 4 * 2 * 32);
    for (const WorkItem& w : p.items) {
      EXPECT_EQ(w.nt, T) << "one chunk per sequence";
      EXPECT_EQ(w.num_parts, 64);
      EXPECT_EQ(w.part, 256);
      EXPECT_EQ(w.slot % 64, 0) << "a run of every partition starts at the chunk's first slot";
    }
    for (const pl::MergeItem& m : p.merges) {
      EXPECT_EQ(m.num_parts, 64);
      EXPECT_EQ(m.part0, 0);
    }
    const Inputs alone = inputs(1, T);
    const Plan a = pl::make_plan(alone);
    check_plan(alone, a);
    EXPECT_EQ(a.span, 1) << "a lone sequence's partitions fit one wave";
    EXPECT_EQ(a.num_slots, 4 * 2 * 32);
  }
}

// Units (Inputs::fold_block): where a call's runs reach a block, the chunks of <= kFoldRows rows take runs of
// whole blocks (each item's first partition the chunk's or a block's first, its last the chunk's or a
// block's last) and one slot per (block, warpgroup) from the chunk's first block; the merge folds their
// units as partials (fold 0). Every other chunk keeps two slots per partition and every rule of the plan
// without units, its merge folding the units itself (fold = the block).
void check_units(const Inputs& in, const Plan& plan) {
  const int B = in.fold_block;
  EXPECT_EQ(plan.folded, plan.span >= B);
  std::vector<std::pair<int64_t, int64_t>> ranges;  // merges' slots
  for (const pl::MergeItem& m : plan.merges) {
    SCOPED_TRACE("merge seq " + std::to_string(m.seq) + " t0 " + std::to_string(m.t0) + " nt " + std::to_string(m.nt));
    ranges.push_back({m.slot, m.slot + int64_t{m.num_parts} * in.num_kv_heads});
    std::vector<WorkItem> its;
    for (const WorkItem& w : plan.items)
      if (w.seq == m.seq && w.t0 == m.t0) its.push_back(w);
    ASSERT_FALSE(its.empty());
    std::sort(its.begin(), its.end(), [](const WorkItem& a, const WorkItem& b) { return a.kv_begin < b.kv_begin; });
    const bool unit_chunk = plan.folded && m.nt * in.group <= pl::kFoldRows;
    EXPECT_EQ(m.fold, unit_chunk ? 0 : B);
    if (!unit_chunk) {
      EXPECT_EQ(m.num_parts % 2, 0);
      continue;
    }
    const int part = m.part, p0 = its.front().kv_begin / part;
    const int p1 = static_cast<int>(ceil_div(its.back().kv_end, part));
    EXPECT_EQ(its.front().kv_begin % part, 0);
    EXPECT_EQ(m.part0, 2 * (p0 / B));
    EXPECT_EQ(m.num_parts, 2 * (ceil_div(p1, B) - p0 / B));
    for (size_t i = 0; i < its.size(); ++i) {
      const WorkItem& w = its[i];
      SCOPED_TRACE(describe(w));
      EXPECT_EQ(w.part, part) << "a unit run names its partition size";
      EXPECT_EQ(w.num_parts, m.num_parts);
      EXPECT_EQ(w.slot, m.slot + 2 * (w.kv_begin / part / B - p0 / B)) << "a run's first unit slot";
      if (i > 0) {
        EXPECT_EQ(w.kv_begin, its[i - 1].kv_end) << "the runs cover the chunk's keys once";
        EXPECT_EQ(w.kv_begin % (B * part), 0) << "a run starts inside a block";
      }
    }
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 0; i < ranges.size(); ++i) {
    EXPECT_LE(ranges[i].second, plan.num_slots);
    if (i > 0) EXPECT_LE(ranges[i - 1].second, ranges[i].first) << "merges' slots overlap";
  }
}

TEST(Planner, RandomUnits) {
  int folded = 0;
  for (int i = 0; i < 800; ++i) {
    const uint64_t seed = base_seed() + 4000000 + static_cast<uint64_t>(i);
    std::mt19937_64 rng(seed);
    Inputs in = random_inputs(rng);
    in.deterministic = true;
    in.wg_partials = true;
    in.forced_partition = 0;
    in.fold_block = 8;
    in.group = std::min(in.group, pl::kMaxRows);
    SCOPED_TRACE("case seed " + std::to_string(seed) + ": " + describe(in));
    const Plan plan = pl::make_plan(in);
    SCOPED_TRACE(plan.describe());
    if (!plan.folded) check_plan(in, plan);
    check_units(in, plan);
    folded += plan.folded;
    if (HasFailure()) return;
  }
  std::printf("plans with units folded by their CTAs: %d of 800\n", folded);
  EXPECT_GT(folded, 0);
}

// The seed's 32 x 8k batch: runs of 32 partitions = 4 blocks, 8 unit slots per chunk and kv head instead of
// 64 partition slots; a lone sequence's merge folds its units from 64 slots.
TEST(Planner, DeterministicUnits) {
  for (const int T : {1, 4, 8, 16}) {
    Inputs in = deterministic_8k(4, 1, 32, T);
    for (int& w : in.wg_ctas_per_sm) w = 1;
    in.wg_partials = true;
    in.fold_block = 8;
    const Plan p = pl::make_plan(in);
    SCOPED_TRACE("T = " + std::to_string(T) + ": " + p.describe());
    check_units(in, p);
    EXPECT_TRUE(p.folded);
    EXPECT_EQ(p.span, 32);
    EXPECT_EQ(p.ctas, 32 * 4);
    for (const pl::MergeItem& m : p.merges) EXPECT_EQ(m.num_parts, T <= 8 ? 8 : 64);
    EXPECT_EQ(p.num_slots, 32 * 4 * (T <= 8 ? 8 : 64));
    in.past_lens.resize(1);
    in.tokens.resize(1);
    const Plan a = pl::make_plan(in);
    check_units(in, a);
    check_plan(in, a);
    EXPECT_FALSE(a.folded);
    for (const pl::MergeItem& m : a.merges) EXPECT_EQ(m.num_parts, 64);
  }
}

// Deterministic mode's partition size of a token: the least multiple of kDeterministicStep keys whose
// partitions fit a kv head's share of one wave; on the seed shape (Hk = 4, 132 SMs x 2) 256 / 512 / 2048
// keys at 8k / 32k / 128k.
TEST(Planner, DeterministicPartitionRule) {
  EXPECT_EQ(pl::deterministic_partition(8192, 4, 264), 256);
  EXPECT_EQ(pl::deterministic_partition(32768, 4, 264), 512);
  EXPECT_EQ(pl::deterministic_partition(131072, 4, 264), 2048);
  std::mt19937_64 rng(base_seed() + 2700000);
  auto uni = [&](int64_t a, int64_t b) { return std::uniform_int_distribution<int64_t>(a, b)(rng); };
  for (int i = 0; i < 20000; ++i) {
    const int64_t keys = uni(0, 1) ? uni(1, 5000) : uni(1, int64_t{1} << 24);
    const int hk = static_cast<int>(uni(1, 64));
    const int64_t wave = uni(1, 1200);
    const int part = pl::deterministic_partition(keys, hk, wave);
    const int64_t share = std::max<int64_t>(1, wave / hk);
    SCOPED_TRACE("keys " + std::to_string(keys) + " Hk " + std::to_string(hk) + " wave " + std::to_string(wave));
    ASSERT_EQ(part % pl::kDeterministicStep, 0);
    ASSERT_GE(part, pl::kDeterministicStep);
    ASSERT_LE(ceil_div(keys, part), share) << "part " << part << ": more partitions than the share";
    if (part > pl::kDeterministicStep)
      ASSERT_GT(ceil_div(keys, part - pl::kDeterministicStep), share) << "part " << part << " is not the least";
  }
}

// Every small shape at the edges of tiles, partitions and windows, exhaustively.
TEST(Planner, SmallShapesExhaustive) {
  for (int G : {1, 3, 8, 64})
    for (int window : {0, 1, 63, 64, 65, 130})
      for (int forced : {0, 64, 128, 192})
        for (int past = 0; past <= 260; past += (past < 10 || past % 64 > 60 || past % 64 < 3) ? 1 : 7)
          for (int T : {1, 2, 15, 16, 17, 21, 22, 64, 65, 130}) {
            Inputs in;
            in.past_lens = {past, 0, past / 2};
            in.tokens = {T, 1, 0};
            in.group = G;
            in.num_kv_heads = 2;
            in.sliding_window = window;
            in.num_sms = 3;
            in.forced_partition = forced;
            SCOPED_TRACE(describe(in));
            check_plan(in, pl::make_plan(in));
            if (HasFailure()) return;
          }
}

// An empty batch (every T == 0) plans nothing; group sizes outside [1, kMaxRows] are refused.
TEST(Planner, EmptyBatchAndBadGroup) {
  Inputs in;
  in.past_lens = {5, 0, 700};
  in.tokens = {0, 0, 0};
  const Plan p = pl::make_plan(in);
  EXPECT_TRUE(p.items.empty());
  EXPECT_TRUE(p.merges.empty());
  EXPECT_EQ(p.ctas, 0);
  EXPECT_EQ(p.num_slots, 0);
  for (int g : {0, -1, pl::kMaxRows + 1}) {
    Inputs bad;
    bad.past_lens = {3};
    bad.tokens = {1};
    bad.group = g;
    EXPECT_THROW(pl::make_plan(bad), std::invalid_argument) << "group " << g;
  }
}

}  // namespace

// The least partition (Inputs::min_partition, tuning::min_partition): one 8k decode at Hk = 4 on 132
// SMs x 2 CTAs takes 128-key partitions (256 CTAs fit the wave) by default and 256 with min_partition
// 256 (128 CTAs); a context shorter than the least partition stays one partition (its keys rounded up to
// a multiple of kBlockKV).
TEST(Planner, MinPartitionRaisesTheOneWaveChoice) {
  Inputs in;
  in.group = 8;
  in.num_kv_heads = 4;
  in.num_sms = 132;
  in.ctas_per_sm = 2;
  in.past_lens = {8191};
  in.tokens = {1};
  EXPECT_EQ(make_plan(in).partition_tokens, 128);
  EXPECT_EQ(make_plan(in).ctas, 256);
  in.min_partition = 256;
  EXPECT_EQ(make_plan(in).partition_tokens, 256);
  EXPECT_EQ(make_plan(in).ctas, 128);
  in.past_lens = {100};
  EXPECT_EQ(make_plan(in).partition_tokens, 128);
  EXPECT_EQ(make_plan(in).ctas, 4);
  in.past_lens = {32767};  // the wave rule already takes more: 512 keys
  EXPECT_EQ(make_plan(in).partition_tokens, 512);
}

// A call's wave counts the least occupancy of its chunks' kernels (Inputs::fwd_ctas_per_sm): D = 64 u8
// decodes run 4 CTAs per SM and their 32-row verifies' kernel 3, so a verify's partitions fit 3 per SM
// (344 CTAs at 32k, as before the decodes' 4), while a decode's keep the wave of 4.
TEST(Planner, WaveCountsTheChunksKernels) {
  Inputs in;
  in.group = 4;
  in.num_kv_heads = 4;
  in.num_sms = 132;
  in.ctas_per_sm = 4;
  in.min_partition = 256;
  in.past_lens = {32760};
  auto plan_with = [&](int tokens, int fwd1) {
    in.tokens = {tokens};
    in.fwd_ctas_per_sm[0] = 4;
    in.fwd_ctas_per_sm[1] = fwd1;
    const Plan plan = make_plan(in);
    return std::make_pair(plan.partition_tokens, plan.ctas);
  };
  EXPECT_EQ(plan_with(8, 3), std::make_pair(384, int64_t{344}));  // 32 rows: the wave of 3 per SM
  EXPECT_EQ(plan_with(8, 0), std::make_pair(256, int64_t{512}));  // (unknown: ctas_per_sm's 4)
  EXPECT_EQ(plan_with(1, 3), std::make_pair(256, int64_t{512}));  // a decode keeps its own 4
  in.past_lens = {32760, 32760};  // both in one call: the least
  in.tokens = {1, 8};
  EXPECT_LE(make_plan(in).ctas, int64_t{132} * 3);
  in.wg_ctas_per_sm[1] = 1;  // the verify alone on the Hopper kernel: its own 1 per SM
  in.tokens = {8};
  in.past_lens = {32760};
  EXPECT_LE(make_plan(in).ctas, int64_t{132});
  in.past_lens = {32760, 32760};  // beside a decode on fwd_kernel: the decode's 4 (the Hopper chunk not counted)
  in.tokens = {1, 8};
  EXPECT_GT(make_plan(in).ctas, int64_t{132} * 3);
}

// The short-partition wave (Inputs::short_ctas_per_sm, tuning::short_wave_ctas_per_sm): D = 64 one-byte
// decodes at Hk = 4 on 132 SMs x 3 CTAs. At 32k the one-wave partition (384 keys, 344 CTAs) is under
// 1024 keys, so the wave counts 2 per SM: 512 keys, 256 CTAs. At 128k it is 1344 keys (392 CTAs) and
// stays; at 8k both waves give the least partition, 256 keys.
TEST(Planner, ShortPartitionsTakeTheShortWave) {
  Inputs in;
  in.group = 4;
  in.num_kv_heads = 4;
  in.num_sms = 132;
  in.ctas_per_sm = 3;
  in.min_partition = 256;
  in.tokens = {1};
  auto plan_at = [&](int past) {
    in.past_lens = {past};
    const Plan plan = make_plan(in);
    return std::make_pair(plan.partition_tokens, plan.ctas);
  };
  EXPECT_EQ(plan_at(32767), std::make_pair(384, int64_t{344}));
  in.short_ctas_per_sm = 2;
  in.short_wave_keys = 1024;
  EXPECT_EQ(plan_at(32767), std::make_pair(512, int64_t{256}));
  EXPECT_EQ(plan_at(131071), std::make_pair(1344, int64_t{392}));
  EXPECT_EQ(plan_at(8191), std::make_pair(256, int64_t{128}));
  in.deterministic = true;  // deterministic mode sizes partitions by the row (the backend passes 0 there)
  in.short_ctas_per_sm = 0;
  in.past_lens = {32767};
  EXPECT_EQ(make_plan(in).partition_tokens, pl::deterministic_partition(32768, 4, 396));
}
