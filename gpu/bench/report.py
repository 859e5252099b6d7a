"""Benchmark output: the environment, the JSON document and the printed table."""

from __future__ import annotations

import dataclasses
import json
import platform
import subprocess
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from gpu.bench.config import FORWARD, FORWARD_BACKWARD
from gpu.bench.harness import BenchResult
from gpu.bench.results import FORMAT, VERSION

TABLE_COLUMNS = (
    "case", "contender", "status", "ms", "TFLOP/s", "x cuDNN", "x Flex", "x BSA", "rel err",
)  # fmt: skip
#: The table of training steps: the step, its forward and backward alone, the gradients' errors.
BACKWARD_COLUMNS = (
    "case", "contender", "status", "fwd+bwd ms", "fwd ms", "bwd ms", "TFLOP/s", "bwd TFLOP/s",
    "x cuDNN", "x Flex", "x BSA", "dq err", "dk err", "dv err",
)  # fmt: skip
#: Each numeric column's ``ContenderResult`` field and format.
_FIELDS = {
    "ms": ("ms", "{:.3f}"), "fwd+bwd ms": ("ms", "{:.3f}"), "fwd ms": ("fwd_ms", "{:.3f}"),
    "bwd ms": ("bwd_ms", "{:.3f}"), "TFLOP/s": ("tflops", "{:.1f}"),
    "bwd TFLOP/s": ("bwd_tflops", "{:.1f}"), "x cuDNN": ("speedup_vs_cudnn", "{:.2f}"),
    "x Flex": ("speedup_vs_flex", "{:.2f}"), "x BSA": ("speedup_vs_bsa", "{:.2f}"),
    "rel err": ("rel_error", "{:.1e}"),
    "dq err": ("dq_rel_error", "{:.1e}"), "dk err": ("dk_rel_error", "{:.1e}"),
    "dv err": ("dv_rel_error", "{:.1e}"),
}  # fmt: skip
VARIANT_NOTE = (
    "flex (gather-t128): the fastest accurate variant of a contender, its mask_mod form and "
    "BlockMask tile in tokens (the JSON lists every variant's time and errors)"
)
SAMPLED_NOTE = (
    "{} case(s) too large to check in full: errors on a sample of query rows (checked_rows in "
    "the JSON); dk and dv unchecked there"
)
KEYS_SAMPLED_NOTE = (
    "{} case(s) held as row runs: output and dq on a sample of query rows of every head "
    "(checked_rows), dk and dv on a sample of keys (checked_key_rows) of a few heads "
    "(checked_key_heads), each exact over every query attending them"
)
FLOPS_FORMULA = "4*B*H*Sq*Sk*D*token_density (active (q,k) pairs, causal counted)"
BACKWARD_FLOPS_FORMULA = (
    f"forward {FLOPS_FORMULA}; backward 2.5x the forward, so TFLOP/s of a forward+backward "
    "step count 3.5x the forward"
)
METHOD = (
    "CUDA events per rep, warm-up first, median of reps, 256 MiB written before each rep to "
    "flush L2, a ~1 ms spin kernel (torch.cuda._sleep, where it runs) before the start event so "
    "host launch overhead is not timed; plans and compilation outside the timed region; each "
    "contender's output checked against fp64 before it is timed, a wrong result not timed"
)
SPEEDUP_NOTE = (
    "x Flex: over the fastest accurate FlexAttention build (flex, flex_tuned, flex_flash); "
    "x BSA: over cuDNN's block-sparse attention (cudnn_bsa)"
)
BACKWARD_METHOD = (
    f"{METHOD}. A step is torch.autograd.grad of the attention's output with a fixed random "
    "output gradient, on randn q, k, v that require grad; fwd ms is the forward alone with "
    "inputs requiring grad; bwd ms is the backward alone, timed directly: each rep runs a fresh "
    "forward untimed before the L2 flush, then times the backward on its graph; gradient errors "
    "are relative to fp64 reference gradients"
)


