"""Running benchmarks for the panel: one at a time across the server, and failures contained.

``GpuCoordinator`` is the one object every browser session shares (the view keeps it in
``st.cache_resource``). ``turn()`` takes its lock, and while another run holds it calls
``on_wait`` with that run's status, so the page can say what it waits for. It also keeps the
harness's ``BenchSession`` (timer buffer, FlexAttention's compiled kernel, dense timings), so
compiled work is reused across reruns and sessions.

``measure`` runs one case under a turn: it refuses a case whose memory estimate does not fit,
then calls ``run_benchmark`` (the same harness as ``python -m gpu.bench``) and recomputes the
per-head errors. Out of memory, a compile error or a launch failure becomes a message with its
cause; references are dropped and the allocator's cache emptied in every case, so the next run
starts clean. If the CUDA context itself is broken afterwards, later runs are refused with
that reason instead of failing mysteriously.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import torch

from designer.design import Design
from gpu.bench import BenchConfig, BenchResult, BenchSession, document, run_benchmark
from gpu.bench.contenders import free_device_bytes
from gpu.bench.details import DETAIL_IMPLS, error_details
from gpu.bench.memory import MemoryEstimate, estimate_memory, refusal
from gpu.bench.report import result_to_dict
from gpu.bench.results import failure_kind, is_backward, plain_document

Progress = Callable[[str, float], None]
#: How long a run waits for another session's run before giving up, in seconds.
DEFAULT_WAIT_S = 900.0


class GpuBusy(RuntimeError):
    """Another run held the GPU for longer than we were willing to wait."""


@dataclass(frozen=True)
class RunStatus:
    """What the run holding the GPU is doing."""

    what: str
    stage: str
    fraction: float
    started: float  # time.monotonic() when it got the GPU

    def describe(self) -> str:
        elapsed = time.monotonic() - self.started
        return f"{self.what}: {self.stage} ({self.fraction:.0%}), running for {elapsed:.0f} s"


class GpuCoordinator:
    """The GPU's lock, the status of the run holding it, and the shared harness session."""

    def __init__(self, make_session: Callable[[bool], BenchSession] | None = None) -> None:
        self._lock = threading.Lock()
        self._status: RunStatus | None = None
        self._make_session = make_session or (
            lambda flush_l2: BenchSession(torch.device("cuda"), flush_l2=flush_l2)
        )
        self._sessions: dict[bool, BenchSession] = {}
        #: Set when a failure left the CUDA context unusable: why, for every later run.
        self.broken: str | None = None

    @property
    def status(self) -> RunStatus | None:
        """The current run's status, or None when the GPU is free."""
        return self._status

    @contextmanager
    def turn(
        self,
        what: str,
        *,
        on_wait: Callable[[RunStatus], None],
        wait_s: float = DEFAULT_WAIT_S,
        poll_s: float = 0.5,
    ) -> Iterator[Progress]:
        """Hold the GPU for ``what``; yields a ``progress(stage, fraction)`` that updates the
        status others see. Raises ``GpuBusy`` after ``wait_s`` seconds of waiting."""
        start = time.monotonic()
        while not self._lock.acquire(timeout=poll_s):
            if (status := self._status) is not None:
                on_wait(status)
            if time.monotonic() - start >= wait_s:
                held = status.describe() if status else "another run"
                raise GpuBusy(f"The GPU is still busy after {wait_s:.0f} s ({held}); try again.")
        try:
            self._status = RunStatus(what, "starting", 0.0, time.monotonic())
            yield self._report
        finally:
            self._status = None
            self._lock.release()

    def _report(self, stage: str, fraction: float) -> None:
        if self._status is not None:
            self._status = replace(self._status, stage=stage, fraction=fraction)

    def bench_session(self, flush_l2: bool) -> BenchSession:
        """The harness session runs with this L2 flush setting share (create it under a turn):
        the session's timer, not the config, decides whether L2 is flushed."""
        if flush_l2 not in self._sessions:
            self._sessions[flush_l2] = self._make_session(flush_l2)
        return self._sessions[flush_l2]


