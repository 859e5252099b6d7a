"""The obvious way to see a layout in FlexAttention's tiles, and layouts worth trying it on."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import strategies as st

from designer.layout import Layout
from tests.factories import random_layout

#: Block sizes that divide 128, straddle its tiles, equal it and exceed it.
BLOCK_SIZES = [1, 3, 4, 12, 16, 48, 64, 100, 128, 192, 256]


def token_tiles(layout: Layout, causal: bool, tile: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(full, partial)`` tiles from every token pair of every tile. Pairs past the sequence
    end do not exist: they count as active for "all" and inactive for "any"."""
    tokens = torch.stack([layout.token_mask(h) for h in range(layout.n_heads)])
    if causal:
        tokens &= torch.ones(tokens.shape[1:], dtype=torch.bool).tril()
    h, seq_q, seq_k = tokens.shape
    n_q, n_k = -(-seq_q // tile), -(-seq_k // tile)
    shape = (h, n_q, tile, n_k, tile)
    every = torch.ones(h, n_q * tile, n_k * tile, dtype=torch.bool)
    some = torch.zeros_like(every)
    every[:, :seq_q, :seq_k] = tokens
    some[:, :seq_q, :seq_k] = tokens
    full = every.reshape(shape).all(dim=4).all(dim=2)
    return full, some.reshape(shape).any(dim=4).any(dim=2) & ~full


@st.composite
def layouts(draw, max_tokens: int = 400):
    """Random layouts of 1 to 3 heads and at most ``max_tokens`` per side (at least a block)."""
    block = draw(st.sampled_from(BLOCK_SIZES))
    most = max(1, max_tokens // block)
    shape = (draw(st.integers(1, 3)), draw(st.integers(1, most)), draw(st.integers(1, most)))
    seed = draw(st.integers(0, 2**32 - 1))
    density = draw(st.sampled_from([0.0, 0.3, 0.8, 1.0]))
    return random_layout(np.random.default_rng(seed), *shape, density=density, block_size=block)
