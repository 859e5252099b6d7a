"""The canvas's JavaScript alone in a real browser (no Streamlit): the page calls the component's
function with payloads Python makes for a head sent by windows, as Streamlit would, and records
the triggers the canvas fires.

A window that arrives while a stroke is drawn (one asked for before the stroke began) must not
cancel the stroke: the stroke is committed in the blocks it was drawn on, then the new window
is shown. Zoomed out, a rectangle (row, column) of the density picture's buckets paints every
block they hold, exactly as the dense edit of those blocks; the brush is refused with a word.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import designer.layout
from designer.block_runs import BlockRuns
from designer.edit import EditOp, apply_edit
from designer.layout import Layout
from designer.regions import Rect
from tests.ui.browser_app import CANVAS, EMPTY, canvas_pixel, launch, wait_canvas, zoomed_point
from ui.canvas import JS_FILES
from ui.canvas.strokes import MAX_STROKES, Paint, bits_chars, read_trigger
from ui.canvas.viewport import View, window_payload

pytestmark = pytest.mark.e2e
playwright = pytest.importorskip("playwright.sync_api")

URL = "http://canvas.test/"
SIDE = 64
#: A bucket all of whose blocks are active, zoomed out.
ACTIVE = [47, 62, 92]
PAGE = """<!doctype html><html><head><style>{css}</style></head><body><div id="host"></div>
<script type="module">{js}
window.sent = [];
const host = document.getElementById("host");
window.show = (data) => paintCanvas({{
  data, parentElement: host, setTriggerValue: (name, value) => window.sent.push([name, value]),
}});
</script></body></html>"""


def canvas_data(layout: Layout, view: View, action: str = "set") -> dict:
    """What the editor sends the canvas for ``view`` of head 0 (``editor_ui``)."""
    side = layout.n_q_blocks
    return {
        **window_payload(layout, 0, view),
        "head": 0, "n_heads": layout.n_heads, "action": action, "heads": [0], "client": "",
        "done": 0, "max_strokes": MAX_STROKES, "max_mask_chars": 2 * bits_chars(side * side),
    }  # fmt: skip


def held_as_runs(grid: torch.Tensor) -> Layout:
    """A small layout held as runs, as a long one is."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(designer.layout, "DENSE_CELLS", 0)
        return Layout(BlockRuns.from_dense(grid), 16)


def sent_edits(page) -> list:
    return [value for name, value in page.evaluate("window.sent") if name == "edit"]


@pytest.fixture
def page():
    js = "\n".join(path.read_text(encoding="utf-8") for path in JS_FILES)
    css = (JS_FILES[0].parent / "paint_canvas.css").read_text(encoding="utf-8")
    html = PAGE.format(css=css, js=js + "\nwindow.paintCanvas = paintCanvas;")
    with playwright.sync_playwright() as driver:
        page = launch(driver).new_page(viewport={"width": 900, "height": 800})
        page.route(URL, lambda route: route.fulfill(body=html, content_type="text/html"))
        page.goto(URL)
        yield page


def test_a_window_arriving_mid_stroke_keeps_the_stroke(page):
    layout = held_as_runs(torch.zeros(1, SIDE, SIDE, dtype=torch.bool))
    first, moved = View(0, 0, SIDE, SIDE, 1), View(8, 4, SIDE - 8, SIDE - 4, 1)
    page.evaluate("data => window.show(data)", canvas_data(layout, first))
    wait_canvas(page)
    page.mouse.move(*zoomed_point(page, 10, 10))
    page.mouse.down()
    page.mouse.move(*zoomed_point(page, 10, 14), steps=4)
    page.evaluate("data => window.show(data)", canvas_data(layout, moved))  # mid-stroke
    page.mouse.move(*zoomed_point(page, 10, 20), steps=4)
    page.mouse.up()
    edits = sent_edits(page)
    assert len(edits) == 1, json.dumps(page.evaluate("window.sent"))[:400]
    ((seq, stroke),) = read_trigger(edits[0], 1, SIDE, SIDE).strokes
    assert seq == 1 and isinstance(stroke, Paint) and stroke.action == "set"
    painted = np.zeros((SIDE, SIDE), dtype=bool)
    mask = stroke.region
    painted[mask.row0 : mask.row0 + mask.cells.shape[0],
            mask.col0 : mask.col0 + mask.cells.shape[1]] = mask.cells  # fmt: skip
    expected = np.zeros((SIDE, SIDE), dtype=bool)
    expected[10, 10:21] = True
    assert np.array_equal(painted, expected)
    canvas = page.locator(CANVAS)  # then the window that came meanwhile is shown
    page.wait_for_function("c => c.dataset.window === '8 4 56 60 1'", arg=canvas.element_handle())


@pytest.mark.parametrize(("tool", "action"), [("rect", "toggle"), ("row", "set"),
                                              ("column", "clear")])  # fmt: skip
def test_zoomed_out_a_tool_paints_every_block_of_its_buckets(page, tool, action):
    side, step = 62, 4  # 16 buckets a side, the last of 2 blocks
    grid = torch.from_numpy(np.random.default_rng(7).random((2, side, side)) < 0.3)
    layout = held_as_runs(grid)
    page.evaluate("data => window.show(data)", canvas_data(layout, View(0, 0, side, side, step),
                                                           action))  # fmt: skip
    wait_canvas(page)
    page.locator(f'[data-paint="{tool}"]').click()
    page.mouse.move(*zoomed_point(page, 5, 9))
    page.mouse.down()
    page.mouse.move(*zoomed_point(page, 21, 61), steps=4)
    page.mouse.up()
    (edit,) = sent_edits(page)
    ((_, stroke),) = read_trigger(edit, 2, side, side).strokes
    # The buckets from (1, 2) to (5, 15), the last cut to the head: on screen, a row covers
    # every column and a column every row.
    rows = (0, side - 1) if tool == "column" else (4, 23)
    cols = (0, side - 1) if tool == "row" else (8, side - 1)
    assert stroke.region == Rect(rows[0], cols[0], rows[1], cols[1])
    op = EditOp(action, stroke.region, stroke.heads)
    expected = apply_edit(Layout(grid, 16), op).blocks
    assert torch.equal(apply_edit(layout, op).to_runs().to_dense(), expected.bool())
    shown = ACTIVE if action == "set" else EMPTY  # each bucket covered whole, shaded at once
    if action != "toggle":
        assert canvas_pixel(page, 10, 40) == shown


def test_zoomed_out_the_brush_is_refused_with_a_word(page):
    layout = held_as_runs(torch.zeros(1, SIDE, SIDE, dtype=torch.bool))
    page.evaluate("data => window.show(data)", canvas_data(layout, View(0, 0, SIDE, SIDE, 4)))
    wait_canvas(page)
    page.mouse.click(*zoomed_point(page, 10, 10))
    assert sent_edits(page) == []
    assert "zoom in" in page.locator(".paint-readout").inner_text()
