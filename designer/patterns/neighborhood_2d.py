"""2-D neighbourhood attention for image tokens (NATTEN-style), optionally dilated."""

from __future__ import annotations

import math

import torch

from designer.patterns._common import (
    block_grid,
    blocks_check,
    blocks_param,
    generator_spec,
    stack_heads,
)
from designer.validate import MAX_BLOCKS, check_int, check_layout_shape, per_head


def neighborhood_2d(
    n_heads: int,
    n_q_blocks: int,
    n_k_blocks: int,
    *,
    height: int,
    width: int,
    radius: int | list[int],
    dilation: int | list[int] = 1,
) -> torch.Tensor:
    """Nearby image blocks: block ``b < height * width`` sits at ``(b // width, b % width)``;
    with ``dy, dx`` the position differences of ``row`` and ``col``, active iff both are image
    blocks, ``dy % dilation == dx % dilation == 0`` and ``max(|dy|, |dx|) <= radius * dilation``.

    Each image block attends to the ``(2 * radius + 1)²`` square around it (``dilation`` apart),
    as in Neighborhood Attention (Hassani et al., 2023). The image fills blocks from 0 in
    row-major order; blocks past it take part in nothing, and an image running past the end of an
    axis is cut off there. ``radius`` and ``dilation`` may be one value per head.
    ``height=2, width=3, radius=1`` (blocks 0..5 of a 2 x 3 image)::

        ██·██·
        ██████
        ·██·██
        ██·██·
        ██████
        ·██·██

    >>> neighborhood_2d(1, 6, 6, height=2, width=3, radius=1).sum().item()
    28
    """
    n_heads, n_q_blocks, n_k_blocks = check_layout_shape(n_heads, n_q_blocks, n_k_blocks)
    height = check_int("height", height, low=1, high=MAX_BLOCKS)
    width = check_int("width", width, low=1, high=MAX_BLOCKS // height)
    radii = per_head("radius", radius, n_heads, blocks_check(0))
    dilations = per_head("dilation", dilation, n_heads, blocks_check(1))
    rows, cols = block_grid(n_q_blocks, n_k_blocks)
    image = (rows < height * width) & (cols < height * width)
    dy = rows // width - cols // width
    dx = rows % width - cols % width

    def head(radius_and_dilation: tuple[int, int]) -> torch.Tensor:
        reach, step = radius_and_dilation
        on_lattice = (dy % step == 0) & (dx % step == 0)
        return image & on_lattice & (torch.maximum(dy.abs(), dx.abs()) <= reach * step)

    return stack_heads(list(zip(radii, dilations, strict=True)), head)


def covering_image(n_blocks: int) -> tuple[int, int]:
    """``(height, width)`` of the squarest image of exactly ``n_blocks`` blocks, so every query
    row is an image block.

    >>> covering_image(64), covering_image(12), covering_image(7)
    ((8, 8), (3, 4), (1, 7))
    """
    n_blocks = check_int("n_blocks", n_blocks, low=1, high=MAX_BLOCKS)
    height = next(h for h in range(math.isqrt(n_blocks), 0, -1) if n_blocks % h == 0)
    return height, n_blocks // height


SPECS = (
    generator_spec(
        "neighborhood_2d",
        "2-D neighbourhood (image)",
        "image blocks within radius (Chebyshev, dilation apart) in a height x width grid",
        (
            blocks_param("height", 8, 1, "image height in blocks", per_head=False),
            blocks_param("width", 8, 1, "image width in blocks", per_head=False),
            blocks_param("radius", 1, 0, "reach in blocks along each image axis"),
            blocks_param("dilation", 1, 1, "distance between neighbours"),
        ),
        neighborhood_2d,
        order=120,
    ),
)
