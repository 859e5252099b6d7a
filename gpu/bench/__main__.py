"""``python -m gpu.bench``: time our kernels against SDPA, FlexAttention and cuDNN's block-sparse
attention, print, write JSON.

Examples::

    python -m gpu.bench --case banded_7pct-b128-d64,dense-b16-d128
    python -m gpu.bench --design my_layout.pt --head-dim 128 --out results.json
    python -m gpu.bench --long-context 128K --backward --out results-128k.json
    python -m gpu.bench --sweep standard --out benchmarks/results/2026-11-29-h200.json
    python -m gpu.bench --sweep standard --quick
    python -m gpu.bench --sweep standard --seq 4096 --out results-s4096.json
    python -m gpu.bench --sweep standard --seq 65536 --batch 4 --out results-s65536-b4.json
    python -m gpu.bench --sweep standard --backward --out results-backward.json \
        --resume --time-limit 540

``--seq`` runs the standard cases at another sequence length (the JSON records S and B in each
case's config); a case whose layout cannot be built at that length is skipped with the reason.
``--backward`` times one training step's attention (forward, then backward with a fixed random
output gradient) for the contenders with a backward pass, and adds the forward and the backward
alone and the errors of dq, dk and dv against fp64 to the table.

Without a CUDA GPU the command says so at once and stops, unless only contenders that run on
the CPU were asked for (``--contenders reference,sdpa``); ``--cpu-check`` then checks our
reference against fp64 on the top-left 1024 tokens of a case or design (the panel's CPU check)
in seconds::

    python -m gpu.bench --cpu-check
    python -m gpu.bench --cpu-check --design my_layout.pt

``--resume`` keeps the cases already in ``--out`` (measured on the same GPU and software with
the same settings) and runs the others, so one sweep can be split over several processes: the
file lists each run under ``runs``. ``--time-limit`` starts no case that, timed like the
longest case so far, would end past that many seconds; run the same command again to go on.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import time
from pathlib import Path

import torch

from designer.design import Design
from designer.formats import load_design
from gpu.bench.cases import (
    LONG_CONTEXT_BACKWARD_CONTENDERS,
    LONG_CONTEXT_BLOCKS,
    LONG_CONTEXT_CONTENDERS,
    find_case,
    long_context_design,
    standard_cases,
)
from gpu.bench.config import (
    BACKWARD_CONTENDERS,
    CONTENDERS,
    DEFAULT_BACKWARD_CONTENDERS,
    DEFAULT_CONTENDERS,
    BenchConfig,
)
from gpu.bench.details import cpu_check, cpu_check_text, summarize_cpu_check
from gpu.bench.harness import BenchSession, run_benchmark
from gpu.bench.report import environment, format_table, write_json
from gpu.bench.results import read_document
from gpu.runtime import unavailable_reason
from gpu.support import DTYPES

#: Contenders that run on a machine without a CUDA GPU.
CPU_CONTENDERS = ("reference", "sdpa")
#: What ``--cpu-check`` checks when given no case or design.
CPU_CHECK_CASE = "bigbird_10pct-b64-d64"


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    arguments = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(arguments)
    if args.list:
        print("\n".join(case.name for case in standard_cases()))
        return 0
    if args.cpu_check:
        return _cpu_check(parser, args)
    if not (args.case or args.design or args.sweep or args.long_context):
        parser.error("give --case, --design, --long-context, --sweep, --list or --cpu-check")
    try:
        jobs, skipped = _jobs(args)
        earlier = _earlier(args, jobs)
    except (ValueError, TypeError) as error:  # a bad case name, design file or option value
        parser.error(str(error))
    _refuse_without_gpu(parser, args)  # after the arguments are checked: they are cheap to check
    for reason in skipped:
        print(f"skipped {reason}", flush=True)
    if earlier is not None:
        done = {case["case"] for case in earlier["cases"]}
        jobs = [job for job in jobs if job[0] not in done]
        print(f"resuming {args.out}: {len(done)} cases there, {len(jobs)} to run", flush=True)
        if not jobs:
            return 0
    command = "python -m gpu.bench " + " ".join(map(shlex.quote, arguments))
    session = BenchSession(torch.device("cuda" if torch.cuda.is_available() else "cpu"),
                           flush_l2=not args.no_flush)  # fmt: skip
    results, longest = [], 0.0
    started = time.perf_counter()
    for i, (name, config, layout) in enumerate(jobs, 1):
        elapsed = time.perf_counter() - started
        if args.time_limit and results and elapsed + longest > args.time_limit:
            print(f"time limit: stopped after {len(results)} of {len(jobs)} cases at {elapsed:.0f} "
                  f"s (a case took up to {longest:.0f} s); run the same command with --resume "
                  f"for the other {len(jobs) - len(results)}", flush=True)  # fmt: skip
            break
        print(f"[{i}/{len(jobs)}] {name} ({elapsed:.0f} s)", flush=True)
        results.append(run_benchmark(config, layout, name=name, session=session))
        longest = max(longest, time.perf_counter() - started - elapsed)
        if args.out:  # keep what is done if a later case takes the process down
            write_json(results, args.out, skipped=skipped, command=command, earlier=earlier)
    print(format_table(results))
    print(f"\n{len(results)} cases in {time.perf_counter() - started:.0f} s")
    if skipped:
        print(f"{len(skipped)} skipped: " + "; ".join(skipped))
    return 0


def _refuse_without_gpu(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Stop at once, saying why and what runs here instead, when there is no CUDA GPU and a
    contender asked for (or by default) needs one."""
    if torch.cuda.is_available():
        return
    try:  # a bad case name is said first
        for name in args.case.split(",") if args.case else ():
            find_case(name)
    except ValueError as error:
        parser.error(str(error))
    defaults = DEFAULT_BACKWARD_CONTENDERS if args.backward else DEFAULT_CONTENDERS
    asked = args.contenders.split(",") if args.contenders else defaults
    needing = [name for name in asked if name not in CPU_CONTENDERS]
    if not needing:
        return
    why = unavailable_reason() or "torch sees no CUDA device"
    parser.exit(
        2,
        f"The GPU benchmark cannot run here: {why}\n"
        f"{', '.join(needing)} need one. On this machine:\n"
        "  python -m gpu.bench --cpu-check [--case NAME | --design FILE]   checks our reference "
        "against fp64 on a 1024-token crop in seconds\n"
        f"  --contenders {','.join(CPU_CONTENDERS)}   times those on the CPU (slow at full size)\n",
    )


