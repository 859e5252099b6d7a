"""The session's state: its start, the moves of the current design, messages, widget sync.

``state`` is ``st.session_state`` in the app and a plain dict in tests. The current design is
the present of the session's history, kept in its box (``sessions.HistoryBox``) with what must
change with it: every change is pushed onto the history and autosaved; undo and redo walk it.
Widgets mirror the design: ``sync_widgets`` writes their values from it whenever the design
changes other than through them (start, undo, redo, load).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import fields, replace
from typing import Any

from designer.design import Design
from designer.history import History
from designer.layout import Layout
from designer.storage import (
    NO_AUTOSAVE,
    AutosaveConflict,
    DesignStore,
    check_session_id,
    new_session_id,
    reason,
)
from ui import keys
from ui.params import step_widget_values
from ui.sessions import REGISTRY, HistoryBox, current_owner
from ui.text import plain

State = MutableMapping[str, Any]

#: Undo steps kept per session, and the memory they may hold: each step keeps a whole layout
#: (1 MiB at 16 × 256 × 256 blocks: 50 steps; 64 MiB at 16 × 2048 × 2048: 8 steps).
HISTORY_LIMIT = 50
HISTORY_BYTES = 512 << 20

#: Said when another tab changed this session's autosave and this tab's design went to a copy.
FORKED = (
    "This design is also open in another tab, which saved changes to it. So that neither tab's "
    "work is lost, this tab now keeps its design as a copy at its own address (the address bar "
    "shows it); the other tab's design stays at the old address."
)

_MAKING_LOCKS = threading.Lock()


def box(state: State) -> HistoryBox:
    """The session's box: its history and what changes with it."""
    return state[keys.HISTORY]


def session_id(state: State) -> str:
    """This browser session's id: it names the autosave and sits in the URL as ``?session=``."""
    return box(state).session_id


def design(state: State) -> Design:
    """The current design (``sessions.HistoryReleased``, a ``ValueError``, if the server let
    this session's history go while it was away)."""
    return history(state).present


def history(state: State) -> History:
    """The session's undo history."""
    return box(state).history


def set_history(held: HistoryBox, new: History, *, moves_widgets: bool = False) -> None:
    """Make ``new`` the history in ``held``, within the server-wide cap on undo steps;
    ``moves_widgets``: the change is one the widgets must be set to (see ``sync_widgets``)."""
    held.history = new
    if moves_widgets:
        held.widgets_synced = False
    REGISTRY.fit(held)


def session_lock(state: State) -> threading.RLock:
    """The lock every change of this session's design holds, from reading the design to
    committing the new one.

    Streamlit starts a new rerun as soon as the browser asks (``runner.fastReruns``) while the
    old one may still be running its callbacks, so two threads can change one session at once;
    without the lock both would start from the same design and one change would be lost.
    """
    with _MAKING_LOCKS:
        lock = state.get(keys.SESSION_LOCK)
        if lock is None:
            lock = state[keys.SESSION_LOCK] = threading.RLock()
    return lock


def init_session(
    state: State,
    query_params: MutableMapping[str, str],
    store: DesignStore,
    default_design: Callable[[], Design],
) -> None:
    """Start a browser session once: its autosave, found through the URL, else the default.

    Session ids are issued here (``new_session_id``, 128 random bits) and known by their
    autosave, written at the first change (a visit that changes nothing writes nothing), or,
    before it, by the server's registry of histories: a reload takes over the undo history of
    the page it reloads (``REGISTRY.steps_of``). A missing, malformed, unknown or unreadable id
    gets a fresh one: a link carrying an id the server never issued does not make a session
    adopt it, and a broken autosave is never overwritten. "Restored ... from your last visit"
    is said only of a design the user did not just see (an autosave written a while ago).
    """
    previous = state.get(keys.HISTORY)
    if previous is not None and not previous.released:
        return
    state[keys.MESSAGES] = {}
    state[keys.NOTICES] = []
    if _open_snapshot(state, query_params, store):
        return
    restored, version, steps = None, NO_AUTOSAVE, None
    session_id = query_params.get(keys.SESSION_QUERY_PARAM)
    try:
        restored, version = store.restore_versioned(check_session_id(session_id)) or (None, version)
    except ValueError as error:
        if session_id is not None:
            notice(
                state, ":material/warning:", plain(f"Could not restore the last design: {error}")
            )
    if isinstance(session_id, str):
        steps = REGISTRY.steps_of(session_id, version)  # a reload: this server issued the id
    if restored is None and steps is None:
        session_id = new_session_id()
    query_params[keys.SESSION_QUERY_PARAM] = session_id
    if restored is not None and steps is None and _left_a_while_ago(store, session_id):
        notice(
            state, ":material/history:", f"Restored “{plain(restored.name)}” from your last visit."
        )
    if steps is None:
        current = restored or default_design()
        steps = History(current, limit=history_limit(current), same=same_design)
    started = HistoryBox(steps, current_owner(), session_lock(state), session_id)
    started.saved_version = version
    if previous is not None:  # released: the strokes it did are in the autosave just read
        started.done = dict(previous.done)
    state[keys.HISTORY] = REGISTRY.add(started)
    sync_widgets(state)


