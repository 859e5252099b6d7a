"""``benchmarks/segment_runs_speed.py``: its designs are the patterns they name, and a small
case runs through every timing (CPU)."""

from __future__ import annotations

import numpy as np
import pytest

from designer.patterns.attention_sinks import attention_sinks
from tests.designer.run_layouts import dense_to_runs
from tests.scripts import load_script


@pytest.fixture(scope="module")
def speed():
    return load_script("benchmarks/segment_runs_speed")


def same_runs(a, b) -> bool:
    return a.shape == b.shape and all(
        np.array_equal(x, y) for x, y in zip(a[1:], b[1:], strict=True)
    )


@pytest.mark.parametrize("n_blocks", [1, 2, 3, 64, 65, 66, 200])
def test_the_long_context_design_is_sinks_and_window(speed, n_blocks):
    dense = attention_sinks(2, n_blocks, n_blocks, sink_blocks=1, window_blocks=64).numpy()
    assert same_runs(speed.sinks_and_window(2, n_blocks), dense_to_runs(dense != 0))


def test_runs_of_dense_layouts(speed, rng):
    for density in (0.0, 0.3, 1.0):
        blocks = rng.random((2, 7, 9)) < density
        assert same_runs(speed.runs_of(blocks), dense_to_runs(blocks))


def test_a_small_long_context_case_times_everything(speed, capsys):
    found = speed.long_context("small", 130, 1)
    timings = [key for key, value in found.items() if isinstance(value, dict)]
    assert {"segment_sw2", "segment_sw8", "cuda_plan_tables", "backward_table_128x128"} <= set(
        timings
    )
    assert all(found[key]["wall_s"] > 0 for key in timings)
    assert found["active_blocks"] == int(attention_sinks(32, 130, 130, sink_blocks=1,
                                                         window_blocks=64).sum())  # fmt: skip
    assert "cuda_plan_tables" in capsys.readouterr().out
