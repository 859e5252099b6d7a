"""Layouts for the look-up-table tests and the token mask they must express (shared by the
forward's and the backward's tables)."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import strategies as st

TILES = [(128, 64), (128, 128), (64, 64), (32, 16)]


def token_mask(
    blocks: np.ndarray, block_size: int, causal: bool, offset: int = 0, seq=None, partials=None
) -> np.ndarray:
    """``[H, Sq, Sk]`` bool: the attention each query may pay to each key (``partials``: the
    ``(index, bits)`` of partial blocks, read one block at a time)."""
    mask = blocks.repeat(block_size, 1).repeat(block_size, 2)
    if partials is not None:
        for (h, qb, kb), cell in zip(partials[0].tolist(), partials[1].numpy(), strict=True):
            tokens = np.unpackbits(cell, axis=-1, bitorder="little")[:, :block_size]
            rows, cols = (
                slice(qb * block_size, (qb + 1) * block_size),
                slice(kb * block_size, (kb + 1) * block_size),
            )
            mask[h, rows, cols] &= tokens.astype(bool)
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


def random_partials(blocks: np.ndarray, block_size: int, seed: int, share: float = 0.5):
    """``(index, bits)`` making about ``share`` of the active blocks partial, with random bits
    (some blocks' bits all zero, some all ones but stored as partial)."""
    rng = np.random.default_rng(seed)
    index = np.argwhere(blocks & (rng.random(blocks.shape) < share))
    density = rng.choice([0.0, 0.3, 0.7, 1.0], size=(len(index), 1, 1))
    cells = rng.random((len(index), block_size, block_size)) < density
    bits = np.packbits(cells, axis=-1, bitorder="little")
    return torch.from_numpy(index.astype(np.int32)), torch.from_numpy(bits)


@st.composite
def token_layouts(draw):
    """``partial_layouts`` with random partial blocks: the case, then ``(index, bits)``."""
    case = draw(partial_layouts())
    blocks, block_size = case[0], case[1]
    share = draw(st.sampled_from([0.0, 0.3, 1.0]))
    return case, random_partials(blocks, block_size, draw(st.integers(0, 2**31)), share)
