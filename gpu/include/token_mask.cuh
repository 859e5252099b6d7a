// Token masks of partial tiles, shared by the forward and backward kernels (the table side is
// gpu/partials.py). A table entry flagged kFlagTokens names, in its third word, one token tile:
// `Rows` rows of `RowWords` 32-bit words, one row per accumulator row of the tile (forward:
// queries; backward: keys), bit c % 32 of word c / 32 for accumulator column c; 1 = attended.
// The tile's mask holds everything (layout blocks, their token bits, the causal limit, seq_k),
// so nothing else is applied to such a tile. Read through the read-only path.
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

// The token tile of an entry flagged kFlagTokens, in a table of tiles of `Rows` rows.
template <int Rows, int NS>
__device__ __forceinline__ const unsigned* token_tile(const unsigned* words, const Int4& entry) {
  return words + static_cast<long long>(entry.z) * (Rows * token_row_words<NS>());
}

// This lane's words of one 16-row atom's rows (half 0 and 1), shifted by 2·(lane % 4) so that
// bit 8·(j % 4) + e of word j / 4 is its column 8j + 2·(lane % 4) + e.
template <int NS>
struct TokenRows {
  unsigned word[2][token_row_words<NS>()];
};

// Load the words of rows row0 + lane/4 and row0 + 8 + lane/4 of `tile`.
template <int NS>
__device__ __forceinline__ TokenRows<NS> load_token_rows(const unsigned* tile, int row0) {
  constexpr int kWords = token_row_words<NS>();
  const int lane = fresh_lane();
  TokenRows<NS> rows;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const unsigned* row = tile + (row0 + half * 8 + (lane >> 2)) * kWords;
#pragma unroll
    for (int w = 0; w < kWords; ++w) rows.word[half][w] = __ldg(row + w) >> (2 * (lane & 3));
  }
  return rows;
}

// Set the scores of one 16-row atom to -inf where its token rows say "not attended".
template <int NS>
__device__ __forceinline__ void apply_token_rows(float (&s)[NS][4], const TokenRows<NS>& rows) {
#pragma unroll
  for (int nj = 0; nj < NS; ++nj) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const bool keep = (rows.word[half][nj >> 2] >> ((nj & 3) * 8 + e)) & 1u;
        if (!keep) s[nj][2 * half + e] = negative_infinity();  // a select: no branch
      }
    }
  }
}

// Both steps for the atom whose first row in the tile is `row0`.
template <int NS>
__device__ __forceinline__ void apply_token_mask(float (&s)[NS][4], const unsigned* tile,
                                                 int row0) {
  apply_token_rows(s, load_token_rows<NS>(tile, row0));
}

}  // namespace
