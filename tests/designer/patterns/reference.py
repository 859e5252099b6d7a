"""Slow, obviously right references for the pattern tests: every cell from a one-line rule."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import torch
from hypothesis import settings
from hypothesis import strategies as st

#: Small shapes (heads, query blocks, key blocks), square and not.
SHAPES = [(1, 1, 1), (1, 4, 4), (2, 5, 3), (2, 3, 7), (3, 8, 8)]


def from_rule(
    n_heads: int, n_q_blocks: int, n_k_blocks: int, rule: Callable[[int, int, int], Any]
) -> torch.Tensor:
    """The ``[H, M, N]`` bool tensor whose cell ``(h, row, col)`` is ``bool(rule(h, row, col))``."""
    cells = [
        [[bool(rule(h, row, col)) for col in range(n_k_blocks)] for row in range(n_q_blocks)]
        for h in range(n_heads)
    ]
    return torch.tensor(cells, dtype=torch.bool).reshape(n_heads, n_q_blocks, n_k_blocks)


def of_head(value: Any, h: int) -> Any:
    """Head ``h``'s value of a parameter given once or per head."""
    return value[h] if isinstance(value, list) else value


def assert_blocks(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Same shape, compact contiguous bool storage, and every cell equal (diffs listed)."""
    assert actual.dtype == torch.bool
    assert actual.is_contiguous()
    assert actual.shape == expected.shape
    wrong = (actual != expected).nonzero().tolist()
    assert not wrong, f"{len(wrong)} cells differ, first (head, row, col): {wrong[:5]}"


def shapes(max_heads: int = 3, max_blocks: int = 12) -> st.SearchStrategy[tuple[int, int, int]]:
    """Hypothesis shapes ``(n_heads, n_q_blocks, n_k_blocks)``."""
    return st.tuples(
        st.integers(1, max_heads), st.integers(1, max_blocks), st.integers(1, max_blocks)
    )


def above_diagonal(blocks: torch.Tensor) -> int:
    """How many active cells have ``col > row``."""
    return int(torch.triu(blocks, diagonal=1).sum())


def grid(*rows: str) -> torch.Tensor:
    """A hand-written ``int64 [M, N]`` layout from strings of 0/1, one per row."""
    return torch.tensor([[int(cell) for cell in row] for row in rows], dtype=torch.int64)


def drawn_rows(num_blocks: int, count: int, causal: bool = False) -> torch.Tensor:
    """DeepSpeed's documented random draws: one ``random.sample`` per row, rows in order, from a
    list as long as ``range(num_blocks)`` (``range(row + 1)`` when ``causal``)."""
    head = torch.zeros(num_blocks, num_blocks, dtype=torch.int64)
    for row in range(num_blocks):
        population = list(range(row + 1 if causal else num_blocks))
        for col in random.sample(population, count):
            head[row, col] = 1
    return head


#: Settings for every property test here: no per-example deadline (CI machines are small and busy).
PROPERTY = settings(deadline=None, max_examples=60)
