// Block-sparse flash attention, forward pass (FlashAttention-2, Dao 2023), on tensor cores.
//
// Algorithm. For one (batch b, head h, query tile of BLOCK_M rows), keep per row a running max m,
// a running sum l and an fp32 accumulator O. For each *active* key tile j of BLOCK_N keys, listed
// by the look-up table (gpu/forward/lut.py):
//     S = Q K_j^T                              (fp32, tensor cores)
//     S[masked] = -inf                         (only for tiles flagged partial or diagonal)
//     m' = max(m, rowmax S);  P = 2^(S·c - m'·c)   with c = scale·log2(e)
//     l  = l·2^((m - m')·c) + rowsum P;  O = O·2^((m - m')·c) + P V_j;  m = m'
// then O / l is written (rows with no active key: l = 0, so exact zeros, never NaN).
//
// Inputs, the fields of ForwardParams (params.cuh), 16-bit floats handled as raw `unsigned
// short` bits, any strides whose head-dim stride is 1 and whose other strides are multiples of 8
// elements (16-byte rows; the caller checks alignment):
//   q [B, Hq, seq_q, HEAD_DIM], k and v [B, Hkv, seq_k, HEAD_DIM], out [B, Hq, seq_q, HEAD_DIM];
//   query head h reads kv head h / kv_group (GQA / MQA; kv_group = Hq / Hkv).
//   lse: fp32 [B, Hq, seq_q] contiguous, or null: the natural-log logsumexp of each row's scaled
//   scores (-inf for a row with no active key).
//   items   int4 [n_items]:   (layout head, q_tile, first entry, entry count), heaviest first.
//     A layout of one head serves every query head: heads_per_item = Hq, else 1.
//   entries int4 [n_entries]: (k_tile, flags, mask bits 0-31, mask bits 32-63).
//     flags bit 3 alone: a token tile (partial blocks), (k_tile, 8, token tile, 0): apply its
//       token mask from token_words (token_mask.cuh), BLOCK_M rows of BLOCK_N / 32 words,
//       copied (cp.async) into a shared slot beside the tile's K/V buffer with its K and V;
//     flags bit 0: some layout blocks inside the tile are inactive, apply the mask bits;
//     flags bit 1: the tile crosses the causal diagonal, apply k_idx <= q_idx + causal_offset
//       (0: top-left aligned; seq_k - seq_q: bottom-right aligned);
//     flags bit 2: the tile reaches past seq_k (a partial last block), apply k_idx < seq_k.
//     Mask bit (r·n_sub_cols + c) covers tile rows [r·2^sub_rows_log2, ...) and tile columns
//     [c·2^sub_cols_log2, ...): a layout block, or the part of one that lies in the tile. The
//     layout block size only enters through these two shifts, so one compiled module serves
//     layout blocks 16 to 128 alike.
//
// Work split. Grid = n_items · B · heads_per_item CTAs; CTA x runs item x / (B · heads_per_item)
// for batch x % B and head item.head · heads_per_item + (x / B) % heads_per_item, so the grid
// walks the items heaviest first. Q is loaded once (cp.async), K/V tiles are double-buffered: the
// copy of tile n + 1 is in flight while tile n is computed. S accumulators turn into the A operand
// of P V in registers (the accumulator and A fragment layouts line up). The instruction is
// mma.sync m16n8k16 (any GPU from sm_80; Hopper runs sm90.cu instead): warp w
// owns query rows [32w, 32w + 32) (two 16-row atoms) and the whole key tile, so each K/V fragment
// read from shared memory feeds two mma's; fragments come from ldmatrix (.trans for V). Shared
// rows are HEAD_DIM·2 bytes, 16-byte chunk c of row r stored at chunk c ^ (r & 7) (no ldmatrix
// bank conflicts).
//
// At the end each warp normalises its rows (16 or 32), stages them through its own rows of the
// Q buffer and writes 16-byte coalesced stores.
//
// Compile-time defines: K_ROW_STRIDE and V_ROW_STRIDE (elements between key rows and between
// value rows: compile-time, so the K/V tile copies of the main loop address rows by immediate
// offsets), DTYPE_BF16 (1: bfloat16, 0: float16), HEAD_DIM (64 or 128), BLOCK_M (32·N_WARPS),
// BLOCK_N (multiple of 16, at most 128), N_WARPS, MIN_BLOCKS (CTAs per SM the register budget is
// sized for). The
// helpers shared with the backward kernels come from attention_common.cuh.

