"""Nsight Compute's counters for our kernel and a peer's on the same case: where each one's
time goes, side by side.

``python3 tools/probes/peer_profile.py [--case dense-b128-d64] [--backward]
[--contenders fused,flex_flash] [--out PATH]``

For each contender the probe runs the timing harness on the case in a child process
(``python3 -m gpu.bench --case CASE --contenders NAME --warmup 1 --reps 2 [--backward]``, the
same inputs, masks and compiled peers as the sweeps), twice:

1. under ``torch.profiler``, to name the contender's heaviest CUDA kernel (its attention kernel:
   in a training step the backward's main kernel);
2. under ``ncu --clock-control none`` (METHOD.md: the clocks stay the GPU's), profiling the
   second launch of that kernel with the sections and the stall and pipe metrics of
   ``tools/probes/backward_profile.py``, in one run.

It prints the few numbers that say what binds each kernel (duration and clock, tensor pipe
activity, issue slots, shared memory and L2 traffic, the largest stall reasons) and writes every
metric ncu printed, by contender, to the JSON (default
``benchmarks/results/checks/<date>-peer-profile.json``) with the date, GPU and versions.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, uninstalled

from gpu.bench.report import environment
from tools.probes.backward_profile import METRICS, SECTIONS, parse_details

#: The metrics printed side by side, by a part of their name.
SUMMARY = ("Duration", "SM Frequency", "Registers Per Thread", "Achieved Occupancy",
           "pipe_tensor_op_hmma_cycles_active", "Issue Slots Busy", "Compute (SM) Throughput",
           "Memory Throughput", "L1/TEX Hit Rate", "L2 Hit Rate", "DRAM Throughput",
           "Shared Memory", "No Eligible")  # fmt: skip
STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio")


def harness_command(case: str, contender: str, backward: bool) -> list[str]:
    command = [sys.executable, "-m", "gpu.bench", "--case", case, "--contenders", contender,
               "--warmup", "1", "--reps", "2"]  # fmt: skip
    return command + (["--backward"] if backward else [])


def heaviest_kernel(case: str, contender: str, backward: bool) -> tuple[str, dict]:
    """The name of the contender's CUDA kernel with the most GPU time in a harness run."""
    child = [sys.executable, __file__, "--list-child", "--case", case, "--contenders", contender]
    child += ["--backward"] if backward else []
    result = subprocess.run(child, capture_output=True, text=True, check=False)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"no kernel list from {contender}:\n{result.stderr[-2000:]}")
    kernels = json.loads(lines[-1])
    return max(kernels, key=kernels.get), kernels


def list_kernels(case: str, contender: str, backward: bool) -> None:
    """The child: the harness run under torch.profiler; prints ``{kernel: total us}``."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from gpu.bench.__main__ import main as bench_main

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        bench_main(harness_command(case, contender, backward)[3:])
        torch.cuda.synchronize()
    totals = {e.key: e.self_device_time_total for e in prof.key_averages()}
    skip = ("elementwise", "fill", "copy", "memset", "sleep", "reduce", "gemm", "Memcpy")
    print(json.dumps({k: v for k, v in totals.items() if v and not any(s in k for s in skip)}))


def ncu_profile(case: str, contender: str, backward: bool, kernel: str, selection: list[str]):
    base = re.split(r"[(<]", kernel.removeprefix("void "), maxsplit=1)[0]  # ncu's function name
    pattern = "^" + re.escape(base[:80])
    command = ["ncu", "--clock-control", "none", "-k", f"regex:{pattern}", "--launch-skip", "1",
               "-c", "1", "--csv", "--page", "details", *selection,
               *harness_command(case, contender, backward)]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    return {"returncode": result.returncode, "metrics": parse_details(result.stdout),
            "errors": [line for line in (result.stdout + result.stderr).splitlines()
                       if "ERROR" in line or "==WARNING==" in line][:20]}  # fmt: skip


def summary(metrics: dict[str, str]) -> list[str]:
    lines = [f"  {name}: {value}" for name, value in metrics.items()
             if any(part in name for part in SUMMARY)]  # fmt: skip
    stalls = []
    for name, value in metrics.items():
        found = STALL.search(name)
        if found:
            try:
                stalls.append((float(value.split()[0]), found.group(1)))
            except ValueError:
                continue
    top = ", ".join(f"{reason} {ratio:.2f}" for ratio, reason in sorted(stalls)[::-1][:6])
    return [*lines, f"  stalls per issue: {top}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="dense-b128-d64")
    parser.add_argument("--backward", action="store_true", help="a training step's kernels")
    parser.add_argument("--contenders", default="fused,flex_flash")
    parser.add_argument("--out", help="the JSON (default benchmarks/results/checks/...)")
    parser.add_argument("--list-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.list_child:
        list_kernels(args.case, args.contenders, args.backward)
        return
    started = time.time()
    selection = [option for name in SECTIONS for option in ("--section", name)]
    selection += ["--metrics", ",".join(METRICS)]
    results = {}
    for contender in args.contenders.split(","):
        kernel, kernels = heaviest_kernel(args.case, contender, args.backward)
        print(f"{contender}: heaviest kernel {kernel[:100]} ({kernels[kernel]:.0f} us)", flush=True)
        found = {"kernel": kernel, "kernels_us": kernels}
        found["ncu"] = ncu_profile(args.case, contender, args.backward, kernel, selection)
        print(f"  ncu: rc {found['ncu']['returncode']}, {len(found['ncu']['metrics'])} metrics",
              *found["ncu"]["errors"][:3], *summary(found["ncu"]["metrics"]), sep="\n",
              flush=True)  # fmt: skip
        results[contender] = found
    date = datetime.date.today().isoformat()
    out = Path(args.out or f"benchmarks/results/checks/{date}-peer-profile.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    document = {"date": date, "environment": environment(), "command": " ".join(sys.argv),
                "case": f"{args.case}, bf16, B=1, H=16, S=16384, "
                        f"{'forward+backward' if args.backward else 'forward'}",
                "method": "ncu --clock-control none, second launch of the heaviest kernel",
                "results": results, "seconds": time.time() - started}  # fmt: skip
    out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"wrote {out}; {time.time() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
