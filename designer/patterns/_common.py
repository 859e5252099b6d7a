"""Parameter checks, parameter specs and index grids shared by the pattern modules.

Every generator returns a ``[n_heads, n_q_blocks, n_k_blocks]`` bool tensor; those of families
made of a few key-block intervals per query row also have a ``*_runs`` twin that gives the same
blocks as ``BlockRuns`` at any size (``row_runs`` builds a head's from its intervals).
Query block ``row`` and key block ``col`` are compared as plain indices: the grid is aligned at
its top-left corner, so ``col <= row`` is causal for any ``n_q_blocks != n_k_blocks``, as in
``Layout.causal_clip``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch

from designer.block_runs import BlockRuns
from designer.patterns.specs import ParamSpec, PatternSpec, RunsBuilder, calls
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


def row_runs(
    n_q_blocks: int, n_k_blocks: int, intervals: list[tuple[torch.Tensor, torch.Tensor]]
) -> BlockRuns:
    """One head's runs from int64 ``[M]`` ``(starts, stops)`` pairs: row ``m`` attends key
    blocks ``starts[m] <= col < stops[m]`` of each pair (clipped, empty ones dropped). Pairs
    listed by increasing start need no sort."""
    rows = torch.arange(n_q_blocks).repeat_interleave(len(intervals))
    starts = torch.stack([start for start, _ in intervals], dim=1).view(-1)
    stops = torch.stack([stop for _, stop in intervals], dim=1).view(-1)
    return BlockRuns.from_intervals((1, n_q_blocks, n_k_blocks), rows, starts, stops)


def stack_head_runs(
    values: Sequence[Hashable], make_head: Callable[[Hashable], BlockRuns]
) -> BlockRuns:
    """``stack_heads`` for runs: each distinct head's runs made once, the heads stacked."""
    made: dict[Hashable, BlockRuns] = {}
    for value in values:
        if value not in made:
            made[value] = make_head(value)
    if len(made) == 1:
        return made[values[0]].select_heads([0] * len(values))
    return BlockRuns.stack([made[value] for value in values])


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
    runs: Callable[..., BlockRuns] | None = None,
) -> PatternSpec:
    """The registry's entry for a block-level generator: ``generator(H, M, N, **params)``, any
    shape, random when it takes a seed; ``runs(H, M, N, **params)``, where given, makes the same
    blocks as row runs."""
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
        build_runs=None if runs is None else _runs_call(runs),
    )


def _runs_call(runs: Callable[..., BlockRuns]) -> RunsBuilder:
    return lambda n_heads, n_q, n_k, params: runs(n_heads, n_q, n_k, **params)
