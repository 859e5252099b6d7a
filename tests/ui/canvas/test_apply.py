"""A canvas trigger's strokes, done on a session held in a plain dict: in order, exactly once,
within the budget, whatever the canvas sends."""

import contextlib
import threading

import numpy as np
import pytest

from designer.design import Design
from designer.layout import Layout
from designer.storage import DesignStore
from tests.ui.test_state import make_design
from ui import keys, state
from ui.canvas import apply
from ui.canvas.apply import apply_trigger, estimate_paint
from ui.canvas.strokes import MAX_SEQ, Paint

CLIENT = "canvas-0001"


@pytest.fixture
def store(tmp_path):
    return DesignStore(tmp_path)


@pytest.fixture
def session(store):
    session = {}
    state.init_session(session, {}, store, make_design)  # 2 heads of 8 x 8 blocks
    return session


def cell(seq, row, col, action="toggle", heads=(0,)):
    region = {"kind": "rect", "row0": row, "col0": col, "row1": row, "col1": col}
    heads = None if heads is None else list(heads)
    return {
        "seq": seq,
        "op": "paint",
        "head": 0,
        "action": action,
        "heads": heads,
        "region": region,
    }


def send(session, store, *strokes, client=CLIENT):
    apply_trigger(session, {"client": client, "strokes": list(strokes)}, store)


def blocks(session, head=0):
    return state.design(session).layout.blocks[head].numpy().copy()


def saved(store, session, head=0):
    return store.restore(state.session_id(session)).layout.blocks[head].numpy()


def strokes_done(session):
    return state.box(session).done[keys.PAINT_DONE]


def test_each_stroke_is_done_once_in_order_however_often_it_is_sent(session, store):
    before = blocks(session)
    send(session, store, cell(1, 0, 7))
    send(session, store, cell(1, 0, 7), cell(2, 1, 7))  # the first again, with a new one
    send(session, store, cell(1, 0, 7), cell(2, 1, 7))  # both again: an answer that was lost
    after = blocks(session)
    assert after[0, 7] != before[0, 7] and after[1, 7] != before[1, 7]
    assert (after != before).sum() == 2  # toggled once each, not twice
    assert strokes_done(session) == (CLIENT, 2)
    assert len(session[keys.HISTORY].past) == 2  # one undo step per stroke
    assert np.array_equal(saved(store, session), after)  # autosaved


def test_undo_and_redo_strokes_walk_the_history_in_order(session, store):
    before = blocks(session)
    send(session, store, cell(1, 0, 7), cell(2, 1, 7), {"seq": 3, "op": "undo"})
    once = blocks(session)
    assert once[0, 7] != before[0, 7] and once[1, 7] == before[1, 7]
    send(session, store, {"seq": 4, "op": "redo"}, {"seq": 5, "op": "undo"},
         {"seq": 6, "op": "undo"}, {"seq": 7, "op": "undo"})  # fmt: skip
    assert np.array_equal(blocks(session), before) and not session[keys.HISTORY].can_undo
    assert np.array_equal(saved(store, session), before)


def test_a_new_canvas_counts_from_its_own_first_stroke(session, store):
    send(session, store, cell(1, 0, 7))
    send(session, store, cell(40, 1, 7), client="canvas-0002")  # a page that painted before
    send(session, store, cell(40, 1, 7), cell(41, 2, 7), client="canvas-0002")
    assert strokes_done(session) == ("canvas-0002", 41)
    assert len(session[keys.HISTORY].past) == 3


def test_a_huge_stroke_number_never_stops_painting(session, store):
    """Once, a ``seq`` of 2**60 became the last stroke done, so no later stroke was ever new."""
    before = blocks(session)
    send(session, store, cell(1 << 60, 3, 3))
    assert "could not be read" in state.message(session, keys.EDITOR_PLACE)
    send(session, store, cell(1, 4, 4))
    send(session, store, cell(5, 3, 4))  # a jump past the next stroke of this canvas
    assert "skipped strokes 2 to 4" in state.message(session, keys.EDITOR_PLACE)
    assert strokes_done(session) == (CLIENT, 1)
    send(session, store, cell(MAX_SEQ, 3, 3), client="canvas-0009")  # the largest allowed
    send(session, store, cell(2, 4, 5))
    assert strokes_done(session) == (CLIENT, 2)
    assert (blocks(session) != before).sum() == 3  # (4, 4), (4, 5), and (3, 3) by the other
    assert state.message(session, keys.EDITOR_PLACE) is None


