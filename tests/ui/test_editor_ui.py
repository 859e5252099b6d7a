"""The Paint tab's widgets beside the canvas, driven headless with ``AppTest``."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from designer.analysis import analyse, head_view
from designer.storage import DATA_DIR_ENV
from tests.ui.test_app import unescaped
from ui import keys

APP = str(Path(__file__).resolve().parents[2] / "app.py")


@pytest.fixture
def paint(tmp_path, monkeypatch):
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["tab"] = "Paint"
    at.run()
    assert not at.exception
    return at


def expander(at, label):
    return next(e for e in at.expander if e.label == label)


def test_an_expander_showing_its_error_stays_open(paint):
    at = paint
    at.number_input(key=keys.BAND_LOW).set_value(5)
    at.number_input(key=keys.BAND_HIGH).set_value(1).run()
    at.button(key="apply_band").click().run()
    band = expander(at, "Diagonal band")
    assert band.proto.expanded and "low <= high" in unescaped(band.error[0].value)
    at.button(key="copy_head").click().run()
    copy = expander(at, "Copy this head")
    assert copy.proto.expanded and "Pick the heads" in unescaped(copy.error[0].value)
    assert not at.session_state[keys.HISTORY].can_undo


def test_painting_blocks_already_painted_records_no_undo_step(paint):
    at = paint
    before = at.session_state[keys.HISTORY].present
    assert before.layout.blocks[:, range(64), range(64)].all()  # the diagonal is painted
    at.button(key="apply_band").click().run()  # set the diagonal again
    history = at.session_state[keys.HISTORY]
    assert not history.can_undo and history.present.recipe == before.recipe
    at.segmented_control(key=keys.EDIT_ACTION).set_value("toggle").run()
    at.button(key="apply_band").click().run()
    assert len(at.session_state[keys.HISTORY].past) == 1


def test_chosen_heads_include_the_head_on_screen(paint):
    at = paint
    before = at.session_state[keys.HISTORY].present.layout.blocks.clone()
    at.radio(key=keys.EDIT_SCOPE).set_value("this and chosen heads").run()
    assert 0 not in at.multiselect(key=keys.EDIT_HEADS).options  # the head shown goes anyway
    at.multiselect(key=keys.EDIT_HEADS).set_value([5])
    at.session_state[keys.EDIT_ACTION] = "clear"  # the diagonal, active in every head
    at.number_input(key=keys.BAND_LOW).set_value(0)
    at.number_input(key=keys.BAND_HIGH).set_value(0).run()
    at.button(key="apply_band").click().run()
    after = at.session_state[keys.HISTORY].present.layout.blocks
    changed = [h for h in range(after.shape[0]) if not after[h].equal(before[h])]
    assert changed == [0, 5]


def test_showing_a_chosen_head_keeps_the_page_whole(paint):
    at = paint
    at.radio(key=keys.EDIT_SCOPE).set_value("this and chosen heads").run()
    at.multiselect(key=keys.EDIT_HEADS).set_value([3, 5]).run()
    at.selectbox(key=keys.EDIT_HEAD).set_value(3).run()
    assert not at.exception
    assert at.multiselect(key=keys.EDIT_HEADS).value == [5]


def test_the_legend_beside_the_canvas_counts_the_head_shown(paint):
    at = paint
    at.selectbox(key=keys.EDIT_HEAD).set_value(3).run()
    design = at.session_state[keys.HISTORY].present
    head, every_head = head_view(design, 3), analyse(design).stats
    legend = next(h.proto.body for h in at.get("html") if "Head 3" in h.proto.body)
    for width, tiles in head.tiles:
        assert f"{width}×{width} ({width * 64} tokens): {tiles:,} tiles" in legend
    assert f"{every_head.tiles:,} tiles" not in legend  # not the count over all 8 heads
