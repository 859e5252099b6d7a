"""One run at a time, refusals before launch, and failures that leave everything usable.

The harness runs on the CPU with fake contenders (``fake_harness``); the coordinator gets a CPU
``BenchSession`` with the fake timer.
"""

from __future__ import annotations

import json
import threading
import weakref
from dataclasses import replace

import pytest
import torch

from designer.analysis import design_digest
from designer.design import Design
from designer.layout import Layout
from gpu.bench import BenchConfig, BenchSession, runner
from gpu.bench.results import read_document
from gpu.bench.runner import (
    GpuBusy,
    GpuCoordinator,
    case_dict,
    measure,
    run_document,
)
from tests.gpu.bench.test_results import fake_harness

GiB = 1 << 30
CONFIG = BenchConfig(heads=2, seq_q=64, head_dim=16, warmup=1, reps=3, device="cpu",
                     flush_l2=False, contenders=("fused", "reference", "sdpa_cudnn"))  # fmt: skip
DESIGN = Design(Layout(torch.ones(2, 4, 4, dtype=torch.bool).tril(), 16), name="tiny")


@pytest.fixture
def cpu_gpu(monkeypatch):
    """A coordinator whose harness runs fake contenders on the CPU, with 1 GiB "free"."""
    timer = fake_harness(monkeypatch)
    monkeypatch.setattr(runner, "free_gpu_bytes", lambda: GiB)
    released = []
    monkeypatch.setattr(runner, "release_gpu_memory", lambda: released.append(True))
    coordinator = GpuCoordinator(lambda flush: BenchSession(torch.device("cpu"), timer=timer))
    coordinator.released = released
    return coordinator


def test_turn_reports_progress_and_frees_the_gpu():
    coordinator = GpuCoordinator()
    assert coordinator.status is None
    with coordinator.turn("run a", on_wait=print) as progress:
        progress("timing fused", 0.5)
        assert (coordinator.status.what, coordinator.status.stage) == ("run a", "timing fused")
        assert coordinator.status.describe() == "run a: timing fused (50%), running for 0 s"
    assert coordinator.status is None
    with pytest.raises(RuntimeError, match="boom"), coordinator.turn("b", on_wait=print):
        raise RuntimeError("boom")
    with coordinator.turn("c", on_wait=print):  # the failure let go of the lock
        pass


def test_a_second_run_waits_and_sees_who_holds_the_gpu():
    coordinator = GpuCoordinator()
    holding, release = threading.Event(), threading.Event()

    def hold():
        with coordinator.turn("first", on_wait=print) as progress:
            progress("compile fused", 0.1)
            holding.set()
            release.wait(5)

    thread = threading.Thread(target=hold)
    thread.start()
    holding.wait(5)
    seen = []
    busy = r"still busy after 0 s \(first: compile fused \(10%\)"
    with (
        pytest.raises(GpuBusy, match=busy),
        coordinator.turn("second", on_wait=seen.append, wait_s=0.05, poll_s=0.01),
    ):
        pass
    assert seen and seen[0].what == "first"
    timer = threading.Timer(0.1, release.set)
    timer.start()
    with coordinator.turn("second", on_wait=seen.append, poll_s=0.01):
        assert coordinator.status.what == "second"
    thread.join(5)


def test_measure_runs_the_harness_and_the_per_head_errors(cpu_gpu):
    stages = []
    result = measure(cpu_gpu, CONFIG, DESIGN, margin=1.25, progress=lambda s, f: stages.append(s))
    assert result.error is None and result.result.case == "tiny"
    assert [r.status for r in result.result.results] == ["ok", "ok", "ok"]
    assert set(result.details) == {"fused", "reference"}
    assert result.details["fused"]["error"].startswith("GpuUnavailableError")  # no CUDA here
    assert len(result.details["reference"]["head_max_abs"]) == 2
    assert stages[-1] == "per-head errors" and cpu_gpu.released == [True]
    doc = run_document([case_dict(result)], DESIGN.name, design_digest(DESIGN), "run")
    assert read_document(json.dumps(doc), "doc") == doc
    assert doc["kind"] == "run" and doc["design"]["digest"] == design_digest(DESIGN)
    assert doc["cases"][0]["details"]["reference"]["head_max_abs"]


