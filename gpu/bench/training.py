"""One training step's attention, timed and checked: forward, then backward, on fresh inputs.

A step is ``torch.autograd.grad(attention(q, k, v), (q, k, v), grad_out)``: q, k, v are leaf
tensors that require grad, drawn with ``randn`` like the forward benchmark's, and ``grad_out`` is
a fixed random output gradient drawn after them (never zeros). ``torch.autograd.grad`` returns
the gradients without accumulating into ``.grad``, so every rep does the same work. Three times
are measured with the harness's timer (events, L2 flushed before each rep):

- ``step``: forward then backward, the number speedups are computed from;
- ``forward``: the forward alone with inputs requiring grad (what a training forward costs: it
  also saves what the backward needs; the graph is dropped after each rep);
- ``backward``: the backward alone, timed directly (not as a difference of two noisy medians):
  each rep runs a fresh forward untimed, before the L2 flush, then times the backward on its
  graph exactly as training runs it (saved tensors used once; no ``retain_graph``, which some
  compiled backwards refuse or compile differently).

Gradient errors are ``metrics.errors`` of each of dq, dk, dv against the fp64 gradients of
``gpu.reference.dense_masked_attention_backward`` (chunked, memory-bounded), computed once per
case by ``reference_grads`` and shared by every contender.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from gpu.bench.contenders import Case, Prepared
from gpu.bench.metrics import errors, median
from gpu.bench.timing import Timer
from gpu.reference import dense_masked_attention_backward

GRAD_NAMES = ("dq", "dk", "dv")


@dataclass(frozen=True)
class StepTimes:
    """Milliseconds per rep of the step, the forward alone and the backward alone."""

    step: tuple[float, ...]
    forward: tuple[float, ...]
    backward: tuple[float, ...]

    @property
    def medians(self) -> tuple[float, float, float]:
        return median(list(self.step)), median(list(self.forward)), median(list(self.backward))


def grads_of(prepared: Prepared, case: Case) -> tuple[torch.Tensor, ...]:
    """``(dq, dk, dv)`` of one step of ``prepared`` on ``case``."""
    return _backward(prepared.run(), case)


def _backward(out: torch.Tensor, case: Case) -> tuple[torch.Tensor, ...]:
    return torch.autograd.grad(out, (case.q, case.k, case.v), case.grad_out)


def time_step(prepared: Prepared, case: Case, timer: Timer, *, reps: int) -> StepTimes:
    """Time ``prepared`` as a training step (see the module docstring); the caller has warmed
    it up."""
    step_times = timer(lambda: grads_of(prepared, case), reps=reps)
    forward_times = timer(prepared.run, reps=reps)
    backward_times = timer(lambda out: _backward(out, case), reps=reps, setup=prepared.run)
    return StepTimes(tuple(step_times), tuple(forward_times), tuple(backward_times))


def reference_grads(case: Case) -> tuple[torch.Tensor, ...]:
    """The fp64 ``(dq, dk, dv)`` of the case's step, chunk by chunk (bounded memory)."""
    return dense_masked_attention_backward(
        case.q.detach(), case.k.detach(), case.v.detach(), case.grad_out, case.blocks,
        case.block_size, causal=case.causal, scale=case.scale,
    )  # fmt: skip


def grad_errors(
    grads: tuple[torch.Tensor, ...], reference: tuple[torch.Tensor, ...]
) -> dict[str, float]:
    """``{"dq_rel_error", "dk_rel_error", "dv_rel_error", "grad_max_abs_error"}``: each
    gradient's ``‖g − ref‖ / ‖ref‖``, and the largest ``|g − ref|`` of the three.

    >>> ref = (torch.ones(2, dtype=torch.float64),) * 3
    >>> grad_errors((torch.tensor([1.0, 1.5]), ref[1], ref[2]), ref)["grad_max_abs_error"]
    0.5
    """
    numbers: dict[str, float] = {}
    largest = []
    for name, grad, ref in zip(GRAD_NAMES, grads, reference, strict=True):
        max_abs, relative = errors(grad, ref)
        numbers[f"{name}_rel_error"] = relative
        largest.append(max_abs)
    numbers["grad_max_abs_error"] = math.nan if any(map(math.isnan, largest)) else max(largest)
    return numbers
