"""Files: download the design in every format (and see how a model uses the ``.pt``), load one
back, and the library of named designs.

An upload is recognised by its content (``read_design_file``), never by its name (the uploader
filters no types: Streamlit would refuse a name it dislikes with an exception page): the app
says what it found, and asks for a block size only for a bare tensor, which carries none. A file
that does not load leaves the current design untouched and says why once, next to the upload.
Replacing or deleting a library design asks first; a library that cannot be changed says so.
Messages are stored as written and shown as plain text (``plain``), never as Markdown, and
never with a server path.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import PurePath

import streamlit as st

from designer.design import MAX_NAME_CHARS, Design
from designer.formats import LoadedDesign, module_snippet, read_design_file
from designer.formats.exports import design_file_name, exports
from designer.formats.reader import BARE_BLOCK_SIZE, MAX_FILE_BYTES
from designer.layout import MAX_BLOCK_SIZE
from designer.storage import DesignStore, check_library_name, reason
from ui import keys, state
from ui.text import plain

#: The upload limit in MiB: the largest file the reader accepts (``.streamlit/config.toml``).
MAX_UPLOAD_MIB = -(-MAX_FILE_BYTES // (1 << 20))
#: Kinds of file that carry no design name: the design is named after the file.
_UNNAMED_KINDS = ("blockmask", "csr", "base_blockmask", "bare")


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
        st.subheader("Share", anchor=False)
        _share_ui(store)
    _module_use_ui()


def _module_use_ui() -> None:
    """How a model uses the design file: one line (the Python snippet download runs it)."""
    current = state.design(st.session_state)
    st.caption(
        "In a model: our CUDA kernels as a torch module, forward and backward, from the "
        "downloaded design file (the Python snippet runs it)."
    )
    st.code(module_snippet(design_file_name(current)), language="python")


def read_upload(file_name: str, data: bytes, bare_block_size: int) -> LoadedDesign:
    """What an uploaded file holds, whatever its kind; designs from files without a name take
    the file's stem as their name. ``bare_block_size`` is used only for a bare tensor."""
    loaded = read_design_file(data, bare_block_size=bare_block_size)
    if loaded.kind in _UNNAMED_KINDS:
        stem = PurePath(shown_name(file_name)).stem.strip()[:MAX_NAME_CHARS] or "imported"
        loaded = replace(loaded, design=replace(loaded.design, name=stem))
    return loaded


def shown_name(file_name: str) -> str:
    """An uploaded file's name without control characters (a NUL, a newline), at most 200
    characters (as shown in messages; a design named after it takes ``MAX_NAME_CHARS``)."""
    return "".join(c for c in file_name if c.isprintable())[:200] or "upload"


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
        if export.note and not export.unavailable:
            st.caption(export.note)


def _upload_ui(store: DesignStore) -> None:
    session = st.session_state
    st.file_uploader(
        "A design (.pt or .json), FlexAttention BlockMask, CSR or MIT tensors, or a bare "
        "DeepSpeed-style layout tensor",
        key=keys.UPLOAD,
        on_change=_on_upload,
        args=(store,),
        max_upload_size=MAX_UPLOAD_MIB,
        help="Recognised by its content, whatever its name.",
    )
    st.caption(
        f"Up to {MAX_UPLOAD_MIB} MiB: the browser refuses a larger file before sending it (a red "
        "mark on the file). The Design (.pt) download of any design fits; downloads that do not "
        "say so under their button."
    )
    pending = session.get(keys.UPLOAD_PENDING)
    if pending is not None:
        st.info(
            f"{plain(pending[0])} is a bare layout tensor: it does not say its block size.",
            icon=":material/help:",
        )
        session.setdefault(keys.UPLOAD_BLOCK_SIZE, BARE_BLOCK_SIZE)
        st.number_input(
            "Tokens per block", min_value=1, max_value=MAX_BLOCK_SIZE, key=keys.UPLOAD_BLOCK_SIZE
        )
        st.button(
            "Load with this block size", icon=":material/folder_open:", key="upload_bare",
            on_click=_on_load_bare, args=(store,),
        )  # fmt: skip
    elif recognised := session.get(keys.UPLOAD_RECOGNISED):
        st.caption(plain(recognised))
    _show_once(keys.FILES_PLACE)


def _show_once(place: str) -> None:
    """Show the error waiting at ``place`` in this run only: it answers one action."""
    if text := state.message(st.session_state, place):
        st.error(plain(text), icon=":material/error:")
        state.say(st.session_state, place, None)


