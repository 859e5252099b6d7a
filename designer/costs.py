"""What a design costs in a model of a given shape: FLOPs and memory of one attention call.

A design fixes the mask; the model fixes the rest (``ModelShape``: batch, query heads, key and
value heads, head dim). Every figure the views show comes from ``attention_costs`` at the shape
the user entered, counted exactly from the blocks:

- a token pair is computed when its block is active and, in a causal design, ``k <= q``
  (``top_left``, as SDPA's ``is_causal``): a block below the diagonal holds ``b²`` pairs, a
  diagonal block ``b(b+1)/2``, a block above it none;
- FLOPs are ``4·D`` per pair (``2·D`` for QKᵀ, ``2·D`` for PV), times batch and query heads
  (FlashAttention's count, halved for causal by the same rule);
- "vs dense" compares with dense attention of the same kind: causal dense for a causal design,
  full dense otherwise;
- memory is the inputs and output at the shape (q, o with the query heads, k, v with the key and
  value heads, 2 bytes each) plus, for the SDD path, its packed ``[B, Hq·nnz, b, b]`` scores.

Per-head counts are cached by the head's content (``head_key``), so a rerun recounts nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from designer.block_runs import BlockRuns
from designer.cache import LruCache, head_keys
from designer.design import Design
from designer.model_shape import ModelShape

#: Bytes of one bf16/fp16 element.
ELEMENT_BYTES = 2
_COUNTS = LruCache(1 << 16, ttl_seconds=15 * 60)


@dataclass(frozen=True)
class Costs:
    """One attention call of the design at a shape (forward; the backward is about 2.5×)."""

    heads: int
    kv_heads: int
    pairs: int
    flops: int
    dense_flops: int
    dense_kind: str  # "causal dense" | "dense"
    input_bytes: int
    score_bytes: int

    @property
    def vs_dense(self) -> float:
        """FLOPs over those of dense attention of the same kind (0 for an empty shape)."""
        return self.flops / self.dense_flops if self.dense_flops else 0.0


def model_heads(design: Design, shape: ModelShape) -> tuple[int, int]:
    """``(query heads, kv heads)`` of ``shape`` for ``design`` (``ValueError`` when the design
    cannot serve it: ``ModelShape.check_serves``)."""
    shape.check_serves(design.layout.n_heads)
    heads = shape.query_heads(design.layout.n_heads)
    return heads, shape.kv_heads or heads


def attention_costs(design: Design, shape: ModelShape | None = None) -> Costs:
    """FLOPs and memory of ``design``'s attention at ``shape`` (default: the design's own).

    >>> import torch
    >>> from designer.layout import Layout
    >>> causal = Design(Layout(torch.ones(1, 2, 2, dtype=torch.bool).tril(), 64), causal=True)
    >>> attention_costs(causal, ModelShape(head_dim=64)).vs_dense
    1.0
    """
    shape = shape or design.model_shape
    heads, kv_heads = model_heads(design, shape)
    layout, b = design.layout, design.layout.block_size
    if layout.runs is not None:  # held as runs: counted from them, every head at once
        pairs = _run_pairs(layout.runs, b, design.causal)
    else:
        heads_blocks = zip(head_keys(layout), layout.to_numpy(), strict=True)
        pairs = sum(_head_pairs(key, blocks, b, design.causal) for key, blocks in heads_blocks)
    pairs *= heads // layout.n_heads
    sq, sk = layout.seq_len_q, layout.seq_len_k
    dense_pairs = _causal_pairs(sq, sk) if design.causal else sq * sk
    per_pair = 4 * shape.head_dim * shape.batch
    inputs = shape.batch * shape.head_dim * ELEMENT_BYTES * (2 * heads * sq + 2 * kv_heads * sk)
    scores = shape.batch * (heads // layout.n_heads) * layout.nnz * b * b * ELEMENT_BYTES
    return Costs(
        heads=heads,
        kv_heads=kv_heads,
        pairs=pairs * shape.batch,
        flops=per_pair * pairs,
        dense_flops=per_pair * heads * dense_pairs,
        dense_kind="causal dense" if design.causal else "dense",
        input_bytes=inputs,
        score_bytes=scores,
    )


def tile_flops_scale(design: Design, shape: ModelShape, head_dim: int) -> float:
    """What turns the analysis's tile FLOPs (per batch element, the layout's heads, at
    ``head_dim``) into FLOPs at ``shape``."""
    heads, _ = model_heads(design, shape)
    return shape.batch * (heads / design.layout.n_heads) * shape.head_dim / head_dim


def _causal_pairs(sq: int, sk: int) -> int:
    """Pairs ``k <= q`` of an ``sq × sk`` grid: ``sum(min(q + 1, sk))``."""
    inside = min(sq, sk)
    return inside * (inside + 1) // 2 + max(0, sq - sk) * sk


def _head_pairs(key: str, blocks: np.ndarray, block_size: int, causal: bool) -> int:
    """Token pairs one head computes (cached by its content key)."""
    return _COUNTS.get((key, block_size, causal), lambda: _count(blocks, block_size, causal))


def _run_pairs(runs: BlockRuns, b: int, causal: bool) -> int:
    """Token pairs of every head held as runs: as ``_count``, a run's blocks left of its
    row's diagonal counted whole and a diagonal block it covers as ``b(b+1)/2``."""
    if not causal:
        return runs.nnz * b * b
    q_block = (runs.run_rows() % runs.shape[1]).numpy()
    starts, stops = runs.starts.numpy(), runs.stops.numpy()
    below = int(np.clip(np.minimum(stops, q_block) - starts, 0, None).sum())
    diagonal = int(np.count_nonzero((starts <= q_block) & (q_block < stops)))
    return below * b * b + diagonal * b * (b + 1) // 2


def _count(blocks: np.ndarray, b: int, causal: bool) -> int:
    if not causal:
        return int(np.count_nonzero(blocks)) * b * b
    diagonal = int(np.count_nonzero(np.diagonal(blocks)))
    below = sum(int(np.count_nonzero(blocks[r, :r])) for r in range(1, blocks.shape[0]))
    return below * b * b + diagonal * b * (b + 1) // 2
