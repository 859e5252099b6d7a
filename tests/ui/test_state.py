import contextlib
import os
import shutil
from dataclasses import replace

import pytest

from designer import changes
from designer.design import Design
from designer.edit import Cells, EditOp, Rect
from designer.recipe import Recipe, RecipeStep
from designer.storage import DesignStore
from ui import keys, state


def make_design(window=2, name="d"):
    step = RecipeStep("sliding_window", {"window_blocks": window})
    recipe = Recipe(2, 8, 8, 64, steps=(step,))
    stamp = "2026-01-01T00:00:00+00:00"  # fixed, so equal designs compare equal
    return Design(recipe.build(), name=name, recipe=recipe, created=stamp, modified=stamp)


@pytest.fixture
def store(tmp_path):
    return DesignStore(tmp_path)


def start(store, query=None):
    session, params = {}, dict(query or {})
    state.init_session(session, params, store, make_design)
    return session, params


def test_a_new_session_gets_an_id_in_the_url_and_the_default(store):
    session, params = start(store)
    assert params[keys.SESSION_QUERY_PARAM] == state.session_id(session)
    assert state.design(session) == make_design()
    assert session[keys.step_key(0, "window_blocks")] == 2
    assert session[keys.SEQ_LEN_Q] == 512 and session[keys.AUTO_START_WIDTH] is True
    assert session[keys.NOTICES] == []


def test_a_new_session_id_is_128_random_bits_and_a_visit_without_change_writes_nothing(store):
    session, params = start(store)
    session_id = state.session_id(session)
    assert len(session_id) == 22  # 16 bytes, URL-safe base64
    assert not store.autosave_dir.exists()
    again, _ = start(store, params)  # a reload before any change keeps the session
    assert state.session_id(again) == session_id
    assert not store.autosave_dir.exists()
    state.commit(again, make_design(window=5), store)
    assert (store.autosave_dir / f"{session_id}.pt").is_file()


def test_an_id_the_server_never_issued_starts_fresh_under_a_new_id(store):
    chosen = "attacker-chosen-id-0123"
    session, params = start(store, {keys.SESSION_QUERY_PARAM: chosen})
    assert state.session_id(session) != chosen and params[keys.SESSION_QUERY_PARAM] != chosen
    assert not (store.autosave_dir / f"{chosen}.pt").exists()
    state.commit(session, make_design(window=5), store)
    assert not (store.autosave_dir / f"{chosen}.pt").exists(), "the victim's work never lands there"


def test_init_runs_once(store):
    session, params = start(store)
    history = session[keys.HISTORY]
    state.init_session(session, params, store, lambda: pytest.fail("default built again"))
    assert session[keys.HISTORY] is history


def test_commit_autosaves_and_a_reload_restores_it(store):
    session, params = start(store)
    assert state.commit(session, make_design(window=3), store)
    assert not state.commit(session, make_design(window=3), store)  # nothing changed
    reloaded, again = start(store, params)
    assert again == params
    assert state.design(reloaded) == make_design(window=3)
    assert reloaded[keys.step_key(0, "window_blocks")] == 3
    assert reloaded[keys.NOTICES] == []  # a reload: the user just saw it
    state.undo(reloaded, store)  # and its undo history came along
    assert state.design(reloaded) == make_design()


def test_a_return_after_a_while_says_what_was_restored(store):
    session, params = start(store)
    state.commit(session, make_design(window=3), store)
    session[keys.HISTORY].release()  # the server let the page's history go
    path = store.autosave_dir / f"{state.session_id(session)}.pt"
    old = path.stat().st_mtime - state.RESTORED_NOTICE_SECONDS - 1
    os.utime(path, (old, old))
    back, _ = start(store, params)
    assert state.design(back) == make_design(window=3)
    assert "Restored" in back[keys.NOTICES][0][1]
    assert not state.history(back).can_undo  # a fresh history: the server had let it go


def test_an_unreadable_autosave_is_left_alone_and_a_new_session_starts(store):
    session, params = start(store)
    state.commit(session, make_design(window=3), store)
    session[keys.HISTORY].release()
    broken = store.autosave_dir / f"{state.session_id(session)}.pt"
    broken.write_bytes(b"garbage")
    fresh, new_params = start(store, params)
    assert new_params[keys.SESSION_QUERY_PARAM] != params[keys.SESSION_QUERY_PARAM]
    assert broken.read_bytes() == b"garbage"
    assert "Could not restore" in fresh[keys.NOTICES][0][1]


def test_undo_redo_sync_the_widgets(store):
    session, _ = start(store)
    state.commit(session, make_design(window=5), store)
    session[keys.step_key(0, "window_blocks")] = 5
    state.undo(session, store)
    assert session[keys.step_key(0, "window_blocks")] == 2
    assert store.restore(state.session_id(session)) == make_design()
    state.redo(session, store)
    assert session[keys.step_key(0, "window_blocks")] == 5


