"""DeepSpeed's ``SparsityConfig`` base class, the dense config, the checks its subclasses share,
and what their registry entries share (the builder and the common parameters).

These classes reproduce DeepSpeed's sparse-attention configs (removed from DeepSpeed in 2026) so
that a layout designed here is the layout DeepSpeed users know: same names, parameters, defaults,
error types and messages, ``make_layout(seq_len)`` results (``int64 [num_heads, nb, nb]``) and,
after ``random.seed(s)``, the same random blocks.

Where DeepSpeed crashed by accident (a zero global block count, an empty window list, BigBird's
unidirectional draws), the same call raises a ``ValueError`` that says what to fix. Arguments that
DeepSpeed misread or crashed on later (wrong types, negative sizes or indices, a zero pattern
count) are refused when the config is built, after DeepSpeed's own checks.

A registry entry builds its config with ``block=block_size`` and ``num_heads=n_heads`` and calls
``make_layout(n_q_blocks * block_size)``. Random configs take a ``seed``: the builder seeds
Python's global ``random`` with it, makes the layout and puts the caller's random state back, so
the result equals DeepSpeed's after ``random.seed(seed)`` and nothing else in the process sees a
different random stream.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import numpy as np
import torch

from designer.patterns._common import MAX_SEED
from designer.patterns.specs import Builder, ParamSpec, PatternSpec, RunsBuilder
from designer.validate import MAX_BLOCKS, check_bool, check_int, check_int_list

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


# ------------------------------------------------------------------ shared by the registry entries
def builds(config_class: type[SparsityConfig]) -> Builder:
    """The registry's builder for ``config_class``: parameters in, ``bool [H, M, M]`` out."""

    def build(
        n_heads: int, n_q_blocks: int, _n_k_blocks: int, block_size: int, params: dict[str, Any]
    ) -> torch.Tensor:
        kwargs = config_kwargs(params, n_q_blocks)
        seed = kwargs.pop("seed", None)
        # With one layout for all heads, DeepSpeed builds head 0 (all the draws) and copies it:
        # build that one head and broadcast it as bool, not H int64 copies.
        shared = not kwargs.get("different_layout_per_head", False)
        config = config_class(num_heads=1 if shared else n_heads, block=block_size, **kwargs)
        seq_len = n_q_blocks * block_size
        state = random.getstate()
        try:
            if seed is not None:
                random.seed(seed)
            layout = config.make_layout(seq_len).bool()
        finally:
            if seed is not None:
                random.setstate(state)
        return layout.expand(n_heads, -1, -1) if shared else layout

    return build


def config_kwargs(params: dict[str, Any], n_blocks: int) -> dict[str, Any]:
    """A config's keyword arguments from the registry's parameters, global indices checked."""
    kwargs = dict(params)
    if kwargs.get("global_block_end_indices") == []:  # the registry's "no end indices"
        kwargs["global_block_end_indices"] = None
    _check_globals(kwargs, n_blocks)
    return kwargs


def _check_globals(kwargs: dict[str, Any], n_blocks: int) -> None:
    """Global block indices must name blocks of the layout, as ``global_tokens`` asks.

    DeepSpeed ignores an index past the end silently, and its classes keep that (parity); here,
    where a person types the indices, an index that does nothing is refused.
    """
    for name in ("global_block_indices", "global_block_end_indices"):
        values = kwargs.get(name) or ()
        limit = n_blocks if name == "global_block_indices" else n_blocks + 1
        for i, value in enumerate(values):
            if isinstance(value, int) and not 0 <= value < limit:
                raise ValueError(
                    f"{name}[{i}] must be in [0, {limit - 1}] (the layout has {n_blocks} blocks "
                    f"per row), got {value}"
                )


def deepspeed_spec(
    name: str,
    label: str,
    rule: str,
    params: tuple[ParamSpec, ...],
    config_class: type[SparsityConfig],
    *,
    order: int,
    runs: RunsBuilder | None = None,
) -> PatternSpec:
    """The registry's entry for a DeepSpeed config: square layouts, random when it takes a seed;
    ``runs`` makes the same layout as row runs, at any size."""
    return PatternSpec(
        name,
        label,
        "deepspeed",
        rule,
        params,
        random=any(param.name == "seed" for param in params),
        square_only=True,
        build=builds(config_class),
        order=order,
        build_runs=runs,
    )


def count_param(name: str, default: int, low: int, help: str) -> ParamSpec:
    """A number of blocks in ``[low, MAX_BLOCKS]``."""
    return ParamSpec(name, "int", default, low=low, high=MAX_BLOCKS, help=help)


def indices_param(name: str, default: tuple[int, ...], help: str) -> ParamSpec:
    """A list of block indices or sizes in ``[0, MAX_BLOCKS]``."""
    return ParamSpec(name, "int_list", default, low=0, high=MAX_BLOCKS, help=help)


def attention_param(default: str) -> ParamSpec:
    """DeepSpeed's ``attention``: one of ``ATTENTIONS``."""
    return ParamSpec("attention", "choice", default, choices=ATTENTIONS, help="causal or not")


DIFFERENT = ParamSpec(
    "different_layout_per_head", "bool", False, help="each head its own layout (else head 0's)"
)
HORIZONTAL = ParamSpec(
    "horizontal_global_attention", "bool", False, help="global blocks also attend to everything"
)
SEED = ParamSpec("seed", "int", 0, low=0, high=MAX_SEED, help="seed for Python's random")
WINDOW = count_param("num_sliding_window_blocks", 3, 0, "window width (even W acts as W + 1)")
GLOBAL_STARTS = indices_param("global_block_indices", (0,), "global block indices (span starts)")
GLOBAL_ENDS = indices_param("global_block_end_indices", (), "span ends, exclusive (empty: single)")

SPECS = (
    deepspeed_spec(
        "deepspeed_dense",
        "DeepSpeed Dense",
        "all blocks",
        (DIFFERENT,),
        DenseSparsityConfig,
        order=200,
    ),
)
