"""``run_benchmark``: every contender on the same inputs, with the same timer, in one process.

For one layout and ``BenchConfig`` it draws fresh ``randn`` inputs (seeded), computes the fp64
reference once (on a sample of query rows when the case is large, see ``checks.py``), then for
each contender: prepares it (plans, compiles, a first call), checks its output against the
reference, and only if it is accurate (``variants.ACCURACY_LIMITS``) warms it up and times
``reps`` calls with the L2 flushed before each: a wrong result is never timed, it "failed" with
its errors in the message. A contender that is unavailable or fails gets a status and a
message; the others still run. ``progress(stage, fraction)`` is called as it goes
("reference", "compile fused", "warm-up fused", "timing fused", ..., "done"). Each result
records the wall ``seconds`` its contender took (compiling, checking and timing).

A contender with variants (FlexAttention: backend, tile size and ``mask_mod`` form, see
``flex.py``) has each variant measured that way; its result is the fastest accurate variant's
(``variants.py``), with ``variant`` naming it and ``variants`` holding every variant's time and
errors. A variant whose compiled code failed to build (not out of memory, not a launch error)
is not built again in the session for a case of the same shapes: it fails with the same
message, marked as not retried (``BenchSession.failed_builds``).

With ``config.backward`` each contender is timed as a training step instead (``training.py``):
forward then backward with a fixed random output gradient. ``ms`` is then the step's median,
``fwd_ms`` and ``bwd_ms`` the forward and the backward alone, TFLOP/s count the backward as 2.5×
the forward's FLOPs, and dq, dk, dv are checked against the fp64 reference gradients.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import SimpleNamespace

import torch

from designer.layout import Layout
from gpu.bench.checks import References, references, row_sample
from gpu.bench.config import BenchConfig
from gpu.bench.contenders import Case, Prepared, Unavailable, Variants, prepare
from gpu.bench.flex import FlexSession
from gpu.bench.metrics import (
    active_pairs,
    all_pairs,
    attention_flops,
    backward_flops,
    median,
    runs_active_pairs,
    speedup,
    step_flops,
    tflops,
    token_density,
)
from gpu.bench.results import failure_kind
from gpu.bench.runs_checks import sampled_runs_references
from gpu.bench.timing import CudaEventTimer, Timer, host_timer
from gpu.bench.training import grads_of, time_step
from gpu.bench.variants import (
    ACCURACY_LIMITS,
    VariantResult,
    accurate,
    fastest_accurate,
    no_variant,
    variant_result,
)

Progress = Callable[[str, float], None]
#: Contenders whose timing does not depend on the layout (reused across cases of one session).
DENSE_BASELINES = ("sdpa", "sdpa_cudnn", "sdpa_flash")
#: FlexAttention contenders; speedups "vs Flex" divide by the fastest of them in the run.
FLEX_CONTENDERS = ("flex", "flex_tuned", "flex_flash")
#: cuDNN's block-sparse attention, reported beside Flex ("vs BSA").
BSA_CONTENDER = "cudnn_bsa"
#: Failures of a build that say nothing about the next case (``results.failure_kind``).
TRANSIENT_FAILURES = ("out of memory", "kernel launch failure")
NOT_RETRIED = " (not retried: the same build failed on an earlier case of this run)"


@dataclass(frozen=True)
class ContenderResult:
    name: str
    status: str  # "ok", "unavailable" or "failed"
    message: str = ""
    ms: float | None = None  # median (of a whole training step with ``backward``)
    times_ms: tuple[float, ...] = ()
    tflops: float | None = None  # effective: the layout's FLOPs (3.5x in a step) over ms
    own_tflops: float | None = None  # dense baselines: their own (dense or causal) FLOPs
    speedup_vs_cudnn: float | None = None
    speedup_vs_flex: float | None = None  # over the fastest of flex, flex_tuned, flex_flash
    speedup_vs_bsa: float | None = None  # over cuDNN's block-sparse attention
    max_abs_error: float | None = None
    rel_error: float | None = None
    # training steps only: the forward and the backward alone (see training.py), gradient errors
    fwd_ms: float | None = None
    bwd_ms: float | None = None
    fwd_times_ms: tuple[float, ...] = ()
    bwd_times_ms: tuple[float, ...] = ()
    bwd_tflops: float | None = None  # 2.5x the layout's forward FLOPs over bwd_ms
    dq_rel_error: float | None = None
    dk_rel_error: float | None = None
    dv_rel_error: float | None = None
    grad_max_abs_error: float | None = None
    # contenders with variants: the one this result is, and what each variant gave
    variant: str | None = None
    variants: tuple[VariantResult, ...] = ()
    seconds: float | None = None  # wall time of this contender: compile, check and timing


@dataclass(frozen=True)
class LayoutInfo:
    name: str
    block_size: int
    shape: tuple[int, int, int]
    nnz: int
    block_density: float
    token_density: float


@dataclass(frozen=True)
class BenchResult:
    case: str
    config: BenchConfig
    layout: LayoutInfo
    flops: int  # the forward's effective FLOPs (a training step counts 3.5x)
    results: tuple[ContenderResult, ...]
    checked_rows: int | None = None  # query rows per (batch, head) checked (None: no check)
    # a layout held as row runs, in a training step: keys whose dk, dv are checked, and where
    checked_key_rows: int | None = None
    checked_key_heads: tuple[int, ...] | None = None

    @property
    def mode(self) -> str:
        return self.config.mode

    def result(self, name: str) -> ContenderResult | None:
        return next((r for r in self.results if r.name == name), None)


class BenchSession:
    """What cases of one process share: the timer, Flex's compiled kernels, dense timings, and
    the builds that failed (by contender, variant and shapes: their message)."""

    def __init__(self, device: torch.device, *, flush_l2: bool = True, timer: Timer | None = None):
        self.device = device
        if timer is None:
            timer = CudaEventTimer(device, flush_l2=flush_l2) if device.type == "cuda" else None
        self.timer: Timer = timer or host_timer
        self.flex = FlexSession()
        self.dense_times: dict[tuple, ContenderResult] = {}
        self.failed_builds: dict[tuple, str] = {}


def seeded_inputs(config: BenchConfig) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fresh random q, k, v of a case: ``randn`` from ``config.seed``, drawn in that order.

    Anyone who wants to look at a contender's output on the benchmark's own inputs (the app's
    per-head error view) draws them again with this.
    """
    q, k, v = _draw(config, (config.shape_q, config.shape_k, config.shape_k))
    return q, k, v


