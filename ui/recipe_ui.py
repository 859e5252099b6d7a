"""The pattern steps of the recipe: one card per step, its parameters drawn from the specs.

Step 1 usually sets every head; later steps can replace some heads with another pattern
(per-head patterns) or combine with what is there (union, intersect, subtract). Every widget
change rebuilds the layout at once; a parameter that does not fit shows its message in the card.
"""

from __future__ import annotations

import random

import streamlit as st

from designer import changes
from designer.patterns.registry import PATTERNS, ParamSpec
from designer.recipe import COMBINES, RecipeStep
from designer.storage import DesignStore
from ui import keys, state
from ui.common import change_design, show_message
from ui.params import (
    MAX_LIST_CHARS,
    list_text,
    number_bounds,
    step_from_widgets,
    step_widget_values,
)

#: Patterns in menu order: block-level generators first, then the token catalogue, then
#: DeepSpeed's configs.
_FAMILY_ORDER = {"generator": 0, "token": 1, "deepspeed": 2}
PATTERN_ORDER = sorted(PATTERNS, key=lambda name: _FAMILY_ORDER[PATTERNS[name].family])
COMBINE_LABELS = {"replace": "replace", "union": "∪ union", "intersect": "∩ intersect",
                  "subtract": "− subtract"}  # fmt: skip
#: Seeds drawn by the re-roll button (well inside what a browser number field holds).
SEED_RANGE = 1 << 31


def recipe_ui(store: DesignStore) -> None:
    """Draw one card per recipe step and the button that adds a step."""
    current = state.design(st.session_state)
    if current.recipe is None:
        st.info(
            "This layout was imported without a recipe. Adding a pattern starts a recipe at its "
            "shape and replaces the imported blocks (undo brings them back).",
            icon="ℹ️",
        )
    steps = current.recipe.steps if current.recipe else ()
    for index, step in enumerate(steps):
        _step_ui(store, index, step, current.layout.n_heads)
    if edits := (current.recipe.edits if current.recipe else ()):
        note, drop = st.columns([3, 1], vertical_alignment="center")
        note.caption(
            f"{len(edits)} manual edit{'s' if len(edits) > 1 else ''} from the Paint tab "
            "replayed after these patterns."
        )
        drop.button(
            "Drop edits", key=keys.DROP_EDITS, on_click=_on_drop_edits, args=(store,),
            help="Rebuild from the patterns alone (undo brings the edits back).",
        )  # fmt: skip
        show_message(keys.EDITS_PLACE)
    st.button(
        "Add a pattern step",
        icon=":material/add:",
        on_click=_on_add,
        args=(store, len(steps)),
        key=keys.ADD_STEP,
    )


def _step_ui(store: DesignStore, index: int, step: RecipeStep, n_heads: int) -> None:
    session = st.session_state
    # A pattern picked in the widget but refused by the design still needs its widgets' values.
    picked = session.get(keys.step_key(index, "pattern"), step.pattern)
    state.fill_defaults(session, step_widget_values(index, RecipeStep(picked)))
    spec = PATTERNS[picked]
    with st.container(border=True):
        top = st.columns([6, 1], vertical_alignment="bottom")
        top[0].selectbox(
            f"Step {index + 1}: pattern",
            PATTERN_ORDER,
            format_func=lambda name: PATTERNS[name].label,
            key=keys.step_key(index, "pattern"),
            on_change=_on_pattern,
            args=(store, index),
        )
        top[1].button(
            "",
            icon=":material/delete:",
            key=keys.step_key(index, "remove"),
            on_click=_on_remove,
            args=(store, index),
            help="Remove this step",
        )
        st.caption(spec.description)
        combine, heads = st.columns([2, 3])
        combine.selectbox(
            "Combine",
            COMBINES,
            format_func=COMBINE_LABELS.get,
            key=keys.step_key(index, "combine"),
            on_change=_on_step,
            args=(store, index),
            help="How this step meets what earlier steps made in its heads.",
        )
        heads.multiselect(
            "Heads",
            list(range(n_heads)),
            key=keys.step_key(index, "heads"),
            on_change=_on_step,
            args=(store, index),
            placeholder="all heads",
            help="Leave empty for every head; pick heads to give them their own pattern.",
        )
        _params_ui(store, index, spec.params)
        show_message(keys.step_place(index))


