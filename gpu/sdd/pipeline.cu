// Block-sparse attention as three kernels: SDD (sampled dense-dense QKᵀ), a block-sparse softmax,
// and DSD (sparse P times dense V). This is the pipeline DeepSpeed/Triton 1.0 ran, driven by the
// `sdd_segment` tiling:
//
//   scores[b, o] = scale · Q[b, h, rows(o)] · K[b, h, cols(o)]ᵀ     for every active block o
//   P[b, o]      = softmax over the active blocks of each query row      (block-sparse softmax)
//   O[b, h, m]   = Σ_{o in row m} P[b, o] · V[b, h, cols(o)]            (DSD)
//
// Inputs (all row-major, contiguous):
//   q [B, H, Sq, D], k / v [B, H, Sk, D]: 16-bit floats (bf16 when DTYPE_BF16 == 1, else fp16),
//     handled as raw `unsigned short` bits: no CUDA headers are included, so the same source
//     compiles under NVRTC and nvcc; conversions are inline PTX (attention_common.cuh).
//   scores [B, nnz, BLOCK, BLOCK] fp32 and P [B, nnz, BLOCK, BLOCK] 16-bit, packed in orig_idx
//     order (row-major over the [H, M, N] layout: head, then query block, then key block), so the
//     active blocks of one query block row are contiguous: row_ptr[h·M + m] .. row_ptr[h·M+m+1].
//     Scores stay fp32: rounding logits of size ~8 to bf16 would move exp() by ~3 %.
//   groups (SDD): one launch per segment width w; int32 [n_groups, 1 + 2w + w²] entries
//     (head, rows[w], cols[w], orig[w·w] row-major). A group is a (w·BLOCK)² tile whose sub-rows are
//     query blocks rows[i] and sub-columns key blocks cols[j], not necessarily contiguous.
//
// Who does what:
//   sdd_matmul_tT: one CTA per T×T piece of a group's (w·BLOCK)² tile (T = the largest of 128, 64,
//     32, 16 that divides w·BLOCK), grid.y = batch. The CTA gathers its T query rows and T key rows
//     (row by row, through the group's rows/cols) into shared memory with cp.async, then its warps
//     (WARPS_M × WARPS_N) compute (T/WARPS_M)×(T/WARPS_N) sub-tiles with mma.sync m16n8k16 (fp32
//     accumulate) and write scale·QKᵀ (−inf where k_idx > q_idx when `causal`) into each covered
//     block's packed slot orig[i·w + j].
//   sdd_softmax: BLOCK/4 threads per query token row (each owns 4 columns of every active block,
//     16-byte loads): pass 1 keeps an online (max, sum) and reduces it with shuffles; pass 2 writes
//     P = exp(s − max) / sum as 16-bit. Rows with no finite score write zeros.
//   sdd_dsd: one CTA per (query block row, batch), heaviest rows first; BLOCK/16 warps, each owning
//     16 query rows × D outputs in registers. It walks the row's active blocks, double-buffering
//     V[cols(o)] in shared memory with cp.async (B operand via ldmatrix.trans) and reading P
//     fragments straight from global memory; rows without blocks write zeros.
//
// Compile-time defines: DTYPE_BF16 (0/1), BLOCK (16/32/64/128), HEAD_DIM (64/128). Causal masking
// is a run-time flag: it only touches the SDD epilogue, so it is not worth a second module.

#ifndef DTYPE_BF16
#error "DTYPE_BF16 must be defined (1: bf16, 0: fp16)"
#endif
#ifndef BLOCK
#error "BLOCK must be defined"
#endif
#ifndef HEAD_DIM
#error "HEAD_DIM must be defined"
#endif

#include "attention_common.cuh"

static_assert(BLOCK == 16 || BLOCK == 32 || BLOCK == 64 || BLOCK == 128, "BLOCK: 16/32/64/128");
static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "HEAD_DIM must be 64 or 128");

typedef unsigned short bits16;
typedef unsigned int u32;
typedef long long i64;

constexpr int SMEM_STRIDE = HEAD_DIM + 8;  // +16 bytes per row: conflict-free ldmatrix
constexpr float LOG2E = 1.4426950408889634f;

struct alignas(16) Float4 {
  float x, y, z, w;
};
struct alignas(8) Float2 {
  float x, y;
};
struct alignas(8) Bits16x4 {
  u32 lo, hi;
};

extern __shared__ Float4 shared_words[];  // dynamic shared memory; Float4 keeps 16-byte alignment

// One 16-byte piece of a row, global -> shared; every row copied here exists (no zero fill).
// Converting the shared pointer in here, after both addresses are formed, keeps ptxas's schedule
// of the copy loops; converted at the call sites, the loops came out reordered (nvcc 13.0).
__device__ __forceinline__ void copy_chunk(bits16* shared, const bits16* global) {
  copy_async_16(shared_address(shared), global);
}