def seeded_training_inputs(config: BenchConfig) -> tuple[torch.Tensor, ...]:
    """``(q, k, v, grad_out)`` of a training step: ``seeded_inputs``'s q, k, v as leaves that
    require grad, and the output gradient, ``randn`` drawn after them from the same generator."""
    q, k, v, grad_out = _draw(config, (config.shape_q, config.shape_k, config.shape_k,
                                        config.shape_q))  # fmt: skip
    return q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), grad_out


def _draw(config: BenchConfig, shapes: tuple[tuple[int, ...], ...]) -> list[torch.Tensor]:
    device = torch.device(config.device)
    gen = torch.Generator(device=device).manual_seed(config.seed)
    return [torch.randn(shape, generator=gen, device=device, dtype=config.torch_dtype)
            for shape in shapes]  # fmt: skip


def run_benchmark(
    config: BenchConfig,
    layout: Layout,
    *,
    name: str = "layout",
    progress: Progress | None = None,
    session: BenchSession | None = None,
) -> BenchResult:
    """Time every contender of ``config`` on ``layout``; see the module docstring."""
    blocks = _check_layout(config, layout)
    device = torch.device(config.device)
    session = session or BenchSession(device, flush_l2=config.flush_l2)
    report = progress or (lambda stage, fraction: None)
    steps = 1 + 3 * len(config.contenders)

    draw = seeded_training_inputs if config.backward else seeded_inputs
    q, k, v, *grad_out = draw(config)
    scale = config.head_dim**-0.5
    case = Case(q, k, v, blocks, layout.block_size, config.causal, scale, config.start_width,
                session.flex, grad_out=grad_out[0] if grad_out else None,
                runs_layout=layout if blocks is None else None)  # fmt: skip
    reference = checked_rows = checked_keys = None
    if config.check_error:
        report("reference", 0.0)
        sample = row_sample(config.batch, config.seq_q, config.seq_len_k, layout.block_size)
        with torch.no_grad():
            find = references if blocks is not None else sampled_runs_references
            reference = find(case, sample)
        checked_rows = config.seq_q if sample is None else sample.rows
        if blocks is None and config.backward:
            checked_keys = (sum(b - a for a, b in reference.key_windows), reference.heads)
    repeats = config.heads // layout.n_heads  # a one-head layout serves every head
    if blocks is None:
        pairs = runs_active_pairs(layout.runs, layout.block_size, causal=config.causal)
    else:
        pairs = active_pairs(blocks, layout.block_size, causal=config.causal)
    pairs *= repeats
    flops = attention_flops(config.batch, config.head_dim, pairs)

    timed = []
    for i, contender in enumerate(config.contenders):

        def report_part(stage: str, fraction: float, first: int = 1 + 3 * i) -> None:
            report(stage, (first + 3 * fraction) / steps)

        timed.append(_run_one(contender, case, config, session, reference, report_part))
    report("done", 1.0)
    results = _derive(timed, config, flops, layout.block_size)
    if blocks is None:
        cells = layout.n_q_blocks * layout.n_k_blocks * layout.block_size**2
        densities = layout.density, pairs / (config.heads * cells)
    else:
        densities = (float(blocks.float().mean()),
                     token_density(blocks, layout.block_size, causal=config.causal))  # fmt: skip
    info = LayoutInfo(
        name=name,
        block_size=layout.block_size,
        shape=(config.heads, *layout.shape[1:]),
        nnz=layout.nnz * repeats,
        block_density=densities[0],
        token_density=densities[1],
    )
    return BenchResult(name, config, info, flops, tuple(results), checked_rows,
                       *(checked_keys or (None, None)))  # fmt: skip


