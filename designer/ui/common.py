"""What every view shares: applying a change from a callback, messages, cached analysis."""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from designer.design import Design
from designer.ui import keys, state
from designer.ui.analysis import Analysis, analyse, design_digest
from designer.ui.bounded_cache import BoundedCache
from designer.ui.storage import DesignStore, load_default_design


def start_run(store: DesignStore) -> None:
    """Every run begins here: the session's design (once), widget values, pending notices."""
    session = st.session_state
    _tidy_once(str(store.root))
    state.init_session(session, st.query_params, store, load_default_design)
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
    try:
        new = make(state.design(session))
    except (ValueError, TypeError) as error:
        if sync:
            state.sync_widgets(session)
        state.say(session, place, str(error))
        return False
    changed = state.commit(session, new, store)
    if sync:
        state.sync_widgets(session)
    state.say(session, place, None)
    return changed


def show_message(place: str) -> None:
    """Show the error waiting at ``place`` (under the widget that caused it)."""
    if text := state.message(st.session_state, place):
        st.error(text, icon=":material/error:")


#: Analyses kept for every session of the server together: bytes, entries, seconds.
ANALYSIS_CACHE_BYTES = 384 << 20
ANALYSIS_CACHE_ENTRIES = 16
ANALYSIS_CACHE_SECONDS = 15 * 60


@st.cache_resource(show_spinner=False)
def _analysis_cache() -> BoundedCache[Analysis]:
    return BoundedCache(ANALYSIS_CACHE_BYTES, ANALYSIS_CACHE_ENTRIES, ANALYSIS_CACHE_SECONDS)


def _analysis_bytes(analysis: Analysis) -> int:
    return analysis.widths.nbytes + analysis.odd.nbytes


def current_analysis() -> tuple[str, Analysis]:
    """The current design's digest and analysis (segmented once per distinct layout).

    The analysis is shared between sessions, read-only (its arrays cannot be written).
    """
    current = state.design(st.session_state)
    digest = design_digest(current)
    return digest, _analysis_cache().get(digest, lambda: _frozen(analyse(current)), _analysis_bytes)


def _frozen(analysis: Analysis) -> Analysis:
    analysis.widths.flags.writeable = False
    analysis.odd.flags.writeable = False
    return analysis


@st.cache_resource(show_spinner=False)
def _tidy_once(root: str) -> int:
    """Housekeeping of the data directory, once per server process (see ``DesignStore.tidy``)."""
    return len(DesignStore(root).tidy())
