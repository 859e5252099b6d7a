"""Benchmark documents as the panel reads them.

Documents come from the real harness on the CPU with fake contenders and a fake timer
(``fake_harness``), so they have exactly the schema ``python -m gpu.bench`` writes.
"""

from __future__ import annotations

import json

import pytest
import torch

from designer.layout import Layout
from gpu.bench import BenchConfig, BenchSession, document, run_benchmark
from gpu.bench import harness as harness_module
from gpu.bench.contenders import Prepared
from gpu.bench.results import (
    case_label,
    dense_baseline,
    document_bytes,
    failure_kind,
    ideal_speedup,
    problems,
    read_document,
    short_label,
    speedup_vs_dense,
    table_rows,
)
from gpu.reference import dense_masked_attention

#: Milliseconds each fake contender takes.
TIMES = {
    "fused": 1.0,
    "fused_api": 1.0,
    "sdd": 2.0,
    "sdd_w1": 3.0,
    "sdd_qk": 1.0,
    "sdd_qk_w1": 1.5,
    "flex": 1.5,
    "flex_tuned": 1.2,
    "flex_flash": 1.1,
    "cudnn_bsa": 1.3,
    "fa4": 1.05,
    "sdpa": 5.0,
    "sdpa_cudnn": 4.0,
    "sdpa_flash": 4.5,
    "reference": 9.0,
}
SMALL = dict(heads=2, seq_q=64, head_dim=16, warmup=1, reps=3, device="cpu", flush_l2=False)


def fake_harness(monkeypatch, times=None, failures=None):
    """Make ``run_benchmark`` run every contender on the CPU: ours and Flex return the fp32
    reference rounded to the input dtype (differentiable in a training step), failures raise
    their message, the timer says ``times`` of the contender prepared last. Returns the timer
    (pass it to a ``BenchSession``)."""
    times = {**TIMES, **(times or {})}
    failures = failures or {}
    timing = {}

    def prepare(name, case):
        if name in failures:
            raise failures[name]
        timing["contender"] = name

        computes_layout = not name.startswith("sdpa") and not name.startswith("sdd_qk")

        def run():
            return dense_masked_attention(
                case.q, case.k, case.v, case.blocks, case.block_size, causal=case.causal,
                scale=case.scale, compute_dtype=torch.float32,
            ).to(case.q.dtype)  # fmt: skip

        if case.backward:  # a new differentiable output every step
            return Prepared(run, computes_layout)
        out = run()  # the forward's output is the same every call
        return Prepared(lambda: out, computes_layout)

    monkeypatch.setattr(harness_module, "prepare", prepare)
    return lambda run, *, reps, setup=None: [times[timing["contender"]]] * reps


def make_case(monkeypatch, contenders=("fused", "sdd", "sdd_w1", "flex", "sdpa_cudnn"), *,
              layout=None, times=None, failures=None, **changes):  # fmt: skip
    timer = fake_harness(monkeypatch, times, failures)
    layout = layout or Layout(torch.ones(2, 4, 4, dtype=torch.bool).tril(), 16)
    config = BenchConfig(**{**SMALL, "contenders": contenders, **changes})
    session = BenchSession(torch.device("cpu"), timer=timer)
    return run_benchmark(config, layout, name="tiny", session=session)


def make_doc(monkeypatch, **kwargs):
    doc = document([make_case(monkeypatch, **kwargs)], env={"gpu": "test GPU", "torch": "x"})
    return json.loads(json.dumps(doc))


def test_speedups_ideal_and_rows(monkeypatch):
    doc = make_doc(monkeypatch)
    case = doc["cases"][0]
    assert dense_baseline(case)["name"] == "sdpa_cudnn"
    rows = {row["contender"]: row for row in table_rows(case)}
    assert rows["fused"]["x dense"] == 4.0 and rows["flex"]["x dense"] == pytest.approx(4 / 1.5)
    assert rows["fused"]["ms"] == 1.0 and rows["sdpa_cudnn"]["x cuDNN"] == 1.0
    assert rows["fused"]["rel err"] < 1e-2 and rows["sdpa_cudnn"]["rel err"] is None
    # the ideal is dense FLOPs over the layout's: 1 / density (10 of 16 blocks, not causal)
    assert ideal_speedup(case) == pytest.approx(16 / 10)
    assert case_label(case) == "B=1 H=2 S=64 D=16 bf16 · block 16 · density 62.50%"


