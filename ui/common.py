"""What every view shares: applying a change from a callback, messages, the analysis."""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from designer.analysis import Analysis, cached_analysis
from designer.design import Design
from designer.storage import DesignStore, load_default_design
from ui import keys, state
from ui.sessions import REGISTRY


def start_run(store: DesignStore) -> None:
    """Every run begins here: the session's design (once), widget values, pending notices."""
    session = st.session_state
    _tidy_once(str(store.root))
    REGISTRY.sweep()  # sessions gone a while give their memory back
    state.init_session(session, st.query_params, store, load_default_design)
    if st.query_params.get(keys.SESSION_QUERY_PARAM) != session[keys.SESSION_ID]:
        st.query_params[keys.SESSION_QUERY_PARAM] = session[keys.SESSION_ID]  # a forked session
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


def current_analysis() -> tuple[str, Analysis]:
    """The current design's analysis key and analysis (each head segmented once per content)."""
    return cached_analysis(state.design(st.session_state))


@st.cache_resource(show_spinner=False)
def _tidy_once(root: str) -> int:
    """Housekeeping of the data directory, once per server process (see ``DesignStore.tidy``)."""
    return len(DesignStore(root).tidy())
