"""The sidebar's setup in a real browser: the start-width box follows the block size."""

from __future__ import annotations

import pytest

from tests.ui.test_browser import (  # noqa: F401  (fixtures)
    STARTUP_S,
    assert_no_errors,
    page,
    server,
    wait_until_idle,
)

pytestmark = pytest.mark.e2e


def pick_block_size(page, block: int) -> None:  # noqa: F811
    page.get_by_role("combobox", name="Block size").click()
    page.get_by_role("option", name=str(block), exact=True).click()
    wait_until_idle(page)


def test_start_width_box_follows_the_block_size(server, page):  # noqa: F811
    url, log_path = server
    page.goto(url)
    page.locator('[data-testid="stMetricValue"]').first.wait_for(timeout=STARTUP_S * 1000)
    wait_until_idle(page)
    box = page.get_by_role("spinbutton", name="Segmentation start width (blocks)")
    assert box.input_value() == "2"  # 64-token blocks: 128-token tiles are 2 blocks wide
    for block, width in ((16, "8"), (128, "1"), (64, "2")):
        pick_block_size(page, block)
        page.wait_for_function(
            "([label, width]) => document.querySelector(`input[aria-label='${label}']`)"
            "?.value === width",
            arg=["Segmentation start width (blocks)", width],
        )
        assert box.input_value() == width, block
        assert box.is_disabled()
    assert_no_errors(page, log_path)
