"""Long-context designs on this machine: build, lint, statistics, save and load, held as runs.

32 heads of a causal sliding window of 4,096 tokens plus a one-block sink (``attention_sinks``,
block 64) at 128K tokens (2,048^2 blocks) and 1M tokens (16,384^2 blocks). Each step is timed
REPEATS times (CPU and wall seconds, extra peak memory over the process before it); then the
whole path is measured in one go, which is what the targets are about: 128K <= 2 s and
<= 512 MB, 1M <= 5 s and <= 1 GB. The work runs on one torch thread, as the app's server does.
With ``--switch``, the same steps (less the file) at sizes a dense grid holds, in both forms,
to place the switch point between them (``designer.layout.DENSE_CELLS``).
The tile statistics (``designer.segment_stats.run_segment_stats``: the segmentation's tile
counts at the design's start width, what the statistics show) are one of the path's steps.
The segmentation's rows in DeepSpeed's format (``sdd_segment_runs``: int64, 32 bytes a block)
are timed as a step of their own, outside the whole path: an export, not an analysis.

    python benchmarks/long_context.py [--switch] [--out benchmarks/results/long-context-cpu.json]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled

import designer.layout
from designer.design import Design
from designer.formats import load_design
from designer.formats.pt_file import design_file_bytes
from designer.layout_stats import HEAD_DIM, layout_stats
from designer.lints import lint_design
from designer.patterns import make_pattern
from designer.patterns.attention_sinks import attention_sinks_runs
from designer.segment_runs import sdd_segment_runs
from designer.segment_stats import run_segment_stats
from designer.threads import one_thread
from gpu.bench.cases import (
    LONG_CONTEXT_BLOCK,
    LONG_CONTEXT_BLOCKS,
    LONG_CONTEXT_HEADS,
    LONG_CONTEXT_SINK_BLOCKS,
    LONG_CONTEXT_WINDOW_TOKENS,
)
from tools.whole_path import measure

ROOT = Path(__file__).resolve().parents[1]
REPEATS = 3
HEADS, BLOCK, WINDOW_TOKENS, SINK_BLOCKS = (  # the design the GPU harness runs too
    LONG_CONTEXT_HEADS, LONG_CONTEXT_BLOCK, LONG_CONTEXT_WINDOW_TOKENS, LONG_CONTEXT_SINK_BLOCKS,
)  # fmt: skip
#: Query (= key) blocks, and the whole path's targets: seconds and extra peak MB.
TARGETS = {"128K": (2.0, 512), "1M": (5.0, 1024)}
CASES = {name: (LONG_CONTEXT_BLOCKS[name], *target) for name, target in TARGETS.items()}
#: Shapes a dense grid holds (the last at its cap), timed in both forms by ``--switch``.
SWITCH_SHAPES = ((4, 256, 256), (16, 1024, 1024), (16, 2048, 2048))


def steps(q_blocks: int, heads: int = HEADS) -> tuple[dict, dict]:
    """The path's steps, each a function of what the steps before it made, and what they make
    (``"design"``, ``"file"``)."""
    params = {"sink_blocks": SINK_BLOCKS, "window_blocks": WINDOW_TOKENS // BLOCK}
    made: dict = {}

    def build():
        if designer.layout.DENSE_CELLS == 0:  # the runs form, at a size the grid holds
            runs = attention_sinks_runs(heads, q_blocks, q_blocks, **params)
            layout = designer.layout.Layout(runs, BLOCK)
        else:
            layout = make_pattern("attention_sinks", heads, q_blocks, q_blocks, BLOCK, params)
        made["design"] = Design(layout, name="long context", causal=True)

    def save():
        made["file"] = design_file_bytes(made["design"])

    def tiles():
        design = made["design"]
        run_segment_stats(design.layout, design.effective_start_width, head_dim=HEAD_DIM)

    path = {
        "build": build,
        "tiles": tiles,
        "lint": lambda: lint_design(made["design"]),
        "stats": lambda: layout_stats(made["design"]),
        "save": save,
        "load": lambda: load_design(io.BytesIO(made["file"])),
    }
    return path, made


def segment_rows(design: Design) -> None:
    """The segmentation's rows in DeepSpeed's format, at the design's start width."""
    sdd_segment_runs(design.layout.runs, design.effective_start_width)


