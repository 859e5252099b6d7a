// How gpu/backward/sm90.cu's consumer warpgroups add their dQ parts to dq_acc (its header says
// what each DQ_MODE does): fp32 atomics, staged tiles reduced by the consumer itself, or staged
// tiles reduced by writer warps of the producer warpgroup (DQ_WRITER).
//
// A dQ part is the 64 x 64 product of one warpgroup in one step: kDqRows query rows (the step's
// 64, or at 128-row steps the warpgroup's half of them) by head dims [64 block, +64).

#pragma once

#include "attention_bwd_scores.cuh"  // add_pair
#include "hopper.cuh"
#include "key_walk.cuh"
#include "params.cuh"
#include "sm90_layout.cuh"
#include "wgmma.cuh"  // fence_async_proxy

namespace {

// The 64-row tile of dq_acc that warpgroup `group` adds to at query tile `q_tile` of a step.
__device__ __forceinline__ int dq_rows_tile(int q_tile, int group) {
  return kBlockM == 2 * kDqRows ? 2 * q_tile + group : q_tile;
}

// The 64 x 64 tile of dq_acc (DQ_MODE 2) that holds rows of 64-row tile `rows_tile`, head dims
// [64 block, +64) of query head `head` of batch element `b`.
__device__ __forceinline__ long long dq_tile(const HopperBackwardParams& p, int b, int head,
                                             int rows_tile, int block) {
  return ((static_cast<long long>(b) * p.q_heads + head) * (p.seq_q_pad / kDqRows) + rows_tile) *
             kDqBlocks + block;
}

// Thread `t` of a warpgroup stores its dQ accumulators (times scale) in thread order into the
// staging tile at `staged`: float4 j·128 + t holds atom j.
__device__ __forceinline__ void store_dq_part(const HopperBackwardParams& p, unsigned char* staged,
                                              float (&dq)[8][4], int t) {
  float4* tile = reinterpret_cast<float4*>(staged);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    tile[j * 128 + t] = float4{p.scale * dq[j][0], p.scale * dq[j][1], p.scale * dq[j][2],
                               p.scale * dq[j][3]};
  }
}

// Add this warpgroup's dQ part (rows of 64-row tile `rows_tile`, head dims [64 block, +64)) to
// dq_acc; `step` is the walk's step.
__device__ __forceinline__ void add_dq(const HopperBackwardParams& p, const Shared& sh,
                                       unsigned char* smem, float (&dq)[8][4], int group,
                                       int b, int head, int rows_tile, int block, unsigned step) {
  const int lane = fresh_lane();
  if (kDqMode == 1) {
    float* slice = p.dq_acc + (static_cast<long long>(b) * p.q_heads + head) * p.seq_q * kHeadDim;
    const int warp_row0 = rows_tile * kDqRows + 16 * ((fresh_thread() >> 5) & 3);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = warp_row0 + half * 8 + (lane >> 2);
      if (row < p.seq_q) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          add_pair(slice + static_cast<long long>(row) * kHeadDim + block * 64 + j * 8 +
                       2 * (lane & 3),
                   p.scale * dq[j][2 * half], p.scale * dq[j][2 * half + 1]);
        }
      }
    }
  } else if (kDqMode == 2 && kDqWriter) {  // staged here; the writer warp reduces it
    const unsigned use = kDqEveryStep ? step : step >> 1;  // this warpgroup's dQ count
    barrier_wait(sh.dq_empty(group), (use & 1) ^ 1);  // a fresh barrier counts as read
    store_dq_part(p, smem + (sh.dq_stage(group) - sh.k), dq, fresh_thread() - 128 * (group + 1));
    fence_async_proxy();  // the copy engine reads what these stores wrote
    __syncwarp();
    if (lane == 0) barrier_arrive(sh.dq_full(group));
  } else if (kDqMode == 2) {
    const int t = fresh_thread() - 128 * (group + 1);  // thread within the warpgroup
    const unsigned stage = sh.dq_stage(group);
    if (t == 0) bulk_wait_read<0>();  // the previous reduction has read the staging tile
    named_sync(2 + group, 128);
    store_dq_part(p, smem + (stage - sh.k), dq, t);
    fence_async_proxy();  // the copy engine reads what these stores wrote
    named_sync(2 + group, 128);
    if (t == 0) {
      bulk_reduce_add(p.dq_acc + dq_tile(p, b, head, rows_tile, block) * (kDqStageBytes / 4),
                      stage, kDqStageBytes);
      bulk_commit();
    }
  }
}

// DQ_WRITER: lane 0 of producer warp 1 + `group` adds each staged dQ part of consumer warpgroup
// `group` to dq_acc with one bulk reduction, so that consumers only wait when they are about to
// overwrite a tile it has not read yet.
__device__ __forceinline__ void write_dq(const HopperBackwardParams& p, const Shared& sh,
                                         const KeyTile& tile, int group) {
  KeyWalk walk = tile.walk();
  bool have = walk.next(p.lists, p.shared_layout, p.n_k_tiles, tile.k_tile);
  for (unsigned n = 0, use = 0; have; ++n) {
    if (kDqEveryStep || (n & 1) == static_cast<unsigned>(group)) {
      const Int4 entry = load_entry(p.entries + walk.entry());
      barrier_wait(sh.dq_full(group), use & 1);
      const long long at = dq_tile(p, tile.b, walk.head, dq_rows_tile(entry.x, group),
                                   kDqBlocks == 2 ? group : 0);
      bulk_reduce_add(p.dq_acc + at * (kDqStageBytes / 4), sh.dq_stage(group), kDqStageBytes);
      bulk_commit();
      bulk_wait_read<0>();
      barrier_arrive(sh.dq_empty(group));
      ++use;
    }
    have = walk.next(p.lists, p.shared_layout, p.n_k_tiles, tile.k_tile);
  }
  bulk_wait<0>();
}

}  // namespace
