// Block-sparse flash attention, backward pass, for Hopper (sm_90a): FlashAttention-3's key-major
// schedule (Shah et al. 2024) on our transposed look-up table. The algorithm, the table and the
// prep kernel (Δ = rowsum(dO ∘ O) - dLSE, the base-2 logsumexp) are those of fused.cu: read its
// header first. This file changes who does what.
//
// A CTA owns one key tile of BLOCK_N = 128 keys of one kv head and batch element, and walks the
// query tiles (BLOCK_M = 64 or 128 rows) that attend to it for query heads [first_head, end_head) of the
// kv group (all of them, or one of n_splits slices when the grid would be too small: the host
// then sums the fp32 partial dK, dV of the slices). A CTA is three warpgroups:
// - warpgroup 0, the producer, gives its registers away (setmaxnreg); one thread loads K and V
//   once with TMA, then per step the Q and dO tiles (TMA) and the tile's lse2 and Δ rows (one
//   TMA box of a 3-d map) into a ring of STAGES buffers, each with a "full" mbarrier (completed by the copy
//   engine) and an "empty" one (one arrival per consumer warp once its reads are done);
// - consumer warpgroup g owns keys [64g, 64g + 64) and keeps their dK, dV in registers. Per step:
//       Sᵀ = K_g Qᵀ, dPᵀ = V_g dOᵀ     (wgmma, both operands K-major in shared memory; issued
//                                       together, Pᵀ computed while dPᵀ is on the tensor cores)
//       Pᵀ = 2^(Sᵀ·c - lse2)          dV += Pᵀ dO   (A = Pᵀ from registers; dO N-major)
//       dSᵀ = Pᵀ ∘ (dPᵀ - Δ)          dK += dSᵀ Q   (A = dSᵀ from registers; Q N-major)
//   dSᵀ also goes to shared memory (two buffers, one per step parity), and after a named barrier
//   of both consumers: dQ = dS K with A = dS read MN-major from the dSᵀ tile and B = the K tile
//   MN-major. At D = 128 warpgroup g computes head dims [64g, 64g + 64); at D = 64 with 128-row
//   steps, queries [64g, 64g + 64); at D = 64 with 64-row steps warpgroup (step & 1) computes all
//   64 (a 64 x 64 x 128 product; the other skips it that step).
// Why 64-row query steps at D = 128: Sᵀ, dPᵀ (32 + 32), dK, dV (2 · D/2) and dQ (32) fp32
// accumulators per thread fit the 240 registers of a consumer only so. At D = 64, 128-row steps
// fit as 64 + 64 + 2 · 32 + 32 when Sᵀ and dPᵀ are not carried between steps (their first k-step
// only writes them) and dV is issued after dSᵀ is computed (sm90_layout.cuh: kLateDv).
//
// dQ, DQ_MODE: 0 none (the query-major kernel of sm90_dq.cu computes it: deterministic);
// 1 fp32 atomics (red.global.add.v2.f32) into dq_acc [B, Hq, seq_q, D], scale applied;
// 2 each warpgroup stages its 64 x 64 fp32 part in its own 16 KB of shared memory, in thread
// order (float4 j·128 + t of thread t holds its accumulator atom j), and one thread adds it to
// the matching 16 KB tile of dq_acc [B, Hq, seq_q_pad / 64, D / 64, 4096] with one bulk reduction
// (cp.reduce.async.bulk .add.f32); `attention_bwd_dq_convert` then writes the 16-bit dq. With
// DQ_WRITER = 1 the reduction is issued by a writer warp of the producer warpgroup, one per
// consumer, on mbarriers (the consumers arrive once their part is staged and go on; they wait
// only to overwrite a tile it has not read yet); else by the consumer after two named barriers.
//
// Token tiles (partial blocks, TOKENS = 1; token_mask.cuh): the table's entry (q_tile, 8, token
// tile, 0) names BLOCK_N key rows of BLOCK_M / 32 words. The producer copies them (one 1 KB TMA
// box) into its stage's slot with the step's Q and dO, on the same "full" mbarrier (its expected
// bytes count them); after that wait each consumer thread reads its two key rows and sets the
// masked scores of Sᵀ to -inf before Pᵀ, as fused.cu does, so Pᵀ and dSᵀ are 0 there (a query
// row with no key at all has lse2 = +inf: P is 0 on its whole column). The slot is free with the
// stage's Q tile. TOKENS = 0 compiles none of it: plans without partial blocks run the code they
// ran before. Full tiles copy and read nothing either way.
//
// Inputs: the fields of HopperBackwardParams and DqConvertParams (params.cuh). Tensor maps: 4-d
// [D, S, H, B] views with boxes of 64 x BLOCK_M (q, d_o) and 64 x BLOCK_N (k, v).
// DQ_FIRST = 1 issues a step's dQ product ahead of its dK product, so that the dQ part is staged
// or added while dK runs on the tensor cores (else they wait for it).
//
// Defines: DTYPE_BF16, HEAD_DIM (64, 128), STAGES (2, 3), DQ_MODE (0, 1, 2), TOKENS (0/1),
// DQ_FIRST (0/1), DQ_WRITER (0/1, DQ_MODE 2). Shapes and the shared memory map: sm90_layout.cuh.

