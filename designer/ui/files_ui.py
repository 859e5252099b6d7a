"""Files: download the design in every format, load one back, and the library of named designs.

A file that does not load leaves the current design untouched and says why next to the upload.
"""

from __future__ import annotations

import streamlit as st

from designer.design import Design
from designer.formats import design_from_json, read_design_file
from designer.formats.pt_file import BARE_BLOCK_SIZE
from designer.layout import MAX_BLOCK_SIZE
from designer.ui import keys, state
from designer.ui.common import show_message
from designer.ui.exports import exports
from designer.ui.storage import DesignStore


def files_ui(store: DesignStore) -> None:
    """Downloads, upload and library, side by side."""
    downloads, upload, library = st.columns(3, gap="large")
    with downloads:
        st.subheader("Download", anchor=False)
        _downloads_ui()
    with upload:
        st.subheader("Load a file", anchor=False)
        _upload_ui(store)
    with library:
        st.subheader("Library", anchor=False)
        _library_ui(store)


def read_upload(file_name: str, data: bytes, bare_block_size: int) -> Design:
    """The design in an uploaded ``.pt`` (ours, or a bare 0/1 tensor) or ``.json`` recipe file.

    ``bare_block_size`` is used only for a bare tensor: a design file that carries another block
    size is read with its own.
    """
    if file_name.lower().endswith(".json"):
        return design_from_json(data)
    return read_design_file(data, bare_block_size=bare_block_size).design


def _downloads_ui() -> None:
    current = state.design(st.session_state)
    for export in exports(current):
        st.download_button(
            export.label,
            data=export.build,
            file_name=export.file_name,
            mime=export.mime,
            help=export.unavailable or export.help,
            disabled=export.unavailable is not None,
            on_click="ignore",
            icon=":material/download:",
            key=f"download_{export.file_name.rsplit('.', 1)[-1]}_{export.label}",
            width="stretch",
        )


def _upload_ui(store: DesignStore) -> None:
    st.file_uploader(
        "A design (.pt), a bare DeepSpeed-style layout tensor (.pt) or a JSON recipe",
        type=["pt", "pth", "json"],
        key=keys.UPLOAD,
        on_change=_on_upload,
        args=(store,),
    )
    st.number_input(
        "Block size of a bare tensor",
        min_value=1,
        max_value=MAX_BLOCK_SIZE,
        value=BARE_BLOCK_SIZE,
        key=keys.UPLOAD_BLOCK_SIZE,
        help="A bare [heads, q_blocks, k_blocks] tensor does not say its block size.",
    )
    show_message(keys.FILES_PLACE)


def _on_upload(store: DesignStore) -> None:
    session = st.session_state
    upload = session[keys.UPLOAD]
    if upload is None:
        return
    try:
        loaded = read_upload(upload.name, upload.getvalue(), session[keys.UPLOAD_BLOCK_SIZE])
    except (ValueError, TypeError) as error:
        state.say(session, keys.FILES_PLACE, f"Could not load {upload.name}: {error}")
        return
    state.say(session, keys.FILES_PLACE, None)
    state.replace_design(session, loaded, store)
    state.notice(session, ":material/folder_open:", f"Loaded “{loaded.name}” from {upload.name}.")


def _library_ui(store: DesignStore) -> None:
    session = st.session_state
    current = state.design(session)
    if keys.LIBRARY_NAME not in session:
        session[keys.LIBRARY_NAME] = current.name
    st.text_input("Save as", key=keys.LIBRARY_NAME, max_chars=80)
    st.button(
        "Save to library", icon=":material/bookmark_add:", key="library_save",
        on_click=_on_save, args=(store,),
    )  # fmt: skip
    names = store.names()
    st.selectbox(
        "Saved designs",
        names,
        key=keys.LIBRARY_PICK,
        index=None,
        placeholder="none yet" if not names else "pick a design",
    )
    load, delete = st.columns(2)
    picked = session.get(keys.LIBRARY_PICK)
    load.button(
        "Open", icon=":material/folder_open:", key="library_load", disabled=picked is None,
        on_click=_on_load, args=(store,), width="stretch",
    )  # fmt: skip
    delete.button(
        "Delete", icon=":material/delete:", key="library_delete", disabled=picked is None,
        on_click=_on_delete, args=(store,), width="stretch",
    )  # fmt: skip
    st.caption(f"Stored in {store.library_dir}")
    show_message(keys.LIBRARY_PLACE)


def _on_save(store: DesignStore) -> None:
    session = st.session_state
    name = session[keys.LIBRARY_NAME]
    try:
        existed = name.strip() in store.names()
        store.save(name, state.design(session))
    except (ValueError, OSError) as error:
        state.say(session, keys.LIBRARY_PLACE, f"Could not save: {error}")
        return
    state.say(session, keys.LIBRARY_PLACE, None)
    state.notice(
        session,
        ":material/bookmark_added:",
        f"{'Replaced' if existed else 'Saved'} “{name.strip()}”.",
    )


def _on_load(store: DesignStore) -> None:
    session = st.session_state
    name = session[keys.LIBRARY_PICK]
    try:
        loaded = store.load(name)
    except (ValueError, OSError) as error:
        state.say(session, keys.LIBRARY_PLACE, f"Could not open {name!r}: {error}")
        return
    state.say(session, keys.LIBRARY_PLACE, None)
    state.replace_design(session, loaded, store)
    state.notice(session, ":material/folder_open:", f"Opened “{name}” from the library.")


def _on_delete(store: DesignStore) -> None:
    session = st.session_state
    name = session[keys.LIBRARY_PICK]
    store.delete(name)
    session[keys.LIBRARY_PICK] = None
    state.notice(session, ":material/delete:", f"Deleted “{name}” from the library.")
