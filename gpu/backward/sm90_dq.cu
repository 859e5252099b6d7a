// Block-sparse flash attention, backward pass, dQ alone, for Hopper (sm_90a): query-major over
// the forward's look-up table (gpu/forward/lut.py), so that each query tile's dQ is summed in
// registers by one CTA, with no atomics and in a fixed order: the deterministic dQ of the
// backward (sm90.cu computes dK and dV beside it with DQ_MODE 0). It recomputes S and dP:
//     S  = Q Kᵀ        P  = 2^(S·c - lse2)          (c = scale·log2 e; masked: 0)
//     dP = dO Vᵀ       dS = P ∘ (dP - Δ)            dQ += scale · dS K
// with lse2 and Δ from the backward's prep kernel (fused.cu).
//
// One CTA per work unit (a query tile of BLOCK_M = 128 rows for one batch element and head, in
// the forward table's heaviest-first order; persistent_units.cuh's `work_unit`). Three
// warpgroups, as in the forward (sm90.cu there):
// - warpgroup 0, the producer, gives its registers away; one thread loads Q and dO once, then
//   the K and V tiles (BLOCK_N = 64 keys) of each active key tile through a ring of STAGES
//   buffers with full / empty mbarriers;
// - consumer warpgroup g owns query rows [64g, 64g + 64): S and dP issued together (both
//   operands K-major in shared memory), P while dP is on the tensor cores, then dQ += dS K with
//   dS from registers (the accumulator layout is the A-fragment layout) and K N-major.
// At the end each thread writes its rows of dQ (times scale) in 16 bits; rows past seq_q are
// dropped (their lse2 reads as +inf, so P is 0 there).
// Token tiles (partial blocks, TOKENS = 1; token_mask.cuh): the forward table's entry (k_tile,
// 8, token tile, 0) names BLOCK_M query rows of BLOCK_N / 32 words. The producer copies them
// (one 1 KB TMA box) into its stage's slot with the K tile, on the K tile's "full" mbarrier;
// each consumer thread reads its two rows after that wait and sets the masked scores of S to -inf
// before P, so P and dS are 0 there. The slot is free with the K tile. TOKENS = 0 compiles none
// of it. Full tiles copy and read nothing.
//
// Inputs: the fields of HopperDqParams (params.cuh). Tensor maps: 4-d [D, S, H, B] views with
// boxes of 64 x BLOCK_M (q, d_o) and 64 x BLOCK_N (k, v).
// Defines: DTYPE_BF16, HEAD_DIM (64, 128), STAGES (2, 3), TOKENS (0/1).

#if !defined(DTYPE_BF16) || !defined(HEAD_DIM) || !defined(STAGES) || !defined(TOKENS)
#error "define DTYPE_BF16, HEAD_DIM, STAGES, TOKENS"
#endif

#include "attention_common.cuh"
#include "attention_bwd_scores.cuh"
#include "attention_forward.cuh"
#include "hopper.cuh"
#include "params.cuh"
#include "persistent_units.cuh"
#include "token_mask.cuh"
#include "wgmma.cuh"

