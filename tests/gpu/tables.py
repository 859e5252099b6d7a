"""Layouts for the look-up-table tests and the token mask they must express (shared by the
forward's and the backward's tables)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

TILES = [(128, 64), (128, 128), (64, 64), (32, 16)]


def token_mask(
    blocks: np.ndarray, block_size: int, causal: bool, offset: int = 0, seq=None
) -> np.ndarray:
    """``[H, Sq, Sk]`` bool: the attention each query may pay to each key."""
    mask = blocks.repeat(block_size, 1).repeat(block_size, 2)
    if seq is not None:
        mask = mask[:, : seq[0], : seq[1]]
    if causal:
        mask &= np.tri(mask.shape[1], mask.shape[2], k=offset, dtype=bool)  # k <= q + offset
    return mask


@st.composite
def layouts(draw):
    block_size = draw(st.sampled_from([16, 32, 64, 128]))
    most = max(1, 384 // block_size)
    shape = (
        draw(st.integers(1, 3)),
        draw(st.integers(1, most)),
        draw(st.integers(1, most)),
    )
    density = draw(st.sampled_from([0.0, 0.2, 0.6, 1.0]))
    seed = draw(st.integers(0, 2**31))
    blocks = np.random.default_rng(seed).random(shape) < density
    return blocks, block_size, draw(st.sampled_from(TILES)), draw(st.booleans())


@st.composite
def partial_layouts(draw):
    """A layout, tiles, causal, lengths with partial last blocks, and a causal offset."""
    blocks, block_size, tiles, causal = draw(layouts())
    _, n_q, n_k = blocks.shape
    seq_q = draw(st.integers((n_q - 1) * block_size + 1, n_q * block_size))
    seq_k = draw(st.integers((n_k - 1) * block_size + 1, n_k * block_size))
    offset = draw(st.sampled_from([0, seq_k - seq_q]))
    return blocks, block_size, tiles, causal, (seq_q, seq_k), offset
