"""Where the errors sit: per-head errors and a per-block-row map, against the fp64 reference.

The harness reports one max-abs and one relative error per contender (``metrics.errors``). The
panel also wants them per head (the same measure, head by head), and the largest error of each
``[head, query block]`` row of blocks, to show where in the layout they sit. ``error_details``
recomputes our kernels' outputs on the harness's own inputs (same seed, same draw order, same
``gpu.reference``), so the largest per-head error equals the harness's max-abs error.
``cpu_check`` is the same check for ``impl="reference"`` on a small crop of the design, for
machines without a GPU.

In a training step (``config.backward``) each implementation's ``grads`` entry holds the same
numbers for dq, dk and dv (``head_errors`` of each gradient against the fp64 reference gradients
of ``gpu.reference.dense_masked_attention_backward``, on the harness's q, k, v and output
gradient; dk and dv rows are key blocks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from designer.design import Design
from designer.layout import Layout
from gpu import block_sparse_attention
from gpu.bench import (
    BenchConfig,
    BenchSession,
    document,
    run_benchmark,
    seeded_inputs,
    seeded_training_inputs,
)
from gpu.bench.metrics import errors
from gpu.bench.results import plain_document
from gpu.bench.training import GRAD_NAMES
from gpu.bench.variants import ACCURACY_LIMITS
from gpu.reference import dense_masked_attention, dense_masked_attention_backward

#: Most query-block rows kept per head in the error map (more are max-pooled together).
MAX_MAP_ROWS = 256
#: The CPU check crops the design to this many tokens per side and this many heads.
CPU_CHECK_TOKENS = 1024
CPU_CHECK_HEADS = 16
#: What ``error_details`` recomputes: the implementations ``block_sparse_attention`` knows.
DETAIL_IMPLS = ("fused", "sdd", "reference")


def head_errors(out: torch.Tensor, ref: torch.Tensor, block_size: int) -> dict[str, Any]:
    """Errors of ``out`` against ``ref`` (both ``[B, H, Sq, D]``), per head and per block row.

    Returns plain lists: ``head_max_abs`` and ``head_rel`` (``‖out − ref‖ / ‖ref‖`` of the head)
    with one value per head, and ``block_max_abs`` ``[H][cells]``, the largest error of each row
    of query blocks, ``rows_per_cell`` rows max-pooled per cell.

    >>> ref = torch.zeros(1, 2, 8, 4, dtype=torch.float64); out = ref.clone(); out[0, 1, 5] = 0.5
    >>> head_errors(out, ref, 4)["block_max_abs"]
    [[0.0, 0.0], [0.0, 0.5]]
    """
    _, heads, seq_q, _ = ref.shape
    rows = seq_q // block_size
    per_cell = -(-rows // MAX_MAP_ROWS)
    head_max, head_rel, block_max = [], [], []
    for h in range(heads):
        head_ref = ref[:, h].to(torch.float64)
        max_abs, relative = errors(out[:, h], head_ref)  # the harness's own error measure
        head_max.append(max_abs)
        head_rel.append(relative)
        diff = out[:, h].to(torch.float64) - head_ref
        row_max = diff.abs().amax(dim=(0, 2)) if diff.numel() else torch.zeros(seq_q)
        by_block = row_max[: rows * block_size].reshape(rows, block_size).amax(dim=1)
        padded = torch.nn.functional.pad(by_block, (0, per_cell * -(-rows // per_cell) - rows))
        block_max.append(padded.reshape(-1, per_cell).amax(dim=1).cpu().tolist())
    return {
        "head_max_abs": head_max,
        "head_rel": head_rel,
        "block_max_abs": block_max,
        "rows_per_cell": per_cell,
    }


def error_details(
    config: BenchConfig, layout: Layout, impls: tuple[str, ...]
) -> dict[str, dict[str, Any]]:
    """``{impl: head_errors(...)}`` for each of ``impls`` on the harness's inputs; an impl that
    fails gets ``{"error": message}`` instead."""
    q, k, v, *grad_out = (seeded_training_inputs if config.backward else seeded_inputs)(config)
    scale = config.head_dim**-0.5
    blocks = layout.blocks.expand(config.heads, -1, -1)
    args = (blocks, layout.block_size)
    with torch.no_grad():
        reference = dense_masked_attention(q, k, v, *args, causal=config.causal, scale=scale)
        if config.backward:
            ref_grads = dense_masked_attention_backward(
                q.detach(), k.detach(), v.detach(), grad_out[0], *args, causal=config.causal,
                scale=scale,
            )  # fmt: skip
    details: dict[str, dict[str, Any]] = {}
    for impl in impls:
        try:
            out = block_sparse_attention(
                q, k, v, *args, causal=config.causal, scale=scale, impl=impl,
                start_width=config.start_width if impl == "sdd" else None,
            )  # fmt: skip
            details[impl] = head_errors(out.detach(), reference, layout.block_size)
            if config.backward:
                grads = torch.autograd.grad(out, (q, k, v), grad_out[0])
                details[impl]["grads"] = {
                    name: head_errors(grad, ref, layout.block_size)
                    for name, grad, ref in zip(GRAD_NAMES, grads, ref_grads, strict=True)
                }
                del grads
            del out
        except (RuntimeError, ValueError, TypeError) as error:
            details[impl] = {"error": f"{type(error).__name__}: {error}"[:500]}
    return details


def small_layout(layout: Layout) -> Layout:
    """The top-left ``CPU_CHECK_TOKENS`` square (at least one block) of the first
    ``CPU_CHECK_HEADS`` heads."""
    blocks_per_side = max(1, CPU_CHECK_TOKENS // layout.block_size)
    cropped = layout.blocks[:CPU_CHECK_HEADS, :blocks_per_side, :blocks_per_side]
    return Layout(cropped, layout.block_size)


def cpu_check(
    design: Design, *, head_dim: int = 64, dtype: str = "bf16", backward: bool = False
) -> dict[str, Any]:
    """The reference implementation against fp64 on the CPU, on ``small_layout`` of the design
    (a training step's forward and backward with ``backward``).

    Returns the harness document: one case, contender "reference" (host-timed), with its
    per-head ``details``.
    """
    layout = small_layout(design.layout)
    config = BenchConfig(
        batch=1,
        heads=layout.n_heads,
        seq_q=layout.seq_len_q,
        seq_k=layout.seq_len_k,
        head_dim=head_dim,
        dtype=dtype,
        causal=design.causal,
        contenders=("reference",),
        warmup=0,
        reps=1,
        flush_l2=False,
        device="cpu",
        backward=backward,
    )
    session = BenchSession(torch.device("cpu"), flush_l2=False)
    result = run_benchmark(config, layout, name=f"{design.name} (CPU check)", session=session)
    doc = document([result])
    doc["kind"] = "cpu-check"
    doc["cases"][0]["details"] = error_details(config, layout, ("reference",))
    return plain_document(doc, "the CPU check")


#: The errors a CPU check reports, with the words that name them.
CPU_CHECK_ERRORS = {
    "rel_error": "relative error", "max_abs_error": "max abs error", "dq_rel_error": "dq relative",
    "dk_rel_error": "dk relative", "dv_rel_error": "dv relative",
}  # fmt: skip


@dataclass(frozen=True)
class CpuCheckSummary:
    """What a CPU check ran, in words, and its verdict: each error beside its limit.

    ``errors`` maps ``CPU_CHECK_ERRORS`` keys to ``(value, limit)``; ``passed`` is None when
    the reference did not run (``failure`` says why).
    """

    checked: str
    errors: dict[str, tuple[float, float]]
    passed: bool | None
    seconds: float | None
    failure: str | None = None


def summarize_cpu_check(
    doc: dict[str, Any], design_density: float | None = None
) -> CpuCheckSummary:
    """A ``cpu_check`` document as a person reads it: what was compared with what, on which
    part of the design, and whether every error is within the accuracy limits the GPU
    benchmark applies (``variants.ACCURACY_LIMITS``). No speed: the CPU has no baseline."""
    case = doc["cases"][0]
    config, layout = case["config"], case["layout"]
    heads, m, n = layout["shape"]
    whole = "" if design_density is None else f"; the whole design: {design_density:.1%}"
    training = (
        ", forward then backward (dq, dk and dv against fp64 gradients)"
        if config.get("backward")
        else ""
    )
    checked = (
        f'impl="reference" (dense masked torch, what gpu.block_sparse_attention runs without a '
        f"GPU) on {config['dtype']} q, k and v (batch 1, head dim {config['head_dim']}"
        f"{', causal' if config['causal'] else ''}) against fp64 attention under the same "
        f"blocks{training}, on the top-left {config['seq_q']:,} × {config['seq_k']:,} tokens of "
        f"heads 0–{heads - 1} ({layout['nnz']:,} of {heads * m * n:,} blocks active there"
        f"{whole}). It shows that the layout masks what it should and what {config['dtype']} "
        "rounding costs; our CUDA kernels and their speed need a GPU."
    )
    result = case["results"][0]
    if result["status"] != "ok":
        return CpuCheckSummary(checked, {}, None, None, result.get("message") or result["status"])
    errors = {
        key: (result[key], ACCURACY_LIMITS.get(key, ACCURACY_LIMITS["rel_error"]))
        for key in CPU_CHECK_ERRORS
        if result.get(key) is not None
    }
    passed = all(value <= limit for value, limit in errors.values()) if errors else None
    return CpuCheckSummary(checked, errors, passed, result.get("seconds"))


def cpu_check_text(summary: CpuCheckSummary) -> str:
    """The summary as lines of text (the command line prints it)."""
    lines = [summary.checked, ""]
    if summary.failure:
        return "\n".join([*lines, f"The reference did not run: {summary.failure}"])
    for key, (value, limit) in summary.errors.items():
        mark = "ok" if value <= limit else "TOO LARGE"
        lines.append(f"  {CPU_CHECK_ERRORS[key]:<15} {value:.2e}  (limit {limit:.0e})  {mark}")
    verdict = "every error within its limit" if summary.passed else "an error past its limit"
    took = "" if summary.seconds is None else f" in {summary.seconds:.1f} s"
    return "\n".join([*lines, "", f"CPU check: {verdict}{took}."])
