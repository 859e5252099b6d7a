// Block-sparse flash attention, backward pass (FlashAttention-2, Dao 2023), on tensor cores.
//
// Two kernels. `attention_bwd_prep` computes, per query row i, Δ_i = rowsum(dO ∘ O) - dLSE_i
// and the row's logsumexp in base 2 (lse·log2 e; +inf for rows with no key and for the padding
// rows up to seq_q_pad, so that their probabilities come out exactly 0).
//
// `attention_bwd` owns one key tile of BLOCK_N keys of one kv head and walks, through the
// transposed look-up table (gpu/backward/lut.py, `build_backward_lut`), every query tile of every
// query head of the kv group that attends to it. Per query tile of BLOCK_M rows:
//     Sᵀ  = K Qᵀ                 Pᵀ = 2^(Sᵀ·c - lse2)     (c = scale·log2 e; masked: 0)
//     dPᵀ = V dOᵀ                dSᵀ = Pᵀ ∘ (dPᵀ - Δ)
//     dV += Pᵀ dO                dK += dSᵀ Q
//     dQ += scale · dS K         (fp32 atomics into a zeroed [B, Hq, Sq, D] buffer)
// dK (times scale) and dV are written once at the end: a kv head's gradient is summed over its
// query heads in registers, with no atomics. dQ takes atomics rather than a second pass over
// the forward table, which would recompute Sᵀ and dPᵀ (7 tile products instead of 5).
//
// Warp w owns keys [16w, 16w + 16) of the tile for the five products (the Sᵀ and dPᵀ
// accumulators turn into the A operands of Pᵀ dO and dSᵀ Q in registers); dSᵀ goes through
// shared memory for dQ, where warp w owns query rows [16(w % 4), +16) and head dims
// [(w / 4)·HEAD_DIM·4/N_WARPS, ...). Q, dO, lse2 and Δ are double-buffered with cp.async.
//
// Inputs, the fields of BackwardPrepParams and BackwardParams (params.cuh): q, do [B, Hq,
// seq_q, HEAD_DIM], k, v [B, Hkv, seq_k, HEAD_DIM] as strided views (head-dim stride 1, other
// strides multiples of 8 elements); query head h reads kv head h / kv_group. Outputs: dq_acc
// fp32 [B, Hq, seq_q, HEAD_DIM] (zeroed by the caller), dk, dv [B, Hkv, seq_k, HEAD_DIM]
// contiguous. Table: lists int2 [layout heads · n_k_tiles]
// (first entry, count) per (layout head, key tile); entries int4 (q_tile, flags, mask bits
// 0-31, 32-63), the flags and bits as in the forward (bit r·n_sub_cols + c: query cell r, key
// cell c), or (q_tile, 8, token tile, 0) for a token tile, whose mask in token_words has
// BLOCK_N key rows of BLOCK_M / 32 words (token_mask.cuh), copied with the step's Q and dO
// into a double-buffered shared slot; order int [n_k_tiles], key tiles heaviest first. A layout of one head serves every
// query head.
//
// Two instruction paths, like the forward's. WGMMA = 0: mma.sync m16n8k16 (sm_80 and newer) on
// tiles stored with 16-byte chunk c of row r at c ^ (r & 7), fragments through ldmatrix.
// WGMMA = 1 (sm_90a): warpgroup g owns keys [64g, 64g + 64); Sᵀ and dPᵀ read both operands from
// shared memory (K-major), dV and dK take Pᵀ and dSᵀ from registers and dO, Q N-major, and dQ
// reads dSᵀ and K both MN-major; tiles are stored in wgmma's 128-byte-swizzle layout (64-element
// column blocks of 128-byte rows, the same XOR), and warpgroup g computes dQ's head dims
// [64g, 64g + 64), so HEAD_DIM = 64 · N_WARPS / 4.
//
// Defines: DTYPE_BF16, HEAD_DIM (64, 128), WGMMA (0/1), BLOCK_M (64), BLOCK_N (16·N_WARPS),
// N_WARPS (4, 8), MIN_BLOCKS.
// Helpers: attention_bwd_tiles.cuh (tile layouts, loads), attention_bwd_products.cuh (the
// tensor-core products), attention_bwd_scores.cuh (masks, P and dS, packing; shared with the
// Hopper kernels of sm90.cu and sm90_dq.cu).

