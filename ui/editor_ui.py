"""The paint editor: one head at a time on a canvas, coloured by tile width, painted by strokes.

The canvas draws each stroke as the pointer moves and queues it on release, numbered; it sends
its queue when Python is not busy with the last one, and ``canvas.apply`` does each new stroke
once, in order (one edit and one undo step each), in the page's rerun, so the statistics follow
and the canvas gets the head back with the number of the last stroke done. Not a fragment: a
stroke must rerun the whole page anyway, and a fragment would cost a second rerun. The tools
(brush, rectangle, lasso, row, column, band) live in the canvas itself; the action and the heads
an edit applies to are widgets beside it.
"""

from __future__ import annotations

import functools

import numpy as np
import streamlit as st

from designer import changes
from designer.analysis import HeadTiles, head_view
from designer.cache import head_keys
from designer.design import Design
from designer.edit import ACTIONS, Band, CopyHead, EditOp
from designer.layout import Layout
from designer.segment_runs import RunTileMaps
from designer.storage import DesignStore
from ui import keys, state
from ui.block_zoom_ui import block_zoom_ui, head_partials, partials_key
from ui.canvas import edit_value, head_value, paint_canvas, view_value
from ui.canvas.apply import apply_trigger
from ui.canvas.payload import head_payload
from ui.canvas.strokes import MAX_STROKES, bits_chars
from ui.canvas.viewport import View, read_view, whole_head, window_payload
from ui.common import analysis_offer, change_design, current_analysis, show_message
from ui.figures import legend_html
from ui.overview_ui import head_legend_entries, tile_legend

SCOPES = ("this head", "this and chosen heads", "all heads")
DEFAULTS = {
    keys.EDIT_HEAD: 0,
    keys.EDIT_ACTION: "set",
    keys.EDIT_SCOPE: "this head",
    keys.EDIT_HEADS: [],
    keys.BAND_LOW: 0,
    keys.BAND_HIGH: 0,
    keys.COPY_TARGETS: [],
}
HINT = (
    "Drag to paint; the tool and brush size stay until you change them. Anywhere on the page "
    "(not in a text box): B / M / L brush, rectangle, lasso · [ / ] previous, next head · "
    "Ctrl+Z / Ctrl+Shift+Z undo, redo. On the canvas also: R rectangle (elsewhere R is the "
    "page's rerun) · Esc cancel a stroke · wheel zoom · Space or middle button + drag pan."
)

#: What the canvas of a design held as runs adds to the hint.
WINDOW_HINT = (
    "This design is drawn by windows: zoomed out, each pixel shows the share of active blocks "
    "under it (darker: more), and the rectangle, row and column tools paint every block under "
    "the pixels they cover; the brush, lasso and band paint at one pixel a block or more "
    "(zoom in with the wheel)."
)


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
        show_message(keys.EDITOR_PLACE)
        analysis_key, found = current_analysis() if layout.runs is not None else ("", None)
        tiles = None if found is None else found.run_tiles
        client, done = state.box(session).last_done(keys.PAINT_DONE)
        heads = target_heads(session, layout.n_heads, head)
        data = {
            **_head_data(current, head, tiles),
            "head": head,
            "n_heads": layout.n_heads,
            "action": session[keys.EDIT_ACTION],
            "heads": None if heads is None else list(heads),
            "client": client,
            "done": done,
            "max_strokes": MAX_STROKES,
            "max_mask_chars": 2 * bits_chars(layout.n_q_blocks * layout.n_k_blocks),
        }
        paint_canvas(
            data, key=keys.PAINT_CANVAS, on_edit=functools.partial(_on_edit, store),
            on_head=_on_head, on_view=_on_view,
        )  # fmt: skip
        st.caption(HINT if layout.runs is None else f"{HINT} {WINDOW_HINT}")
        if layout.runs is not None and found is None:  # colours once the tiles are computed
            analysis_offer(analysis_key)
        partial = layout.partials is not None
        if layout.runs is None:
            legend = head_legend_entries(head_view(current, head), layout.block_size,
                                         partial=partial)  # fmt: skip
        elif tiles is not None:
            legend = tile_legend(tiles.head_tiles(head), int(tiles.active[head]),
                                 layout.block_size, partial=partial)  # fmt: skip
        else:
            legend = tile_legend([], 0, layout.block_size, partial=partial)
        st.html(legend_html(legend, f"Head {head}"))
    block_zoom_ui(current, head)


def _tools_ui(store: DesignStore, n_heads: int) -> int:
    head = st.selectbox("Head", range(n_heads), key=keys.EDIT_HEAD)
    st.segmented_control("Action", ACTIONS, key=keys.EDIT_ACTION, required=True)
    scope = st.radio("Apply to", SCOPES, key=keys.EDIT_SCOPE, horizontal=True)
    if scope == SCOPES[1]:
        others = [h for h in range(n_heads) if h != head]
        session = st.session_state  # the head shown is no option: it is always edited
        if head in session[keys.EDIT_HEADS]:
            session[keys.EDIT_HEADS] = [h for h in session[keys.EDIT_HEADS] if h != head]
        st.multiselect(
            "Also heads", others, key=keys.EDIT_HEADS, placeholder="this head only",
            help="The head on screen is always edited; these are edited with it.",
        )  # fmt: skip
    # An expander showing its error stays open (a rerun would otherwise draw it closed).
    band_error = state.message(st.session_state, keys.BAND_PLACE)
    with st.expander("Diagonal band", expanded=band_error is not None, key="band_expander"):
        low, high = st.columns(2)
        low.number_input("low", min_value=-(1 << 16), max_value=1 << 16, key=keys.BAND_LOW)
        high.number_input("high", min_value=-(1 << 16), max_value=1 << 16, key=keys.BAND_HIGH)
        st.caption(
            "Diagonals with low ≤ row − col ≤ high (query block − key block, as everywhere in the "
            "designer): 0 is the diagonal, 1 the one below it, −1 the one above."
        )
        st.button("Apply to band", key="apply_band", on_click=_on_band, args=(store, n_heads))
        show_message(keys.BAND_PLACE)
    copy_error = state.message(st.session_state, keys.COPY_PLACE)
    with st.expander("Copy this head", expanded=copy_error is not None, key="copy_expander"):
        others = [h for h in range(n_heads) if h != head]
        session = st.session_state  # the head shown is no option: it is always edited
        if head in session[keys.EDIT_HEADS]:
            session[keys.EDIT_HEADS] = [h for h in session[keys.EDIT_HEADS] if h != head]
        st.multiselect("to heads", others, key=keys.COPY_TARGETS)
        st.button("Copy", key="copy_head", on_click=_on_copy, args=(store,))
        show_message(keys.COPY_PLACE)
    return head


