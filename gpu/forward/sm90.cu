// Block-sparse flash attention, forward pass, for Hopper (sm_90a): FlashAttention-3's structure
// (Shah et al. 2024) on our look-up tables. The algorithm and the table format are those of
// sm80.cu (read its header first); this file changes how the work is scheduled.
//
// Persistent CTAs: at most MIN_BLOCKS per SM, each running its share of the work units (a query
// tile for one batch element and head) in the order of persistent_units.cuh. Q has two buffers,
// so the next unit's Q and first K/V tiles load while the current one ends.
//
// Warp specialisation. A CTA is 1 + CONSUMERS warpgroups:
// - warpgroup 0, the producer, gives most of its registers away (setmaxnreg) and one thread of
//   it issues every load with TMA: per unit the Q tile, then the K and V tiles of each active
//   key tile into a ring of STAGES buffers that runs on across units. Each buffer has a "full"
//   mbarrier (the copy engine completes it with the bytes it wrote) and an "empty" one (each
//   consumer warp arrives when its tensor-core reads of the buffer are done, or for Q, when it
//   has stored its rows of the output through it).
// - consumer warpgroup g owns query rows [64g, 64g + 64) of the 64 · CONSUMERS-row query tile
//   and the whole key tile: S = Q K^T (wgmma, both operands in shared memory), the online
//   softmax in registers, O += P V (P from registers, V N-major in shared memory).
// One consumer (64-row query tiles) runs two or three CTAs per SM, which hide each other's
// per-unit latency (short rows) and waste less on layouts scattered in small blocks.
// Token tiles (partial blocks, token_mask.cuh), only in TOKENS = 1 builds (plans with partial
// blocks): the token code in the loop, though never run on full tiles, slowed them by 9 % at
// D=64. TOKEN_STAGES = 1: the producer copies a token tile's words (one TMA box) into its
// stage's slot beside the K tile, completing on the same "full" mbarrier (its expected bytes
// count them), and each consumer thread reads its rows (two vector loads) after that wait,
// before S is issued; the slot is free when the consumers arrive on the K tile's "empty"
// barrier. TOKEN_STAGES = 0 (no shared memory to spare): each consumer thread loads its rows
// from global memory a tile ahead, once the previous tile is masked. TOKENS consumers read each
// entry a tile ahead, others at the top of its step (1-2 % faster); full tiles load no words.
// Overlap. Inside a warpgroup, S of tile n + 1 and P·V of tile n are issued together and the
// softmax of tile n + 1 runs while P·V of tile n is still on the tensor cores (wgmma.wait_group
// 1); O is rescaled once P·V has landed. With PINGPONG (two consumers), the consumers take turns
// (named barriers) to issue their products, so one's softmax runs under the other's matrix work.
//
// Tiles in shared memory: 64-element column blocks of 128-byte rows with the 128-byte swizzle
// (16-byte chunk c of row r at chunk c ^ (r & 7)), written that way by TMA and read that way by
// wgmma. Rows past the sequence ends are zero-filled by TMA. At the end each warp normalises
// its 16 rows, stages them through its own rows of the Q tile and writes 16-byte stores.
//
// Inputs: the fields of HopperForwardParams (params.cuh). Tensor maps
// (gpu/forward/tensor_maps.py): 4-d [D, S, H, B] views of q, k and v with boxes of 64 x
// BLOCK_M (q) and 64 x BLOCK_N (k, v). `broadcast` bit 2i / 2i + 1: operand i (q, k, v) has a
// zero batch / head stride; its map then has extent 1 there and the coordinate is 0.
//
// Compile-time defines: DTYPE_BF16, HEAD_DIM (64 or 128), BLOCK_N (64 or 128), STAGES (2 to 4),
// CONSUMERS (1 or 2), MIN_BLOCKS (CTAs per SM: 1 with two consumers, 2 or 3 with one),
// PINGPONG (0/1; 1 needs two consumers), TOKENS (0/1: token tiles masked), TOKEN_STAGES (0/1:
// their words through the stages).

#if !defined(DTYPE_BF16) || !defined(HEAD_DIM) || !defined(BLOCK_N) || !defined(STAGES) || \
    !defined(CONSUMERS) || !defined(MIN_BLOCKS) || !defined(PINGPONG) || !defined(TOKENS) || \
    !defined(TOKEN_STAGES)
