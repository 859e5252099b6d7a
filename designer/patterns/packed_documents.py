"""Packed documents: several sequences share one row of the batch and must not see each other."""

from __future__ import annotations

import itertools

import torch

from designer.patterns._common import block_grid, causal_param, generator_spec
from designer.patterns.specs import ParamSpec
from designer.validate import (
    MAX_BLOCKS,
    check_bool,
    check_int,
    check_int_list,
    check_layout_shape,
)


def packed_documents(
    n_heads: int,
    n_q_blocks: int,
    n_k_blocks: int,
    *,
    doc_blocks: list[int],
    causal: bool = True,
) -> torch.Tensor:
    """Attention within each document: active iff ``doc(row) == doc(col)`` (and ``col <= row``
    when ``causal``), where document ``d`` covers blocks ``[sum(doc_blocks[:d]),
    sum(doc_blocks[:d + 1]))``.

    Documents are laid out from block 0 on both axes. Blocks past the last document are padding
    and take part in nothing; a document running past the end of an axis is cut off there.
    ``doc_blocks=[1, 3]``, causal::

        █···
        ·█··
        ·██·
        ·███

    >>> packed_documents(1, 4, 4, doc_blocks=[1, 3]).sum().item()
    7
    """
    n_heads, n_q_blocks, n_k_blocks = check_layout_shape(n_heads, n_q_blocks, n_k_blocks)
    lengths = check_int_list(
        "doc_blocks", doc_blocks, low=1, high=MAX_BLOCKS, min_len=1, max_len=MAX_BLOCKS
    )
    causal = check_bool("causal", causal)
    ends = torch.tensor(list(itertools.accumulate(lengths)))
    rows, cols = block_grid(n_q_blocks, n_k_blocks)
    # Document number of each block; blocks past the last end get len(lengths), i.e. padding.
    row_doc = torch.bucketize(rows, ends, right=True)
    col_doc = torch.bucketize(cols, ends, right=True)
    blocks = (row_doc == col_doc) & (row_doc < len(lengths))
    if causal:
        blocks &= cols <= rows
    return blocks.expand(n_heads, -1, -1).contiguous()


def covering_documents(n_blocks: int) -> list[int]:
    """Two documents (3 : 5) that fill ``n_blocks`` blocks, so no query row is padding.

    >>> covering_documents(64), covering_documents(8), covering_documents(1)
    ([24, 40], [3, 5], [1])
    """
    n_blocks = check_int("n_blocks", n_blocks, low=1, high=MAX_BLOCKS)
    first = n_blocks * 3 // 8
    return [first, n_blocks - first] if first else [n_blocks]


SPECS = (
    generator_spec(
        "packed_documents",
        "Packed documents",
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
            causal_param(True),
        ),
        packed_documents,
        order=100,
    ),
)
