"""Autosave versions: a session writes only over the autosave it last read or wrote
(``designer/storage.py``; two tabs on one session id)."""

import threading

import pytest

from designer.design import Design
from designer.storage import NO_AUTOSAVE, AutosaveConflict, DesignStore, new_session_id
from tests.factories import random_layout


def design(rng, name):
    return Design(random_layout(rng), name=name)


def test_a_write_over_a_version_it_never_saw_is_refused(tmp_path, rng):
    store, session = DesignStore(tmp_path), new_session_id()
    assert store.autosave_version(session) == NO_AUTOSAVE
    first = store.autosave(session, design(rng, "first"), expected=NO_AUTOSAVE)
    assert store.autosave_version(session) == first
    restored, version = store.restore_versioned(session)
    assert (restored.name, version) == ("first", first)
    second = store.autosave(session, design(rng, "second"), expected=first)
    assert second != first
    with pytest.raises(AutosaveConflict, match="changed since"):
        store.autosave(session, design(rng, "stale"), expected=first)
    with pytest.raises(AutosaveConflict):
        store.autosave(session, design(rng, "new"), expected=NO_AUTOSAVE)
    assert store.restore(session).name == "second"
    store.autosave(session, design(rng, "unchecked"))  # tools and imports write unchecked
    assert store.restore(session).name == "unchecked"
    assert store.restore_versioned(new_session_id()) is None


def test_of_two_writers_on_one_version_exactly_one_wins(tmp_path, rng):
    store, session = DesignStore(tmp_path), new_session_id()
    start = store.autosave(session, design(rng, "start"))
    outcomes = []

    def write(name):
        try:
            store.autosave(session, design(rng, name), expected=start)
            outcomes.append(name)
        except AutosaveConflict:
            outcomes.append("conflict")

    threads = [threading.Thread(target=write, args=(f"tab{k}",)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [o for o in outcomes if o != "conflict"]
    assert len(winners) == 1 and store.restore(session).name == winners[0]
