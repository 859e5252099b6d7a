"""A 32-head x 128K-token design (32 x 2048^2 blocks, held as runs) in a real browser: the
Paint tab draws it by windows, a zoom asks for a window at full detail, a click paints it, the
window is coloured by tiles once the segmentation beside the page is done, a pan and a zoom out
redraw it, a rectangle zoomed out paints every block under it, and a reload finds the strokes
in the autosave."""

from __future__ import annotations

import math
import secrets

import pytest
import torch

from designer.analysis import load_scan_kernels
from designer.design import Design
from designer.edit_runs import painted_runs, region_runs
from designer.layout import Layout
from designer.patterns.attention_sinks import attention_sinks_runs
from designer.regions import Rect
from tests.ui.browser_app import (
    CANVAS,
    EMPTY,
    canvas_pixel,
    launch,
    pick,
    served_for_tests,
    wait_canvas,
    zoom_at,
    zoomed_point,
)
from ui.canvas.payload import _shade
from ui.pictures import width_colour

pytestmark = pytest.mark.e2e
playwright = pytest.importorskip("playwright.sync_api")

ROW, COL = 1000, 1400  # above the window: empty until painted


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # Compiled here first (into numba's cache), the server's kernels load in a second rather
    # than compiling for a minute of the time the colours are waited for below.
    load_scan_kernels()
    yield from served_for_tests(tmp_path_factory, "long")


def window(page) -> list[int]:
    """The window the canvas shows: row0, col0, rows, cols, step."""
    return [int(v) for v in page.locator(CANVAS).get_attribute("data-window").split()]


def rgb(hex_colour: str) -> list[int]:
    return [int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)]


def wait_pixel(page, row: int, col: int, colours: list[list[int]], timeout_ms: float = 60_000):
    """Wait until the canvas shows block ``(row, col)`` in one of ``colours``."""
    deadline = page.evaluate("performance.now()") + timeout_ms
    while page.evaluate("performance.now()") < deadline:
        if canvas_pixel(page, row, col) in colours:
            return
        page.wait_for_timeout(100)
    raise TimeoutError(f"block {(row, col)} shows {canvas_pixel(page, row, col)}, not {colours}")


def wait_window(page, test, timeout_ms: float = 60_000) -> list[int]:
    """Wait until the canvas shows (ready) a window for which ``test`` holds."""
    deadline = page.evaluate("performance.now()") + timeout_ms
    while page.evaluate("performance.now()") < deadline:
        canvas = page.locator(CANVAS)
        if canvas.get_attribute("data-ready") == "true" and test(window(page)):
            return window(page)
        page.wait_for_timeout(100)
    raise TimeoutError(f"no such window came; the canvas shows {window(page)}")


def view_blocks(page) -> tuple[int, int, int, int]:
    """The blocks on screen: rows ``r0:r1`` and columns ``c0:c1`` of the head."""
    canvas = page.locator(CANVAS)
    scale, x, y = map(float, canvas.get_attribute("data-view").split())
    width, height = canvas.evaluate("c => [parseFloat(c.style.width), parseFloat(c.style.height)]")
    r0, c0 = max(0, math.floor(-y / scale)), max(0, math.floor(-x / scale))
    return (
        r0,
        min(2048, math.ceil((height - y) / scale)),
        c0,
        min(2048, math.ceil((width - x) / scale)),
    )


def covers(shown: list[int], view: tuple[int, int, int, int]) -> bool:
    """Whether window ``shown`` holds every block of ``view``."""
    row0, col0, rows, cols, _ = shown
    r0, r1, c0, c1 = view
    return row0 <= r0 and col0 <= c0 and row0 + rows >= r1 and col0 + cols >= c1


def drag_right(page, button: str) -> None:
    """Drag across the middle of the canvas from its left tenth to its right tenth."""
    box = page.locator(CANVAS).bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.1, y)
    page.mouse.down(button=button)
    page.mouse.move(box["x"] + box["width"] * 0.9, y, steps=5)
    page.mouse.up(button=button)


