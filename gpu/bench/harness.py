"""``run_benchmark``: every contender on the same inputs, with the same timer, in one process.

For one layout and ``BenchConfig`` it draws fresh ``randn`` inputs (seeded), computes the fp64
reference once, then for each contender: prepares it (plans, compiles, a first call), warms it up,
times ``reps`` calls with the L2 flushed before each, and checks one more output against the
reference. A contender that is unavailable or fails gets a status and a message; the others still
run. ``progress(stage, fraction)`` is called as it goes ("reference", "compile fused",
"warm-up fused", "timing fused", ..., "done").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from designer.layout import Layout
from gpu.bench.config import BenchConfig
from gpu.bench.contenders import Case, Unavailable, prepare
from gpu.bench.flex import FlexSession
from gpu.bench.metrics import (
    active_pairs,
    attention_flops,
    errors,
    median,
    speedup,
    tflops,
    token_density,
)
from gpu.bench.timing import CudaEventTimer, Timer, host_timer
from gpu.reference import dense_masked_attention

Progress = Callable[[str, float], None]
#: Contenders whose timing does not depend on the layout (reused across cases of one session).
DENSE_BASELINES = ("sdpa", "sdpa_cudnn", "sdpa_flash")
#: FlexAttention contenders; speedups "vs Flex" divide by the fastest of them in the run.
FLEX_CONTENDERS = ("flex", "flex_tuned")


@dataclass(frozen=True)
class ContenderResult:
    name: str
    status: str  # "ok", "unavailable" or "failed"
    message: str = ""
    ms: float | None = None  # median
    times_ms: tuple[float, ...] = ()
    tflops: float | None = None  # effective: the layout's FLOPs over ms
    own_tflops: float | None = None  # dense baselines: their own (dense or causal) FLOPs
    speedup_vs_cudnn: float | None = None
    speedup_vs_flex: float | None = None
    max_abs_error: float | None = None
    rel_error: float | None = None


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
    flops: int
    results: tuple[ContenderResult, ...]

    def result(self, name: str) -> ContenderResult | None:
        return next((r for r in self.results if r.name == name), None)


class BenchSession:
    """What cases of one process share: the timer, Flex's compiled kernel, dense timings."""

    def __init__(self, device: torch.device, *, flush_l2: bool = True, timer: Timer | None = None):
        self.device = device
        if timer is None:
            timer = CudaEventTimer(device, flush_l2=flush_l2) if device.type == "cuda" else None
        self.timer: Timer = timer or host_timer
        self.flex = FlexSession()
        self.dense_times: dict[tuple, ContenderResult] = {}


def seeded_inputs(config: BenchConfig) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fresh random q, k, v of a case: ``randn`` from ``config.seed``, drawn in that order.

    Anyone who wants to look at a contender's output on the benchmark's own inputs (the app's
    per-head error view) draws them again with this.
    """
    device = torch.device(config.device)
    gen = torch.Generator(device=device).manual_seed(config.seed)
    q, k, v = (
        torch.randn(shape, generator=gen, device=device, dtype=config.torch_dtype)
        for shape in (config.shape_q, config.shape_k, config.shape_k)
    )
    return q, k, v


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

    q, k, v = seeded_inputs(config)
    scale = config.head_dim**-0.5
    case = Case(q, k, v, blocks, layout.block_size, config.causal, scale, config.start_width,
                session.flex)  # fmt: skip
    reference = None
    if config.check_error:
        report("reference", 0.0)
        reference = dense_masked_attention(
            q, k, v, blocks, layout.block_size, causal=config.causal, scale=scale
        )
    pairs = active_pairs(blocks, layout.block_size, causal=config.causal)
    flops = attention_flops(config.batch, config.head_dim, pairs)

    timed = []
    for i, contender in enumerate(config.contenders):

        def report_part(stage: str, fraction: float, first: int = 1 + 3 * i) -> None:
            report(stage, (first + 3 * fraction) / steps)

        timed.append(_run_one(contender, case, config, session, reference, report_part))
    report("done", 1.0)
    results = _derive(timed, config, flops, blocks.shape[0], layout.block_size)
    info = LayoutInfo(
        name=name,
        block_size=layout.block_size,
        shape=tuple(blocks.shape),
        nnz=int(blocks.sum()),
        block_density=float(blocks.float().mean()),
        token_density=token_density(blocks, layout.block_size, causal=config.causal),
    )
    return BenchResult(name, config, info, flops, tuple(results))


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
    return layout.blocks.expand(config.heads, -1, -1).contiguous()


def _run_one(name, case, config, session, reference, report) -> ContenderResult:
    dense_key = (name, config.shape_q, config.shape_k, config.dtype, config.causal, config.reps)
    cached = session.dense_times.get(dense_key) if name in DENSE_BASELINES else None
    try:
        report(f"compile {name}", 0.0)
        prepared = prepare(name, case)
        if cached is None:
            report(f"warm-up {name}", 1 / 3)
            for _ in range(config.warmup):
                prepared.run()
            _synchronize(case.q)
            report(f"timing {name}", 2 / 3)
            times = session.timer(prepared.run, reps=config.reps)
            cached = ContenderResult(name, "ok", ms=median(times), times_ms=tuple(times))
            if name in DENSE_BASELINES:
                session.dense_times[dense_key] = cached
        result = cached
        if reference is not None and prepared.computes_layout:
            max_abs, relative = errors(prepared.run(), reference)
            result = replace(result, max_abs_error=max_abs, rel_error=relative)
        return result
    except Unavailable as error:
        return ContenderResult(name, "unavailable", str(error))
    except Exception as error:  # one failure must not end the run
        return ContenderResult(name, "failed", f"{type(error).__name__}: {error}"[:500])


def _synchronize(tensor: torch.Tensor) -> None:
    if tensor.device.type == "cuda":
        torch.cuda.synchronize(tensor.device)


def _derive(timed, config, flops, heads, block_size) -> list[ContenderResult]:
    """Add TFLOP/s and speedups now that every contender's time is known."""
    by_name = {r.name: r for r in timed}
    cudnn = by_name.get("sdpa_cudnn")
    flex_times = [r.ms for r in timed if r.name in FLEX_CONTENDERS and r.status == "ok"]
    best_flex_ms = min(flex_times) if flex_times else None
    ones = torch.ones(heads, config.seq_q // block_size, config.seq_len_k // block_size,
                      dtype=torch.bool)  # fmt: skip
    dense_flops = attention_flops(
        config.batch, config.head_dim, active_pairs(ones, block_size, causal=config.causal)
    )
    results = []
    for r in timed:
        if r.status != "ok":
            results.append(r)
            continue
        results.append(
            replace(
                r,
                tflops=tflops(flops, r.ms),
                own_tflops=tflops(dense_flops, r.ms) if r.name in DENSE_BASELINES else None,
                speedup_vs_cudnn=speedup(cudnn.ms if cudnn else None, r.ms),
                speedup_vs_flex=speedup(best_flex_ms, r.ms),
            )
        )
    return results