#error "define each compile-time define listed above (HopperConfig.defines gives them)"
#endif

#include "attention_common.cuh"
#include "attention_forward.cuh"
#include "hopper.cuh"
#include "params.cuh"
#include "persistent_units.cuh"
#include "token_mask.cuh"
#include "wgmma.cuh"

namespace {

constexpr int kHeadDim = HEAD_DIM;
constexpr int kBlockN = BLOCK_N;
constexpr int kConsumers = CONSUMERS;
constexpr int kMinBlocks = MIN_BLOCKS;  // CTAs per SM
constexpr int kStages = STAGES;
constexpr int kBlockM = 64 * kConsumers;
constexpr int kThreads = 128 * (kConsumers + 1);
constexpr int kSAtoms = kBlockN / 8;   // 8-column atoms of S
constexpr int kOAtoms = kHeadDim / 8;  // 8-column atoms of O
constexpr unsigned kQBytes = kBlockM * kHeadDim * 2;
constexpr unsigned kTileBytes = kBlockN * kHeadDim * 2;
constexpr unsigned kTokenBytes = token_tile_bytes<kBlockM, kSAtoms>();  // one stage's slot
constexpr bool kTokens = TOKENS;
constexpr bool kTokenStages = kTokens && TOKEN_STAGES;
// Registers per thread. setmaxnreg moves registers within a CTA only, so the consumers can
// claim what the producer releases and no more: with E at entry (the most that lets MIN_BLOCKS
// CTAs share the 65536 of an SM, a multiple of 8), each consumer gets (E·(1 + C) - 24) / C for
// C consumers: 240 for one CTA of two (E = 168), 232 for two CTAs (E = 128), 136 for three
// (E = 80).
constexpr int kProducerRegisters = 24;
constexpr int kEntryRegisters = 65536 / (kThreads * kMinBlocks) / 8 * 8;
constexpr int kConsumerRegisters =
    (kEntryRegisters * (1 + kConsumers) - kProducerRegisters) / kConsumers / 8 * 8;

static_assert(kHeadDim == 64 || kHeadDim == 128, "HEAD_DIM must be 64 or 128");
static_assert(kBlockN == 64 || kBlockN == 128, "BLOCK_N must be 64 or 128");
static_assert(kStages >= 2 && kStages <= 4, "STAGES must be 2 to 4");
static_assert(kConsumers == 1 || kConsumers == 2, "CONSUMERS must be 1 or 2");
static_assert(!PINGPONG || kConsumers == 2, "PINGPONG needs two consumers");
static_assert(kConsumers == 2 ? kMinBlocks == 1 : (kMinBlocks == 2 || kMinBlocks == 3),
              "MIN_BLOCKS must be 1 with two consumers, 2 or 3 with one");

// The shared-memory plan: two Q tiles | K stages | V stages | token slots (TOKEN_STAGES) |
// mbarriers.
struct Shared {
  unsigned q, k, v, tokens, bars;
  __device__ unsigned q_tile(int buffer) const { return q + buffer * kQBytes; }
  __device__ unsigned k_tile(int stage) const { return k + stage * kTileBytes; }
  __device__ unsigned v_tile(int stage) const { return v + stage * kTileBytes; }
  __device__ unsigned token_slot(int stage) const { return tokens + stage * kTokenBytes; }
  __device__ unsigned q_full(int buffer) const { return bars + 8 * buffer; }
  __device__ unsigned q_empty(int buffer) const { return bars + 8 * (2 + buffer); }
  __device__ unsigned k_full(int stage) const { return bars + 8 * (4 + stage); }
  __device__ unsigned k_empty(int stage) const { return bars + 8 * (4 + kStages + stage); }
  __device__ unsigned v_full(int stage) const { return bars + 8 * (4 + 2 * kStages + stage); }
  __device__ unsigned v_empty(int stage) const { return bars + 8 * (4 + 3 * kStages + stage); }
};

// The producer's single thread, for the CTA's unit number `index`: Q into Q buffer `index & 1`,
// then K (with a token tile's words, TOKEN_STAGES) and V of every active key tile through the
// ring, whose position `ring` counts the tiles before.
__device__ __forceinline__ void produce(const Shared& sh, const TensorMap& q_map,
                                        const TensorMap& k_map, const TensorMap& v_map,
                                        const Int4* entries, const TensorMap& token_map,
                                        const Work& work, int index, int ring, int broadcast) {
  const int q_b = (broadcast & 1) ? 0 : work.b, q_h = (broadcast & 2) ? 0 : work.head;
  const int k_b = (broadcast & 4) ? 0 : work.b, k_h = (broadcast & 8) ? 0 : work.kv_head;
  const int v_b = (broadcast & 16) ? 0 : work.b, v_h = (broadcast & 32) ? 0 : work.kv_head;
  const int buffer = index & 1;
  barrier_wait(sh.q_empty(buffer), ((index >> 1) & 1) ^ 1);  // free from two units ago
  barrier_expect_bytes(sh.q_full(buffer), kQBytes);
  load_rows<kBlockM, kHeadDim>(sh.q_tile(buffer), q_map, sh.q_full(buffer), work.q_row0, q_h,
                               q_b);
  Int4 next = work.count > 0 ? load_entry(entries + work.first) : Int4{0, 0, 0, 0};
  for (int n = 0; n < work.count; ++n) {
    const int stage = (ring + n) % kStages;
    const unsigned parity = (((ring + n) / kStages) & 1) ^ 1;  // a fresh buffer counts as free
    const Int4 entry = next;
    const int k_row0 = entry.x * kBlockN;
    if (n + 1 < work.count) next = load_entry(entries + work.first + n + 1);
    barrier_wait(sh.k_empty(stage), parity);
    if (kTokenStages && (entry.y & kFlagTokens)) {
      barrier_expect_bytes(sh.k_full(stage), kTileBytes + kTokenBytes);
      tma_load_2d(sh.token_slot(stage), token_map, sh.k_full(stage), 0,
                  token_tile_map_row<kBlockM, kSAtoms>(entry));
    } else {
      barrier_expect_bytes(sh.k_full(stage), kTileBytes);
    }
    load_rows<kBlockN, kHeadDim>(sh.k_tile(stage), k_map, sh.k_full(stage), k_row0, k_h, k_b);
    barrier_wait(sh.v_empty(stage), parity);
    barrier_expect_bytes(sh.v_full(stage), kTileBytes);
    load_rows<kBlockN, kHeadDim>(sh.v_tile(stage), v_map, sh.v_full(stage), k_row0, v_h, v_b);
  }
}

// Issue S = Q K^T for this warpgroup's 64 query rows (at `q_rows`) against the key tile at
// `k_tile` (both K-major); the first k-step overwrites s.
__device__ __forceinline__ void issue_qk(unsigned q_rows, unsigned k_tile,
                                         float (&s)[kSAtoms][4]) {
  issue_rows_times_rows<kHeadDim>(s, q_rows, kBlockM * 128, k_tile, kBlockN * 128);
  wgmma_commit();
}

// Issue o += P · V_tile, one 64-wide instruction per 64-column block of V and 16 keys.
__device__ __forceinline__ void issue_pv(unsigned v_tile, unsigned (&p)[kBlockN / 16][4],
                                         float (&o)[kOAtoms][4]) {
  issue_fragments_times_rows(o, p, v_tile, kBlockN * 128);
  wgmma_commit();
}

// Consumer turns (PINGPONG): the two consumers issue their products in turn through named
// barriers 1 and 2. Consumer 1's first turn also arrives on barrier 1 so that consumer 0 can
// start; consumer 0 takes that surplus arrival back at the end.
struct Turns {
  int group;
  bool started;
  __device__ void wait() {
    if (!PINGPONG) return;
    if (group == 1 && !started) named_arrive(1, 256);
    started = true;
    named_sync(1 + group, 256);
  }
  __device__ void pass() const {
    if (PINGPONG) named_arrive(2 - group, 256);
  }
  __device__ void finish() const {
    if (PINGPONG && group == 0 && started) named_sync(1, 256);
  }
};

}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads, kMinBlocks)
    fused_attention_fwd_hopper(const __grid_constant__ HopperForwardParams params) {
  extern __shared__ __align__(1024) Bits128 shared_raw[];
  Shared sh;
  sh.q = shared_address(shared_raw);
  sh.k = sh.q + 2 * kQBytes;
  sh.v = sh.k + kStages * kTileBytes;
  sh.tokens = sh.v + kStages * kTileBytes;
  sh.bars = sh.tokens + (kTokenStages ? kStages * kTokenBytes : 0);

  const int warp = warp_index();
  if (threadIdx.x == 0) {
#pragma unroll
    for (int buffer = 0; buffer < 2; ++buffer) {
      barrier_init(sh.q_full(buffer), 1);
      barrier_init(sh.q_empty(buffer), 4 * kConsumers);  // one arrival per consumer warp
    }
#pragma unroll
    for (int stage = 0; stage < kStages; ++stage) {
      barrier_init(sh.k_full(stage), 1);
      barrier_init(sh.v_full(stage), 1);
      barrier_init(sh.k_empty(stage), 4 * kConsumers);
      barrier_init(sh.v_empty(stage), 4 * kConsumers);
    }
    barrier_init_fence();
  }
  __syncthreads();

  const int n_items = params.n_work / (params.batch * params.heads_per_item);
  const int group_units = n_items * params.head_group;
  const int rounds = group_rounds(group_units) * ((params.n_work + group_units - 1) / group_units);
  // The unit this CTA runs in round `round` into `work` (false: none, a group's last round).
  auto unit_in_round = [&](int round, Work& work) {
    const int w = unit_of_round(round, params.n_work, group_units);
    if (w < 0) return false;
    work = work_unit(params.items, w, n_items, params.batch, params.heads_per_item,
                     params.kv_group, params.head_group, kBlockM);
    return true;
  };
  if (warp < 4) {  // ---- producer warpgroup
    registers_release<kProducerRegisters>();
    if (threadIdx.x == 0) {
      int ring = 0;
      Work work;
      for (int round = 0, index = 0; round < rounds; ++round) {
        if (!unit_in_round(round, work)) continue;
        produce(sh, params.q_map, params.k_map, params.v_map, params.entries, params.token_map,
                work, index++, ring, params.broadcast);
        ring += work.count;
      }
    }
    return;
  }
  registers_claim<kConsumerRegisters>();

  // ---- consumer warpgroup `group`: query rows [64 group, 64 group + 64) of each tile
  Turns turns{warp / 4 - 1, false};
  const int warp_row0 = turns.group * 64 + (warp & 3) * 16;
  const bool arrives = fresh_lane() == 0;  // one arrival per warp on "empty" barriers
  float o[kOAtoms][4];
  float s[kSAtoms][4];
  unsigned p[kBlockN / 16][4];
#pragma unroll
  for (int j = 0; j < kSAtoms; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;

  int ring = 0;
  Work work;
  for (int round = 0, index = 0; round < rounds; ++round) {
    if (!unit_in_round(round, work)) continue;
    const int buffer = index & 1;
    const unsigned q_rows = sh.q_tile(buffer) + turns.group * 64 * 128;
    float row_max[1][2] = {{negative_infinity(), negative_infinity()}};
    float row_sum[1][2] = {{0.f, 0.f}};
    float correction[1][2];
#pragma unroll
    for (int j = 0; j < kOAtoms; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;

    auto full = [&](int n) { return (ring + n) % kStages; };
    auto parity = [&](int n) { return static_cast<unsigned>(((ring + n) / kStages) & 1); };
    // Entry n of the unit (TOKENS: a tile ahead, without TOKEN_STAGES with its token rows).
    auto read_entry = [&](int n, Int4& entry, TokenRows<kSAtoms>& tokens) {
      entry = load_entry(params.entries + work.first + n);
      if (kTokens && !kTokenStages && (entry.y & kFlagTokens)) {
        tokens = load_token_rows_global<kSAtoms>(
            token_tile<kBlockM, kSAtoms>(params.token_words, entry), warp_row0);
      }
    };
    // With TOKEN_STAGES, the token rows of tile n once its K stage has landed.
    auto stage_tokens = [&](int n, const Int4& entry, TokenRows<kSAtoms>& tokens) {
      if (kTokenStages && (entry.y & kFlagTokens)) {
        tokens = load_token_rows<kSAtoms>(sh.token_slot(full(n)), warp_row0);
      }
    };
    // S -> P for one tile: mask, softmax (the O rescale waits for P V)
    auto scores_to_probabilities = [&](const Int4& entry, const TokenRows<kSAtoms>& tokens) {
      float(&s2)[1][kSAtoms][4] = *reinterpret_cast<float(*)[1][kSAtoms][4]>(&s);
      if (entry.y != 0) {  // full tiles never mask
        if (kTokens && (entry.y & kFlagTokens)) {
          apply_token_rows(s, tokens);
        } else {
          apply_mask(s2, entry, warp_row0, work.q_row0, params.sub_rows_log2,
                     params.sub_cols_log2, params.causal_offset, params.seq_k);
        }
      }
      softmax_scores(s2, row_max, row_sum, correction, params.scale_log2);
    };
    auto pack = [&] {
      pack_probabilities(*reinterpret_cast<float(*)[1][kSAtoms][4]>(&s),
                         *reinterpret_cast<unsigned(*)[1][kBlockN / 16][4]>(&p));
    };

    Int4 entry;
    TokenRows<kSAtoms> tokens;
    if (work.count > 0) read_entry(0, entry, tokens);
    barrier_wait(sh.q_full(buffer), (index >> 1) & 1);
    if (work.count > 0) {
      // tile 0: S alone
      barrier_wait(sh.k_full(full(0)), parity(0));
      stage_tokens(0, entry, tokens);
      turns.wait();
      pin(s);
      wgmma_fence();
      issue_qk(q_rows, sh.k_tile(full(0)), s);
      turns.pass();
      wgmma_wait<0>();
      pin(s);
      if (arrives) barrier_arrive(sh.k_empty(full(0)));
      scores_to_probabilities(entry, tokens);
      if (kTokens && work.count > 1) read_entry(1, entry, tokens);
      pack();
      // tile n: S_n with P_{n-1} V_{n-1}; the softmax of S_n runs while P V is in flight
      for (int n = 1; n < work.count; ++n) {
        if (!kTokens) read_entry(n, entry, tokens);
        barrier_wait(sh.k_full(full(n)), parity(n));
        stage_tokens(n, entry, tokens);
        barrier_wait(sh.v_full(full(n - 1)), parity(n - 1));
        turns.wait();
        pin(s);
        pin(o);
        pin(p);
        wgmma_fence();
        issue_qk(q_rows, sh.k_tile(full(n)), s);
        issue_pv(sh.v_tile(full(n - 1)), p, o);
        turns.pass();
        wgmma_wait<1>();  // S_n has landed, P V may still run
        pin(s);
        if (arrives) barrier_arrive(sh.k_empty(full(n)));
        scores_to_probabilities(entry, tokens);
        if (kTokens && n + 1 < work.count) read_entry(n + 1, entry, tokens);
        wgmma_wait<0>();
        pin(o);
        pin(p);
        if (arrives) barrier_arrive(sh.v_empty(full(n - 1)));
        rescale(*reinterpret_cast<float(*)[1][kOAtoms][4]>(&o), correction);
        pack();
      }
      // the last P V
      const int last = work.count - 1;
      barrier_wait(sh.v_full(full(last)), parity(last));
      turns.wait();
      pin(o);
      pin(p);
      wgmma_fence();
      issue_pv(sh.v_tile(full(last)), p, o);
      turns.pass();
      wgmma_wait<0>();
      pin(o);
      if (arrives) barrier_arrive(sh.v_empty(full(last)));
    }

    // ---- normalise, stage in this warp's own rows of the Q tile, store; free the Q tile
    const long long pair = static_cast<long long>(work.b) * params.q_heads + work.head;
    store_rows(*reinterpret_cast<float(*)[1][kOAtoms][4]>(&o), row_max, row_sum,
               reinterpret_cast<unsigned char*>(shared_raw) + buffer * kQBytes,
               [](int row, int chunk) { return tile_offset<kBlockM>(row, chunk); }, warp_row0,
               work.q_row0, params.seq_q,
               params.out + work.b * params.o_sb + work.head * params.o_sh, params.o_ss,
               params.lse == nullptr ? nullptr : params.lse + pair * params.seq_q,
               params.scale_log2);
    fence_async_proxy();  // the staging writes come before the next TMA write of this tile
    __syncwarp();
    if (arrives) barrier_arrive(sh.q_empty(buffer));
    ring += work.count;
    ++index;
  }
  turns.finish();
}
