"""Token-exact designs against FlexAttention on the same ``mask_mod``: forward and forward +
backward, ours (the design ``designer.from_mask_mod`` makes, at blocks of 64 and 128) against Flex
on Triton and on its FLASH backend (FlashAttention-4).

    PYTHONPATH=. python benchmarks/token_masks.py [--head-dims 128,64] [--families ...]
        [--time-limit SECONDS] [--out PATH]

FLOPs first: useful work is ``4 · B · H · D`` per allowed (q, k) pair for the forward and 3.5
times that for a step (``gpu.bench.metrics``), the pairs counted from the ``mask_mod`` itself on
the whole token grid; bf16, B = 1, H = 16, S = 16384.

The families (attention-gym's, written as a Flex user writes them): a causal sliding window of
1000 tokens, causal packed documents of 1/8, 3/8 and 4/8 of S, prefix-LM with a prefix of S/4
(4096 tokens) and NATTEN over a 256-token-wide image with a 7 x 7 neighbourhood. One mask serves
every head.

Correctness before time: every contender's output and its q, k, v gradients on head 0 are
compared with fp64 attention under the token mask the ``mask_mod`` gives on the whole grid (an
independent reference: it never sees our blocks or partial tiles); a contender over the tolerance
is reported wrong and not timed. Timing: ``gpu.bench.timing.CudaEventTimer`` (events per rep, L2
flushed), warm-up first, the median of the reps; fresh random inputs per family and head dim, the
same for every contender. A step is ``torch.autograd.grad`` of the output with a fixed output
gradient. Flex is ``torch.compile``d with its ``BlockMask`` built by ``create_block_mask`` at
128-token tiles once per family, outside the timing. Writes JSON (date, GPU, versions) after each
family, and a table of our speedup over the faster Flex build.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled

import gpu
from designer import from_mask_mod
from designer.patterns.token_canvas import token_natten
from designer.patterns.token_prefix_lm import token_prefix_lm
from designer.patterns.token_window import token_sliding_window
from gpu.bench.flex import RECOMPILE_LIMIT
from gpu.bench.metrics import attention_flops, errors, median, step_flops, tflops
from gpu.bench.peers import installed
from gpu.bench.report import environment
from gpu.bench.timing import CudaEventTimer

BATCH, HEADS, SEQ = 1, 16, 16384
BLOCKS = (64, 128)
WARMUP, REPS = 5, 20
TOLERANCE = 2e-2  # relative, bf16 against fp64 (outputs and gradients)
RESULTS = Path(__file__).resolve().parent / "results"


def causal_documents(device: str) -> Callable:
    """Causal packed documents of 1/8, 3/8 and 4/8 of the sequence, the table on ``device``."""
    ends = torch.tensor([SEQ // 8, SEQ // 2, SEQ], device=device)
    document = torch.searchsorted(ends, torch.arange(SEQ, device=device), right=True)

    def mask_mod(b, h, q_idx, kv_idx):
        return (document[q_idx] == document[kv_idx]) & (kv_idx <= q_idx)

    return mask_mod


#: name -> (mask_mod on a device, whether it is causal: the plan then applies the causal rule)
FAMILIES: dict[str, tuple[Callable[[str], Callable], bool]] = {
    "sliding window 1000": (lambda device: token_sliding_window(1000), True),
    "causal documents": (causal_documents, True),
    "prefix-LM S/4": (lambda device: token_prefix_lm(SEQ // 4), False),
    "NATTEN 256 wide 7x7": (lambda device: token_natten(256, 7, 7, height=SEQ // 256), False),
}


def token_mask(mask_mod: Callable, device: str) -> torch.Tensor:
    """The ``[S, S]`` bool mask ``mask_mod`` allows, evaluated on the whole grid by rows."""
    zero = torch.zeros((), dtype=torch.int64, device=device)
    keys = torch.arange(SEQ, device=device)[None, :]
    starts = range(0, SEQ, 2048)
    rows = [mask_mod(zero, zero, torch.arange(s, min(s + 2048, SEQ), device=device)[:, None], keys)
            for s in starts]  # fmt: skip
    return torch.cat(rows).to(torch.bool)


def fp64_head0(qkv: list[torch.Tensor], grad_out: torch.Tensor, allowed: torch.Tensor) -> dict:
    """Output and q, k, v gradients of head 0 in fp64 under the token mask ``allowed``."""
    q, k, v = (x.detach()[0, 0].double().requires_grad_() for x in qkv)
    scores = (q @ k.T) * q.shape[-1] ** -0.5
    out = torch.softmax(scores.masked_fill(~allowed, -torch.inf), -1) @ v
    grads = torch.autograd.grad(out, (q, k, v), grad_out[0, 0].double())
    return {"out": out.detach(), **dict(zip(("dq", "dk", "dv"), grads, strict=True))}


def contenders(family: str, head_dim: int) -> dict[str, Callable | str]:
    """Each contender's attention call, or why it cannot run here."""
    make_mask, causal = FAMILIES[family]
    calls: dict[str, Callable | str] = {}
    for block in BLOCKS:
        layout = from_mask_mod(make_mask("cpu"), heads=1, seq_q=SEQ, seq_k=SEQ, block_size=block,
                               causal=causal)  # fmt: skip
        plan = gpu.plan(layout, causal=causal, device="cuda")
        calls[f"ours b{block}"] = lambda q, k, v, p=plan: gpu.block_sparse_attention(q, k, v, p)
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    block_mask = create_block_mask(make_mask("cuda"), None, None, SEQ, SEQ, device="cuda",
                                   BLOCK_SIZE=128)  # fmt: skip
    compiled = torch.compile(flex_attention, dynamic=False)

    def flex(q, k, v, options=None):
        # past Dynamo's recompile limit Flex would run eagerly, materialising every score
        with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT,
                                        fail_on_recompile_limit_hit=True):  # fmt: skip
            return compiled(q, k, v, block_mask=block_mask, kernel_options=options)

    calls["flex triton"] = flex
    if installed("flex_flash"):
        calls["flex flash"] = lambda q, k, v: flex(q, k, v, {"BACKEND": "FLASH"})
    else:
        calls["flex flash"] = "not installed"
    return calls