#if !defined(DTYPE_BF16) || !defined(HEAD_DIM) || !defined(BLOCK_M) || !defined(STAGES) || \
    !defined(DQ_MODE) || !defined(TOKENS) || !defined(DQ_FIRST) || !defined(DQ_WRITER)
#error "define DTYPE_BF16, HEAD_DIM, BLOCK_M, STAGES, DQ_MODE, TOKENS, DQ_FIRST, DQ_WRITER"
#endif

#include "attention_common.cuh"
#include "attention_bwd_scores.cuh"
#include "hopper.cuh"
#include "key_walk.cuh"
#include "params.cuh"
#include "sm90_dq_parts.cuh"
#include "sm90_layout.cuh"
#include "token_mask.cuh"
#include "wgmma.cuh"

namespace {

// The producer's single thread: K and V, then Q, dO, lse2, Δ (and a token tile's words, TOKENS)
// of every step into the ring, with the step's table entry, which the consumers read there
// rather than wait on global memory for it.
__device__ __forceinline__ void produce(const HopperBackwardParams& p, const Shared& sh,
                                        const KeyTile& tile) {
  KeyWalk walk = tile.walk();
  bool have = walk.next(p.lists, p.shared_layout, p.n_k_tiles, tile.k_tile);
  const int bits = p.broadcast;
  if (have) {
    const int k_b = (bits & 4) ? 0 : tile.b, k_h = (bits & 8) ? 0 : tile.kv_head;
    const int v_b = (bits & 16) ? 0 : tile.b, v_h = (bits & 32) ? 0 : tile.kv_head;
    barrier_expect_bytes(sh.kv_full(), 2 * kKVBytes);
    load_rows<kBlockN, kHeadDim>(sh.k, p.k_map, sh.kv_full(), tile.k_tile * kBlockN, k_h, k_b);
    load_rows<kBlockN, kHeadDim>(sh.v, p.v_map, sh.kv_full(), tile.k_tile * kBlockN, v_h, v_b);
  }
  for (int n = 0; have; ++n) {
    const int stage = n % kStages;
    barrier_wait(sh.q_empty(stage), ((n / kStages) & 1) ^ 1);  // a fresh buffer counts as free
    const Int4 entry = load_entry(p.entries + walk.entry());
    const int q_row0 = entry.x * kBlockM;
    const int q_b = (bits & 1) ? 0 : tile.b, q_h = (bits & 2) ? 0 : walk.head;
    const int o_b = (bits & 64) ? 0 : tile.b, o_h = (bits & 128) ? 0 : walk.head;
    const unsigned full = sh.q_full(stage);
    const bool tokens = kTokens && (entry.y & kFlagTokens);
    store_entry_shared(sh.entry_slot(stage), entry);  // released by the arrive
    barrier_expect_bytes(full, 2 * kQBytes + kRowsBytes + (tokens ? kTokenBytes : 0));
    if (tokens) {
      tma_load_2d(sh.token_slot(stage), p.token_map, full, 0,
                  token_tile_map_row<kBlockN, kSAtoms>(entry));
    }
    load_rows<kBlockM, kHeadDim>(sh.q_tile(stage), p.q_map, full, q_row0, q_h, q_b);
    load_rows<kBlockM, kHeadDim>(sh.do_tile(stage), p.do_map, full, q_row0, o_h, o_b);
    const int row_tile = (tile.b * p.q_heads + walk.head) * (p.seq_q_pad / kBlockM) + entry.x;
    tma_load_3d(sh.rows_of(stage), p.rows_map, full, 0, row_tile, 0);  // lse2, then Δ
    have = walk.next(p.lists, p.shared_layout, p.n_k_tiles, tile.k_tile);
  }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads, 1)
    attention_bwd_hopper(const __grid_constant__ HopperBackwardParams params) {
  extern __shared__ __align__(1024) Bits128 shared_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>(shared_raw);
  const Shared sh(shared_address(shared_raw));
  const KeyTile tile(params, blockIdx.x);
  const int warp = warp_index();
  if (threadIdx.x == 0) {
    barrier_init(sh.kv_full(), 1);
#pragma unroll
    for (int stage = 0; stage < kStages; ++stage) {
      barrier_init(sh.q_full(stage), 1);
      barrier_init(sh.q_empty(stage), 8);  // one arrival per consumer warp
    }
    if (kDqWriter) {
      for (int group = 0; group < 2; ++group) {
        barrier_init(sh.dq_full(group), 4);  // one arrival per warp of the warpgroup
        barrier_init(sh.dq_empty(group), 1);
      }
    }
    barrier_init_fence();
  }
  __syncthreads();

  if (warp < 4) {  // ---- producer warpgroup
    registers_release<kProducerRegisters>();
    if (threadIdx.x == 0) produce(params, sh, tile);
    if (kDqWriter && (warp == 1 || warp == 2) && fresh_lane() == 0) {
      write_dq(params, sh, tile, warp - 1);
    }
    return;
  }
  registers_claim<kConsumerRegisters>();

  // ---- consumer warpgroup `group`: keys [64 group, 64 group + 64) of the tile
  const int group = warp / 4 - 1;
  const int key_row0 = 64 * group + 16 * (warp & 3);  // this warp's first key in the tile
  const int k_row0 = tile.k_tile * kBlockN;
  const bool arrives = fresh_lane() == 0;  // one arrival per warp on "empty" barriers
  const unsigned k_rows = sh.k + group * 64 * 128, v_rows = sh.v + group * 64 * 128;
  const float* rows_f = reinterpret_cast<const float*>(smem + (sh.rows - sh.k));
  float dk[kOAtoms][4], dv[kOAtoms][4], s[kSAtoms][4], dp[kSAtoms][4], dq[8][4];
#pragma unroll
  for (int j = 0; j < kOAtoms; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[j][e] = dv[j][e] = 0.f;
  }
#pragma unroll
  for (int j = 0; j < kSAtoms; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] = dp[j][e] = dq[j % 8][e] = 0.f;
  }