def _open_snapshot(
    state: State, query_params: MutableMapping[str, str], store: DesignStore
) -> bool:
    """Start the session on the snapshot the URL names (``?snapshot=``), under a new session id
    of its own that nothing is written under until its first change; False when the URL names
    none or one that cannot be opened (said, and the session starts as usual)."""
    snapshot_id = query_params.get(keys.SNAPSHOT_QUERY_PARAM)
    if snapshot_id is None:
        return False
    try:
        shared = store.load_snapshot(snapshot_id)
    except ValueError as error:
        notice(state, ":material/warning:", plain(f"Could not open the shared snapshot: {error}"))
        _drop(query_params, keys.SNAPSHOT_QUERY_PARAM)
        return False
    state[keys.SNAPSHOT] = snapshot_id
    steps = History(shared, limit=history_limit(shared), same=same_design)
    started = HistoryBox(steps, current_owner(), session_lock(state), new_session_id())
    started.saved_version = NO_AUTOSAVE
    state[keys.HISTORY] = REGISTRY.add(started)
    sync_widgets(state)
    return True


def viewing_snapshot(state: State) -> bool:
    """Whether this session shows a shared snapshot it has not changed yet."""
    return bool(state.get(keys.SNAPSHOT)) and box(state).saved_version == NO_AUTOSAVE


def follow_address(state: State, query_params: MutableMapping[str, str]) -> None:
    """Keep the URL on what the session shows: ``?snapshot=`` while it shows a snapshot
    unchanged, then (its copy forked at the first change) ``?session=``."""
    if viewing_snapshot(state):
        _drop(query_params, keys.SESSION_QUERY_PARAM)
        return
    if state.pop(keys.SNAPSHOT, None):
        _drop(query_params, keys.SNAPSHOT_QUERY_PARAM)
        notice(
            state, ":material/fork_right:", "Your change made your own copy of the snapshot, at "
            "this new address; the shared link still shows the original.",
        )  # fmt: skip
    if query_params.get(keys.SESSION_QUERY_PARAM) != session_id(state):
        query_params[keys.SESSION_QUERY_PARAM] = session_id(state)  # new, or forked


def _drop(query_params: MutableMapping[str, str], key: str) -> None:
    if key in query_params:
        del query_params[key]


#: A design restored from an autosave older than this is announced: its page was not just open.
RESTORED_NOTICE_SECONDS = 10 * 60


def _left_a_while_ago(store: DesignStore, session_id: str) -> bool:
    """Whether the session's autosave was last written ``RESTORED_NOTICE_SECONDS`` ago or more
    (a return, not a reload or a restart of the server under an open page)."""
    return store.autosave_age(session_id) >= RESTORED_NOTICE_SECONDS


def same_design(new: Design, old: Design) -> bool:
    """Whether ``new`` is no change from ``old``, so no undo step is recorded for it: equal but
    for the modification time (a value entered again), or only manual edits added that changed
    no block (painting blocks already painted)."""
    if new.layout != old.layout:
        return False
    if replace(new, modified=old.modified) == old:
        return True
    if new.recipe is None or old.recipe is None:
        return False
    before = old.recipe.edits
    same_steps = all(
        getattr(new.recipe, f.name) == getattr(old.recipe, f.name)
        for f in fields(old.recipe)
        if f.name != "edits"
    )
    return (
        same_steps
        and new.recipe.edits[: len(before)] == before
        and replace(new, modified=old.modified, recipe=old.recipe) == old
    )


def commit(state: State, new: Design, store: DesignStore, *, moves_widgets: bool = False) -> bool:
    """Make ``new`` the current design (undoable) and autosave it; False if nothing changed.
    ``moves_widgets``: the caller sets the widgets to it next (``sync_widgets``)."""
    with session_lock(state):
        held = box(state)
        before = sized_history(held.history, new)
        pushed = before.push(new)
        if pushed is before:
            return False
        set_history(held, pushed, moves_widgets=moves_widgets)
        autosave(held, store)
        return True


def sized_history(steps: History, new: Design) -> History:
    """``steps`` with the limit for designs the size of ``new`` (its oldest steps dropped)."""
    limit = history_limit(new)
    if limit == steps.limit:
        return steps
    return replace(steps, past=steps.past[len(steps.past) - limit :], limit=limit)


