import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from designer.design import Design
from designer.edit import EditOp, Row, apply_edit
from designer.history import History
from designer.layout import Layout
from tests.factories import random_layout


class ListModel:
    """The obvious model: a list of every value and a cursor on the present one."""

    def __init__(self, value, limit):
        self.values, self.cursor, self.limit = [value], 0, limit

    def push(self, value):
        if value == self.values[self.cursor]:
            return
        self.values = [*self.values[: self.cursor + 1], value]
        self.cursor += 1
        while self.cursor > self.limit:
            self.values.pop(0)
            self.cursor -= 1

    def undo(self):
        self.cursor = max(0, self.cursor - 1)

    def redo(self):
        self.cursor = min(len(self.values) - 1, self.cursor + 1)


operations = st.lists(
    st.one_of(st.tuples(st.just("push"), st.integers(0, 5)), st.sampled_from(["undo", "redo"])),
    max_size=60,
)


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 5), st.integers(1, 6), operations)
def test_history_matches_list_model(first, limit, ops):
    history, model = History(first, limit=limit), ListModel(first, limit)
    for op in ops:
        before = history
        snapshot = (before.present, before.past, before.future)
        if isinstance(op, tuple):
            history = history.push(op[1])
            model.push(op[1])
        else:
            history = getattr(history, op)()
            getattr(model, op)()
        assert (before.present, before.past, before.future) == snapshot, "old history changed"
        assert history.present == model.values[model.cursor]
        assert list(history.past) == model.values[: model.cursor]
        assert list(history.future) == model.values[model.cursor + 1 :]
        assert history.can_undo == (model.cursor > 0)
        assert history.can_redo == (model.cursor < len(model.values) - 1)
        assert len(history.past) <= limit


def test_default_limit_drops_the_oldest():
    history = History(0)
    for value in range(1, 151):
        history = history.push(value)
    assert history.limit == 100 and history.past[0] == 50 and len(history.past) == 100
    for _ in range(100):
        history = history.undo()
    assert history.present == 50 and not history.can_undo
    assert history.undo() is history


def test_push_after_undo_drops_the_redo_branch():
    history = History("a").push("b").push("c").undo()
    assert history.can_redo
    branched = history.push("d")
    assert branched.present == "d" and branched.past == ("a", "b") and not branched.can_redo
    assert branched.redo() is branched


def test_pushing_an_equal_design_is_a_no_op(rng):
    layout = random_layout(rng)
    stamps = {"created": "2026-01-01T00:00:00+00:00", "modified": "2026-01-02T00:00:00+00:00"}
    design = Design(layout, name="d", **stamps)
    history = History(design)
    same = Design(Layout(layout.blocks.clone(), layout.block_size), name="d", **stamps)
    assert same == design and same is not design
    assert history.push(same) is history
    edited = design.with_layout(apply_edit(layout, EditOp("toggle", Row(0))))
    assert history.push(edited).undo().present == design


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"limit": 0}, ValueError, r"limit must be in \[1, 10000\], got 0"),
        ({"limit": 2.0}, TypeError, "limit must be an integer, got float"),
        ({"past": [1]}, TypeError, "past must be a tuple, got list"),
        (
            {"past": (1, 2, 3), "limit": 2},
            ValueError,
            "past must hold at most limit=2 values, got 3",
        ),
    ],
)
def test_bad_history_arguments_are_refused(kwargs, error, message):
    with pytest.raises(error, match=message):
        History(0, **kwargs)


def test_a_push_the_history_calls_the_same_records_no_step():
    by_case = History("a", same=lambda new, old: new.lower() == old.lower())
    assert by_case.push("A") is by_case
    pushed = by_case.push("b")
    assert pushed.present == "b" and pushed.past == ("a",)
    assert pushed.push("B").past == ("a",)
    assert pushed.undo().redo().push("B") == pushed  # undo and redo keep the equivalence


def test_record_pushes_without_comparing():
    history = History([1], same=lambda new, old: True).record([1])  # equal, recorded anyway
    assert history.can_undo and history.present == [1]
    assert History(1, limit=2).record(2).record(3).record(4).past == (2, 3)
