"""The paint canvas: a Streamlit components-v2 element drawing one head on a ``<canvas>``.

Its JavaScript and CSS are plain files beside this module (package data, no build step, nothing
fetched from the network), read once at import. ``payload`` holds what Python sends the canvas,
``strokes`` what it sends back, ``apply`` what that does to the session.

What a component sends is JSON that Streamlit parses before any of our code sees it, and
Streamlit's parser lets ``RecursionError`` (5,000 nested lists) and ``ValueError`` (an integer of
more than 4,300 digits) escape, failing the whole rerun with a traceback. ``guard_component_json``
wraps that parser so such a value, or one longer than ``MAX_COMPONENT_JSON_CHARS``, reads as
nothing sent (the real canvas sends its strokes again; it never sends such a thing).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import streamlit as st
from streamlit.components.v2.bidi_component import serialization

_HERE = Path(__file__).parent
#: What the page's key handlers share (the canvas's and ``ui.page_keys``'): typing or not, undo
#: and redo keys, the page's sender id.
KEYS_JS = _HERE / "keys.js"
#: The canvas's JavaScript, joined in this order into the one module Streamlit loads: the keys'
#: shared helpers, the pure helpers, the outbox of strokes, the editor (state, strokes,
#: the default export), its toolbar and drawing, its input.
JS_FILES = (
    KEYS_JS,
    _HERE / "paint_cells.js",
    _HERE / "paint_outbox.js",
    _HERE / "paint_canvas.js",
    _HERE / "paint_view.js",
    _HERE / "paint_input.js",
)
#: The trigger the canvas fires with the strokes Python has not applied yet, and the one it
#: fires with the head to show next (the [ and ] keys).
EDIT_TRIGGER = "edit"
HEAD_TRIGGER = "head"
#: The trigger the canvas fires with the window it shows, for a head sent by windows
#: (``viewport``).
VIEW_TRIGGER = "view"
#: Longest JSON text a component may send: the canvas's largest trigger (two whole-grid masks of
#: a 4096 x 4096-block head, 64 strokes) is under 6 MB.
MAX_COMPONENT_JSON_CHARS = 16 << 20
_LOG = logging.getLogger(__name__)


def guard_component_json(parse: Callable[[str | None], Any]) -> Callable[[str | None], Any]:
    """``parse`` (Streamlit's JSON reader for component values), giving None for text too long
    or too deep to read, or holding too large an integer, instead of raising."""
    if getattr(parse, "guarded", False):
        return parse

    @functools.wraps(parse)
    def read(text: str | None) -> Any:
        if text is not None and len(text) > MAX_COMPONENT_JSON_CHARS:
            _LOG.warning("ignored a component value of %s characters", f"{len(text):,}")
            return None
        try:
            return parse(text)
        except (RecursionError, ValueError) as error:
            _LOG.warning("ignored a component value that cannot be read: %.200s", error)
            return None

    read.guarded = True  # type: ignore[attr-defined]
    return read


serialization.handle_deserialize = guard_component_json(serialization.handle_deserialize)

_component = st.components.v2.component(
    "blocksparse_designer.paint_canvas",
    js="\n".join(path.read_text(encoding="utf-8") for path in JS_FILES),
    css=(_HERE / "paint_canvas.css").read_text(encoding="utf-8"),
)


def paint_canvas(
    data: dict[str, Any],
    *,
    key: str,
    on_edit: Callable[[], None],
    on_head: Callable[[], None],
    on_view: Callable[[], None],
) -> None:
    """Draw the canvas for ``data`` (``payload.head_payload`` plus the head, the number of
    heads, the action, the heads a stroke applies to, the canvas and stroke last done and the
    trigger's limits); ``on_edit`` runs when strokes arrive, readable with ``edit_value(key)``,
    ``on_head`` when the canvas asks for another head, ``head_value(key)``, and ``on_view``
    when it asks for another window of the head, ``view_value(key)``."""
    _component(
        key=key, data=data, on_edit_change=on_edit, on_head_change=on_head,
        on_view_change=on_view,
    )  # fmt: skip


def edit_value(key: str) -> Any:
    """The strokes the canvas at ``key`` just sent (None when it sent none)."""
    value = st.session_state.get(key)
    return value.get(EDIT_TRIGGER) if value is not None else None


def head_value(key: str) -> Any:
    """The head the canvas at ``key`` just asked for (None when it asked for none)."""
    value = st.session_state.get(key)
    return value.get(HEAD_TRIGGER) if value is not None else None


def view_value(key: str) -> Any:
    """The window the canvas at ``key`` just asked for (None when it asked for none)."""
    value = st.session_state.get(key)
    return value.get(VIEW_TRIGGER) if value is not None else None