  KeyWalk walk = tile.walk();
  bool have = walk.next(params.lists, params.shared_layout, params.n_k_tiles, tile.k_tile);
  if (have) barrier_wait(sh.kv_full(), 0);
  for (int n = 0; have; ++n) {
    const int stage = n % kStages;
    const unsigned q_tile = sh.q_tile(stage), do_tile = sh.do_tile(stage);
    const float* lse_row = rows_f + stage * 2 * kBlockM;
    barrier_wait(sh.q_full(stage), (n / kStages) & 1);
    const Int4 entry = load_entry_shared(sh.entry_slot(stage));  // the producer's copy

    // Sᵀ and dPᵀ together; Pᵀ while dPᵀ runs
    if (!kFreshScores) {
      pin(s);
      pin(dp);
    }
    wgmma_fence();
    issue_rows_times_rows<kHeadDim, kSAtoms, kFreshScores>(s, k_rows, kBlockN * 128, q_tile,
                                                            kBlockM * 128);
    wgmma_commit();
    issue_rows_times_rows<kHeadDim, kSAtoms, kFreshScores>(dp, v_rows, kBlockN * 128, do_tile,
                                                            kBlockM * 128);
    wgmma_commit();
    wgmma_wait<1>();
    pin(s);
    if (entry.y != 0) {  // full tiles never mask
      if (kTokens && (entry.y & kFlagTokens)) {
        apply_token_rows(s, load_token_rows<kSAtoms>(sh.token_slot(stage), key_row0));
      } else {
        mask_transposed<kBlockN>(s, entry, key_row0, k_row0, entry.x * kBlockM,
                                 params.sub_rows_log2, params.sub_cols_log2,
                                 params.causal_offset, params.seq_k);
      }
    }
    probabilities_by_columns(s, lse_row, params.scale_log2, fresh_lane());
    unsigned pt[kBlockM / 16][4], ds[kBlockM / 16][4];
    auto issue_dv = [&] {  // dV += Pᵀ dO
      pack_fragments(s, pt);
      pin(dv);
      pin(pt);
      wgmma_fence();
      issue_fragments_times_rows(dv, pt, do_tile, kBlockM * 128);
      wgmma_commit();
    };
    if (!kLateDv) issue_dv();  // dSᵀ computed while it runs
    wgmma_wait<kLateDv ? 0 : 1>();  // dPᵀ has landed
    pin(dp);
    score_gradients_by_columns(dp, s, lse_row + kBlockM, fresh_lane());
    if (kLateDv) issue_dv();
    pack_fragments(dp, ds);
    if (kDqMode != 0) {
      store_transposed(ds, smem + (sh.ds_tile(n & 1) - sh.k), key_row0, fresh_lane(),
                       kBlockN * 128);
      fence_async_proxy();  // dSᵀ is read by the tensor cores
    }
    // dK += dSᵀ Q: ahead of dQ, or (DQ_FIRST, where this warpgroup computes dQ) after it
    auto issue_dk = [&] {
      pin(dk);
      pin(ds);
      wgmma_fence();
      issue_fragments_times_rows(dk, ds, q_tile, kBlockM * 128);
      wgmma_commit();
    };
    const bool computes_dq = kDqMode != 0 && (kDqEveryStep || (n & 1) == group);
    const int dq_block = kDqBlocks == 2 ? group : 0;     // head dims: K's column block
    const int ds_block = kBlockM == 128 ? group : 0;     // queries: dSᵀ's column block
    const int rows_tile = dq_rows_tile(entry.x, group);  // of dq_acc
    const bool dk_first = !kDqFirst || !computes_dq;
    if (dk_first) issue_dk();
    // Q, dO, lse2 and Δ read once dV and dK have landed (their registers stay theirs until then)
    auto release = [&] {
      pin(dv);
      pin(pt);
      pin(dk);
      pin(ds);
      if (arrives) barrier_arrive(sh.q_empty(stage));
    };
    // dQ = dS K once both warpgroups' dSᵀ is in shared memory
    if (kDqMode != 0) named_sync(1, 256);
    if (computes_dq) {
      pin(dq);
      wgmma_fence();
      const unsigned long long ds0 = descriptor(sh.ds_tile(n & 1) + ds_block * kBlockN * 128, 1024);
      const unsigned long long k0 = descriptor(sh.k + dq_block * kBlockN * 128, 1024);
#pragma unroll
      for (int ks = 0; ks < kBlockN / 16; ++ks) {  // dSᵀ and K rows are keys: both MN-major
        wgmma_ss<1, 1>(dq, advance(ds0, ks * 16 * 128), advance(k0, ks * 16 * 128), ks > 0);
      }
      wgmma_commit();
      if (dk_first) {
        wgmma_wait<1>();  // dV and dK have landed
        release();
        wgmma_wait<0>();
        pin(dq);
        add_dq(params, sh, smem, dq, group, tile.b, walk.head, rows_tile, dq_block, n);
      } else {
        issue_dk();
        wgmma_wait<1>();  // dV and dQ have landed: add dQ while dK runs
        pin(dq);
        add_dq(params, sh, smem, dq, group, tile.b, walk.head, rows_tile, dq_block, n);
        wgmma_wait<0>();
        release();
      }
    } else {
      wgmma_wait<0>();
      release();
    }
    have = walk.next(params.lists, params.shared_layout, params.n_k_tiles, tile.k_tile);
  }
  if (kDqMode == 2 && !kDqWriter && fresh_thread() % 128 == 0) bulk_wait<0>();

