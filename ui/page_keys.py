"""Undo and redo from the keyboard on every tab: an element of the page with nothing to show.

On the Paint tab the canvas takes Ctrl+Z (Cmd+Z), Ctrl+Shift+Z and Ctrl+Y itself, in order with
its strokes; on every other tab this element does, anywhere on the page but in a text box (whose
own undo stays the browser's). Its JavaScript numbers each key press and sends every step not yet
done as the canvas sends its undo and redo strokes, so ``canvas.apply`` does each step exactly
once however fast the keys come, under its own count of steps done.
"""

from __future__ import annotations

import functools
from pathlib import Path

import streamlit as st

from designer.storage import DesignStore
from ui import keys, state
from ui.canvas import KEYS_JS
from ui.canvas.apply import apply_trigger

#: The trigger carrying the steps not yet done.
STEPS_TRIGGER = "steps"

_component = st.components.v2.component(
    "blocksparse_designer.page_keys",
    js="\n".join(
        path.read_text(encoding="utf-8") for path in (KEYS_JS, Path(__file__).with_suffix(".js"))
    ),
)


def page_keys_ui(store: DesignStore, *, canvas_open: bool) -> None:
    """The page's undo and redo keys; ``canvas_open``: the paint canvas is on the page and takes
    them itself."""
    client, done = state.box(st.session_state).last_done(keys.PAGE_KEYS_DONE)
    _component(
        key=keys.PAGE_KEYS,
        data={"canvas": canvas_open, "client": client, "done": done},
        on_steps_change=functools.partial(_on_steps, store),
    )


def _on_steps(store: DesignStore) -> None:
    """Do the steps just sent (each once, in order), then the page reruns."""
    value = st.session_state.get(keys.PAGE_KEYS)
    steps = value.get(STEPS_TRIGGER) if value is not None else None
    if steps is not None:
        apply_trigger(st.session_state, steps, store, done_key=keys.PAGE_KEYS_DONE,
                      place=keys.UNDO_PLACE)  # fmt: skip
