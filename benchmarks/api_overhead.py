"""What a user pays per call of ``gpu.block_sparse_attention``: host time and the call's time.

Two measurements, one process, one GPU:

1. **Host cost per call** (CPU timer): at B=1, H=1, S=256, D=64, 200 back-to-back calls timed
   with ``time.perf_counter`` while the GPU is held busy by a spin kernel queued first (so every
   call only enqueues and the time is the host's alone), median of 21 trials, for each way to call:
   CuPy's generic launch of the same kernel, ``run_fused`` (and its two pieces on the plan's build:
   the parameter values, then the driver launch with them ready), the plan form (with and without
   ``out`` and ``return_lse``), the layout form on a cache hit with a CUDA tensor, a CPU tensor and
   a ``designer.Layout``, the ``torch.library`` op called eagerly through the dispatcher, and dense
   SDPA for scale. Targets: ≤ 30 µs with a plan, ≤ 50 µs for the layout form.
2. **The public call against the kernel alone** at bf16, B=1, H=16, S=16384 on four standard
   cases: ``triton.testing.do_bench`` (CUDA events, L2 cleared before each call, median) around
   ``run_fused`` with a prebuilt plan, the plan call, the layout call with a CUDA layout tensor,
   and compiled FlexAttention with the same mask. do_bench does not hide launch gaps, so host
   work shows in these times as a user would see it.

FLOPs of a case: ``4 · B · H · Sq · Sk · D · density`` (``gpu.bench.metrics``).

    python benchmarks/api_overhead.py --out benchmarks/results/2026-11-30-h200-api.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import time

import torch

import gpu
from designer.layout import Layout
from gpu import block_sparse_attention
from gpu.bench.cases import find_case
from gpu.bench.flex import FlexSession
from gpu.bench.harness import seeded_inputs
from gpu.bench.metrics import active_pairs, attention_flops, tflops
from gpu.forward.builds import choose_config
from gpu.forward.launch import kv_row_strides, plan_forward, run_fused
from gpu.runtime import current_raw_stream

CASES = ("banded_2pct-b128-d64", "banded_7pct-b64-d64", "banded_7pct-b16-d64", "dense-b128-d128")
CALLS = 200
TRIALS = 21
#: GPU cycles the spin kernel holds the stream for (about 50 ms at 2 GHz): longer than the host
#: needs to enqueue CALLS calls, so no call waits for the GPU.
SPIN_CYCLES = 100_000_000


def host_microseconds(calls: dict) -> dict[str, float]:
    """Per way to call: the median over trials of the host time per call, ``CALLS`` calls
    enqueued behind a spin. Trials go round-robin over the ways, so drift in the host's speed
    reaches all of them alike."""
    for call in calls.values():
        for _ in range(20):
            call()
    torch.cuda.synchronize()
    trials = {name: [] for name in calls}
    for _ in range(TRIALS):
        for name, call in calls.items():
            torch.cuda._sleep(SPIN_CYCLES)
            start = time.perf_counter()
            for _ in range(CALLS):
                call()
            trials[name].append((time.perf_counter() - start) / CALLS * 1e6)
            torch.cuda.synchronize()
    return {name: statistics.median(times) for name, times in trials.items()}


def host_costs() -> dict[str, float]:
    block, seq = 64, 256
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, 1, seq, 64, generator=gen, device="cuda", dtype=torch.bfloat16)
               for _ in range(3))  # fmt: skip
    blocks = torch.rand(1, 4, 4, generator=torch.Generator().manual_seed(0)) < 0.6
    blocks_cuda = blocks.cuda()
    layout = Layout(blocks, block)
    the_plan = gpu.plan(blocks, block, causal=True, device="cuda")
    fused_plan = the_plan.fused(q.dtype, 64, *kv_row_strides(k, v))
    # CuPy's generic call passes no tensor maps: compare launchers on the mma.sync kernel
    mma_config = choose_config(head_dim=64, dtype=q.dtype, wgmma=False)
    mma_plan = plan_forward(the_plan, mma_config)
    out = torch.empty_like(q)
    scale = 0.125
    generic = _generic_cupy_call(mma_plan, q, k, v, out, scale)
    # The pieces of run_fused's launch on the Hopper build: its values, then the driver call
    hopper, n_ctas = fused_plan.config, len(fused_plan.items)
    values = hopper.param_values(fused_plan, q, k, v, out, None, scale, n_ctas, 1)
    grid = min(n_ctas, fused_plan.max_ctas or n_ctas)
    stream = current_raw_stream(q.device.index)
    calls = {
        "the mma.sync kernel through CuPy's generic RawKernel call": generic,
        "the mma.sync kernel through run_fused": lambda: run_fused(
            mma_plan, q, k, v, scale=scale, out=out
        ),
        "run_fused (checks + launch)": lambda: run_fused(fused_plan, q, k, v, scale=scale, out=out),
        "its parameter values alone (tensor maps cached)": lambda: hopper.param_values(
            fused_plan, q, k, v, out, None, scale, n_ctas, 1
        ),
        "its driver launch alone (values ready)": lambda: fused_plan.launcher(
            grid, hopper.threads, hopper.shared_bytes, stream, *values
        ),
        "plan, out given": lambda: block_sparse_attention(q, k, v, the_plan, scale=scale, out=out),
        "plan": lambda: block_sparse_attention(q, k, v, the_plan),
        "plan, return_lse": lambda: block_sparse_attention(q, k, v, the_plan, return_lse=True),
        "layout form, CUDA tensor": lambda: block_sparse_attention(
            q, k, v, blocks_cuda, block, causal=True
        ),
        "layout form, CPU tensor": lambda: block_sparse_attention(
            q, k, v, blocks, block, causal=True
        ),
        "layout form, designer.Layout": lambda: block_sparse_attention(
            q, k, v, layout, block, causal=True
        ),
        "torch.ops.blocksparse.attention (dispatcher)": lambda: torch.ops.blocksparse.attention(
            q, k, v, the_plan.plan_id, scale, False, False
        ),
        "dense SDPA (for scale)": lambda: torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True
        ),
    }
    return host_microseconds(calls)


def _generic_cupy_call(fused_plan, q, k, v, out, scale):
    """The same launch through ``cupy.RawKernel.__call__`` (the alternative): its parameter
    struct as a numpy structured scalar, built from the same values on each call."""
    import cupy
    import numpy as np

    from gpu.runtime import compile_kernel, cupy_stream_for

    config = fused_plan.config
    kernel = compile_kernel(config.source, config.function, config.defines(), device=0)
    layout = np.dtype(config.params)  # numpy reads the ctypes mirror's fields and offsets
    grid = len(fused_plan.items) * q.shape[0]

    def call():
        values = config.param_values(fused_plan, q, k, v, out, None, scale, grid, 1)
        params = np.array([values], dtype=layout)[0]
        with cupy.cuda.Device(0), cupy_stream_for(q):
            kernel((grid,), (config.threads,), (params,), shared_mem=config.shared_bytes)

    return call


def public_call_row(name: str, flex: FlexSession) -> dict:
    """One standard case: each way to call, timed by do_bench (median ms) and in TFLOP/s."""
    from triton.testing import do_bench

    case = find_case(name)
    config, layout = case.config(), case.layout()
    q, k, v = seeded_inputs(config)
    blocks = layout.blocks.expand(config.heads, -1, -1).contiguous()
    blocks_cuda = blocks.cuda()
    block, causal = layout.block_size, config.causal
    scale = config.head_dim**-0.5
    the_plan = gpu.plan(blocks, block, causal=causal, device=q.device)
    fused_plan = the_plan.fused(q.dtype, config.head_dim, *kv_row_strides(k, v))
    out = torch.empty_like(q)
    flex_call = flex.prepare(blocks, block, causal=causal, device=q.device)
    contenders = {
        "kernel alone": lambda: run_fused(fused_plan, q, k, v, scale=scale, out=out),
        "public call, plan": lambda: block_sparse_attention(q, k, v, the_plan, scale=scale),
        "public call, layout tensor": lambda: block_sparse_attention(
            q, k, v, blocks_cuda, block, causal=causal, scale=scale
        ),
        "flex": lambda: flex_call(q, k, v, scale=scale),
    }
    flops = attention_flops(
        config.batch, config.head_dim, active_pairs(blocks, block, causal=causal)
    )
    row = {"case": name, "density": float(blocks.float().mean()), "ms": {}, "tflops": {}}
    for contender, run in contenders.items():
        ms = do_bench(run, warmup=25, rep=200, return_mode="median")
        row["ms"][contender] = ms
        row["tflops"][contender] = tflops(flops, ms)
    print(f"{name:24s} " + "  ".join(f"{c} {ms:.3f} ms" for c, ms in row["ms"].items()), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--skip-table", action="store_true", help="host costs only")
    args = parser.parse_args()
    import cupy

    device = torch.cuda.get_device_name()
    print(f"{device}, torch {torch.__version__}, cupy {cupy.__version__}", flush=True)
    costs = host_costs()
    print("\nhost cost per call (B=1, H=1, S=256, D=64, bf16; median of 21 x 200 calls):")
    for name, us in costs.items():
        print(f"  {name:52s} {us:7.1f} µs")
    flex = FlexSession()
    table = [] if args.skip_table else [public_call_row(name, flex) for name in CASES]
    if table:
        print("\nbf16, B=1, H=16, S=16384, do_bench median ms (ratio to the kernel alone):")
        for row in table:
            alone = row["ms"]["kernel alone"]
            print(f"  {row['case']:24s} " + "  ".join(
                f"{c}: {ms:.3f} ({ms / alone:.2f}x)" for c, ms in row["ms"].items()
            ))  # fmt: skip
    if args.out:
        import triton

        with open(args.out, "w") as handle:
            json.dump(
                {
                    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                    "gpu": device,
                    "versions": {"torch": torch.__version__, "cupy": cupy.__version__,
                                 "triton": triton.__version__, "cuda": torch.version.cuda},
                    "host_cost_us": costs,
                    "host_cost_shape": "bf16, B=1, H=1, S=256, D=64, block 64, causal",
                    "public_call": table,
                },
                handle,
                indent=1,
            )  # fmt: skip


if __name__ == "__main__":
    main()