def test_huge_integers_and_deep_nesting_get_a_short_message(session, store):
    before = blocks(session)
    huge = cell(1, 0, 0)
    huge["region"]["row0"] = int("9" * 4000)
    nested: list = []
    for _ in range(5000):
        nested = [nested]
    send(session, store, huge, {**cell(2, 0, 0), "region": nested}, cell(3, 5, 5))
    message = state.message(session, keys.EDITOR_PLACE)
    assert message.startswith("2 strokes were not applied: mask row0") or "row0" in message
    assert len(message) <= 400
    assert strokes_done(session) == (CLIENT, 3)
    assert (blocks(session) != before).sum() == 1  # the third stroke still applies
    for value in ({"client": CLIENT, "strokes": nested}, nested, {"client": "x" * 5000}):
        apply_trigger(session, value, store)
        assert len(state.message(session, keys.EDITOR_PLACE)) <= 400


def test_painting_painted_blocks_records_no_step(session, store):
    layout = state.design(session).layout
    row, col = map(int, np.argwhere(layout.blocks[0].numpy())[0])
    send(session, store, cell(1, row, col, action="set"), cell(2, row, col, action="set"))
    assert not session[keys.HISTORY].can_undo and strokes_done(session) == (CLIENT, 2)


def test_strokes_apply_to_the_heads_they_were_drawn_for(session, store):
    before = [blocks(session, h) for h in (0, 1)]
    send(session, store, cell(1, 0, 7, heads=None), cell(2, 1, 7, heads=(1,)))
    after = [blocks(session, h) for h in (0, 1)]
    assert (after[0] != before[0]).sum() == 1 and (after[1] != before[1]).sum() == 2


def test_strokes_past_the_budget_wait_for_the_next_trigger(session, store, monkeypatch):
    one, _ = estimate_paint(state.design(session).layout, Paint(0, "set", None))
    autosave = apply.estimate_autosave(state.design(session))
    monkeypatch.setattr(apply, "MAX_SECONDS", (2.5 * one + autosave) / 1e9)
    strokes = [cell(seq, seq, 0) for seq in range(1, 6)]
    send(session, store, *strokes)
    assert strokes_done(session) == (CLIENT, 2)  # two fit, three wait
    assert state.message(session, keys.EDITOR_PLACE) is None
    send(session, store, *strokes[2:])
    send(session, store, *strokes[4:])
    assert strokes_done(session) == (CLIENT, 5) and len(session[keys.HISTORY].past) == 5
    monkeypatch.setattr(apply, "MAX_SECONDS", (0.5 * one) / 1e9)
    send(session, store, cell(6, 7, 7))  # one stroke past the budget on its own: refused
    assert strokes_done(session) == (CLIENT, 6) and len(session[keys.HISTORY].past) == 5
    assert "more than the limit of" in state.message(session, keys.EDITOR_PLACE)


def test_memory_counts_the_undo_steps_a_trigger_adds(session, store, monkeypatch):
    cells = state.design(session).layout.blocks.numel()
    transient = apply.STROKE_COPIES * cells
    monkeypatch.setattr(apply, "MAX_EXTRA_BYTES", transient + 2 * cells)
    send(session, store, *[cell(seq, seq, 1) for seq in range(1, 5)])
    assert strokes_done(session) == (CLIENT, 2)


def test_the_largest_design_does_a_burst_of_strokes_in_budget():
    layout = Layout.zeros(16, 2048, 2048, 16)
    ns, transient = estimate_paint(layout, Paint(0, "set", None))
    strokes = (apply.MAX_SECONDS * 1e9 - apply.estimate_autosave(Design(layout))) // ns
    assert 4 <= strokes <= 16 and transient + 4 * layout.blocks.numel() <= apply.MAX_EXTRA_BYTES


