"""FlexAttention as a contender: the same token-level mask at Flex's own 128-token blocks.

We build the ``BlockMask`` with ``BlockMask.from_kv_blocks`` rather than ``create_block_mask``:
a 128×128 tile is *full* when every token pair in it is active, *partial* when some are, and
absent otherwise, computed from the layout at block level (what ``create_block_mask`` would find
by evaluating ``mask_mod`` on all ``Sq·Sk`` pairs, without materialising them). Partial tiles run
``mask_mod``, which reads the layout from one persistent device buffer at 16-token granularity
plus a persistent causal flag; a new layout of the same shape is ``copy_``-ed into them, so the
compiled kernel (one ``torch.compile(flex_attention)`` per shape and mode) is reused without
recompiling. Two compile modes are offered: Inductor's default tile choice, and
``max-autotune-no-cudagraphs``, which times Triton's candidate tiles once per shape and keeps the
fastest (slower to compile, the strongest FlexAttention we can field).
"""

from __future__ import annotations

from typing import Any

import torch

from designer.formats.flex_tiles import FLEX_BLOCK, kv_lists
from designer.formats.flex_tiles import tile_classes as designer_tile_classes

#: Token granularity of the mask buffer (the smallest CUDA block size).
MASK_GRANULARITY = 16


class FlexUnavailable(RuntimeError):
    """The layout or shape cannot be expressed at Flex's 128-token blocks."""


def tile_classes(
    blocks: torch.Tensor, block_size: int, *, causal: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(full, partial)`` bool ``[H, Sq/128, Sk/128]`` tiles for a bool ``[H, M, N]`` layout,
    within the limits of this contender's mask buffer.

    >>> full, partial = tile_classes(torch.ones(1, 8, 8, dtype=torch.bool), 32, causal=True)
    >>> full[0].int().tolist(), partial[0].int().tolist()
    ([[0, 0], [1, 0]], [[1, 0], [0, 1]])
    """
    _, n_q, n_k = blocks.shape
    if (
        FLEX_BLOCK % block_size
        or (n_q * block_size) % FLEX_BLOCK
        or (n_k * block_size) % FLEX_BLOCK
    ):
        raise FlexUnavailable(
            f"the Flex contender needs block_size dividing {FLEX_BLOCK} and Sq, Sk multiples of "
            f"{FLEX_BLOCK}, got block_size {block_size}, Sq {n_q * block_size}, "
            f"Sk {n_k * block_size}"
        )
    return designer_tile_classes(blocks, block_size, causal=causal)


class FlexSession:
    """The compiled ``flex_attention`` and the persistent mask buffers, reused across cases."""

    def __init__(self) -> None:
        self._compiled: dict[str | None, Any] = {}
        self._masks: dict[tuple, tuple[torch.Tensor, torch.Tensor, Any]] = {}

    def prepare(
        self,
        blocks: torch.Tensor,
        block_size: int,
        *,
        causal: bool,
        device: torch.device,
        mode: str | None = None,
    ) -> tuple[Any, Any]:
        """``(compiled flex_attention, BlockMask)`` for this layout (host work only).

        ``mode`` is the ``torch.compile`` mode (None: the default).
        """
        from torch.nn.attention.flex_attention import BlockMask, flex_attention

        if block_size % MASK_GRANULARITY:
            raise FlexUnavailable(f"block_size must be a multiple of {MASK_GRANULARITY}")
        full, partial = tile_classes(blocks, block_size, causal=causal)
        heads, n_q, n_k = blocks.shape
        buffer, causal_flag, mask_mod = self._mask(
            heads, n_q * block_size, n_k * block_size, device
        )
        ratio = block_size // MASK_GRANULARITY
        fine = blocks.repeat_interleave(ratio, 1).repeat_interleave(ratio, 2)
        buffer.copy_(fine)
        causal_flag.fill_(causal)
        kv_num, kv_indices = kv_lists(partial)
        full_num, full_indices = kv_lists(full)
        block_mask = BlockMask.from_kv_blocks(
            kv_num.to(device),
            kv_indices.to(device),
            full_num.to(device),
            full_indices.to(device),
            BLOCK_SIZE=FLEX_BLOCK,
            mask_mod=mask_mod,
            seq_lengths=(n_q * block_size, n_k * block_size),
        )
        if mode not in self._compiled:
            self._compiled[mode] = torch.compile(flex_attention, dynamic=False, mode=mode)
        return self._compiled[mode], block_mask

    def _mask(self, heads: int, seq_q: int, seq_k: int, device: torch.device):
        key = (heads, seq_q, seq_k, str(device))
        if key not in self._masks:
            buffer = torch.zeros(
                heads, seq_q // MASK_GRANULARITY, seq_k // MASK_GRANULARITY,
                dtype=torch.bool, device=device,
            )  # fmt: skip
            causal_flag = torch.zeros((), dtype=torch.bool, device=device)

            def mask_mod(b, h, q_idx, kv_idx):
                allowed = buffer[h, q_idx // MASK_GRANULARITY, kv_idx // MASK_GRANULARITY]
                return allowed & ((q_idx >= kv_idx) | ~causal_flag)

            self._masks[key] = (buffer, causal_flag, mask_mod)
        return self._masks[key]