def _on_upload(store: DesignStore) -> None:
    session = st.session_state
    session.pop(keys.UPLOAD_PENDING, None)
    session.pop(keys.UPLOAD_RECOGNISED, None)
    upload = session[keys.UPLOAD]
    if upload is None:
        return
    data, name = upload.getvalue(), shown_name(upload.name)
    try:
        loaded = read_upload(name, data, BARE_BLOCK_SIZE)
    except (ValueError, TypeError) as error:
        state.say(session, keys.FILES_PLACE, f"Could not load {name}: {error}")
        return
    if loaded.bare:
        session[keys.UPLOAD_PENDING] = (name, data)
        return
    _commit_upload(store, name, loaded)


def _on_load_bare(store: DesignStore) -> None:
    session = st.session_state
    name, data = session.pop(keys.UPLOAD_PENDING)
    try:
        loaded = read_upload(name, data, session[keys.UPLOAD_BLOCK_SIZE])
    except (ValueError, TypeError) as error:
        state.say(session, keys.FILES_PLACE, f"Could not load {name}: {error}")
        return
    _commit_upload(store, name, loaded)


def _commit_upload(store: DesignStore, file_name: str, loaded: LoadedDesign) -> None:
    session = st.session_state
    state.say(session, keys.FILES_PLACE, None)
    session[keys.UPLOAD_RECOGNISED] = f"{file_name}: {loaded.describe()}."
    state.replace_design(session, loaded.design, store)
    state.notice(
        session,
        ":material/folder_open:",
        f"Loaded “{plain(loaded.design.name)}” from {plain(file_name)}.",
    )


# --------------------------------------------------------------------------- library
def _library_ui(store: DesignStore) -> None:
    session = st.session_state
    current = state.design(session)
    if session.get(keys.LIBRARY_NAME_OF) != current.name:  # a renamed design renames the box
        session[keys.LIBRARY_NAME] = current.name
        session[keys.LIBRARY_NAME_OF] = current.name
    state.fill_defaults(session, {keys.LIBRARY_NAME: current.name})
    st.text_input("Save as", key=keys.LIBRARY_NAME, max_chars=MAX_NAME_CHARS)
    st.button(
        "Save to library", icon=":material/bookmark_add:", key="library_save",
        on_click=_on_save, args=(store, None),
    )  # fmt: skip
    names = store.names()
    if session.get(keys.LIBRARY_PICKED) not in names:
        session[keys.LIBRARY_PICKED] = None
    session[keys.LIBRARY_PICK] = session[keys.LIBRARY_PICKED]
    st.selectbox(
        "Saved designs",
        names,
        key=keys.LIBRARY_PICK,
        on_change=_remember_pick,
        placeholder="none yet" if not names else "pick a design",
    )
    load, delete = st.columns(2)
    picked = session[keys.LIBRARY_PICKED]
    if picked is not None:
        with st.expander("Rename", icon=":material/edit:", key="library_rename_box"):
            st.text_input(
                "New name", key=keys.LIBRARY_RENAME, max_chars=MAX_NAME_CHARS,
                placeholder=picked,
            )  # fmt: skip
            st.button(
                "Rename", key="library_rename", on_click=_on_rename, args=(store,),
                disabled=not session.get(keys.LIBRARY_RENAME, "").strip(),
            )  # fmt: skip
    load.button(
        "Open", icon=":material/folder_open:", key="library_load", disabled=picked is None,
        on_click=_on_load, args=(store,), width="stretch",
    )  # fmt: skip
    delete.button(
        "Delete", icon=":material/delete:", key="library_delete", disabled=picked is None,
        on_click=_ask, args=("delete", picked), width="stretch",
    )  # fmt: skip
    _confirm_ui(store)
    st.caption("Stored in the server's data folder, shared by everyone using this server.")
    _show_once(keys.LIBRARY_PLACE)


def _share_ui(store: DesignStore) -> None:
    """A link to a frozen copy of the design: whoever opens it sees this design as it is now,
    and their changes go to a copy of their own."""
    session = st.session_state
    st.button(
        "Share a snapshot link", icon=":material/share:", key="share_snapshot",
        on_click=_on_share, args=(store,),
        help="A read-only copy at its own address; the design here goes on changing.",
    )  # fmt: skip
    shared = session.get(keys.SNAPSHOT_LINK)
    if shared is not None:
        snapshot_id, name = shared
        base = (st.context.url or "").split("?")[0]
        st.code(f"{base}?{keys.SNAPSHOT_QUERY_PARAM}={snapshot_id}", language=None)
        st.caption(f"A frozen copy of “{plain(name)}”: opening it changes nothing here.")
    _show_once(keys.SHARE_PLACE)


