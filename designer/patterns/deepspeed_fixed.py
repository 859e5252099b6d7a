"""DeepSpeed's ``FixedSparsityConfig``: local windows plus their last blocks as global blocks.

From "Generating Long Sequences with Sparse Transformers" (Child et al., 2019), as customized by
DeepSpeed. No randomness.
"""

from __future__ import annotations

import torch

from designer.patterns.deepspeed_base import (
    DIFFERENT,
    HORIZONTAL,
    SparsityConfig,
    attention_param,
    check_attention,
    check_horizontal,
    count_param,
    deepspeed_spec,
)
from designer.validate import check_int


class FixedSparsityConfig(SparsityConfig):
    """Windows of ``num_local_blocks`` blocks; in each, ``num_global_blocks`` blocks are global.

    Head ``h`` takes global pattern ``p = h % num_different_global_patterns``: pattern 0 uses the
    last ``G`` blocks of each window, pattern 1 the ``G`` before those, and so on. Global blocks
    are whole columns (from their own row down when unidirectional) and, with
    ``horizontal_global_attention``, whole rows too.

    >>> FixedSparsityConfig(num_heads=1, num_local_blocks=2).make_layout(64)[0]
    tensor([[1, 1, 0, 1],
            [1, 1, 0, 1],
            [0, 1, 1, 1],
            [0, 1, 1, 1]])
    """

    def __init__(
        self,
        num_heads: int,
        block: int = 16,
        different_layout_per_head: bool = False,
        num_local_blocks: int = 4,
        num_global_blocks: int = 1,
        attention: str = "bidirectional",
        horizontal_global_attention: bool = False,
        num_different_global_patterns: int = 1,
    ):
        super().__init__(num_heads, block, different_layout_per_head)
        local = check_int("num_local_blocks", num_local_blocks)
        global_ = check_int("num_global_blocks", num_global_blocks)
        patterns = check_int("num_different_global_patterns", num_different_global_patterns)
        if global_ == 0:  # DeepSpeed divided by it here
            raise ValueError("num_global_blocks must be >= 1, got 0")
        if local % global_ != 0:
            raise ValueError(
                f"Number of blocks in a local window, {local}, must be dividable by number of "
                f"global blocks, {global_}!"
            )
        self.num_local_blocks = local
        self.num_global_blocks = global_
        self.attention = check_attention(attention)
        self.horizontal_global_attention = check_horizontal(attention, horizontal_global_attention)
        if patterns > 1 and not self.different_layout_per_head:
            raise ValueError(
                "Number of different layouts cannot be more than one when you have set a single "
                "layout for all heads! Set different_layout_per_head to True."
            )
        if patterns > local // global_:
            raise ValueError(
                f"Number of layout versions (num_different_global_patterns), {patterns}, cannot be "
                "larger than number of local window blocks divided by number of global blocks, "
                f"{local} / {global_} = {local // global_}!"
            )
        check_int("num_local_blocks", local, low=1)
        check_int("num_global_blocks", global_, low=1)
        self.num_different_global_patterns = check_int(
            "num_different_global_patterns", patterns, low=1
        )

    def set_local_layout(self, h: int, layout: torch.Tensor) -> torch.Tensor:
        """Head ``h``'s local windows: row and column in the same window (``col <= row`` when
        unidirectional)."""
        index = torch.arange(layout.shape[1])
        rows, cols = index.unsqueeze(1), index.unsqueeze(0)
        local = rows // self.num_local_blocks == cols // self.num_local_blocks
        if self.attention == "unidirectional":
            local &= cols <= rows
        layout[h][local] = 1
        return layout

    def set_global_layout(self, h: int, layout: torch.Tensor) -> torch.Tensor:
        """Head ``h``'s global blocks: at the pattern's offset in every full window, and once in a
        short last window (pushed left so that all ``G`` blocks fit)."""
        num_blocks = layout.shape[1]
        offset = (
            self.num_local_blocks
            - (1 + h % self.num_different_global_patterns) * self.num_global_blocks
        )
        full_end = num_blocks - num_blocks % self.num_local_blocks
        for start in range(offset, full_end, self.num_local_blocks):
            self._set_global_span(layout[h], start)
        if full_end < num_blocks:
            self._set_global_span(
                layout[h], min(full_end + offset, num_blocks - self.num_global_blocks)
            )
        return layout

    def _set_global_span(self, head: torch.Tensor, start: int) -> None:
        # Python slices on purpose: with fewer blocks than G, start is negative and wraps around,
        # exactly as in DeepSpeed.
        end = start + self.num_global_blocks
        first_row = 0 if self.attention == "bidirectional" else start
        head[first_row:, start:end] = 1
        if self.horizontal_global_attention:
            head[start:end, :] = 1

    def make_layout(self, seq_len: int) -> torch.Tensor:
        """The ``int64 [num_heads, nb, nb]`` Fixed layout for ``seq_len`` tokens."""
        layout = self.setup_layout(seq_len)
        for h in range(self.num_layout_heads):
            self.set_local_layout(h, layout)
            self.set_global_layout(h, layout)
        return self.check_and_propagate_first_head_layout(layout)


SPECS = (
    deepspeed_spec(
        "deepspeed_fixed",
        "DeepSpeed Fixed",
        "local windows of L blocks; the last G blocks of each window are global columns",
        (
            DIFFERENT,
            count_param("num_local_blocks", 4, 1, "blocks per local window (L)"),
            count_param("num_global_blocks", 1, 1, "global blocks per window (G, divides L)"),
            attention_param("bidirectional"),
            HORIZONTAL,
            count_param("num_different_global_patterns", 1, 1, "global patterns over heads"),
        ),
        FixedSparsityConfig,
        order=210,
    ),
)
