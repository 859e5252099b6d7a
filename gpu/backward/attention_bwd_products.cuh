// Tensor-core products of the backward (fused.cu): rows times a tile
// (Sᵀ = K Qᵀ, dPᵀ = V dOᵀ) and A fragments times a tile (dV += Pᵀ dO, dK += dSᵀ Q), through
// mma.sync (WGMMA = 0) or wgmma (WGMMA = 1). Needs attention_common.cuh, wgmma.cuh (WGMMA = 1) and the source's constants
// kHeadDim, kBlockM, kRowBytes, kSAtoms, kOAtoms defined before it is included (NVRTC gets it as
// a named header; nvcc finds it beside the source).

#pragma once

namespace {

#if !WGMMA
// acc[j] (+)= A_warp · B_tileᵀ over the head dim: A = 16 rows at `a_base`, B = the BLOCK_M rows
// of a Q-like tile at `b_base` (this lane's ldmatrix addresses for k-step 0).
__device__ __forceinline__ void rows_times_tile(unsigned a_base, unsigned b_base,
                                                float (&acc)[kSAtoms][4]) {
#pragma unroll
  for (int j = 0; j < kSAtoms; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 16; ++kk) {
    unsigned a[4];
    ldmatrix_x4(a_base ^ (kk << 5), a);
#pragma unroll
    for (int nj = 0; nj < kSAtoms / 2; ++nj) {
      unsigned b[4];
      ldmatrix_x4((b_base ^ (kk << 5)) + nj * 16 * kRowBytes, b);
      mma_16816(acc[2 * nj], a, b[0], b[1]);
      mma_16816(acc[2 * nj + 1], a, b[2], b[3]);
    }
  }
}

// acc += Aᵀ-fragments (from accumulators, k = queries) · tile rows (B through ldmatrix.trans).
__device__ __forceinline__ void fragments_times_tile(const unsigned (&a)[kBlockM / 16][4],
                                                     unsigned b_base, float (&acc)[kOAtoms][4]) {
#pragma unroll
  for (int ks = 0; ks < kBlockM / 16; ++ks) {
#pragma unroll
    for (int dp = 0; dp < kOAtoms / 2; ++dp) {
      unsigned b[4];
      ldmatrix_x4_trans((b_base ^ (dp << 5)) + ks * 16 * kRowBytes, b);
      mma_16816(acc[2 * dp], a[ks], b[0], b[1]);
      mma_16816(acc[2 * dp + 1], a[ks], b[2], b[3]);
    }
  }
}
#endif

#if WGMMA
// acc = A Bᵀ over the head dim for this warpgroup: A = 64 rows at `a_rows`, B = the BLOCK_M rows
// at `b_tile`, both K-major, A's column blocks `a_pitch` bytes apart.
__device__ __forceinline__ void rows_times_rows(unsigned a_rows, unsigned a_pitch,
                                                unsigned b_tile, float (&acc)[kSAtoms][4]) {
#pragma unroll
  for (int j = 0; j < kSAtoms; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
  pin(acc);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 16; ++kk) {  // 16 head dims = 32 bytes of a 128-byte row
    const unsigned column = (kk & 3) * 32;
    wgmma_ss(acc, descriptor(a_rows + (kk >> 2) * a_pitch + column, 16),
             descriptor(b_tile + (kk >> 2) * kBlockM * 128 + column, 16), kk > 0);
  }
  wgmma_commit();
  wgmma_wait_all();
  pin(acc);
}

// acc += A · tile, A from registers (k = queries), the BLOCK_M-row tile N-major.
__device__ __forceinline__ void fragments_times_rows(unsigned (&a)[kBlockM / 16][4],
                                                     unsigned b_tile, float (&acc)[kOAtoms][4]) {
  pin(acc);
  pin(a);
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < kBlockM / 16; ++ks) {
#pragma unroll
    for (int block = 0; block < kHeadDim / 64; ++block) {
      float(&acc_block)[8][4] = *reinterpret_cast<float(*)[8][4]>(&acc[8 * block]);
      wgmma_rs(acc_block, a[ks], descriptor(b_tile + block * kBlockM * 128 + ks * 16 * 128, 1024));
    }
  }
  wgmma_commit();
  wgmma_wait_all();
  pin(acc);
}
#endif

}  // namespace
