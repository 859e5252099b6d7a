"""DeepSpeed's ``VariableSparsityConfig``: random blocks, local windows of listed sizes, and
chosen global blocks."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from designer.patterns.deepspeed_base import (
    DIFFERENT,
    GLOBAL_ENDS,
    GLOBAL_STARTS,
    HORIZONTAL,
    SEED,
    SparsityConfig,
    attention_param,
    check_attention,
    check_fits,
    check_global_spans,
    check_horizontal,
    count_param,
    deepspeed_spec,
    global_spans,
    indices_param,
    set_random_rows,
)
from designer.validate import check_int, check_int_list


class VariableSparsityConfig(SparsityConfig):
    """Fixed's generalization: per head, random blocks, then local windows, then global blocks.

    * Random: ``num_random_blocks`` columns per row drawn with ``random.sample(range(nb), r)``,
      even when unidirectional (so they may land above the diagonal, as in DeepSpeed).
    * Local: consecutive windows of the sizes in ``local_window_blocks``; the last size repeats
      to the end. Full squares, or lower triangles when unidirectional.
    * Global: each index (or ``[start, end)`` span with ``global_block_end_indices``) below nb
      is a whole column (from its own row down when unidirectional) and, with
      ``horizontal_global_attention``, a whole row. Indices past the end are ignored.

    >>> VariableSparsityConfig(num_heads=1, local_window_blocks=[1, 2]).make_layout(64)[0]
    tensor([[1, 0, 0, 0],
            [1, 1, 1, 0],
            [1, 1, 1, 0],
            [1, 0, 0, 1]])
    """

    def __init__(
        self,
        num_heads: int,
        block: int = 16,
        different_layout_per_head: bool = False,
        num_random_blocks: int = 0,
        local_window_blocks: Sequence[int] = (4,),
        global_block_indices: Sequence[int] = (0,),
        global_block_end_indices: Sequence[int] | None = None,
        attention: str = "bidirectional",
        horizontal_global_attention: bool = False,
    ):
        super().__init__(num_heads, block, different_layout_per_head)
        random_blocks = check_int("num_random_blocks", num_random_blocks)
        windows = check_int_list("local_window_blocks", local_window_blocks)
        starts, ends = check_global_spans(global_block_indices, global_block_end_indices)
        self.attention = check_attention(attention)
        self.horizontal_global_attention = check_horizontal(attention, horizontal_global_attention)
        self.num_random_blocks = check_int("num_random_blocks", random_blocks, low=0)
        self.local_window_blocks = check_int_list("local_window_blocks", windows, low=0)
        self.global_block_indices = check_int_list("global_block_indices", starts, low=0)
        self.global_block_end_indices = ends

    def set_random_layout(self, h: int, layout: torch.Tensor) -> torch.Tensor:
        """Head ``h``'s random blocks: one ``random.sample(range(nb), r)`` per row, in order."""
        check_fits("random blocks", self.num_random_blocks, layout.shape[1])
        set_random_rows(layout[h], self.num_random_blocks, causal=False)
        return layout

    def set_local_layout(self, h: int, layout: torch.Tensor) -> torch.Tensor:
        """Head ``h``'s local windows, of the listed sizes and then the last size repeated."""
        num_blocks = layout.shape[1]
        sizes = self.local_window_blocks
        if not sizes:  # DeepSpeed failed here with UnboundLocalError
            raise ValueError("local_window_blocks must list at least one window size, got []")
        if sizes[-1] == 0:  # DeepSpeed failed here with "range() arg 3 must not be zero"
            raise ValueError(
                "local_window_blocks must end with a size >= 1 (it repeats to the end of the "
                f"sequence), got {sizes}"
            )
        start = 0
        for size in sizes:
            self._set_window(layout[h], start, min(start + size, num_blocks))
            start += size
        for rest_start in range(start, num_blocks, sizes[-1]):
            self._set_window(layout[h], rest_start, min(rest_start + sizes[-1], num_blocks))
        return layout

    def _set_window(self, head: torch.Tensor, start: int, end: int) -> None:
        if start >= end:
            return
        window = torch.ones(end - start, end - start, dtype=head.dtype)
        if self.attention == "unidirectional":
            window = torch.tril(window)
        head[start:end, start:end] |= window

    def set_global_layout(self, h: int, layout: torch.Tensor) -> torch.Tensor:
        """Head ``h``'s global columns (and rows when horizontal)."""
        num_blocks = layout.shape[1]
        for start, end in global_spans(self.global_block_indices, self.global_block_end_indices):
            if start >= num_blocks:
                continue
            end = min(end, num_blocks)
            if self.horizontal_global_attention:
                layout[h, start:end, :] = 1
            first_row = 0 if self.attention == "bidirectional" else start
            layout[h, first_row:, start:end] = 1
        return layout

    def make_layout(self, seq_len: int) -> torch.Tensor:
        """The ``int64 [num_heads, nb, nb]`` Variable layout; draws from Python's ``random``."""
        layout = self.setup_layout(seq_len)
        for h in range(self.num_layout_heads):
            self.set_random_layout(h, layout)
            self.set_local_layout(h, layout)
            self.set_global_layout(h, layout)
        return self.check_and_propagate_first_head_layout(layout)


SPECS = (
    deepspeed_spec(
        "deepspeed_variable",
        "DeepSpeed Variable",
        "random blocks + local windows of listed sizes + chosen global blocks",
        (
            DIFFERENT,
            count_param("num_random_blocks", 0, 0, "random blocks per row"),
            indices_param("local_window_blocks", (4,), "window sizes; the last one repeats"),
            GLOBAL_STARTS,
            GLOBAL_ENDS,
            attention_param("bidirectional"),
            HORIZONTAL,
            SEED,
        ),
        VariableSparsityConfig,
        order=220,
    ),
)
