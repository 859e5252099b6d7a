// Steps of the online-softmax forward shared by both forward kernels (gpu/forward/sm80.cu on
// mma.sync, sm90.cu on wgmma): masking, softmax, packing P and the output. The backward's
// query-major dQ kernel (gpu/backward/sm90_dq.cu) masks and packs its scores with them too.
//
// Score layout (mma.sync m16n8 atoms and wgmma m64nN accumulators alike): for 16-row atom mi
// and 8-column atom j this lane holds rows lane/4 and lane/4 + 8 (half 0 and 1) and columns
// 2·(lane % 4) + e, at s[mi][j][2·half + e]. Needs attention_common.cuh.

#pragma once

namespace {

// Set masked scores to -inf: inactive layout cells (flag bit 0), keys after the query's causal
// limit (bit 1), keys at or past seq_k (bit 2). `warp_row0`: this warp's first row in the tile.
template <int M, int NS>
__device__ __forceinline__ void apply_mask(float (&s)[M][NS][4], const Int4& entry,
                                           int warp_row0, int q_row0, int sub_rows_log2,
                                           int sub_cols_log2, int causal_offset, int seq_k) {
  constexpr int kBlockN = NS * 8;
  const int lane = fresh_lane();
  const unsigned long long word = mask_word(entry);
  const bool use_bits = entry.y & kFlagPartial;
  const bool causal = entry.y & kFlagDiagonal;
  const int key_end = (entry.y & kFlagKeyBound) ? seq_k : 0x7fffffff;
  const int sub_cols = kBlockN >> sub_cols_log2;
  unsigned row_bits[M][2];
  int q_index[M][2];
#pragma unroll
  for (int mi = 0; mi < M; ++mi) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = warp_row0 + mi * 16 + half * 8 + (lane >> 2);
      row_bits[mi][half] =
          use_bits ? static_cast<unsigned>(word >> ((row >> sub_rows_log2) * sub_cols)) : ~0u;
      q_index[mi][half] = causal ? q_row0 + row + causal_offset : 0x7fffffff;
    }
  }
  const int k_col0 = entry.x * kBlockN + 2 * (lane & 3);
#pragma unroll
  for (int nj = 0; nj < NS; ++nj) {
    const int bit = (nj * 8) >> sub_cols_log2;
#pragma unroll
    for (int mi = 0; mi < M; ++mi) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const bool block_on = (row_bits[mi][half] >> bit) & 1u;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = k_col0 + nj * 8 + e;
          const bool keep = block_on && key <= q_index[mi][half] && key < key_end;
          if (!keep) s[mi][nj][2 * half + e] = negative_infinity();  // a select: no branch
        }
      }
    }
  }
}

// Online softmax on one tile: S -> P (unnormalised, in place), update each row's running max
// and sum, and give the factor by which the row's O accumulator must be scaled (`rescale`).
// Split from the rescale so that a pipelined kernel can run it while P·V still owns O.
template <int M, int NS>
__device__ __forceinline__ void softmax_scores(float (&s)[M][NS][4], float (&row_max)[M][2],
                                               float (&row_sum)[M][2],
                                               float (&correction)[M][2], float scale_log2) {
  static_assert(NS % 2 == 0, "an even number of 8-column atoms");
  const float neg_inf = negative_infinity();
#pragma unroll
  for (int mi = 0; mi < M; ++mi) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      // four independent chains, so the exponentials wait on a short dependency chain
      float part[4] = {s[mi][0][2 * half], s[mi][0][2 * half + 1], s[mi][1][2 * half],
                       s[mi][1][2 * half + 1]};
#pragma unroll
      for (int nj = 2; nj < NS; nj += 2) {
        part[0] = fmaxf(part[0], s[mi][nj][2 * half]);
        part[1] = fmaxf(part[1], s[mi][nj][2 * half + 1]);
        part[2] = fmaxf(part[2], s[mi][nj + 1][2 * half]);
        part[3] = fmaxf(part[3], s[mi][nj + 1][2 * half + 1]);
      }
      float tile_max = fmaxf(fmaxf(part[0], part[1]), fmaxf(part[2], part[3]));
      tile_max = fmaxf(tile_max, row_max[mi][half]);
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      const float new_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
      const float base = new_max == neg_inf ? 0.f : new_max * scale_log2;  // all masked so far
      correction[mi][half] = exp2_approx(row_max[mi][half] * scale_log2 - base);
      row_max[mi][half] = new_max;
      float sum = 0.f;
#pragma unroll
      for (int nj = 0; nj < NS; ++nj) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float p = exp2_approx(__fmaf_rn(s[mi][nj][2 * half + e], scale_log2, -base));
          s[mi][nj][2 * half + e] = p;
          sum += p;
        }
      }
      row_sum[mi][half] = row_sum[mi][half] * correction[mi][half] + sum;
    }
  }
}

