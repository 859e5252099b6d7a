"""Where does FlexAttention fail on the long-context design, and with which block lists?

On the H200 on 2026-12-01 the first Flex variant of ``python -m gpu.bench --long-context 128K
--backward`` (the sinks-and-window closed form on Triton) raised CUDA's "operation not supported
on global/shared address space", an error that sticks to the process. This probe runs each
combination in its own process with ``CUDA_LAUNCH_BLOCKING=1`` (so the error names the kernel
that raised it and spoils no other run): the backend (Triton, FLASH), the width of the
BlockMask lists built from the runs (``compact``: the longest row plus one; ``tiles``: one entry
per key tile; ``torch``: the ``tiles`` kv lists with the transposed lists made by
``BlockMask.from_kv_blocks``) and the length, for the forward and then the backward. It prints
one line per combination and writes them as JSON; it times nothing (the harness does).

    python tools/probes/flex_long_context.py \
        --out benchmarks/results/checks/<date>-h200-flex-long-context.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

#: (backend, list width, query blocks of 64 tokens) in the order they run.
COMBINATIONS = (
    ("TRITON", "compact", 512),
    ("TRITON", "compact", 2048),
    ("TRITON", "tiles", 2048),
    ("TRITON", "torch", 2048),
    ("FLASH", "tiles", 2048),
    ("FLASH", "torch", 2048),
)
HEADS, HEAD_DIM, BLOCK, WINDOW_BLOCKS, SINK_BLOCKS = 32, 128, 64, 64, 1
#: Seconds one combination may take (compiling included).
CHILD_TIMEOUT = 240


def run_one(backend: str, width: str, n_blocks: int) -> dict:
    """Forward, then backward, of the sinks-and-window design in this process."""
    import torch
    from torch.nn.attention.flex_attention import BlockMask, flex_attention

    from designer.formats.runs_block_mask import runs_block_mask, sinks_window_mask_mod
    from designer.layout import Layout
    from designer.patterns.attention_sinks import attention_sinks_runs

    runs = attention_sinks_runs(HEADS, n_blocks, n_blocks, sink_blocks=SINK_BLOCKS,
                                window_blocks=WINDOW_BLOCKS)  # fmt: skip
    layout = Layout(runs, BLOCK)
    mask_mod = sinks_window_mask_mod(BLOCK, SINK_BLOCKS, WINDOW_BLOCKS, causal=True)
    built = runs_block_mask(layout, causal=True, device="cuda",
                            width="compact" if width == "compact" else "tiles",
                            mask_mod=mask_mod, q_lists=width != "torch")  # fmt: skip
    if width == "torch":
        built = BlockMask.from_kv_blocks(
            built.kv_num_blocks, built.kv_indices, built.full_kv_num_blocks,
            built.full_kv_indices, BLOCK_SIZE=built.BLOCK_SIZE, mask_mod=mask_mod,
            seq_lengths=built.seq_lengths,
        )  # fmt: skip
    seq = n_blocks * BLOCK
    generator = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, HEADS, seq, HEAD_DIM, device="cuda", dtype=torch.bfloat16,
                           generator=generator).requires_grad_() for _ in range(3))  # fmt: skip
    compiled = torch.compile(flex_attention, dynamic=False)
    options = {"BACKEND": "FLASH"} if backend == "FLASH" else None
    result = {"lists": {name: list(getattr(built, name).shape)
                        for name in ("kv_indices", "q_indices")}}  # fmt: skip
    for step in ("forward", "backward"):
        start = time.perf_counter()
        try:
            if step == "forward":
                out = compiled(q, k, v, block_mask=built, kernel_options=options)
            else:
                out.backward(torch.randn_like(out))
            torch.cuda.synchronize()
            result[step] = {"status": "ok", "finite": bool(torch.isfinite(
                out if step == "forward" else q.grad).all())}  # fmt: skip
        except Exception as error:  # the probe reports what failed
            message = f"{type(error).__name__}: {error}"
            result[step] = {"status": "failed", "message": message[:2000]}
            break
        finally:
            result.setdefault(step, {})["seconds"] = round(time.perf_counter() - start, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    if args.one:
        backend, width, n_blocks = args.one.split(",")
        print(json.dumps(run_one(backend, width, int(n_blocks))))
        return 0
    import torch

    rows = []
    for backend, width, n_blocks in COMBINATIONS:
        root = str(Path(__file__).resolve().parents[2])
        path = os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH"))))
        environment = os.environ | {"CUDA_LAUNCH_BLOCKING": "1", "PYTHONPATH": path}
        command = [sys.executable, __file__, "--one", f"{backend},{width},{n_blocks}"]
        try:
            done = subprocess.run(command, capture_output=True, text=True, env=environment,
                                  timeout=CHILD_TIMEOUT)  # fmt: skip
            lines = done.stdout.strip().splitlines()
            found = json.loads(lines[-1]) if done.returncode == 0 and lines else {
                "status": "crashed", "returncode": done.returncode,
                "stderr": done.stderr[-3000:]}  # fmt: skip
        except subprocess.TimeoutExpired:
            found = {"status": "timed out", "seconds": CHILD_TIMEOUT}
        row = {"backend": backend, "width": width, "seq": n_blocks * BLOCK, **found}
        rows.append(row)
        print(json.dumps(row)[:600], flush=True)
    if args.out:
        document = {
            "format": "blocksparse-probe",
            "version": 1,
            "probe": "flex_long_context",
            "date": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
            "environment": {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__},
            "design": {
                "heads": HEADS,
                "head_dim": HEAD_DIM,
                "block": BLOCK,
                "causal": True,
                "window_blocks": WINDOW_BLOCKS,
                "sink_blocks": SINK_BLOCKS,
                "dtype": "bf16",
            },
            "rows": rows,
        }
        Path(args.out).write_text(json.dumps(document, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
