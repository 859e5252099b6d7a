"""Long-context recipes and token tiles on row runs (CPU): what each costs, against its size.

Recipes (``designer.recipe``, built as row runs past a dense grid): the family of
``benchmarks/long_context.py`` (32 heads, a causal 4,096-token window plus one sink block, block
64) at 128K and 1M tokens, alone and with a per-head window, a subtracted global block and
three edits; per build the wall and CPU seconds, the estimate the recipe was checked against,
and the time per active block and per run (a build follows its runs and blocks, not its cells).

Token tiles (``gpu.plan`` of a layout held as runs with partial blocks): ``from_mask_mod`` of a
1,000-token causal window at 32 heads x 128K tokens (refused: its partial masks pass the
limit; the time to say so is measured), and of a block-aligned 4,096-token window plus
10-token sinks, which it makes (63,488 partial blocks); then the table work ``gpu.plan`` does on
a Hopper device before uploading (each tiling's work weighed, the chosen forward tables) and
one backward table. The same tables of a layout a dense grid holds (8 heads x 128K), built by
the dense path and from its runs, side by side.

Each timing is the median of ``--repeats`` runs (``tools.whole_path.measure``: wall and CPU
seconds, extra peak RSS); the load average is recorded around every case, the machine being
shared.

    python benchmarks/recipe_runs.py [--repeats 3] [--out benchmarks/results/recipe-runs.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled

import designer.recipe
import gpu
from designer import from_mask_mod
from designer.edit import CopyHead, EditOp, Rect
from designer.recipe import Recipe, RecipeStep
from designer.threads import one_thread
from gpu.forward.builds import choose_config
from gpu.support import HEAD_DIMS
from tools.whole_path import measure

ROOT = Path(__file__).resolve().parents[1]
HEADS, BLOCK = 32, 64
SINKS = {"sink_blocks": 1, "window_blocks": 64}
CASES = {"128K": 2048, "1M": 16384}


def recipes(n_blocks: int) -> dict[str, Recipe]:
    shape = (HEADS, n_blocks, n_blocks, BLOCK)
    family = (RecipeStep("attention_sinks", SINKS),)
    window = RecipeStep("sliding_window", {"window_blocks": 100, "causal": False}, (1, 2), "union")
    edits = (EditOp("set", Rect(10, 10, 200, 300), heads=(3,)), CopyHead(3, (4, 5)))
    return {
        "sinks + window": Recipe(*shape, steps=family),
        "two steps + two edits": Recipe(*shape, steps=(*family, window), edits=edits),
    }


def timed(action, repeats: int) -> tuple[object, dict]:
    found, costs = None, []
    for _ in range(repeats):
        found, cost = measure(action)
        costs.append(cost)
    return found, {
        "wall_s": statistics.median(c["wall_s"] for c in costs),
        "cpu_s": statistics.median(c["cpu_s"] for c in costs),
        "extra_peak_mb": max(c["extra_peak_mb"] for c in costs),
    }


def afresh(recipe: Recipe) -> Recipe:
    """The same recipe made again, unbuilt, its steps' patterns not kept from before."""
    designer.recipe.clear_step_cache()
    return Recipe(**{name: getattr(recipe, name) for name in Recipe.__dataclass_fields__})


def recipe_cases(repeats: int, cases: dict[str, int] = CASES) -> dict:
    found = {}
    for size, n_blocks in cases.items():
        for name, recipe in recipes(n_blocks).items():
            load = os.getloadavg()
            layout, cost = timed(lambda r=recipe: afresh(r).build(), repeats)
            runs = layout.to_runs()
            found[f"{size}: {name}"] = row = {
                **cost, "estimate_s": recipe.build_ns / 1e9, "active_blocks": layout.nnz,
                "runs": runs.n_runs, "cells": layout.cells,
                "ns_per_active_block": cost["wall_s"] * 1e9 / layout.nnz,
                "ns_per_run": cost["wall_s"] * 1e9 / runs.n_runs, "load_before": load,
            }  # fmt: skip
            print(
                f"{size:5} {name:26} {row['wall_s']:6.3f} s (estimate {row['estimate_s']:.3f} s)"
                f" {layout.nnz:>11,} blocks {runs.n_runs:>9,} runs "
                f"{row['ns_per_active_block']:5.1f} ns/block +{row['extra_peak_mb']:.0f} MB"
            )
    return found