def inputs(head_dim: int, seed: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Fresh random bf16 q, k, v leaves that require grad, and an output gradient."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    shape = (BATCH, HEADS, SEQ, head_dim)
    qkv = [torch.randn(shape, generator=gen, device="cuda").to(torch.bfloat16).requires_grad_()
           for _ in range(3)]  # fmt: skip
    return qkv, torch.randn(shape, generator=gen, device="cuda").to(torch.bfloat16)


def timed(run: Callable[[], object], timer: CudaEventTimer) -> float:
    for _ in range(WARMUP):
        run()
    torch.cuda.synchronize()
    return median(timer(run, reps=REPS))


def measure(name: str, call: Callable, qkv, grad_out, reference: dict, flops: int, timer) -> dict:
    """Check ``call`` against the fp64 reference, then time its forward and its step."""
    record: dict = {"contender": name}
    try:
        out = call(*qkv)
        grads = torch.autograd.grad(out, qkv, grad_out)
        got = {"out": out[0, 0], **{f"d{n}": g[0, 0] for n, g in zip("qkv", grads, strict=True)}}
        record["rel_errors"] = {n: errors(got[n].double(), reference[n])[1] for n in got}
        worst = max(record["rel_errors"].values())
        if not worst <= TOLERANCE:
            record["status"] = f"wrong: relative error {worst:.2e} over {TOLERANCE:g}"
            return record
        detached = [x.detach() for x in qkv]
        with torch.no_grad():
            record["forward_ms"] = timed(lambda: call(*detached), timer)
        record["step_ms"] = timed(lambda: torch.autograd.grad(call(*qkv), qkv, grad_out), timer)
        record["forward_tflops"] = tflops(flops, record["forward_ms"])
        record["step_tflops"] = tflops(step_flops(flops), record["step_ms"])
        record["status"] = "ok"
    except Exception as error:  # a contender that cannot run a case is reported, not fatal
        record["status"] = f"error: {type(error).__name__}: {error}"[:400]
    return record


def run_case(family: str, head_dim: int, timer) -> dict:
    make_mask, causal = FAMILIES[family]
    allowed = token_mask(make_mask("cuda"), "cuda")
    pairs = int(allowed.sum()) * HEADS
    flops = attention_flops(BATCH, head_dim, pairs)
    qkv, grad_out = inputs(head_dim, seed=head_dim + len(family))
    reference = fp64_head0(qkv, grad_out, allowed)
    del allowed
    case = {"family": family, "head_dim": head_dim, "causal": causal, "pairs": pairs,
            "token_density": pairs / (HEADS * SEQ * SEQ), "forward_flops": flops,
            "contenders": []}  # fmt: skip
    for name, call in contenders(family, head_dim).items():
        record = ({"contender": name, "status": call} if isinstance(call, str)
                  else measure(name, call, qkv, grad_out, reference, flops, timer))  # fmt: skip
        case["contenders"].append(record)
        print(f"{family:22s} D{head_dim:<4d} {name:12s} " + (
            f"fwd {record['forward_ms']:7.3f} ms ({record['forward_tflops']:4.0f} TFLOP/s)  "
            f"step {record['step_ms']:7.3f} ms ({record['step_tflops']:4.0f})  worst err "
            f"{max(record['rel_errors'].values()):.1e}" if record["status"] == "ok"
            else record["status"]), flush=True)  # fmt: skip
    return case


def speedups(case: dict) -> dict[str, float | None]:
    """Our best time over the faster Flex build's, forward and step (above 1: we are faster)."""
    ran = [r for r in case["contenders"] if r["status"] == "ok"]
    result = {}
    for key in ("forward_ms", "step_ms"):
        ours = [r[key] for r in ran if r["contender"].startswith("ours")]
        flex = [r[key] for r in ran if r["contender"].startswith("flex")]
        result[key] = min(flex) / min(ours) if ours and flex else None
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head-dims", default="128,64", help="comma-separated, e.g. 128,64")
    parser.add_argument("--families", default=",".join(FAMILIES),
                        help=f"comma-separated subset of: {', '.join(FAMILIES)}")  # fmt: skip
    parser.add_argument("--time-limit", type=float, default=None,
                        help="start no case that would end past this many seconds")  # fmt: skip
    parser.add_argument("--out", default=None, help="the JSON (default results/<date>-<gpu>-...)")
    args = parser.parse_args(argv)
    families = [f.strip() for f in args.families.split(",")]
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        parser.error(f"unknown families {unknown}; choose from {list(FAMILIES)}")
    if not torch.cuda.is_available():
        parser.exit(2, "benchmarks/token_masks.py needs a CUDA GPU\n")
    date = datetime.datetime.now(datetime.UTC)
    env = environment()
    out = Path(args.out or RESULTS / f"{date:%Y-%m-%d}-{env['gpu'].split()[-1].lower()}"
                                     "-token-masks.json")  # fmt: skip
    document = {"date": date.isoformat(timespec="seconds"),
                "command": "python benchmarks/token_masks.py " + " ".join(argv or sys.argv[1:]),
                "environment": env, "shape": [BATCH, HEADS, SEQ], "dtype": "bf16",
                "tolerance": TOLERANCE, "warmup": WARMUP, "reps": REPS, "cases": []}  # fmt: skip
    timer = CudaEventTimer(torch.device("cuda"))
    start, longest = time.perf_counter(), 0.0
    for head_dim in map(int, args.head_dims.split(",")):
        for family in families:
            elapsed = time.perf_counter() - start
            if args.time_limit and elapsed + longest > args.time_limit:
                print(f"stopping at {elapsed:.0f} s: the next case would pass the time limit")
                break
            began = time.perf_counter()
            case = run_case(family, head_dim, timer)
            case["speedup_over_best_flex"] = speedups(case)
            longest = max(longest, time.perf_counter() - began)
            document["cases"].append(case)
            out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"\n{'family':22s} {'D':>4s} {'fwd x best Flex':>16s} {'step x best Flex':>17s}")
    for case in document["cases"]:
        fwd, step = (case["speedup_over_best_flex"][k] for k in ("forward_ms", "step_ms"))
        print(f"{case['family']:22s} {case['head_dim']:4d} "
              f"{'-' if fwd is None else f'{fwd:.2f}':>16s} "
              f"{'-' if step is None else f'{step:.2f}':>17s}")  # fmt: skip
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