#if !defined(DTYPE_BF16) || !defined(HEAD_DIM) || !defined(BLOCK_M) || !defined(BLOCK_N) || \
    !defined(N_WARPS) || !defined(MIN_BLOCKS) || !defined(WGMMA)
#error "define DTYPE_BF16, HEAD_DIM, WGMMA, BLOCK_M, BLOCK_N, N_WARPS, MIN_BLOCKS"
#endif

#include "attention_common.cuh"
#include "params.cuh"
#include "token_mask.cuh"
#if WGMMA
#include "wgmma.cuh"
#endif

namespace {

constexpr int kHeadDim = HEAD_DIM;
constexpr int kBlockM = BLOCK_M;
constexpr int kBlockN = BLOCK_N;
constexpr int kThreads = N_WARPS * 32;
constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row
constexpr int kRowBytes = kHeadDim * 2;
constexpr int kSAtoms = kBlockM / 8;   // 8-query atoms of a warp's Sᵀ rows
constexpr int kOAtoms = kHeadDim / 8;  // 8-dim atoms of dK, dV
constexpr int kQBytes = kBlockM * kRowBytes;
constexpr int kKVBytes = kBlockN * kRowBytes;
constexpr int kDsRowBytes = kBlockM * 2;
constexpr unsigned kTokenBytes = token_tile_bytes<kBlockN, kSAtoms>();  // one step's slot
constexpr int kDParts = N_WARPS / (kBlockM / 16);  // warps sharing one 16-row dQ atom
constexpr int kDqAtoms = kOAtoms / kDParts;        // 8-dim atoms of dQ per warp
constexpr float kLog2E = 1.4426950408889634f;

static_assert(kHeadDim == 64 || kHeadDim == 128, "HEAD_DIM must be 64 or 128");
static_assert(kBlockM == 64, "the dS tile rows are 128 bytes: BLOCK_M = 64");
static_assert(kBlockN == 16 * N_WARPS, "each warp owns 16 keys");
static_assert(N_WARPS % 4 == 0 && kDqAtoms % 2 == 0, "dQ atoms split evenly");
static_assert((kBlockM * kChunks) % kThreads == 0, "Q tile copy must split evenly");
static_assert((kBlockN * kChunks) % kThreads == 0, "K/V tile copy must split evenly");
static_assert(kThreads >= kBlockM / 2, "lse and delta copies need BLOCK_M / 2 threads");
static_assert(!WGMMA || kHeadDim == 16 * N_WARPS, "wgmma: each warpgroup owns 64 dims of dQ");

}  // namespace

#include "attention_bwd_products.cuh"
#include "attention_bwd_scores.cuh"
#include "attention_bwd_tiles.cuh"

namespace {

// One step of the walk: query head `head` (its index `group_index` in the kv group) and entry
// `entry` (number `n` of that head's list).
struct Step {
  int group_index, n, head, entry;
};

// The first step at (group_index, n) or after it; false when the walk is over.
__device__ __forceinline__ bool find_step(int group_index, int n, int kv_head, int kv_group,
                                          bool shared_layout, int k_tile, int n_k_tiles,
                                          const int2* __restrict__ lists, Step& step) {
  for (; group_index < kv_group; ++group_index, n = 0) {
    const int head = kv_head * kv_group + group_index;
    const int2 list = __ldg(lists + (shared_layout ? 0 : head) * n_k_tiles + k_tile);
    if (n < list.y) {
      step = Step{group_index, n, head, list.x + n};
      return true;
    }
  }
  return false;
}

}  // namespace

extern "C" __global__ void __launch_bounds__(256)
    attention_bwd_prep(const __grid_constant__ BackwardPrepParams params) {
  constexpr int kRowsPerWarp = 32 / kChunks;
  const int lane = threadIdx.x & 31;
  const int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32 * kRowsPerWarp + lane / kChunks;
  const int chunk = lane % kChunks;
  const int bh = row / params.seq_q_pad;  // b · q_heads + h
  const int i = row % params.seq_q_pad;
  const bool inside = row < params.n_rows && i < params.seq_q;
  float sum = 0.f;
  if (inside) {
    const int b = bh / params.q_heads, h = bh % params.q_heads;
    const uint4 x = __ldg(reinterpret_cast<const uint4*>(
        params.o + b * params.o_sb + h * params.o_sh + i * params.o_ss + chunk * 8));
    const uint4 y = __ldg(reinterpret_cast<const uint4*>(
        params.d_o + b * params.do_sb + h * params.do_sh + i * params.do_ss + chunk * 8));
    const unsigned xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      sum += unpack_low(xs[j]) * unpack_low(ys[j]) + unpack_high(xs[j]) * unpack_high(ys[j]);
    }
  }