def window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < 1000)


def aligned_window_and_sinks(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & ((q_idx // 64 - kv_idx // 64 < 64) | (kv_idx < 10))


def plan_tables(layout) -> None:
    """What ``gpu.plan`` builds on a Hopper device before uploading, on a CPU plan, and the
    backward table of 128 x 128 tiles."""
    planned = gpu.plan(layout, causal=True, device="cpu")
    for head_dim in HEAD_DIMS:
        config = choose_config(head_dim=head_dim, dtype=torch.bfloat16, wgmma=True,
                               work=planned.tile_work)  # fmt: skip
        planned.forward_lut(config.block_m, config.block_n)
    planned.backward_lut(128, 128)


def token_cases(repeats: int, n_blocks: int = 2048, heads: tuple[int, ...] = (HEADS, 8)) -> dict:
    """The token cases at ``n_blocks``^2 blocks: the window at the first of ``heads``, the
    aligned window and sinks at each."""
    found: dict = {}
    tokens = n_blocks * BLOCK
    started, load = time.perf_counter(), os.getloadavg()
    try:
        from_mask_mod(window, heads=heads[0], seq_q=tokens, seq_k=tokens, block_size=BLOCK,
                      causal=True)  # fmt: skip
        refusal = None
    except ValueError as error:
        refusal = str(error)
    took = time.perf_counter() - started
    found[f"from_mask_mod 1,000-token window, {heads[0]} x {tokens // 1024}K"] = {
        "refused": refusal,
        "wall_s": took,
        "load_before": load,
    }
    print(f"1,000-token window at {heads[0]} x {tokens // 1024}K: {refusal} ({took:.2f} s)")
    for count in heads:
        load = os.getloadavg()
        layout, made = timed(lambda h=count: from_mask_mod(
            aligned_window_and_sinks, heads=h, seq_q=tokens, seq_k=tokens, block_size=BLOCK,
            causal=True), repeats)  # fmt: skip
        row = {"from_mask_mod": made, "partial_blocks": layout.n_partial,
               "active_blocks": layout.nnz, "held_as": "runs" if layout.runs is not None
               else "dense", "load_before": load}  # fmt: skip
        _, row["plan_tables_from_runs"] = timed(lambda lay=layout: plan_tables(SimpleNamespace(
            runs=lay.to_runs(), block_size=BLOCK, partials=lay.partials)), repeats)  # fmt: skip
        if layout.runs is None:
            _, row["plan_tables_dense"] = timed(lambda lay=layout: plan_tables(lay), repeats)
        size = f"{count} x {tokens // 1024}K"
        found[f"4K-aligned window + 10-token sinks, {size}"] = row
        print(f"{size} aligned window + sinks: {layout.n_partial:,} partial blocks "
              f"({row['held_as']}), from_mask_mod {made['wall_s']:.2f} s, tables from runs "
              f"{row['plan_tables_from_runs']['wall_s']:.2f} s"
              + (f", dense {row['plan_tables_dense']['wall_s']:.2f} s"
                 if "plan_tables_dense" in row else ""))  # fmt: skip
    return found


def meta() -> dict:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip()  # fmt: skip
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": platform.platform(),
            "cpus": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__, "commit": commit, "torch_threads": 1}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, help="write the results as JSON here too")
    args = parser.parse_args()
    info = {**meta(), "repeats": args.repeats, "load_before": os.getloadavg()}
    with one_thread():
        results = {"recipes": recipe_cases(args.repeats), "token_tiles": token_cases(args.repeats)}
    info["load_after"] = os.getloadavg()
    print(f"load average before {info['load_before']}, after {info['load_after']}")
    if args.out:
        args.out.write_text(json.dumps({"meta": info, **results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
