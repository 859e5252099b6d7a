"""Registry entries for the block-level generators: each spec with the call that makes it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from designer.patterns.attention_sinks import attention_sinks
from designer.patterns.block_diagonal import block_diagonal
from designer.patterns.causal import causal
from designer.patterns.dilated_window import dilated_window
from designer.patterns.global_tokens import global_tokens
from designer.patterns.neighborhood_2d import neighborhood_2d
from designer.patterns.packed_documents import packed_documents
from designer.patterns.prefix_lm import prefix_lm
from designer.patterns.random_blocks import MAX_SEED, random_blocks
from designer.patterns.sliding_window import sliding_window
from designer.patterns.specs import ParamSpec, PatternSpec
from designer.patterns.vertical_slash import vertical_slash
from designer.validate import MAX_BLOCKS

#: Makes a pattern: ``(n_heads, n_q_blocks, n_k_blocks, block_size, params) -> [H, M, N]``.
Builder = Callable[[int, int, int, int, dict[str, Any]], torch.Tensor]


def _calls(generator: Callable[..., torch.Tensor]) -> Builder:
    """A builder passing the parameters to ``generator`` as keywords (block size unused)."""
    return lambda n_heads, n_q, n_k, _block_size, params: generator(n_heads, n_q, n_k, **params)


def _blocks(name: str, default: int, low: int, help: str, per_head: bool = True) -> ParamSpec:
    return ParamSpec(name, "int", default, low=low, high=MAX_BLOCKS, per_head=per_head, help=help)


def _block_indices(name: str, help: str) -> ParamSpec:
    return ParamSpec(name, "int_list", (0,), low=0, high=MAX_BLOCKS - 1, help=help)


def _causal(default: bool, help: str = "keep only col <= row") -> ParamSpec:
    return ParamSpec("causal", "bool", default, help=help)


SEED = ParamSpec(
    "seed", "int", 0, low=0, high=MAX_SEED, per_head=True, help="one seed, or one per head"
)

GENERATORS: tuple[tuple[PatternSpec, Builder], ...] = (
    (
        PatternSpec(
            "causal", "Causal", "generator", "col <= row", (), random=False, square_only=False
        ),
        _calls(causal),
    ),
    (
        PatternSpec(
            "sliding_window",
            "Sliding window",
            "generator",
            "0 <= row - col < window_blocks (causal), |row - col| < window_blocks otherwise",
            (
                _blocks("window_blocks", 4, 1, "blocks in the window, per side if bidirectional"),
                _causal(True),
            ),
            random=False,
            square_only=False,
        ),
        _calls(sliding_window),
    ),
    (
        PatternSpec(
            "dilated_window",
            "Dilated window",
            "generator",
            "d = row - col (|row - col|): d >= 0, d % dilation == 0, d // dilation < window_blocks",
            (
                _blocks("window_blocks", 4, 1, "blocks in the window, per side if bidirectional"),
                _blocks("dilation", 2, 1, "distance between window blocks"),
                _causal(True),
            ),
            random=False,
            square_only=False,
        ),
        _calls(dilated_window),
    ),
    (
        PatternSpec(
            "global_tokens",
            "Global tokens",
            "generator",
            "row in global_blocks (rows) or col in global_blocks (columns)",
            (
                _block_indices("global_blocks", "indices of the global blocks"),
                ParamSpec("rows", "bool", True, help="global blocks attend to everything"),
                ParamSpec("columns", "bool", True, help="everything attends to global blocks"),
            ),
            random=False,
            square_only=False,
        ),
        _calls(global_tokens),
    ),
    (
        PatternSpec(
            "attention_sinks",
            "Attention sinks + window",
            "generator",
            "col <= row and (col < sink_blocks or row - col < window_blocks)",
            (
                _blocks("sink_blocks", 1, 0, "first key blocks every query keeps"),
                _blocks("window_blocks", 4, 1, "blocks in the causal window"),
            ),
            random=False,
            square_only=False,
        ),
        _calls(attention_sinks),
    ),
    (
        PatternSpec(
            "random_per_row",
            "Random (blocks per row)",
            "generator",
            "in each row, the blocks_per_row allowed cells with the smallest seeded random keys",
            (
                SEED,
                _blocks("blocks_per_row", 2, 0, "random key blocks in each query row"),
                _causal(False, "draw only from col <= row"),
            ),
            random=True,
            square_only=False,
        ),
        _calls(random_blocks),
    ),
    (
        PatternSpec(
            "random_probability",
            "Random (probability)",
            "generator",
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
                _causal(False, "draw only from col <= row"),
            ),
            random=True,
            square_only=False,
        ),
        _calls(random_blocks),
    ),
    (
        PatternSpec(
            "block_diagonal",
            "Block diagonal (chunks)",
            "generator",
            "row // chunk_blocks == col // chunk_blocks",
            (_blocks("chunk_blocks", 4, 1, "blocks per chunk"), _causal(False)),
            random=False,
            square_only=False,
        ),
        _calls(block_diagonal),
    ),
    (
        PatternSpec(
            "prefix_lm",
            "Prefix LM",
            "generator",
            "col <= row or col < prefix_blocks",
            (_blocks("prefix_blocks", 2, 0, "blocks of the bidirectional prefix"),),
            random=False,
            square_only=False,
        ),
        _calls(prefix_lm),
    ),
    (
        PatternSpec(
            "packed_documents",
            "Packed documents",
            "generator",
            "doc(row) == doc(col), documents laid out from block 0",
            (
                ParamSpec(
                    "doc_blocks",
                    "int_list",
                    (24, 40),
                    low=1,
                    high=MAX_BLOCKS,
                    help="length of each document in blocks",
                ),
                _causal(True),
            ),
            random=False,
            square_only=False,
        ),
        _calls(packed_documents),
    ),
    (
        PatternSpec(
            "vertical_slash",
            "Vertical-slash",
            "generator",
            "col in vertical_blocks or row - col in slash_offsets",
            (
                _block_indices("vertical_blocks", "key blocks every query attends to"),
                ParamSpec(
                    "slash_offsets",
                    "int_list",
                    (0,),
                    low=1 - MAX_BLOCKS,
                    high=MAX_BLOCKS - 1,
                    help="diagonals as row - col (0: main diagonal)",
                ),
                _causal(True),
            ),
            random=False,
            square_only=False,
        ),
        _calls(vertical_slash),
    ),
    (
        PatternSpec(
            "neighborhood_2d",
            "2-D neighbourhood (image)",
            "generator",
            "image blocks within radius (Chebyshev, dilation apart) in a height x width grid",
            (
                _blocks("height", 8, 1, "image height in blocks", per_head=False),
                _blocks("width", 8, 1, "image width in blocks", per_head=False),
                _blocks("radius", 1, 0, "reach in blocks along each image axis"),
                _blocks("dilation", 1, 1, "distance between neighbours"),
            ),
            random=False,
            square_only=False,
        ),
        _calls(neighborhood_2d),
    ),
)
