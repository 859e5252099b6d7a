"""Dense paths beside the runs work, timed for a before/after comparison between two trees (CPU).

The work on row runs touched code that dense layouts go through too: the token tiles of the
kernels' tables (``gpu.partials``), ``gpu.plan``'s partial-block check, ``make_pattern``,
``Recipe`` (its estimate and build) and ``from_mask_mod``. This times each on sizes a dense grid
holds (median of ``--repeats`` wall times after a warm-up, one torch thread), importing the
tree given by ``--tree`` (default: this checkout), so one command compares two commits:

    git archive <before> | tar -x -C /tmp/before
    python benchmarks/dense_paths.py --tree /tmp/before --out before.json
    python benchmarks/dense_paths.py --out after.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path


def cases() -> dict:
    """The timed calls, made of the modules of the tree on ``sys.path``."""
    import numpy as np
    import torch

    import gpu
    from designer import from_mask_mod
    from designer.edit import Band, EditOp, Rect
    from designer.patterns import make_pattern
    from designer.recipe import Recipe, RecipeStep
    from gpu.backward.lut import build_backward_lut
    from gpu.forward.lut import build_fused_lut
    from gpu.partials import check_partials

    rng = np.random.default_rng(0)
    blocks = torch.from_numpy(rng.random((4, 256, 256)) < 0.3)
    chosen = torch.from_numpy(rng.random((4, 256, 256)) < 0.2)
    index = torch.nonzero(blocks & chosen).to(torch.int32)
    cells = rng.random((len(index), 64, 64)) < 0.5
    bits = torch.from_numpy(np.packbits(cells, axis=-1, bitorder="little"))
    partials = check_partials((index, bits), blocks, 64)
    sinks = RecipeStep("attention_sinks", {"sink_blocks": 1, "window_blocks": 64})
    more = RecipeStep("global_tokens", {"global_blocks": [3]}, (1, 2), "union")
    edits = (EditOp("set", Rect(1, 1, 100, 200)), EditOp("toggle", Band(-2, 2), heads=(0,)))

    def window(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < 1000)

    return {
        "forward token table 128x128, 4 x 256^2": lambda: build_fused_lut(
            blocks, 64, block_m=128, block_n=128, causal=True, partials=partials),
        "backward token table 128x64, 4 x 256^2": lambda: build_backward_lut(
            blocks, 64, block_m=128, block_n=64, causal=True, partials=partials),
        "gpu.plan with partials + 64x64 table": lambda: gpu.plan(
            blocks, 64, causal=True, partials=(index, bits), device="cpu").forward_lut(64, 64),
        "make_pattern sliding_window 16 x 1024^2": lambda: make_pattern(
            "sliding_window", 16, 1024, 1024, 64, {"window_blocks": 64}),
        "Recipe build 16 x 1024^2, 2 steps, 2 edits": lambda: Recipe(
            16, 1024, 1024, 64, steps=(sinks, more), edits=edits).build(),
        "Recipe estimate, 8 steps 16 x 1024^2": lambda: Recipe(
            16, 1024, 1024, 64, steps=(RecipeStep("causal"),) * 8),
        "from_mask_mod 1,000-token window 8 x 16K": lambda: from_mask_mod(
            window, heads=8, seq_q=16384, seq_k=16384, block_size=64),
    }  # fmt: skip


def median_wall(action, repeats: int) -> float:
    action()
    walls = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        walls.append(time.perf_counter() - started)
    return statistics.median(walls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, help="write the results as JSON here too")
    args = parser.parse_args()
    sys.path.insert(0, str(args.tree.resolve()))
    import torch

    torch.set_num_threads(1)
    found = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "tree": str(args.tree),
             "machine": platform.platform(), "torch": torch.__version__,
             "load_before": os.getloadavg(), "ms": {}}  # fmt: skip
    for name, action in cases().items():
        found["ms"][name] = median_wall(action, args.repeats) * 1e3
        print(f"{name:45} {found['ms'][name]:9.2f} ms")
    found["load_after"] = os.getloadavg()
    print(f"load average before {found['load_before']}, after {found['load_after']}")
    if args.out:
        args.out.write_text(json.dumps(found, indent=2) + "\n")


if __name__ == "__main__":
    main()
