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
