"""Nsight Compute's counters for the Hopper backward: where a build's time goes, by build.

``python3 tools/probes/backward_profile.py [--case dense-b128] [--head-dim 128]
[--variants "sm90_bulk;sm90_bulk+dq_first=1"] [--out PATH]``

For each variant (a build, or a build with fields changed, as ``backward_sm90.py --with`` names
them) this runs ``ncu --clock-control none`` (METHOD.md: the clocks stay the GPU's) on a child
process that launches the case's backward twice, profiling the second launch of the main kernel:
once with the speed-of-light, warp-state, scheduler, compute and memory sections, once with the
per-instruction stall reasons (``smsp__average_warps_issue_stalled_*``) and the tensor pipes'
activity. The case is the timing sweep's (bf16, B=1, H=16, S=16384, fresh random inputs).
The JSON (default ``benchmarks/results/checks/<date>-backward-profile.json``) holds every
metric ncu printed, by variant, with the date, GPU and versions.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, uninstalled

from gpu.bench.report import environment
from tools.probes.backward_sm90 import backward_inputs, backward_of

KERNEL = "attention_bwd_hopper"
SECTIONS = ("SpeedOfLight", "WarpStateStats", "SchedulerStats", "ComputeWorkloadAnalysis",
            "MemoryWorkloadAnalysis", "Occupancy")  # fmt: skip
METRICS = ("regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio",
           "regex:sm__pipe_tensor_op_.*cycles_active\\.avg\\.pct_of_peak_sustained_active",
           "regex:sm__inst_executed_pipe_.*\\.avg\\.pct_of_peak_sustained_active")  # fmt: skip


def launch(case: str, head_dim: int, variant: str) -> None:
    """The child: the case's backward, launched twice (ncu profiles the second)."""
    x = backward_inputs(case, head_dim)
    bwd = backward_of(x.plan, variant, torch.bfloat16, head_dim)
    for _ in range(2):
        bwd.launch(x.q, x.k, x.v, x.out, x.lse, x.grad_out, None, scale=x.scale)
    torch.cuda.synchronize()


def profile(case: str, head_dim: int, variant: str, selection: list[str]) -> dict:
    """ncu's metrics of one variant for one selection of ``--section``/``--metrics`` options."""
    child = [sys.executable, __file__, "--child", "--case", case, "--head-dim", str(head_dim),
             "--variants", variant]  # fmt: skip
    command = ["ncu", "--clock-control", "none", "-k", f"regex:^{KERNEL}$", "--launch-skip", "1",
               "-c", "1", "--csv", "--page", "details", *selection, *child]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    return {"returncode": result.returncode, "metrics": parse_details(result.stdout),
            "errors": [line for line in (result.stdout + result.stderr).splitlines()
                       if "ERROR" in line or "WARN" in line][:20]}  # fmt: skip


def parse_details(output: str) -> dict[str, str]:
    """``{"section: metric": "value unit"}`` of ncu's ``--csv --page details`` output (its
    quoted rows; the program's own lines and ncu's ``==PROF==`` lines are skipped)."""
    rows = [line for line in output.splitlines() if line.startswith('"')]
    metrics = {}
    for row in csv.DictReader(rows):
        name = f"{row.get('Section Name', '')}: {row['Metric Name']}"
        metrics[name] = f"{row['Metric Value']} {row.get('Metric Unit', '')}".strip()
    return metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="dense-b128", help="a timing case's stem")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--variants", default="sm90_bulk", help="variants, by ;")
    parser.add_argument("--out", help="the JSON (default benchmarks/results/checks/...)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    variants = args.variants.split(";")
    if args.child:
        launch(args.case, args.head_dim, variants[0])
        return
    started = time.time()
    sections = [option for name in SECTIONS for option in ("--section", name)]
    metrics = ["--metrics", ",".join(METRICS)]
    results = {}
    for variant in variants:
        results[variant] = {label: profile(args.case, args.head_dim, variant, selection)
                            for label, selection in (("sections", sections),
                                                     ("stalls", metrics))}  # fmt: skip
        for label, found in results[variant].items():
            print(f"{variant} {label}: rc {found['returncode']}, {len(found['metrics'])} metrics",
                  *found["errors"][:3], sep="\n  ", flush=True)  # fmt: skip
    date = datetime.date.today().isoformat()
    out = Path(args.out or f"benchmarks/results/checks/{date}-backward-profile.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    document = {"date": date, "environment": environment(), "command": " ".join(sys.argv),
                "case": f"{args.case}-d{args.head_dim}, bf16, B=1, H=16, S=16384",
                "method": "ncu --clock-control none, second launch of the main kernel",
                "results": results, "seconds": time.time() - started}  # fmt: skip
    out.write_text(json.dumps(document, indent=1))
    print(f"wrote {out}; {time.time() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
