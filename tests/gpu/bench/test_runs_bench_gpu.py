"""A design held as row runs through the harness on a GPU: ours and Flex (Triton and FA4) on
BlockMasks made from the runs, correct against the sampled fp64 reference (rows and keys
sampled as at 128K tokens), forward and as a training step, and through the command line."""

from __future__ import annotations

import json

import pytest
import torch

import designer.layout
from designer.design import Design
from designer.formats import save_design
from designer.layout import Layout
from designer.patterns.attention_sinks import attention_sinks_runs
from gpu.bench import BenchConfig, BenchSession, format_table, run_benchmark
from gpu.bench import checks as checks_module
from gpu.bench.__main__ import main
from gpu.bench.peers import missing

pytestmark = pytest.mark.gpu

SEQ, BLOCK, HEADS = 4096, 64, 4


@pytest.fixture
def sampled_runs(monkeypatch):
    """Layouts built from runs stay runs (as past the grid's cap), and the check samples rows
    and keys of this 4K-token case as it does at 128K."""
    monkeypatch.setattr(designer.layout, "DENSE_CELLS", 0)
    monkeypatch.setattr(checks_module, "MAX_CHECKED_PAIRS", SEQ * 1024)


def _layout() -> Layout:
    runs = attention_sinks_runs(HEADS, SEQ // BLOCK, SEQ // BLOCK, sink_blocks=1, window_blocks=8)
    layout = Layout(runs, BLOCK)
    assert layout.runs is not None
    return layout


@pytest.mark.parametrize("backward", [False, True])
def test_ours_and_flex_run_a_runs_design_correctly(sampled_runs, backward):
    contenders = ("fused", "flex", "flex_flash", "sdpa_flash")
    if not backward:
        contenders = ("fused_api", *contenders)
    config = BenchConfig(heads=HEADS, seq_q=SEQ, head_dim=64, causal=True, contenders=contenders,
                         warmup=1, reps=3, backward=backward)  # fmt: skip
    session = BenchSession(torch.device("cuda"))
    result = run_benchmark(config, _layout(), name="runs", session=session)
    print(format_table([result]))
    assert result.checked_rows < SEQ
    assert (result.checked_key_rows is not None) == backward
    by_name = {r.name: r for r in result.results}
    checked = [name for name in contenders if name != "sdpa_flash"]
    if missing("flex_flash"):
        assert by_name["flex_flash"].status == "unavailable"
        checked.remove("flex_flash")
    for name in checked:
        r = by_name[name]
        assert r.status == "ok", r.message
        assert r.rel_error < 1e-2 and r.ms > 0 and r.tflops > 0
        if backward:
            assert max(r.dq_rel_error, r.dk_rel_error, r.dv_rel_error) < 2e-2
    assert {v.name for v in by_name["flex"].variants} == {"sinks-t128", "runs-t128"}
    for variant in by_name["flex"].variants:  # both mask_mod forms compile and are exact
        assert variant.status == "ok" and variant.accurate, variant.message
    assert by_name["sdpa_flash"].status == "ok" and by_name["sdpa_flash"].rel_error is None


def test_the_command_line_runs_a_runs_design_file(sampled_runs, tmp_path, capsys):
    path, out = tmp_path / "runs.pt", tmp_path / "runs.json"
    save_design(Design(_layout(), name="runs", causal=True), path)
    code = main(["--design", str(path), "--contenders", "fused,flex", "--backward", "--reps", "2",
                 "--warmup", "1", "--out", str(out)])  # fmt: skip
    assert code == 0
    case = json.loads(out.read_text())["cases"][0]
    assert case["checked_key_rows"] > 0 and case["checked_key_heads"] == [0, 1, 2, 3]
    assert {r["name"]: r["status"] for r in case["results"]} == {"fused": "ok", "flex": "ok"}
    assert "held as row runs" in capsys.readouterr().out
