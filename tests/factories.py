"""Factories shared by the tests."""

from __future__ import annotations

import numpy as np
import torch

from designer.layout import Layout


def random_layout(
    rng: np.random.Generator,
    n_heads: int = 2,
    n_q_blocks: int = 8,
    n_k_blocks: int = 8,
    density: float = 0.3,
    block_size: int = 16,
) -> Layout:
    """A random layout with each block active with probability ``density``."""
    blocks = rng.random((n_heads, n_q_blocks, n_k_blocks)) < density
    return Layout(torch.from_numpy(blocks), block_size)


def token_layout_of(mask: torch.Tensor, block_size: int) -> Layout:
    """The layout of a bool ``[H, Sq, Sk]`` token mask (through ``from_mask_mod``)."""
    from designer.mask_mod import from_mask_mod

    heads, seq_q, seq_k = mask.shape
    return from_mask_mod(
        lambda b, h, q, k: mask[h, q, k],
        heads=heads,
        seq_q=seq_q,
        seq_k=seq_k,
        block_size=block_size,
    )


def random_token_mask(
    rng: np.random.Generator, heads: int, seq_q: int, seq_k: int, block_size: int
) -> torch.Tensor:
    """A bool ``[H, Sq, Sk]`` mask mixing empty, full and random blocks, so a layout of it has
    every kind of block."""
    n_q, n_k = -(-seq_q // block_size), -(-seq_k // block_size)
    kinds = rng.integers(0, 3, (heads, n_q, n_k))  # 0 empty, 1 full, 2 random tokens
    kind = np.repeat(np.repeat(kinds, block_size, 1), block_size, 2)[:, :seq_q, :seq_k]
    noise = rng.random((heads, seq_q, seq_k)) < rng.random()
    return torch.from_numpy((kind == 1) | ((kind == 2) & noise))