def target_heads(session: state.State, n_heads: int, head: int) -> tuple[int, ...] | None:
    """The heads an edit of ``head`` applies to, from the scope widgets (``None``: all heads):
    the head on screen always, so what is drawn on it stays there."""
    scope = session[keys.EDIT_SCOPE]
    if scope == SCOPES[2]:
        return None
    chosen = [h for h in session[keys.EDIT_HEADS] if h < n_heads] if scope == SCOPES[1] else []
    return tuple(sorted({head, *chosen}))


def _on_edit(store: DesignStore) -> None:
    """Do the canvas's new strokes (``canvas.apply``), then the page reruns."""
    value = edit_value(keys.PAINT_CANVAS)
    if value is not None:
        apply_trigger(st.session_state, value, store)


def _on_head() -> None:
    """The canvas asked for another head ([ or ]): show it, if the design has it."""
    session = st.session_state
    head = head_value(keys.PAINT_CANVAS)
    n_heads = state.design(session).layout.n_heads
    if isinstance(head, int) and not isinstance(head, bool) and 0 <= head < n_heads:
        session[keys.EDIT_HEAD] = head


def _on_band(store: DesignStore, n_heads: int) -> None:
    session = st.session_state

    def paint(current: Design) -> Design:
        band = Band(session[keys.BAND_LOW], session[keys.BAND_HIGH])
        heads = target_heads(session, n_heads, session[keys.EDIT_HEAD])
        return changes.edit(current, EditOp(session[keys.EDIT_ACTION], band, heads))

    change_design(store, keys.BAND_PLACE, paint)


def _on_copy(store: DesignStore) -> None:
    session = st.session_state
    targets = tuple(sorted(session[keys.COPY_TARGETS]))
    if not targets:
        state.say(session, keys.COPY_PLACE, "Pick the heads to copy this head to.")
        return
    op = CopyHead(session[keys.EDIT_HEAD], targets)
    change_design(store, keys.COPY_PLACE, lambda current: changes.edit(current, op))


def _on_view() -> None:
    """The canvas asked for another window of its head: keep it for the rerun's payload (a
    window that cannot be shown is ignored: the canvas keeps what it has)."""
    session = st.session_state
    layout = state.design(session).layout
    try:
        session[keys.PAINT_VIEW] = (layout.shape, *read_view(view_value(keys.PAINT_CANVAS),
                                                             layout.shape))  # fmt: skip
    except (ValueError, TypeError):
        return


def shown_view(session: state.State, layout: Layout, head: int) -> View:
    """The window of ``head`` the canvas asked for last, or the whole head (zoomed out)."""
    asked = session.get(keys.PAINT_VIEW)
    if asked is not None and asked[0] == layout.shape and asked[1] == head:
        return asked[2]
    return whole_head(layout.n_q_blocks, layout.n_k_blocks)


def _head_data(current: Design, head: int, tiles: RunTileMaps | None) -> dict:
    """The canvas payload of one head, from its segmentation cached by content; of a design
    held as runs, the window the canvas shows (``viewport``), coloured by ``tiles``."""
    if current.layout.runs is not None:
        view = shown_view(st.session_state, current.layout, head)
        layout = current.layout
        tiled_at = None if tiles is None else current.effective_start_width
        return _window_payload(head_keys(layout)[head], partials_key(layout, head), view,
                               tiled_at, _layout=layout, _head=head, _tiles=tiles)  # fmt: skip
    blocks = current.layout.blocks[head].numpy()
    tiles = head_view(current, head)  # untiled when segmenting it costs more than a page may
    partial, partial_key = head_partials(current.layout, head)
    return _head_payload(tiles.key, partial_key, current.effective_start_width, blocks, tiles,
                         partial)  # fmt: skip


@st.cache_data(max_entries=32, show_spinner=False)
def _head_payload(
    key: str, partial_key: str, start_width: int, _blocks: np.ndarray, _tiles: HeadTiles,
    _partial: np.ndarray | None,
) -> dict:  # fmt: skip
    """Cached by the head's content keys and start width (the arguments not hashed follow)."""
    return head_payload(_blocks, _tiles.widths, _tiles.odd, _partial)


@st.cache_data(max_entries=8, show_spinner=False)
def _window_payload(
    key: str, partial_key: str, view: View, start_width: int | None, *, _layout: Layout,
    _head: int, _tiles: RunTileMaps | None,
) -> dict:  # fmt: skip
    """Cached by the head's content keys, the window and the start width of its tiles (None:
    drawn untiled; the arguments not hashed follow)."""
    return window_payload(_layout, _head, view, _tiles)