template <int M, int NO>
__device__ __forceinline__ void rescale(float (&o)[M][NO][4], const float (&correction)[M][2]) {
#pragma unroll
  for (int mi = 0; mi < M; ++mi) {
#pragma unroll
    for (int dn = 0; dn < NO; ++dn) {
      o[mi][dn][0] *= correction[mi][0];
      o[mi][dn][1] *= correction[mi][0];
      o[mi][dn][2] *= correction[mi][1];
      o[mi][dn][3] *= correction[mi][1];
    }
  }
}

// P (fp32 score accumulators) -> 16-bit A fragments of P · V, 16 keys per k-step.
template <int M, int NS>
__device__ __forceinline__ void pack_probabilities(const float (&s)[M][NS][4],
                                                   unsigned (&p)[M][NS / 2][4]) {
#pragma unroll
  for (int mi = 0; mi < M; ++mi) {
#pragma unroll
    for (int ks = 0; ks < NS / 2; ++ks) {
      p[mi][ks][0] = pack_pair(s[mi][2 * ks][0], s[mi][2 * ks][1]);
      p[mi][ks][1] = pack_pair(s[mi][2 * ks][2], s[mi][2 * ks][3]);
      p[mi][ks][2] = pack_pair(s[mi][2 * ks + 1][0], s[mi][2 * ks + 1][1]);
      p[mi][ks][3] = pack_pair(s[mi][2 * ks + 1][2], s[mi][2 * ks + 1][3]);
    }
  }
}

// Normalise this warp's rows of O, write their logsumexp (`lse_rows`: the slice's row 0, or
// null) and store them with 16-byte coalesced writes, staged through this warp's own rows of a
// shared tile whose 16-byte chunk c of row r lies at `staging + offset(r, c)`.
template <int M, int NO, class Offset>
__device__ __forceinline__ void store_rows(const float (&o)[M][NO][4],
                                           const float (&row_max)[M][2],
                                           const float (&row_sum)[M][2], unsigned char* staging,
                                           Offset offset, int warp_row0, int q_row0, int seq_q,
                                           unsigned short* out_slice, long long o_ss,
                                           float* lse_rows, float scale_log2) {
  const int lane = fresh_lane();
#pragma unroll
  for (int mi = 0; mi < M; ++mi) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float sum = row_sum[mi][half];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const float inverse = sum > 0.f ? 1.f / sum : 0.f;  // no active key: zeros
      const int row = warp_row0 + mi * 16 + half * 8 + (lane >> 2);
      if (lse_rows != nullptr && (lane & 3) == 0 && q_row0 + row < seq_q) {
        // ln Σ e^(scale·s) = (max·scale·log2 e + log2 Σ 2^((s - max)·scale·log2 e)) · ln 2
        constexpr float kLn2 = 0.6931471805599453f;
        lse_rows[q_row0 + row] = sum > 0.f
                                     ? (row_max[mi][half] * scale_log2 + __log2f(sum)) * kLn2
                                     : negative_infinity();
      }
#pragma unroll
      for (int dn = 0; dn < NO; ++dn) {
        const unsigned packed =
            pack_pair(o[mi][dn][2 * half] * inverse, o[mi][dn][2 * half + 1] * inverse);
        *reinterpret_cast<unsigned*>(staging + offset(row, dn) + 4 * (lane & 3)) = packed;
      }
    }
  }
  __syncwarp();
  constexpr int kRowsPerPass = 32 / NO;  // one 16-byte chunk per lane, NO chunks per row
#pragma unroll
  for (int pass = 0; pass < M * 16 / kRowsPerPass; ++pass) {
    const int row = warp_row0 + pass * kRowsPerPass + lane / NO;
    const int chunk = lane % NO;
    const Bits128 value = *reinterpret_cast<const Bits128*>(staging + offset(row, chunk));
    if (q_row0 + row < seq_q) {
      *reinterpret_cast<Bits128*>(out_slice + (q_row0 + row) * o_ss + chunk * 8) = value;
    }
  }
}

}  // namespace
