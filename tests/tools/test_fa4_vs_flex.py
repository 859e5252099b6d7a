"""``tools/probes/fa4_vs_flex.py``: the verdict on adding ``fa4``, from harness results made by
the fake harness on the CPU (its GPU run is the device's)."""

from __future__ import annotations

import pytest
import torch

from designer.layout import Layout
from gpu.bench import BenchConfig, BenchSession, run_benchmark
from tests.gpu.bench.test_results import fake_harness
from tests.scripts import load_script


def _result(monkeypatch, times=None, failures=None):
    timer = fake_harness(monkeypatch, times=times, failures=failures)
    config = BenchConfig(heads=2, seq_q=128, head_dim=16, warmup=0, reps=1, device="cpu",
                         contenders=("flex_flash", "fa4"))  # fmt: skip
    layout = Layout(torch.ones(1, 2, 2, dtype=torch.bool), 64)
    session = BenchSession(torch.device("cpu"), timer=timer)
    return run_benchmark(config, layout, name="dense", session=session)


@pytest.mark.parametrize(("fa4_ms", "faster"), [(1.05, True), (1.09, False), (1.3, False)])
def test_fa4_is_added_only_where_it_is_faster_beyond_noise(monkeypatch, fa4_ms, faster):
    probe = load_script("tools/probes/fa4_vs_flex")
    verdict = probe.comparison([_result(monkeypatch, {"flex_flash": 1.1, "fa4": fa4_ms})])
    (row,) = verdict["rows"]
    assert row["fa4_speedup"] == pytest.approx(1.1 / fa4_ms) and row["why_not"] == ""
    assert verdict["fa4_faster_on"] == (["dense"] if faster else [])
    assert ("add it to the default contenders" in verdict["verdict"]) == faster


def test_a_case_fa4_cannot_run_says_why(monkeypatch):
    probe = load_script("tools/probes/fa4_vs_flex")
    result = _result(monkeypatch, failures={"fa4": ValueError("needs a CuTe DSL mask_mod")})
    (row,) = probe.comparison([result])["rows"]
    assert row["fa4_speedup"] is None
    assert "fa4: ValueError: needs a CuTe DSL mask_mod" in row["why_not"]