def _params_ui(store: DesignStore, index: int, params: tuple[ParamSpec, ...]) -> None:
    session = st.session_state
    columns = st.columns(2)
    for i, param in enumerate(params):
        key = keys.step_key(index, param.name)
        varies = param.per_head and session.get(keys.per_head_key(index, param.name), False)
        common = {"key": key, "on_change": _on_step, "args": (store, index), "help": param.help}
        with columns[i % 2]:
            if param.kind == "bool":
                st.toggle(param.name, disabled=varies, **common)
            elif param.kind == "choice":
                st.selectbox(param.name, param.choices, disabled=varies, **common)
            elif param.kind == "int_list":
                st.text_input(
                    param.name, placeholder="e.g. 0, 4, 8", max_chars=MAX_LIST_CHARS, **common
                )
            else:
                low, high = number_bounds(param)
                step = 1 if param.kind == "int" else 0.01
                st.number_input(
                    param.name, min_value=low, max_value=high, step=step, disabled=varies, **common
                )
            if param.name == "seed" and not varies:
                st.button(
                    "New seed",
                    icon=":material/casino:",
                    key=keys.step_key(index, "reroll"),
                    on_click=_on_reroll,
                    args=(store, index),
                )
    per_head = [param for param in params if param.per_head]
    if per_head:
        with st.expander("Vary per head"):
            for param in per_head:
                left, right = st.columns([1, 3], vertical_alignment="bottom")
                left.toggle(
                    param.name,
                    key=keys.per_head_key(index, param.name),
                    on_change=_on_per_head,
                    args=(store, index, param.name),
                )
                right.text_input(
                    f"{param.name}, one value per head of this step",
                    key=keys.values_key(index, param.name),
                    on_change=_on_step,
                    args=(store, index),
                    placeholder="e.g. 2, 4, 8, 16",
                    max_chars=MAX_LIST_CHARS,
                    label_visibility="collapsed",
                    disabled=not session.get(keys.per_head_key(index, param.name), False),
                )


def _on_step(store: DesignStore, index: int) -> None:
    def make(current):
        return changes.set_step(current, index, step_from_widgets(index, st.session_state))

    change_design(store, keys.step_place(index), make)


def _on_per_head(store: DesignStore, index: int, name: str) -> None:
    """Turning "per head" on starts from the current value, once for each head of the step."""
    session = st.session_state
    values = keys.values_key(index, name)
    if session[keys.per_head_key(index, name)] and not session.get(values, "").strip():
        heads = session[keys.step_key(index, "heads")]
        count = len(heads) if heads else state.design(session).layout.n_heads
        session[values] = list_text([session[keys.step_key(index, name)]] * count)
    _on_step(store, index)


def _on_pattern(store: DesignStore, index: int) -> None:
    session = st.session_state
    layout = state.design(session).layout
    step = changes.fitted_step(
        session[keys.step_key(index, "pattern")],
        layout.n_q_blocks,
        seq_q=layout.seq_len_q,
        heads=tuple(session[keys.step_key(index, "heads")]) or None,
        combine=session[keys.step_key(index, "combine")],
    )
    change_design(
        store,
        keys.step_place(index),
        lambda current: changes.set_step(current, index, step),
        sync=True,
    )


def _on_reroll(store: DesignStore, index: int) -> None:
    st.session_state[keys.step_key(index, "seed")] = random.randrange(SEED_RANGE)
    _on_step(store, index)


def _on_add(store: DesignStore, index: int) -> None:
    pattern = "sliding_window" if index == 0 else "global_tokens"
    step = RecipeStep(pattern, combine="replace" if index == 0 else "union")
    change_design(
        store,
        keys.step_place(index),
        lambda current: changes.set_step(current, index, step),
        sync=True,
    )


def _on_drop_edits(store: DesignStore) -> None:
    change_design(store, keys.EDITS_PLACE, changes.drop_edits)


def _on_remove(store: DesignStore, index: int) -> None:
    change_design(
        store,
        keys.step_place(index),
        lambda current: changes.remove_step(current, index),
        sync=True,
    )