@dataclass(frozen=True)
class Measurement:
    """What one case gave: the harness result (None if refused or failed before it), per-head
    errors, the error message (refusal, out of memory...) and the memory estimate."""

    result: BenchResult | None
    details: dict[str, dict[str, Any]]
    error: str | None
    estimate: MemoryEstimate


def free_gpu_bytes() -> int:
    """Memory a run can use on the current device (``contenders.free_device_bytes``)."""
    return free_device_bytes()


def release_gpu_memory() -> None:
    """Drop unreachable tensors and hand the allocator's cached blocks back to the driver."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def cuda_context_problem() -> str | None:
    """Why the CUDA context cannot be used any more (a sticky launch error), or None."""
    if not torch.cuda.is_available():
        return None
    try:
        torch.cuda.synchronize()
    except RuntimeError as error:
        return (
            f"The GPU is in an error state after the last failure ({error}); restart the app "
            "to run benchmarks again. Designs and stored runs are unaffected."
        )
    return None


def case_estimate(config: BenchConfig, design: Design) -> MemoryEstimate:
    """The memory ``config`` needs on ``design`` (a one-head layout serves every head)."""
    layout = design.layout
    nnz = layout.nnz * (config.heads if layout.n_heads == 1 else 1)
    return estimate_memory(config, nnz, layout.block_size)


def measure(
    coordinator: GpuCoordinator,
    config: BenchConfig,
    design: Design,
    *,
    margin: float,
    progress: Progress,
    with_details: bool = True,
) -> Measurement:
    """Run one case (see the module docstring). Call it inside ``coordinator.turn``."""
    layout = design.layout
    estimate = case_estimate(config, design)
    if coordinator.broken:
        return Measurement(None, {}, coordinator.broken, estimate)
    if reason := refusal(estimate, free_gpu_bytes(), margin):
        return Measurement(None, {}, reason, estimate)
    result, details, error = None, {}, None
    try:
        result = run_benchmark(
            config, layout, name=design.name, progress=progress,
            session=coordinator.bench_session(config.flush_l2),
        )  # fmt: skip
        impls = tuple(c for c in config.contenders if c in DETAIL_IMPLS)
        # per-head errors take a dense reference of every row: not for a layout held as runs
        if with_details and config.check_error and impls and layout.runs is None:
            progress("per-head errors", 1.0)
            details = error_details(config, layout, impls)
    except torch.OutOfMemoryError as exc:
        error = f"Out of memory: {str(exc).splitlines()[0]}"
    except Exception as exc:  # shown to the user, never swallowed
        error = f"{failure_kind(str(exc)).capitalize()}: {type(exc).__name__}: {exc}"[:1000]
    finally:
        release_gpu_memory()
    if error:
        coordinator.broken = cuda_context_problem()
    return Measurement(result, details, error, estimate)


def case_dict(measurement: Measurement, **extra: Any) -> dict[str, Any]:
    """The measured case as the JSON the harness writes, with its per-head ``details`` and
    any ``extra`` keys (such as ``sweep``)."""
    if measurement.result is None:
        raise ValueError(f"a refused or failed case has no result to store: {measurement.error}")
    case = result_to_dict(measurement.result)
    if measurement.details:
        case["details"] = measurement.details
    case.update(extra)
    return case


def run_document(
    cases: list[dict[str, Any]], design: str, digest: str, kind: str
) -> dict[str, Any]:
    """A benchmark document (``gpu.bench.document``) of ``cases`` measured on the design named
    ``design`` whose content has ``digest`` (the name its runs are stored under)."""
    doc = document([], backward=any(is_backward(case) for case in cases))
    doc["cases"] = cases
    doc["kind"] = kind
    doc["design"] = {"name": design, "digest": digest}
    return plain_document(doc, "the new run")