def test_rows_and_labels_of_a_training_step(monkeypatch):
    doc = make_doc(monkeypatch, backward=True, contenders=("fused", "flex", "sdpa_cudnn"))
    case = doc["cases"][0]
    assert doc["mode"] == case["mode"] == "forward+backward"
    rows = {row["contender"]: row for row in table_rows(case)}
    fused = rows["fused"]
    assert "ms" not in fused and fused["fwd+bwd ms"] == 1.0  # the fake timer: 1 ms every phase
    assert fused["fwd ms"] == fused["bwd ms"] == 1.0 and fused["x dense"] == 4.0
    assert fused["TFLOP/s"] == pytest.approx(3.5 * case["flops"] / 1e-3 / 1e12)
    assert fused["bwd TFLOP/s"] == pytest.approx(2.5 * case["flops"] / 1e-3 / 1e12)
    for grad in ("dq", "dk", "dv"):
        assert 0 < fused[f"{grad} rel err"] < 1e-2
    assert rows["sdpa_cudnn"]["dq rel err"] is None
    assert case_label(case).endswith(" · forward + backward")
    assert short_label(doc).endswith("B=1 D=16 bf16 fwd+bwd")
    assert not short_label(make_doc(monkeypatch)).endswith("fwd+bwd")
    forward = table_rows(make_doc(monkeypatch)["cases"][0])[0]
    assert "fwd ms" not in forward and "dq rel err" not in forward
    assert read_document(document_bytes(doc), "run.json") == doc


def test_ideal_speedup_counts_causal_dense_work(monkeypatch):
    ones = Layout(torch.ones(2, 4, 4, dtype=torch.bool), 16)
    case = make_doc(monkeypatch, layout=ones, causal=True)["cases"][0]
    assert ideal_speedup(case) == pytest.approx(1.0)  # the causal layout is all the work
    without = make_doc(monkeypatch, layout=ones, causal=True, contenders=("fused",))["cases"][0]
    assert (
        dense_baseline(without) is None and speedup_vs_dense(without, without["results"][0]) is None
    )
    assert ideal_speedup(without) == pytest.approx(1 / without["layout"]["token_density"])


def test_dense_baseline_falls_back_to_default_sdpa(monkeypatch):
    case = make_doc(monkeypatch, contenders=("fused", "sdpa", "sdpa_cudnn"),
                    failures={"sdpa_cudnn": RuntimeError("no cuDNN")})["cases"][0]  # fmt: skip
    assert dense_baseline(case)["name"] == "sdpa"
    assert problems(case) == ["sdpa_cudnn failed (error): RuntimeError: no cuDNN"]


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB", "out of memory"),
        ("RuntimeError: compiling gpu/kernels/fused_attention.cu failed", "kernel compile error"),
        (
            "CUDADriverError: CUDA_ERROR_LAUNCH_FAILED: unspecified launch failure",
            "kernel launch failure",
        ),
        (
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            "kernel launch failure",
        ),
        ("ValueError: block_size must be one of 16, 32, 64, 128", "error"),
    ],
)
def test_failure_kind(message, kind):
    assert failure_kind(message) == kind


def test_failed_contender_row_names_the_kind(monkeypatch):
    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
    case = make_doc(monkeypatch, failures={"sdd": oom})["cases"][0]
    row = next(r for r in table_rows(case) if r["contender"] == "sdd")
    assert row["status"] == "failed" and row["ms"] is None
    assert row["note"].startswith("out of memory: OutOfMemoryError: CUDA out of memory")


def test_read_document_round_trip_and_errors(monkeypatch):
    doc = make_doc(monkeypatch)
    assert read_document(document_bytes(doc), "run.json") == doc
    bad = {
        b"{nope": "run.json is not JSON",
        b"[]": "the document must be a dict, got list",
        json.dumps({**doc, "format": "x"}).encode(): "format must be 'blocksparse-bench'",
        json.dumps({**doc, "cases": {}}).encode(): "cases must be a list",
        json.dumps({**doc, "cases": []}).encode(): "cases must not be empty",
    }
    broken = json.loads(json.dumps(doc))
    broken["cases"][0]["results"][0]["ms"] = "fast"
    bad[json.dumps(broken).encode()] = r"cases\[0\].results\[0\].ms must be a number or null"
    broken = json.loads(json.dumps(doc))
    broken["cases"][0]["layout"]["token_density"] = 2
    bad[json.dumps(broken).encode()] = r"token_density must be in \[0, 1\]"
    for text, match in bad.items():
        with pytest.raises(ValueError, match=match):
            read_document(text, "run.json")
