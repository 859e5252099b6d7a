"""Host time of segmentation and of the kernels' tables built from row runs, long contexts too.

Designs: 32 heads x 2,048² blocks of 64 (128K tokens) and 32 heads x 16,384² (1M tokens),
causal sliding window of 64 blocks (4,096 tokens) plus one sink column, built straight as row
runs; and the cases of ``benchmarks/segment_speed.py`` (16 x 256² random at 10 % and 50 %,
start widths 4 and 64, both modes), through the runs path and, for comparison, the dense one.

Per design: ``sdd_segment_runs`` at the app's start width for blocks of 64 (2) and at 8; the
forward table of each Hopper tiling the plan weighs; and what ``gpu.plan`` does on a CUDA
device before any upload (count each candidate tiling's work, build the chosen forward tables,
one per head dim), plus one backward table. Each timing is the median of ``--repeats`` runs
after a warm-up, wall and CPU seconds of this process; the load average is recorded before
and after every case (the machine is shared). ``--out`` writes the JSON.

    python benchmarks/segment_runs_speed.py [--repeats 3] [--skip-1m] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import numba
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled

import gpu
from designer.design import default_start_width
from designer.run_arrays import RunArrays, run_offsets
from designer.segment import sdd_segment
from designer.segment_runs import sdd_segment_runs
from gpu.backward.lut import build_backward_lut_runs
from gpu.forward.builds import HOPPER_BUILDS, choose_config
from gpu.forward.run_lut import build_fused_lut_runs
from gpu.forward.sm90 import HopperConfig
from gpu.support import HEAD_DIMS

BLOCK = 64
WINDOW_BLOCKS = 64  # 4,096 tokens
SINK_BLOCKS = 1
#: The forward tilings the Hopper plan weighs (block_m, block_n).
TILINGS = sorted({(config.block_m, config.block_n) for config in (
    HopperConfig("bf16", head_dim, **settings)
    for head_dim, builds in HOPPER_BUILDS.items() for settings, _ in builds)})  # fmt: skip


def sinks_and_window(n_heads: int, n_blocks: int) -> RunArrays:
    """Runs of ``attention_sinks(sink_blocks=1, window_blocks=64)``: ``col <= row`` and
    (``col < 1`` or ``row - col < 64``): one run per row while the window reaches the sink,
    then the sink and the window."""
    rows = np.arange(n_blocks)
    window_first = np.maximum(0, rows - WINDOW_BLOCKS + 1)
    apart = window_first > SINK_BLOCKS
    n_runs = 1 + apart
    first = np.cumsum(n_runs) - n_runs
    starts = np.zeros(int(n_runs.sum()), dtype=np.int32)
    stops = np.empty_like(starts)
    stops[first] = np.where(apart, SINK_BLOCKS, rows + 1)
    starts[first[apart] + 1] = window_first[apart]
    stops[first[apart] + 1] = rows[apart] + 1
    row_ptr = np.zeros(n_heads * n_blocks + 1, dtype=np.int64)
    row_ptr[1:] = np.cumsum(np.tile(n_runs, n_heads))
    shape = (n_heads, n_blocks, n_blocks)
    return RunArrays(shape, row_ptr, np.tile(starts, n_heads), np.tile(stops, n_heads))


def runs_of(blocks: np.ndarray) -> RunArrays:
    """The row runs of a dense ``[H, M, N]`` bool layout (vectorised: run edges per row)."""
    n_heads, n_rows, n_cols = blocks.shape
    padded = np.zeros((n_heads * n_rows, n_cols + 2), dtype=np.int8)
    padded[:, 1:-1] = blocks.reshape(-1, n_cols)
    edges = np.diff(padded, axis=1)
    row_of_start, starts = np.nonzero(edges == 1)
    _, stops = np.nonzero(edges == -1)
    row_ptr = np.zeros(n_heads * n_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(row_of_start, minlength=n_heads * n_rows), out=row_ptr[1:])
    return RunArrays(blocks.shape, row_ptr, starts.astype(np.int32), stops.astype(np.int32))


def timed(work: Callable[[], object], repeats: int) -> dict:
    """Median wall and CPU seconds of ``work()`` over ``repeats`` runs after one warm-up."""
    work()
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        work()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return {"wall_s": statistics.median(walls), "cpu_s": statistics.median(cpus),
            "walls_s": walls}  # fmt: skip


def cuda_plan_tables(runs: RunArrays) -> None:
    """The table work ``gpu.plan`` does on a Hopper device before uploading: weigh every
    tiling's work, then build the chosen forward table for each head dim (here on a CPU plan,
    so nothing is uploaded)."""
    planned = gpu.plan(SimpleNamespace(runs=runs, block_size=BLOCK), causal=True, device="cpu")
    for head_dim in HEAD_DIMS:
        config = choose_config(head_dim=head_dim, dtype=torch.bfloat16, wgmma=True,
                               work=planned.tile_work)  # fmt: skip
        planned.forward_lut(config.block_m, config.block_n)


def long_context(name: str, n_blocks: int, repeats: int) -> dict:
    runs = sinks_and_window(32, n_blocks)
    result: dict = {"shape": list(runs.shape), "block_size": BLOCK,
                    "active_blocks": int(run_offsets(runs)[-1]), "runs": int(runs.starts.size),
                    "load_before": os.getloadavg()}  # fmt: skip
    for start_width in sorted({default_start_width(BLOCK), 8}):
        result[f"segment_sw{start_width}"] = timed(partial(sdd_segment_runs, runs, start_width),
                                                   repeats)  # fmt: skip
    for block_m, block_n in TILINGS:
        build = partial(build_fused_lut_runs, runs, BLOCK, block_m=block_m, block_n=block_n,
                        causal=True)  # fmt: skip
        result[f"forward_table_{block_m}x{block_n}"] = timed(build, repeats)
    build = partial(build_backward_lut_runs, runs, BLOCK, block_m=128, block_n=128, causal=True)
    result["backward_table_128x128"] = timed(build, repeats)
    result["cuda_plan_tables"] = timed(partial(cuda_plan_tables, runs), repeats)
    result["load_after"] = os.getloadavg()
    for key, value in result.items():
        if isinstance(value, dict):
            print(f"{name:6} {key:28} {value['wall_s']:7.3f} s wall {value['cpu_s']:7.3f} s CPU")
    return result


def segment_speed_cases(repeats: int) -> dict:
    """``benchmarks/segment_speed.py``'s cases, runs path and dense path side by side."""
    rng = np.random.default_rng(0)
    found = {}
    for density in (0.1, 0.5):
        blocks = rng.random((16, 256, 256)) < density
        runs = runs_of(blocks)
        for start_width in (4, 64):
            for mode in ("safe", "deepspeed"):
                key = f"random{density:.0%}_sw{start_width}_{mode}"
                load = os.getloadavg()
                runs_time = timed(partial(sdd_segment_runs, runs, start_width, mode=mode),
                                  repeats)  # fmt: skip
                dense_time = timed(partial(sdd_segment, blocks, start_width, mode=mode), repeats)
                found[key] = {"runs": runs_time, "dense": dense_time, "load_before": load}
                print(f"{key:28} runs {runs_time['wall_s'] * 1e3:7.1f} ms  dense "
                      f"{dense_time['wall_s'] * 1e3:7.1f} ms (wall)")  # fmt: skip
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-1m", action="store_true", help="leave out the 1M-token design")
    parser.add_argument("--out", type=Path, help="write the results here as JSON")
    args = parser.parse_args()
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": platform.machine(),
        "cpus": len(os.sched_getaffinity(0)),
        "load_average_start": os.getloadavg(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numba": numba.__version__,
        "numpy": np.__version__,
        "repeats": args.repeats,
        "tilings": TILINGS,
    }
    print(f"cpus {meta['cpus']}, load average {meta['load_average_start']}")
    results = {"segment_speed_cases": segment_speed_cases(args.repeats),
               "128K": long_context("128K", 2048, args.repeats)}  # fmt: skip
    if not args.skip_1m:
        results["1M"] = long_context("1M", 16384, args.repeats)
    meta["load_average_end"] = os.getloadavg()
    if args.out:
        args.out.write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