  // ---- dK (times scale) and dV of this warp's 16 keys: 16-bit, or fp32 partials of a split
  // (the tile derived again: kept through the loop, its fields spilled at 128-row steps)
  const KeyTile home(params, fresh_block());
  const int lane = fresh_lane();
  const long long kv_slice = static_cast<long long>(home.b) * params.kv_heads + home.kv_head;
  const bool partial = params.n_splits > 1;
  const long long row0 = partial ? (kv_slice * params.n_splits + home.split) * params.seq_k
                                 : kv_slice * params.seq_k;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int key = home.k_tile * kBlockN + key_row0 + half * 8 + (lane >> 2);
    if (key < params.seq_k) {
#pragma unroll
      for (int dn = 0; dn < kOAtoms; ++dn) {
        const long long at = (row0 + key) * kHeadDim + dn * 8 + 2 * (lane & 3);
        const float2 k_pair{params.scale * dk[dn][2 * half], params.scale * dk[dn][2 * half + 1]};
        const float2 v_pair{dv[dn][2 * half], dv[dn][2 * half + 1]};
        if (partial) {
          *reinterpret_cast<float2*>(params.dk_part + at) = k_pair;
          *reinterpret_cast<float2*>(params.dv_part + at) = v_pair;
        } else {
          *reinterpret_cast<unsigned*>(params.dk + at) = pack_pair(k_pair.x, k_pair.y);
          *reinterpret_cast<unsigned*>(params.dv + at) = pack_pair(v_pair.x, v_pair.y);
        }
      }
    }
  }
}