def test_paint_pan_zoom_and_reload_a_128k_token_design(server):
    url, store, log_path = server
    runs = attention_sinks_runs(32, 2048, 2048, sink_blocks=1, window_blocks=64)
    session = secrets.token_urlsafe(12)
    store.autosave(session, Design(Layout(runs, 64), name="long context", causal=True))
    with playwright.sync_playwright() as driver:
        page = launch(driver).new_page(viewport={"width": 1480, "height": 1000})
        page.set_default_timeout(120_000)
        page.goto(f"{url}/?session={session}")
        page.get_by_role("tab", name="Paint").click()
        wait_canvas(page, timeout_s=120)
        canvas = page.locator(CANVAS)
        assert (canvas.get_attribute("data-rows"), canvas.get_attribute("data-cols")) == (
            "2048",
            "2048",
        )
        assert window(page) == [0, 0, 2048, 2048, 2]  # the whole head, zoomed out
        assert canvas_pixel(page, 500, 480) != EMPTY and canvas_pixel(page, 500, 900) == EMPTY

        zoom_at(page, ROW, COL, notches=5)  # past one pixel a block: full detail of a window
        shown = wait_window(page, lambda w: w[4] == 1)
        assert shown[2] < 2048 and shown[0] <= ROW < shown[0] + shown[2]
        page.mouse.click(*zoomed_point(page, ROW, COL))
        wait_canvas(page, 1, timeout_s=120)
        page.locator(f"{CANVAS}[data-pending='0']").wait_for()
        index = torch.tensor([[0, ROW, COL], [0, ROW, COL + 1]])
        assert store.restore(session).layout.runs.contains(index).tolist() == [True, False]
        assert canvas_pixel(page, ROW, COL) != EMPTY

        pick(page, "row")  # a whole row, cut to the blocks on screen
        page.mouse.click(*zoomed_point(page, ROW + 4, COL))
        wait_canvas(page, 2, timeout_s=120)
        page.locator(f"{CANVAS}[data-pending='0']").wait_for()
        _, _, first, past = view_blocks(page)
        cols = torch.arange(2048)
        row = torch.stack([torch.zeros_like(cols), torch.full_like(cols, ROW + 4), cols], 1)
        painted = store.restore(session).layout.runs.contains(row)
        expected = runs.contains(row) | ((cols >= first) & (cols < past))
        assert first > 0 and past < 2048 and torch.equal(painted, expected)
        pick(page, "brush")
        # Once segmented beside the page, the lone painted block is a 1 x 1 tile, drawn in its
        # colour (or its darker shade, for an odd tile) as on a dense design.
        wait_pixel(page, ROW, COL, [rgb(width_colour(1)), rgb(_shade(width_colour(1)))])

        # Pan with the middle button, a drag at a time, to the sinks' column: the view leaves
        # the window (which may reach far past the view: its margin is the view's size when it
        # was asked, at any zoom on the way in), and a new window comes at full detail.
        shown, drags = window(page), 0
        assert shown[1] > 0
        while view_blocks(page)[2] > 0:
            assert drags < 12, f"the view never reached column 0: {view_blocks(page)}"
            drag_right(page, button="middle")
            drags += 1
        moved = wait_window(page, lambda w: w[1] == 0 and w[4] == 1)
        r0, r1, c0, c1 = view_blocks(page)
        assert covers(moved, (r0, r1, c0, c1))
        # Cells wholly on screen (the view's edge ones may be cut) and the sinks' column, drawn
        # as the stored design holds them.
        rows = torch.linspace(r0 + 1, r1 - 2, 7).long()
        cells = torch.cat([torch.cartesian_prod(rows, torch.linspace(c0 + 1, c1 - 2, 7).long()),
                           torch.stack([rows, torch.zeros_like(rows)], 1)])  # fmt: skip
        stored = store.restore(session).layout.runs
        probe = torch.cat([torch.zeros(len(cells), 1, dtype=torch.long), cells], 1)
        drawn = [canvas_pixel(page, r, c) != EMPTY for r, c in cells.tolist()]
        assert drawn == stored.contains(probe).tolist() and all(drawn[-7:])

        box = canvas.bounding_box()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        for _ in range(8):  # back out: the density picture again
            page.mouse.wheel(0, 480)
        step = wait_window(page, lambda w: w[4] > 1)[4]

        # Zoomed out, a rectangle paints every block of the buckets it covers, as one edit.
        before = store.restore(session).layout.runs
        pick(page, "rect")
        page.mouse.move(*zoomed_point(page, 300, 1500))
        page.mouse.down()
        page.mouse.move(*zoomed_point(page, 500, 1700), steps=4)
        page.mouse.up()
        wait_canvas(page, 3, timeout_s=120)
        page.locator(f"{CANVAS}[data-pending='0']").wait_for()
        box = Rect(300 // step * step, 1500 // step * step, (500 // step + 1) * step - 1,
                   (1700 // step + 1) * step - 1)  # fmt: skip
        expected = painted_runs(before.select_heads([0]), "set", region_runs(box, 2048, 2048))
        assert store.restore(session).layout.runs.select_heads([0]) == expected
        assert canvas_pixel(page, 400, 1600) != EMPTY
        pick(page, "brush")

        page.reload()
        page.get_by_role("tab", name="Paint").click()
        wait_canvas(page, timeout_s=120)
        assert store.restore(session).layout.runs.contains(index).tolist() == [True, False]
        assert page.locator('[data-testid="stException"]').count() == 0
    assert "Traceback" not in log_path.read_text()