// ------------------------------------------------------------------------------ SDD
// One T×T piece of one group: see the header. `splits` = w·BLOCK / T pieces per side.
template <int T, int WARPS_M, int WARPS_N>
__device__ __forceinline__ void sdd_matmul(const bits16* __restrict__ q,
                                           const bits16* __restrict__ k,
                                           float* __restrict__ scores,
                                           const int* __restrict__ groups, int width, int n_heads,
                                           int seq_q, int seq_k, i64 nnz, float scale,
                                           int causal) {
  constexpr int THREADS = 32 * WARPS_M * WARPS_N;
  constexpr int WARP_M = T / WARPS_M, WARP_N = T / WARPS_N;
  constexpr int M_TILES = WARP_M / 16, N_TILES = WARP_N / 8;
  static_assert(WARP_M % 16 == 0 && WARP_N % 16 == 0, "warp tile must be 16x16 multiples");
  constexpr int CHUNKS_PER_ROW = HEAD_DIM / 8;  // 16-byte pieces

  bits16* q_tile = reinterpret_cast<bits16*>(shared_words);
  bits16* k_tile = q_tile + T * SMEM_STRIDE;

  const int splits = width * BLOCK / T;
  const int group = blockIdx.x / (splits * splits);
  const int piece = blockIdx.x % (splits * splits);
  const int row0 = (piece / splits) * T, col0 = (piece % splits) * T;  // inside the group tile
  const int batch = blockIdx.y;
  const int* entry = groups + (i64)group * (1 + 2 * width + width * width);
  const int head = entry[0];
  const int* rows = entry + 1;
  const int* cols = entry + 1 + width;
  const int* orig = entry + 1 + 2 * width;
  const bits16* q_head = q + ((i64)batch * n_heads + head) * seq_q * HEAD_DIM;
  const bits16* k_head = k + ((i64)batch * n_heads + head) * seq_k * HEAD_DIM;

  // Gather the T query rows and T key rows of this piece.
  for (int c = threadIdx.x; c < T * CHUNKS_PER_ROW; c += THREADS) {
    const int r = c / CHUNKS_PER_ROW, part = (c % CHUNKS_PER_ROW) * 8;
    const int qt = row0 + r, kt = col0 + r;
    const i64 q_token = (i64)rows[qt / BLOCK] * BLOCK + qt % BLOCK;
    const i64 k_token = (i64)cols[kt / BLOCK] * BLOCK + kt % BLOCK;
    copy_chunk(q_tile + r * SMEM_STRIDE + part, q_head + q_token * HEAD_DIM + part);
    copy_chunk(k_tile + r * SMEM_STRIDE + part, k_head + k_token * HEAD_DIM + part);
  }
  copy_async_commit();
  copy_async_wait<0>();
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warp_row = (warp / WARPS_N) * WARP_M, warp_col = (warp % WARPS_N) * WARP_N;
  float acc[M_TILES][N_TILES][4] = {};
#pragma unroll
  for (int kk = 0; kk < HEAD_DIM; kk += 16) {
    u32 a[M_TILES][4];
#pragma unroll
    for (int mt = 0; mt < M_TILES; ++mt)
      ldmatrix_x4(shared_address(q_tile + (warp_row + mt * 16 + lane % 16) * SMEM_STRIDE + kk +
                                 (lane / 16) * 8),
                  a[mt]);
#pragma unroll
    for (int nt = 0; nt < N_TILES; nt += 2) {
      u32 b[4];
      ldmatrix_x4(shared_address(k_tile +
                                 (warp_col + nt * 8 + (lane / 16) * 8 + lane % 8) * SMEM_STRIDE +
                                 kk + ((lane / 8) % 2) * 8),
                  b);
#pragma unroll
      for (int mt = 0; mt < M_TILES; ++mt) {
        mma_16816(acc[mt][nt], a[mt], b[0], b[1]);
        mma_16816(acc[mt][nt + 1], a[mt], b[2], b[3]);
      }
    }
  }

  // Scatter each 16×8 accumulator tile into its block's packed slot.
#pragma unroll
  for (int mt = 0; mt < M_TILES; ++mt) {
#pragma unroll
    for (int nt = 0; nt < N_TILES; ++nt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int tr = row0 + warp_row + mt * 16 + lane / 4 + half * 8;
        const int tc = col0 + warp_col + nt * 8 + (lane % 4) * 2;
        const int i = tr / BLOCK, j = tc / BLOCK, ri = tr % BLOCK, ci = tc % BLOCK;
        float s0 = acc[mt][nt][2 * half] * scale, s1 = acc[mt][nt][2 * half + 1] * scale;
        if (causal) {
          const int q_token = rows[i] * BLOCK + ri, k_token = cols[j] * BLOCK + ci;
          if (k_token > q_token) s0 = opaque_negative_infinity();
          if (k_token + 1 > q_token) s1 = opaque_negative_infinity();
        }
        const i64 slot = (i64)batch * nnz + orig[i * width + j];
        float* dst = scores + (slot * BLOCK + ri) * BLOCK + ci;
        *reinterpret_cast<Float2*>(dst) = Float2{s0, s1};
      }
    }
  }
}

