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
from gpu.bench.cases import FAMILIES, family_blocks, find_case
from gpu.bench.flex import flex_variants
from gpu.bench.peers import PEERS

pytestmark = pytest.mark.gpu

# The autotuned Flex build compiles and times Triton's candidates for every mask variant (minutes
# per case, more with a backward): the tests below run the default build, and
# test_autotuned_flex_build times the autotuned one on a single variant. The peers (their own
# packages, CuTe DSL compiles of tens of seconds each) have test_peers_gpu.py.
LEFT_OUT = ("flex_tuned", *PEERS)
SMALL_CONTENDERS = tuple(c for c in CONTENDERS if c not in LEFT_OUT)
SMALL_BACKWARD_CONTENDERS = tuple(c for c in BACKWARD_CONTENDERS if c not in LEFT_OUT)


@pytest.mark.parametrize(("block", "causal"), [(16, False), (64, True)])
def test_every_contender_on_a_small_case(block, causal):
    n_blocks = 1024 // block
    blocks = family_blocks("causal" if causal else "bigbird_10pct", n_blocks, block)
    config = BenchConfig(seq_q=1024, head_dim=64, causal=causal, contenders=SMALL_CONTENDERS,
                         warmup=1, reps=3)  # fmt: skip
    session = BenchSession(torch.device("cuda"))
    result = run_benchmark(config, Layout(blocks, block), name="small", session=session)
    print(format_table([result]))
    by_name = {r.name: r for r in result.results}
    for name in ("fused", "sdd", "sdd_w1", "flex", "reference"):
        r = by_name[name]
        assert r.status == "ok", r.message
        assert r.rel_error < 1e-2 and r.ms > 0 and r.tflops > 0
    for name in ("sdd_qk", "sdd_qk_w1", "sdpa", "sdpa_cudnn"):
        assert by_name[name].status == "ok", by_name[name].message
    assert by_name["fused"].speedup_vs_cudnn is not None
    assert by_name["flex"].speedup_vs_flex == pytest.approx(1.0)  # "x Flex": over the fastest


@pytest.mark.parametrize(("block", "causal"), [(16, False), (64, True)])
def test_every_contender_forward_and_backward_on_a_small_case(block, causal):
    """A training step of each contender with a backward pass; ours and Flex (its own backward)
    give dq, dk, dv within bf16 noise of fp64."""
    n_blocks = 1024 // block
    blocks = family_blocks("causal" if causal else "bigbird_10pct", n_blocks, block)
    config = BenchConfig(seq_q=1024, head_dim=64, causal=causal,
                         contenders=SMALL_BACKWARD_CONTENDERS, warmup=1, reps=3,
                         backward=True)  # fmt: skip
    session = BenchSession(torch.device("cuda"))
    result = run_benchmark(config, Layout(blocks, block), name="small", session=session)
    print(format_table([result]))
    by_name = {r.name: r for r in result.results}
    for name in ("fused", "flex", "reference"):
        r = by_name[name]
        assert r.status == "ok", r.message
        assert r.ms > 0 and r.fwd_ms > 0 and r.bwd_ms > 0 and r.tflops > 0 and r.bwd_tflops > 0
        assert r.fwd_ms < r.ms and r.bwd_ms < r.ms  # each alone is part of the step
        for error in (r.dq_rel_error, r.dk_rel_error, r.dv_rel_error, r.rel_error):
            assert error < 2e-2, (name, error)
    for name in ("sdpa", "sdpa_cudnn"):
        assert by_name[name].status == "ok", by_name[name].message
        assert by_name[name].bwd_ms > 0
    assert by_name["flex"].speedup_vs_flex == pytest.approx(1.0)


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


@pytest.mark.parametrize("family", FAMILIES)
def test_every_flex_variant_is_built_and_accurate(family):
    """Each variant of the default compile mode, at 64-token blocks (so both tiles where the
    64-token one saves work), against the fp64 reference: all run, all accurate, and the
    fastest is the one reported."""
    case = find_case(f"{family}-b64-d64")
    layout = case.layout(seq_len=1024)
    config = BenchConfig(seq_q=1024, head_dim=64, causal=case.causal, contenders=("flex",),
                         warmup=1, reps=3)  # fmt: skip
    session = BenchSession(torch.device("cuda"))
    result = run_benchmark(config, layout, name=case.name, session=session)
    print(format_table([result]))
    (flex,) = result.results
    expected = flex_variants(layout.blocks, 64, causal=case.causal)
    assert [v.name for v in flex.variants] == [v.name for v in expected]
    for variant in flex.variants:
        assert variant.status == "ok", (variant.name, variant.message)
        assert variant.accurate and variant.rel_error < 1e-2, variant
    assert flex.status == "ok" and flex.ms == min(v.ms for v in flex.variants)
    assert flex.variant == min(flex.variants, key=lambda v: v.ms).name


@pytest.mark.slow
@pytest.mark.parametrize("backward", [False, True])
def test_flex_variants_forward_and_backward(backward):
    """Every variant of a band at 64-token blocks. Forward: all run and are accurate. In a
    training step each variant that runs has accurate gradients too (a build may have no
    backward kernel tile for 64-token BlockMasks: then it fails, never is picked)."""
    case = find_case("banded_7pct-b64-d128")
    config = BenchConfig(seq_q=1024, head_dim=128, contenders=("flex",), warmup=1, reps=3,
                         backward=backward)  # fmt: skip
    session = BenchSession(torch.device("cuda"))
    result = run_benchmark(config, case.layout(seq_len=1024), name=case.name, session=session)
    print(format_table([result]))
    names = ["gather-t128", "band-t128", "gather-t64", "band-t64"]
    for r in result.results:
        assert [v.name for v in r.variants] == names
        assert r.status == "ok" and r.variant is not None and r.rel_error < 1e-2
        for variant in r.variants:
            assert variant.accurate or (backward and variant.status == "failed"), variant
            if variant.status == "ok" and backward:
                assert variant.grad_rel_error < 2e-2, variant


@pytest.mark.slow
def test_autotuned_flex_build(monkeypatch):
    """The autotuned build on one variant (the gather at 128-token tiles): it runs and is
    accurate, and is reported with its variant."""
    first_only = lambda *args, **kwargs: flex_variants(*args, **kwargs)[:1]  # noqa: E731
    monkeypatch.setattr("gpu.bench.contenders.flex_variants", first_only)
    case = find_case("banded_7pct-b64-d128")
    config = BenchConfig(seq_q=1024, head_dim=128, contenders=("flex_tuned",), warmup=1, reps=3)
    session = BenchSession(torch.device("cuda"))
    result = run_benchmark(config, case.layout(seq_len=1024), name=case.name, session=session)
    (tuned,) = result.results
    assert tuned.status == "ok" and tuned.rel_error < 1e-2
    assert [v.name for v in tuned.variants] == [tuned.variant]
