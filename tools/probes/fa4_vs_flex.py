"""Is FlashAttention-4's own call (``fa4``) faster than FlexAttention's FLASH backend
(``flex_flash``), which runs the same kernels through a BlockMask and a generated ``mask_mod``?

Both run in one process through the harness (same inputs, same fp64 check before timing, same
timer) on the standard cases FA4's own call runs (``gpu/bench/fa4.py``): dense (no block lists
against Flex's all-full lists) and causal (FA4's causal mode against Flex's ``q_idx >= kv_idx``),
at D=128 and 64. For each case it prints both times and ``fa4``'s speedup; ``fa4`` belongs among the
default contenders if it is faster beyond ``NOISE`` on any case.

    python tools/probes/fa4_vs_flex.py --out benchmarks/results/checks/<date>-h200-fa4-vs-flex.json
    python tools/probes/fa4_vs_flex.py --backward --out .../<date>-h200-fa4-vs-flex-backward.json
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from gpu.bench import BenchSession, document, format_table, run_benchmark
from gpu.bench.cases import find_case
from gpu.bench.harness import BenchResult
from gpu.bench.results import document_bytes

CASES = ("dense-b128-d128", "causal-b128-d128", "dense-b128-d64", "causal-b128-d64")
#: Differences within this fraction are run-to-run noise (medians of one process repeat to 1-2 %).
NOISE = 0.03


def comparison(results: Sequence[BenchResult]) -> dict:
    """Per case ``flex_flash`` and ``fa4`` times and ``fa4``'s speedup, and the verdict."""
    rows = []
    for result in results:
        flash, fa4 = result.result("flex_flash"), result.result("fa4")
        times = {name: r.ms if r is not None and r.status == "ok" else None
                 for name, r in (("flex_flash", flash), ("fa4", fa4))}  # fmt: skip
        both = times["flex_flash"] is not None and times["fa4"] is not None
        rows.append({
            "case": result.case,
            "flex_flash_ms": times["flex_flash"],
            "fa4_ms": times["fa4"],
            "fa4_speedup": times["flex_flash"] / times["fa4"] if both else None,
            "why_not": "; ".join(f"{r.name}: {r.message}" for r in (flash, fa4)
                                 if r is not None and r.status != "ok"),
        })  # fmt: skip
    faster = [r["case"] for r in rows if r["fa4_speedup"] and r["fa4_speedup"] > 1 + NOISE]
    verdict = (
        f"fa4 is faster than flex_flash beyond {NOISE:.0%} on {', '.join(faster)}: add it to "
        "the default contenders"
        if faster
        else f"fa4 is nowhere faster than flex_flash beyond {NOISE:.0%}: keep it out"
    )
    return {"noise": NOISE, "rows": rows, "fa4_faster_on": faster, "verdict": verdict}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default=",".join(CASES), help="standard cases, comma-separated")
    parser.add_argument("--backward", action="store_true", help="time training steps")
    parser.add_argument("--seq", type=int, help="sequence length (default 16384)")
    parser.add_argument("--out", help="write the harness's JSON with the comparison here")
    args = parser.parse_args(argv)
    session = BenchSession(torch.device("cuda"))
    results = []
    for name in args.case.split(","):
        case = find_case(name)
        config = dataclasses.replace(case.config(backward=args.backward, seq_len=args.seq),
                                     contenders=("flex_flash", "fa4"))  # fmt: skip
        print(f"{name} ...", flush=True)
        results.append(run_benchmark(config, case.layout(seq_len=args.seq), name=name,
                                     session=session))  # fmt: skip
    print(format_table(results))
    verdict = comparison(results)
    for row in verdict["rows"]:
        speedup = f"{row['fa4_speedup']:.3f}x" if row["fa4_speedup"] else row["why_not"]
        print(f"{row['case']}: flex_flash {row['flex_flash_ms']} ms, fa4 {row['fa4_ms']} ms, "
              f"fa4 {speedup}")  # fmt: skip
    print(verdict["verdict"])
    if args.out:
        doc = document(results)
        doc["comparison"] = verdict
        Path(args.out).write_bytes(document_bytes(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