def _check_layout(config: BenchConfig, layout: Layout) -> torch.Tensor:
    if not isinstance(layout, Layout):
        raise TypeError(f"layout must be a Layout, got {type(layout).__name__}")
    if layout.n_heads not in (1, config.heads):
        raise ValueError(f"layout must have 1 head or {config.heads}, got {layout.n_heads}")
    if (layout.seq_len_q, layout.seq_len_k) != (config.seq_q, config.seq_len_k):
        raise ValueError(
            f"layout covers {layout.seq_len_q} x {layout.seq_len_k} tokens, the config "
            f"{config.seq_q} x {config.seq_len_k}"
        )
    # one head (serving every head) or config.heads; None for a layout held as row runs
    return layout.blocks if layout.runs is None else None


def _run_one(name, case, config, session, reference, report) -> ContenderResult:
    def run() -> ContenderResult:
        report(f"compile {name}", 0.0)
        prepared = prepare(name, case)
        if isinstance(prepared, Variants):
            return _fastest_variant(name, prepared, case, config, session, reference, report)
        return _measured(name, prepared, case, config, session, reference, report)

    return _attempt(name, run)


def _attempt(name: str, run: Callable[[], ContenderResult]) -> ContenderResult:
    """``run()``, or the result saying why it could not run or failed; with its wall time."""
    started = time.perf_counter()
    try:
        result = run()
    except Unavailable as error:
        result = ContenderResult(name, "unavailable", str(error))
    except Exception as error:  # one failure must not end the run
        result = ContenderResult(name, "failed", f"{type(error).__name__}: {error}"[:500])
    return replace(result, seconds=round(time.perf_counter() - started, 3))


def _measured(
    name, prepared: Prepared, case, config, session, reference: References | None, report
) -> ContenderResult:
    """Check ``prepared``'s errors, then time it if it is accurate (a dense baseline once per
    shape)."""
    dense_key = (name, config.shape_q, config.shape_k, config.dtype, config.causal, config.reps,
                 config.backward)  # fmt: skip
    cached = session.dense_times.get(dense_key) if name in DENSE_BASELINES else None
    if case.backward and cached is None:
        grads_of(prepared, case)  # Flex compiles its backward on the first one
    errors = {}
    if reference is not None and prepared.computes_layout:
        errors = reference.output_errors(prepared.run().detach())
        if reference.grads is not None:
            errors |= reference.grad_errors(grads_of(prepared, case))
    if accurate(SimpleNamespace(**errors)) is False:
        return ContenderResult(name, "failed", wrong_result(errors), **errors)
    result = cached or _timed(name, prepared, case, config, session, report)
    if name in DENSE_BASELINES:
        session.dense_times[dense_key] = result
    return replace(result, **errors)


