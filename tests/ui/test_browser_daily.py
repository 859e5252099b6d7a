"""In a real browser: comparing two designs, making a model design, and the page-wide keys.

One server for the module; each test opens a fresh session. Waits are for conditions (the app
idle, a text shown), never fixed sleeps beyond Streamlit's own rerun.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from designer import changes
from designer.formats.model_file import read_model_file
from designer.storage import load_default_design
from tests.ui.browser_app import (
    CANVAS,
    canvas_point,
    launch,
    pick,
    served_for_tests,
    settle,
    wait_canvas,
)

pytestmark = pytest.mark.e2e
playwright = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from served_for_tests(tmp_path_factory, "daily")


@pytest.fixture
def page(server):
    with playwright.sync_playwright() as driver:
        browser = launch(driver)
        context = browser.new_context(viewport={"width": 1480, "height": 1000},
                                      accept_downloads=True)  # fmt: skip
        page = context.new_page()
        page.set_default_timeout(60_000)
        page.goto(server[0])
        page.locator('[data-testid="stMetricValue"]').first.wait_for(timeout=120_000)
        settle(page)
        yield page
        browser.close()


def open_tab(page, name: str) -> None:
    page.get_by_role("tab", name=name, exact=True).click()
    settle(page)


def choose(page, label: str, option: str) -> None:
    page.get_by_role("combobox", name=label).click()
    page.get_by_role("option", name=option, exact=True).click()
    settle(page)


def assert_clean(page, log_path: Path) -> None:
    assert page.locator('[data-testid="stException"]').count() == 0
    assert "Traceback" not in log_path.read_text()


def wider_globals():
    """The default design with two more global blocks: 8 heads, 64² blocks, another design."""
    default = load_default_design()
    step = default.recipe.steps[0]
    params = {**step.params, "num_global_blocks": 4}
    return changes.set_step(default, 0, replace(step, params=params))


def test_compare_a_library_design_beside_the_one_on_screen(server, page):
    _, store, log_path = server
    other = wider_globals()
    store.save("wider globals", other)
    open_tab(page, "Compare")
    choose(page, "A library design", "wider globals")
    page.get_by_text("blocks differ").wait_for()
    mine, theirs = load_default_design().layout.blocks[0], other.layout.blocks[0]
    differ = int((mine ^ theirs).sum())
    assert page.get_by_text(f"{differ:,} blocks differ").count() == 1
    assert page.get_by_text(f"only in the other: {int((theirs & ~mine).sum()):,}").count() == 1
    pictures = page.locator('[data-testid="stImage"]')
    assert pictures.count() == 3  # this design, the other, the diff
    assert_clean(page, log_path)


def test_make_a_model_design_and_download_it(server, page, tmp_path):
    _, store, log_path = server
    store.save("wider globals", wider_globals())
    open_tab(page, "Model")
    page.get_by_role("button", name="Start from the design on screen").click()
    settle(page)
    page.get_by_text("layers 0–31").first.wait_for(state="attached")  # a data grid cell
    for label, value in (("From layer", "4"), ("To layer", "7")):
        box = page.get_by_label(label)
        box.fill(value)
        box.press("Enter")
        settle(page)
    choose(page, "Design", "wider globals")
    page.get_by_role("button", name="Assign").click()
    settle(page)
    page.get_by_text("layers 4–7").first.wait_for(state="attached")
    with page.expect_download() as download:
        page.get_by_role("button", name="Download the model design").click()
    saved = tmp_path / download.value.suggested_filename
    download.value.save_as(saved)
    model = read_model_file(saved)
    assert [g.label for g in model.groups] == ["layers 0–3", "layers 4–7", "layers 8–31"]
    assert model.design_of(5).name == "wider globals"
    assert model.design_of(0).layout == load_default_design().layout
    assert_clean(page, log_path)


def pressed(page, tool: str) -> bool:
    return page.locator(f'[data-paint="{tool}"]').get_attribute("aria-pressed") == "true"


def test_page_wide_keys_pick_tools_undo_and_change_heads_without_painting(server, page):
    _, store, log_path = server
    open_tab(page, "Paint")
    wait_canvas(page)
    session = page.url.split("session=")[1].split("&")[0]
    pick(page, "brush")  # the focus is on the toolbar button now, not the canvas
    page.keyboard.press("l")
    assert pressed(page, "lasso"), "a tool key right after clicking a tool button switches"
    page.get_by_role("heading").first.click()  # the focus is nowhere in particular
    page.keyboard.press("m")
    assert pressed(page, "rect")
    page.keyboard.press("b")
    assert pressed(page, "brush")
    name = page.get_by_role("textbox", name="Design name")
    name.click()
    page.keyboard.press("l")  # typing in a text box is typing
    assert pressed(page, "brush")
    page.keyboard.press("Escape")
    canvas = page.locator(CANVAS)
    assert canvas.get_attribute("data-done") == "0", "no key painted anything"

    page.get_by_role("heading").first.click()
    page.keyboard.press("]")
    page.locator(f'{CANVAS}[data-head="1"]').wait_for()
    page.keyboard.press("[")
    page.locator(f'{CANVAS}[data-head="0"]').wait_for()

    before = store.restore(session) or load_default_design()
    blocks = before.layout.blocks[0].numpy()
    row, col = next((r, c) for r in range(40, 64) for c in range(0, 20) if not blocks[r, c])
    page.mouse.click(*canvas_point(page, row, col))
    wait_canvas(page, 1)
    assert store.restore(session).layout.blocks[0, row, col]
    page.get_by_role("heading").first.click()
    page.keyboard.press("Control+z")
    wait_canvas(page, 2)
    settle(page)
    assert not store.restore(session).layout.blocks[0, row, col], "Ctrl+Z undid the stroke"
    assert_clean(page, log_path)


def window_blocks(store, session: str) -> int:
    design = store.restore(session) or load_default_design()
    return design.recipe.steps[0].params["num_sliding_window_blocks"]


def test_undo_and_redo_keys_work_on_every_tab_but_not_in_a_text_box(server, page):
    _, store, log_path = server
    session = page.url.split("session=")[1].split("&")[0]
    first = window_blocks(store, session)
    box = page.get_by_role("spinbutton", name="num_sliding_window_blocks").first
    for value in (first + 1, first + 2):
        box.fill(str(value))
        box.press("Enter")
        settle(page)
    assert window_blocks(store, session) == first + 2
    steps_done = page.locator(".st-key-page_keys [data-done]")

    page.get_by_role("heading").first.click()  # the focus is nowhere in particular
    page.keyboard.press("Control+z")
    settle(page)
    assert window_blocks(store, session) == first + 1, "Ctrl+Z undid the last change"
    assert box.input_value() == str(first + 1), "the widget follows the undo"
    page.keyboard.press("Control+Shift+z")
    settle(page)
    assert window_blocks(store, session) == first + 2, "Ctrl+Shift+Z redid it"

    open_tab(page, "Files")  # another tab without the canvas
    page.keyboard.press("Control+z")
    page.keyboard.press("Control+z")  # two presses before the page answers: both are done
    settle(page)
    assert window_blocks(store, session) == first, "both undos were done, once each"
    page.keyboard.press("Control+y")
    settle(page)
    assert window_blocks(store, session) == first + 1, "Ctrl+Y redid one step"
    assert steps_done.get_attribute("data-done") == "5"

    name = page.get_by_role("textbox", name="Design name")
    name.click()
    name.press("End")
    name.press_sequentially("xy")
    name.press("Control+z")  # the browser's own undo of the typing, not the design's
    assert not name.input_value().endswith("xy"), "the text box undid its own typing"
    page.wait_for_timeout(500)
    assert steps_done.get_attribute("data-done") == "5", "no step was sent from the text box"
    assert window_blocks(store, session) == first + 1
    assert_clean(page, log_path)