#if !defined(DTYPE_BF16) || !defined(HEAD_DIM) || !defined(BLOCK_M) || !defined(BLOCK_N) || \
    !defined(N_WARPS) || !defined(MIN_BLOCKS) || !defined(K_ROW_STRIDE) || \
    !defined(V_ROW_STRIDE)
#error "define DTYPE_BF16, HEAD_DIM, BLOCK_M, BLOCK_N, N_WARPS, MIN_BLOCKS, K/V_ROW_STRIDE"
#endif

#include "attention_common.cuh"
#include "attention_forward.cuh"
#include "params.cuh"
#include "token_mask.cuh"

namespace {

constexpr int kHeadDim = HEAD_DIM;
constexpr int kBlockM = BLOCK_M;
constexpr int kBlockN = BLOCK_N;
constexpr int kThreads = N_WARPS * 32;
constexpr int kWarpRows = 32;                  // accumulator rows per warp
constexpr int kMAtoms = kWarpRows / 16;        // 16-row atoms per warp
constexpr int kChunks = kHeadDim / 8;          // 16-byte chunks per shared row
constexpr int kRowBytes = kHeadDim * 2;
constexpr int kSAtoms = kBlockN / 8;           // 8-column atoms of S per warp row block
constexpr int kOAtoms = kHeadDim / 8;          // 8-column atoms of O
constexpr int kQBytes = kBlockM * kRowBytes;
constexpr int kKVBytes = kBlockN * kRowBytes;
constexpr unsigned kTokenBytes = token_tile_bytes<kBlockM, kSAtoms>();

static_assert(kHeadDim == 64 || kHeadDim == 128, "HEAD_DIM must be 64 or 128");
static_assert(kBlockM == kWarpRows * N_WARPS, "each warp owns 32 query rows");
static_assert(kBlockN % 16 == 0 && kBlockN <= 128, "BLOCK_N must be a multiple of 16, <= 128");
static_assert((kBlockM * kChunks) % kThreads == 0, "Q tile copy must split evenly");
static_assert((kBlockN * kChunks) % kThreads == 0, "K/V tile copy must split evenly");
static_assert(32 % kChunks == 0, "a warp stores whole output rows");
static_assert((kThreads / kChunks) % 8 == 0, "each copy pass must cover whole swizzle periods");


// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of `Rows` rows (see the header).
// Tiles start at 1024-byte multiples. Within a 128-byte row, chunks 2j and 2j + 1 satisfy
// offset(r, 2j + c) = offset(r, c) ^ (j << 5), so an mma.sync k-step is one XOR on a base address.
template <int Rows>
__device__ __forceinline__ unsigned tile_offset(int row, int chunk) {
  return row * kRowBytes + ((chunk ^ (row & 7)) << 4);
}

// ------------------------------------------------------------------ tile steps
// Copy rows [row0, row0 + Rows) of a [seq, HEAD_DIM] slice (rows `stride` elements apart) into
// shared tile `tile`; rows past `seq` are zero-filled. (Q, once per CTA.)
template <int Rows>
__device__ __forceinline__ void load_tile(unsigned tile, const unsigned short* slice,
                                          long long stride, int row0, int seq) {
  constexpr int kRowsPerPass = kThreads / kChunks;
  const int tid = fresh_thread();
  const int row = tid / kChunks;
  const int chunk = tid % kChunks;
  const unsigned dst = tile + tile_offset<Rows>(row, chunk);
  const unsigned short* src = slice + (row0 + row) * stride + chunk * 8;
#pragma unroll
  for (int i = 0; i < Rows / kRowsPerPass; ++i) {
    const bool inside = row0 + row + i * kRowsPerPass < seq;
    copy_async_16(dst + i * kRowsPerPass * kRowBytes,
                  inside ? src + i * kRowsPerPass * stride : slice, inside ? 16 : 0);
  }
}

// This thread's first source row of a K or V slice, computed once per CTA: each tile's copy then
// adds one row offset (RowStride is compile-time) instead of rebuilding 64-bit addresses, which
// cost 5-10 % of the main loop on the H200 (2026-11-30; 678 instructions per key tile against
// 638 this way at D = 64).
struct RowSource {
  const unsigned short* src;  // row `row`, chunk `chunk` of the slice
  int row;
};

template <long long RowStride>
__device__ __forceinline__ RowSource row_source(const unsigned short* slice) {
  const int tid = threadIdx.x;
  RowSource source;
  source.row = tid / kChunks;
  source.src = slice + source.row * RowStride + (tid % kChunks) * 8;
  return source;
}

template <int Rows, long long RowStride>
__device__ __forceinline__ void load_rows(unsigned tile, const RowSource& source, int row0,
                                          int seq) {
  constexpr int kRowsPerPass = kThreads / kChunks;
  const int tid = fresh_thread();
  const unsigned dst = tile + tile_offset<Rows>(tid / kChunks, tid % kChunks);
  const unsigned short* src = source.src + row0 * RowStride;
#pragma unroll
  for (int i = 0; i < Rows / kRowsPerPass; ++i) {
    const bool inside = row0 + source.row + i * kRowsPerPass < seq;
    copy_async_16(dst + i * kRowsPerPass * kRowBytes,
                  inside ? src + i * kRowsPerPass * RowStride : source.src, inside ? 16 : 0);
  }
}

// ------------------------------------------------------------------ mma.sync products

// s = Q_warp · K_tile^T. `q_base`, `k_base`: this lane's ldmatrix addresses for k-step 0.
template <typename QFragments>
__device__ __forceinline__ void qk_product(unsigned k_base, QFragments&& q_fragments,
                                           float (&s)[kMAtoms][kSAtoms][4]) {
#pragma unroll
  for (int mi = 0; mi < kMAtoms; ++mi) {
#pragma unroll
    for (int nj = 0; nj < kSAtoms; ++nj) {
      s[mi][nj][0] = s[mi][nj][1] = s[mi][nj][2] = s[mi][nj][3] = 0.f;
    }
  }
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 16; ++kk) {
    unsigned a[kMAtoms][4];
    q_fragments(kk, a);
#pragma unroll
    for (int nj = 0; nj < kSAtoms / 2; ++nj) {
      unsigned b[4];  // b[0..1]: keys 16nj..+7, b[2..3]: keys 16nj+8..+15
      ldmatrix_x4((k_base ^ (kk << 5)) + nj * 16 * kRowBytes, b);
#pragma unroll
      for (int mi = 0; mi < kMAtoms; ++mi) {
        mma_16816(s[mi][2 * nj], a[mi], b[0], b[1]);
        mma_16816(s[mi][2 * nj + 1], a[mi], b[2], b[3]);
      }
    }
  }
}

