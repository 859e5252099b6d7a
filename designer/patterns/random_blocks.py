"""Seeded random blocks (BigBird's random part), reproducible from an explicit seed."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from designer.patterns._common import (
    MAX_SEED,
    block_grid,
    blocks_check,
    blocks_param,
    causal_param,
    generator_spec,
)
from designer.patterns.specs import ParamSpec
from designer.validate import check_bool, check_float, check_int, check_layout_shape, per_head


def random_blocks(
    n_heads: int,
    n_q_blocks: int,
    n_k_blocks: int,
    *,
    seed: int | list[int],
    blocks_per_row: int | list[int] | None = None,
    probability: float | list[float] | None = None,
    causal: bool = False,
) -> torch.Tensor:
    """Random blocks drawn from a seeded numpy Generator: each head draws one key
    ``u = rng.random((n_q_blocks, n_k_blocks))``; among a row's allowed cells (all, or
    ``col <= row`` when ``causal``) the ``blocks_per_row`` smallest keys are active (all of them
    if fewer are allowed), or every cell with ``u < probability``.

    Give exactly one of ``blocks_per_row`` and ``probability``. A single ``seed`` feeds one
    ``np.random.default_rng(seed)`` that draws the heads in order; a list gives head ``h`` its
    own ``default_rng(seed[h])``. Counts and probabilities may be one value per head.
    ``seed=0, blocks_per_row=1, causal=True``::

        █···
        █···
        █···
        ·█··

    >>> random_blocks(2, 4, 4, seed=0, blocks_per_row=1).sum().item()
    8
    """
    n_heads, n_q_blocks, n_k_blocks = check_layout_shape(n_heads, n_q_blocks, n_k_blocks)
    if (blocks_per_row is None) == (probability is None):
        raise ValueError(
            "give exactly one of blocks_per_row and probability, got "
            f"blocks_per_row={blocks_per_row!r}, probability={probability!r}"
        )
    causal = check_bool("causal", causal)
    if isinstance(seed, (list, tuple, np.ndarray)):
        seeds = per_head("seed", seed, n_heads, _check_seed)
        generators = [np.random.default_rng(s) for s in seeds]
    else:
        generators = [np.random.default_rng(_check_seed("seed", seed))] * n_heads
    if probability is None:
        counts = per_head("blocks_per_row", blocks_per_row, n_heads, blocks_check(0))
    else:
        chances = per_head("probability", probability, n_heads, _check_probability)

    rows, cols = block_grid(n_q_blocks, n_k_blocks)
    allowed = (cols <= rows) if causal else torch.ones(n_q_blocks, n_k_blocks, dtype=torch.bool)
    heads = []
    for h, rng in enumerate(generators):
        keys = torch.from_numpy(rng.random((n_q_blocks, n_k_blocks)))
        if probability is None:
            # Disallowed keys become 2.0, above every real key, so they are taken last and then
            # dropped again by the mask.
            keys = keys.masked_fill(~allowed, 2.0)
            smallest = keys.topk(min(counts[h], n_k_blocks), dim=1, largest=False).indices
            chosen = torch.zeros(n_q_blocks, n_k_blocks, dtype=torch.bool)
            heads.append(allowed & chosen.scatter_(1, smallest, True))
        else:
            heads.append(allowed & (keys < chances[h]))
    return torch.stack(heads).contiguous()


def _check_seed(name: str, value: Any) -> int:
    return check_int(name, value, low=0, high=MAX_SEED)


def _check_probability(name: str, value: Any) -> float:
    return check_float(name, value, low=0.0, high=1.0)


SEED = ParamSpec(
    "seed", "int", 0, low=0, high=MAX_SEED, per_head=True, help="one seed, or one per head"
)

SPECS = (
    generator_spec(
        "random_per_row",
        "Random (blocks per row)",
        "in each row, the blocks_per_row allowed cells with the smallest seeded random keys",
        (
            SEED,
            blocks_param("blocks_per_row", 2, 0, "random key blocks in each query row"),
            causal_param(False, "draw only from col <= row"),
        ),
        random_blocks,
        order=60,
    ),
    generator_spec(
        "random_probability",
        "Random (probability)",
        "each allowed cell active with the given probability (seeded)",
        (
            SEED,
            ParamSpec(
                "probability",
                "float",
                0.1,
                low=0.0,
                high=1.0,
                per_head=True,
                help="chance that a block is active",
            ),
            causal_param(False, "draw only from col <= row"),
        ),
        random_blocks,
        order=70,
    ),
)
