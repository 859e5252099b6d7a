"""Model: a design for a whole model, one design per layer or group of layers.

Start one from the design on screen, give ranges of layers the design on screen or a library
design, open a layer's design to edit it, and download the model design file that
``gpu.hf.register_model_attention`` loads in one line. The model design a session is making is
autosaved beside its design (``DesignStore.autosave_model``), so a reload or a restart keeps it.
"""

from __future__ import annotations

from dataclasses import replace

import streamlit as st

from designer.costs import attention_costs
from designer.design import MAX_NAME_CHARS, Design
from designer.formats.exports import file_stem
from designer.formats.model_file import model_file_bytes, read_model_file
from designer.model_design import MAX_LAYERS, ModelDesign
from designer.storage import DesignStore, reason
from designer.units import flops_text
from ui import keys, state
from ui.files_ui import MAX_UPLOAD_MIB, shown_name
from ui.sessions import UNREAD
from ui.text import plain

#: Layers a new model design starts with (a 7B-class transformer's).
DEFAULT_LAYERS = 32
#: The choice of the design on screen among the sources of a layer range.
ON_SCREEN = "the design on screen"


def model_ui(store: DesignStore) -> None:
    """The model design being made, its layer groups, and how to change and use it."""
    session = st.session_state
    model = current_model(store)
    if model is None:
        _start_ui(store)
    else:
        _groups_ui(store, model)
        _assign_ui(store, model)
        _use_ui(model)
    _upload_ui(store)
    if text := state.message(session, keys.LAYERS_PLACE):
        st.error(plain(text), icon=":material/error:")


def current_model(store: DesignStore) -> ModelDesign | None:
    """The session's model design: kept in the session, read from its autosave once."""
    session = st.session_state
    held = state.box(session)
    if held.model is UNREAD:
        try:
            held.model = store.restore_model(held.session_id)
        except ValueError as error:
            held.model = None
            state.say(session, keys.LAYERS_PLACE, f"{error}; it was left as it is")
    return held.model


def _keep(store: DesignStore, model: ModelDesign | None, place: str = keys.LAYERS_PLACE) -> bool:
    """Make ``model`` the session's model design and autosave it; a failure is said."""
    session = st.session_state
    held = state.box(session)
    try:
        store.autosave_model(held.session_id, model)  # then kept with no session state between
    except ValueError as error:
        state.say(session, place, str(error))
        return False
    except OSError as error:
        state.say(session, place, f"Could not keep the model design: {reason(error)}")
        return False
    held.model = model
    state.say(session, place, None)
    return True


def _start_ui(store: DesignStore) -> None:
    st.info(
        "A model design gives each layer (or group of layers) its own design, in one file "
        "that gpu.hf loads in one line. Start one from the design on screen.",
        icon=":material/layers:",
    )
    st.session_state.setdefault(keys.LAYERS_COUNT, DEFAULT_LAYERS)
    left, right = st.columns([1, 2], vertical_alignment="bottom")
    left.number_input("Layers", min_value=1, max_value=MAX_LAYERS, key=keys.LAYERS_COUNT)
    right.button(
        "Start from the design on screen", icon=":material/add:", key="layers_start",
        on_click=_on_start, args=(store,),
    )  # fmt: skip


def _on_start(store: DesignStore) -> None:
    session = st.session_state
    current = state.design(session)
    name = f"{current.name} model"[:MAX_NAME_CHARS]
    try:
        model = ModelDesign.uniform(name, session[keys.LAYERS_COUNT], current)
    except (ValueError, TypeError) as error:
        state.say(session, keys.LAYERS_PLACE, str(error))
        return
    if _keep(store, model):
        session[keys.LAYERS_NAME] = model.name


def _groups_ui(store: DesignStore, model: ModelDesign) -> None:
    session = st.session_state
    session.setdefault(keys.LAYERS_NAME, model.name)
    session.setdefault(keys.LAYERS_COUNT, model.n_layers)
    name, layers, drop = st.columns([3, 1, 1], vertical_alignment="bottom")
    name.text_input(
        "Model design name", key=keys.LAYERS_NAME, max_chars=MAX_NAME_CHARS,
        on_change=_on_settings, args=(store,),
    )  # fmt: skip
    layers.number_input(
        "Layers", min_value=1, max_value=MAX_LAYERS, key=keys.LAYERS_COUNT,
        on_change=_on_settings, args=(store,),
    )  # fmt: skip
    drop.button(
        "Drop", icon=":material/delete:", key="layers_drop", on_click=_on_drop, args=(store,),
        help="Drop this model design (download it first to keep it).",
    )  # fmt: skip
    st.dataframe(
        [
            {
                "layers": group.label,
                "design": group.design.name,
                "blocks": f"{group.design.layout.n_heads} × {group.design.layout.n_q_blocks} × "
                f"{group.design.layout.n_k_blocks} of {group.design.layout.block_size}",
                "density": f"{group.design.layout.density:.2%}",
                "causal": group.design.causal,
                "FLOPs vs dense": f"{attention_costs(group.design).vs_dense:.2%}",
            }
            for group in model.groups
        ],
        hide_index=True,
        key="layers_table",
    )
    total = sum(
        attention_costs(g.design).flops * (g.last - g.first + 1) for g in model.groups
    )  # fmt: skip
    st.caption(
        f"{model.n_layers} layers, {len(model.designs)} distinct designs; attention FLOPs of "
        f"one forward pass through every layer, each at its design's model shape: "
        f"{flops_text(total)}."
    )
    labels = [group.label for group in model.groups]
    pick, open_it = st.columns([3, 1], vertical_alignment="bottom")
    pick.selectbox("Layer group", range(len(labels)), format_func=labels.__getitem__,
                   key=keys.LAYERS_GROUP)  # fmt: skip
    open_it.button(
        "Open its design", icon=":material/edit:", key="layers_open", on_click=_on_open,
        args=(store,), help="Make it the design on screen, to edit it, then assign it back.",
    )  # fmt: skip


