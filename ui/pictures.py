"""Layouts as RGB pictures, coloured by the width of the tile each block landed in.

Pure numpy: arrays in, ``uint8`` images out, one pixel per block. Pictures are what keep the page
light: a 16-head 256×256 overview is a few PNGs, not a million heatmap cells.

Colours follow the tile width on a log2 scale (width 1, 2–3, 4–7, 8–15, …), so the same width
always has the same colour, and the widths of one segmentation (``sw, sw//2, …, 1``) never share
one. Every other tile of a width is drawn a little darker, so neighbouring tiles stay apart.
"""

from __future__ import annotations

import numpy as np

from designer.segment_stats import UNTILED

#: Inactive blocks: light, so the eye goes to what attends.
EMPTY_RGB = (244, 246, 250)
#: The thin border around a picture.
FRAME_RGB = (200, 206, 216)
#: Active blocks when the picture is not coloured by tile width, and active blocks that no
#: tile covers when it is (start width 0): they still attend, so they are still drawn.
ACTIVE_RGB = (47, 62, 92)
#: Token pairs a block attends but the design's causal rule masks, in the block zoom.
PARTIAL_RGB = (160, 170, 196)
#: Pixels per block from which the pictures hatch partial blocks.
HATCH_PX = 4
#: Tile colours by log2(width): single blocks (the least efficient tiles) amber, then blue,
#: green, purple, red, … for 2–3, 4–7, 8–15, 16–31 blocks.
WIDTH_PALETTE = (
    "#e8a33d",
    "#4e79a7",
    "#59a14f",
    "#b07aa1",
    "#e15759",
    "#76b7b2",
    "#edc948",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)
#: How much darker every other tile of one width is drawn.
ALTERNATE_SHADE = 0.82


def width_colour(width: int) -> str:
    """The hex colour of tiles of ``width`` blocks (a legend shows the same colours)."""
    return WIDTH_PALETTE[(int(width).bit_length() - 1) % len(WIDTH_PALETTE)]


def tile_pictures(widths: np.ndarray, odd: np.ndarray) -> np.ndarray:
    """``[..., M, N, 3]`` uint8: each active block in its tile width's colour, empty ones light,
    active blocks in no tile (``UNTILED``) dark."""
    largest = int(widths.max(initial=0))
    colour_of_width = np.zeros(largest + 1, dtype=np.uint8)  # 0: empty, k: palette entry k - 1
    if largest:
        log2 = np.log2(np.arange(1, largest + 1)).astype(np.int64)
        colour_of_width[1:] = log2 % len(WIDTH_PALETTE) + 1
    if largest == UNTILED:
        colour_of_width[UNTILED] = len(WIDTH_PALETTE) + 1
    palette = [EMPTY_RGB, *(_rgb(c) for c in WIDTH_PALETTE), ACTIVE_RGB]
    base = np.array(palette, dtype=np.float64)
    darker = np.concatenate([base[:1], base[1:] * ALTERNATE_SHADE])
    index = colour_of_width[widths] + odd.view(np.uint8) * np.uint8(len(base))
    return _lookup(np.concatenate([base, darker]).astype(np.uint8), index)


#: A diff of two designs' blocks, by ``designer.compare`` code: in neither, in both (muted, so
#: the differences stand out), only in the first (blue), only in the second (red).
DIFF_RGB = (EMPTY_RGB, (160, 168, 184), (31, 119, 180), (214, 39, 40))


def diff_pictures(codes: np.ndarray) -> np.ndarray:
    """``[..., M, N, 3]`` uint8 of ``designer.compare`` codes (max-pooled codes keep a
    difference visible: they are the larger codes)."""
    return _lookup(np.array(DIFF_RGB, dtype=np.uint8), np.asarray(codes, dtype=np.uint8))


def plain_pictures(blocks: np.ndarray) -> np.ndarray:
    """``[..., M, N, 3]`` uint8: active blocks dark, empty ones light."""
    index = np.asarray(blocks, dtype=bool).view(np.uint8)
    return _lookup(np.array([EMPTY_RGB, ACTIVE_RGB], dtype=np.uint8), index)


