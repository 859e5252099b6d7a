"""Training steps in the benchmark harness, on the CPU: the config and the command line, FLOP
accounting (backward 2.5x, a step 3.5x the forward), the three timings, gradient errors against
fp64, the JSON document and the printed table."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from designer.design import Design
from designer.formats import save_design
from designer.layout import Layout
from gpu.bench import (
    DEFAULT_BACKWARD_CONTENDERS,
    DEFAULT_CONTENDERS,
    BenchConfig,
    BenchSession,
    cases,
    document,
    format_table,
    run_benchmark,
    seeded_inputs,
    seeded_training_inputs,
)
from gpu.bench import harness as harness_module
from gpu.bench.__main__ import _jobs, _parser, main
from gpu.bench.cases import standard_cases
from gpu.bench.contenders import Prepared
from gpu.bench.metrics import active_pairs, backward_flops, step_flops
from gpu.bench.results import read_document
from gpu.bench.timing import host_timer
from gpu.reference import dense_masked_attention
from tests.gpu.oracle import naive_attention

SMALL = dict(heads=2, seq_q=64, head_dim=16, warmup=1, reps=3, device="cpu", backward=True)


def _layout(seed=0, heads=2, n=4, block=16):
    rng = np.random.default_rng(seed)
    return Layout(torch.from_numpy(rng.random((heads, n, n)) < 0.5), block)


def _attention(case, factor=1.0):
    """The fp32 reference on the case's inputs times ``factor`` (differentiable)."""
    out = dense_masked_attention(
        case.q, case.k, case.v, case.blocks, case.block_size, causal=case.causal,
        scale=case.scale, compute_dtype=torch.float32,
    )  # fmt: skip
    return (out * factor).to(case.q.dtype)


def test_the_mode_picks_its_default_contenders_and_refuses_those_without_a_backward():
    assert BenchConfig().contenders == DEFAULT_CONTENDERS and BenchConfig().mode == "forward"
    config = BenchConfig(backward=True)
    assert config.contenders == DEFAULT_BACKWARD_CONTENDERS and config.mode == "forward+backward"
    assert DEFAULT_BACKWARD_CONTENDERS == (
        "fused", "flex", "flex_tuned", "flex_flash", "cudnn_bsa", "sdpa", "sdpa_cudnn",
        "sdpa_flash",
    )  # fmt: skip
    with pytest.raises(ValueError, match="contenders item 'sdd' has no backward pass; with "
                                         "backward=True pick from fused, flex"):  # fmt: skip
        BenchConfig(backward=True, contenders=("fused", "sdd"))
    with pytest.raises(TypeError, match="backward must be True or False"):
        BenchConfig(backward="yes")


def test_flop_accounting_counts_the_backward_as_two_and_a_half_forwards():
    assert backward_flops(4 * 16 * 100) == 2.5 * 4 * 16 * 100
    assert step_flops(4 * 16 * 100) == 3.5 * 4 * 16 * 100
    assert isinstance(step_flops(4 * 3 * 7), int)  # 4·B·D·pairs is even: exact


def test_training_inputs_are_the_forward_inputs_plus_a_random_output_gradient():
    config = BenchConfig(**{**SMALL, "seq_k": 32, "seed": 5})
    q, k, v, grad_out = seeded_training_inputs(config)
    for trained, plain in zip((q, k, v), seeded_inputs(config), strict=True):
        assert trained.requires_grad and trained.is_leaf and torch.equal(trained.detach(), plain)
    assert grad_out.shape == q.shape and grad_out.dtype == torch.bfloat16
    assert not grad_out.requires_grad and grad_out.std() > 0.5  # randn, never zeros
    assert not torch.equal(grad_out, q.detach())