def test_two_threads_applying_at_once_lose_nothing(session, store):
    """Streamlit may run a new rerun's callback while the last one's still runs."""
    before = blocks(session)
    strokes = [cell(seq, seq % 8, seq // 8) for seq in range(1, 41)]
    threads = [
        threading.Thread(target=send, args=(session, store, *strokes[: 20 + 10 * k]))
        for k in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    send(session, store, *strokes)
    assert (blocks(session) != before).sum() == 40
    assert strokes_done(session) == (CLIENT, 40)


class Rerun(BaseException):
    """What Streamlit raises inside a callback when a newer rerun waits (a BaseException)."""


class StoppedAt(dict):
    """Session state that stops the run at its ``stop_at``-th read or write, as Streamlit's
    does at any access while a newer rerun waits (``SafeSessionState``'s yield check)."""

    def __init__(self, data, stop_at):
        super().__init__(data)
        self.accesses, self.stop_at = 0, stop_at

    def _tick(self):
        self.accesses += 1
        if self.accesses == self.stop_at:
            raise Rerun

    def __getitem__(self, key):
        self._tick()
        return super().__getitem__(key)

    def __setitem__(self, key, value):
        self._tick()
        super().__setitem__(key, value)

    def __contains__(self, key):
        self._tick()
        return super().__contains__(key)

    def get(self, key, default=None):
        self._tick()
        return super().get(key, default)


def test_a_rerun_stopping_a_trigger_anywhere_loses_nothing_and_does_nothing_twice(store):
    """Once, a rerun that stopped the trigger between the autosave and the record of its
    version made the next stroke's autosave look like another tab's (the design forked to a
    new address), and one between the history and the strokes done did a toggle twice."""
    strokes = [cell(1, 0, 7), cell(2, 7, 0), {"seq": 3, "op": "undo"}, cell(4, 3, 4)]
    expected = None
    for stop_at in range(1, 200):
        plain = {}
        state.init_session(plain, {}, store, make_design)
        first_id = state.session_id(plain)
        stopping = StoppedAt(plain, stop_at)
        with contextlib.suppress(Rerun):
            send(stopping, store, *strokes)
        plain.update(stopping)  # what the stopped run had written
        send(plain, store, *strokes)  # the canvas sends again: the rest is done once
        assert state.session_id(plain) == first_id and state.autosave_note(plain) is None
        assert strokes_done(plain) == (CLIENT, 4)
        result = store.restore(first_id).layout.blocks.numpy()
        assert np.array_equal(result, blocks(plain, head=slice(None)))
        if expected is None:
            expected = result
        assert np.array_equal(result, expected), stop_at
        assert len(state.history(plain).past) == 2 and not state.history(plain).can_redo
        if stopping.accesses < stop_at:  # the run was never stopped: every place was tried
            break
    else:
        raise AssertionError("the trigger touched the session state more than 200 times")
    start = make_design().layout.blocks.numpy()
    assert start[0, 0, 7] != expected[0, 0, 7] and start[0, 3, 4] != expected[0, 3, 4]
    assert np.array_equal(start[0, 7, 0], expected[0, 7, 0])  # stroke 2, undone


def test_strokes_resent_after_the_server_let_the_history_go_are_not_done_again(session, store):
    strokes = [cell(1, 0, 7), cell(2, 7, 0)]
    send(session, store, *strokes)
    after = blocks(session, head=slice(None))
    state.box(session).release()  # the page was away; its answer never arrived
    send(session, store, *strokes)  # refused for now: the next run reopens the autosave
    state.init_session(session, {keys.SESSION_QUERY_PARAM: state.session_id(session)}, store,
                       make_design)  # fmt: skip
    send(session, store, *strokes)
    assert np.array_equal(blocks(session, head=slice(None)), after)
    assert strokes_done(session) == (CLIENT, 2)


def test_strokes_on_a_128k_token_design_paint_its_runs_within_the_click_budget(store):
    """A 32 x 2048^2 design held as runs: a brush mask and a rect, as the canvas sends them
    from a window (cells in the head's blocks), each one undo step and autosaved."""
    import base64
    import time

    import torch

    from designer.patterns.attention_sinks import attention_sinks_runs

    runs = attention_sinks_runs(32, 2048, 2048, sink_blocks=1, window_blocks=64)
    session = {}
    state.init_session(session, {}, store, lambda: Design(Layout(runs, 64), causal=True))
    mask = np.zeros((3, 3), dtype=bool)
    mask[[0, 1, 2], [0, 1, 2]] = True  # a diagonal brush stroke at (1000, 1400)
    bits = base64.b64encode(np.packbits(mask).tobytes()).decode()
    brush = {"kind": "mask", "row0": 1000, "col0": 1400, "rows": 3, "cols": 3, "bits": bits}
    stroke = {**cell(1, 0, 0, action="set"), "region": brush}
    started = time.process_time()
    send(session, store, stroke)
    spent = time.process_time() - started
    send(session, store, cell(2, 1500, 1480, action="clear", heads=None))
    layout = state.design(session).layout
    index = torch.tensor([[0, 1000, 1400], [0, 1001, 1401], [0, 1000, 1401], [5, 1500, 1480]])
    assert layout.runs.contains(index).tolist() == [True, True, False, False]
    assert layout.nnz == runs.nnz + 3 - 32
    assert store.restore(state.session_id(session)).layout == layout
    assert len(state.history(session).past) == 2
    assert spent < 1.0  # the target is 0.3 s of server time on an idle machine
