"""Registry entries for DeepSpeed's configs: each builds the config with ``block=block_size`` and
``num_heads=n_heads`` and calls ``make_layout(n_q_blocks * block_size)``.

Random configs take a ``seed``: the builder seeds Python's global ``random`` with it, makes the
layout and puts the caller's random state back, so the result equals DeepSpeed's after
``random.seed(seed)`` and nothing else in the process sees a different random stream.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from designer.patterns.catalog_generators import Builder
from designer.patterns.deepspeed_base import ATTENTIONS, DenseSparsityConfig, SparsityConfig
from designer.patterns.deepspeed_fixed import FixedSparsityConfig
from designer.patterns.deepspeed_variable import VariableSparsityConfig
from designer.patterns.deepspeed_window import (
    BigBirdSparsityConfig,
    BSLongformerSparsityConfig,
    LocalSlidingWindowSparsityConfig,
)
from designer.patterns.random_blocks import MAX_SEED
from designer.patterns.specs import ParamSpec, PatternSpec
from designer.validate import MAX_BLOCKS


def _makes(config_class: type[SparsityConfig]) -> Builder:
    def build(
        n_heads: int, n_q_blocks: int, _n_k_blocks: int, block_size: int, params: dict[str, Any]
    ) -> torch.Tensor:
        kwargs = dict(params)
        seed = kwargs.pop("seed", None)
        if kwargs.get("global_block_end_indices") == []:  # the registry's "no end indices"
            kwargs["global_block_end_indices"] = None
        _check_globals(kwargs, n_q_blocks)
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


def _count(name: str, default: int, low: int, help: str) -> ParamSpec:
    return ParamSpec(name, "int", default, low=low, high=MAX_BLOCKS, help=help)


def _indices(name: str, default: tuple[int, ...], help: str) -> ParamSpec:
    return ParamSpec(name, "int_list", default, low=0, high=MAX_BLOCKS, help=help)


def _attention(default: str) -> ParamSpec:
    return ParamSpec("attention", "choice", default, choices=ATTENTIONS, help="causal or not")


DIFFERENT = ParamSpec(
    "different_layout_per_head", "bool", False, help="each head its own layout (else head 0's)"
)
HORIZONTAL = ParamSpec(
    "horizontal_global_attention", "bool", False, help="global blocks also attend to everything"
)
SEED = ParamSpec("seed", "int", 0, low=0, high=MAX_SEED, help="seed for Python's random")
WINDOW = _count("num_sliding_window_blocks", 3, 0, "window width (even W acts as W + 1)")
GLOBAL_STARTS = _indices("global_block_indices", (0,), "global block indices (span starts)")
GLOBAL_ENDS = _indices("global_block_end_indices", (), "span ends, exclusive (empty: single)")

DEEPSPEED: tuple[tuple[PatternSpec, Builder], ...] = (
    (
        PatternSpec(
            "deepspeed_dense",
            "DeepSpeed Dense",
            "deepspeed",
            "all blocks",
            (DIFFERENT,),
            random=False,
            square_only=True,
        ),
        _makes(DenseSparsityConfig),
    ),
    (
        PatternSpec(
            "deepspeed_fixed",
            "DeepSpeed Fixed",
            "deepspeed",
            "local windows of L blocks; the last G blocks of each window are global columns",
            (
                DIFFERENT,
                _count("num_local_blocks", 4, 1, "blocks per local window (L)"),
                _count("num_global_blocks", 1, 1, "global blocks per window (G, divides L)"),
                _attention("bidirectional"),
                HORIZONTAL,
                _count("num_different_global_patterns", 1, 1, "global patterns over heads"),
            ),
            random=False,
            square_only=True,
        ),
        _makes(FixedSparsityConfig),
    ),
    (
        PatternSpec(
            "deepspeed_variable",
            "DeepSpeed Variable",
            "deepspeed",
            "random blocks + local windows of listed sizes + chosen global blocks",
            (
                DIFFERENT,
                _count("num_random_blocks", 0, 0, "random blocks per row"),
                _indices("local_window_blocks", (4,), "window sizes; the last one repeats"),
                GLOBAL_STARTS,
                GLOBAL_ENDS,
                _attention("bidirectional"),
                HORIZONTAL,
                SEED,
            ),
            random=True,
            square_only=True,
        ),
        _makes(VariableSparsityConfig),
    ),
    (
        PatternSpec(
            "deepspeed_bigbird",
            "DeepSpeed BigBird",
            "deepspeed",
            "random blocks + sliding window + the first G rows and columns",
            (
                DIFFERENT,
                _count("num_random_blocks", 1, 0, "random blocks per row"),
                WINDOW,
                _count("num_global_blocks", 1, 0, "global blocks from index 0"),
                _attention("bidirectional"),
                SEED,
            ),
            random=True,
            square_only=True,
        ),
        _makes(BigBirdSparsityConfig),
    ),
    (
        PatternSpec(
            "deepspeed_longformer",
            "DeepSpeed BSLongformer",
            "deepspeed",
            "sliding window + global rows and columns",
            (DIFFERENT, WINDOW, GLOBAL_STARTS, GLOBAL_ENDS, _attention("bidirectional")),
            random=False,
            square_only=True,
        ),
        _makes(BSLongformerSparsityConfig),
    ),
    (
        PatternSpec(
            "deepspeed_local_sliding_window",
            "DeepSpeed LocalSlidingWindow",
            "deepspeed",
            "row r sees [r - W // 2, r] (unidirectional) or [r - W // 2, r + W // 2]",
            (WINDOW, _attention("unidirectional")),
            random=False,
            square_only=True,
        ),
        _makes(LocalSlidingWindowSparsityConfig),
    ),
)
