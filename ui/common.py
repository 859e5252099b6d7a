"""What every view shares: applying a change from a callback, messages, the analysis."""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable

import streamlit as st

from designer import changes
from designer.analysis import (
    Analysis,
    analysed,
    analysis_cost,
    analysis_key,
    cached_analysis,
    cached_runs_analysis,
    load_scan_kernels,
    runs_with_the_page,
)
from designer.design import Design
from designer.storage import DesignStore, load_default_design
from ui import background, keys, state
from ui.sessions import REGISTRY, freeze_start_up_objects
from ui.text import plain

#: The background lane of analyses on runs: one at a time on a server (two would share its
#: cores and each take twice as long).
RUNS_LANE = "runs-analysis"


def start_run(store: DesignStore) -> None:
    """Every run begins here: the session's design (once), widget values, pending notices.

    A new session also hears what the server's tidy of the data folder could not do.
    """
    session = st.session_state
    problems = _tidy_once(str(store.root))
    REGISTRY.sweep()  # sessions gone a while give their memory back
    new = keys.HISTORY not in session
    state.init_session(session, st.query_params, store, load_default_design)
    for problem in problems if new else ():
        state.notice(session, ":material/warning:", plain(f"Data folder: {problem}."))
    state.follow_address(session, st.query_params)
    state.refresh_widgets(session)
    while session[keys.NOTICES]:
        icon, text = session[keys.NOTICES].pop(0)
        st.toast(text, icon=icon)


def change_design(
    store: DesignStore,
    place: str,
    make: Callable[[Design], Design],
    *,
    sync: bool = False,
) -> bool:
    """Apply ``make`` to the current design and commit the result (call from a callback).

    A ``ValueError``/``TypeError`` leaves the design as it was and becomes the message at
    ``place``, shown next to the widget that caused it. ``sync`` sets the widgets to the new (or,
    after an error, the unchanged) design, for changes that also reshape the widgets.
    """
    session = st.session_state
    with state.session_lock(session):
        try:
            current = state.design(session)
            new = changes.follow_name(current, make(current))
        except (ValueError, TypeError) as error:
            if sync:
                state.sync_widgets(session)
            state.say(session, place, str(error))
            return False
        changed = state.commit(session, new, store, moves_widgets=sync)
        if sync:
            state.sync_widgets(session)
        state.say(session, place, None)
        return changed


def show_message(place: str) -> None:
    """Show the error waiting at ``place`` (under the widget that caused it), as plain text:
    messages quote what users typed."""
    if text := state.message(st.session_state, place):
        st.error(plain(text), icon=":material/error:")


def current_analysis() -> tuple[str, Analysis | None]:
    """The current design's analysis key and analysis (each head segmented once per content).

    The analysis is None for a design whose analysis costs more than a page may spend
    (``runs_with_the_page``) until it is asked for (``analysis_offer``); then the first view to
    want it runs it here, under a progress bar.
    """
    current = state.design(st.session_state)
    if current.layout.runs is not None:  # on its runs, beside the page (``background``)
        key = analysis_key(current)
        found = analysed(current)
        if found is None:
            background.start(key, lambda: cached_runs_analysis(current), lane=RUNS_LANE,
                             prepare=load_scan_kernels)  # fmt: skip
        return key, found
    if runs_with_the_page(current):
        return cached_analysis(current)
    key = analysis_key(current)
    if (found := analysed(current)) is not None:
        return key, found
    if st.session_state.get(keys.ANALYSIS_ASKED) != key:
        return key, None
    bar = st.progress(0.0, text="Segmenting and linting, head by head…")
    _, found = cached_analysis(current, progress=lambda done: bar.progress(done, text=(
        f"Segmenting and linting, head by head: {done:.0%}")))  # fmt: skip
    bar.empty()
    return key, found


def analysis_offer(key: str) -> None:
    """Say that the design's tiles and lints are not computed with the page, and offer them
    (for a design held as runs: show that they are being computed, ``analysis_progress_ui``)."""
    if state.design(st.session_state).layout.runs is not None:
        analysis_progress_ui(key)
        return
    seconds = analysis_cost(state.design(st.session_state))[0] / 1e9
    st.info(
        f"Tiles and lints of a design this large take about {seconds:.0f} s, more than a page "
        "may spend, so they run only when asked (the other figures are exact).",
        icon=":material/hourglass_top:",
    )
    st.button(
        f"Segment and lint (about {seconds:.0f} s)", icon=":material/play_arrow:",
        key=f"analyse_{key}", on_click=_ask_analysis, args=(key,),
    )  # fmt: skip


@st.fragment(run_every=0.5)
def analysis_progress_ui(key: str) -> None:
    """While the background analysis under ``key`` runs: a line saying so, polled twice a
    second; once it is done, the whole page reruns to show it (or says why it failed)."""
    job = background.state_of(key)
    if job is not None and job.error is not None:
        st.error(plain(f"Statistics and lints failed: {job.error}"), icon=":material/error:")
        return
    if job is None or job.done:
        st.rerun()
    seconds = time.monotonic() - job.started
    st.progress(
        min(0.95, seconds / 5), text=f"Tiles and lints, on the design's runs: {seconds:.1f} s"
    )


def _ask_analysis(key: str) -> None:
    st.session_state[keys.ANALYSIS_ASKED] = key


@st.cache_resource(show_spinner=False)
def warm_up_server() -> threading.Thread:
    """Once per server, on a thread of its own after the first page is drawn: load the
    compiled segmentation (``load_scan_kernels``: numba, 1 s the first time, 20 s on a fresh
    install; first, as the first page's analysis may wait for it); import the GPU panel (and
    with it the gpu package, 2 s), so that opening the GPU tab later costs its drawing alone;
    then freeze all that out of the garbage collector's sight.

    Streamlit runs a full garbage collection after every run (``runner.postScriptGC``), before
    it tells the browser the run is done, and a full collection walks every object alive: the
    370,000 that torch, numba, plotly and the gpu package make cost it 0.3 to 1.9 s of every
    click on a shared 2-core machine. They live as long as the server, so they are frozen
    (``ui.sessions.freeze_start_up_objects``): every later collection walks only the objects
    made since, in milliseconds, and garbage made since is still collected. They are frozen
    once before the loading too: a page polling a background job reruns twice a second, and
    its collections over the imports kept the loading from the GIL for minutes. What else is
    alive at those moments (the first page's session) is frozen with them: if it later ends
    as garbage in a cycle it stays, once per server and small, since a session's undo history
    lives in the registry's boxes, which the registry empties itself (``ui.sessions``).
    """

    def load() -> None:
        freeze_start_up_objects()  # the app's imports, out of sight while the rest loads
        try:
            load_scan_kernels()
            importlib.import_module("ui.bench.panel")
        finally:
            freeze_start_up_objects()

    thread = threading.Thread(target=load, name="warm-up-server", daemon=True)
    thread.start()
    return thread


@st.cache_resource(show_spinner=False)
def _tidy_once(root: str) -> tuple[str, ...]:
    """Housekeeping of the data directory, once per server process (see ``DesignStore.tidy``):
    what it could not do."""
    return tuple(DesignStore(root).tidy().problems)
