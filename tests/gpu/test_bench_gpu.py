"""The harness end to end on a small case, on a GPU: every contender runs, ours are correct,
forward alone and as a training step (forward and backward)."""

from __future__ import annotations

import json

import pytest
import torch

from designer.layout import Layout
from gpu.bench import (
    BACKWARD_CONTENDERS,
    CONTENDERS,
    BenchConfig,
    BenchSession,
    format_table,
    run_benchmark,
)
from gpu.bench.__main__ import main
from gpu.bench.cases import family_blocks

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(("block", "causal"), [(16, False), (64, True)])
def test_every_contender_on_a_small_case(block, causal):
    n_blocks = 1024 // block
    blocks = family_blocks("causal" if causal else "bigbird_10pct", n_blocks, block)
    config = BenchConfig(seq_q=1024, head_dim=64, causal=causal, contenders=CONTENDERS,
                         warmup=1, reps=3)  # fmt: skip
    session = BenchSession(torch.device("cuda"))
    result = run_benchmark(config, Layout(blocks, block), name="small", session=session)
    print(format_table([result]))
    by_name = {r.name: r for r in result.results}
    for name in ("fused", "sdd", "sdd_w1", "flex", "flex_tuned", "reference"):
        r = by_name[name]
        assert r.status == "ok", r.message
        assert r.rel_error < 1e-2 and r.ms > 0 and r.tflops > 0
    for name in ("sdd_qk", "sdd_qk_w1", "sdpa", "sdpa_cudnn"):
        assert by_name[name].status == "ok", by_name[name].message
    assert by_name["fused"].speedup_vs_cudnn is not None
    # "x Flex" divides by the faster FlexAttention of the run
    assert max(by_name[n].speedup_vs_flex for n in ("flex", "flex_tuned")) == pytest.approx(1.0)


@pytest.mark.parametrize(("block", "causal"), [(16, False), (64, True)])
def test_every_contender_forward_and_backward_on_a_small_case(block, causal):
    """A training step of each contender with a backward pass; ours and Flex (both builds, its
    own backward on the 128-token BlockMask) give dq, dk, dv within bf16 noise of fp64."""
    n_blocks = 1024 // block
    blocks = family_blocks("causal" if causal else "bigbird_10pct", n_blocks, block)
    config = BenchConfig(seq_q=1024, head_dim=64, causal=causal, contenders=BACKWARD_CONTENDERS,
                         warmup=1, reps=3, backward=True)  # fmt: skip
    session = BenchSession(torch.device("cuda"))
    result = run_benchmark(config, Layout(blocks, block), name="small", session=session)
    print(format_table([result]))
    by_name = {r.name: r for r in result.results}
    for name in ("fused", "flex", "flex_tuned", "reference"):
        r = by_name[name]
        assert r.status == "ok", r.message
        assert r.ms > 0 and r.fwd_ms > 0 and r.bwd_ms > 0 and r.tflops > 0 and r.bwd_tflops > 0
        assert r.fwd_ms < r.ms and r.bwd_ms < r.ms  # each alone is part of the step
        for error in (r.dq_rel_error, r.dk_rel_error, r.dv_rel_error, r.rel_error):
            assert error < 2e-2, (name, error)
    for name in ("sdpa", "sdpa_cudnn"):
        assert by_name[name].status == "ok", by_name[name].message
        assert by_name[name].bwd_ms > 0
    assert max(by_name[n].speedup_vs_flex for n in ("flex", "flex_tuned")) == pytest.approx(1.0)


def test_command_line_backward_on_a_quick_case(tmp_path, capsys):
    out = tmp_path / "backward.json"
    args = ["--case", "banded_7pct-b64-d128", "--quick", "--backward", "--contenders",
            "fused,flex,sdpa_cudnn", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    assert "bwd TFLOP/s" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["mode"] == "forward+backward" and doc["environment"]["gpu"] != "n/a"
    results = {r["name"]: r for r in doc["cases"][0]["results"]}
    assert results["fused"]["status"] == "ok", results["fused"]["message"]
    assert results["fused"]["dq_rel_error"] < 2e-2
