"""Tile tuning for the forward kernels: time candidate builds on the standard cases.

``python3 tools/probes/forward_tiles.py [--cases a,b] [--json PATH]`` plans the build
``choose_config`` picks plus every alternative of the build table (``gpu.forward.builds``:
``ALTERNATIVE_TILES``, ``HOPPER_BUILDS``, ``HOPPER_ALTERNATIVES``) for each case's head dim, and
times them with the harness's own timer, inputs, FLOP count and fp64 reference (``gpu.bench``),
printing effective and executed TFLOP/s and the relative error. It is the short loop behind the
table's defaults; ``python -m gpu.bench`` compares the chosen kernel with the other contenders.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, uninstalled

import gpu
from gpu.bench.cases import find_case
from gpu.bench.harness import seeded_inputs
from gpu.bench.metrics import active_pairs, attention_flops, errors, median, tflops
from gpu.bench.report import environment
from gpu.bench.timing import CudaEventTimer
from gpu.forward.builds import (
    ALTERNATIVE_TILES,
    HOPPER_ALTERNATIVES,
    HOPPER_BUILDS,
    choose_config,
)
from gpu.forward.launch import FusedPlan, plan_forward, run_fused
from gpu.forward.sm80 import KernelConfig
from gpu.forward.sm90 import HopperConfig
from gpu.reference import dense_masked_attention
from gpu.runtime import is_hopper

DEFAULT_CASES = "banded_7pct-b128-d64,dense-b128-d64,banded_7pct-b16-d64,banded_7pct-b128-d128"


def candidate_configs(head_dim: int, *, hopper: bool) -> list[KernelConfig | HopperConfig]:
    """The default builds (both kernels where the GPU has them), then the alternatives, each
    once."""
    paths = (False, True) if hopper else (False,)
    configs = [choose_config(head_dim=head_dim, dtype=torch.bfloat16, wgmma=w) for w in paths]
    if hopper:
        configs += [HopperConfig("bf16", head_dim, **settings)
                    for settings, _ in HOPPER_BUILDS[head_dim]]  # fmt: skip
    configs += [KernelConfig("bf16", d, *tiles) for d, *tiles in ALTERNATIVE_TILES if d == head_dim]
    if hopper:
        configs += [HopperConfig("bf16", d, **settings) for d, settings in HOPPER_ALTERNATIVES
                    if d == head_dim]  # fmt: skip
    return list(dict.fromkeys(configs))


def probe_case(name: str, timer: CudaEventTimer, *, hopper: bool) -> list[dict]:
    """Time every candidate tile on one standard case; print a line each, return the records."""
    case = find_case(name)
    config, layout = case.config(), case.layout()
    q, k, v = seeded_inputs(config)
    blocks = layout.blocks.expand(config.heads, -1, -1).contiguous()
    scale = config.head_dim**-0.5
    reference = dense_masked_attention(
        q, k, v, blocks, layout.block_size, causal=config.causal, scale=scale
    )
    flops = attention_flops(
        config.batch, config.head_dim, active_pairs(blocks, layout.block_size, causal=config.causal)
    )
    layout_plan = gpu.plan(blocks, layout.block_size, causal=config.causal, device=q.device)
    records = []
    for tiles in candidate_configs(config.head_dim, hopper=hopper):
        plan = plan_forward(layout_plan, tiles)
        ms, out = time_plan(plan, (q, k, v), scale, timer, warmup=config.warmup, reps=config.reps)
        _, relative = errors(out, reference)
        record = {
            "case": name,
            "tiles": describe(tiles),
            "instruction": instruction(tiles),
            "ms": ms,
            "tflops": tflops(flops, ms),
            "executed_tflops": tflops(plan.flops(config.batch), ms),
            "rel_error": relative,
        }
        records.append(record)
        print(
            f"{name:24s} {record['instruction']:9s} {record['tiles']!s:17s} {ms:8.3f} ms "
            f"{record['tflops']:5.0f} eff {record['executed_tflops']:5.0f} exec TFLOP/s "
            f"err {relative:.1e}",
            flush=True,
        )
    return records


def time_plan(
    plan: FusedPlan,
    qkv: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    scale: float,
    timer: CudaEventTimer,
    *,
    warmup: int,
    reps: int,
) -> tuple[float, torch.Tensor]:
    """The median ms of ``run_fused`` with ``plan`` after ``warmup`` runs, and its output."""
    out = torch.empty_like(qkv[0])

    def run() -> torch.Tensor:
        return run_fused(plan, *qkv, scale=scale, out=out)

    for _ in range(warmup):
        run()
    return median(timer(run, reps=reps)), run()


def instruction(config: KernelConfig | HopperConfig) -> str:
    return "tma+wgmma" if isinstance(config, HopperConfig) else "mma.sync"


def describe(config: KernelConfig | HopperConfig) -> list[int]:
    """``[block_m, block_n, n_warps, min_blocks]``; Hopper: ``[block_m, block_n, stages,
    pingpong, min_blocks]``."""
    if isinstance(config, HopperConfig):
        return [config.block_m, config.block_n, config.stages, int(config.pingpong),
                config.min_blocks]  # fmt: skip
    return [config.block_m, config.block_n, config.n_warps, config.min_blocks]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=DEFAULT_CASES, help="standard cases, comma-separated")
    parser.add_argument("--json", default=None, help="write the records here")
    args = parser.parse_args()
    device = torch.device("cuda")
    timer = CudaEventTimer(device)
    hopper = is_hopper(device)
    print(f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}", flush=True)
    records = [r for name in args.cases.split(",") for r in probe_case(name, timer, hopper=hopper)]
    if args.json:
        document = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                    "environment": environment(), "records": records}  # fmt: skip
        with open(args.json, "w") as handle:
            json.dump(document, handle, indent=1)


if __name__ == "__main__":
    main()