#pragma unroll
  for (int width = 1; width < kChunks; width *= 2) {
    sum += __shfl_xor_sync(0xffffffffu, sum, width);
  }
  if (row < params.n_rows && chunk == 0) {
    const long long at = static_cast<long long>(bh) * params.seq_q + i;
    const float row_lse = inside ? __ldg(params.lse + at) : negative_infinity();
    params.lse2[row] = row_lse == negative_infinity() ? -negative_infinity() : row_lse * kLog2E;
    params.delta[row] = inside ? sum - (params.d_lse != nullptr ? __ldg(params.d_lse + at) : 0.f)
                               : 0.f;
  }
}

extern "C" __global__ void __launch_bounds__(kThreads, MIN_BLOCKS)
    attention_bwd(const __grid_constant__ BackwardParams params) {
  // the parameters by name (kept in locals: ptxas spills less here than with params.x uses)
  const unsigned short *q = params.q, *k = params.k, *v = params.v, *d_o = params.d_o;
  const float *lse2 = params.lse2, *delta = params.delta;
  float* dq_acc = params.dq_acc;
  unsigned short *dk = params.dk, *dv = params.dv;
  const int2* lists = params.lists;
  const Int4* entries = params.entries;
  const int* order = params.order;
  const unsigned* token_words = params.token_words;
  const long long q_sb = params.q_sb, q_sh = params.q_sh, q_ss = params.q_ss;
  const long long k_sb = params.k_sb, k_sh = params.k_sh, k_ss = params.k_ss;
  const long long v_sb = params.v_sb, v_sh = params.v_sh, v_ss = params.v_ss;
  const long long do_sb = params.do_sb, do_sh = params.do_sh, do_ss = params.do_ss;
  const int batch = params.batch, q_heads = params.q_heads, kv_heads = params.kv_heads;
  const int kv_group = params.kv_group, shared_layout = params.shared_layout;
  const int n_k_tiles = params.n_k_tiles, seq_q = params.seq_q, seq_k = params.seq_k;
  const int seq_q_pad = params.seq_q_pad, causal_offset = params.causal_offset;
  const int sub_rows_log2 = params.sub_rows_log2, sub_cols_log2 = params.sub_cols_log2;
  const float scale = params.scale, scale_log2 = params.scale_log2;
  extern __shared__ __align__(1024) Bits128 shared_raw[];
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;

  // ---- which key tile, batch element and kv head
  const int per_tile = batch * kv_heads;
  const int k_tile = order[blockIdx.x / per_tile];
  const int b = (blockIdx.x % per_tile) % batch;
  const int kv_head = (blockIdx.x % per_tile) / batch;
  const int k_row0 = k_tile * kBlockN;

  // ---- shared memory: K | V | Q0 | Q1 | dO0 | dO1 | dSᵀ | lse2 0,1 | delta 0,1 | tokens 0,1
  const unsigned k_tile_s = shared_address(shared_raw);
  const unsigned v_tile_s = k_tile_s + kKVBytes;
  const unsigned q_tiles = v_tile_s + kKVBytes;
  const unsigned do_tiles = q_tiles + 2 * kQBytes;
  const unsigned ds_tile = do_tiles + 2 * kQBytes;
  const unsigned rows_s = ds_tile + kBlockN * kDsRowBytes;  // 4 x BLOCK_M floats
  const unsigned token_slots = rows_s + 16 * kBlockM;
  const float* rows_f = reinterpret_cast<const float*>(
      reinterpret_cast<const unsigned char*>(shared_raw) + (rows_s - k_tile_s));

  load_tile<kBlockN>(k_tile_s, k + b * k_sb + kv_head * k_sh, k_ss, k_row0, seq_k);
  load_tile<kBlockN>(v_tile_s, v + b * v_sb + kv_head * v_sh, v_ss, k_row0, seq_k);

  // Issue the copies of one step's Q, dO, lse2, Δ and token words into buffer `buffer`.
  const auto load_step = [&](const Step& step, int buffer) {
    const Int4 entry = entries[step.entry];
    const int q_row0 = entry.x * kBlockM;
    load_tile<kBlockM>(q_tiles + buffer * kQBytes, q + b * q_sb + step.head * q_sh, q_ss,
                       q_row0, seq_q);
    load_tile<kBlockM>(do_tiles + buffer * kQBytes, d_o + b * do_sb + step.head * do_sh,
                       do_ss, q_row0, seq_q);
    const int tid = threadIdx.x;
    if (tid < kBlockM / 2) {  // BLOCK_M / 4 chunks of lse2, then of delta
      const int which = tid / (kBlockM / 4), chunk = tid % (kBlockM / 4);
      const long long row = (static_cast<long long>(b) * q_heads + step.head) * seq_q_pad +
                            q_row0 + chunk * 4;
      copy_async_16(rows_s + ((2 * which + buffer) * kBlockM + chunk * 4) * 4,
                    (which ? delta : lse2) + row, 16);
    }
    if (entry.y & kFlagTokens) {  // by the last threads: the first copy lse2 and Δ
      copy_token_tile<kBlockN, kSAtoms, kThreads>(token_slots + buffer * kTokenBytes,
                                                  token_tile<kBlockN, kSAtoms>(token_words, entry),
                                                  kThreads - 1 - tid);
    }
  };

  Step step;
  bool have = find_step(0, 0, kv_head, kv_group, shared_layout, k_tile, n_k_tiles, lists, step);
  if (have) load_step(step, 0);
  copy_async_commit();

  float dk_acc[kOAtoms][4], dv_acc[kOAtoms][4];
#pragma unroll
  for (int dn = 0; dn < kOAtoms; ++dn) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dk_acc[dn][e] = dv_acc[dn][e] = 0.f;
  }

  const int key_row0 = warp * 16;  // this warp's keys within the tile
  for (int buffer = 0; have; buffer ^= 1) {
    Step next;
    const bool have_next = find_step(step.group_index, step.n + 1, kv_head, kv_group,
                                     shared_layout, k_tile, n_k_tiles, lists, next);
    if (have_next) load_step(next, buffer ^ 1);
    copy_async_commit();
    copy_async_wait<1>();
#if WGMMA
    fence_async_proxy();  // the tensor cores read what cp.async wrote
#endif
    __syncthreads();

    const Int4 entry = entries[step.entry];
    const int q_row0 = entry.x * kBlockM;
    const unsigned q_tile = q_tiles + buffer * kQBytes;
    const unsigned do_tile = do_tiles + buffer * kQBytes;
    const float* lse_row = rows_f + buffer * kBlockM;
    const float* delta_row = rows_f + (2 + buffer) * kBlockM;

    // Sᵀ = K Qᵀ and Pᵀ (in place)
#if WGMMA
    const unsigned key_rows = (warp >> 2) * 64 * 128;  // this warpgroup's keys in a column block
    float s[kSAtoms][4];
    rows_times_rows(k_tile_s + key_rows, kBlockN * 128, q_tile, s);
#else
    const unsigned a_offset = swizzled<kRowBytes>(key_row0 + (lane & 15), lane >> 4);
    const unsigned b_offset =
        swizzled<kRowBytes>((lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
    float s[kSAtoms][4];
    rows_times_tile(k_tile_s + a_offset, q_tile + b_offset, s);
#endif
    if (entry.y != 0) {  // full tiles never mask
      if (entry.y & kFlagTokens) {
        apply_token_rows(s, load_token_rows<kSAtoms>(token_slots + buffer * kTokenBytes,
                                                     key_row0));
      } else {
        mask_transposed<kBlockN>(s, entry, key_row0, k_row0, q_row0, sub_rows_log2,
                                 sub_cols_log2, causal_offset, seq_k);
      }
    }
    probabilities_by_columns(s, lse_row, scale_log2, lane);
    // dV += Pᵀ dO
#if WGMMA
    {
      unsigned p[kBlockM / 16][4];
      pack_fragments(s, p);
      fragments_times_rows(p, do_tile, dv_acc);
    }
    // dPᵀ = V dOᵀ, then dSᵀ = Pᵀ ∘ (dPᵀ - Δ) (in place of dPᵀ)
    float dp[kSAtoms][4];
    rows_times_rows(v_tile_s + key_rows, kBlockN * 128, do_tile, dp);
#else
    const unsigned trans_offset = swizzled<kRowBytes>(lane & 15, lane >> 4);
    {
      unsigned p[kBlockM / 16][4];
      pack_fragments(s, p);
      fragments_times_tile(p, do_tile + trans_offset, dv_acc);
    }
    // dPᵀ = V dOᵀ, then dSᵀ = Pᵀ ∘ (dPᵀ - Δ) (in place of dPᵀ)
    float dp[kSAtoms][4];
    rows_times_tile(v_tile_s + a_offset, do_tile + b_offset, dp);
#endif
    score_gradients_by_columns(dp, s, delta_row, lane);
    // dK += dSᵀ Q; dSᵀ to shared memory for dQ
    {
      unsigned ds[kBlockM / 16][4];
      pack_fragments(dp, ds);
#if WGMMA
      fragments_times_rows(ds, q_tile, dk_acc);
#else
      fragments_times_tile(ds, q_tile + trans_offset, dk_acc);
#endif
      store_transposed(ds, reinterpret_cast<unsigned char*>(shared_raw) + (ds_tile - k_tile_s),
                       key_row0, lane);
    }
#if WGMMA
    fence_async_proxy();  // dSᵀ is read by the tensor cores
#endif
    __syncthreads();

    // dQ rows [16·(w % 4), +16), dims [dim0, dim0 + 8·kDqAtoms): dS K
    {
      const int m_atom = warp % (kBlockM / 16);
      const int dim0 = (warp / (kBlockM / 16)) * kDqAtoms * 8;
      float dq[kDqAtoms][4];
#pragma unroll
      for (int j = 0; j < kDqAtoms; ++j) dq[j][0] = dq[j][1] = dq[j][2] = dq[j][3] = 0.f;
#if WGMMA
      pin(dq);
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kBlockN / 16; ++ks) {  // dSᵀ and K rows are keys: both MN-major
        wgmma_ss<1, 1>(dq, descriptor(ds_tile + ks * 16 * 128, 1024),
                       descriptor(k_tile_s + (dim0 >> 6) * kBlockN * 128 + ks * 16 * 128, 1024),
                       1);
      }
      wgmma_commit();
      wgmma_wait_all();
      pin(dq);
#else
      const unsigned a_base = ds_tile + swizzled<kDsRowBytes>(
                                            ((lane >> 4) << 3) + (lane & 7),
                                            2 * m_atom + ((lane >> 3) & 1));
      const unsigned b_base = k_tile_s + trans_offset;
#pragma unroll
      for (int ks = 0; ks < kBlockN / 16; ++ks) {
        unsigned a[4];
        ldmatrix_x4_trans(a_base + ks * 16 * kDsRowBytes, a);
#pragma unroll
        for (int dp2 = 0; dp2 < kDqAtoms / 2; ++dp2) {
          unsigned bb[4];
          ldmatrix_x4_trans((b_base ^ (((dim0 >> 4) + dp2) << 5)) + ks * 16 * kRowBytes, bb);
          mma_16816(dq[2 * dp2], a, bb[0], bb[1]);
          mma_16816(dq[2 * dp2 + 1], a, bb[2], bb[3]);
        }
      }
#endif
      float* dq_slice = dq_acc + ((static_cast<long long>(b) * q_heads + step.head) * seq_q) *
                                     kHeadDim;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = q_row0 + m_atom * 16 + half * 8 + (lane >> 2);
        if (row < seq_q) {
#pragma unroll
          for (int j = 0; j < kDqAtoms; ++j) {
            add_pair(dq_slice + static_cast<long long>(row) * kHeadDim + dim0 + j * 8 +
                         2 * (lane & 3),
                     scale * dq[j][2 * half], scale * dq[j][2 * half + 1]);
          }
        }
      }
    }
    __syncthreads();  // the buffers of this step are refilled two steps on; dSᵀ next step
    step = next;
    have = have_next;
  }

  // ---- dK (times scale) and dV of this warp's 16 keys
  const long long kv_row0 = (static_cast<long long>(b) * kv_heads + kv_head) * seq_k;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int key = k_row0 + key_row0 + half * 8 + (lane >> 2);
    if (key < seq_k) {
#pragma unroll
      for (int dn = 0; dn < kOAtoms; ++dn) {
        const long long at = (kv_row0 + key) * kHeadDim + dn * 8 + 2 * (lane & 3);
        *reinterpret_cast<unsigned*>(dk + at) =
            pack_pair(scale * dk_acc[dn][2 * half], scale * dk_acc[dn][2 * half + 1]);
        *reinterpret_cast<unsigned*>(dv + at) =
            pack_pair(dv_acc[dn][2 * half], dv_acc[dn][2 * half + 1]);
      }
    }
  }
}
