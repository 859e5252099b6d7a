"""A token-exact design in a real browser: pick a family of the token catalogue, see its
partial blocks drawn on the canvas, zoom into one, and export it."""

from __future__ import annotations

import pytest

from designer.formats import read_design_file
from tests.ui.browser_app import CANVAS, STARTUP_S, wait_canvas
from tests.ui.test_browser import (  # noqa: F401 - fixtures
    assert_no_errors,
    metric,
    open_tab,
    page,
    server,
    wait_for_metric_change,
    wait_until_idle,
)

pytestmark = pytest.mark.e2e
pytest.importorskip("playwright.sync_api")


def test_a_token_family_is_drawn_zoomed_and_exported(server, page, tmp_path):  # noqa: F811
    url, log_path = server
    page.goto(url)
    page.locator('[data-testid="stMetricValue"]').first.wait_for(timeout=STARTUP_S * 1000)
    wait_until_idle(page)
    before = metric(page, "Active blocks")
    pattern = page.get_by_role("combobox", name="Step 1: pattern")
    pattern.click()
    page.keyboard.type("Tokens: causal documents")
    page.keyboard.press("Enter")
    wait_for_metric_change(page, "Active blocks", before)
    wait_until_idle(page)
    assert page.get_by_text("partial", exact=False).first.is_visible()
    assert_no_errors(page, log_path)

    open_tab(page, "Paint")
    wait_canvas(page)
    partial = int(page.locator(CANVAS).get_attribute("data-partial"))
    assert partial >= 64  # a causal triangle on every diagonal block of the head, at least
    row = page.get_by_label("query block")
    row.fill("3")
    row.press("Enter")
    wait_until_idle(page)
    column = page.get_by_label("key block")
    column.fill("3")
    column.press("Enter")
    wait_until_idle(page)
    zoom = page.locator('[data-testid="stImage"]').filter(has_text="block (3, 3)")
    assert "partial: 2,080 of 4,096 token pairs attended" in zoom.inner_text()
    assert_no_errors(page, log_path)

    open_tab(page, "Files")
    with page.expect_download() as download:
        page.get_by_role("button", name="FlexAttention BlockMask", exact=True).click()
    saved = tmp_path / download.value.suggested_filename
    download.value.save_as(saved)
    layout = read_design_file(saved.read_bytes()).design.layout
    assert layout.n_partial == partial * layout.n_heads
    assert layout.block_tokens(0, 3, 3).sum() == 2080
    assert_no_errors(page, log_path)
