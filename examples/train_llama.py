"""Train a small Llama on a designed layout: our kernels against FlexAttention (on Triton and on
FlashAttention-4), same seed and data.

A Hugging Face ``LlamaForCausalLM`` built from a ``LlamaConfig`` with random weights (nothing is
downloaded): hidden 1024, 16 query heads and 4 kv heads (GQA, head dim 64), 4 layers, MLP 2816,
vocabulary 32000, one sequence of 8192 random tokens per step (``--seq``). The design (default:
causal attention sinks plus a sliding window of 1/8 of the sequence or ``--window`` tokens at
64-token blocks, or ``--design file.pt``) is registered
twice through ``gpu.hf``: on our fused kernel, and on compiled ``flex_attention`` with the
design's exported ``BlockMask``; and, where FlashAttention-4 is installed (``pip install -e
".[peers]"``), on compiled ``flex_attention`` with ``kernel_options={"BACKEND": "FLASH"}`` and
the same exported ``BlockMask``, as a user who turns FA4 on would run it. Each trains
``--steps`` steps of AdamW from the same initial weights on the same tokens.

Precision: fp32 weights and AdamW state, bf16 autocast for the matmuls and attention (q, k, v
cast to bf16 for both contenders). Mixed precision is how such models are trained, and with the
optimizer in fp32 the only difference between the two runs is the attention kernels' rounding.

Tolerance: our run must agree with each Flex run step by step within what bf16 rounding in
attention alone does to the loss curve. Another run measures it: Flex with attention computed
in fp32 (everything else as before). Two bf16 kernels that each stray from the fp32 curve by at
most ``noise`` are at most ``2 · noise`` apart, so the bar is ``max_t |ours − Flex| <= 2 · max_t
|Flex bf16 − Flex fp32| + 2e-3`` (the floor: at step 0 the weights are equal, and a bf16
rounding of every attention output moves a loss averaged over 8192 tokens by well under 1e-3).

Speed: tokens/s over the steps after ``--warmup`` (which hold compilation and autotuning), timed
with the device synchronised at both ends; peak memory is ``torch.cuda.max_memory_allocated``
per run. Attention's share of our run's step is the profiler's GPU time in our attention
kernels over all GPU time in one more step.

    python examples/train_llama.py --steps 50           # H200: writes benchmarks/results/
    python examples/train_llama.py --seq 32768 --window 4096  # where attention dominates
    python examples/train_llama.py --tiny --out x.json  # CPU smoke run (impl="reference")

``--tiny`` runs a tiny model on the CPU for 2 steps with ``impl="reference"``; Flex has no
backward on the CPU, so there its runs give the step-0 loss only (forward).
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from designer.design import Design
from designer.formats import load_design
from designer.layout import Layout
from designer.patterns import attention_sinks
from gpu.bench import peers
from gpu.bench.flex import FLASH
from gpu.bench.report import environment
from gpu.hf import register_attention, register_flex_attention

MODEL = {"hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 4,
         "num_hidden_layers": 4, "intermediate_size": 2816, "vocab_size": 32000}  # fmt: skip
TINY_MODEL = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
              "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 256}  # fmt: skip
SEQ, TINY_SEQ, MAX_SEQ = 8192, 256, 131072
BLOCK, TINY_BLOCK = 64, 16
LOSS_FLOOR = 2e-3
#: Name prefixes of our attention kernels (gpu/forward, gpu/backward), for ``attention_share``.
ATTENTION_KERNELS = ("fused_attention_fwd", "attention_bwd")
RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def default_design(seq: int, block: int, window_tokens: int | None = None) -> Design:
    """Causal attention sinks (the first block) plus a sliding window of ``window_tokens``
    (default: 1/8 of the sequence), in whole blocks."""
    n_blocks = seq // block
    window = max(2, n_blocks // 8 if window_tokens is None else -(-window_tokens // block))
    blocks = attention_sinks(1, n_blocks, n_blocks, sink_blocks=1, window_blocks=window)
    name = f"sinks {block} + window {window * block} tokens"
    return Design(Layout(blocks, block), name=name, causal=True)


def train(
    name: str, initial: dict, data: torch.Tensor, args, device, trains: bool, *,
    ours: bool = False,
) -> dict:  # fmt: skip
    """One run from ``initial`` weights over ``data`` [steps, batch, seq]: losses and speed
    (and, for ``ours`` on a GPU, attention's share of a step)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**args.model, max_position_embeddings=data.shape[2],
                         attention_dropout=0.0, attn_implementation=name)  # fmt: skip
    model = LlamaForCausalLM(config)
    model.load_state_dict(initial)
    model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95),
                                  weight_decay=0.1)  # fmt: skip
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)

    def step(ids: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device.type, dtype=torch.bfloat16), torch.set_grad_enabled(trains):
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        if trains:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    losses, start = [], None
    for index in range(len(data) if trains else 1):
        if index == args.warmup:
            _synchronize(device)
            start = time.perf_counter()
        losses.append(step(data[index].to(device)))
    _synchronize(device)
    timed_steps = len(losses) - args.warmup
    seconds = time.perf_counter() - start if start is not None else None
    tokens = timed_steps * data.shape[1] * data.shape[2]
    on_gpu = device.type == "cuda"
    profiled = ours and on_gpu and trains
    share = attention_share(lambda: step(data[-1].to(device))) if profiled else None
    return {
        "trained": trains,
        "losses": [float(x) for x in losses],
        "timed_steps": max(0, timed_steps),
        "seconds_timed": seconds,
        "tokens_per_s": tokens / seconds if seconds else None,
        "peak_memory_bytes": torch.cuda.max_memory_allocated(device) if on_gpu else None,
        "attention_share": share,
    }


