"""Parameter checks, parameter specs and index grids shared by the pattern modules.

Every generator returns a ``[n_heads, n_q_blocks, n_k_blocks]`` bool tensor. Query block ``row``
and key block ``col`` are compared as plain indices: the grid is aligned at its top-left corner,
so ``col <= row`` is causal for any ``n_q_blocks != n_k_blocks``, as in ``Layout.causal_clip``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch

from designer.patterns.specs import ParamSpec, PatternSpec, calls
from designer.validate import MAX_BLOCKS, check_int

#: Seeds are non-negative 63-bit integers (what a JSON recipe and numpy both hold exactly).
MAX_SEED = (1 << 63) - 1


def blocks_check(low: int) -> Callable[[str, Any], int]:
    """An item check for ``per_head``: a number of blocks in ``[low, MAX_BLOCKS]``."""
    return functools.partial(check_int, low=low, high=MAX_BLOCKS)


def block_grid(n_q_blocks: int, n_k_blocks: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Query indices as a ``[M, 1]`` column and key indices as a ``[1, N]`` row, to broadcast."""
    rows = torch.arange(n_q_blocks).unsqueeze(1)
    cols = torch.arange(n_k_blocks).unsqueeze(0)
    return rows, cols


def stack_heads(
    values: Sequence[Hashable], make_head: Callable[[Hashable], torch.Tensor]
) -> torch.Tensor:
    """Stack ``make_head(value)`` for each head's value, building each distinct value once."""
    made: dict[Hashable, torch.Tensor] = {}
    for value in values:
        if value not in made:
            made[value] = make_head(value)
    return torch.stack([made[value] for value in values]).contiguous()


def blocks_param(name: str, default: int, low: int, help: str, per_head: bool = True) -> ParamSpec:
    """A number of blocks in ``[low, MAX_BLOCKS]``, one value or (``per_head``) one per head."""
    return ParamSpec(name, "int", default, low=low, high=MAX_BLOCKS, per_head=per_head, help=help)


def block_indices_param(name: str, help: str) -> ParamSpec:
    """A list of block indices, ``[0]`` by default."""
    return ParamSpec(name, "int_list", (0,), low=0, high=MAX_BLOCKS - 1, help=help)


def causal_param(default: bool, help: str = "keep only col <= row") -> ParamSpec:
    """The ``causal`` switch of a generator."""
    return ParamSpec("causal", "bool", default, help=help)


def generator_spec(
    name: str,
    label: str,
    rule: str,
    params: tuple[ParamSpec, ...],
    generator: Callable[..., torch.Tensor],
    *,
    order: int,
) -> PatternSpec:
    """The registry's entry for a block-level generator: ``generator(H, M, N, **params)``, any
    shape, random when it takes a seed."""
    return PatternSpec(
        name,
        label,
        "generator",
        rule,
        params,
        random=any(param.name == "seed" for param in params),
        square_only=False,
        build=calls(generator),
        order=order,
    )
