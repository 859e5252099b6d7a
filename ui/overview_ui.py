"""The overview: every head as a small picture, coloured by tile width, with the legend."""

from __future__ import annotations

import numpy as np
import streamlit as st

from designer.analysis import Analysis, HeadTiles
from designer.cache import head_keys
from ui import keys, state
from ui.common import current_analysis
from ui.figures import legend_html, png_bytes
from ui.pictures import (
    ACTIVE_RGB,
    EMPTY_RGB,
    enlarge,
    frame,
    hex_colour,
    max_pool,
    plain_pictures,
    scale_factors,
    tile_pictures,
    width_colour,
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
    by_tiles = st.toggle(
        "Colour by tile width", value=True, key=keys.SHOW_TILES, disabled=analysis is None,
        help=None if analysis else "Once segmented (the button above)",
    )  # fmt: skip
    by_tiles = by_tiles and analysis is not None
    layout = current.layout
    scale = thumbnail_scale(max(layout.n_q_blocks, layout.n_k_blocks))
    heads = analysis.heads if analysis else [None] * layout.n_heads
    pictures = [
        _head_png(name, by_tiles, scale, _head=head, _blocks=blocks)
        for blocks, head, name in zip(layout.to_numpy(), heads, head_keys(layout), strict=True)
    ]
    cells = layout.n_q_blocks * layout.n_k_blocks
    active = [s.active_blocks for s in layout.head_stats()]
    captions = [f"head {h} · {count / cells:.1%}" for h, count in enumerate(active)]
    # PNG as drawn: "auto" would re-encode RGB pictures as JPEG on every run (slow and blurry)
    st.image(pictures, caption=captions, width="content", output_format="PNG")
    if by_tiles:
        st.html(legend_html(legend_entries(analysis)))
    else:
        st.html(
            legend_html(
                [(hex_colour(EMPTY_RGB), "inactive"), (hex_colour(ACTIVE_RGB), "active block")]
            )
        )


def thumbnail_scale(long_side: int) -> tuple[int, int]:
    """``(shrink, grow)`` of a thumbnail whose grid's long side is ``long_side`` blocks.

    >>> [thumbnail_scale(n) for n in (16, 160, 4096)]
    [(1, 8), (1, 1), (24, 1)]
    """
    return scale_factors(long_side, min(max(THUMBNAIL_PX, long_side), MAX_THUMBNAIL_PX))


def legend_entries(analysis: Analysis | None) -> list[tuple[str, str]]:
    """One legend entry per tile width present over all heads (colour and a label with its
    counts), then active blocks that no tile covers, if any, and inactive blocks (before
    segmentation: active and inactive blocks)."""
    if analysis is None:
        return [
            (hex_colour(ACTIVE_RGB), "active block (not segmented yet)"),
            (hex_colour(EMPTY_RGB), "inactive"),
        ]
    stats = analysis.stats
    counts = [(row.width, row.tiles) for row in stats.widths]
    return tile_legend(counts, stats.active_blocks, stats.block_size)


def head_legend_entries(head: HeadTiles, block_size: int) -> list[tuple[str, str]]:
    """The legend of one head: its own tiles, as the paint canvas shows it."""
    return tile_legend(list(head.tiles), head.active, block_size)


def tile_legend(
    counts: list[tuple[int, int]], active: int, block_size: int
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
    return [*entries, (hex_colour(EMPTY_RGB), "inactive")]


@st.cache_data(max_entries=256, show_spinner=False)
def _head_png(
    key: str,
    by_tiles: bool,
    scale: tuple[int, int],
    *,
    _head: HeadTiles | None,
    _blocks: np.ndarray,
) -> bytes:
    """One head's thumbnail, cached by its content: an edit redraws only the heads it changed."""
    shrink, grow = scale
    if by_tiles:
        image = tile_pictures(max_pool(_head.widths, shrink), max_pool(_head.odd, shrink))
    else:
        image = plain_pictures(max_pool(_blocks, shrink))
    return png_bytes(frame(enlarge(image, grow)))
