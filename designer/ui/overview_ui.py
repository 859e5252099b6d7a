"""The overview: every head as a small picture, coloured by tile width, with the legend."""

from __future__ import annotations

import streamlit as st

from designer.design import Design
from designer.ui import keys, state
from designer.ui.analysis import Analysis
from designer.ui.common import current_analysis
from designer.ui.figures import legend_html, png_bytes
from designer.ui.pictures import (
    ACTIVE_RGB,
    EMPTY_RGB,
    enlarge,
    frame,
    max_pool,
    plain_pictures,
    scale_factors,
    tile_pictures,
    width_colour,
)

#: Thumbnails aim at this many pixels a side, but never show fewer pixels than blocks below 512.
THUMBNAIL_PX = 128
MAX_UNSHRUNK_PX = 512


def overview_ui() -> None:
    """Draw every head of the current design, and the tile-width legend."""
    current = state.design(st.session_state)
    digest, analysis = current_analysis()
    by_tiles = st.toggle("Colour by tile width", value=True, key=keys.SHOW_TILES)
    pictures = _head_pngs(digest, by_tiles, _design=current, _analysis=analysis)
    stats = current.layout.head_stats()
    captions = [f"head {s.head} · {s.density:.1%}" for s in stats]
    st.image(pictures, caption=captions, width="content")
    if by_tiles:
        st.html(legend_html(legend_entries(analysis)))
    else:
        st.html(legend_html([(_hex(EMPTY_RGB), "inactive"), (_hex(ACTIVE_RGB), "active block")]))


def legend_entries(analysis: Analysis) -> list[tuple[str, str]]:
    """One legend entry per tile width present: colour and a label with its counts."""
    return [
        (
            width_colour(row.width),
            f"{row.width}×{row.width} ({row.tile_tokens} tokens): {row.tiles:,} tiles, "
            f"{row.coverage:.0%} of blocks",
        )
        for row in analysis.stats.widths
    ] + [(_hex(EMPTY_RGB), "inactive")]


@st.cache_data(max_entries=16, show_spinner=False)
def _head_pngs(digest: str, by_tiles: bool, *, _design: Design, _analysis: Analysis) -> list[bytes]:
    layout = _design.layout
    long_side = max(layout.n_q_blocks, layout.n_k_blocks)
    shrink, grow = scale_factors(long_side, max(THUMBNAIL_PX, min(long_side, MAX_UNSHRUNK_PX)))
    if by_tiles:
        images = tile_pictures(max_pool(_analysis.widths, shrink), max_pool(_analysis.odd, shrink))
    else:
        images = plain_pictures(max_pool(layout.to_numpy(), shrink))
    return [png_bytes(frame(enlarge(image, grow))) for image in images]


def _hex(rgb: tuple[int, int, int]) -> str:
    return "#" + "".join(f"{c:02x}" for c in rgb)
