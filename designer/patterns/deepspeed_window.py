"""DeepSpeed's sliding-window configs: ``BigBirdSparsityConfig``, ``BSLongformerSparsityConfig``
and ``LocalSlidingWindowSparsityConfig``.

All three use DeepSpeed's window: row ``r`` sees ``[max(0, r - W // 2), min(r + W // 2 + 1, nb))``
(an even ``W`` acts as ``W + 1``), or, for LocalSlidingWindow's unidirectional default,
``[max(0, r - W // 2), r + 1)``.

BSLongformer and LocalSlidingWindow have no random draws, so they are also made as row runs
(``longformer_runs``, ``local_window_runs``) at sizes past a dense grid's: the same blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from designer.block_runs import BlockRuns
from designer.patterns._common import row_runs
from designer.patterns.deepspeed_base import (
    DIFFERENT,
    GLOBAL_ENDS,
    GLOBAL_STARTS,
    SEED,
    WINDOW,
    SparsityConfig,
    attention_param,
    check_attention,
    check_fits,
    check_global_spans,
    config_kwargs,
    count_param,
    deepspeed_spec,
    global_spans,
    set_random_rows,
    set_window,
)
from designer.validate import check_int, check_int_list, check_runs_shape


class BigBirdSparsityConfig(SparsityConfig):
    """BigBird (Zaheer et al., 2020): random blocks, a sliding window and the first blocks global.

    Per head: ``num_random_blocks`` random columns per row (``random.sample`` over ``range(nb)``,
    or ``range(row + 1)`` when unidirectional), the window, then rows and columns
    ``[0, num_global_blocks)``. Unidirectional applies ``torch.tril`` to the whole layout last,
    which also cuts the window's upper half.

    >>> BigBirdSparsityConfig(num_heads=1, num_random_blocks=0).make_layout(64)[0]
    tensor([[1, 1, 1, 1],
            [1, 1, 1, 0],
            [1, 1, 1, 1],
            [1, 0, 1, 1]])
    """

    def __init__(
        self,
        num_heads: int,
        block: int = 16,
        different_layout_per_head: bool = False,
        num_random_blocks: int = 1,
        num_sliding_window_blocks: int = 3,
        num_global_blocks: int = 1,
        attention: str = "bidirectional",
    ):
        super().__init__(num_heads, block, different_layout_per_head)
        self.num_random_blocks = check_int("num_random_blocks", num_random_blocks)
        self.num_sliding_window_blocks = check_int(
            "num_sliding_window_blocks", num_sliding_window_blocks
        )
        self.num_global_blocks = check_int("num_global_blocks", num_global_blocks)
        self.attention = check_attention(attention)
        for name in ("num_random_blocks", "num_sliding_window_blocks", "num_global_blocks"):
            check_int(name, getattr(self, name), low=0)

    def set_random_layout(self, h: int, layout: torch.Tensor) -> torch.Tensor:
        """Head ``h``'s random blocks: one ``random.sample`` per row, in order."""
        check_fits("random blocks", self.num_random_blocks, layout.shape[1])
        causal = self.attention == "unidirectional"
        if causal and self.num_random_blocks > 1:  # DeepSpeed failed here on row 0
            raise ValueError(
                "num_random_blocks must be <= 1 with unidirectional attention (row r draws from "
                f"its r + 1 earlier blocks, and row 0 has one), got {self.num_random_blocks}"
            )
        set_random_rows(layout[h], self.num_random_blocks, causal=causal)
        return layout

    def set_sliding_window_layout(self, h: int, layout: torch.Tensor) -> torch.Tensor:
        """Head ``h``'s symmetric window."""
        set_window(layout[h], self.num_sliding_window_blocks, causal=False)
        return layout

    def set_global_layout_itc(self, h: int, layout: torch.Tensor) -> torch.Tensor:
        """Head ``h``'s global rows and columns (internal transformer construction); then, when
        unidirectional, ``torch.tril`` of the whole layout."""
        check_fits("global blocks", self.num_global_blocks, layout.shape[1])
        layout[h, : self.num_global_blocks, :] = 1
        layout[h, :, : self.num_global_blocks] = 1
        if self.attention == "unidirectional":
            layout = torch.tril(layout)
        return layout

    def make_layout(self, seq_len: int) -> torch.Tensor:
        """The ``int64 [num_heads, nb, nb]`` BigBird layout; draws from Python's ``random``."""
        layout = self.setup_layout(seq_len)
        for h in range(self.num_layout_heads):
            self.set_random_layout(h, layout)
            self.set_sliding_window_layout(h, layout)
            layout = self.set_global_layout_itc(h, layout)
        return self.check_and_propagate_first_head_layout(layout)


