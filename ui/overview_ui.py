"""The overview: every head as a small picture, coloured by tile width, with the legend."""

from __future__ import annotations

import numpy as np
import streamlit as st

from designer.analysis import Analysis, HeadTiles
from designer.cache import head_keys
from ui import keys, state
from ui.block_zoom_ui import head_partials
from ui.common import current_analysis
from ui.figures import legend_html, png_bytes
from ui.pictures import (
    ACTIVE_RGB,
    EMPTY_RGB,
    PARTIAL_RGB,
    enlarge,
    frame,
    max_pool,
    plain_pictures,
    scale_factors,
    tile_pictures,
    width_colour,
    with_partials,
)

#: Thumbnails aim at this many pixels a side, but never show fewer pixels than blocks below 512.
THUMBNAIL_PX = 128
MAX_UNSHRUNK_PX = 512


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
    long_side = max(layout.n_q_blocks, layout.n_k_blocks)
    scale = scale_factors(long_side, max(THUMBNAIL_PX, min(long_side, MAX_UNSHRUNK_PX)))
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
        entries = [(_hex(EMPTY_RGB), "inactive"), (_hex(ACTIVE_RGB), "active block")]
        if partial:
            entries.append((_hex(PARTIAL_RGB), "partial block (a token mask inside)"))
        st.html(legend_html(entries))


def legend_entries(analysis: Analysis | None, *, partial: bool = False) -> list[tuple[str, str]]:
    """One legend entry per tile width present (colour and a label with its counts), then
    active blocks that no tile covers, if any, partial blocks when there are (``partial``),
    and inactive blocks (before segmentation: active and inactive blocks)."""
    partial_entry = [(_hex(PARTIAL_RGB), "partial block (lighter, hatched: a token mask inside)")]
    partial_entry = partial_entry if partial else []
    if analysis is None:
        return [
            (_hex(ACTIVE_RGB), "active block (not segmented yet)"),
            *partial_entry,
            (_hex(EMPTY_RGB), "inactive"),
        ]
    stats = analysis.stats
    entries = [
        (
            width_colour(row.width),
            f"{row.width}×{row.width} ({row.tile_tokens} tokens): {row.tiles:,} tiles, "
            f"{row.coverage:.0%} of blocks",
        )
        for row in stats.widths
    ]
    if untiled := stats.active_blocks - stats.blocks:
        entries.append((_hex(ACTIVE_RGB), f"active, in no tile: {untiled:,} blocks"))
    return [*entries, *partial_entry, (_hex(EMPTY_RGB), "inactive")]


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


def _hex(rgb: tuple[int, int, int]) -> str:
    return "#" + "".join(f"{c:02x}" for c in rgb)