namespace {

constexpr int kHeadDim = HEAD_DIM;
constexpr int kStages = STAGES;
constexpr int kBlockM = 128;  // query rows per CTA: 64 per consumer warpgroup
constexpr int kBlockN = 64;   // keys per tile
constexpr int kThreads = 384;
constexpr int kSAtoms = kBlockN / 8;
constexpr int kOAtoms = kHeadDim / 8;
constexpr unsigned kQBytes = kBlockM * kHeadDim * 2;
constexpr unsigned kTileBytes = kBlockN * kHeadDim * 2;
constexpr bool kTokens = TOKENS;
constexpr unsigned kTokenBytes = kTokens ? token_tile_bytes<kBlockM, kSAtoms>() : 0;  // a slot
constexpr int kProducerRegisters = 24;
constexpr int kConsumerRegisters = 240;  // (168 · 3 - 24) / 2, one CTA per SM

static_assert(kHeadDim == 64 || kHeadDim == 128, "HEAD_DIM must be 64 or 128");
static_assert(kStages == 2 || kStages == 3, "STAGES must be 2 or 3");

// The shared-memory plan: Q | dO | K stages | V stages | token slots (TOKENS) | mbarriers.
struct Shared {
  unsigned q, d_o, k, v, tokens, bars;
  __device__ explicit Shared(unsigned base) {
    q = base;
    d_o = q + kQBytes;
    k = d_o + kQBytes;
    v = k + kStages * kTileBytes;
    tokens = v + kStages * kTileBytes;
    bars = tokens + kStages * kTokenBytes;
  }
  __device__ unsigned k_tile(int stage) const { return k + stage * kTileBytes; }
  __device__ unsigned v_tile(int stage) const { return v + stage * kTileBytes; }
  __device__ unsigned token_slot(int stage) const { return tokens + stage * kTokenBytes; }
  __device__ unsigned q_full() const { return bars; }
  __device__ unsigned k_full(int stage) const { return bars + 8 * (1 + stage); }
  __device__ unsigned k_empty(int stage) const { return bars + 8 * (1 + kStages + stage); }
  __device__ unsigned v_full(int stage) const { return bars + 8 * (1 + 2 * kStages + stage); }
  __device__ unsigned v_empty(int stage) const { return bars + 8 * (1 + 3 * kStages + stage); }
};

// The producer's single thread: Q and dO, then K (with a token tile's words, TOKENS) and V of
// every active key tile.
__device__ __forceinline__ void produce(const HopperDqParams& p, const Shared& sh,
                                        const Work& work) {
  const int bits = p.broadcast;
  const int q_b = (bits & 1) ? 0 : work.b, q_h = (bits & 2) ? 0 : work.head;
  const int k_b = (bits & 4) ? 0 : work.b, k_h = (bits & 8) ? 0 : work.kv_head;
  const int v_b = (bits & 16) ? 0 : work.b, v_h = (bits & 32) ? 0 : work.kv_head;
  const int o_b = (bits & 64) ? 0 : work.b, o_h = (bits & 128) ? 0 : work.head;
  barrier_expect_bytes(sh.q_full(), 2 * kQBytes);
  load_rows<kBlockM, kHeadDim>(sh.q, p.q_map, sh.q_full(), work.q_row0, q_h, q_b);
  load_rows<kBlockM, kHeadDim>(sh.d_o, p.do_map, sh.q_full(), work.q_row0, o_h, o_b);
  for (int n = 0; n < work.count; ++n) {
    const int stage = n % kStages;
    const unsigned parity = ((n / kStages) & 1) ^ 1;  // a fresh buffer counts as free
    const Int4 entry = load_entry(p.entries + work.first + n);
    const int k_row0 = entry.x * kBlockN;
    barrier_wait(sh.k_empty(stage), parity);
    const bool tokens = kTokens && (entry.y & kFlagTokens);
    barrier_expect_bytes(sh.k_full(stage), kTileBytes + (tokens ? kTokenBytes : 0));
    if (tokens) {
      tma_load_2d(sh.token_slot(stage), p.token_map, sh.k_full(stage), 0,
                  token_tile_map_row<kBlockM, kSAtoms>(entry));
    }
    load_rows<kBlockN, kHeadDim>(sh.k_tile(stage), p.k_map, sh.k_full(stage), k_row0, k_h, k_b);
    barrier_wait(sh.v_empty(stage), parity);
    barrier_expect_bytes(sh.v_full(stage), kTileBytes);
    load_rows<kBlockN, kHeadDim>(sh.v_tile(stage), p.v_map, sh.v_full(stage), k_row0, v_h, v_b);
  }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads, 1)
    attention_bwd_dq_hopper(const __grid_constant__ HopperDqParams params) {
  extern __shared__ __align__(1024) Bits128 shared_raw[];
  const Shared sh(shared_address(shared_raw));
  const int pairs = params.batch * params.heads_per_item;
  const Work work = work_unit(params.items, blockIdx.x, params.n_work / pairs, params.batch,
                              params.heads_per_item, params.kv_group, pairs, kBlockM);
  const int warp = warp_index();
  if (threadIdx.x == 0) {
    barrier_init(sh.q_full(), 1);
#pragma unroll
    for (int stage = 0; stage < kStages; ++stage) {
      barrier_init(sh.k_full(stage), 1);
      barrier_init(sh.v_full(stage), 1);
      barrier_init(sh.k_empty(stage), 8);  // one arrival per consumer warp
      barrier_init(sh.v_empty(stage), 8);
    }
    barrier_init_fence();
  }
  __syncthreads();

  if (warp < 4) {  // ---- producer warpgroup
    registers_release<kProducerRegisters>();
    if (threadIdx.x == 0) produce(params, sh, work);
    return;
  }
  registers_claim<kConsumerRegisters>();

  // ---- consumer warpgroup `group`: query rows [64 group, 64 group + 64) of the tile
  const int group = warp / 4 - 1;
  const int warp_row0 = 64 * group + 16 * (warp & 3);
  const int lane = fresh_lane();
  const bool arrives = lane == 0;
  const unsigned q_rows = sh.q + group * 64 * 128, do_rows = sh.d_o + group * 64 * 128;
  const long long pair = static_cast<long long>(work.b) * params.q_heads + work.head;
  float lse2[2], delta[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = work.q_row0 + warp_row0 + half * 8 + (lane >> 2);
    const bool inside = row < params.seq_q;
    const long long at = pair * params.seq_q_pad + row;
    lse2[half] = inside ? __ldg(params.lse2 + at) : -negative_infinity();
    delta[half] = inside ? __ldg(params.delta + at) : 0.f;
  }
  float s[1][kSAtoms][4], dp[1][kSAtoms][4], dq[kOAtoms][4];
  unsigned ds[kBlockN / 16][4];
#pragma unroll
  for (int j = 0; j < kSAtoms; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[0][j][e] = dp[0][j][e] = 0.f;
  }
#pragma unroll
  for (int j = 0; j < kOAtoms; ++j) dq[j][0] = dq[j][1] = dq[j][2] = dq[j][3] = 0.f;

  barrier_wait(sh.q_full(), 0);
  for (int n = 0; n < work.count; ++n) {
    const Int4 entry = load_entry(params.entries + work.first + n);
    const int stage = n % kStages;
    const unsigned parity = (n / kStages) & 1;
    barrier_wait(sh.k_full(stage), parity);
    barrier_wait(sh.v_full(stage), parity);
    // S and dP together; P while dP runs
    pin(s[0]);
    pin(dp[0]);
    wgmma_fence();
    issue_rows_times_rows<kHeadDim>(s[0], q_rows, kBlockM * 128, sh.k_tile(stage), kBlockN * 128);
    wgmma_commit();
    issue_rows_times_rows<kHeadDim>(dp[0], do_rows, kBlockM * 128, sh.v_tile(stage),
                                    kBlockN * 128);
    wgmma_commit();
    wgmma_wait<1>();
    pin(s[0]);
    if (entry.y != 0) {  // full tiles never mask
      if (kTokens && (entry.y & kFlagTokens)) {
        apply_token_rows(s[0], load_token_rows<kSAtoms>(sh.token_slot(stage), warp_row0));
      } else {
        apply_mask(s, entry, warp_row0, work.q_row0, params.sub_rows_log2,
                   params.sub_cols_log2, params.causal_offset, params.seq_k);
      }
    }
    probabilities_by_rows(s[0], lse2, params.scale_log2);
    wgmma_wait<0>();
    pin(dp[0]);
    if (arrives) barrier_arrive(sh.v_empty(stage));
    score_gradients_by_rows(dp[0], s[0], delta);
    pack_fragments(dp[0], ds);
    // dQ += dS K
    pin(dq);
    pin(ds);
    wgmma_fence();
    issue_fragments_times_rows(dq, ds, sh.k_tile(stage), kBlockN * 128);
    wgmma_commit();
    wgmma_wait<0>();
    pin(dq);
    pin(ds);
    if (arrives) barrier_arrive(sh.k_empty(stage));
  }

  // ---- dQ (times scale) of this warp's 16 rows
  unsigned short* slice = params.dq + pair * params.seq_q * kHeadDim;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = work.q_row0 + warp_row0 + half * 8 + (lane >> 2);
    if (row < params.seq_q) {
#pragma unroll
      for (int dn = 0; dn < kOAtoms; ++dn) {
        *reinterpret_cast<unsigned*>(slice + static_cast<long long>(row) * kHeadDim + dn * 8 +
                                     2 * (lane & 3)) =
            pack_pair(params.scale * dq[dn][2 * half], params.scale * dq[dn][2 * half + 1]);
      }
    }
  }
}