// dq [B, Hq, seq_q, D] (16-bit) from the tiled fp32 dq_acc of DQ_MODE 2: float4 i is element
// atom j = (i / 128) % 8 of thread t = i % 128 of the warpgroup that staged the 64 x 64 tile
// i / 1024 (tiles ordered (b · Hq + h, query tile, head-dim block)).
extern "C" __global__ void __launch_bounds__(256)
    attention_bwd_dq_convert(const __grid_constant__ DqConvertParams params) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= params.n_vectors) return;
  const float4 x = __ldg(reinterpret_cast<const float4*>(params.dq_acc) + i);
  const int t = static_cast<int>(i & 127), j = static_cast<int>((i >> 7) & 7);
  const long long tile = i >> 10;
  const int block = static_cast<int>(tile % kDqBlocks);
  const int n_q_tiles = params.seq_q_pad / kDqRows;
  const int q_tile = static_cast<int>((tile / kDqBlocks) % n_q_tiles);
  const long long bh = tile / kDqBlocks / n_q_tiles;
  const int lane = t & 31;
  const int row = q_tile * kDqRows + 16 * (t >> 5) + (lane >> 2);
  const int column = block * 64 + j * 8 + 2 * (lane & 3);
  unsigned short* slice = params.dq + bh * params.seq_q * kHeadDim + column;
  if (row < params.seq_q) {
    *reinterpret_cast<unsigned*>(slice + static_cast<long long>(row) * kHeadDim) =
        pack_pair(x.x, x.y);
  }
  if (row + 8 < params.seq_q) {
    *reinterpret_cast<unsigned*>(slice + static_cast<long long>(row + 8) * kHeadDim) =
        pack_pair(x.z, x.w);
  }
}
