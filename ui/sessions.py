"""What the server holds for each browser session: its undo history, under one server-wide cap,
given back when the session ends.

Streamlit keeps a closed tab's session state for a while in case it reconnects, and on an idle
server until something else touches its store, so a history kept there (up to ``HISTORY_BYTES``
a session) would outlive its tab. Instead the session state holds a ``HistoryBox``, and every
box is known to ``REGISTRY``, which

- keeps the undo steps of all sessions together within ``SERVER_HISTORY_BYTES``, dropping the
  oldest steps of the sessions used longest ago first (each keeps its present design);
- empties the box of a session Streamlit no longer has connected, ``GRACE_SECONDS`` after it
  went (a reload or a closed tab; its design is in its autosave), checked at every rerun and by a
  background sweep every ``SWEEP_SECONDS``;
- and, once no session is left, clears the analysis caches and hands freed heap memory back to
  the operating system (``malloc_trim``), so an idle server shrinks back.

A released box's session reopens its design from the autosave at its next rerun
(``state.init_session``). A reload of a page is a new Streamlit session on the same design
session (``?session=``): it takes over the undo history of the box it left (``steps_of``), so
undo survives a reload (within ``GRACE_SECONDS``), though not a server restart.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import replace

from designer import analysis
from designer.history import History

#: The undo steps of every session together (a 16 x 2048 x 2048-block step is 64 MiB).
SERVER_HISTORY_BYTES = 1 << 30
#: Seconds a disconnected session keeps its history, for a network blip to reconnect.
GRACE_SECONDS = 30
SWEEP_SECONDS = 10


class HistoryReleased(ValueError):
    """The session was away so long that the server let its history go."""


#: ``HistoryBox.model`` before the session's model design was read from its autosave.
UNREAD = object()


class HistoryBox:
    """One session's ``History``, which the registry may trim or release (thread-safe), and
    what must change with it.

    Streamlit may stop a callback at any read or write of ``st.session_state`` (it looks for
    a newer rerun there), so what must change together (the history, the strokes done, the
    autosave's version and session id, the model design) lives here, in plain attributes: a
    change is made whole or not at all. Reads of ``present``, ``past``, ``can_undo`` ... go to
    the history inside.
    """

    def __init__(
        self,
        history: History,
        owner: str | None,
        lock: threading.RLock,
        session_id: str | None = None,
    ) -> None:
        self._history: History | None = history  # written only here and by ``_trim``
        self.owner, self.lock = owner, lock
        self.used = time.monotonic()
        self.gone_since: float | None = None
        #: The design session (``?session=``) and the version of its autosave this box's
        #: present was last saved as (``NO_AUTOSAVE``: never): a reload finds its steps by them.
        self.session_id, self.saved_version = session_id, ""
        #: ``{sender: (client, seq)}``: the page each stroke sender last heard from and its
        #: last stroke done (``canvas.apply``).
        self.done: dict[str, tuple[str | None, int]] = {}
        #: What the last autosave said (None: it went well), shown by the statistics.
        self.save_note: str | None = None
        #: False from a design change until the widgets show it (``state.sync_widgets``).
        self.widgets_synced = True
        #: The session's ``ModelDesign`` (or None), ``UNREAD`` until read from its autosave.
        self.model: object = UNREAD

    @property
    def history(self) -> History:
        history = self._history
        if history is None:
            raise HistoryReleased(
                "this page was away long enough for the server to let its undo history go; its "
                "design is back from the autosave, so please do that again"
            )
        return history

    @history.setter
    def history(self, history: History) -> None:
        self._history, self.used = history, time.monotonic()

    def last_done(self, sender: str) -> tuple[str | None, int]:
        """``(client, seq)`` of ``sender``'s last stroke done (``(None, 0)``: none yet)."""
        return self.done.get(sender, (None, 0))

    @property
    def released(self) -> bool:
        return self._history is None

    def release(self) -> None:
        self._history = None

    def step_bytes(self) -> int:
        """Memory of the undo and redo steps (layouts shared with the present count once)."""
        history = self._history
        if history is None:
            return 0
        present = history.present.layout
        seen = {tensor.data_ptr() for tensor in _held_tensors(present)}
        if present.partials is not None:
            seen.add(present.partials.bits.data_ptr())
        total = 0
        for design in (*history.past, *history.future):
            layout = design.layout
            tensors = _held_tensors(layout)
            if layout.partials is not None:  # token masks: the partial blocks' bits
                tensors += [layout.partials.bits, layout.partials.index]
            for tensor in tensors:
                if tensor.data_ptr() not in seen:
                    seen.add(tensor.data_ptr())
                    total += tensor.nbytes
        return total

    def __getattr__(self, name: str):  # present, past, future, limit, can_undo, can_redo
        return getattr(self.history, name)


def _held_tensors(layout) -> list:
    """The tensors holding a layout's blocks: its grid, or its runs' arrays."""
    if layout.runs is None:
        return [layout.blocks]
    return [layout.runs.row_ptr, layout.runs.starts, layout.runs.stops]


class Registry:
    """Every session's box (weakly: a box whose session state is gone leaves by itself): the
    server-wide cap on their steps and their release."""

    def __init__(
        self,
        cap_bytes: int = SERVER_HISTORY_BYTES,
        is_connected: Callable[[str], bool] | None = None,
        grace_seconds: float = GRACE_SECONDS,
    ) -> None:
        self._boxes: weakref.WeakValueDictionary[int, HistoryBox] = weakref.WeakValueDictionary()
        self._lock = threading.Lock()
        self.cap_bytes, self.grace_seconds = cap_bytes, grace_seconds
        self._is_connected = is_connected or _streamlit_connected
        self._sweeper: threading.Thread | None = None

    def add(self, box: HistoryBox) -> HistoryBox:
        with self._lock:
            self._boxes[id(box)] = box
            if self._sweeper is None and box.owner is not None:
                self._sweeper = threading.Thread(target=self._sweep_forever, daemon=True)
                self._sweeper.start()
        return box

    def boxes(self) -> list[HistoryBox]:
        with self._lock:
            return list(self._boxes.values())

    def steps_of(self, session_id: str, version: str) -> History | None:
        """The undo history a reload of ``session_id`` takes over: that of a box of the
        session whose present is the autosave at ``version`` (the one just read), else None.

        Histories are immutable, so the new box shares the old one's steps; the old box goes
        when its page does.
        """
        for box in self.boxes():
            if box.session_id == session_id and box.saved_version == version:
                history = box._history
                if history is not None:
                    return history
        return None

    def fit(self, current: HistoryBox) -> None:
        """Drop the oldest steps, least recently used sessions first, until all fit the cap:
        others down to one step, then ``current`` too, then others to none. A session busy
        changing its design is passed over (its next change fits it)."""
        boxes = sorted(self.boxes(), key=lambda box: box.used)
        sizes = {id(box): box.step_bytes() for box in boxes}
        total = sum(sizes.values())
        for floor, candidates in ((1, [b for b in boxes if b is not current]), (1, [current]),
                                  (0, boxes)):  # fmt: skip
            for box in candidates:
                if total <= self.cap_bytes:
                    return
                if not box.lock.acquire(blocking=box is current):
                    continue
                try:
                    total -= sizes[id(box)]
                    sizes[id(box)] = _trim(box, floor, total, self.cap_bytes)
                    total += sizes[id(box)]
                finally:
                    box.lock.release()

    def sweep(self) -> int:
        """Release the boxes of sessions gone for ``grace_seconds``; once none is left, clear
        the caches. Returns how many were released."""
        now, released = time.monotonic(), 0
        for box in self.boxes():
            if box.owner is None or self._is_connected(box.owner):
                box.gone_since = None
                continue
            box.gone_since = box.gone_since or now
            if now - box.gone_since >= self.grace_seconds:
                box.release()
                with self._lock:
                    self._boxes.pop(id(box), None)
                released += 1
        if released:
            if not any(box.owner is not None for box in self.boxes()):
                analysis.clear_caches()
                _clear_streamlit_caches()
            give_memory_back()
        return released

    def _sweep_forever(self) -> None:
        while True:
            time.sleep(SWEEP_SECONDS)
            self.sweep()


def _trim(box: HistoryBox, floor: int, others: int, cap: int) -> int:
    """Drop ``box``'s oldest undo steps (then its farthest redo steps) down to ``floor`` steps
    or until ``others`` plus its own steps fit ``cap``; returns its steps' bytes."""
    history = box.history
    while True:
        size = box.step_bytes()
        steps = len(history.past) + len(history.future)
        if others + size <= cap or steps <= floor:
            return size
        if history.past:
            history = replace(history, past=history.past[1:])
        else:
            history = replace(history, future=history.future[:-1])
        box._history = history  # not ``box.history``: trimming is no use of the session


def freeze_start_up_objects() -> None:
    """Collect once, then move every object alive now (the imported modules, torch's and
    plotly's registries: some 370,000) out of the garbage collector's reach (``gc.freeze``).

    Streamlit runs a full collection after every script run, holding the GIL while it walks
    every tracked object: with the start-up objects in view that took 0.25-0.3 s of CPU per
    rerun (1.3-2 s of wall time on two busy cores), and every other session's page waited.
    Call it once the imports are done; objects frozen are still freed when their last
    reference goes, only cycles among them stay.
    """
    gc.collect()
    gc.freeze()


#: Heap blocks from this size up are mapped on their own and unmapped when freed (glibc's
#: ``M_MMAP_THRESHOLD``). Left to itself glibc raises the threshold to the largest block freed
#: (up to 32 MiB), so a large design's freed scratch of 16 MiB arrays stays resident and the
#: next step's peak stacks on it (the 4 x 4096 x 4096-block analysis: +100 MB).
MAP_ON_ITS_OWN_BYTES = 4 << 20
_M_MMAP_THRESHOLD = -3


def map_large_blocks_on_their_own() -> None:
    """Give large freed arrays straight back to the operating system (glibc; elsewhere a
    no-op), for the whole process."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").mallopt(_M_MMAP_THRESHOLD, MAP_ON_ITS_OWN_BYTES)


def give_memory_back() -> None:
    """Return freed heap pages to the operating system (glibc's ``malloc_trim``; elsewhere a
    no-op): freed layouts of a few MiB each stay in the heap otherwise."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _streamlit_connected(owner: str) -> bool:
    """Whether Streamlit still has the session ``owner`` connected (True without a server)."""
    from streamlit.runtime import Runtime

    return not Runtime.exists() or Runtime.instance().is_active_session(owner)


def _clear_streamlit_caches() -> None:
    import streamlit as st

    st.cache_data.clear()


def current_owner() -> str | None:
    """The Streamlit session running this code (None outside a Streamlit run)."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx(suppress_warning=True)
    return None if ctx is None else ctx.session_id


REGISTRY = Registry()
