"""The ``mask_mod`` forms the Flex contenders run on partial tiles, one factory per form.

- ``causal_mask``: ``q_idx >= kv_idx``.
- ``generate_band_mask``: the block band of ``designer.patterns.sliding_window``.
- ``generate_gather_mask``: the layout read from a persistent ``[H or 1, Sq/16, Sk/16]`` bool
  buffer, a 0-d causal flag beside it (Triton backend).
- ``generate_lookup_mask``: the same layout lookup in the only form FlexAttention's FLASH backend
  (FlashAttention-4, CuTe DSL) compiles in torch 2.11: an int8 buffer with one entry per query
  head, indexed by ``h`` itself, every dimension at least 2, and causality built into the
  function rather than read from a flag. Its code generator turns every index into a vector
  value (``ssa_to_indexable``), so a Python int index (``buffer[0, ...]`` for a one-head
  layout) and a 0-d captured tensor both fail with "Expected TensorSSA, but got int"
  (pytorch issue 177813), and a size-1 dimension risks the same through a constant index.

Each factory closes over small tensors that a new case overwrites in place, so a case of the
same family and shape reuses the compiled kernel.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

#: Token granularity of the gather and lookup buffers (the smallest CUDA block size).
MASK_GRANULARITY = 16
#: The FLASH lookup buffer's smallest extent per dimension (see the module doc).
LOOKUP_MIN_EXTENT = 2


def causal_mask(b, h, q_idx, kv_idx):
    """Keys at or before the query: ``q_idx >= kv_idx``."""
    return q_idx >= kv_idx


def generate_band_mask(block: torch.Tensor, window: torch.Tensor) -> Callable:
    """The block band of ``sliding_window(..., causal=False)`` at token level:
    ``|q_idx // block - kv_idx // block| < window``, both 0-d int32 tensors (a new value needs
    no recompile)."""

    def band_mask(b, h, q_idx, kv_idx):
        return (q_idx // block - kv_idx // block).abs() < window

    return band_mask


def generate_gather_mask(buffer: torch.Tensor, causal_flag: torch.Tensor) -> Callable:
    """``buffer[h, q_idx // 16, kv_idx // 16]`` (head 0 for a one-head buffer), and
    ``q_idx >= kv_idx`` where the 0-d bool ``causal_flag`` is set."""
    one_head = buffer.shape[0] == 1  # a one-head layout serves every head

    def gather_mask(b, h, q_idx, kv_idx):
        head = 0 if one_head else h
        allowed = buffer[head, q_idx // MASK_GRANULARITY, kv_idx // MASK_GRANULARITY]
        return allowed & ((q_idx >= kv_idx) | ~causal_flag)

    return gather_mask


def lookup_buffer(heads: int, seq_q: int, seq_k: int, device: torch.device) -> torch.Tensor:
    """A zeroed int8 ``[heads, Sq/16, Sk/16]`` buffer for ``generate_lookup_mask``, each extent
    raised to at least ``LOOKUP_MIN_EXTENT`` (the padding is never read)."""
    extents = (heads, -(-seq_q // MASK_GRANULARITY), -(-seq_k // MASK_GRANULARITY))
    return torch.zeros(*(max(LOOKUP_MIN_EXTENT, n) for n in extents), dtype=torch.int8,
                       device=device)  # fmt: skip


def fill_lookup(buffer: torch.Tensor, blocks: torch.Tensor, block_size: int) -> None:
    """Write the bool ``[H or 1, M, N]`` layout of ``block_size``-token blocks (a multiple of 16)
    into ``buffer``: one entry per 16 tokens, a one-head layout copied to every query head."""
    ratio = block_size // MASK_GRANULARITY
    fine = blocks.repeat_interleave(ratio, 1).repeat_interleave(ratio, 2)
    buffer.zero_()
    heads = buffer.shape[0] if blocks.shape[0] == 1 else blocks.shape[0]
    buffer[:heads, : fine.shape[1], : fine.shape[2]].copy_(fine.expand(heads, -1, -1))


def generate_lookup_mask(buffer: torch.Tensor, *, causal: bool) -> Callable:
    """``buffer[h, q_idx // 16, kv_idx // 16] != 0`` (and ``q_idx >= kv_idx`` when ``causal``)
    for an int8 buffer from ``lookup_buffer``: tensors only, as FLASH needs."""

    def lookup_mask(b, h, q_idx, kv_idx):
        return buffer[h, q_idx // MASK_GRANULARITY, kv_idx // MASK_GRANULARITY] != 0

    def causal_lookup_mask(b, h, q_idx, kv_idx):
        allowed = buffer[h, q_idx // MASK_GRANULARITY, kv_idx // MASK_GRANULARITY] != 0
        return allowed & (q_idx >= kv_idx)

    return causal_lookup_mask if causal else lookup_mask