def _cpu_check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``--cpu-check``: the panel's CPU check of one case or design, printed (and written)."""
    if args.sweep:
        parser.error("--cpu-check checks one case or design, not --sweep")
    try:
        if args.design:
            design = load_design(args.design)
            head_dim = args.head_dim or design.model_shape.head_dim
        else:
            name = args.case or CPU_CHECK_CASE
            if "," in name:
                raise ValueError(f"--cpu-check checks one case, got {name!r}")
            case = find_case(name)
            config = case.config(quick=True, backward=args.backward, seq_len=None)
            layout = case.layout(quick=True, seq_len=None)
            design = Design(layout, name=case.name, causal=config.causal)
            head_dim = args.head_dim or config.head_dim
    except (ValueError, TypeError) as error:
        parser.error(str(error))
    print(f"CPU check of {design.name}…", flush=True)
    doc = cpu_check(design, head_dim=head_dim, dtype=args.dtype or "bf16", backward=args.backward)
    summary = summarize_cpu_check(doc, design.layout.density)
    print(cpu_check_text(summary))
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1))
    return 0 if summary.passed else 1


#: What a resumed file and this run must share: the machine and the software.
SAME_ENVIRONMENT = ("gpu", "torch", "cuda_runtime", "cupy", "triton", "driver")


def _earlier(args: argparse.Namespace, jobs: list) -> dict | None:
    """The document ``--resume`` continues (None without ``--resume`` or before the file
    exists), after checking that its cases were measured like this run's would be."""
    if not args.resume:
        return None
    if not args.out:
        raise ValueError("--resume continues the file of --out: give --out")
    path = Path(args.out)
    if not path.exists():
        return None
    earlier = read_document(path.read_bytes(), path.name)
    here = environment()
    for key in SAME_ENVIRONMENT:
        if earlier["environment"].get(key) != here.get(key):
            raise ValueError(
                f"--resume: {path.name} was measured with {key} "
                f"{earlier['environment'].get(key)!r}, this machine has {here.get(key)!r}"
            )
    configs = {name: json.loads(json.dumps(dataclasses.asdict(config))) for name, config, _ in jobs}
    for case in earlier["cases"]:
        wanted, had = configs.get(case["case"]), case["config"]
        if wanted is not None and wanted != had:
            changed = sorted(key for key in wanted if wanted[key] != had.get(key))
            there = ", ".join(f"{key} {had.get(key)!r}" for key in changed)
            asked = ", ".join(f"{key} {wanted[key]!r}" for key in changed)
            raise ValueError(
                f"--resume: {path.name} measured {case['case']} with {there}; this run asks "
                f"for {asked}"
            )
    return earlier