def with_partials(image: np.ndarray, partial: np.ndarray, grow: int) -> np.ndarray:
    """``image`` (``[M·grow, N·grow, 3]``) with its partial blocks (bool ``[M, N]``) drawn as
    they are: their colour halfway to white, and hatched (every third anti-diagonal pixel in
    the colour) when a block is at least ``HATCH_PX`` pixels."""
    cells = np.repeat(np.repeat(partial, grow, 0), grow, 1)
    drawn = image.copy()
    drawn[cells] = (image[cells].astype(np.uint16) + 255) // 2
    if grow >= HATCH_PX:
        rows, cols = np.indices(cells.shape)
        stripes = cells & ((rows + cols) % 3 == 0)
        drawn[stripes] = image[stripes]
    return drawn


def token_picture(tokens: np.ndarray, inside: np.ndarray, masked: np.ndarray) -> np.ndarray:
    """``[b, b, 3]`` uint8 of one block's token pairs: attended dark, not attended light,
    attended by the block but masked by the design's causal rule ``masked`` in the partial
    colour, past the sequence lengths (``~inside``) in the frame colour."""
    index = np.where(inside, np.where(tokens, np.where(masked, 2, 1), 0), 3).astype(np.uint8)
    palette = np.array([EMPTY_RGB, ACTIVE_RGB, PARTIAL_RGB, FRAME_RGB], dtype=np.uint8)
    return _lookup(palette, index)


def max_pool(grid: np.ndarray, factor: int) -> np.ndarray:
    """Shrink the last two axes by ``factor``; a cell keeps the largest value it covers.

    Used to draw layouts larger than the screen: a pixel shows the widest tile (or any active
    block) under it, so thin lines of active blocks never vanish.
    """
    if factor == 1:
        return grid
    *lead, rows, cols = grid.shape
    out_rows, out_cols = -(-rows // factor), -(-cols // factor)
    padded = np.zeros((*lead, out_rows * factor, out_cols * factor), dtype=grid.dtype)
    padded[..., :rows, :cols] = grid
    return padded.reshape(*lead, out_rows, factor, out_cols, factor).max(axis=(-3, -1))


def enlarge(image: np.ndarray, factor: int) -> np.ndarray:
    """Repeat each pixel of ``[..., M, N, 3]`` into a ``factor``² square (crisp, no blur)."""
    return image.repeat(factor, axis=-3).repeat(factor, axis=-2)


def frame(image: np.ndarray, rgb: tuple[int, int, int] = FRAME_RGB) -> np.ndarray:
    """``[M, N, 3]`` picture with a one-pixel border, so light edges stay visible on white."""
    rows, cols = image.shape[:2]
    framed = np.empty((rows + 2, cols + 2, 3), dtype=np.uint8)
    framed[...] = rgb
    framed[1:-1, 1:-1] = image
    return framed


def scale_factors(long_side: int, target_px: int) -> tuple[int, int]:
    """``(shrink, grow)`` that bring ``long_side`` blocks near ``target_px`` pixels.

    >>> scale_factors(64, 256), scale_factors(256, 256), scale_factors(2048, 512)
    ((1, 4), (1, 1), (4, 1))
    """
    if long_side > target_px:
        return -(-long_side // target_px), 1
    return 1, max(1, target_px // long_side)


def _lookup(palette: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``palette[index]`` for a ``[K, 3]`` uint8 palette, via packed 32-bit pixels (10× faster)."""
    packed = np.zeros((len(palette), 4), dtype=np.uint8)
    packed[:, :3] = palette
    pixels = packed.view("<u4")[:, 0][index]
    return np.ascontiguousarray(pixels[..., None].view(np.uint8)[..., :3])


def hex_colour(rgb: tuple[int, int, int]) -> str:
    """``(r, g, b)`` as ``#rrggbb`` (legends take hex colours).

    >>> hex_colour((244, 246, 250))
    '#f4f6fa'
    """
    return "#" + "".join(f"{c:02x}" for c in rgb)


def _rgb(text: str) -> tuple[int, int, int]:
    value = int(text.lstrip("#"), 16)
    return (value >> 16) & 255, (value >> 8) & 255, value & 255
