"""The overview: every head as a small picture, coloured by tile width, with the legend."""

from __future__ import annotations

import numpy as np
import streamlit as st

from designer.analysis import Analysis, HeadTiles
from designer.cache import head_keys
from designer.layout import Layout
from designer.runs_view import window_density
from ui import keys, state
from ui.block_zoom_ui import head_partials, window_partials
from ui.common import current_analysis
from ui.figures import legend_html, png_bytes
from ui.pictures import (
    ACTIVE_RGB,
    EMPTY_RGB,
    PARTIAL_RGB,
    enlarge,
    frame,
    hex_colour,
    max_pool,
    plain_pictures,
    scale_factors,
    tile_pictures,
    width_colour,
    with_partials,
)

#: Thumbnails aim at this many pixels a side, one pixel per block up to ``MAX_THUMBNAIL_PX``
#: (larger grids are max-pooled, so active blocks stay visible): four fit side by side in the
#: half-page column, so 16 heads are four rows whatever the grid.
THUMBNAIL_PX = 128
MAX_THUMBNAIL_PX = 176


def overview_ui() -> None:
    """Draw every head of the current design, and the tile-width legend."""
    current = state.design(st.session_state)
    _, analysis = current_analysis()
    tiled = analysis is not None and bool(analysis.heads)  # a design held as runs has no maps
    by_tiles = st.toggle(
        "Colour by tile width", value=True, key=keys.SHOW_TILES, disabled=not tiled,
        help=None if tiled else "Once segmented (the button above); a design past the dense "
        "grid's size is drawn by its blocks",
    )  # fmt: skip
    by_tiles = by_tiles and tiled
    layout = current.layout
    scale = thumbnail_scale(max(layout.n_q_blocks, layout.n_k_blocks))
    if layout.runs is not None:  # held as runs: each head pooled from its runs, no tile maps
        by_tiles = False
        pictures = [
            _runs_head_png(name, scale, _layout=layout, _head=h)
            for h, name in enumerate(head_keys(layout))
        ]
    else:
        heads = analysis.heads if analysis else [None] * layout.n_heads
        partials = [head_partials(layout, h) for h in range(layout.n_heads)]
        pictures = [
            _head_png(
                name, partial[1], by_tiles, scale, _head=head, _blocks=blocks, _partial=partial[0]
            )
            for blocks, head, name, partial in zip(
                layout.to_numpy(), heads, head_keys(layout), partials, strict=True
            )
        ]
    cells = layout.n_q_blocks * layout.n_k_blocks
    active = [s.active_blocks for s in layout.head_stats()]
    captions = [f"head {h} · {count / cells:.1%}" for h, count in enumerate(active)]
    # PNG as drawn: "auto" would re-encode RGB pictures as JPEG on every run (slow and blurry)
    st.image(pictures, caption=captions, width="content", output_format="PNG")
    partial = layout.partials is not None
    if by_tiles:
        st.html(legend_html(legend_entries(analysis, partial=partial)))
    else:
        entries = [(hex_colour(EMPTY_RGB), "inactive"), (hex_colour(ACTIVE_RGB), "active block")]
        if partial:
            entries.append((hex_colour(PARTIAL_RGB), "partial block (a token mask inside)"))
        st.html(legend_html(entries))


def thumbnail_scale(long_side: int) -> tuple[int, int]:
    """``(shrink, grow)`` of a thumbnail whose grid's long side is ``long_side`` blocks.

    >>> [thumbnail_scale(n) for n in (16, 160, 4096)]
    [(1, 8), (1, 1), (24, 1)]
    """
    return scale_factors(long_side, min(max(THUMBNAIL_PX, long_side), MAX_THUMBNAIL_PX))


def legend_entries(analysis: Analysis | None, *, partial: bool = False) -> list[tuple[str, str]]:
    """One legend entry per tile width present over all heads (colour and a label with its
    counts), then active blocks that no tile covers, if any, partial blocks when there are
    (``partial``), and inactive blocks (before segmentation: active and inactive blocks)."""
    if analysis is None:
        return [
            (hex_colour(ACTIVE_RGB), "active block (not segmented yet)"),
            *_partial_entry(partial),
            (hex_colour(EMPTY_RGB), "inactive"),
        ]
    stats = analysis.stats
    counts = [(row.width, row.tiles) for row in stats.widths]
    return tile_legend(counts, stats.active_blocks, stats.block_size, partial=partial)


def head_legend_entries(
    head: HeadTiles, block_size: int, *, partial: bool = False
) -> list[tuple[str, str]]:
    """The legend of one head: its own tiles, as the paint canvas shows it."""
    return tile_legend(list(head.tiles), head.active, block_size, partial=partial)


def tile_legend(
    counts: list[tuple[int, int]], active: int, block_size: int, *, partial: bool = False
) -> list[tuple[str, str]]:
    """Entries for ``(width, tiles)`` counts over ``active`` blocks, then the untiled blocks,
    then the inactive ones."""
    entries = [
        (
            width_colour(width),
            f"{width}×{width} ({width * block_size} tokens): {tiles:,} tiles, "
            f"{tiles * width * width / active:.0%} of blocks",
        )
        for width, tiles in counts
    ]
    if untiled := active - sum(tiles * width * width for width, tiles in counts):
        entries.append((hex_colour(ACTIVE_RGB), f"active, in no tile: {untiled:,} blocks"))
    return [*entries, *_partial_entry(partial), (hex_colour(EMPTY_RGB), "inactive")]


def _partial_entry(partial: bool) -> list[tuple[str, str]]:
    """The legend's entry for partial blocks, when the design has any."""
    if not partial:
        return []
    return [(hex_colour(PARTIAL_RGB), "partial block (lighter, hatched: a token mask inside)")]


@st.cache_data(max_entries=256, show_spinner=False)
def _head_png(
    key: str,
    partial_key: str,
    by_tiles: bool,
    scale: tuple[int, int],
    *,
    _head: HeadTiles | None,
    _blocks: np.ndarray,
    _partial: np.ndarray | None,
) -> bytes:
    """One head's thumbnail, cached by its content (blocks and partial blocks): an edit
    redraws only the heads it changed."""
    shrink, grow = scale
    if by_tiles:
        image = tile_pictures(max_pool(_head.widths, shrink), max_pool(_head.odd, shrink))
    else:
        image = plain_pictures(max_pool(_blocks, shrink))
    image = enlarge(image, grow)
    if _partial is not None:  # a pixel covering any partial block shows it
        image = with_partials(image, max_pool(_partial, shrink), grow)
    return png_bytes(frame(image))


@st.cache_data(max_entries=256, show_spinner=False)
def _runs_head_png(key: str, scale: tuple[int, int], *, _layout: Layout, _head: int) -> bytes:
    """One head of a layout held as runs, max-pooled from its runs (``window_density``: a
    pixel is active when any block under it is), with its partial blocks; cached by content."""
    shrink, grow = scale
    m, n = _layout.n_q_blocks, _layout.n_k_blocks
    pooled = window_density(_layout.runs, _head, 0, 0, m, n, shrink) > 0
    image = enlarge(plain_pictures(pooled), grow)
    partial = window_partials(_layout, _head, 0, 0, m, n, shrink)
    if partial is not None:
        image = with_partials(image, partial, grow)
    return png_bytes(frame(image))
