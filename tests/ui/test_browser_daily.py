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
from designer.storage import DesignStore, load_default_design
from tests.ui.browser_app import CHROMIUM, launch, serve_app, settle

pytestmark = pytest.mark.e2e
playwright = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    home = tmp_path_factory.mktemp("daily")
    try:
        with serve_app(home) as (url, log_path):
            yield url, DesignStore(home / "data"), log_path
    except RuntimeError as error:
        pytest.fail(str(error))


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
