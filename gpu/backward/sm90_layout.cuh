// The compile-time shapes of gpu/backward/sm90.cu's CTA and where its buffers lie in shared
// memory (that file's header says what each holds and who reads it).
//
// Tiles in shared memory: 64-element column blocks of 128-byte rows, 128-byte swizzle, as TMA
// writes them (rows past the sequence ends zero-filled; padded query rows have lse2 = +inf, so P
// is 0 there). Shared memory: K | V | Q stages | dO stages | dSᵀ x 2 | dQ staging x 2 | rows
// (lse2, Δ) stages | token slots (TOKENS) | mbarriers.

#pragma once

#include "token_mask.cuh"  // token_tile_bytes

namespace {

constexpr int kHeadDim = HEAD_DIM;
constexpr int kStages = STAGES;
constexpr int kDqMode = DQ_MODE;
constexpr bool kDqFirst = DQ_FIRST;
constexpr bool kDqWriter = DQ_WRITER;
constexpr int kBlockM = BLOCK_M;  // queries per step: 64, or 128 at D = 64
constexpr int kBlockN = 128;  // keys per CTA
constexpr int kThreads = 384;
constexpr int kSAtoms = kBlockM / 8;   // 8-query atoms of Sᵀ
constexpr int kOAtoms = kHeadDim / 8;  // 8-dim atoms of dK, dV
constexpr int kDqBlocks = kHeadDim / 64;
constexpr int kDqRows = 64;  // query rows of a dQ part (sm90_dq_parts.cuh)
// Both warpgroups compute a dQ part every step (of their own head dims at D = 128, of their own
// queries at 128-row steps); else they take turns by step.
constexpr bool kDqEveryStep = kDqBlocks == 2 || kBlockM == 2 * kDqRows;
// At 128-row steps Sᵀ and dPᵀ take 64 + 64 registers a thread: dV is issued once dSᵀ is computed
// (Pᵀ packed after its last fp32 read), not while it is.
constexpr bool kLateDv = kBlockM == 128;
// ... and their first k-steps only write them (wgmma_ss_fresh), so that their registers are free
// between steps (at 64-row steps the form that reads them measured faster).
constexpr bool kFreshScores = kBlockM == 128;
constexpr unsigned kQBytes = kBlockM * kHeadDim * 2;
constexpr unsigned kKVBytes = kBlockN * kHeadDim * 2;
constexpr unsigned kDsBytes = kBlockN * kBlockM * 2;
constexpr unsigned kDqStageBytes = kDqRows * 64 * 4;
constexpr unsigned kRowsBytes = 2 * kBlockM * 4;  // lse2 then Δ of one step
constexpr bool kTokens = TOKENS;
constexpr unsigned kTokenBytes = kTokens ? token_tile_bytes<kBlockN, kSAtoms>() : 0;  // a slot
// setmaxnreg: 168 at entry (one CTA of 384 threads per SM), the producer keeps 24 and each
// consumer gets (168 · 3 - 24) / 2 = 240.
constexpr int kProducerRegisters = 24;
constexpr int kConsumerRegisters = 240;

static_assert(kHeadDim == 64 || kHeadDim == 128, "HEAD_DIM must be 64 or 128");
static_assert(kBlockM == 64 || (kBlockM == 128 && kHeadDim == 64), "BLOCK_M 64, or 128 at D 64");
static_assert(kStages == 2 || kStages == 3, "STAGES must be 2 or 3");
static_assert(kDqMode >= 0 && kDqMode <= 2, "DQ_MODE must be 0, 1 or 2");
static_assert(!kDqWriter || kDqMode == 2, "DQ_WRITER needs DQ_MODE 2");
static_assert(8 * (5 + 2 * kStages) <= 128 && 128 + 16 * kStages <= 256,
              "mbarriers and entry slots fit BARRIER_BYTES (256, sm90.py)");

struct Shared {
  unsigned k, v, q, d_o, ds, dq, rows, tokens, bars;
  __device__ Shared(unsigned base) {
    k = base;
    v = k + kKVBytes;
    q = v + kKVBytes;
    d_o = q + kStages * kQBytes;
    ds = d_o + kStages * kQBytes;
    dq = ds + (kDqMode ? 2 * kDsBytes : 0);
    rows = dq + (kDqMode == 2 ? 2 * kDqStageBytes : 0);
    tokens = rows + kStages * kRowsBytes;
    bars = tokens + kStages * kTokenBytes;
  }
  __device__ unsigned q_tile(int stage) const { return q + stage * kQBytes; }
  __device__ unsigned do_tile(int stage) const { return d_o + stage * kQBytes; }
  __device__ unsigned ds_tile(int buffer) const { return ds + buffer * kDsBytes; }
  __device__ unsigned dq_stage(int group) const { return dq + group * kDqStageBytes; }
  __device__ unsigned rows_of(int stage) const { return rows + stage * kRowsBytes; }
  __device__ unsigned token_slot(int stage) const { return tokens + stage * kTokenBytes; }
  __device__ unsigned kv_full() const { return bars; }
  __device__ unsigned q_full(int stage) const { return bars + 8 * (1 + stage); }
  __device__ unsigned q_empty(int stage) const { return bars + 8 * (1 + kStages + stage); }
  // DQ_WRITER: consumer warpgroup `group`'s staging tile is written (4 warp arrivals) / read by
  // its reduction (1 arrival, the writer's).
  __device__ unsigned dq_full(int group) const { return bars + 8 * (1 + 2 * kStages + group); }
  __device__ unsigned dq_empty(int group) const { return bars + 8 * (3 + 2 * kStages + group); }
  // A step's table entry, stored by the producer with its Q and dO (within BARRIER_BYTES)
  __device__ unsigned entry_slot(int stage) const { return bars + 128 + 16 * stage; }
};

}  // namespace
