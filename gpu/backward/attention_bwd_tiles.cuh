// Shared-memory tiles of the backward (fused.cu): the swizzled tile layouts and the cp.async
// tile loader. Needs attention_common.cuh,
// WGMMA and the source's constants kThreads, kChunks, kRowBytes defined before
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
}  // namespace
