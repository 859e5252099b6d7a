"""One timer for every contender: per-rep CUDA events around a single call, with the L2 flushed
before each rep (the harness warms up first and reports the median of the reps).

Before the start event the stream also gets a ~1 ms spin kernel (``torch.cuda._sleep``): while the
GPU spins, the host enqueues the start event, every launch of the call and the end event, so the
events time the GPU work and not Python's launch overhead, which would otherwise dominate the
sub-millisecond cases (a compiled FlexAttention call or our multi-launch SDD pipeline spend tens
of microseconds on the host per call).

A timer is any callable ``timer(run, reps=..., setup=None) -> list[float]`` (milliseconds per
rep), so tests can pass a fake one and the CPU reference can be timed with a host clock. With
``setup``, each rep first calls ``setup()`` untimed (before the flush) and then times
``run(setup's result)``: a backward pass is timed on a fresh forward's graph this way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import torch

#: Written before each rep: several times the H200's 60 MB L2.
FLUSH_BYTES = 256 << 20
#: GPU cycles of the spin kernel queued ahead of each rep (about 1 ms at 2 GHz).
HOST_LEAD_CYCLES = 2_000_000

Runner = Callable[..., object]


class Timer(Protocol):
    def __call__(
        self, run: Runner, *, reps: int, setup: Callable[[], object] | None = None
    ) -> list[float]: ...


class CudaEventTimer:
    """Times ``run`` on the current stream of ``device`` with CUDA events, one pair per rep."""

    def __init__(
        self, device: torch.device, *, flush_l2: bool = True, lead_cycles: int = HOST_LEAD_CYCLES
    ) -> None:
        self.device = device
        self.flush = torch.empty(FLUSH_BYTES, dtype=torch.int8, device=device) if flush_l2 else None
        self.spin = _spin_kernel(device)
        self.lead_cycles = lead_cycles  # of the spin kernel ahead of each rep

    def __call__(
        self, run: Runner, *, reps: int, setup: Callable[[], object] | None = None
    ) -> list[float]:
        times = []
        for _ in range(reps):
            call = _prepared_call(run, setup)
            if self.flush is not None:
                self.flush.zero_()
            if self.spin is not None:
                self.spin(self.lead_cycles)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return times


def host_timer(run: Runner, *, reps: int, setup: Callable[[], object] | None = None) -> list[float]:
    """Wall-clock timer for CPU work (the reference on a machine without a GPU)."""
    times = []
    for _ in range(reps):
        call = _prepared_call(run, setup)
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def _prepared_call(run: Runner, setup: Callable[[], object] | None) -> Callable[[], object]:
    """``run`` itself, or ``run`` bound to a fresh ``setup()`` (called now, untimed)."""
    if setup is None:
        return run
    prepared = setup()
    return lambda: run(prepared)


def _spin_kernel(device: torch.device) -> Callable[[int], None] | None:
    """``torch.cuda._sleep`` if this torch has it and it runs, else None (plain event timing)."""
    spin = getattr(torch.cuda, "_sleep", None)
    if spin is None:
        return None
    try:
        with torch.cuda.device(device):
            spin(1)
        torch.cuda.synchronize(device)
    except Exception:
        return None
    return spin
