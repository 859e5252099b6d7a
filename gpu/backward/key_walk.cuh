// The grid of the Hopper backward (sm90.cu): which key tile, batch element, kv head and query
// heads a CTA owns (KeyTile), and the query steps it walks (KeyWalk): a key tile's lists
// [query heads or 1, n_k_tiles] of (first entry, count) name, per query head, the entries of the
// transposed table that attend the tile. fused.cu walks the same lists with its own find_step,
// whose four words of state keep its D = 128 build free of spills.

#pragma once

#include "params.cuh"  // HopperBackwardParams

namespace {

// The walk over query heads (head, end_head) of a kv group, for each the entries of its list for
// one key tile, in order. Start it with `over`; each `next` moves to the following step.
struct KeyWalk {
  int head, end_head, first, count, n;
  __device__ static KeyWalk over(int first_head, int end_head) {
    return KeyWalk{first_head - 1, end_head, 0, 0, 0};
  }
  // Move to the next step; false when the walk is over.
  __device__ bool next(const int2* lists, int shared_layout, int n_k_tiles, int k_tile) {
    ++n;
    while (n >= count) {
      if (++head >= end_head) return false;
      const int2 list = __ldg(lists + (shared_layout ? 0 : head) * n_k_tiles + k_tile);
      first = list.x;
      count = list.y;
      n = 0;
    }
    return true;
  }
  __device__ int entry() const { return first + n; }
};

// A Hopper backward CTA's key tile, batch element, kv head and query heads. With key_tiles_inner
// the grid walks the key tiles (in the table's order) of one (batch, kv head, split) before the
// next, so the CTAs on the GPU at once share that head's Q, dO and dQ in L2; else it walks every
// (batch, kv head, split) of a key tile before the next key tile.
struct KeyTile {
  int k_tile, b, kv_head, split, first_head, end_head;
  // The tile of block `block` (blockIdx.x, or fresh_block() to derive it again after a loop).
  __device__ KeyTile(const HopperBackwardParams& p, int block) {
    const int per_tile = p.batch * p.kv_heads * p.n_splits;
    const int tile_index = p.key_tiles_inner ? block % p.n_k_tiles : block / per_tile;
    k_tile = __ldg(p.order + tile_index);
    int rest = p.key_tiles_inner ? block / p.n_k_tiles : block % per_tile;
    b = rest % p.batch;
    rest /= p.batch;
    split = rest % p.n_splits;
    kv_head = rest / p.n_splits;
    const int heads = p.kv_group / p.n_splits;
    first_head = kv_head * p.kv_group + split * heads;
    end_head = first_head + heads;
  }
  __device__ KeyWalk walk() const { return KeyWalk::over(first_head, end_head); }
};

}  // namespace
