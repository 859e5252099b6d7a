"""The paint editor: one head at a time, coloured by tile width, painted by selecting blocks.

A fragment, so switching head or tool reruns only this panel. A selection (click, box or lasso
on the chart) applies the chosen action at once, then the whole page reruns so the overview and
the figures follow, and the chart comes back with nothing selected.
"""

from __future__ import annotations

import functools

import numpy as np
import streamlit as st

from designer.design import Design
from designer.edit import ACTIONS, Band, CopyHead, EditOp
from designer.ui import changes, keys, state
from designer.ui.analysis import Analysis
from designer.ui.common import change_design, current_analysis, show_message
from designer.ui.figures import EDITOR_CONFIG, editor_figure, legend_html
from designer.ui.overview_ui import legend_entries
from designer.ui.pictures import max_pool, scale_factors, tile_pictures
from designer.ui.selection import (
    BRUSHES,
    MarkerGrid,
    expand_brush,
    mask_region,
    selected_blocks,
)
from designer.ui.storage import DesignStore

#: Heads larger than this many blocks a side are drawn shrunk (selection stays exact).
MAX_EDITOR_PX = 1024
SCOPES = ("this head", "chosen heads", "all heads")
DEFAULTS = {
    keys.EDIT_HEAD: 0,
    keys.EDIT_ACTION: "set",
    keys.EDIT_BRUSH: "blocks",
    keys.EDIT_SCOPE: "this head",
    keys.EDIT_HEADS: [],
    keys.BAND_LOW: 0,
    keys.BAND_HIGH: 0,
    keys.COPY_TARGETS: [],
}


@st.fragment
def editor_ui(store: DesignStore) -> None:
    """Draw the editor for the current design."""
    session = st.session_state
    current = state.design(session)
    layout = current.layout
    state.fill_defaults(session, DEFAULTS)
    if session[keys.EDIT_HEAD] >= layout.n_heads:
        session[keys.EDIT_HEAD] = 0
    canvas, tools = st.columns([3, 1])
    with tools:
        head = _tools_ui(store, layout.n_heads)
    with canvas:
        digest, analysis = current_analysis()
        grid = MarkerGrid.for_shape(layout.n_q_blocks, layout.n_k_blocks)
        picture, blocks_per_pixel = _head_picture(digest, head, _analysis=analysis)
        figure = editor_figure(picture, grid, head, blocks_per_pixel=blocks_per_pixel)
        st.plotly_chart(
            figure,
            key=keys.editor_chart(session[keys.EDITOR_REVISION]),
            on_select=functools.partial(_on_select, store, grid),
            selection_mode=("points", "box", "lasso"),
            config=EDITOR_CONFIG,
        )
        hint = (
            "Drag a box (or pick the lasso in the chart's toolbar) and the action applies as "
            "soon as you let go. To paint by clicking, pick Pan or Zoom in the toolbar"
        )
        if grid.stride > 1:
            hint += f": a click paints {grid.stride}×{grid.stride} blocks (boxes stay exact)"
        st.caption(hint + ".")
        st.html(legend_html(legend_entries(analysis)))


def _tools_ui(store: DesignStore, n_heads: int) -> int:
    head = st.selectbox("Head", range(n_heads), key=keys.EDIT_HEAD)
    st.segmented_control("Action", ACTIONS, key=keys.EDIT_ACTION, required=True)
    st.segmented_control(
        "A selection paints", BRUSHES, key=keys.EDIT_BRUSH, required=True,
        help="The selected blocks, or the whole rows or columns they touch.",
    )  # fmt: skip
    scope = st.radio("Apply to", SCOPES, key=keys.EDIT_SCOPE, horizontal=True)
    if scope == "chosen heads":
        st.multiselect("Heads", range(n_heads), key=keys.EDIT_HEADS, placeholder="this head")
    show_message(keys.EDITOR_PLACE)
    with st.expander("Diagonal band"):
        low, high = st.columns(2)
        low.number_input("from offset", min_value=-(1 << 16), max_value=1 << 16, key=keys.BAND_LOW)
        high.number_input("to offset", min_value=-(1 << 16), max_value=1 << 16, key=keys.BAND_HIGH)
        st.caption("Offsets are col − row: 0 is the diagonal, −1 the one below it.")
        st.button("Apply to band", key="apply_band", on_click=_on_band, args=(store, n_heads))
    with st.expander("Copy this head"):
        others = [h for h in range(n_heads) if h != head]
        st.multiselect("to heads", others, key=keys.COPY_TARGETS)
        st.button("Copy", key="copy_head", on_click=_on_copy, args=(store,))
    return head


def target_heads(session: state.State, n_heads: int) -> tuple[int, ...] | None:
    """The heads an edit applies to, from the scope widgets (``None``: all heads)."""
    scope = session[keys.EDIT_SCOPE]
    if scope == "all heads":
        return None
    chosen = [h for h in session[keys.EDIT_HEADS] if h < n_heads] if scope == "chosen heads" else []
    return tuple(sorted(chosen)) or (session[keys.EDIT_HEAD],)


def _on_select(store: DesignStore, grid: MarkerGrid) -> None:
    session = st.session_state
    event = session[keys.editor_chart(session[keys.EDITOR_REVISION])]
    mask = selected_blocks(event["selection"], grid, session[keys.EDIT_HEAD])
    region = mask_region(expand_brush(mask, session[keys.EDIT_BRUSH]))
    if region is None:
        return

    def paint(current: Design) -> Design:
        heads = target_heads(session, current.layout.n_heads)
        return changes.edit(current, EditOp(session[keys.EDIT_ACTION], region, heads))

    change_design(store, keys.EDITOR_PLACE, paint)
    session[keys.EDITOR_REVISION] += 1
    st.rerun()


def _on_band(store: DesignStore, n_heads: int) -> None:
    session = st.session_state

    def paint(current: Design) -> Design:
        band = Band(session[keys.BAND_LOW], session[keys.BAND_HIGH])
        op = EditOp(session[keys.EDIT_ACTION], band, target_heads(session, n_heads))
        return changes.edit(current, op)

    change_design(store, keys.EDITOR_PLACE, paint)
    st.rerun()


def _on_copy(store: DesignStore) -> None:
    session = st.session_state
    targets = tuple(sorted(session[keys.COPY_TARGETS]))
    if not targets:
        state.say(session, keys.EDITOR_PLACE, "Pick the heads to copy this head to.")
        return
    op = CopyHead(session[keys.EDIT_HEAD], targets)
    change_design(store, keys.EDITOR_PLACE, lambda current: changes.edit(current, op))
    st.rerun()


@st.cache_data(max_entries=32, show_spinner=False)
def _head_picture(digest: str, head: int, *, _analysis: Analysis) -> tuple[np.ndarray, int]:
    """The head's tile picture, one pixel per block (or per group of blocks when very large)."""
    widths, odd = _analysis.widths[head], _analysis.odd[head]
    shrink, _ = scale_factors(max(widths.shape), MAX_EDITOR_PX)
    return tile_pictures(max_pool(widths, shrink), max_pool(odd, shrink)), shrink