def history_limit(current: Design) -> int:
    """Undo steps to keep for designs the size of ``current``: ``HISTORY_LIMIT``, fewer for
    layouts so large that the steps would pass ``HISTORY_BYTES`` (at least 2)."""
    return max(2, min(HISTORY_LIMIT, HISTORY_BYTES // layout_bytes(current.layout)))


def layout_bytes(layout: Layout) -> int:
    """What one layout holds in memory: a byte per bool block (or its runs' bytes), and any
    token masks."""
    held = layout.blocks.numel() if layout.runs is None else layout.runs.nbytes
    return held + (0 if layout.partials is None else layout.partials.nbytes)


def replace_design(state: State, new: Design, store: DesignStore) -> bool:
    """Commit a design that did not come from the widgets (a load), and sync them to it."""
    changed = commit(state, new, store, moves_widgets=True)
    sync_widgets(state)
    return changed


def undo(state: State, store: DesignStore) -> None:
    """Step back one change, autosave and sync the widgets."""
    with session_lock(state):
        held = box(state)
        set_history(held, held.history.undo(), moves_widgets=True)
        autosave(held, store)
        sync_widgets(state)


def redo(state: State, store: DesignStore) -> None:
    """Step forward one undone change, autosave and sync the widgets."""
    with session_lock(state):
        held = box(state)
        set_history(held, held.history.redo(), moves_widgets=True)
        autosave(held, store)
        sync_widgets(state)


def autosave(held: HistoryBox, store: DesignStore) -> None:
    """Write the present design in ``held`` to its session's autosave; what happened goes to
    ``held.save_note`` (None: saved).

    If another tab on the same session id wrote the autosave since this one last did, neither
    overwrites the other: this tab's design goes to a new session id (and the URL follows).
    No session state is touched, so a rerun cannot stop it between the write and its version.
    """
    try:
        held.saved_version = store.autosave(
            held.session_id, held.present, expected=held.saved_version
        )
        held.save_note = None
    except AutosaveConflict:
        held.session_id, held.saved_version = new_session_id(), NO_AUTOSAVE
        autosave(held, store)
        held.save_note = held.save_note or FORKED
    except (OSError, ValueError) as error:
        why = reason(error) if isinstance(error, OSError) else str(error)
        held.save_note = f"Autosave failed ({why}). Download the design to keep it."


def autosave_note(state: State) -> str | None:
    """What the session's last autosave said (None: it went well)."""
    return box(state).save_note


def widget_values(current: Design) -> dict[str, Any]:
    """The value of every setup and recipe widget for ``current``."""
    layout = current.layout
    heads = current.model_shape.heads or layout.n_heads
    values: dict[str, Any] = {
        keys.NAME: current.name,
        keys.SEQ_LEN_Q: layout.seq_len_q,
        keys.SEQ_LEN_K: layout.seq_len_k,
        keys.BLOCK_SIZE: layout.block_size,
        keys.N_HEADS: layout.n_heads,
        keys.CAUSAL: current.causal,
        keys.AUTO_START_WIDTH: current.start_width is None,
        keys.START_WIDTH: current.effective_start_width,
        keys.MODEL_BATCH: current.model_shape.batch,
        keys.MODEL_HEADS: heads,
        keys.MODEL_KV_HEADS: current.model_shape.kv_heads or heads,
        keys.MODEL_HEAD_DIM: current.model_shape.head_dim,
    }
    for index, step in enumerate(current.recipe.steps if current.recipe else ()):
        values.update(step_widget_values(index, step))
    return values


def sync_widgets(state: State) -> None:
    """Set every widget to the current design and drop messages about the old values.

    A rerun may stop this half way; the box says so until it is done, and the next run's
    ``refresh_widgets`` does it again.
    """
    held = box(state)
    held.widgets_synced = False
    state.update(widget_values(held.present))
    state[keys.MESSAGES] = {}
    held.widgets_synced = True


def refresh_widgets(state: State) -> None:
    """Before drawing: every setup and recipe widget gets its value (see ``fill_defaults``).

    With the auto start width on, the start-width box always shows the width in use, which
    changes with the block size; so do the model's heads and kv heads while they follow the
    design.
    """
    if not box(state).widgets_synced:
        sync_widgets(state)
    current = design(state)
    values = widget_values(current)
    fill_defaults(state, values)
    if current.start_width is None:
        state[keys.START_WIDTH] = current.effective_start_width
    shape = current.model_shape  # heads and kv heads that follow the design show its count
    if shape.heads is None:
        state[keys.MODEL_HEADS] = values[keys.MODEL_HEADS]
    if shape.kv_heads is None:
        state[keys.MODEL_KV_HEADS] = values[keys.MODEL_KV_HEADS]


def fill_defaults(state: State, values: Mapping[str, Any]) -> None:
    """Give each widget key in ``values`` its value for this run: the one it has, else ours.

    Keys are written even when they hold a value: Streamlit hands a widget the value its key
    was given in the current run, but forgets one set while the widget was not drawn (a closed
    tab), which would show a stale default when the tab opens again.
    """
    for key, value in values.items():
        state[key] = state.get(key, value)


def say(state: State, place: str, text: str | None) -> None:
    """Set (or with ``None`` clear) the message shown at ``place``."""
    if text is None:
        state[keys.MESSAGES].pop(place, None)
    else:
        state[keys.MESSAGES][place] = text


def message(state: State, place: str) -> str | None:
    """The message waiting at ``place``, if any."""
    return state[keys.MESSAGES].get(place)


def notice(state: State, icon: str, text: str) -> None:
    """Queue a one-shot notice for the next run."""
    state[keys.NOTICES].append((icon, text))