class BSLongformerSparsityConfig(SparsityConfig):
    """Block-sparse Longformer (Beltagy et al., 2020): a sliding window plus global blocks.

    Each global index below nb (or ``[start, min(end, nb))`` span) is a whole row and a whole
    column. Any ``attention`` other than ``'unidirectional'`` is bidirectional (DeepSpeed does
    not check it); unidirectional applies ``torch.tril`` to the whole layout last.

    >>> BSLongformerSparsityConfig(num_heads=1, global_block_indices=[2]).make_layout(80)[0]
    tensor([[1, 1, 1, 0, 0],
            [1, 1, 1, 0, 0],
            [1, 1, 1, 1, 1],
            [0, 0, 1, 1, 1],
            [0, 0, 1, 1, 1]])
    """

    def __init__(
        self,
        num_heads: int,
        block: int = 16,
        different_layout_per_head: bool = False,
        num_sliding_window_blocks: int = 3,
        global_block_indices: Sequence[int] = (0,),
        global_block_end_indices: Sequence[int] | None = None,
        attention: str = "bidirectional",
    ):
        super().__init__(num_heads, block, different_layout_per_head)
        window = check_int("num_sliding_window_blocks", num_sliding_window_blocks)
        self.attention = attention
        starts, ends = check_global_spans(global_block_indices, global_block_end_indices)
        self.num_sliding_window_blocks = check_int("num_sliding_window_blocks", window, low=0)
        self.global_block_indices = check_int_list("global_block_indices", starts, low=0)
        self.global_block_end_indices = ends

    def set_sliding_window_layout(self, h: int, layout: torch.Tensor) -> torch.Tensor:
        """Head ``h``'s symmetric window."""
        set_window(layout[h], self.num_sliding_window_blocks, causal=False)
        return layout

    def set_global_layout(self, h: int, layout: torch.Tensor) -> torch.Tensor:
        """Head ``h``'s global rows and columns; then, when unidirectional, ``torch.tril`` of the
        whole layout."""
        num_blocks = layout.shape[1]
        for start, end in global_spans(self.global_block_indices, self.global_block_end_indices):
            if start < num_blocks:
                layout[h, start:end, :] = 1
                layout[h, :, start:end] = 1
        if self.attention == "unidirectional":
            layout = torch.tril(layout)
        return layout

    def make_layout(self, seq_len: int) -> torch.Tensor:
        """The ``int64 [num_heads, nb, nb]`` BSLongformer layout."""
        layout = self.setup_layout(seq_len)
        for h in range(self.num_layout_heads):
            self.set_sliding_window_layout(h, layout)
            layout = self.set_global_layout(h, layout)
        return self.check_and_propagate_first_head_layout(layout)


class LocalSlidingWindowSparsityConfig(SparsityConfig):
    """A purely local sliding window, one layout for all heads.

    Unidirectional by default: row ``r`` sees ``[max(0, r - W // 2), r + 1)``. Only
    ``'bidirectional'`` gives the symmetric window; DeepSpeed checks no other value. There is no
    ``different_layout_per_head`` parameter. ``W = 4`` gives 3 blocks causal, 5 bidirectional.

    >>> LocalSlidingWindowSparsityConfig(num_heads=1).make_layout(64)[0]
    tensor([[1, 0, 0, 0],
            [1, 1, 0, 0],
            [0, 1, 1, 0],
            [0, 0, 1, 1]])
    """

    def __init__(
        self,
        num_heads: int,
        block: int = 16,
        num_sliding_window_blocks: int = 3,
        attention: str = "unidirectional",
    ):
        super().__init__(num_heads, block)
        self.num_sliding_window_blocks = check_int(
            "num_sliding_window_blocks", num_sliding_window_blocks, low=0
        )
        self.attention = attention

    def set_sliding_window_layout(self, h: int, layout: torch.Tensor) -> torch.Tensor:
        """Head ``h``'s window, causal unless ``attention == 'bidirectional'``."""
        causal = self.attention != "bidirectional"
        set_window(layout[h], self.num_sliding_window_blocks, causal=causal)
        return layout

    def make_layout(self, seq_len: int) -> torch.Tensor:
        """The ``int64 [num_heads, nb, nb]`` local sliding-window layout."""
        layout = self.setup_layout(seq_len)
        for h in range(self.num_layout_heads):
            self.set_sliding_window_layout(h, layout)
        return self.check_and_propagate_first_head_layout(layout)