def run_case(name: str, q_blocks: int, target_s: float, target_mb: float) -> dict:
    wholes = []  # first: the heap holds nothing yet that a step before freed
    for _ in range(REPEATS):
        path, _ = steps(q_blocks)
        wholes.append(measure(lambda path=path: [action() for action in path.values()])[1])
    per_step: dict[str, list[dict]] = {}
    for _ in range(REPEATS):
        path, made = steps(q_blocks)
        for step, action in path.items():
            per_step.setdefault(step, []).append(measure(action)[1])
    for _ in range(REPEATS):  # last: the memory its rows free stays with the process
        path, built = steps(q_blocks)
        path["build"]()
        cost = measure(lambda built=built: segment_rows(built["design"]))[1]
        per_step.setdefault("segment rows", []).append(cost)
    layout = made["design"].layout
    whole = {
        "wall_s": statistics.median(w["wall_s"] for w in wholes),
        "cpu_s": statistics.median(w["cpu_s"] for w in wholes),
        "extra_peak_mb": max(w["extra_peak_mb"] for w in wholes),
        "all": wholes,
    }
    return {
        "shape": list(layout.shape),
        "block_size": BLOCK,
        "tokens": q_blocks * BLOCK,
        "active_blocks": layout.nnz,
        "runs": layout.runs.n_runs,
        "density": layout.density,
        "file_bytes": len(made["file"]),
        "lints": [lint.code for lint in lint_design(made["design"])],
        "steps": {
            step: {
                "wall_s": statistics.median(c["wall_s"] for c in costs),
                "cpu_s": statistics.median(c["cpu_s"] for c in costs),
                "extra_peak_mb": max(c["extra_peak_mb"] for c in costs),
            }
            for step, costs in per_step.items()
        },
        "whole": whole,
        "targets": {"wall_s": target_s, "extra_peak_mb": target_mb},
        "meets": whole["wall_s"] <= target_s and whole["extra_peak_mb"] <= target_mb,
    }


def switch_point() -> dict:
    """Build, lint and statistics of the same designs held densely and as runs."""
    found = {}
    for heads, q_blocks, _ in SWITCH_SHAPES:
        row = found[f"{heads}x{q_blocks}^2"] = {}
        for form, cells in (("dense", designer.layout.DENSE_CELLS), ("runs", 0)):
            designer.layout.DENSE_CELLS, before = cells, designer.layout.DENSE_CELLS
            try:
                walls = []
                for _ in range(REPEATS):
                    path, _ = steps(q_blocks, heads)
                    chosen = [path[step] for step in ("build", "lint", "stats")]
                    walls.append(measure(lambda c=chosen: [a() for a in c])[1])
            finally:
                designer.layout.DENSE_CELLS = before
            row[form] = {
                "wall_s": statistics.median(w["wall_s"] for w in walls),
                "extra_peak_mb": max(w["extra_peak_mb"] for w in walls),
            }
        print(f"{heads} x {q_blocks}^2: build + lint + stats, dense "
              f"{row['dense']['wall_s']:.3f} s +{row['dense']['extra_peak_mb']:.0f} MB, runs "
              f"{row['runs']['wall_s']:.3f} s +{row['runs']['extra_peak_mb']:.0f} MB")  # fmt: skip
    return found


def meta() -> dict:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip()  # fmt: skip
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": platform.platform(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "commit": commit,
        "repeats": REPEATS,
        "torch_threads": 1,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the results as JSON here too")
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    parser.add_argument("--switch", action="store_true", help="time both forms at dense sizes")
    args = parser.parse_args()
    info = {**meta(), "load_before": os.getloadavg()}
    results: dict = {}
    with one_thread():
        switch = switch_point() if args.switch else None
        for name in args.cases:
            results[name] = result = run_case(name, *CASES[name])
            whole = result["whole"]
            print(f"{name}: {result['active_blocks']:,} active blocks in {result['runs']:,} runs, "
                  f"file {result['file_bytes'] / 2**20:.1f} MiB")  # fmt: skip
            for step, cost in result["steps"].items():
                print(f"  {step:6} {cost['wall_s']:6.3f} s wall {cost['cpu_s']:6.3f} s cpu "
                      f"+{cost['extra_peak_mb']:6.0f} MB")  # fmt: skip
            print(f"  whole  {whole['wall_s']:6.3f} s wall {whole['cpu_s']:6.3f} s cpu "
                  f"+{whole['extra_peak_mb']:6.0f} MB  (target {CASES[name][1]} s, "
                  f"{CASES[name][2]} MB: {'met' if result['meets'] else 'MISSED'})")  # fmt: skip
    info["load_after"] = os.getloadavg()
    print(f"load average before {info['load_before']}, after {info['load_after']}")
    if args.out:
        found = {"meta": info, "cases": results, "switch": switch}
        args.out.write_text(json.dumps(found, indent=2) + "\n")


if __name__ == "__main__":
    main()
