"""A contender with variants, through the real harness with fake variants and a fake timer: the
fastest accurate variant stands for it, never an inaccurate (and so untimed) or failed one,
every variant's time and errors are in the result and the JSON, and a build that failed is not
built again for the next case of the same shapes."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch

from designer.layout import Layout
from gpu.bench import BenchConfig, BenchSession, document, format_table, run_benchmark
from gpu.bench import harness as harness_module
from gpu.bench.contenders import Prepared, Unavailable, Variants
from gpu.bench.results import table_rows
from gpu.bench.variants import accurate, fastest_accurate
from gpu.reference import dense_masked_attention

SMALL = dict(heads=2, seq_q=64, head_dim=16, warmup=1, device="cpu")


def _attention(case, factor=1.0):
    return (factor * dense_masked_attention(
        case.q, case.k, case.v, case.blocks, case.block_size, causal=case.causal,
        scale=case.scale, compute_dtype=torch.float32,
    )).to(case.q.dtype)  # fmt: skip


def _variant(name, ms, *, factor=1.0, error=None):
    """A variant taking ``ms``, its output ``factor`` times the true one, or raising ``error``."""

    def make(case, timings):
        if error is not None:
            raise error
        timings["current"] = ms
        return Prepared(lambda: _attention(case, factor), True)

    return name, make


def _run(monkeypatch, variants, session=None, **changes):
    timings = {}

    def prepare(name, case):
        if name != "flex":
            timings["current"] = 10.0
            return Prepared(lambda: _attention(case), name != "sdpa_cudnn")
        return Variants(tuple((label, lambda make=make: make(case, timings), None)
                              for label, make in variants))  # fmt: skip

    monkeypatch.setattr(harness_module, "prepare", prepare)
    timer = lambda run, *, reps, setup=None: [timings["current"]] * reps  # noqa: E731
    config = BenchConfig(**{**SMALL, "contenders": ("fused", "flex", "sdpa_cudnn"), **changes})
    layout = Layout(torch.ones(1, 4, 4, dtype=torch.bool).tril(), 16)
    session = session or BenchSession(torch.device("cpu"), timer=timer)
    return run_benchmark(config, layout, session=session)


def test_the_fastest_accurate_variant_stands_for_the_contender(monkeypatch):
    result = _run(monkeypatch, [
        _variant("gather-t128", 4.0),
        _variant("band-t128", 1.0, factor=1.1),  # fastest, but 10 % off: never timed
        _variant("gather-t64", 0.5, error=RuntimeError("no kernel tile divides 64")),
        _variant("band-t64", 0.2, error=Unavailable("not here")),
        _variant("dense-t128", 2.0),
    ])  # fmt: skip
    fused, flex, _ = result.results
    assert flex.status == "ok" and flex.variant == "dense-t128" and flex.ms == 2.0
    assert flex.rel_error < 1e-2 and fused.speedup_vs_flex == pytest.approx(2.0 / 10.0)
    by_name = {v.name: v for v in flex.variants}
    assert [v.name for v in flex.variants] == [
        "gather-t128", "band-t128", "gather-t64", "band-t64", "dense-t128"
    ]  # fmt: skip
    assert by_name["gather-t128"].ms == 4.0 and by_name["gather-t128"].accurate is True
    wrong = by_name["band-t128"]
    assert wrong.accurate is False and wrong.rel_error > 0.09 and wrong.ms is None
    assert wrong.status == "failed" and wrong.message.startswith("wrong result, not timed: rel")
    assert all(v.seconds is not None and v.seconds >= 0 for v in flex.variants)
    failed = by_name["gather-t64"]
    assert failed.status == "failed" and "divides 64" in failed.message
    assert by_name["band-t64"].status == "unavailable" and by_name["band-t64"].ms is None
    assert fused.variant is None and fused.variants == ()

    doc = json.loads(json.dumps(document([result], env={"gpu": "test"})))
    flex_json = doc["cases"][0]["results"][1]
    assert flex_json["variant"] == "dense-t128"
    assert [v["ms"] for v in flex_json["variants"]] == [4.0, None, None, None, 2.0]
    assert flex_json["variants"][1]["accurate"] is False
    table = format_table([result])
    assert "flex (dense-t128)" in table and "mask_mod form and BlockMask tile" in table
    assert table_rows(doc["cases"][0])[1]["note"] == "variant dense-t128"  # the panel's table


def test_a_contender_with_no_accurate_variant_fails_with_every_reason(monkeypatch):
    result = _run(monkeypatch, [
        _variant("gather-t128", 1.0, factor=1.5),
        _variant("band-t128", 1.0, error=RuntimeError("exploded")),
    ])  # fmt: skip
    flex = result.result("flex")
    assert flex.status == "failed" and flex.ms is None and flex.variant is None
    assert "gather-t128: wrong result, not timed: rel_error 5.0e-01 > 1.0e-02" in flex.message
    assert "band-t128: RuntimeError: exploded" in flex.message
    assert len(flex.variants) == 2 and result.result("fused").speedup_vs_flex is None


def test_variants_that_cannot_run_leave_the_contender_unavailable(monkeypatch):
    result = _run(monkeypatch, [_variant("gather-t128", 1.0, error=Unavailable("no CUDA"))])
    assert result.result("flex").status == "unavailable"
    assert "gather-t128: no CUDA" in result.result("flex").message


def test_without_a_reference_the_fastest_variant_that_ran_stands(monkeypatch):
    result = _run(monkeypatch, [_variant("gather-t128", 3.0), _variant("band-t128", 1.0, factor=9)],
                  check_error=False)  # fmt: skip
    flex = result.result("flex")
    assert flex.variant == "band-t128" and flex.rel_error is None
    assert all(v.accurate is None for v in flex.variants)


def test_a_training_step_picks_by_the_step_and_checks_the_gradients(monkeypatch):
    def make_wrong_grads(case, timings):  # right output, gradients 10 % off
        timings["current"] = 1.0
        return Prepared(lambda: _attention(case, 1.1) - _attention(case, 0.1).detach(), True)

    result = _run(monkeypatch, [_variant("gather-t128", 2.0), ("band-t128", make_wrong_grads)],
                  backward=True, dtype="fp16")  # fmt: skip
    flex = result.result("flex")
    assert flex.variant == "gather-t128" and flex.ms == 2.0 and flex.dq_rel_error < 1e-2
    band = flex.variants[1]
    assert band.rel_error < 1e-2 and band.grad_rel_error == pytest.approx(0.1, abs=5e-3)
    assert band.accurate is False and band.ms is band.fwd_ms is band.bwd_ms is None
    assert "dq_rel_error 1.0e-01 > 2.0e-02" in band.message


def test_a_build_that_failed_is_not_built_again_for_the_same_shapes(monkeypatch):
    built = []

    def broken(case, timings):
        built.append(case)
        raise RuntimeError("no kernel tile divides 64")

    def out_of_memory(case, timings):
        built.append(case)
        raise torch.OutOfMemoryError("CUDA out of memory")

    variants = [_variant("gather-t128", 2.0), ("gather-t64", broken), ("band-t64", out_of_memory)]
    session = BenchSession(torch.device("cpu"), timer=lambda run, *, reps, setup=None: [1.0] * reps)
    first = _run(monkeypatch, variants, session=session).result("flex")
    again = _run(monkeypatch, variants, session=session).result("flex")
    assert len(built) == 3  # the broken build once, out of memory (a moment, not a build) twice
    assert first.variants[1].message == "RuntimeError: no kernel tile divides 64"
    assert again.variants[1].status == "failed"
    assert again.variants[1].message == (
        "RuntimeError: no kernel tile divides 64 (not retried: the same build failed on an "
        "earlier case of this run)"
    )
    assert again.status == "ok" and again.variant == "gather-t128"
    other = _run(monkeypatch, variants, session=session, head_dim=32).result("flex")
    assert len(built) == 5 and "not retried" not in other.variants[1].message  # new shapes


def test_accuracy_limits_and_the_choice():
    ok = SimpleNamespace(status="ok", ms=2.0, rel_error=3e-3, max_abs_error=8e-3)
    assert accurate(ok) is True
    assert accurate(SimpleNamespace(rel_error=math.nan)) is False
    assert accurate(SimpleNamespace(rel_error=3e-3, max_abs_error=0.2)) is False  # one bad row
    assert accurate(SimpleNamespace(dk_rel_error=0.05)) is False
    assert accurate(SimpleNamespace(rel_error=None)) is None
    fast_wrong = SimpleNamespace(status="ok", ms=1.0, rel_error=0.5, max_abs_error=1.0)
    failed = SimpleNamespace(status="failed", ms=None)
    unchecked = SimpleNamespace(status="ok", ms=3.0)
    assert fastest_accurate([ok, fast_wrong, failed, unchecked]) == 0
    assert fastest_accurate([fast_wrong, failed]) is None
    assert fastest_accurate([]) is None
