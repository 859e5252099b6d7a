"""Speed of ``sdd_segment`` next to DeepSpeed's C++ ``sdd_segment`` on the same 2-core machine.

16 heads x 256 x 256 blocks, random layouts at 10 % and 50 % density, start widths 4 and 64, both
modes. Each case is called once to warm up, then timed REPEATS times; the median is printed. The
very first call compiles the numba scan (or loads it from numba's cache) and is reported apart.
Prints only; writes nothing.

    python benchmarks/segment_speed.py
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled

from designer.segment import sdd_segment

SHAPE = (16, 256, 256)
REPEATS = 15

#: DeepSpeed's C++ (``csrc/sparse_attention/utils.cpp``), ms on our 2-core machines, by
#: (density, start width); from SDD_SEGMENT.md.
CPP_MS = {(0.1, 4): 19.0, (0.5, 4): 44.0, (0.1, 64): 44.0, (0.5, 64): 121.0}


def median_ms(layout: torch.Tensor, start_width: int, mode: str) -> float:
    sdd_segment(layout, start_width, mode=mode)
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        sdd_segment(layout, start_width, mode=mode)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    start = time.perf_counter()
    sdd_segment(torch.ones(1, 2, 2, dtype=torch.bool), 2)
    first_s = time.perf_counter() - start
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"sdd_segment on {list(SHAPE)} random layouts, median of {REPEATS} runs")
    print(f"cpus {len(os.sched_getaffinity(0))}, load average {load}")
    print(f"first call (numba compile, or cache load): {first_s:.2f} s\n")
    print(f"{'density':>8} {'start':>6} {'mode':>10} {'ms':>8} {'C++ ms':>8} {'C++ / ours':>11}")
    rng = np.random.default_rng(0)
    for density in (0.1, 0.5):
        layout = torch.from_numpy(rng.random(SHAPE) < density)
        for start_width in (4, 64):
            cpp = CPP_MS[(density, start_width)]
            for mode in ("safe", "deepspeed"):
                ms = median_ms(layout, start_width, mode)
                print(
                    f"{density:>8.0%} {start_width:>6} {mode:>10} {ms:>8.1f} {cpp:>8.0f} "
                    f"{cpp / ms:>10.1f}x"
                )


if __name__ == "__main__":
    main()