// A fragments of this warp's Q rows for k-step kk, from shared memory.
__device__ __forceinline__ void load_q_fragments(unsigned q_base, int kk,
                                                 unsigned (&a)[kMAtoms][4]) {
#pragma unroll
  for (int mi = 0; mi < kMAtoms; ++mi) {
    ldmatrix_x4((q_base ^ (kk << 5)) + mi * 16 * kRowBytes, a[mi]);
  }
}

// o += P · V_tile. `v_base`: this lane's ldmatrix.trans address for head dims 0..15.
__device__ __forceinline__ void pv_product(unsigned v_base,
                                           const unsigned (&p)[kMAtoms][kBlockN / 16][4],
                                           float (&o)[kMAtoms][kOAtoms][4]) {
#pragma unroll
  for (int ks = 0; ks < kBlockN / 16; ++ks) {
#pragma unroll
    for (int dp = 0; dp < kOAtoms / 2; ++dp) {
      unsigned b[4];  // b[0..1]: head dims 16dp..+7, b[2..3]: 16dp+8..+15
      ldmatrix_x4_trans((v_base ^ (dp << 5)) + ks * 16 * kRowBytes, b);
#pragma unroll
      for (int mi = 0; mi < kMAtoms; ++mi) {
        mma_16816(o[mi][2 * dp], p[mi][ks], b[0], b[1]);
        mma_16816(o[mi][2 * dp + 1], p[mi][ks], b[2], b[3]);
      }
    }
  }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads, MIN_BLOCKS)
    fused_attention_fwd(const __grid_constant__ ForwardParams params) {
  extern __shared__ __align__(1024) Bits128 shared_raw[];
  const int warp_row0 = (threadIdx.x >> 5) * kWarpRows;

  // ---- which work item, batch element and heads
  const int per_item = params.batch * params.heads_per_item;
  const Int4 item = load_entry(params.items + blockIdx.x / per_item);
  const int b = (blockIdx.x % per_item) % params.batch;
  const int head = item.x * params.heads_per_item + (blockIdx.x % per_item) / params.batch;
  const int kv_head = head / params.kv_group;
  const int q_row0 = item.y * kBlockM;
  const int first = item.z;
  const int count = item.w;
  const Int4* key_tiles = params.entries + first;  // this unit's entries
  const unsigned short* q_slice = params.q + b * params.q_sb + head * params.q_sh;
  const unsigned short* k_slice = params.k + b * params.k_sb + kv_head * params.k_sh;
  const unsigned short* v_slice = params.v + b * params.v_sb + kv_head * params.v_sh;
  unsigned short* out_slice = params.out + b * params.o_sb + head * params.o_sh;

  // ---- shared memory: Q | K0 | K1 | V0 | V1 | token slots 0, 1
  const unsigned q_tile = shared_address(shared_raw);
  const unsigned k_tiles = q_tile + kQBytes;
  const unsigned v_tiles = k_tiles + 2 * kKVBytes;
  const unsigned token_slots = v_tiles + 2 * kKVBytes;
  // Copy the token words of `entry`, if a token tile, into slot `slot`.
  const auto copy_tokens = [&](const Int4& entry, int slot) {
    if (entry.y & kFlagTokens) {
      copy_token_tile<kBlockM, kSAtoms, kThreads>(
          token_slots + slot * kTokenBytes, token_tile<kBlockM, kSAtoms>(params.token_words, entry),
          fresh_thread());
    }
  };

  const RowSource k_source = row_source<K_ROW_STRIDE>(k_slice);
  const RowSource v_source = row_source<V_ROW_STRIDE>(v_slice);
  if (count > 0) {
    load_tile<kBlockM>(q_tile, q_slice, params.q_ss, q_row0, params.seq_q);
    const Int4 first_entry = load_entry(key_tiles);
    const int k_row0 = first_entry.x * kBlockN;
    load_rows<kBlockN, K_ROW_STRIDE>(k_tiles, k_source, k_row0, params.seq_k);
    load_rows<kBlockN, V_ROW_STRIDE>(v_tiles, v_source, k_row0, params.seq_k);
    copy_tokens(first_entry, 0);
  }
  copy_async_commit();

  // ---- running state of this thread's rows (2 per mma atom: lane/4 and lane/4 + 8)
  float o[kMAtoms][kOAtoms][4];
  float row_max[kMAtoms][2];
  float row_sum[kMAtoms][2];
#pragma unroll
  for (int mi = 0; mi < kMAtoms; ++mi) {
#pragma unroll
    for (int dn = 0; dn < kOAtoms; ++dn) {
      o[mi][dn][0] = o[mi][dn][1] = o[mi][dn][2] = o[mi][dn][3] = 0.f;
    }
    row_max[mi][0] = row_max[mi][1] = negative_infinity();
    row_sum[mi][0] = row_sum[mi][1] = 0.f;
  }
  constexpr bool kQInRegisters = kHeadDim <= 64;  // D = 128 would need 64 more registers
  unsigned q_registers[kQInRegisters ? kHeadDim / 16 : 1][kMAtoms][4];

  // ---- walk the active key tiles
  for (int n = 0; n < count; ++n) {
    const Int4 entry = load_entry(key_tiles + n);
    if (n + 1 < count) {  // prefetch tile n + 1 into the other buffer
      const Int4 next = load_entry(key_tiles + n + 1);
      const int k_row0 = next.x * kBlockN;
      const unsigned buffer = ((n + 1) & 1) * kKVBytes;
      load_rows<kBlockN, K_ROW_STRIDE>(k_tiles + buffer, k_source, k_row0, params.seq_k);
      load_rows<kBlockN, V_ROW_STRIDE>(v_tiles + buffer, v_source, k_row0, params.seq_k);
      copy_tokens(next, (n + 1) & 1);
    }
    copy_async_commit();
    copy_async_wait<1>();  // everything but the prefetch has landed
    __syncthreads();

    const unsigned k_tile = k_tiles + (n & 1) * kKVBytes;
    const unsigned v_tile = v_tiles + (n & 1) * kKVBytes;
    float s[kMAtoms][kSAtoms][4];
    const int lane = fresh_lane();
    const unsigned q_base = q_tile + tile_offset<kBlockM>(warp_row0 + (lane & 15), lane >> 4);
    const unsigned k_base =
        k_tile + tile_offset<kBlockN>((lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
    if constexpr (kQInRegisters) {
      if (n == 0) {
#pragma unroll
        for (int kk = 0; kk < kHeadDim / 16; ++kk) load_q_fragments(q_base, kk, q_registers[kk]);
      }
      qk_product(k_base, [&](int kk, unsigned (&a)[kMAtoms][4]) {
#pragma unroll
        for (int mi = 0; mi < kMAtoms; ++mi) {
#pragma unroll
          for (int r = 0; r < 4; ++r) a[mi][r] = q_registers[kk][mi][r];
        }
      }, s);
    } else {
      qk_product(k_base, [&](int kk, unsigned (&a)[kMAtoms][4]) {
        load_q_fragments(q_base, kk, a);
      }, s);
    }
    if (entry.y != 0) {  // full tiles never mask
      if (entry.y & kFlagTokens) {
        const unsigned slot = token_slots + (n & 1) * kTokenBytes;
#pragma unroll
        for (int mi = 0; mi < kMAtoms; ++mi) {
          apply_token_rows(s[mi], load_token_rows<kSAtoms>(slot, warp_row0 + mi * 16));
        }
      } else {
        apply_mask(s, entry, warp_row0, q_row0, params.sub_rows_log2, params.sub_cols_log2,
                   params.causal_offset, params.seq_k);
      }
    }
    float correction[kMAtoms][2];
    softmax_scores(s, row_max, row_sum, correction, params.scale_log2);
    rescale(o, correction);
    unsigned p[kMAtoms][kBlockN / 16][4];
    pack_probabilities(s, p);
    pv_product(v_tile + tile_offset<kBlockN>(lane & 15, lane >> 4), p, o);
    __syncthreads();  // buffer n & 1 is refilled by the next iteration's prefetch
  }

  // ---- normalise, stage this warp's rows in its own rows of the Q buffer, store coalesced
  store_rows(o, row_max, row_sum, reinterpret_cast<unsigned char*>(shared_raw),
             [](int row, int chunk) { return tile_offset<kBlockM>(row, chunk); }, warp_row0,
             q_row0, params.seq_q, out_slice, params.o_ss,
             params.lse == nullptr
                 ? nullptr
                 : params.lse + (static_cast<long long>(b) * params.q_heads + head) * params.seq_q,
             params.scale_log2);
}