#define SDD_MATMUL_KERNEL(T, WM, WN, MIN_CTAS)                                                 \
  extern "C" __global__ void __launch_bounds__(32 * WM * WN, MIN_CTAS)                        \
      sdd_matmul_t##T(const bits16* q, const bits16* k, float* scores, const int* groups,     \
                      int width, int n_heads, int seq_q, int seq_k, i64 nnz, float scale,      \
                      int causal) {                                                            \
    sdd_matmul<T, WM, WN>(q, k, scores, groups, width, n_heads, seq_q, seq_k, nnz, scale,     \
                          causal);                                                             \
  }
// Warp grids per piece size; gpu/sdd/pipeline.py mirrors them in SDD_WARPS to size the launch. T=128 is
// capped at 128 registers so two CTAs share an SM (134 uncapped, nvcc 13.0 -Xptxas -v).
SDD_MATMUL_KERNEL(128, 4, 2, 2)
SDD_MATMUL_KERNEL(64, 2, 2, 1)
SDD_MATMUL_KERNEL(32, 2, 2, 1)
SDD_MATMUL_KERNEL(16, 1, 1, 1)

// ------------------------------------------------------------------------------ softmax
constexpr int ROW_LANES = BLOCK / 4;           // threads per query token row
constexpr int SOFTMAX_THREADS = 256;
constexpr int SOFTMAX_ROWS = SOFTMAX_THREADS / ROW_LANES;

// Merge two online-softmax states (max, sum of exp2((x - max)·log2e)).
__device__ __forceinline__ void merge_state(float& max, float& sum, float other_max,
                                            float other_sum) {
  const float top = max_of(max, other_max);
  if (top == opaque_negative_infinity()) return;  // both empty
  sum = sum * exp2_approx((max - top) * LOG2E) + other_sum * exp2_approx((other_max - top) * LOG2E);
  max = top;
}

extern "C" __global__ void __launch_bounds__(SOFTMAX_THREADS)
    sdd_softmax(const float* __restrict__ scores, bits16* __restrict__ probs,
                const int* __restrict__ row_ptr, int n_heads, int seq_q, i64 nnz,
                i64 total_rows) {
  const i64 row = (i64)blockIdx.x * SOFTMAX_ROWS + threadIdx.x / ROW_LANES;
  const int lane = threadIdx.x % ROW_LANES;
  int begin = 0, end = 0;
  i64 batch = 0;
  int r = 0;
  if (row < total_rows) {  // no early return: every lane takes part in the shuffles
    batch = row / ((i64)n_heads * seq_q);
    const int rest = (int)(row % ((i64)n_heads * seq_q));
    const int head = rest / seq_q, token = rest % seq_q;
    const int block_row = head * (seq_q / BLOCK) + token / BLOCK;
    begin = row_ptr[block_row];
    end = row_ptr[block_row + 1];
    r = token % BLOCK;
  }
  const i64 offset = (i64)r * BLOCK + lane * 4;

  float max = opaque_negative_infinity(), sum = 0.f;
  for (int o = begin; o < end; ++o) {
    const Float4 x =
        *reinterpret_cast<const Float4*>(scores + (batch * nnz + o) * BLOCK * BLOCK + offset);
    const float top = max_of(max_of(max_of(x.x, x.y), x.z), x.w);
    const float part = exp2_approx((x.x - top) * LOG2E) + exp2_approx((x.y - top) * LOG2E) +
                       exp2_approx((x.z - top) * LOG2E) + exp2_approx((x.w - top) * LOG2E);
    if (top != opaque_negative_infinity()) merge_state(max, sum, top, part);
  }
#pragma unroll
  for (int step = ROW_LANES / 2; step > 0; step /= 2) {
    const float other_max = __shfl_xor_sync(0xffffffffu, max, step);
    const float other_sum = __shfl_xor_sync(0xffffffffu, sum, step);
    merge_state(max, sum, other_max, other_sum);
  }
  const bool empty = max == opaque_negative_infinity();
  const float inverse = empty ? 0.f : 1.f / sum;
  const float shift = empty ? 0.f : max * LOG2E;

  for (int o = begin; o < end; ++o) {
    const i64 at = (batch * nnz + o) * BLOCK * BLOCK + offset;
    const Float4 x = *reinterpret_cast<const Float4*>(scores + at);
    Bits16x4 p;
    p.lo = pack_pair(exp2_approx(x.x * LOG2E - shift) * inverse,
                     exp2_approx(x.y * LOG2E - shift) * inverse);
    p.hi = pack_pair(exp2_approx(x.z * LOG2E - shift) * inverse,
                     exp2_approx(x.w * LOG2E - shift) * inverse);
    *reinterpret_cast<Bits16x4*>(probs + at) = p;
  }
}