def _fastest_variant(
    name, variants: Variants, case, config, session, reference: References | None, report
) -> ContenderResult:
    """Measure every variant; the fastest accurate one stands for the contender."""
    measured = []
    for i, (label, make, graph) in enumerate(variants.options):

        def part(stage: str, fraction: float, i: int = i, label: str = label) -> None:
            report(f"{stage} ({label})", (i + fraction) / len(variants.options))

        def run(make=make, part=part) -> ContenderResult:
            part(f"compile {name}", 0.0)
            return _measured(name, make(), case, config, session, reference, part)

        build = (name, label, graph, config.shape_q, config.shape_k, config.dtype,
                 config.backward)  # fmt: skip
        if build in session.failed_builds:
            measured.append(ContenderResult(name, "failed", session.failed_builds[build]))
            continue
        result = _attempt(name, run)
        if _build_failed(result):
            session.failed_builds[build] = result.message[: 500 - len(NOT_RETRIED)] + NOT_RETRIED
        measured.append(result)
    summary = tuple(map(variant_result, [option[0] for option in variants.options], measured))
    chosen = fastest_accurate(measured)
    if chosen is None:
        status, message = no_variant(summary)
        return ContenderResult(name, status, message[:2000], variants=summary)
    return replace(measured[chosen], variant=summary[chosen].name, variants=summary)


def _build_failed(result: ContenderResult) -> bool:
    """Whether ``result`` is a build's own failure: an exception (not a wrong result), neither
    out of memory nor a launch error, which depend on the moment rather than the build."""
    return (
        result.status == "failed"
        and result.rel_error is None
        and failure_kind(result.message) not in TRANSIENT_FAILURES
    )


def wrong_result(errors: dict[str, float]) -> str:
    """The message of a result outside ``ACCURACY_LIMITS``: each error beside its limit.

    >>> wrong_result({"rel_error": 0.5, "max_abs_error": 0.01})
    'wrong result, not timed: rel_error 5.0e-01 > 1.0e-02'
    """
    over = [f"{key} {errors[key]:.1e} > {limit:.1e}" for key, limit in ACCURACY_LIMITS.items()
            if errors.get(key) is not None and not errors[key] <= limit]  # fmt: skip
    return "wrong result, not timed: " + ", ".join(over)


def _timed(name, prepared, case, config, session, report) -> ContenderResult:
    """Warm ``prepared`` up and time it: its forward, or its training step."""
    report(f"warm-up {name}", 1 / 3)
    for _ in range(config.warmup):
        if case.backward:
            grads_of(prepared, case)
        else:
            prepared.run()
    _synchronize(case.q)
    report(f"timing {name}", 2 / 3)
    if not case.backward:
        times = session.timer(prepared.run, reps=config.reps)
        return ContenderResult(name, "ok", ms=median(times), times_ms=tuple(times))
    step = time_step(prepared, case, session.timer, reps=config.reps)
    step_ms, fwd_ms, bwd_ms = step.medians
    return ContenderResult(
        name, "ok", ms=step_ms, times_ms=step.step, fwd_ms=fwd_ms, bwd_ms=bwd_ms,
        fwd_times_ms=step.forward, bwd_times_ms=step.backward,
    )  # fmt: skip


def _synchronize(tensor: torch.Tensor) -> None:
    if tensor.device.type == "cuda":
        torch.cuda.synchronize(tensor.device)


def _derive(timed, config, flops, block_size) -> list[ContenderResult]:
    """Add TFLOP/s and speedups now that every contender's time is known."""
    by_name = {r.name: r for r in timed}
    cudnn = by_name.get("sdpa_cudnn")
    bsa = by_name.get(BSA_CONTENDER)
    bsa_ms = bsa.ms if bsa is not None and bsa.status == "ok" else None
    flex_times = [r.ms for r in timed if r.name in FLEX_CONTENDERS and r.status == "ok"]
    best_flex_ms = min(flex_times) if flex_times else None
    n_q, n_k = config.seq_q // block_size, config.seq_len_k // block_size
    dense_pairs = all_pairs(n_q, n_k, block_size, causal=config.causal) * config.heads
    dense_flops = attention_flops(config.batch, config.head_dim, dense_pairs)
    timed_flops, timed_dense_flops = flops, dense_flops
    if config.backward:
        timed_flops, timed_dense_flops = step_flops(flops), step_flops(dense_flops)
    results = []
    for r in timed:
        if r.status != "ok":
            results.append(r)
            continue
        dense = r.name in DENSE_BASELINES
        results.append(
            replace(
                r,
                tflops=tflops(timed_flops, r.ms),
                own_tflops=tflops(timed_dense_flops, r.ms) if dense else None,
                speedup_vs_cudnn=speedup(cudnn.ms if cudnn else None, r.ms),
                speedup_vs_flex=speedup(best_flex_ms, r.ms),
                speedup_vs_bsa=speedup(bsa_ms, r.ms),
                bwd_tflops=tflops(backward_flops(flops), r.bwd_ms) if config.backward else None,
            )
        )
    return results
