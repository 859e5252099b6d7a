"""Why a training step's forward runs slower than the same forward for inference: one case's
forward, timed four ways in one run.

``python3 tools/probes/training_forward.py [--case dense-b128-d64,...] [--reps 20] [--out PATH]``

For each case (bf16, B=1, H=16, S=16384, fresh random inputs) the public call
``gpu.block_sparse_attention(q, k, v, plan)``:

- ``inference``: inputs that need no gradient (the kernel launched directly);
- ``training``: inputs that require grad (through the autograd custom op, saving what the
  backward needs), as the training-step harness times it;
- ``training_lse``: the kernel launched directly as in ``inference``, but writing the
  logsumexp too, as the custom op does;
- ``training_long_lead``: as ``training`` with a spin kernel 4x longer ahead of the start
  event, so that host time per call up to ~4 ms stays out of the measurement.

Each with the harness's timer (CUDA events, L2 flushed, a spin kernel ahead, warm-up, median),
plus the host's wall time per call (launch to return, no synchronisation). The JSON (default
``benchmarks/results/checks/<date>-training-forward.json``) holds it all with the environment.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, uninstalled

import gpu
from gpu.bench import timing
from gpu.bench.metrics import median, tflops
from gpu.bench.report import environment
from gpu.bench.timing import CudaEventTimer
from gpu.ops import fused_forward
from tools.probes.backward_sm90 import backward_inputs


def host_ms(call, reps: int) -> float:
    """Median host wall time of ``call`` (no synchronisation inside)."""
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return median(times)


def time_case(name: str, reps: int) -> dict:
    stem, _, head_dim = name.rpartition("-d")
    x = backward_inputs(stem, int(head_dim))
    leaves = [t.detach().requires_grad_() for t in (x.q, x.k, x.v)]
    lse = x.q.new_empty(x.q.shape[:3], dtype=torch.float32)
    calls = {
        "inference": lambda: gpu.block_sparse_attention(x.q, x.k, x.v, x.plan, scale=x.scale),
        "training": lambda: gpu.block_sparse_attention(*leaves, x.plan, scale=x.scale),
        "training_lse": lambda: fused_forward(x.plan, x.q, x.k, x.v, x.scale, None, lse),
    }
    flops = x.useful / 2.5  # the forward's
    timer = CudaEventTimer(torch.device("cuda"))
    record = {"case": name, "flops": flops, "ways": {}}
    for way, call in calls.items():
        timer(call, reps=3)  # warm-up (compiles)
        times = timer(call, reps=reps)
        record["ways"][way] = {"ms": median(times), "times_ms": times,
                               "tflops": tflops(flops, median(times)),
                               "host_ms": host_ms(call, reps)}  # fmt: skip
    long_lead = CudaEventTimer(torch.device("cuda"), lead_cycles=4 * timing.HOST_LEAD_CYCLES)
    times = long_lead(calls["training"], reps=reps)
    record["ways"]["training_long_lead"] = {"ms": median(times), "times_ms": times,
                                            "tflops": tflops(flops, median(times))}  # fmt: skip
    for way, r in record["ways"].items():
        host = f", host {r['host_ms']:.3f} ms" if "host_ms" in r else ""
        print(f"{name:22s} {way:20s} {r['ms']:7.3f} ms {r['tflops']:6.1f} TFLOP/s{host}",
              flush=True)  # fmt: skip
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="dense-b128-d64,dense-b128-d128")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--out", help="the JSON (default benchmarks/results/checks/...)")
    args = parser.parse_args()
    today = datetime.date.today().isoformat()
    out = Path(args.out or f"benchmarks/results/checks/{today}-training-forward.json")
    command = "python3 tools/probes/training_forward.py " + " ".join(sys.argv[1:])
    records = [time_case(name, args.reps) for name in args.case.split(",")]
    result = {"date": today, "environment": environment(), "command": command, "cases": records}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
