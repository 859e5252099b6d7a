"""Does the order of the Hopper forward's work units matter at long sequences? One standard case
at a given S and B, its items heaviest first over every head against the same items in groups
of G layout heads (heaviest first inside each), as ``gpu.forward.launch.plan_forward`` orders them
when each head has rows for 3 rounds of CTAs, with G sized so that the group's K and V fill
half the L2.

Each order computes the same units, so the outputs must be bit-identical; only the K and V that
the running CTAs share in L2 change. Times ``run_fused`` with the harness's timer (CUDA events,
L2 flushed, warm-up, median) on its fresh random inputs and prints effective TFLOP/s.

    python tools/probes/unit_order.py --case causal-b128-d128 --seq 65536 --batch 4 \
        --out benchmarks/results/checks/2026-11-30-h200-unit-order.json
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, uninstalled

from forward_tiles import time_plan  # the sibling probe's timing loop

import gpu
from gpu.bench.cases import find_case
from gpu.bench.harness import seeded_inputs
from gpu.bench.metrics import active_pairs, attention_flops, tflops
from gpu.bench.report import environment
from gpu.bench.timing import CudaEventTimer
from gpu.forward.launch import kv_row_strides, run_fused
from gpu.forward.lut import group_heads

#: Layout heads per group of each order timed (16: one group, heaviest first over every head).
GROUPS = (16, 1, 2, 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="causal-b128-d128")
    parser.add_argument("--seq", type=int, default=65536)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--out", default=None, help="write the records here as JSON")
    args = parser.parse_args()

    case = find_case(args.case)
    config = dataclasses.replace(case.config(seq_len=args.seq), batch=args.batch)
    layout = case.layout(seq_len=args.seq)
    q, k, v = seeded_inputs(config)
    scale = config.head_dim**-0.5
    layout_plan = gpu.plan(layout.blocks, layout.block_size, causal=config.causal,
                           device=q.device)  # fmt: skip
    plan = layout_plan.fused(q.dtype, config.head_dim, *kv_row_strides(k, v))
    repeats = config.heads // layout.blocks.shape[0]
    pairs = active_pairs(layout.blocks, layout.block_size, causal=config.causal) * repeats
    flops = attention_flops(config.batch, config.head_dim, pairs)
    timer = CudaEventTimer(q.device)
    print(f"{torch.cuda.get_device_name(q.device)}: {args.case}, S={args.seq}, B={args.batch}, "
          f"{plan.config}", flush=True)  # fmt: skip

    expected = run_fused(plan, q, k, v, scale=scale)
    lut = layout_plan.forward_lut(plan.config.block_m, plan.config.block_n)
    records = []
    for heads_per_group in GROUPS:
        items = group_heads(lut.items, heads_per_group)
        chosen = bool(torch.equal(items, plan.items))
        ordered = dataclasses.replace(plan, items=items)
        ms, out = time_plan(ordered, (q, k, v), scale, timer, warmup=config.warmup,
                            reps=config.reps)  # fmt: skip
        identical = bool(torch.equal(out, expected))
        record = {"heads_per_group": heads_per_group, "ms": ms, "tflops": tflops(flops, ms),
                  "identical": identical, "plan_order": chosen}  # fmt: skip
        records.append(record)
        mark = " (the plan's)" if chosen else ""
        print(f"heads per group {heads_per_group:2d}: {ms:9.3f} ms {record['tflops']:5.0f} "
              f"TFLOP/s identical {identical}{mark}", flush=True)  # fmt: skip
    if args.out:
        document = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                    "environment": environment(), "case": args.case, "seq": args.seq,
                    "batch": args.batch, "build": str(plan.config), "records": records}  # fmt: skip
        with open(args.out, "w") as handle:
            json.dump(document, handle, indent=1)


if __name__ == "__main__":
    main()