def attention_share(step: Callable[[], object]) -> float:
    """The share of one more step's GPU kernel time spent in our attention kernels (forward and
    backward), from the profiler: it says how much a faster attention can buy."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        step()
        torch.cuda.synchronize()
    times = {e.key: e.self_device_time_total for e in profiler.key_averages()}
    total = sum(times.values())
    attention = sum(t for name, t in times.items() if name.startswith(ATTENTION_KERNELS))
    return attention / total if total else 0.0


def compare(ours: dict, flex: dict, flex_fp32: dict, flex_flash: dict | None = None) -> dict:
    """Max loss gap between ours and each Flex run, the bf16 bar from the fp32-attention run,
    and our tokens/s over each Flex run's (``flex_flash``: the FLASH run, if it ran)."""
    runs = [ours, flex, flex_fp32] + ([flex_flash] if flex_flash else [])
    steps = min(len(run["losses"]) for run in runs)

    def largest_gap(a: dict, b: dict) -> float:
        return max(
            abs(x - y) for x, y in zip(a["losses"][:steps], b["losses"][:steps], strict=True)
        )

    def speedup(other: dict) -> float | None:
        fast = ours["tokens_per_s"] and other["tokens_per_s"]
        return ours["tokens_per_s"] / other["tokens_per_s"] if fast else None

    gap, noise = largest_gap(ours, flex), largest_gap(flex, flex_fp32)
    tolerance = 2 * noise + LOSS_FLOOR
    result = {
        "steps_compared": steps,
        "max_abs_loss_difference": gap,
        "step0_loss_difference": abs(ours["losses"][0] - flex["losses"][0]),
        "bf16_attention_noise": noise,
        "tolerance": tolerance,
        "tolerance_rule": f"2 * max|Flex bf16 - Flex fp32-attention| + {LOSS_FLOOR}",
        "agree": gap <= tolerance,
        "speedup_tokens_per_s": speedup(flex),
    }
    if flex_flash:
        flash_gap = largest_gap(ours, flex_flash)
        result |= {
            "max_abs_loss_difference_flex_flash": flash_gap,
            "agree": result["agree"] and flash_gap <= tolerance,
            "speedup_tokens_per_s_flex_flash": speedup(flex_flash),
        }
    return result


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    if args.tiny:
        device, impl = torch.device("cpu"), "reference"
    elif not torch.cuda.is_available():
        raise SystemExit("train_llama.py needs a CUDA GPU (or --tiny for the CPU smoke run)")
    else:
        device, impl = torch.device("cuda"), "fused"
    design = _design(args)
    seq = design.layout.seq_len_q
    register_attention("blocksparse", design, impl=impl)
    compiled = device.type == "cuda"
    register_flex_attention("blocksparse-flex", design, compiled=compiled)
    register_flex_attention("blocksparse-flex-fp32", design, compiled=compiled,
                            dtype=torch.float32)  # fmt: skip
    flash_missing = peers.missing("flex_flash") or (None if compiled else "needs a CUDA GPU")
    if flash_missing is None:
        register_flex_attention("blocksparse-flex-fa4", design, kernel_options={"BACKEND": FLASH})

    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(args.seed)
    initial = LlamaForCausalLM(LlamaConfig(**args.model, max_position_embeddings=seq)).state_dict()
    generator = torch.Generator().manual_seed(args.seed + 1)
    data = torch.randint(args.model["vocab_size"], (args.steps, args.batch, seq),
                         generator=generator)  # fmt: skip
    flex_trains = device.type == "cuda"  # Flex has no backward on the CPU
    runs = {}
    contenders = [
        ("ours", "blocksparse", True),
        ("flex", "blocksparse-flex", flex_trains),
        ("flex_fp32_attention", "blocksparse-flex-fp32", flex_trains),
    ]
    if flash_missing is None:
        contenders.insert(2, ("flex_flash", "blocksparse-flex-fa4", True))
    for key, name, trains in contenders:
        runs[key] = {
            "attn_implementation": name,
            **train(name, initial, data, args, device, trains, ours=key == "ours"),
        }
        _print_run(key, runs[key])
    if flash_missing is not None:
        runs["flex_flash"] = {"skipped": flash_missing}
        print(f"flex_flash: not run ({flash_missing})")
    runs["ours"]["impl"] = impl
    comparison = compare(runs["ours"], runs["flex"], runs["flex_fp32_attention"],
                         runs.get("flex_flash") if flash_missing is None else None)  # fmt: skip
    document = {
        "format": "blocksparse-train-llama",
        "version": 1,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "environment": _environment(),
        "model": {**args.model, "seq_len": seq, "batch": args.batch, "head_dim": _head_dim(args)},
        "training": {"steps": args.steps, "warmup_steps": args.warmup, "lr": args.lr,
                     "optimizer": "AdamW(betas=(0.9, 0.95), weight_decay=0.1), clip 1.0",
                     "precision": "fp32 weights and optimizer, bf16 autocast", "seed": args.seed},
        "design": {"name": design.name, "block_size": design.layout.block_size,
                   "heads": design.layout.n_heads, "density": design.layout.density,
                   "causal": design.causal},
        "runs": runs,
        "comparison": comparison,
    }  # fmt: skip
    _print_comparison(comparison)
    out = args.out or (None if args.tiny else _default_out(document))
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(document, indent=1) + "\n")
        print(f"wrote {out}")
    return 0 if comparison["agree"] else 1