def _window_runs(n_blocks: int, window_blocks: int, causal: bool) -> list:
    """DeepSpeed's window as ``row_runs`` intervals: ``[r - W // 2, r + 1)`` or to
    ``r + W // 2 + 1``, after its size check."""
    check_fits("sliding window blocks", window_blocks, n_blocks)
    rows, reach = torch.arange(n_blocks), window_blocks // 2
    return [(rows - reach, rows + 1 if causal else rows + reach + 1)]


def longformer_runs(n_heads: int, n_blocks: int, _n_k: int, params: dict[str, Any]) -> BlockRuns:
    """``BSLongformerSparsityConfig``'s layout as row runs (one layout for every head: it has no
    random draws): the window, each global span's rows whole and its columns in every row, then
    causal when unidirectional."""
    n_heads, n_blocks, _ = check_runs_shape(n_heads, n_blocks, n_blocks)
    kwargs = config_kwargs(params, n_blocks)
    kwargs.pop("different_layout_per_head")
    config = BSLongformerSparsityConfig(num_heads=1, **kwargs)  # DeepSpeed's checks
    intervals = _window_runs(n_blocks, config.num_sliding_window_blocks, causal=False)
    rows = torch.arange(n_blocks)
    whole = torch.zeros(n_blocks, dtype=torch.bool)
    for start, end in global_spans(config.global_block_indices, config.global_block_end_indices):
        if start < n_blocks:
            whole[start:end] = True
            intervals.append((torch.full_like(rows, start), torch.full_like(rows, end)))
    intervals.append((torch.zeros_like(rows), whole * n_blocks))
    head = row_runs(n_blocks, n_blocks, intervals)
    if config.attention == "unidirectional":
        head = head.causal_clip()
    return head.select_heads([0] * n_heads)


def local_window_runs(n_heads: int, n_blocks: int, _n_k: int, params: dict[str, Any]) -> BlockRuns:
    """``LocalSlidingWindowSparsityConfig``'s layout as row runs: one run per row."""
    n_heads, n_blocks, _ = check_runs_shape(n_heads, n_blocks, n_blocks)
    config = LocalSlidingWindowSparsityConfig(num_heads=1, **params)
    causal = config.attention != "bidirectional"
    head = row_runs(n_blocks, n_blocks, _window_runs(n_blocks, config.num_sliding_window_blocks,
                                                     causal))  # fmt: skip
    return head.select_heads([0] * n_heads)


SPECS = (
    deepspeed_spec(
        "deepspeed_bigbird",
        "DeepSpeed BigBird",
        "random blocks + sliding window + the first G rows and columns",
        (
            DIFFERENT,
            count_param("num_random_blocks", 1, 0, "random blocks per row"),
            WINDOW,
            count_param("num_global_blocks", 1, 0, "global blocks from index 0"),
            attention_param("bidirectional"),
            SEED,
        ),
        BigBirdSparsityConfig,
        order=230,
    ),
    deepspeed_spec(
        "deepspeed_longformer",
        "DeepSpeed BSLongformer",
        "sliding window + global rows and columns",
        (DIFFERENT, WINDOW, GLOBAL_STARTS, GLOBAL_ENDS, attention_param("bidirectional")),
        BSLongformerSparsityConfig,
        order=240,
        runs=longformer_runs,
    ),
    deepspeed_spec(
        "deepspeed_local_sliding_window",
        "DeepSpeed LocalSlidingWindow",
        "row r sees [r - W // 2, r] (unidirectional) or [r - W // 2, r + W // 2]",
        (WINDOW, attention_param("unidirectional")),
        LocalSlidingWindowSparsityConfig,
        order=250,
        runs=local_window_runs,
    ),
)
