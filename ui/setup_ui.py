"""The sidebar's setup: name, sequence lengths, block size, heads, causal, segmentation width."""

from __future__ import annotations

import streamlit as st

from designer import changes
from designer.design import DEFAULT_TILE_TOKENS, MAX_NAME_CHARS
from designer.storage import DesignStore
from ui import keys, state
from ui.common import change_design, show_message

# The number boxes have no min/max: the browser would refuse an out-of-range number without a
# word. Every value reaches the callbacks, which check it and say what is allowed.

#: Block sizes offered (the current design's own is added when it is another one).
BLOCK_SIZES = (16, 32, 64, 128, 256)


def setup_ui(store: DesignStore) -> None:
    """Draw the setup widgets; each change rebuilds the design at once."""
    session = st.session_state
    current = state.design(session)
    st.text_input(
        "Design name", key=keys.NAME, on_change=_on_settings, args=(store,),
        max_chars=MAX_NAME_CHARS, help="Follows the pattern and length until you name it.",
    )  # fmt: skip
    fixed = current.recipe is None
    block = current.layout.block_size
    left, right = st.columns(2)
    left.number_input(
        "Query tokens",
        step=block,
        key=keys.SEQ_LEN_Q,
        on_change=_on_shape,
        args=(store, "q"),
        disabled=fixed,
        help="Sequence length of the queries, in tokens; the last block may be cut short.",
    )
    right.number_input(
        "Key tokens",
        step=block,
        key=keys.SEQ_LEN_K,
        on_change=_on_shape,
        args=(store, "k"),
        disabled=fixed,
        help="Sequence length of the keys: the same as the queries for self-attention; the last "
        "block may be cut short.",
    )
    left.selectbox(
        "Block size",
        sorted({*BLOCK_SIZES, block}),
        key=keys.BLOCK_SIZE,
        on_change=_on_shape,
        args=(store,),
        disabled=fixed,
        help="Tokens on each side of a block.",
    )
    right.number_input(
        "Heads",
        step=1,
        key=keys.N_HEADS,
        on_change=_on_shape,
        args=(store,),
        disabled=fixed,
    )
    if fixed:
        st.caption("Imported without a recipe: the shape is the file's. A pattern starts one.")
    show_message(keys.SETUP_PLACE)
    st.toggle(
        "Causal inside blocks",
        key=keys.CAUSAL,
        on_change=_on_settings,
        args=(store,),
        help="Attention also applies q ≥ k inside each block (the exports carry it).",
    )
    auto = st.toggle(
        f"Auto start width ({DEFAULT_TILE_TOKENS}-token tiles)",
        key=keys.AUTO_START_WIDTH,
        on_change=_on_settings,
        args=(store,),
        help="The widest tile the segmentation tries, in blocks.",
    )
    st.number_input(
        "Segmentation start width (blocks)",
        step=1,
        key=keys.START_WIDTH,
        on_change=_on_settings,
        args=(store,),
        disabled=auto,
        help="Tiles of w, w/2, …, 1 blocks are tried; 0 makes no tiles.",
    )
    show_message(keys.NAME)
    _model_shape_ui(store, current)


def _model_shape_ui(store: DesignStore, current) -> None:
    """The model the design is costed in: every FLOP and memory figure is at this shape."""
    shape = current.model_shape
    heads = shape.heads or current.layout.n_heads
    summary = f"batch {shape.batch} · {heads} heads"
    summary += f" ({shape.kv_heads} kv)" if shape.kv_heads else ""
    summary += f" · head dim {shape.head_dim}"
    with st.expander(f"Model: {summary}", icon=":material/memory:"):
        left, right = st.columns(2)
        common = {"step": 1, "on_change": _on_model_shape, "args": (store,)}
        left.number_input("Batch", key=keys.MODEL_BATCH, **common)
        right.number_input("Head dim", key=keys.MODEL_HEAD_DIM, **common)
        left.number_input(
            "Heads", key=keys.MODEL_HEADS, help="Query heads: the design's, or any number when "
            "the design has one head (it serves them all).", **common,
        )  # fmt: skip
        right.number_input(
            "KV heads", key=keys.MODEL_KV_HEADS, help="Key and value heads (fewer than the "
            "query heads: grouped-query attention); they divide the heads.", **common,
        )  # fmt: skip
        st.caption("Every FLOP and memory figure is at this shape; it is kept with the design.")
        show_message(keys.MODEL_PLACE)


def _on_model_shape(store: DesignStore) -> None:
    session = st.session_state
    change_design(
        store,
        keys.MODEL_PLACE,
        lambda current: changes.set_model_shape(
            current,
            batch=session[keys.MODEL_BATCH],
            heads=session[keys.MODEL_HEADS],
            kv_heads=session[keys.MODEL_KV_HEADS],
            head_dim=session[keys.MODEL_HEAD_DIM],
        ),
    )


def _on_shape(store: DesignStore, moved: str | None = None) -> None:
    """A new shape; ``moved`` names the length that changed ("q" or "k"): in a self-attention
    design whose patterns need it, the other length follows (``changes.follow_square``)."""
    session = st.session_state

    def reshape(current):
        shape = changes.Shape(
            session[keys.SEQ_LEN_Q],
            session[keys.SEQ_LEN_K],
            session[keys.BLOCK_SIZE],
            session[keys.N_HEADS],
        )
        shape, followed = changes.follow_square(current, shape, moved)
        session[keys.SEQ_LEN_Q], session[keys.SEQ_LEN_K] = shape.seq_len_q, shape.seq_len_k
        new, note = changes.reshape(current, shape)
        for said in (followed, note):
            if said:
                state.notice(session, ":material/straighten:", said)
        return new

    change_design(store, keys.SETUP_PLACE, reshape)


def _on_settings(store: DesignStore) -> None:
    session = st.session_state
    start_width = None if session[keys.AUTO_START_WIDTH] else session[keys.START_WIDTH]
    change_design(
        store,
        keys.NAME,
        lambda current: changes.settings(
            current,
            name=session[keys.NAME],
            causal=session[keys.CAUSAL],
            start_width=start_width,
        ),
    )
