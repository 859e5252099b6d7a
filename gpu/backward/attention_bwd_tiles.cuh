// Shared-memory tiles of the backward (fused.cu): the swizzled tile layouts, the cp.async
// tile loader and the mask of a step's Sᵀ. Needs attention_common.cuh,
// WGMMA and the source's constants kThreads, kChunks, kRowBytes, kSAtoms, kBlockN defined before
// it is included (NVRTC gets it as a named header; nvcc finds it beside the source).

#pragma once

namespace {

// Byte offset of 16-byte chunk `chunk` of row `row`, rows RowBytes apart, chunk c stored at
// c ^ (row & 7): ldmatrix reads of 8 rows hit 8 different bank groups.
template <int RowBytes>
__device__ __forceinline__ unsigned swizzled(int row, int chunk) {
  return row * RowBytes + ((chunk ^ (row & 7)) << 4);
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a [Rows, HEAD_DIM] tile (see the header).
template <int Rows>
__device__ __forceinline__ unsigned tile_offset(int row, int chunk) {
#if WGMMA
  return (chunk >> 3) * (Rows * 128) + swizzled<128>(row, chunk & 7);
#else
  return swizzled<kRowBytes>(row, chunk);
#endif
}

// Copy rows [row0, row0 + Rows) of a [seq, HEAD_DIM] slice into a tile; rows past `seq` are
// zero-filled.
template <int Rows>
__device__ __forceinline__ void load_tile(unsigned tile, const unsigned short* slice,
                                          long long stride, int row0, int seq) {
  constexpr int kRowsPerPass = kThreads / kChunks;
  const int tid = fresh_thread();
  const int row = tid / kChunks;
  const int chunk = tid % kChunks;
#pragma unroll
  for (int i = 0; i < Rows / kRowsPerPass; ++i) {
    const int r = row + i * kRowsPerPass;
    const bool inside = row0 + r < seq;
    copy_async_16(tile + tile_offset<Rows>(r, chunk),
                  inside ? slice + (row0 + r) * stride + chunk * 8 : slice, inside ? 16 : 0);
  }
}

// Set masked scores of Sᵀ to -inf: inactive layout blocks (flag bit 0), keys past the query's
// causal limit (bit 1), keys at or past seq_k (bit 2).
__device__ __forceinline__ void apply_mask(float (&s)[kSAtoms][4], const Int4& entry,
                                           int key_row0, int k_tile0, int q_tile0,
                                           int sub_rows_log2, int sub_cols_log2,
                                           int causal_offset, int seq_k) {
  const int lane = fresh_lane();
  const unsigned long long word = mask_word(entry);
  const bool use_bits = entry.y & kFlagPartial;
  const bool causal = entry.y & kFlagDiagonal;
  const bool bounded = entry.y & kFlagKeyBound;
  const int n_sub_cols = kBlockN >> sub_cols_log2;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = key_row0 + half * 8 + (lane >> 2);  // key within the tile
    const int key = k_tile0 + row;
    const unsigned long long column_bits = use_bits ? word >> (row >> sub_cols_log2) : ~0ull;
#pragma unroll
    for (int nj = 0; nj < kSAtoms; ++nj) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int column = nj * 8 + 2 * (lane & 3) + e;  // query within the tile
        const bool block_on = (column_bits >> ((column >> sub_rows_log2) * n_sub_cols)) & 1ull;
        const bool keep = block_on && (!causal || key <= q_tile0 + column + causal_offset) &&
                          (!bounded || key < seq_k);
        if (!keep) s[nj][2 * half + e] = negative_infinity();
      }
    }
  }
}
}  // namespace
