"""The canvas's JavaScript alone in a real browser (no Streamlit): the page calls the component's
function with payloads Python makes for a head sent by windows, as Streamlit would, and records
the triggers the canvas fires.

A window that arrives while a stroke is drawn (one asked for before the stroke began) must not
cancel the stroke: the stroke is committed in the blocks it was drawn on, then the new window
is shown.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import designer.layout
from designer.block_runs import BlockRuns
from designer.layout import Layout
from tests.ui.browser_app import CANVAS, launch, wait_canvas, zoomed_point
from ui.canvas import JS_FILES
from ui.canvas.strokes import MAX_STROKES, Paint, bits_chars, read_trigger
from ui.canvas.viewport import View, window_payload

pytestmark = pytest.mark.e2e
playwright = pytest.importorskip("playwright.sync_api")

URL = "http://canvas.test/"
SIDE = 64
PAGE = """<!doctype html><html><head><style>{css}</style></head><body><div id="host"></div>
<script type="module">{js}
window.sent = [];
const host = document.getElementById("host");
window.show = (data) => paintCanvas({{
  data, parentElement: host, setTriggerValue: (name, value) => window.sent.push([name, value]),
}});
</script></body></html>"""


def canvas_data(layout: Layout, view: View) -> dict:
    """What the editor sends the canvas for ``view`` of head 0 (``editor_ui``)."""
    return {
        **window_payload(layout, 0, view),
        "head": 0, "n_heads": 1, "action": "set", "heads": [0], "client": "", "done": 0,
        "max_strokes": MAX_STROKES, "max_mask_chars": 2 * bits_chars(SIDE * SIDE),
    }  # fmt: skip


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
    with pytest.MonkeyPatch.context() as patch:  # a small head, held as runs as a long one is
        patch.setattr(designer.layout, "DENSE_CELLS", 0)
        layout = Layout(BlockRuns.from_dense(torch.zeros(1, SIDE, SIDE, dtype=torch.bool)), 16)
    first, moved = View(0, 0, SIDE, SIDE, 1), View(8, 4, SIDE - 8, SIDE - 4, 1)
    page.evaluate("data => window.show(data)", canvas_data(layout, first))
    wait_canvas(page)
    page.mouse.move(*zoomed_point(page, 10, 10))
    page.mouse.down()
    page.mouse.move(*zoomed_point(page, 10, 14), steps=4)
    page.evaluate("data => window.show(data)", canvas_data(layout, moved))  # mid-stroke
    page.mouse.move(*zoomed_point(page, 10, 20), steps=4)
    page.mouse.up()
    edits = [value for name, value in page.evaluate("window.sent") if name == "edit"]
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
