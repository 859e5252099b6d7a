"""Block-diagonal (chunked) attention: the sequence is cut into chunks that see only themselves."""

from __future__ import annotations

import torch

from designer.patterns._common import (
    block_grid,
    blocks_check,
    blocks_param,
    causal_param,
    generator_spec,
    stack_heads,
)
from designer.validate import check_bool, check_layout_shape, per_head


def block_diagonal(
    n_heads: int,
    n_q_blocks: int,
    n_k_blocks: int,
    *,
    chunk_blocks: int | list[int],
    causal: bool = False,
) -> torch.Tensor:
    """Square chunks on the diagonal: active iff ``row // chunk_blocks == col // chunk_blocks``
    (and ``col <= row`` when ``causal``).

    Chunked attention as in chunked-prefill or Llama 4's local layers. ``chunk_blocks`` may be
    one value per head. ``chunk_blocks=2``, bidirectional and causal::

        ██··   █···
        ██··   ██··
        ··██   ··█·
        ··██   ··██

    >>> block_diagonal(1, 4, 4, chunk_blocks=2).sum().item()
    8
    """
    n_heads, n_q_blocks, n_k_blocks = check_layout_shape(n_heads, n_q_blocks, n_k_blocks)
    chunks = per_head("chunk_blocks", chunk_blocks, n_heads, blocks_check(1))
    causal = check_bool("causal", causal)
    rows, cols = block_grid(n_q_blocks, n_k_blocks)

    def head(chunk: int) -> torch.Tensor:
        same_chunk = rows // chunk == cols // chunk
        return same_chunk & (cols <= rows) if causal else same_chunk

    return stack_heads(chunks, head)


SPECS = (
    generator_spec(
        "block_diagonal",
        "Block diagonal (chunks)",
        "row // chunk_blocks == col // chunk_blocks",
        (blocks_param("chunk_blocks", 4, 1, "blocks per chunk"), causal_param(False)),
        block_diagonal,
        order=80,
    ),
)