def environment() -> dict[str, Any]:
    """GPU, driver and library versions (what is missing reads "n/a")."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda or "n/a",
        "gpu": "n/a",
        "driver": "n/a",
    }
    for module in ("cupy", "triton"):
        try:
            info[module] = __import__(module).__version__
        except Exception:
            info[module] = "n/a"
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info["gpu"] = props.name
        info["sm_count"] = props.multi_processor_count
        info["compute_capability"] = f"{props.major}.{props.minor}"
        info["cudnn"] = torch.backends.cudnn.version()
        info["driver"] = _driver_version()
    return info


def _driver_version() -> str:
    try:
        result = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=True,
        )  # fmt: skip
        return result.stdout.strip().splitlines()[0]
    except Exception:
        return "n/a"


def result_to_dict(result: BenchResult) -> dict[str, Any]:
    """One case as plain JSON values."""
    case = {
        "case": result.case,
        "mode": result.mode,
        "config": dataclasses.asdict(result.config),
        "layout": dataclasses.asdict(result.layout),
        "flops": result.flops,
        "checked_rows": result.checked_rows,
        "results": [dataclasses.asdict(r) for r in result.results],
    }
    if result.checked_key_rows is not None:  # a runs layout's training step: its dk, dv sample
        case["checked_key_rows"] = result.checked_key_rows
        case["checked_key_heads"] = list(result.checked_key_heads)
    return case


def document(
    results: Sequence[BenchResult],
    *,
    env: dict[str, Any] | None = None,
    backward: bool | None = None,
) -> dict:
    """The whole JSON document: format, version, date, environment, mode and every case.

    ``mode`` is "forward+backward" when the cases time training steps (``backward``; None: when
    any of ``results`` does), else "forward"."""
    if backward is None:
        backward = any(r.config.backward for r in results)
    return {
        "format": FORMAT,
        "version": VERSION,
        "date": datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
        "environment": environment() if env is None else env,
        "mode": FORWARD_BACKWARD if backward else FORWARD,
        "flops_formula": BACKWARD_FLOPS_FORMULA if backward else FLOPS_FORMULA,
        "method": BACKWARD_METHOD if backward else METHOD,
        "cases": [result_to_dict(r) for r in results],
    }


def write_json(
    results: Sequence[BenchResult],
    path: str | Path,
    *,
    skipped: Sequence[str] = (),
    command: str | None = None,
    earlier: dict[str, Any] | None = None,
) -> dict:
    """Write ``document(results)`` to ``path`` and return it.

    ``skipped`` (why each case that could not be built was left out) goes in as ``skipped``
    when there are any. ``runs`` lists each run that measured the file's cases: its date,
    ``command`` and case names. With ``earlier`` (the document already in the file, when a
    sweep resumes) its cases, runs, date, environment and skipped cases come first, so a sweep
    split over several processes is one file."""
    doc = document(results)
    run = _run(doc["date"], command, doc["cases"])
    runs = []
    if earlier is not None:
        doc |= {key: earlier[key] for key in ("date", "environment")}
        doc["cases"] = [*earlier["cases"], *doc["cases"]]
        runs = earlier.get("runs") or [_run(earlier["date"], None, earlier["cases"])]
        before = earlier.get("skipped", [])
        skipped = [*before, *(reason for reason in skipped if reason not in before)]
    doc["runs"] = [*runs, run]
    if skipped:
        doc["skipped"] = list(skipped)
    Path(path).write_text(json.dumps(doc, indent=1, allow_nan=True) + "\n")
    return doc


def _run(date: str, command: str | None, cases: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {"date": date, "command": command or "not recorded", "cases": [c["case"] for c in cases]}


def table_rows(results: Sequence[BenchResult], *, backward: bool = False) -> list[tuple[str, ...]]:
    """One row of strings per (case, contender), in ``TABLE_COLUMNS`` order (``BACKWARD_COLUMNS``
    with ``backward``)."""
    columns = (BACKWARD_COLUMNS if backward else TABLE_COLUMNS)[3:]
    return [
        (result.case, r.name + (f" ({r.variant})" if r.variant else ""), r.status,
         *(_number(getattr(r, _FIELDS[c][0]), _FIELDS[c][1]) for c in columns))
        for result in results
        for r in result.results
    ]  # fmt: skip


def format_table(results: Sequence[BenchResult]) -> str:
    """A fixed-width text table of every contender of every case, with failures explained; a
    table of training steps when any case timed them."""
    backward = any(r.config.backward for r in results)
    columns = BACKWARD_COLUMNS if backward else TABLE_COLUMNS
    rows = [columns, *table_rows(results, backward=backward)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    notes = [
        f"  {result.case} / {r.name}: {r.message}"
        for result in results
        for r in result.results
        if r.status != "ok"
    ]
    if notes:
        lines += ["", "not measured:", *notes]
    lines += ["", SPEEDUP_NOTE]
    if any(r.variant for result in results for r in result.results):
        lines += ["", VARIANT_NOTE]
    sampled = [r for r in results if r.checked_rows is not None and r.checked_rows < r.config.seq_q]
    by_keys = [r for r in sampled if r.checked_key_rows is not None]
    if len(sampled) > len(by_keys):
        lines += ["", SAMPLED_NOTE.format(len(sampled) - len(by_keys))]
    if by_keys:
        lines += ["", KEYS_SAMPLED_NOTE.format(len(by_keys))]
    if backward:
        lines += ["", "TFLOP/s count the backward as 2.5x the forward's FLOPs (a step: 3.5x)"]
    return "\n".join(lines)


def _number(value: float | None, pattern: str) -> str:
    return "-" if value is None else pattern.format(value)