def test_derived_numbers_of_a_step_with_a_fake_timer(monkeypatch):
    """Each contender is timed three times, in the order step, forward, backward alone."""
    times = {"fused": (3.0, 1.0, 2.0), "flex": (6.0, 2.0, 4.0), "sdpa_cudnn": (12.0, 4.0, 8.0)}
    calls = []

    def fake_prepare(name, case):
        fake_prepare.current = name
        return Prepared(lambda: _attention(case), name != "sdpa_cudnn")

    def timer(run, *, reps, setup=None):
        if setup is not None:  # the backward alone: each rep gets a fresh forward
            run(setup())
        calls.append(fake_prepare.current)
        return [times[calls[-1]][(calls.count(calls[-1]) - 1) % 3]] * reps

    monkeypatch.setattr(harness_module, "prepare", fake_prepare)
    config = BenchConfig(**SMALL, contenders=("fused", "flex", "sdpa_cudnn"))
    layout = _layout()
    session = BenchSession(torch.device("cpu"), timer=timer)
    result = run_benchmark(config, layout, session=session)
    fused, flex, cudnn = result.results
    flops = 4 * 16 * active_pairs(layout.blocks, 16, causal=False)
    assert result.flops == flops and result.mode == "forward+backward"
    assert (fused.ms, fused.fwd_ms, fused.bwd_ms) == (3.0, 1.0, 2.0)
    assert fused.tflops == pytest.approx(3.5 * flops / 3e-3 / 1e12)
    assert fused.bwd_tflops == pytest.approx(2.5 * flops / 2e-3 / 1e12)
    assert (fused.speedup_vs_flex, fused.speedup_vs_cudnn) == (2.0, 4.0)
    assert cudnn.own_tflops == pytest.approx(3.5 * 4 * 16 * 2 * 64 * 64 / 12e-3 / 1e12)
    for r in (fused, flex):  # ours and Flex compute the layout: the gradients are checked
        assert 0 < r.dq_rel_error < 1e-2 and 0 < r.dk_rel_error < 1e-2
        assert 0 < r.dv_rel_error < 1e-2 and 0 < r.grad_max_abs_error < 0.1
    assert cudnn.dq_rel_error is None  # dense attention is another function on this layout
    # the dense baseline's step timing is reused by the next case; its forward timing is not
    run_benchmark(config, _layout(seed=1), session=session)
    run_benchmark(BenchConfig(**{**SMALL, "backward": False}, contenders=("sdpa_cudnn",)),
                  _layout(seed=1), session=session)  # fmt: skip
    assert calls.count("fused") == 6 and calls.count("sdpa_cudnn") == 3 + 0 + 1


def test_the_backward_alone_is_timed_after_an_untimed_forward():
    events = []

    def setup():
        events.append("forward")
        time.sleep(0.02)
        return len(events)

    times = host_timer(lambda out: events.append(("backward", out)), reps=3, setup=setup)
    assert events == ["forward", ("backward", 1), "forward", ("backward", 3),
                      "forward", ("backward", 5)]  # fmt: skip
    assert max(times) < 10  # ms: the 20 ms forwards are not in them


def test_gradient_errors_measure_a_wrong_gradient_exactly(monkeypatch):
    """An output 10 % too large has gradients exactly 10 % too large: relative error 0.1."""
    monkeypatch.setattr(
        harness_module, "prepare", lambda name, case: Prepared(lambda: _attention(case, 1.1), True)
    )
    config = BenchConfig(**{**SMALL, "dtype": "fp16"}, contenders=("fused",), causal=True)
    (result,) = run_benchmark(config, _layout()).results
    for error in (result.dq_rel_error, result.dk_rel_error, result.dv_rel_error, result.rel_error):
        assert error == pytest.approx(0.1, abs=2e-3)