def _on_drop(store: DesignStore) -> None:
    if _keep(store, None):
        for key in (keys.LAYERS_NAME, keys.LAYERS_COUNT):
            st.session_state.pop(key, None)


def _on_settings(store: DesignStore) -> None:
    session = st.session_state
    model = state.box(session).model
    try:
        changed = replace(model, name=session[keys.LAYERS_NAME].strip())
        changed = changed.with_layers(session[keys.LAYERS_COUNT])
    except (ValueError, TypeError) as error:
        state.say(session, keys.LAYERS_PLACE, str(error))
        return
    _keep(store, changed)


def _on_open(store: DesignStore) -> None:
    session = st.session_state
    model = state.box(session).model
    group = model.groups[min(session[keys.LAYERS_GROUP], len(model.groups) - 1)]
    state.replace_design(session, group.design, store)
    state.notice(
        session, ":material/edit:",
        f"Opened the design of {group.label}: edit it, then assign it back to those layers.",
    )  # fmt: skip


def _assign_ui(store: DesignStore, model: ModelDesign) -> None:
    session = st.session_state
    st.markdown("**Give layers a design**")
    for key, value in ((keys.LAYERS_FIRST, 0), (keys.LAYERS_LAST, model.n_layers - 1)):
        session[key] = min(session.get(key, value), model.n_layers - 1)
    first, last, source, button = st.columns([1, 1, 3, 1], vertical_alignment="bottom")
    first.number_input("From layer", min_value=0, max_value=model.n_layers - 1,
                       key=keys.LAYERS_FIRST)  # fmt: skip
    last.number_input("To layer", min_value=0, max_value=model.n_layers - 1,
                      key=keys.LAYERS_LAST)  # fmt: skip
    source.selectbox("Design", [ON_SCREEN, *store.names()], key=keys.LAYERS_SOURCE,
                     help="The design on screen as it is now, or a library design.")  # fmt: skip
    button.button("Assign", key="layers_assign", on_click=_on_assign, args=(store,), type="primary")


def _on_assign(store: DesignStore) -> None:
    session = st.session_state
    model = state.box(session).model
    source = session[keys.LAYERS_SOURCE]
    try:
        design: Design = state.design(session) if source == ON_SCREEN else store.load(source)
        if source != ON_SCREEN:
            design = replace(design, name=source)
        changed = model.assign(session[keys.LAYERS_FIRST], session[keys.LAYERS_LAST], design)
    except (ValueError, TypeError) as error:
        state.say(session, keys.LAYERS_PLACE, f"Could not assign: {error}")
        return
    _keep(store, changed)


def _use_ui(model: ModelDesign) -> None:
    name = f"{file_stem(model.name)}.model.pt"
    try:
        data = model_file_bytes(model)
    except ValueError as error:
        st.warning(f"The model design cannot be written: {error}", icon=":material/warning:")
        return
    st.download_button(
        "Download the model design", data=data, file_name=name,
        mime="application/octet-stream", icon=":material/download:", key="layers_download",
        on_click="ignore",
    )  # fmt: skip
    st.caption("In a Hugging Face model, each layer with its own design's plan:")
    st.code(
        "import gpu.hf\n"
        f'name = gpu.hf.register_model_attention("blocksparse", {name!r})\n'
        "model = AutoModelForCausalLM.from_pretrained(..., attn_implementation=name)",
        language="python",
    )


def _upload_ui(store: DesignStore) -> None:
    st.file_uploader(
        "Load a model design file", key=keys.LAYERS_UPLOAD, on_change=_on_upload, args=(store,),
        max_upload_size=MAX_UPLOAD_MIB, help="It replaces the model design being made here.",
    )  # fmt: skip


def _on_upload(store: DesignStore) -> None:
    session = st.session_state
    upload = session[keys.LAYERS_UPLOAD]
    if upload is None:
        return
    name = shown_name(upload.name)
    try:
        model = read_model_file(upload.getvalue())
    except ValueError as error:
        state.say(session, keys.LAYERS_PLACE, f"Could not load {name}: {error}")
        return
    if _keep(store, model):
        session[keys.LAYERS_NAME], session[keys.LAYERS_COUNT] = model.name, model.n_layers
        state.notice(
            session, ":material/layers:", f"Loaded the model design “{plain(model.name)}”."
        )
