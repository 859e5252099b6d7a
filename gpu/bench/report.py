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

from gpu.bench.harness import BenchResult

FORMAT = "blocksparse-bench"
VERSION = 1
TABLE_COLUMNS = ("case", "contender", "status", "ms", "TFLOP/s", "x cuDNN", "x Flex", "rel err")


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
    return {
        "case": result.case,
        "config": dataclasses.asdict(result.config),
        "layout": dataclasses.asdict(result.layout),
        "flops": result.flops,
        "results": [dataclasses.asdict(r) for r in result.results],
    }


def document(results: Sequence[BenchResult], *, env: dict[str, Any] | None = None) -> dict:
    """The whole JSON document: format, version, date, environment and every case."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "date": datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
        "environment": environment() if env is None else env,
        "flops_formula": "4*B*H*Sq*Sk*D*token_density (active (q,k) pairs, causal counted)",
        "method": "CUDA events per rep, warm-up first, median of reps, 256 MiB written before "
        "each rep to flush L2, a ~1 ms spin kernel (torch.cuda._sleep, where it runs) before "
        "the start event so host launch overhead is not timed; plans and compilation outside "
        "the timed region",
        "cases": [result_to_dict(r) for r in results],
    }


def write_json(results: Sequence[BenchResult], path: str | Path) -> dict:
    """Write ``document(results)`` to ``path`` and return it."""
    doc = document(results)
    Path(path).write_text(json.dumps(doc, indent=1, allow_nan=True) + "\n")
    return doc


def table_rows(results: Sequence[BenchResult]) -> list[tuple[str, ...]]:
    """One row of strings per (case, contender), in ``TABLE_COLUMNS`` order."""
    rows = []
    for result in results:
        for r in result.results:
            rows.append(
                (
                    result.case,
                    r.name,
                    r.status,
                    _number(r.ms, "{:.3f}"),
                    _number(r.tflops, "{:.1f}"),
                    _number(r.speedup_vs_cudnn, "{:.2f}"),
                    _number(r.speedup_vs_flex, "{:.2f}"),
                    _number(r.rel_error, "{:.1e}"),
                )
            )
    return rows


def format_table(results: Sequence[BenchResult]) -> str:
    """A fixed-width text table of every contender of every case, with failures explained."""
    rows = [TABLE_COLUMNS, *table_rows(results)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(TABLE_COLUMNS))]
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
    return "\n".join(lines)


def _number(value: float | None, pattern: str) -> str:
    return "-" if value is None else pattern.format(value)
