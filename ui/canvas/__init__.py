"""The paint canvas: a Streamlit components-v2 element drawing one head on a ``<canvas>``.

Its JavaScript and CSS are plain files beside this module (package data, no build step, nothing
fetched from the network), read once at import. ``payload`` holds what Python and the canvas send
each other.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import streamlit as st

_HERE = Path(__file__).parent
#: The canvas's JavaScript, joined in this order into the one module Streamlit loads: the pure
#: helpers, the editor (state, strokes, the default export), its toolbar and drawing, its input.
JS_FILES = ("paint_cells.js", "paint_canvas.js", "paint_view.js", "paint_input.js")
#: The trigger the canvas fires with the strokes Python has not applied yet.
EDIT_TRIGGER = "edit"

_component = st.components.v2.component(
    "blocksparse_designer.paint_canvas",
    js="\n".join((_HERE / name).read_text(encoding="utf-8") for name in JS_FILES),
    css=(_HERE / "paint_canvas.css").read_text(encoding="utf-8"),
)


def paint_canvas(data: dict[str, Any], *, key: str, on_edit: Callable[[], None]) -> None:
    """Draw the canvas for ``data`` (``payload.head_payload`` plus ``head``, ``action`` and
    ``applied``); ``on_edit`` runs when strokes arrive, readable with ``edit_value(key)``."""
    _component(key=key, data=data, on_edit_change=on_edit)


def edit_value(key: str) -> Any:
    """The strokes the canvas at ``key`` just sent (None when it sent none)."""
    value = st.session_state.get(key)
    return value.get(EDIT_TRIGGER) if value is not None else None