def _on_share(store: DesignStore) -> None:
    session = st.session_state
    current = state.design(session)
    try:
        session[keys.SNAPSHOT_LINK] = (store.snapshot(current), current.name)
    except ValueError as error:
        state.say(session, keys.SHARE_PLACE, f"Could not share: {error}")
    except OSError as error:
        state.say(session, keys.SHARE_PLACE, f"Could not share: {reason(error)}")


def _remember_pick() -> None:
    st.session_state[keys.LIBRARY_PICKED] = st.session_state[keys.LIBRARY_PICK]


def _ask(action: str, name: str) -> None:
    st.session_state[keys.LIBRARY_CONFIRM] = (action, name)


def _confirm_ui(store: DesignStore) -> None:
    pending = st.session_state.get(keys.LIBRARY_CONFIRM)
    if pending is None:
        return
    action, name = pending
    question = "already exists. Replace it?" if action == "replace" else "will be deleted."
    st.warning(f"“{plain(name)}” {question}", icon=":material/warning:")
    yes, no = st.columns(2)
    yes.button(
        "Replace" if action == "replace" else "Delete", key="library_confirm", type="primary",
        on_click=_on_confirm, args=(store, action, name), width="stretch",
    )  # fmt: skip
    no.button("Cancel", key="library_cancel", on_click=_ask_nothing, width="stretch")


def _on_confirm(store: DesignStore, action: str, name: str) -> None:
    if action == "replace":
        _on_save(store, name)
    else:
        _on_delete(store, name)


def _ask_nothing() -> None:
    st.session_state.pop(keys.LIBRARY_CONFIRM, None)


def _on_save(store: DesignStore, confirmed: str | None) -> None:
    """Save the current design under the "Save as" name (or the ``confirmed`` one, which may be
    replaced). The copy in the library takes that name; the design being worked on keeps its
    own."""
    session = st.session_state
    _ask_nothing()
    name = confirmed or session[keys.LIBRARY_NAME]
    try:
        exists = store.existing(name)
        if exists and confirmed is None:
            _ask("replace", exists)
            return
        stored = check_library_name(name)
        current = state.design(session)
        store.save(stored, current if current.name == stored else replace(current, name=stored))
    except ValueError as error:
        state.say(session, keys.LIBRARY_PLACE, f"Could not save: {error}")
        return
    except OSError as error:
        state.say(session, keys.LIBRARY_PLACE, f"Could not save: {reason(error)}")
        return
    session[keys.LIBRARY_PICKED] = stored
    state.say(session, keys.LIBRARY_PLACE, None)
    verb = "Replaced" if exists else "Saved"
    state.notice(session, ":material/bookmark_added:", f"{verb} “{plain(stored)}” in the library.")


def _on_rename(store: DesignStore) -> None:
    session = st.session_state
    picked = session[keys.LIBRARY_PICKED]
    try:
        renamed = store.rename(picked, session[keys.LIBRARY_RENAME])
    except ValueError as error:
        state.say(session, keys.LIBRARY_PLACE, f"Could not rename: {error}")
        return
    except OSError as error:
        state.say(session, keys.LIBRARY_PLACE, f"Could not rename: {reason(error)}")
        return
    session[keys.LIBRARY_PICKED] = renamed
    session.pop(keys.LIBRARY_RENAME, None)
    state.say(session, keys.LIBRARY_PLACE, None)
    state.notice(session, ":material/edit:", f"Renamed “{plain(picked)}” to “{plain(renamed)}”.")


def _on_load(store: DesignStore) -> None:
    session = st.session_state
    name = session[keys.LIBRARY_PICKED]
    try:
        loaded = store.load(name)
    except ValueError as error:
        state.say(session, keys.LIBRARY_PLACE, f"Could not open: {error}")
        return
    state.say(session, keys.LIBRARY_PLACE, None)
    opened: Design = replace(loaded, name=name)  # the library name is the design's name
    state.replace_design(session, opened, store)
    state.notice(session, ":material/folder_open:", f"Opened “{plain(name)}” from the library.")


def _on_delete(store: DesignStore, name: str) -> None:
    session = st.session_state
    _ask_nothing()
    try:
        store.delete(name)
    except OSError as error:
        state.say(session, keys.LIBRARY_PLACE, f"Could not delete “{name}”: {reason(error)}")
        return
    session[keys.LIBRARY_PICKED] = None
    state.notice(session, ":material/delete:", f"Deleted “{plain(name)}” from the library.")
