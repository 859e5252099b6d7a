"""Prefix-LM attention: a bidirectional prefix (the prompt), causal after it."""

from __future__ import annotations

import torch

from designer.patterns._common import (
    block_grid,
    blocks_check,
    blocks_param,
    generator_spec,
    stack_heads,
)
from designer.validate import check_layout_shape, per_head


def prefix_lm(
    n_heads: int, n_q_blocks: int, n_k_blocks: int, *, prefix_blocks: int | list[int]
) -> torch.Tensor:
    """Causal plus a fully visible prefix: active iff ``col <= row`` or ``col < prefix_blocks``.

    Every query sees the whole prefix; inside the prefix that makes attention bidirectional, and
    after it attention is causal (T5, PaLI, UniLM). ``prefix_blocks=0`` is plain causal; it may
    be one value per head. ``prefix_blocks=2``::

        ██··
        ██··
        ███·
        ████

    >>> prefix_lm(1, 4, 4, prefix_blocks=2).sum().item()
    11
    """
    n_heads, n_q_blocks, n_k_blocks = check_layout_shape(n_heads, n_q_blocks, n_k_blocks)
    prefixes = per_head("prefix_blocks", prefix_blocks, n_heads, blocks_check(0))
    rows, cols = block_grid(n_q_blocks, n_k_blocks)
    return stack_heads(prefixes, lambda prefix: (cols <= rows) | (cols < prefix))


SPECS = (
    generator_spec(
        "prefix_lm",
        "Prefix LM",
        "col <= row or col < prefix_blocks",
        (blocks_param("prefix_blocks", 2, 0, "blocks of the bidirectional prefix"),),
        prefix_lm,
        order=90,
    ),
)
