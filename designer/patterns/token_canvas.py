"""Attention on a 2-D canvas of tokens: NATTEN, tiled NATTEN and sliding-tile attention
(attention-gym's ``natten``, ``tiled_natten`` and ``sta`` masks).

Tokens are pixels of a canvas ``width`` tokens wide, in row-major order, or (tiled) tile by
tile: ``tiles_across`` tiles of ``tile_height x tile_width`` tokens per canvas row of tiles,
row-major over the canvas, each tile's tokens row-major inside it, so one block of tokens is a
patch of the image. The canvas is as tall as the keys need: ``ceil(seq_k / width)`` rows.
"""

from __future__ import annotations

from typing import Any

from designer.patterns._tokens import MAX_TOKENS, MaskMod, named, neighbourhood, token_spec
from designer.patterns.specs import ParamSpec
from designer.validate import check_int

MAX_SIDE = 1 << 12


def _side(name: str, default: int, help: str) -> ParamSpec:
    return ParamSpec(name, "int", default, low=1, high=MAX_SIDE, help=help)


def _pixel(index: Any, width: int, tile: tuple[int, int] | None) -> tuple[Any, Any]:
    """``(row, col)`` of token ``index`` on the canvas, row-major or tile by tile."""
    if tile is None:
        return index // width, index % width
    tile_h, tile_w = tile
    per_tile, tiles_across = tile_h * tile_w, width // tile_w
    which, inside = index // per_tile, index % per_tile
    row = (which // tiles_across) * tile_h + inside // tile_w
    col = (which % tiles_across) * tile_w + inside % tile_w
    return row, col


def _tiles(tiles_across: int, tile_height: int, tile_width: int) -> tuple[int, tuple[int, int]]:
    """The canvas width and the tile of the tiled orders, checked."""
    across = check_int("tiles_across", tiles_across, low=1, high=MAX_SIDE)
    tile = (check_int("tile_height", tile_height, low=1, high=MAX_SIDE),
            check_int("tile_width", tile_width, low=1, high=MAX_SIDE))  # fmt: skip
    return across * tile[1], tile


def token_natten(
    width: int, kernel_height: int, kernel_width: int, *, height: int = MAX_TOKENS,
    tile: tuple[int, int] | None = None,
) -> MaskMod:  # fmt: skip
    """NATTEN: each pixel attends the ``kernel_height x kernel_width`` pixels around it, the
    window shifted to stay inside the canvas (``height`` rows of ``width``).

    >>> import torch
    >>> natten = token_natten(4, 3, 3, height=4)
    >>> import torch
    >>> natten(0, 0, torch.tensor([0, 0]), torch.tensor([5, 3])).tolist()
    [True, False]
    """
    width = check_int("width", width, low=1, high=MAX_SIDE)
    height = check_int("height", height, low=1)
    kernel = (check_int("kernel_height", kernel_height, low=1, high=MAX_SIDE),
              check_int("kernel_width", kernel_width, low=1, high=MAX_SIDE))  # fmt: skip

    def mask_mod(b, h, q_idx, kv_idx):
        q_row, q_col = _pixel(q_idx, width, tile)
        k_row, k_col = _pixel(kv_idx, width, tile)
        rows = neighbourhood(q_row, k_row, height, kernel[0])
        return rows & neighbourhood(q_col, k_col, width, kernel[1])

    tiled = "" if tile is None else f"_tiles_{tile[0]}x{tile[1]}"
    return named(mask_mod, f"natten_{width}_wide_kernel_{kernel[0]}x{kernel[1]}{tiled}")


def token_tiled_natten(tiles_across: int, tile_height: int, tile_width: int,
                       kernel_height: int, kernel_width: int, *,
                       height: int = MAX_TOKENS) -> MaskMod:  # fmt: skip
    """NATTEN on a canvas whose tokens are ordered tile by tile (see the module docstring).

    >>> import torch
    >>> natten = token_tiled_natten(2, 2, 2, 3, 3, height=4)
    >>> import torch
    >>> natten(0, 0, torch.tensor([0, 0]), torch.tensor([3, 5])).tolist()
    [True, False]
    """
    width, tile = _tiles(tiles_across, tile_height, tile_width)
    return token_natten(width, kernel_height, kernel_width, height=height, tile=tile)


def token_sliding_tiles(tiles_across: int, tile_height: int, tile_width: int,
                        window_tiles_h: int, window_tiles_w: int, *,
                        height: int = MAX_TOKENS) -> MaskMod:  # fmt: skip
    """Sliding-tile attention: tokens ordered tile by tile; each tile attends the
    ``window_tiles_h x window_tiles_w`` tiles around it, the window kept inside the canvas.

    >>> import torch
    >>> sta = token_sliding_tiles(2, 2, 2, 1, 3, height=4)
    >>> import torch
    >>> sta(0, 0, torch.tensor([0, 0]), torch.tensor([7, 8])).tolist()
    [True, False]
    """
    width, tile = _tiles(tiles_across, tile_height, tile_width)
    windows = (check_int("window_tiles_h", window_tiles_h, low=1, high=MAX_SIDE),
               check_int("window_tiles_w", window_tiles_w, low=1, high=MAX_SIDE))  # fmt: skip
    per_tile, across = tile[0] * tile[1], width // tile[1]
    down = -(-check_int("height", height, low=1) // tile[0])

    def mask_mod(b, h, q_idx, kv_idx):
        q_tile, k_tile = q_idx // per_tile, kv_idx // per_tile
        rows = neighbourhood(q_tile // across, k_tile // across, down, windows[0])
        return rows & neighbourhood(q_tile % across, k_tile % across, across, windows[1])

    return named(mask_mod, f"sliding_tiles_{width}_wide_{tile[0]}x{tile[1]}_window_"
                           f"{windows[0]}x{windows[1]}")  # fmt: skip


def _canvas(factory):
    """A rule maker giving ``factory`` the canvas height the keys need."""

    def rule(values, seq_q, seq_k):
        width = values.get("width") or values["tiles_across"] * values["tile_width"]
        return factory(**values, height=-(-seq_k // width))

    return rule


_WIDTH = _side("width", 16, "canvas width in tokens (pixels per row)")
_TILE = (
    _side("tiles_across", 4, "tiles in a canvas row (its width: tiles_across x tile_width)"),
    _side("tile_height", 4, "rows of a tile"),
    _side("tile_width", 4, "columns of a tile"),
)
_KERNEL = (_side("kernel_height", 7, "window rows"), _side("kernel_width", 7, "window columns"))


def _spec(name, label, rule, params, factory, order):
    spec = token_spec(name, label, rule, params, factory, order=order)
    object.__setattr__(spec, "rule", _canvas(factory))
    return spec


SPECS = (
    _spec("token_natten", "NATTEN 2-D", "|row(q) - row(k)| and |col(q) - col(k)| within the "
          "kernel, its window kept inside the canvas", (_WIDTH, *_KERNEL), token_natten, 370),
    _spec("token_tiled_natten", "tiled NATTEN 2-D", "NATTEN, tokens ordered tile by tile",
          (*_TILE, *_KERNEL), token_tiled_natten, 380),
    _spec("token_sliding_tiles", "sliding tiles 2-D", "tiles within window_tiles of the "
          "query's tile, tokens ordered tile by tile",
          (*_TILE, _side("window_tiles_h", 3, "window rows, in tiles"),
           _side("window_tiles_w", 3, "window columns, in tiles")), token_sliding_tiles, 390),
)  # fmt: skip
