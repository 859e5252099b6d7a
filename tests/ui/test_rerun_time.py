"""The server time of one rerun after a paint, at 16 heads × 256 × 256 blocks, stays < 300 ms.

Measured with ``AppTest`` (which adds its own overhead, so this is an upper bound) on the Paint
tab of a 50 %-dense random layout, the costliest to segment: the paint's callback (edit, history,
autosave) and the whole page after it (segmentation, statistics, lints, the canvas's payload of
the head shown). A paint here is a diagonal band, the same path as a canvas stroke.
"""

from __future__ import annotations

import io
import statistics
import time
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from designer.design import Design
from designer.formats import save_design
from designer.recipe import Recipe, RecipeStep
from designer.storage import DATA_DIR_ENV
from ui import keys
from ui.canvas.payload import head_payload, payload_bytes

pytestmark = pytest.mark.slow

APP = str(Path(__file__).resolve().parents[2] / "app.py")
BUDGET_S = 0.300
PAINTS = 7


def large_design_bytes() -> bytes:
    step = RecipeStep("random_probability", {"probability": 0.5, "seed": 7})
    recipe = Recipe(16, 256, 256, 64, steps=(step,))
    buffer = io.BytesIO()
    save_design(Design(recipe.build(), name="large", recipe=recipe), buffer)
    return buffer.getvalue()


def test_rerun_after_a_paint_at_16_heads_256_blocks(tmp_path, monkeypatch):
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    at = AppTest.from_file(APP, default_timeout=120)
    at.session_state["tab"] = "Files"
    at.run()
    at.file_uploader(key=keys.UPLOAD).upload("large.pt", large_design_bytes()).run()
    at.session_state["tab"] = "Paint"
    at.run()
    at.segmented_control(key=keys.EDIT_ACTION).set_value("toggle").run()
    at.number_input(key=keys.BAND_LOW).set_value(-8)
    at.number_input(key=keys.BAND_HIGH).set_value(8).run()
    assert at.session_state[keys.HISTORY].present.layout.shape == (16, 256, 256)
    seconds, blocks = [], []
    for _ in range(PAINTS):
        at.button(key="apply_band").click()
        start = time.perf_counter()
        at.run()
        seconds.append(time.perf_counter() - start)
        assert not at.exception and not at.error
        blocks.append(at.session_state[keys.HISTORY].present.layout.nnz)
    assert len(set(blocks)) == 2  # each paint toggled the band: the layout changed every time
    median = statistics.median(seconds)
    print(f"rerun after a paint, 16 x 256 x 256: median {median * 1000:.0f} ms of {seconds}")
    assert median < BUDGET_S


def test_the_payload_of_a_dense_large_head_is_quick_and_small():
    rng = np.random.default_rng(0)
    blocks = rng.random((256, 256)) < 0.5
    widths = blocks.astype(np.uint16)
    start = time.perf_counter()
    payload = head_payload(blocks, widths, rng.random((256, 256)) < 0.5)
    assert time.perf_counter() - start < 0.1
    assert payload_bytes(payload) <= 100_000