// ------------------------------------------------------------------------------ DSD
constexpr int DSD_WARPS = BLOCK / 16;
constexpr int DSD_THREADS = 32 * DSD_WARPS;
constexpr int D_TILES = HEAD_DIM / 8;

// Stage V's BLOCK key rows of key block `col` into shared memory.
__device__ __forceinline__ void load_value_block(bits16* tile, const bits16* v_head, int col) {
  constexpr int CHUNKS_PER_ROW = HEAD_DIM / 8;
  for (int c = threadIdx.x; c < BLOCK * CHUNKS_PER_ROW; c += DSD_THREADS) {
    const int r = c / CHUNKS_PER_ROW, part = (c % CHUNKS_PER_ROW) * 8;
    copy_chunk(tile + r * SMEM_STRIDE + part, v_head + ((i64)col * BLOCK + r) * HEAD_DIM + part);
  }
}

extern "C" __global__ void __launch_bounds__(DSD_THREADS)
    sdd_dsd(const bits16* __restrict__ probs, const bits16* __restrict__ v,
            bits16* __restrict__ out, const int* __restrict__ row_ptr,
            const int* __restrict__ col_idx, const int* __restrict__ row_order, int n_heads,
            int seq_q, int seq_k, i64 nnz) {
  bits16* stages = reinterpret_cast<bits16*>(shared_words);  // [2][BLOCK][SMEM_STRIDE]

  const int n_q_blocks = seq_q / BLOCK;
  const int block_row = row_order[blockIdx.x];
  const int head = block_row / n_q_blocks, m = block_row % n_q_blocks;
  const i64 batch = blockIdx.y;
  const int begin = row_ptr[block_row], end = row_ptr[block_row + 1];
  const bits16* v_head = v + (batch * n_heads + head) * (i64)seq_k * HEAD_DIM;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  float acc[D_TILES][4] = {};
  if (begin < end) load_value_block(stages, v_head, col_idx[begin]);
  copy_async_commit();
  for (int o = begin; o < end; ++o) {
    const int stage = (o - begin) % 2;
    if (o + 1 < end) load_value_block(stages + (1 - stage) * BLOCK * SMEM_STRIDE, v_head,
                                      col_idx[o + 1]);
    copy_async_commit();
    copy_async_wait<1>();  // the block for `o` has landed
    __syncthreads();
    const bits16* tile = stages + stage * BLOCK * SMEM_STRIDE;
    const bits16* p_rows = probs + ((batch * nnz + o) * BLOCK + warp * 16) * BLOCK;
#pragma unroll
    for (int kk = 0; kk < BLOCK; kk += 16) {
      const bits16* p = p_rows + (lane / 4) * BLOCK + kk + (lane % 4) * 2;
      const u32 a[4] = {*reinterpret_cast<const u32*>(p),
                        *reinterpret_cast<const u32*>(p + 8 * BLOCK),
                        *reinterpret_cast<const u32*>(p + 8),
                        *reinterpret_cast<const u32*>(p + 8 * BLOCK + 8)};
#pragma unroll
      for (int nt = 0; nt < D_TILES; nt += 2) {
        u32 b[4];
        ldmatrix_x4_trans(shared_address(tile +
                                         (kk + ((lane / 8) % 2) * 8 + lane % 8) * SMEM_STRIDE +
                                         nt * 8 + (lane / 16) * 8),
                          b);
        mma_16816(acc[nt], a, b[0], b[1]);
        mma_16816(acc[nt + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();  // everyone is done with `stage` before it is refilled
  }

  bits16* out_rows =
      out + ((batch * n_heads + head) * (i64)seq_q + (i64)m * BLOCK + warp * 16) * HEAD_DIM;
#pragma unroll
  for (int nt = 0; nt < D_TILES; ++nt) {
    const int col = nt * 8 + (lane % 4) * 2;
    *reinterpret_cast<u32*>(out_rows + (lane / 4) * HEAD_DIM + col) =
        pack_pair(acc[nt][0], acc[nt][1]);
    *reinterpret_cast<u32*>(out_rows + (lane / 4 + 8) * HEAD_DIM + col) =
        pack_pair(acc[nt][2], acc[nt][3]);
  }
}
