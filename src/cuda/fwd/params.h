// The device-side parameters of one launch (plain struct, passed by value as a __grid_constant__).
#pragma once

#include <cstdint>

#include "core/planner.h"

namespace pagedattn {
namespace cuda {

enum KvKind : int { kKvF16 = 0, kKvBF16 = 1, kKvU8 = 2, kKvF8 = 3 };  // kKvF8: e4m3 codes, f32 scale per kv head
enum IoType : int { kIoF32 = 0, kIoF16 = 1, kIoBF16 = 2 };  // dtype of query / key / value / out

struct MergeRow {       // one query row (token, head) whose partitions the merge kernel combines
  int32_t token;        // global query row
  int32_t head;         // query head
  int32_t slot;         // partial slot of partition 0 of this row's kv head
  int32_t row;          // row within the slot (0..slot_rows-1)
  int32_t num_parts;
  int32_t part0;        // 0, or in deterministic mode the absolute index of the chunk's first partition:
                        // merge_kernel folds partition p in group (part0 + p) % groups, so a partition's
                        // group (and the fold order) does not depend on where its chunk starts
  int32_t fold;         // planner::MergeItem::fold: 0, or the block size of the units the merge folds from
                        // the row's slots (2 per partition) before its groups (merge.cuh, load_unit)
};

struct ScoreTile {      // 32 key positions of one sequence for the scores kernel
  int32_t seq;
  int32_t j0;           // first key position
  int64_t base;         // offset of the sequence's first key in `scores`
  int32_t t_lo;         // first new token whose weights are summed (score_aggregation_window)
};

struct FwdParams {
  const void* q;              // [num_tokens, H*D]  io dtype
  void* out;                  // [num_tokens, H*D]  io dtype
  const void* k_new;          // [num_tokens, Hk*D] io dtype, or nullptr (no write-in)
  const void* v_new;          // [num_tokens, Hk*D] io dtype, or nullptr
  void* k_cache;              // [num_blocks, Hk, block_size, D]
  void* v_cache;              // [num_blocks, Hk, block_size, D]
  uint16_t* k_scale;          // u8 only: [num_blocks, Hk, block_size] f16 bits
  uint16_t* k_min;
  uint16_t* v_scale;
  uint16_t* v_min;
  const float* k_head_scale;  // fp8 only: [Hk] or [1] f32 (element hk * k_head_scale_stride)
  const float* v_head_scale;
  int k_head_scale_stride;    // 1 ([Hk] scales) or 0 (one scale)
  int v_head_scale_stride;
  const int32_t* past_lens;   // [num_seqs]
  const int32_t* subseq_begins;      // [num_seqs+1]
  const int32_t* block_indices;      // [n]
  const int32_t* block_indices_begins;  // [num_seqs+1]
  const uint8_t* qq_bias;     // [sum T^2] or nullptr
  const int32_t* qq_bias_begins;     // [num_seqs+1] or nullptr
  const float* alibi;         // [H] or nullptr
  const float* sinks;         // [H] or nullptr
  const planner::WorkItem* items;
  const MergeRow* merge_rows;
  float* ws_o;                // [num_slots, slot_rows, D] partial outputs (unnormalised, relative to ws_ml.m);
                              // with ws_half, __half [num_slots, slot_rows, D] of O / l (io.cuh, store_partial4)
  float* ws_ml;               // [num_slots, slot_rows, 2] partial (reference max in log2 units, sum)
  // scores and lse outputs (all null when not requested)
  float* scores;              // [sum ctx] f32
  float* row_stats;           // [num_tokens * H, 2] final (reference max in log2 units, denominator incl. sink)
                              // (scores only)
  float* lse;                 // [num_tokens * H] Params::lse, or nullptr
  const ScoreTile* score_tiles;
  int H, Hk, G, D;
  int Dk;                     // the call's key head size: row stride of queries and keys
  int Dv;                     // its value head size (<= Dk): row stride of values and out. D, the
                              // kernels' tile width, pads Dk up to 64, 128 or 256 (zero columns)
  int block_size_log2;
  int sliding_window;
  float scale_log2;           // softmax scale * log2(e)
  int io_dtype;               // IoType
  int slot_rows;              // rows per partial slot (16 * the plan's widest row-tile variant)
  int chunk_rows;             // the planner's chunking rule: a sequence is cut into chunks iff T*G > it
                              // (deterministic mode also cuts at partition-size changes: write_all)
  int write_all;              // 1: the write kernel writes every sequence's rows and no CTA writes in
                              // (deterministic mode cut a short sequence where its partition size changes)
  int ws_half;                // 1: partials as f16 O / l (f16, u8 and fp8 caches: backend.cu says why they fit)
  int fold_block;             // planner::Plan::folded: the block size (Inputs::fold_block) the key-split kernel's
                              // own form folds its runs into, for chunks of <= 32 rows; else 0
  int pdl_early_reads;        // cache rows before past_len may be read before griddepcontrol.wait
  uint32_t u8_exp_byte;       // 0x64, the high byte of the f16 1024 + code (see fwd_kernel's value step)
  // fwd_kernel's softmax reference moves only when a slice's max passes it by more than this (log2
  // units), so P <= 2^stale_log2 (0: the exact running max). f16/bf16 caches: 8 (P <= 256 in the P V
  // MMA's f16/bf16 operand). u8: 6; P * vscale * 2^E is rounded to f16, and the kernels choose E so
  // that the scales read back below 2^9 (u8_value_exp), so every product stays below 2^15.
  float stale_log2;
};

}  // namespace cuda
}  // namespace pagedattn
