"""One cap on the undo steps of every session, and memory given back when a session goes."""

import gc
import sys
import threading

import pytest
import torch

from designer.design import Design
from designer.history import History
from designer.layout import Layout
from designer.storage import DesignStore
from tests.ui.test_state import make_design
from ui import keys, sessions, state
from ui.sessions import HistoryBox, HistoryReleased, Registry

STEP = 16 * 16 * 16  # bytes of one of these layouts


def layout_design(k: int) -> Design:
    blocks = torch.zeros(16, 16, 16, dtype=torch.bool)
    blocks.view(-1)[k] = True
    return Design(Layout(blocks, 16))


def box_with(registry, steps: int, owner=None, start=0) -> HistoryBox:
    history = History(layout_design(start), limit=100)
    for k in range(1, steps + 1):
        history = history.record(layout_design(start + k))
    return registry.add(HistoryBox(history, owner, threading.RLock()))


def test_steps_of_all_sessions_fit_one_cap_oldest_sessions_first():
    registry = Registry(cap_bytes=10 * STEP)
    old = box_with(registry, 6, start=0)
    mid = box_with(registry, 6, start=100)
    new = box_with(registry, 6, start=200)
    new.history = new.history  # the session in use
    registry.fit(new)
    assert old.step_bytes() + mid.step_bytes() + new.step_bytes() <= 10 * STEP
    assert len(old.past) == 1 and len(new.past) == 6  # the oldest session gave first
    assert old.present == layout_design(6) and old.past == (layout_design(5),)
    registry.fit(box_with(registry, 12, start=300))  # one session alone past the cap
    assert all(len(box.past) <= 1 for box in (old, mid, new))


def test_a_shared_layout_counts_once():
    design = layout_design(0)
    renamed = Design(design.layout, name="renamed")
    box = HistoryBox(History(design).record(renamed), None, threading.RLock())
    assert box.step_bytes() == 0


def test_a_busy_session_is_passed_over():
    registry = Registry(cap_bytes=2 * STEP)
    busy = box_with(registry, 5)
    holder = threading.Thread(target=busy.lock.acquire)
    holder.start()
    holder.join()  # another thread holds the busy session's lock
    registry.fit(box_with(registry, 1, start=50))
    assert len(busy.past) == 5


def test_a_session_gone_past_the_grace_is_released_and_restores_from_its_autosave(
    tmp_path, monkeypatch
):
    store, connected = DesignStore(tmp_path), {"tab": True}
    registry = Registry(is_connected=lambda owner: connected[owner], grace_seconds=0)
    monkeypatch.setattr(state, "REGISTRY", registry)
    monkeypatch.setattr(state, "current_owner", lambda: "tab")
    cleared = []
    monkeypatch.setattr(sessions.analysis, "clear_caches", lambda: cleared.append(1))
    session = {}
    state.init_session(session, {}, store, make_design)
    state.commit(session, make_design(window=3, name="painted"), store)
    assert registry.sweep() == 0
    connected["tab"] = False
    assert registry.sweep() == 1 and cleared  # the last session went: caches cleared too
    with pytest.raises(HistoryReleased, match="let its undo history go"):
        state.design(session)
    query = {keys.SESSION_QUERY_PARAM: state.session_id(session)}
    state.init_session(session, query, store, make_design)
    assert state.design(session).name == "painted" and not state.history(session).can_undo


def test_the_registry_forgets_a_session_state_that_is_gone():
    registry = Registry()
    box_with(registry, 2)
    gc.collect()
    assert registry.boxes() == []


def test_without_a_server_every_session_counts_as_connected():
    assert sessions._streamlit_connected("no-such-session")
    assert sessions.current_owner() is None


def test_the_server_polls_no_source_files():
    """Polling every module for every session made a new session's first page 2.5 times as
    slow and kept a core busy under many sessions."""
    from pathlib import Path

    config = (Path(__file__).parents[2] / ".streamlit/config.toml").read_text()
    assert 'fileWatcherType = "none"' in config.split("[server]")[1]


def test_the_start_up_objects_leave_the_full_collections_that_follow_every_rerun():
    """Streamlit collects every generation after each script run, holding the GIL; the objects
    frozen at start-up are not walked again."""
    sessions.freeze_start_up_objects()
    assert gc.get_freeze_count() > 10 * len(gc.get_objects())


def test_the_start_up_objects_are_frozen_before_the_loading_and_after_the_gpu_panel(monkeypatch):
    """Frozen first, so that the reruns' collections leave the loading the GIL; then again with
    what the loading made (the GPU panel's modules among them)."""
    from ui import common

    frozen, panel = [], "ui.bench.panel"
    monkeypatch.setattr(
        common, "freeze_start_up_objects", lambda: frozen.append(panel in sys.modules)
    )
    monkeypatch.delitem(sys.modules, panel, raising=False)
    common.warm_up_server.clear()
    try:
        common.warm_up_server().join()
    finally:
        common.warm_up_server.clear()
    assert frozen == [False, True]