def _jobs(args: argparse.Namespace) -> tuple[list, list[str]]:
    """``([(name, config, layout)], [why each skipped case was skipped])``."""
    if args.sweep or args.case:
        cases = standard_cases() if args.sweep else [find_case(n) for n in args.case.split(",")]
        jobs, skipped = [], []
        for case in cases:
            config = case.config(quick=args.quick, backward=args.backward, seq_len=args.seq)
            try:
                layout = case.layout(quick=args.quick, seq_len=args.seq)
            except ValueError as error:  # past the layout size limit at this length
                skipped.append(str(error))
                continue
            jobs.append((case.name, _override(config, args), layout))
        if not jobs:
            raise ValueError("no case can be built: " + "; ".join(skipped))
        return jobs, skipped
    if args.seq is not None:
        raise ValueError("--seq sets the length of --case and --sweep; a design has its own")
    if args.design or args.long_context:
        if args.design:
            design = load_design(args.design)
        else:
            design = long_context_design(args.long_context)
            if not args.contenders:
                backward = args.backward
                chosen = LONG_CONTEXT_BACKWARD_CONTENDERS if backward else LONG_CONTEXT_CONTENDERS
                args.contenders = ",".join(chosen)
        layout, shape = design.layout, design.model_shape
        config = BenchConfig(
            batch=shape.batch,
            heads=args.heads or shape.heads or layout.n_heads,
            seq_q=layout.seq_len_q,
            seq_k=layout.seq_len_k,
            head_dim=args.head_dim or shape.head_dim,
            causal=design.causal,
            start_width=design.start_width,
            backward=args.backward,
        )
        return [(design.name, _override(config, args), layout)], []
    raise ValueError("give --case, --design, --long-context or --sweep")


def _override(config: BenchConfig, args: argparse.Namespace) -> BenchConfig:
    changes = {
        "contenders": tuple(args.contenders.split(",")) if args.contenders else None,
        "warmup": args.warmup,
        "reps": args.reps,
        "flush_l2": False if args.no_flush else None,
        "batch": args.batch,
        "dtype": args.dtype,
        "device": None if torch.cuda.is_available() else "cpu",
    }
    return dataclasses.replace(config, **{k: v for k, v in changes.items() if v is not None})


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gpu.bench",
        description="Time block-sparse attention (ours fused and SDD, FlexAttention on Triton "
        "and on FlashAttention-4 in its fastest accurate variant, cuDNN's block-sparse "
        "attention, dense SDPA) on one layout or the standard sweep; print a table and write "
        "JSON.",
    )
    what = parser.add_mutually_exclusive_group()
    what.add_argument(
        "--case", help="standard cases, comma-separated, e.g. banded_7pct-b128-d64 (see --list)"
    )
    what.add_argument("--design", help="a .pt design file saved by the app")
    what.add_argument(
        "--long-context",
        choices=list(LONG_CONTEXT_BLOCKS),
        help="the long-context design of benchmarks/long_context.py (32 heads, a 4K-token causal "
        "window plus a sink, blocks of 64) held as row runs, B=1, D=128",
    )
    what.add_argument("--sweep", choices=["standard"], help="every standard case")
    what.add_argument("--list", action="store_true", help="list the standard cases")
    parser.add_argument(
        "--cpu-check",
        action="store_true",
        help="without a GPU: check our reference against fp64 on the top-left 1024 tokens of "
        f"--case or --design (default {CPU_CHECK_CASE}), in seconds",
    )
    parser.add_argument("--out", help="write the results as JSON to this path")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the cases already in --out and run the others (same GPU, software, settings)",
    )
    parser.add_argument(
        "--time-limit",
        type=float,
        metavar="SECONDS",
        help="start no case that would end past this many seconds (judged by the longest so far)",
    )
    parser.add_argument("--quick", action="store_true", help="S=4096 and few reps (smoke test)")
    parser.add_argument(
        "--seq",
        type=int,
        help="sequence length S of --case and --sweep, a multiple of 128 (default 16384; 4096 "
        "with --quick), e.g. 4096, or 65536 with --batch 4",
    )
    parser.add_argument("--contenders", help=f"comma-separated subset of {','.join(CONTENDERS)}")
    parser.add_argument(
        "--head-dim", type=int, help="head dim for --design (default: the design's model shape)"
    )
    parser.add_argument(
        "--heads", type=int, help="heads for --design (default: the design's model shape)"
    )
    parser.add_argument("--batch", type=int, help="batch size (--design: its model shape's)")
    parser.add_argument("--dtype", choices=list(DTYPES), help="input dtype (default bf16)")
    parser.add_argument("--warmup", type=int, help="untimed runs before timing")
    parser.add_argument("--reps", type=int, help="timed runs (the median is reported)")
    parser.add_argument("--no-flush", action="store_true", help="do not flush L2 between reps")
    parser.add_argument(
        "--backward",
        action="store_true",
        help="time forward+backward (a training step) of the contenders with a backward pass: "
        f"{','.join(BACKWARD_CONTENDERS)}",
    )
    return parser


if __name__ == "__main__":
    sys.exit(main())
