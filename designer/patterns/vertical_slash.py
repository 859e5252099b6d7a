"""Vertical-slash attention (MInference): a few key columns plus a few diagonals."""

from __future__ import annotations

import torch

from designer.patterns._common import block_grid, block_indices_param, causal_param, generator_spec
from designer.patterns.specs import ParamSpec
from designer.validate import MAX_BLOCKS, check_bool, check_int_list, check_layout_shape


def vertical_slash(
    n_heads: int,
    n_q_blocks: int,
    n_k_blocks: int,
    *,
    vertical_blocks: list[int],
    slash_offsets: list[int],
    causal: bool = True,
) -> torch.Tensor:
    """Chosen columns and diagonals: active iff ``col in vertical_blocks`` or
    ``row - col in slash_offsets`` (and ``col <= row`` when ``causal``).

    MInference (Jiang et al., 2024) finds that many heads attend to a few fixed keys (vertical
    lines) and to fixed relative distances (slash lines). Offset 0 is the main diagonal, offset
    ``k > 0`` the diagonal ``k`` blocks below it; negative offsets (above it) need
    ``causal=False``. ``vertical_blocks=[0], slash_offsets=[0, 2]``, causal::

        █····
        ██···
        █·█··
        ██·█·
        █·█·█

    >>> vertical_slash(1, 5, 5, vertical_blocks=[0], slash_offsets=[0, 2]).sum().item()
    11
    """
    n_heads, n_q_blocks, n_k_blocks = check_layout_shape(n_heads, n_q_blocks, n_k_blocks)
    causal = check_bool("causal", causal)
    columns = check_int_list("vertical_blocks", vertical_blocks, low=0, high=n_k_blocks - 1)
    offsets = check_int_list(
        "slash_offsets", slash_offsets, low=1 - n_k_blocks, high=n_q_blocks - 1
    )
    if causal and (above := [offset for offset in offsets if offset < 0]):
        raise ValueError(
            f"slash_offsets must be >= 0 when causal: offsets are row - col, so {above[0]} lies "
            f"above the diagonal, which causal clears (1 is the diagonal below it), got {offsets}"
        )
    if not columns and not offsets:
        raise ValueError("vertical_blocks and slash_offsets must not both be empty, got [] and []")
    rows, cols = block_grid(n_q_blocks, n_k_blocks)
    blocks = torch.isin(cols, torch.tensor(columns, dtype=torch.long)).expand(n_q_blocks, -1)
    blocks = blocks | torch.isin(rows - cols, torch.tensor(offsets, dtype=torch.long))
    if causal:
        blocks &= cols <= rows
    return blocks.expand(n_heads, -1, -1).contiguous()


SPECS = (
    generator_spec(
        "vertical_slash",
        "Vertical-slash",
        "col in vertical_blocks or row - col in slash_offsets",
        (
            block_indices_param("vertical_blocks", "key blocks every query attends to"),
            ParamSpec(
                "slash_offsets",
                "int_list",
                (0,),
                low=1 - MAX_BLOCKS,
                high=MAX_BLOCKS - 1,
                help="diagonals as row - col (0: main diagonal, 1: the one below it, -1: above)",
            ),
            causal_param(True),
        ),
        vertical_slash,
        order=110,
    ),
)
