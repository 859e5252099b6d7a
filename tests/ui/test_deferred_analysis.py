"""A design whose analysis costs more than a page may spend: the page answers first, with the
exact figures it has, and segments and lints when asked, under a progress bar."""

from __future__ import annotations

import pytest

from designer import analysis
from designer.cache import LruCache
from designer.storage import DATA_DIR_ENV
from tests.ui.test_app import assert_clean, metric, open_app
from ui import keys


@pytest.fixture
def costly(tmp_path, monkeypatch):
    """Every analysis counts as costly (the default design stands in for a huge one)."""
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(analysis, "INLINE_ANALYSIS_NS", 0)
    for cache in ("_ANALYSES", "_HEADS"):  # nothing analysed yet on this "server"
        monkeypatch.setattr(analysis, cache, LruCache(1 << 30))
    calls = []
    real = analysis.analyse
    monkeypatch.setattr(analysis, "analyse", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def test_the_page_answers_without_the_costly_analysis_and_runs_it_when_asked(costly):
    at = open_app()
    assert metric(at, "Density") == "16.24%" and metric(at, "Tiles") == "—"
    assert any("run only when asked" in info.value for info in at.info)
    assert costly == [] and at.toggle(key=keys.SHOW_TILES).disabled
    for tab in ("Paint", "Analysis", "Files"):
        at.session_state["tab"] = tab
        at.run()
        assert_clean(at)
    assert costly == []  # no tab segmented the design behind the user's back
    (button,) = [b for b in at.button if b.key.startswith("analyse_")]
    button.click().run()
    assert_clean(at)
    assert costly == [1] and metric(at, "Tiles") != "—"
    assert not any("run only when asked" in info.value for info in at.info)
