"""The obvious way to see a layout in FlexAttention's tiles, and layouts worth trying it on."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import strategies as st

from designer.layout import Layout
from tests.factories import random_layout

#: Block sizes that divide 128, straddle its tiles, equal it and exceed it.
BLOCK_SIZES = [1, 3, 4, 12, 16, 48, 64, 100, 128, 192, 256]


def token_tiles(
    layout: Layout,
    causal: bool,
    tile: int,
    seq_lengths: tuple[int, int] | None = None,
    causal_offset: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(full, partial)`` tiles from every token pair of every tile, over ``seq_lengths``
    (default: whole blocks), causal keeping ``k <= q + causal_offset``. Pairs past the sequence
    end do not exist: they count as active for "all" and inactive for "any"."""
    seq_q, seq_k = seq_lengths or (layout.seq_len_q, layout.seq_len_k)
    tokens = token_masks(layout, causal, seq_q, seq_k, causal_offset)
    h = tokens.shape[0]
    n_q, n_k = -(-seq_q // tile), -(-seq_k // tile)
    shape = (h, n_q, tile, n_k, tile)
    every = torch.ones(h, n_q * tile, n_k * tile, dtype=torch.bool)
    some = torch.zeros_like(every)
    every[:, :seq_q, :seq_k] = tokens
    some[:, :seq_q, :seq_k] = tokens
    full = every.reshape(shape).all(dim=4).all(dim=2)
    return full, some.reshape(shape).any(dim=4).any(dim=2) & ~full


def token_masks(
    layout: Layout, causal: bool, seq_q: int, seq_k: int, causal_offset: int = 0
) -> torch.Tensor:
    """Bool ``[H, seq_q, seq_k]``: the pairs each head attends, token by token."""
    tokens = layout.token_mask()
    tokens = tokens[:, :seq_q, :seq_k]
    if causal:
        q_idx, k_idx = torch.arange(seq_q)[:, None], torch.arange(seq_k)[None, :]
        tokens &= k_idx <= q_idx + causal_offset
    return tokens


@st.composite
def lengths_and_offsets(draw, layout: Layout) -> tuple[tuple[int, int], int]:
    """``(Sq, Sk)`` for ``layout`` (each whole blocks or with a partial last block) and a causal
    offset: top-left (0), bottom-right (``Sk - Sq``) or any other within the lengths."""
    block = layout.block_size
    seq_q = draw(st.integers(layout.seq_len_q - block + 1, layout.seq_len_q))
    seq_k = draw(st.integers(layout.seq_len_k - block + 1, layout.seq_len_k))
    offset = draw(st.one_of(st.just(0), st.just(seq_k - seq_q), st.integers(-seq_q, seq_k)))
    return (seq_q, seq_k), offset


@st.composite
def layouts(draw, max_tokens: int = 400):
    """Random layouts of 1 to 3 heads and at most ``max_tokens`` per side (at least a block)."""
    block = draw(st.sampled_from(BLOCK_SIZES))
    most = max(1, max_tokens // block)
    shape = (draw(st.integers(1, 3)), draw(st.integers(1, most)), draw(st.integers(1, most)))
    seed = draw(st.integers(0, 2**32 - 1))
    density = draw(st.sampled_from([0.0, 0.3, 0.8, 1.0]))
    return random_layout(np.random.default_rng(seed), *shape, density=density, block_size=block)
