"""FlexAttention BlockMasks of the long-context designs, made from their row runs on this machine.

The designs of ``benchmarks/long_context.py`` (``gpu.bench.cases.long_context_design``: 32 heads,
a causal window of 4,096 tokens plus a sink, blocks of 64) at 128K and 1M tokens. Each step is
timed REPEATS times on one torch thread (median wall and CPU seconds, the largest extra peak
memory): the forward's BlockMask (the closed-form ``mask_mod``; its kv lists one entry per key
tile where they fit, compact past that), the same with the transposed lists a backward reads
(one entry per tile: compiled Flex's backward cannot read compact ones), the compact forward
lists alone, and the export file (``block_mask_tensors``, saved). A step past the lists'
budget says so.

    python benchmarks/runs_block_mask.py [--out benchmarks/results/<date>-runs-block-mask-cpu.json]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled

from benchmarks.long_context import meta
from designer.formats import block_mask_tensors
from designer.formats.runs_block_mask import runs_block_mask
from designer.threads import one_thread
from gpu.bench.cases import LONG_CONTEXT_BLOCKS, long_context_design
from tools.whole_path import measure

REPEATS = 3


def steps(layout) -> dict:
    def saved_file() -> int:
        buffer = io.BytesIO()
        torch.save(block_mask_tensors(layout, causal=True), buffer)
        return len(buffer.getvalue())

    return {
        "forward mask": lambda: runs_block_mask(layout, causal=True, q_lists=False),
        "backward mask": lambda: runs_block_mask(layout, causal=True),
        "compact forward": lambda: runs_block_mask(
            layout, causal=True, width="compact", q_lists=False
        ),
        "file": saved_file,
    }


def run_case(name: str) -> dict:
    layout = long_context_design(name).layout
    found: dict = {"shape": list(layout.shape), "active_blocks": layout.nnz, "steps": {}}
    for step, action in steps(layout).items():
        costs, value = [], None
        try:
            for _ in range(REPEATS):
                value, cost = measure(action)
                costs.append(cost)
        except ValueError as error:  # past the lists' budget: the reason is the result
            found["steps"][step] = {"refused": str(error)}
            print(f"  {step:14} refused: {error}")
            continue
        row = found["steps"][step] = {
            "wall_s": statistics.median(c["wall_s"] for c in costs),
            "cpu_s": statistics.median(c["cpu_s"] for c in costs),
            "extra_peak_mb": max(c["extra_peak_mb"] for c in costs),
        }
        if isinstance(value, int):
            row["bytes"] = value
        else:
            row["list_entries"] = sum(getattr(value, key).numel() for key in (
                "kv_indices", "full_kv_indices", "q_indices", "full_q_indices")
                if getattr(value, key) is not None)  # fmt: skip
        print(f"  {step:14} {row['wall_s']:6.3f} s wall {row['cpu_s']:6.3f} s cpu "
              f"+{row['extra_peak_mb']:6.0f} MB")  # fmt: skip
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the results as JSON here too")
    parser.add_argument("--cases", nargs="*", default=list(LONG_CONTEXT_BLOCKS),
                        choices=list(LONG_CONTEXT_BLOCKS))  # fmt: skip
    args = parser.parse_args()
    info = {**meta(), "repeats": REPEATS, "load_before": os.getloadavg()}
    results = {}
    with one_thread():
        for name in args.cases:
            print(name)
            results[name] = run_case(name)
    info["load_after"] = os.getloadavg()
    print(f"load average before {info['load_before']}, after {info['load_after']}")
    if args.out:
        args.out.write_text(json.dumps({"meta": info, "cases": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