def test_a_case_that_does_not_fit_is_refused_before_launch(cpu_gpu, monkeypatch):
    monkeypatch.setattr(runner, "run_benchmark", pytest.fail)
    big = replace(CONFIG, batch=1024, seq_q=65536)
    design = Design(Layout(torch.ones(2, 4096, 4096, dtype=torch.bool), 16))
    result = measure(cpu_gpu, big, design, margin=1.25, progress=print)
    assert result.result is None and result.error.startswith("Refused before launch")
    assert result.estimate.total > GiB and "but only 1.0 GiB are free" in result.error
    with pytest.raises(ValueError, match="a refused or failed case has no result to store"):
        case_dict(result)


def test_out_of_memory_drops_the_tensors_and_the_next_run_works(cpu_gpu, monkeypatch):
    held = []

    def out_of_memory(config, layout, **kwargs):
        inputs = torch.ones(1000)
        held.append(weakref.ref(inputs))
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 GiB\nmore")

    real = runner.run_benchmark
    monkeypatch.setattr(runner, "run_benchmark", out_of_memory)
    failed = measure(cpu_gpu, CONFIG, DESIGN, margin=0.0, progress=print)
    assert failed.result is None
    assert failed.error == "Out of memory: CUDA out of memory. Tried to allocate 64.00 GiB"
    assert held[0]() is None and cpu_gpu.released == [True] and cpu_gpu.broken is None
    monkeypatch.setattr(runner, "run_benchmark", real)
    again = measure(cpu_gpu, CONFIG, DESIGN, margin=0.0, progress=print)
    assert again.error is None and again.result is not None


def test_compile_errors_are_named_and_a_broken_context_refuses_later_runs(cpu_gpu, monkeypatch):
    def compile_error(config, layout, **kwargs):
        raise RuntimeError("compiling gpu/kernels/fused_attention.cu failed (NVRTC_ERROR)")

    monkeypatch.setattr(runner, "run_benchmark", compile_error)
    failed = measure(cpu_gpu, CONFIG, DESIGN, margin=1.0, progress=print)
    assert failed.error == (
        "Kernel compile error: RuntimeError: compiling gpu/kernels/fused_attention.cu failed "
        "(NVRTC_ERROR)"
    )
    cpu_gpu.broken = "The GPU is in an error state"
    refused = measure(cpu_gpu, CONFIG, DESIGN, margin=1.0, progress=print)
    assert refused.error == "The GPU is in an error state" and refused.result is None


def test_progress_of_the_holder_is_visible_while_it_runs(cpu_gpu):
    seen = []
    with cpu_gpu.turn("tiny", on_wait=print) as progress:

        def report(stage, fraction):
            progress(stage, fraction)
            seen.append(cpu_gpu.status.stage)

        measure(cpu_gpu, CONFIG, DESIGN, margin=1.0, progress=report)
    assert "timing fused" in seen and "reference" in seen
    assert cpu_gpu.status is None


def test_each_flush_setting_has_its_own_harness_session():
    made = []
    coordinator = GpuCoordinator(lambda flush: made.append(flush) or f"session {flush}")
    assert coordinator.bench_session(True) == coordinator.bench_session(True) == "session True"
    assert coordinator.bench_session(False) == "session False" and made == [True, False]


def test_a_design_held_as_runs_keeps_its_result_without_per_head_errors(cpu_gpu, monkeypatch):
    """Per-head errors take a dense reference of every row; a long-context design skips them."""
    import designer.layout
    from designer.patterns.attention_sinks import attention_sinks_runs

    monkeypatch.setattr(designer.layout, "DENSE_CELLS", 0)
    design = Design(Layout(attention_sinks_runs(2, 4, 4, sink_blocks=1, window_blocks=2), 16))
    assert design.layout.runs is not None
    monkeypatch.setattr(runner, "run_benchmark", lambda *args, **kwargs: "measured")
    monkeypatch.setattr(runner, "error_details", pytest.fail)
    result = measure(cpu_gpu, CONFIG, design, margin=1.25, progress=print)
    assert result.error is None and result.result == "measured" and result.details == {}