@settings(max_examples=8, deadline=None)
@given(
    n_q=st.integers(1, 4),
    n_k=st.integers(1, 4),
    causal=st.booleans(),
    dtype=st.sampled_from(["bf16", "fp16"]),
    seed=st.integers(0, 2**31),
)
def test_the_reference_contender_trains_on_the_cpu(n_q, n_k, causal, dtype, seed):
    """The harness's gradient errors of the reference contender equal those computed
    independently: its gradients against autograd through the naive oracle in fp64."""
    rng = np.random.default_rng(seed)
    layout = Layout(torch.from_numpy(rng.random((2, n_q, n_k)) < 0.6), 16)
    config = BenchConfig(**{**SMALL, "seq_q": 16 * n_q, "seq_k": 16 * n_k, "dtype": dtype,
                            "reps": 2, "seed": seed}, contenders=("reference", "fused"),
                         causal=causal)  # fmt: skip
    reference, fused = run_benchmark(config, layout, name="tiny").results
    assert reference.status == "ok" and len(reference.bwd_times_ms) == 2
    assert reference.ms > 0 and reference.fwd_ms > 0 and reference.bwd_ms > 0
    assert fused.status == "unavailable" and "CUDA" in fused.message
    q, k, v, grad_out = seeded_training_inputs(config)
    inputs64 = [x.detach().double().requires_grad_() for x in (q, k, v)]
    expected = torch.autograd.grad(naive_attention(*inputs64, layout.blocks, 16, causal=causal),
                                   inputs64, grad_out.double())  # fmt: skip
    blocks = layout.blocks.expand(2, -1, -1)
    out = dense_masked_attention(q, k, v, blocks, 16, causal=causal, compute_dtype=torch.float32)
    ours = torch.autograd.grad(out.to(q.dtype), (q, k, v), grad_out)
    for name, mine, oracle in zip(("dq", "dk", "dv"), ours, expected, strict=True):
        diff = float((mine.double() - oracle).norm())
        relative = diff / float(oracle.norm()) if oracle.norm() > 0 else diff
        assert getattr(reference, f"{name}_rel_error") == pytest.approx(
            relative, rel=1e-6, abs=1e-12
        )
        assert relative < 1e-2


def test_json_and_table_of_a_training_step():
    config = BenchConfig(**SMALL, contenders=("reference", "sdpa"))
    result = run_benchmark(config, _layout(), name="tiny")
    doc = json.loads(json.dumps(document([result], env={"gpu": "test"}), allow_nan=True))
    assert doc["mode"] == "forward+backward" and "3.5x" in doc["flops_formula"]
    assert "fresh forward untimed" in doc["method"] and {"date", "environment"} <= set(doc)
    (case,) = doc["cases"]
    assert case["mode"] == "forward+backward" and case["config"]["backward"] is True
    reference = case["results"][0]
    for key in ("fwd_ms", "bwd_ms", "bwd_tflops", "dq_rel_error", "dk_rel_error",
                "dv_rel_error", "grad_max_abs_error"):  # fmt: skip
        assert isinstance(reference[key], float), key
    assert len(reference["fwd_times_ms"]) == len(reference["bwd_times_ms"]) == 3
    assert read_document(json.dumps(doc), "x.json") == doc
    table = format_table([result])
    header = table.splitlines()[0].split()
    assert header[:8] == ["case", "contender", "status", "fwd+bwd", "ms", "fwd", "ms", "bwd"]
    assert "bwd TFLOP/s" in table and "dq err" in table and "dv err" in table
    assert "2.5x the forward's FLOPs" in table
    forward = run_benchmark(BenchConfig(**{**SMALL, "backward": False}, contenders=("reference",)),
                            _layout())  # fmt: skip
    assert document([forward], env={})["mode"] == "forward"
    assert "bwd ms" not in format_table([forward])


def test_command_line_times_a_saved_design_forward_and_backward(tmp_path, capsys):
    path = tmp_path / "tiny.pt"
    save_design(Design(_layout(heads=1), name="tiny", causal=True), path)
    out = tmp_path / "result.json"
    args = ["--design", str(path), "--heads", "2", "--head-dim", "16", "--backward", "--contenders",
            "reference,sdpa", "--reps", "2", "--warmup", "0", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "fwd+bwd ms" in printed and "dq err" in printed
    doc = json.loads(out.read_text())
    assert doc["mode"] == "forward+backward"
    (case,) = doc["cases"]
    assert case["config"]["backward"] is True and case["results"][0]["status"] == "ok"
    with pytest.raises(SystemExit):
        main(["--design", str(path), "--backward", "--contenders", "sdd"])
    assert "contenders item 'sdd' has no backward pass" in capsys.readouterr().err


def test_the_standard_sweep_in_forward_backward_mode(monkeypatch):
    monkeypatch.setattr(cases, "SEQ_LEN", 1024)  # the layouts' size does not matter here
    jobs, skipped = _jobs(_parser().parse_args(["--sweep", "standard", "--backward"]))
    assert [name for name, _, _ in jobs] == [case.name for case in standard_cases()]
    assert skipped == []
    for _, config, _ in jobs:
        assert config.backward and config.contenders == DEFAULT_BACKWARD_CONTENDERS
    forward, _ = _jobs(_parser().parse_args(["--sweep", "standard"]))
    assert not any(config.backward for _, config, _ in forward)
