"""CPU time of ``designer.from_mask_mod`` at 65,536 tokens, 16 heads, blocks of 64 (target:
at most 2 s), on attention-gym's families, one torch thread, as the designer runs it.

Each case is run once to warm up and then REPEATS times; the median wall and CPU seconds,
the blocks the bounds pass decided, the blocks evaluated token by token and the partial blocks
made are written to ``benchmarks/results/<date>-mask-mod-cpu.json`` with the date, the
machine and the versions, and printed. A case past the partial-mask cap is recorded with the
refusal's message.

    python benchmarks/mask_mod_speed.py [--repeats 3] [--heads 16] [--tokens 65536]
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

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled

from designer import from_mask_mod
from designer.mask_mod import tile_bounds
from designer.patterns.token_canvas import token_natten
from designer.patterns.token_documents import token_documents
from designer.patterns.token_prefix_lm import token_prefix_lm
from designer.patterns.token_window import token_dilated_window, token_sliding_window

RESULTS = Path(__file__).resolve().parent / "results"
BLOCK = 64


def cases(tokens: int, heads: int) -> dict:
    """The families, as users write them for Flex (our factories are plain mask_mods)."""
    lengths = [tokens // 8 * k for k in (1, 3, 4)]
    windows = torch.arange(heads) * 64 + 100
    return {
        "sliding window 1000": token_sliding_window(1000),
        "dilated window 1000 / 4": token_dilated_window(1000, 4),
        "prefix-LM 4096": token_prefix_lm(4096),
        "causal documents 1/8, 3/8, 4/8": token_documents(lengths, causal=True),
        "NATTEN 256 wide, 7 x 7": token_natten(256, 7, 7, height=tokens // 256),
        "per-head windows (reads h)": lambda b, h, q, k: (q >= k) & (q - k <= windows[h]),
    }


def measure(mask_mod, tokens: int, heads: int, repeats: int) -> dict:
    run = lambda: from_mask_mod(mask_mod, heads=heads, seq_q=tokens, seq_k=tokens,  # noqa: E731
                                block_size=BLOCK)  # fmt: skip
    layout = run()
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        run()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    bounds = tile_bounds(mask_mod, heads=heads, seq_q=tokens, seq_k=tokens, block_size=BLOCK)
    return {
        "wall_s": statistics.median(wall),
        "cpu_s": statistics.median(cpu),
        "bounded": bounds.bounded,
        "heads_evaluated": bounds.full.shape[0],
        "evaluated_blocks": bounds.evaluated_blocks,
        "partial_blocks": layout.n_partial,
        "active_blocks": layout.nnz,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=65536)
    args = parser.parse_args()
    results = {}
    for name, mask_mod in cases(args.tokens, args.heads).items():
        try:
            results[name] = found = measure(mask_mod, args.tokens, args.heads, args.repeats)
        except ValueError as error:  # past the partial-mask cap: refused, as it should be
            results[name] = {"refused": str(error)}
            print(f"{name:34} refused: {error}")
            continue
        print(f"{name:34} {found['cpu_s']:6.2f} s CPU  {found['wall_s']:6.2f} s wall  "
              f"{found['evaluated_blocks']:>8,} blocks evaluated ({found['heads_evaluated']} "
              f"head(s))  {found['partial_blocks']:>7,} partial")  # fmt: skip
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": platform.machine(),
        "cpus": len(os.sched_getaffinity(0)),
        "load_average": os.getloadavg(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "shape": {"heads": args.heads, "tokens": args.tokens, "block_size": BLOCK},
        "repeats": args.repeats,
    }
    path = RESULTS / f"{meta['date']}-mask-mod-cpu.json"
    path.write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