def _arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=None, help="training steps (default 50)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed first steps (3)")
    parser.add_argument("--batch", type=int, default=1, help="sequences per step")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--design", help="a design file (default: sinks + sliding window)")
    parser.add_argument(
        "--seq",
        type=int,
        default=None,
        help=f"tokens per sequence of the default design (default {SEQ})",
    )
    parser.add_argument(
        "--window",
        type=int,
        default=None,
        help="the default design's window in tokens (default: 1/8 of --seq)",
    )
    parser.add_argument("--out", help="result JSON (default benchmarks/results/<date>-<gpu>-...)")
    parser.add_argument("--tiny", action="store_true", help="tiny model, CPU, reference impl")
    args = parser.parse_args(argv)
    args.steps = args.steps if args.steps is not None else (2 if args.tiny else 50)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.tiny else 3)
    if args.steps < 1 or not 0 <= args.warmup < args.steps or args.batch < 1 or args.lr <= 0:
        parser.error("need steps >= 1, 0 <= warmup < steps, batch >= 1 and lr > 0")
    block = TINY_BLOCK if args.tiny else BLOCK
    if (args.seq is not None or args.window is not None) and args.design is not None:
        parser.error("--seq and --window shape the default design; a --design has its own")
    if args.seq is not None and not (args.seq >= 2 * block and args.seq % block == 0
                                     and args.seq <= MAX_SEQ):  # fmt: skip
        parser.error(f"--seq must be a multiple of {block} from {2 * block} to {MAX_SEQ}")
    if args.window is not None and not 1 <= args.window <= (
        args.seq or (TINY_SEQ if args.tiny else SEQ)
    ):
        parser.error("--window must be from 1 to the sequence length")
    args.model = TINY_MODEL if args.tiny else MODEL
    return args


def _design(args) -> Design:
    if args.design is None:
        seq = args.seq or (TINY_SEQ if args.tiny else SEQ)
        return default_design(seq, TINY_BLOCK if args.tiny else BLOCK, args.window)
    design = load_design(args.design)
    layout = design.layout
    if layout.seq_len_q != layout.seq_len_k or not design.causal:
        raise SystemExit(
            f"--design must be causal with Sq = Sk for a causal language model, got "
            f"{layout.seq_len_q} x {layout.seq_len_k}, causal={design.causal}"
        )
    return design


def _head_dim(args) -> int:
    return args.model["hidden_size"] // args.model["num_attention_heads"]


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _environment() -> dict:
    import transformers

    return {**environment(), "transformers": transformers.__version__}


def _default_out(document: dict) -> Path:
    gpu = document["environment"]["gpu"]
    slug = re.sub(r"[^a-z0-9]+", "-", gpu.lower().removeprefix("nvidia ")).strip("-") or "gpu"
    return RESULTS / f"{document['date'][:10]}-{slug}-train-llama.json"


def _print_run(key: str, run: dict) -> None:
    losses = " ".join(f"{x:.4f}" for x in run["losses"])
    speed = f"{run['tokens_per_s']:,.0f} tokens/s" if run["tokens_per_s"] else "not timed"
    memory = run["peak_memory_bytes"]
    peak = f", peak {memory / 2**30:.2f} GiB" if memory else ""
    print(f"{key}: {speed}{peak}\n  losses: {losses}")


def _print_comparison(comparison: dict) -> None:
    verdict = "agree" if comparison["agree"] else "DISAGREE"
    print(
        f"max |loss ours - loss Flex| = {comparison['max_abs_loss_difference']:.2e} over "
        f"{comparison['steps_compared']} steps; tolerance {comparison['tolerance']:.2e} "
        f"({comparison['tolerance_rule']}): {verdict}"
    )
    if comparison["speedup_tokens_per_s"]:
        print(f"ours / Flex tokens/s: {comparison['speedup_tokens_per_s']:.2f}x")
    if comparison.get("speedup_tokens_per_s_flex_flash"):
        print(
            f"ours / Flex FLASH tokens/s: {comparison['speedup_tokens_per_s_flex_flash']:.2f}x; "
            f"max |loss ours - loss Flex FLASH| = "
            f"{comparison['max_abs_loss_difference_flex_flash']:.2e}"
        )


if __name__ == "__main__":
    sys.exit(main())
