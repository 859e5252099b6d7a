"""What a partial (token-masked) tile costs in our kernels, and a token-level window against Flex.

``python3 tools/probes/partial_tiles.py [--json PATH] [--head-dims 64,128] [--no-flex]``

FLOPs first. Useful work is ``4 · B · H · D · pairs`` for the forward (two matmuls over the
allowed (q, k) pairs) and 3.5 times that for forward + backward (``gpu.bench.metrics``); bf16,
B = 1, H = 16, S = 16384. At 784 TFLOP/s a dense D = 128 forward (2.2e12) is 2.8 ms; the 1000-token
causal window keeps about 1000.5 · 16384 pairs a head (6 % of S²): 0.17 ms at D = 128.

1. **Partial against full.** The same layout planned twice: every active block full, and
   every active block stored as partial with all bits set (through ``gpu.plan(partials=)``),
   so each tile the kernel visits is a token tile that reads its words and masks. Layouts:
   dense (block 128) and the 1000-token window's blocks (64 and 128, causal). One layout head
   serves the 16 heads. Per forward build (on Hopper each build a plan may take, with or without
   token tiles, with its token words through the K stages and from global memory where both
   fit; elsewhere the mma.sync build) and for every backward build
   (``fused``, and on Hopper the sm90 builds, which compile their token-tile path for the
   partial plan only): both times and their ratio (target <= 1.15); outputs (the backward's
   dk and dv; dq sums by atomics or bulk reductions, except in ``sm90_separate``) must agree
   exactly.
2. **Against FlexAttention.** The window as a ``mask_mod`` (``q - kv <= 1000`` and causal, as
   attention-gym's ``generate_sliding_window``): ours planned from its token mask at blocks 64
   and 128 (causal closed form, the window's edge as partial blocks), Flex's ``create_block_mask``
   at 128-token tiles on Triton and, if ``flash_attn.cute`` imports, on FLASH. Each output is
   checked against fp64 (head 0, the first 2048 query rows) before it is timed; forward and
   forward + backward.

Timing: ``gpu.bench.timing.CudaEventTimer`` (events per rep, L2 flushed, a spin kernel ahead),
warm-up first, the median of the reps; fresh random inputs per case. Writes JSON with the date,
GPU and versions; the table is printed last.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Callable
from functools import partial as partial_call
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, uninstalled

import gpu
from gpu.backward.builds import BUILDS
from gpu.bench.metrics import attention_flops, median, step_flops, tflops
from gpu.bench.report import environment
from gpu.bench.timing import CudaEventTimer
from gpu.forward.builds import choose_config, hopper_token_paths
from gpu.forward.launch import plan_forward, run_fused
from gpu.forward.sm90 import HopperConfig
from gpu.partials import split_token_mask
from gpu.reference import dense_masked_attention
from gpu.runtime import is_hopper

BATCH, HEADS, SEQ = 1, 16, 16384
WINDOW = 1000
WARMUP, REPS = 5, 20
CHECK_ROWS = 2048
TOLERANCE = 2e-2


def window_layouts(seq: int) -> dict[int, tuple[torch.Tensor, tuple]]:
    """Per block size 64 and 128: the window's ``(blocks, partials)`` under the causal rule,
    from its ``[1, S, S]`` token mask ``0 <= q - k <= WINDOW``."""
    q = torch.arange(seq)[:, None]
    k = torch.arange(seq)[None, :]
    causal = k <= q
    mask = ((q - k <= WINDOW) & causal)[None]
    return {block: split_token_mask(mask, block, implied=causal) for block in (64, 128)}


def window_mask_mod(b, h, q_idx, kv_idx):
    return (q_idx - kv_idx <= WINDOW) & (q_idx >= kv_idx)


def fresh_inputs(head_dim: int, seed: int, grad: bool = False) -> list[torch.Tensor]:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    shape = (BATCH, HEADS, SEQ, head_dim)
    return [torch.randn(shape, generator=gen, device="cuda", dtype=torch.bfloat16)
            .requires_grad_(grad) for _ in range(3)]  # fmt: skip


def timed(run: Callable[[], object], timer: CudaEventTimer) -> float:
    for _ in range(WARMUP):
        run()
    torch.cuda.synchronize()
    return median(timer(run, reps=REPS))


def step_of(call: Callable, qkv: list[torch.Tensor]) -> Callable[[], object]:
    """Forward then backward of ``call`` on leaves ``qkv`` with a fixed output gradient."""
    grad_out = torch.randn_like(qkv[0])

    def step() -> object:
        return torch.autograd.grad(call(*qkv), qkv, grad_out)

    return step


def relative_to_fp64(out: torch.Tensor, qkv, blocks, block_size, partials, causal) -> float:
    """‖out - ref‖ / ‖ref‖ on head 0 and the first CHECK_ROWS query rows, ref in fp64."""
    q, k, v = (x.detach()[:, :1].double() for x in qkv)
    ref = dense_masked_attention(q[:, :, :CHECK_ROWS], k, v, blocks[:, : CHECK_ROWS // block_size],
                                 block_size, causal=causal, partials=partials)  # fmt: skip
    got = out.detach()[:, :1, :CHECK_ROWS].double()
    return float((got - ref).norm() / ref.norm())


def forward_builds(head_dim: int) -> list:
    """The forward builds the cost is measured on (the module doc)."""
    if not is_hopper(torch.device("cuda")):
        return [choose_config(head_dim=head_dim, dtype=torch.bfloat16, wgmma=False)]
    return hopper_token_paths("bf16", head_dim)


def build_label(config) -> str:
    """A short name of a forward build: tiles, stages, CTAs per SM, token path."""
    if not isinstance(config, HopperConfig):
        return f"mma.sync {config.block_m}x{config.block_n}"
    path = "stages" if config.token_stages else "global"
    return (f"{config.block_m}x{config.block_n} s{config.stages} c{config.consumers} "
            f"b{config.min_blocks} {path}")  # fmt: skip


def report(record: dict, records: list[dict]) -> None:
    records.append(record)
    print(f"{record['layout']:12s} b{record['block']:<4d} D{record['head_dim']:<4d} "
          f"{record['build']:28s} full {record['full_ms']:7.3f} ms  partial "
          f"{record['partial_ms']:7.3f} ms  ratio {record['ratio']:.3f}  identical "
          f"{record['identical_outputs']}", flush=True)  # fmt: skip


def cost_of_partial_tiles(timer, head_dim: int, windows, records: list[dict]) -> None:
    cases = [("dense", 128, torch.ones(1, SEQ // 128, SEQ // 128, dtype=torch.bool), False)]
    cases += [(f"window{WINDOW}", block, windows[block][0], True) for block in (64, 128)]
    scale = head_dim**-0.5
    backward_builds = BUILDS if is_hopper(torch.device("cuda")) else ("fused",)
    for name, block, blocks, causal in cases:
        index = blocks.nonzero().to(torch.int32)
        ones = torch.full((len(index), block, block // 8), 0xFF, dtype=torch.uint8)
        full = gpu.plan(blocks, block, causal=causal, device="cuda")
        partial = gpu.plan(blocks, block, causal=causal, partials=(index, ones), device="cuda")
        qkv = fresh_inputs(head_dim, seed=block + head_dim)
        case = {"probe": "partial_vs_full", "layout": name, "block": block,
                "head_dim": head_dim, "partial_blocks": len(index)}  # fmt: skip
        for config in forward_builds(head_dim):
            outs, times = [], []
            for the_plan in (full, partial):
                out = torch.empty_like(qkv[0])
                run = partial_call(run_fused, plan_forward(the_plan, config), *qkv, scale=scale,
                                   out=out)  # fmt: skip
                times.append(timed(run, timer))
                outs.append(out)
            report({**case, "pass": "forward", "build": build_label(config), "full_ms": times[0],
                    "partial_ms": times[1], "ratio": times[1] / times[0],
                    "identical_outputs": bool(torch.equal(outs[0], outs[1]))}, records)  # fmt: skip
        out, lse = gpu.block_sparse_attention(*qkv, full, return_lse=True)
        grad_out = torch.randn_like(out)
        for build in backward_builds:
            grads, times = [], []
            for the_plan in (full, partial):
                backward = the_plan.backward(torch.bfloat16, head_dim, build=build)
                run = partial_call(backward.launch, *qkv, out, lse, grad_out, None, scale=scale)
                grads.append(run())
                times.append(timed(run, timer))
            # dk and dv; dq too where no atomics or bulk reductions sum it in no fixed order
            first = 0 if build == "sm90_separate" else 1
            pairs = zip(grads[0][first:], grads[1][first:], strict=True)
            same = all(torch.equal(a, b) for a, b in pairs)
            report({**case, "pass": "backward", "build": f"backward {build}",
                    "full_ms": times[0], "partial_ms": times[1], "ratio": times[1] / times[0],
                    "identical_outputs": same}, records)  # fmt: skip


def against_flex(timer, head_dim: int, windows, records: list[dict], backends: list[str]) -> None:
    pairs = sum(min(q, WINDOW) + 1 for q in range(SEQ)) * HEADS
    flops = attention_flops(BATCH, head_dim, pairs)
    contenders: dict[str, Callable] = {}
    for block in (64, 128):
        blocks, partials = windows[block]
        the_plan = gpu.plan(blocks, block, causal=True, partials=partials, device="cuda")
        contenders[f"ours-b{block}"] = lambda q, k, v, p=the_plan: gpu.block_sparse_attention(
            q, k, v, p)  # fmt: skip
    if backends:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        block_mask = create_block_mask(window_mask_mod, None, None, SEQ, SEQ, device="cuda",
                                       BLOCK_SIZE=128)  # fmt: skip
        compiled = torch.compile(flex_attention, dynamic=False)
        for backend in backends:
            options = {"BACKEND": "FLASH"} if backend == "FLASH" else None
            contenders[f"flex-{backend.lower()}"] = (
                lambda q, k, v, o=options: compiled(q, k, v, block_mask=block_mask,
                                                    kernel_options=o))  # fmt: skip
    window_blocks, window_partials = windows[128]
    for name, call in contenders.items():
        record = {"probe": "window_vs_flex", "contender": name, "head_dim": head_dim,
                  "window": WINDOW, "useful_flops_forward": flops}  # fmt: skip
        try:
            qkv = fresh_inputs(head_dim, seed=head_dim)
            out = call(*qkv)
            record["rel_error"] = relative_to_fp64(out, qkv, window_blocks, 128,
                                                   window_partials, True)  # fmt: skip
            if record["rel_error"] > TOLERANCE:
                raise RuntimeError(f"wrong result: relative error {record['rel_error']:.2e}")
            record["forward_ms"] = timed(lambda c=call, x=qkv: c(*x), timer)
            leaves = fresh_inputs(head_dim, seed=head_dim + 1, grad=True)
            record["step_ms"] = timed(step_of(call, leaves), timer)
            record["forward_tflops"] = tflops(flops, record["forward_ms"])
            record["step_tflops"] = tflops(step_flops(flops), record["step_ms"])
        except Exception as error:  # a peer that cannot run this case is reported, not fatal
            record["error"] = f"{type(error).__name__}: {error}"[:400]
        records.append(record)
        print(f"{name:12s} D{head_dim:<4d} " + (
            f"fwd {record['forward_ms']:7.3f} ms ({record['forward_tflops']:5.0f} TFLOP/s)  "
            f"fwd+bwd {record['step_ms']:7.3f} ms ({record['step_tflops']:5.0f})  "
            f"err {record['rel_error']:.1e}" if "error" not in record else record["error"]),
            flush=True)  # fmt: skip


def flash_importable() -> bool:
    try:
        import flash_attn.cute  # noqa: F401
    except Exception:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="write the records here")
    parser.add_argument("--head-dims", default="64,128")
    parser.add_argument("--no-flex", action="store_true", help="time our kernels only")
    args = parser.parse_args()
    timer = CudaEventTimer(torch.device("cuda"))
    backends = [] if args.no_flex else ["TRITON"] + (["FLASH"] if flash_importable() else [])
    document = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "command": "python3 tools/probes/partial_tiles.py " + " ".join(sys.argv[1:]),
                "environment": environment(), "shape": [BATCH, HEADS, SEQ],
                "records": []}  # fmt: skip
    windows = window_layouts(SEQ)
    for head_dim in map(int, args.head_dims.split(",")):
        cost_of_partial_tiles(timer, head_dim, windows, document["records"])
        if args.json:
            Path(args.json).write_text(json.dumps(document, indent=1) + "\n")
        against_flex(timer, head_dim, windows, document["records"], backends)
        if args.json:
            Path(args.json).write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    main()
