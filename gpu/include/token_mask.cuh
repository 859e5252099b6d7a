// Token masks of partial tiles, shared by the forward and backward kernels (the table side is
// gpu/partials.py). A table entry flagged kFlagTokens names, in its third word, one token tile:
// `Rows` rows of `RowWords` 32-bit words, one row per accumulator row of the tile (forward:
// queries; backward: keys), bit c % 32 of word c / 32 for accumulator column c; 1 = attended.
// The tile's mask holds everything (layout blocks, their token bits, the causal limit, seq_k),
// so nothing else is applied to such a tile.
//
// A kernel brings a token tile's words into shared memory with the tile's K/V (or Q/dO) copies
// (`copy_token_tile`, or the Hopper producer's bulk copy), then each thread reads its rows'
// words with one vector load per row (`load_token_rows`; rows are 4·RowWords bytes apart, so a
// warp's 8 rows are contiguous and conflict-free) and applies them (`apply_token_rows`). The
// Hopper forward may read them from global memory instead (`load_token_rows_global`, issued a
// tile ahead). The words are shifted to the lane's columns only where they are applied, so a
// load is waited on at its first use.
//
// Accumulator layout (mma.sync m16n8 atoms, wgmma m64nN accumulators alike): for a 16-row atom
// and 8-column atom j this lane holds rows lane/4 and lane/4 + 8 (half 0 and 1) and columns
// 8j + 2·(lane % 4) + e, at s[j][2·half + e]. Needs attention_common.cuh.

#pragma once

namespace {

// Token words per row for a tile of NS 8-column atoms.
template <int NS>
__host__ __device__ constexpr int token_row_words() {
  return (NS + 3) / 4;
}

// Bytes of one token tile of `Rows` rows (a multiple of 16: bulk and cp.async copies).
template <int Rows, int NS>
__host__ __device__ constexpr unsigned token_tile_bytes() {
  return Rows * token_row_words<NS>() * 4;
}

// The first row of an entry's token tile in the Hopper kernels' map of the table's words: rows
// of 32 words, a tile `token_tile_bytes / 128` of them (`words_map` in
// gpu/forward/tensor_maps.py; the host encodes the box so).
template <int Rows, int NS>
__device__ __forceinline__ int token_tile_map_row(const Int4& entry) {
  static_assert(token_tile_bytes<Rows, NS>() % 128 == 0, "token tiles are whole map rows");
  return entry.z * static_cast<int>(token_tile_bytes<Rows, NS>() / 128);
}

// The token tile of an entry flagged kFlagTokens, in a table of tiles of `Rows` rows.
template <int Rows, int NS>
__device__ __forceinline__ const unsigned* token_tile(const unsigned* words, const Int4& entry) {
  return words + static_cast<long long>(entry.z) * (Rows * token_row_words<NS>());
}

// This lane's words of one 16-row atom's rows (half 0 and 1), as stored: bit c of word w is
// column 32w + c.
template <int NS>
struct TokenRows {
  unsigned word[2][token_row_words<NS>()];
};

// Copy a token tile into shared memory at `slot` (16-byte aligned) with cp.async, by the
// threads `tid` of [0, Threads); the copy joins the caller's next commit group.
template <int Rows, int NS, int Threads>
__device__ __forceinline__ void copy_token_tile(unsigned slot, const unsigned* tile, int tid) {
  constexpr int kChunks = token_tile_bytes<Rows, NS>() / 16;
  static_assert(token_tile_bytes<Rows, NS>() % 16 == 0, "token tiles copy in 16-byte chunks");
#pragma unroll
  for (int pass = 0; pass < (kChunks + Threads - 1) / Threads; ++pass) {
    const int chunk = pass * Threads + tid;
    if (chunk < kChunks) copy_async_16(slot + chunk * 16, tile + chunk * 4);
  }
}

// One row's words from shared memory (asm volatile: never moved above the wait that made them
// visible), in one vector load where the row is 8 or 16 bytes.
template <int W>
__device__ __forceinline__ void load_shared_row(unsigned address, unsigned (&word)[W]) {
  if constexpr (W == 4) {
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(word[0]), "=r"(word[1]), "=r"(word[2]), "=r"(word[3])
                 : "r"(address)
                 : "memory");
  } else if constexpr (W == 2) {
    asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n"
                 : "=r"(word[0]), "=r"(word[1])
                 : "r"(address)
                 : "memory");
  } else {
#pragma unroll
    for (int w = 0; w < W; ++w) {
      asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(word[w]) : "r"(address + 4 * w) : "memory");
    }
  }
}

// The words of rows row0 + lane/4 and row0 + 8 + lane/4 of the token tile at shared `slot`.
template <int NS>
__device__ __forceinline__ TokenRows<NS> load_token_rows(unsigned slot, int row0) {
  constexpr int kWords = token_row_words<NS>();
  const int lane = fresh_lane();
  TokenRows<NS> rows;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    load_shared_row(slot + (row0 + half * 8 + (lane >> 2)) * (kWords * 4), rows.word[half]);
  }
  return rows;
}

// The same rows of a token tile in global memory, through the read-only path.
template <int NS>
__device__ __forceinline__ TokenRows<NS> load_token_rows_global(const unsigned* tile, int row0) {
  constexpr int kWords = token_row_words<NS>();
  const int lane = fresh_lane();
  TokenRows<NS> rows;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const unsigned* row = tile + (row0 + half * 8 + (lane >> 2)) * kWords;
    if constexpr (kWords == 4) {
      const uint4 value = __ldg(reinterpret_cast<const uint4*>(row));
      rows.word[half][0] = value.x, rows.word[half][1] = value.y;
      rows.word[half][2] = value.z, rows.word[half][3] = value.w;
    } else if constexpr (kWords == 2) {
      const uint2 value = __ldg(reinterpret_cast<const uint2*>(row));
      rows.word[half][0] = value.x, rows.word[half][1] = value.y;
    } else {
#pragma unroll
      for (int w = 0; w < kWords; ++w) rows.word[half][w] = __ldg(row + w);
    }
  }
  return rows;
}

// Set the scores of one 16-row atom to -inf where its token rows say "not attended". Each word
// is shifted once by 2·(lane % 4), so that bit 8·(j % 4) + e is column 8j + 2·(lane % 4) + e
// (ptxas reads two such bits into predicates at a time, R2P, and selects).
template <int NS>
__device__ __forceinline__ void apply_token_rows(float (&s)[NS][4], const TokenRows<NS>& rows) {
  const int shift = 2 * (fresh_lane() & 3);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
#pragma unroll
    for (int w = 0; w < token_row_words<NS>(); ++w) {
      const unsigned word = rows.word[half][w] >> shift;
#pragma unroll
      for (int nj = 4 * w; nj < NS && nj < 4 * w + 4; ++nj) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const bool keep = (word >> ((nj & 3) * 8 + e)) & 1u;
          if (!keep) s[nj][2 * half + e] = negative_infinity();  // a select: no branch
        }
      }
    }
  }
}

}  // namespace
