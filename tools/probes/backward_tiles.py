"""Which backward tiles to compile: the fused backward alone, per configuration, on standard cases.

For each case (bf16, B=1, H=16, S=16384) and each ``BackwardConfig`` candidate (4 or 8 warps,
i.e. 64 or 128 keys per CTA, CTAs per SM), times ``launch_backward`` with
``triton.testing.do_bench`` (CUDA events, L2 cleared before each run, median) on fresh random
q, k, v, output and output gradient, and prints effective TFLOP/s: the useful backward FLOPs
are ``2.5 x`` the forward's ``4 · B · H · Sq · Sk · D · density``. The chosen tiles live in
``gpu.backward.builds._TILES`` with these numbers written beside them.

    python tools/probes/backward_tiles.py \
        --out benchmarks/results/2026-11-30-h200-backward-tiles.json
"""

from __future__ import annotations

import argparse
import datetime
import json

import torch

import gpu
from gpu.backward.builds import BackwardConfig
from gpu.backward.fused import launch_backward, plan_backward
from gpu.bench.cases import find_case
from gpu.bench.metrics import active_pairs, attention_flops, tflops
from gpu.bench.report import environment

CASES = ("dense-b128-d64", "dense-b128-d128", "banded_7pct-b64-d64", "banded_25pct-b128-d128",
         "banded_7pct-b16-d64", "causal-b128-d128")  # fmt: skip
#: (n_warps, min_blocks, wgmma) per head dim: the register and shared-memory budgets that fit
#: (D=64 at 3 CTAs per SM: 168 registers, no spill; D=128 at 2 CTAs per SM with 8 warps cannot).
CANDIDATES = {64: ((4, 2, False), (4, 3, False), (8, 1, False), (4, 2, True), (4, 3, True)),
              128: ((4, 2, False), (8, 1, False), (8, 1, True))}  # fmt: skip


def measure(case_name: str) -> list[dict]:
    from triton.testing import do_bench

    case = find_case(case_name)
    config, layout = case.config(), case.layout()
    gen = torch.Generator(device="cuda").manual_seed(0)
    shape = (1, config.heads, config.seq_q, config.head_dim)
    q, k, v, grad_out = (torch.randn(shape, generator=gen, device="cuda", dtype=torch.bfloat16)
                         for _ in range(4))  # fmt: skip
    the_plan = gpu.plan(layout, causal=config.causal, device="cuda")
    out, lse = gpu.block_sparse_attention(q, k, v, the_plan, return_lse=True)
    pairs = active_pairs(layout.blocks, layout.block_size, causal=config.causal)
    flops = 2.5 * attention_flops(1, config.head_dim, pairs)
    rows = []
    for n_warps, min_blocks, wgmma in CANDIDATES[config.head_dim]:
        cfg = BackwardConfig("bf16", config.head_dim, n_warps, min_blocks, wgmma)
        bwd = plan_backward(the_plan, cfg)

        def run(bwd=bwd, scale=config.head_dim**-0.5):
            return launch_backward(bwd, q, k, v, out, lse, grad_out, None, scale)

        ms = do_bench(run, warmup=25, rep=200, return_mode="median")
        rows.append({
            "case": case_name, "wgmma": wgmma, "n_warps": n_warps, "block_n": cfg.block_n,
            "min_blocks": min_blocks, "ms": ms, "tflops": tflops(int(flops), ms),
        })  # fmt: skip
        print(f"{case_name:24s} wgmma {wgmma:d} warps {n_warps} min_blocks {min_blocks}: "
              f"{ms:8.3f} ms {rows[-1]['tflops']:6.1f} TFLOP/s", flush=True)  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="write the results JSON here")
    parser.add_argument("--case", help="comma-separated standard case names")
    args = parser.parse_args()
    rows = [row for name in (args.case.split(",") if args.case else CASES) for row in measure(name)]
    if args.out:
        record = {
            "date": datetime.date.today().isoformat(), "environment": environment(),
            "method": "do_bench median, L2 cleared, bf16 B=1 H=16 S=16384", "rows": rows,
        }  # fmt: skip
        with open(args.out, "w") as handle:
            json.dump(record, handle, indent=1)


if __name__ == "__main__":
    main()
