"""DeepSpeed's ``SparsityConfig`` base class, the dense config and the checks its subclasses share.

These classes reproduce DeepSpeed's sparse-attention configs (removed from DeepSpeed in 2026) so
that a layout designed here is the layout DeepSpeed users know: same names, parameters, defaults,
error types and messages, ``make_layout(seq_len)`` results (``int64 [num_heads, nb, nb]``) and,
after ``random.seed(s)``, the same random blocks.

Where DeepSpeed crashed by accident (a zero global block count, an empty window list, BigBird's
unidirectional draws), the same call raises a ``ValueError`` that says what to fix. Arguments that
DeepSpeed misread or crashed on later (wrong types, negative sizes or indices, a zero pattern
count) are refused when the config is built, after DeepSpeed's own checks.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import numpy as np
import torch

from designer.validate import check_bool, check_int, check_int_list

ATTENTIONS = ("unidirectional", "bidirectional")


class SparsityConfig:
    """What every sparsity config shares: heads, block size and whether heads differ.

    It has no ``make_layout``: the subclasses define the patterns.
    """

    def __init__(self, num_heads: int, block: int = 16, different_layout_per_head: bool = False):
        self.num_heads = check_int("num_heads", num_heads, low=1)
        self.block = check_int("block", block, low=1)
        self.different_layout_per_head = check_bool(
            "different_layout_per_head", different_layout_per_head
        )
        self.num_layout_heads = self.num_heads if self.different_layout_per_head else 1

    def setup_layout(self, seq_len: int) -> torch.Tensor:
        """An all-zero ``int64 [num_heads, nb, nb]`` layout, ``nb = seq_len // block``."""
        seq_len = check_int("seq_len", seq_len)
        if seq_len % self.block != 0:
            raise ValueError(
                f"Sequence Length, {seq_len}, needs to be dividable by Block size {self.block}!"
            )
        num_blocks = check_int("seq_len", seq_len, low=0) // self.block
        return torch.zeros((self.num_heads, num_blocks, num_blocks), dtype=torch.int64)

    def check_and_propagate_first_head_layout(self, layout: torch.Tensor) -> torch.Tensor:
        """Copy head 0 into every other head (in place) unless each head has its own layout."""
        if not self.different_layout_per_head:
            layout[1 : self.num_heads] = layout[0]
        return layout


class DenseSparsityConfig(SparsityConfig):
    """Every block active: the dense baseline, kept for comparison."""

    def __init__(self, num_heads: int, block: int = 16, different_layout_per_head: bool = False):
        super().__init__(num_heads, block, different_layout_per_head)

    def make_layout(self, seq_len: int) -> torch.Tensor:
        """All ones, ``int64 [num_heads, nb, nb]``."""
        layout = self.setup_layout(seq_len)
        layout[:] = 1
        return layout


# --------------------------------------------------------------------- shared by the subclasses
def check_attention(attention: Any) -> str:
    """DeepSpeed's attention check: exactly one of ``ATTENTIONS``."""
    if attention not in ATTENTIONS:
        raise NotImplementedError('only "uni/bi-directional" attentions are supported for now!')
    return attention


def check_horizontal(attention: str, horizontal_global_attention: Any) -> bool:
    """Horizontal global attention needs bidirectional attention."""
    horizontal = check_bool("horizontal_global_attention", horizontal_global_attention)
    if attention != "bidirectional" and horizontal:
        raise ValueError(
            'only "bi-directional" attentions can support horizontal global attention!'
        )
    return horizontal


def check_global_spans(
    global_block_indices: Any, global_block_end_indices: Any
) -> tuple[list[int], list[int] | None]:
    """Global start indices and optional end indices, with DeepSpeed's checks on their pairing."""
    starts = check_int_list("global_block_indices", global_block_indices)
    if global_block_end_indices is None:
        return starts, None
    ends = check_int_list("global_block_end_indices", global_block_end_indices)
    if len(starts) != len(ends):
        raise ValueError(
            f"Global block start indices length, {len(starts)}, must be same as global block end "
            f"indices length, {len(ends)}!"
        )
    for start, end in zip(starts, ends, strict=True):
        if start >= end:
            raise ValueError(
                f"Global block start index, {start}, must be smaller than global block end index, "
                f"{end}!"
            )
    return starts, ends


def check_fits(what: str, count: int, num_blocks: int) -> None:
    """DeepSpeed's size check at ``make_layout``: ``count`` blocks must fit in a row."""
    if num_blocks < count:
        raise ValueError(
            f"Number of {what}, {count}, must be smaller than overall number of blocks in a row, "
            f"{num_blocks}!"
        )


def global_spans(starts: list[int], ends: list[int] | None) -> list[tuple[int, int]]:
    """Global ``[start, end)`` spans: single blocks without end indices."""
    if ends is None:
        return [(start, start + 1) for start in starts]
    return list(zip(starts, ends, strict=True))


def set_random_rows(head: torch.Tensor, count: int, causal: bool) -> None:
    """Set ``count`` random columns in each row, one ``random.sample`` call per row in order.

    The population is ``range(nb)``, or ``range(row + 1)`` when ``causal`` (BigBird
    unidirectional); the picks equal DeepSpeed's after the same ``random.seed``.
    """
    num_blocks = head.shape[0]
    draws = (
        random.sample(range(row + 1) if causal else range(num_blocks), count)
        for row in range(num_blocks)
    )
    cols = np.fromiter(itertools.chain.from_iterable(draws), np.int64, num_blocks * count)
    rows = np.repeat(np.arange(num_blocks), count)
    head[torch.from_numpy(rows), torch.from_numpy(cols)] = 1  # one write, not one per block


def set_window(head: torch.Tensor, window_blocks: int, causal: bool) -> None:
    """Set DeepSpeed's sliding window in one ``[nb, nb]`` head, after its size check.

    The window is ``|row - col| <= W // 2``, or ``0 <= row - col <= W // 2`` when ``causal``, so
    an even ``W`` reaches as far as ``W + 1``.
    """
    num_blocks = head.shape[0]
    check_fits("sliding window blocks", window_blocks, num_blocks)
    index = torch.arange(num_blocks)
    distance = index.unsqueeze(1) - index.unsqueeze(0)
    reach = window_blocks // 2
    head[(distance >= 0) & (distance <= reach) if causal else distance.abs() <= reach] = 1
