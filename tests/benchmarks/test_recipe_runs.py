"""``benchmarks/recipe_runs.py``: a small case runs through every timing, as runs (CPU)."""

from __future__ import annotations

import pytest

import designer.layout
import designer.recipe
from tests.scripts import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/recipe_runs")


def test_small_cases_time_every_step_as_runs(bench, monkeypatch, capsys):
    monkeypatch.setattr(designer.recipe, "RUNS_CELLS", 0)  # built and held as runs
    monkeypatch.setattr(designer.layout, "DENSE_CELLS", 0)
    recipes = bench.recipe_cases(1, {"small": 301})
    assert set(recipes) == {"small: sinks + window", "small: two steps + two edits"}
    for row in recipes.values():
        assert row["active_blocks"] > 0 and row["runs"] > 0 and row["estimate_s"] > 0
        assert row["wall_s"] > 0 and row["ns_per_run"] > 0
    tokens = bench.token_cases(1, n_blocks=80, heads=(2,))
    window, aligned = tokens.values()
    assert window["refused"] is None  # small enough to make
    assert aligned["held_as"] == "runs" and aligned["partial_blocks"] > 0
    assert aligned["plan_tables_from_runs"]["wall_s"] > 0
    assert "aligned window + sinks" in capsys.readouterr().out