def test_an_undo_stopped_by_a_rerun_is_saved_and_its_widgets_set_at_the_next_run(store):
    """Streamlit may stop a callback at any session-state access (a newer rerun waits)."""
    from tests.ui.canvas.test_apply import Rerun, StoppedAt

    for stop_at in range(1, 100):
        plain, _ = start(store)
        state.commit(plain, make_design(window=5), store)
        plain[keys.step_key(0, "window_blocks")] = 5
        stopping = StoppedAt(plain, stop_at)
        with contextlib.suppress(Rerun):
            state.undo(stopping, store)
        plain.update(stopping)
        assert store.restore(state.session_id(plain)) == state.design(plain)
        state.refresh_widgets(plain)  # the next run begins here
        shown = state.widget_values(state.design(plain))
        assert {key: plain[key] for key in shown} == shown, stop_at
        if stopping.accesses < stop_at:
            break


def test_autosave_failure_becomes_a_message(store, tmp_path):
    session, _ = start(store)
    shutil.rmtree(tmp_path / "autosave", ignore_errors=True)
    (tmp_path / "autosave").write_text("a file where the folder should be")
    state.commit(session, make_design(window=4), store)
    assert "Autosave failed" in state.autosave_note(session)
    assert state.design(session) == make_design(window=4)


def test_messages_and_missing_widgets(store):
    session, _ = start(store)
    state.say(session, "here", "bad value")
    assert state.message(session, "here") == "bad value"
    state.say(session, "here", None)
    assert state.message(session, "here") is None
    del session[keys.NAME]
    session[keys.SEQ_LEN_Q] = 999
    state.refresh_widgets(session)
    assert session[keys.NAME] == "d" and session[keys.SEQ_LEN_Q] == 999


def test_fill_defaults_rewrites_every_key_for_this_run():
    written = []

    class Recording(dict):
        def __setitem__(self, key, value):
            written.append(key)
            super().__setitem__(key, value)

    session = Recording(kept=1)
    state.fill_defaults(session, {"kept": 2, "new": 3})
    assert session == {"kept": 1, "new": 3} and sorted(written) == ["kept", "new"]


def test_history_keeps_fewer_steps_of_huge_layouts(store, monkeypatch):
    session, _ = start(store)
    assert session[keys.HISTORY].limit == state.HISTORY_LIMIT
    for window in range(1, 6):
        state.commit(session, make_design(window=window + 2), store)
    monkeypatch.setattr(state, "HISTORY_BYTES", 3 * make_design().layout.blocks.numel())
    state.commit(session, make_design(window=1), store)
    history = session[keys.HISTORY]
    assert history.limit == 3 and len(history.past) == 3
    assert state.history_limit(make_design()) == 3


def test_no_undo_step_for_a_change_that_changes_nothing(store):
    session, _ = start(store)
    again = changes.rebuild(state.design(session), state.design(session).recipe.steps)
    assert not state.commit(session, replace(again, modified="2030-01-01T00:00:00+00:00"), store)
    painted = changes.edit(state.design(session), EditOp("set", Rect(0, 0, 1, 1)))
    assert state.commit(session, painted, store)
    again = changes.edit(painted, EditOp("set", Cells(((1, 1),))))  # already set
    assert len(again.recipe.edits) == 2
    assert not state.commit(session, again, store)
    history = session[keys.HISTORY]
    assert len(history.past) == 1 and state.design(session).recipe.edits == painted.recipe.edits
    assert state.commit(session, changes.edit(painted, EditOp("toggle", Cells(((1, 1),)))), store)


def test_same_design_tells_real_changes_apart():
    old = make_design()
    assert state.same_design(replace(old, modified="2030-01-01T00:00:00+00:00"), old)
    assert not state.same_design(make_design(name="other"), old)
    assert not state.same_design(make_design(window=3), old)
    cleared = changes.edit(old, EditOp("clear", Rect(7, 0, 7, 0)))  # outside the window: empty
    assert state.same_design(cleared, old)
    assert not state.same_design(old, cleared)  # fewer edits: a real step back (drop edits)
    union = RecipeStep("sliding_window", {"window_blocks": 1}, combine="union")
    more = changes.set_step(old, 1, union)  # a step that adds no block is still a change
    assert more.layout == old.layout and not state.same_design(more, old)


def test_two_tabs_on_one_session_id_keep_both_designs(store):
    """Once the last autosave won: a second tab silently replaced the first tab's work."""
    first, params = start(store)
    second, _ = start(store, params)  # the same URL in another tab
    assert state.session_id(first) == state.session_id(second)
    state.commit(first, make_design(window=3, name="first tab"), store)
    state.commit(second, make_design(window=4, name="second tab"), store)
    assert store.restore(state.session_id(first)).name == "first tab"
    assert state.session_id(second) != state.session_id(first)
    assert store.restore(state.session_id(second)).name == "second tab"
    assert state.autosave_note(second) == state.FORKED
    state.commit(second, make_design(window=5, name="second tab again"), store)
    state.commit(first, make_design(window=5, name="first tab again"), store)
    assert store.restore(state.session_id(second)).name == "second tab again"
    assert store.restore(state.session_id(first)).name == "first tab again"
    assert state.autosave_note(first) is None
    assert state.autosave_note(second) is None
