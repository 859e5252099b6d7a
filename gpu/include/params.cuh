// The parameter struct of each attention kernel, passed by value as its one __grid_constant__
// argument (FlashAttention's Flash_fwd_params, one struct per kernel): the host fills the
// mirror of each in gpu/params.py field for field, and tests/gpu/test_params.py checks that
// the two layouts agree (every field's offset and size, the total size) with nvcc and NVRTC.
// 16-bit tensors are raw `unsigned short` bits; strides are in elements. Needs
// attention_common.cuh (Int4).

#pragma once

namespace {

// A CUtensorMap (the driver's 128-byte opaque TMA descriptor); the host encodes it
// (gpu/forward/tensor_maps.py). In a __grid_constant__ struct its address is in parameter
// space, where TMA reads it.
struct alignas(64) TensorMap {
  unsigned long long words[16];
};

// fused_attention_fwd (gpu/forward/sm80.cu): one CTA per work unit.
struct ForwardParams {
  // operands: q, out [B, Hq, seq_q, D]; k, v [B, Hkv, seq_k, D]; lse fp32 [B, Hq, seq_q] or null
  const unsigned short* q;
  const unsigned short* k;
  const unsigned short* v;
  unsigned short* out;
  float* lse;
  // the plan's table (gpu/forward/lut.py) and its token tiles (token_mask.cuh)
  const Int4* items;
  const Int4* entries;
  const unsigned* token_words;
  // strides (k and v rows: K/V_ROW_STRIDE, compiled in)
  long long q_sb, q_sh, q_ss;
  long long k_sb, k_sh;
  long long v_sb, v_sh;
  long long o_sb, o_sh, o_ss;
  // shapes
  int batch, q_heads, heads_per_item, kv_group, seq_q, seq_k;
  // masking and scaling
  int causal_offset, sub_rows_log2, sub_cols_log2;
  float scale_log2;
};

// fused_attention_fwd_hopper (gpu/forward/sm90.cu): persistent CTAs over n_work units.
struct HopperForwardParams {
  // operands: q, k, v as tensor maps; out [B, Hq, seq_q, D]; lse fp32 [B, Hq, seq_q] or null
  TensorMap q_map, k_map, v_map;
  TensorMap token_map;  // the token tiles' words, staged by the producer (TOKEN_STAGES)
  unsigned short* out;
  float* lse;
  // the plan's table (gpu/forward/lut.py) and its token tiles (token_mask.cuh), read from
  // global memory by the consumers without TOKEN_STAGES
  const Int4* items;
  const Int4* entries;
  const unsigned* token_words;
  // strides of out
  long long o_sb, o_sh, o_ss;
  // work and shapes: n_work units, run in groups of head_group (batch, head) pairs
  int n_work, batch, q_heads, heads_per_item, kv_group, head_group, seq_q, seq_k;
  int broadcast;  // bit 2i / 2i + 1: operand i (q, k, v) has a zero batch / head stride
  // masking and scaling
  int causal_offset, sub_rows_log2, sub_cols_log2;
  float scale_log2;
};

// attention_bwd_prep (gpu/backward/fused.cu): Δ and the base-2 logsumexp of every query row.
struct BackwardPrepParams {
  // inputs: o, d_o [B, Hq, seq_q, D]; lse, d_lse fp32 [B, Hq, seq_q] (d_lse may be null)
  const unsigned short* o;
  const unsigned short* d_o;
  const float* lse;
  const float* d_lse;
  // outputs, fp32 [B · Hq · seq_q_pad]
  float* lse2;
  float* delta;
  // strides
  long long o_sb, o_sh, o_ss;
  long long do_sb, do_sh, do_ss;
  // shapes: n_rows = B · Hq · seq_q_pad
  int q_heads, seq_q, seq_q_pad, n_rows;
};

// attention_bwd (gpu/backward/fused.cu): one CTA per key tile of one kv head.
struct BackwardParams {
  // inputs: q, d_o [B, Hq, seq_q, D]; k, v [B, Hkv, seq_k, D]; lse2, delta from the prep kernel
  const unsigned short* q;
  const unsigned short* k;
  const unsigned short* v;
  const unsigned short* d_o;
  const float* lse2;
  const float* delta;
  // outputs: dq_acc fp32 [B, Hq, seq_q, D] (zeroed); dk, dv [B, Hkv, seq_k, D] contiguous
  float* dq_acc;
  unsigned short* dk;
  unsigned short* dv;
  // the plan's transposed table (gpu/backward/lut.py) and its token tiles (token_mask.cuh)
  const int2* lists;
  const Int4* entries;
  const int* order;
  const unsigned* token_words;
  // strides
  long long q_sb, q_sh, q_ss;
  long long k_sb, k_sh, k_ss;
  long long v_sb, v_sh, v_ss;
  long long do_sb, do_sh, do_ss;
  // shapes
  int batch, q_heads, kv_heads, kv_group, shared_layout, n_k_tiles, seq_q, seq_k, seq_q_pad;
  // masking and scaling
  int causal_offset, sub_rows_log2, sub_cols_log2;
  float scale, scale_log2;
};

// attention_bwd_hopper (gpu/backward/sm90.cu): one CTA per (key tile, batch element, kv head,
// split of the kv group's query heads).
struct HopperBackwardParams {
  // inputs: q, k, v, d_o as tensor maps; rows: lse2 then Δ, fp32 [2, B · Hq · seq_q_pad] from
  // the prep, as a map of boxes of one step's 64 rows of each; the token tiles' words (TOKENS)
  TensorMap q_map, k_map, v_map, do_map, rows_map, token_map;
  // outputs: dq_acc fp32 (DQ_MODE 1: [B, Hq, seq_q, D]; 2: tiles, see sm90.cu; 0: null);
  // dk, dv [B, Hkv, seq_k, D] 16-bit when n_splits = 1, else fp32 partials
  // dk_part, dv_part [B, Hkv, n_splits, seq_k, D] that the host sums
  float* dq_acc;
  unsigned short* dk;
  unsigned short* dv;
  float* dk_part;
  float* dv_part;
  // the plan's transposed table (gpu/backward/lut.py)
  const int2* lists;
  const Int4* entries;
  const int* order;
  // shapes
  int batch, q_heads, kv_heads, kv_group, n_splits, shared_layout, n_k_tiles, seq_q, seq_k;
  int seq_q_pad;
  int broadcast;  // bit 2i / 2i + 1: operand i (q, k, v, d_o) has a zero batch / head stride
  int key_tiles_inner;  // the grid's order (sm90.cu's Tile)
  // masking and scaling
  int causal_offset, sub_rows_log2, sub_cols_log2;
  float scale, scale_log2;
};

// attention_bwd_dq_convert (gpu/backward/sm90.cu): the tiled fp32 dQ of DQ_MODE 2 to 16 bits.
struct DqConvertParams {
  const float* dq_acc;
  unsigned short* dq;  // [B, Hq, seq_q, D] contiguous
  long long n_vectors;  // float4s of dq_acc
  int seq_q, seq_q_pad;
};

// attention_bwd_dq_hopper (gpu/backward/sm90_dq.cu): one CTA per (query tile, batch, head).
struct HopperDqParams {
  // inputs: q, k, v, d_o as tensor maps; the token tiles' words (TOKENS, token_mask.cuh);
  // lse2, delta fp32 [B · Hq · seq_q_pad] from the prep
  TensorMap q_map, k_map, v_map, do_map, token_map;
  const float* lse2;
  const float* delta;
  unsigned short* dq;  // [B, Hq, seq_q, D] contiguous
  // the plan's forward table (gpu/forward/lut.py)
  const Int4* items;
  const Int4* entries;
  // work and shapes
  int n_work, batch, q_heads, heads_per_item, kv_group, seq_q, seq_k, seq_q_pad;
  int broadcast;
  // masking and scaling
  int causal_offset, sub_rows_log2, sub_cols_log2;
  float scale, scale_log2;
};

}  // namespace
