// Elementwise steps of the backward shared by its kernels (fused.cu, sm90.cu, sm90_dq.cu): the
// mask of a key-major Sᵀ tile, P and dS from the saved statistics (per column of a key-major
// tile, per row of a query-major one), packing accumulators into A fragments, and dSᵀ to shared
// memory; the dQ atomics. Needs attention_common.cuh.
//
// Accumulator layout (mma.sync m16n8 atoms and wgmma m64nN alike): for 8-column atom j this lane
// holds rows lane/4 and lane/4 + 8 (half 0 and 1) of its warp's 16 and columns 2·(lane % 4) + e,
// at s[j][2·half + e]. Key-major tiles (Sᵀ, dPᵀ) have keys as rows and queries as columns.

#pragma once

namespace {

// Set masked scores of a key-major Sᵀ tile of BlockN keys to -inf: inactive layout blocks (flag
// bit 0), keys past the query's causal limit (bit 1), keys at or past seq_k (bit 2).
// `key_row0`: this warp's first key in the tile; `k_tile0`, `q_tile0`: the tile's first key and
// query.
template <int BlockN, int NS>
__device__ __forceinline__ void mask_transposed(float (&s)[NS][4], const Int4& entry,
                                                int key_row0, int k_tile0, int q_tile0,
                                                int sub_rows_log2, int sub_cols_log2,
                                                int causal_offset, int seq_k) {
  const int lane = fresh_lane();
  const unsigned long long word = mask_word(entry);
  const bool use_bits = entry.y & kFlagPartial;
  const bool causal = entry.y & kFlagDiagonal;
  const bool bounded = entry.y & kFlagKeyBound;
  const int n_sub_cols = BlockN >> sub_cols_log2;
  unsigned long long column_bits[2];
  int first_query[2];  // the first query (column) that sees the key, causal
  bool in_range[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = key_row0 + half * 8 + (lane >> 2);  // key within the tile
    const int key = k_tile0 + row;
    column_bits[half] = use_bits ? word >> (row >> sub_cols_log2) : ~0ull;
    first_query[half] = causal ? key - q_tile0 - causal_offset : -BlockN;
    in_range[half] = !bounded || key < seq_k;
  }
#pragma unroll
  for (int nj = 0; nj < NS; ++nj) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int column = nj * 8 + 2 * (lane & 3) + e;  // query within the tile
      const int cell_shift = (column >> sub_rows_log2) * n_sub_cols;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const bool block_on = (column_bits[half] >> cell_shift) & 1ull;
        if (!(block_on && in_range[half] && column >= first_query[half])) {
          s[nj][2 * half + e] = negative_infinity();
        }
      }
    }
  }
}

// Pᵀ = 2^(Sᵀ·c - lse2) in place, lse2 per query (column): `lse_row` holds the tile's queries.
template <int NS>
__device__ __forceinline__ void probabilities_by_columns(float (&s)[NS][4], const float* lse_row,
                                                         float scale_log2, int lane) {
#pragma unroll
  for (int nj = 0; nj < NS; ++nj) {
    const float2 l = *reinterpret_cast<const float2*>(lse_row + nj * 8 + 2 * (lane & 3));
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      s[nj][2 * half] = exp2_approx(__fmaf_rn(s[nj][2 * half], scale_log2, -l.x));
      s[nj][2 * half + 1] = exp2_approx(__fmaf_rn(s[nj][2 * half + 1], scale_log2, -l.y));
    }
  }
}

// dSᵀ = Pᵀ ∘ (dPᵀ - Δ) in place of dPᵀ, Δ per query (column): `delta_row` holds the tile's.
template <int NS>
__device__ __forceinline__ void score_gradients_by_columns(float (&dp)[NS][4],
                                                           const float (&p)[NS][4],
                                                           const float* delta_row, int lane) {
#pragma unroll
  for (int nj = 0; nj < NS; ++nj) {
    const float2 d = *reinterpret_cast<const float2*>(delta_row + nj * 8 + 2 * (lane & 3));
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      dp[nj][2 * half] = p[nj][2 * half] * (dp[nj][2 * half] - d.x);
      dp[nj][2 * half + 1] = p[nj][2 * half + 1] * (dp[nj][2 * half + 1] - d.y);
    }
  }
}

// P = 2^(S·c - lse2) in place for a query-major tile, lse2 of this lane's two rows.
template <int NS>
__device__ __forceinline__ void probabilities_by_rows(float (&s)[NS][4], const float (&lse2)[2],
                                                      float scale_log2) {
#pragma unroll
  for (int nj = 0; nj < NS; ++nj) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s[nj][i] = exp2_approx(__fmaf_rn(s[nj][i], scale_log2, -lse2[i >> 1]));
    }
  }
}

// dS = P ∘ (dP - Δ) in place of dP for a query-major tile, Δ of this lane's two rows.
template <int NS>
__device__ __forceinline__ void score_gradients_by_rows(float (&dp)[NS][4],
                                                        const float (&p)[NS][4],
                                                        const float (&delta)[2]) {
#pragma unroll
  for (int nj = 0; nj < NS; ++nj) {
#pragma unroll
    for (int i = 0; i < 4; ++i) dp[nj][i] = p[nj][i] * (dp[nj][i] - delta[i >> 1]);
  }
}

// fp32 accumulators (16 rows, 8·NS columns) -> 16-bit A fragments, 16 columns per k-step.
template <int NS>
__device__ __forceinline__ void pack_fragments(const float (&s)[NS][4],
                                               unsigned (&a)[NS / 2][4]) {
#pragma unroll
  for (int ks = 0; ks < NS / 2; ++ks) {
    a[ks][0] = pack_pair(s[2 * ks][0], s[2 * ks][1]);
    a[ks][1] = pack_pair(s[2 * ks][2], s[2 * ks][3]);
    a[ks][2] = pack_pair(s[2 * ks + 1][0], s[2 * ks + 1][1]);
    a[ks][3] = pack_pair(s[2 * ks + 1][2], s[2 * ks + 1][3]);
  }
}

// Store this warp's 16 key rows of dSᵀ (packed fragments of 16·KS queries) into a [keys, 16·KS]
// tile of 128-byte rows at `tile` (bytes): 64-query column blocks `block_bytes` apart, 16-byte
// chunk c of row r at c ^ (r & 7): the layout wgmma reads MN-major, and conflict-free for these
// stores.
template <int KS>
__device__ __forceinline__ void store_transposed(const unsigned (&ds)[KS][4], unsigned char* tile,
                                                 int key_row0, int lane, int block_bytes = 0) {
  static_assert(KS % 4 == 0, "whole 64-query column blocks");
#pragma unroll
  for (int ks = 0; ks < KS; ++ks) {
    const int chunk = 2 * (ks & 3);
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // rows lane/4 and lane/4 + 8 of 16 keys
      const int row = key_row0 + half * 8 + (lane >> 2);
      unsigned char* line = tile + (ks >> 2) * block_bytes + row * 128 + 4 * (lane & 3);
      *reinterpret_cast<unsigned*>(line + ((chunk ^ (row & 7)) << 4)) = ds[ks][half];
      *reinterpret_cast<unsigned*>(line + (((chunk + 1) ^ (row & 7)) << 4)) = ds[ks][2 + half];
    }
  }
}

// *address += (x, y) atomically (two adjacent floats; one vector reduction on sm_90).
__device__ __forceinline__ void add_pair(float* address, float x, float y) {
#if __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(address), "f"(x), "f"(y)
               : "memory");
#else
  atomicAdd(address, x);
  atomicAdd(address + 1, y);
#endif
}
}  // namespace
