"""The Hopper backward's grid order: a head's key tiles together, or a key tile's heads together.

``python3 tools/probes/backward_order.py [--json PATH] [--reps N]``

Bytes first. Each CTA of ``sm90.cu`` reads the Q and dO rows of every query tile its key tile
meets and adds to their dQ rows. Dense at S = 16384, D = 128 that is 8 MB of Q and dO and 8 MB of
fp32 dQ per head, for each of a head's 128 key tiles. With a key tile's (batch, kv head) pairs
together on the GPU, the 132 CTAs there at once touch 16 heads (128 MB at B = 1, H = 16), more
than the 60 MB L2, so each CTA streams its head's rows from memory: 2,048 CTAs x 16 MB is 33 GB,
8 ms at 4.25 TB/s, close to the backward's whole time. With a head's key tiles together they
share one or two heads' rows (16-32 MB) in L2. At S = 65536, B = 4 the first order touches 64
heads' 32 MB each.

Times the plan's default build and the deterministic one (``sm90_separate``) in both orders
(``HopperBackwardPlan.key_tiles_inner``), with the harness's timer (CUDA events, L2 flushed, a
spin kernel ahead, warm-up, median), on fresh random bf16 inputs: B = 1, H = 16, S = 16384 for
dense, causal, band 24 % at block 128 and band 7 % and BigBird at block 64, D = 128 and 64; and
B = 4, S = 65536 for dense and causal at D = 128. dK and dV must be bitwise equal across orders
(each CTA computes the same sums), dQ equal within fp32 rounding of its reduction order.
Effective TFLOP/s count 2.5 x the forward's useful FLOPs. Each record says which order the
build's rule (``gpu.backward.sm90.key_tiles_inner``) takes there.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, uninstalled

from gpu.backward.sm90 import group_splits, key_tiles_inner
from gpu.bench.metrics import median, tflops
from gpu.bench.report import environment
from gpu.bench.timing import CudaEventTimer
from tools.probes.backward_sm90 import backward_inputs

#: (case stem, batch, S, head dims).
CASES = [
    *((stem, 1, 16384, (128, 64)) for stem in ("dense-b128", "causal-b128", "banded_25pct-b128",
                                               "banded_7pct-b64", "bigbird_10pct-b64")),
    ("dense-b128", 4, 65536, (128,)),
    ("causal-b128", 4, 65536, (128,)),
]  # fmt: skip
BUILDS = (None, "sm90_separate")  # the default, and the deterministic build


def time_orders(stem: str, batch: int, seq: int, head_dim: int, timer, reps: int) -> list[dict]:
    inputs = backward_inputs(stem, head_dim, batch, seq)
    config, useful = inputs.config, inputs.useful
    records = []
    for build in BUILDS:
        plan = inputs.plan.backward(torch.bfloat16, head_dim, build=build)
        grads, times = {}, {}
        for inner in (False, True):
            ordered = dataclasses.replace(plan, key_tiles_inner=inner)

            def run(ordered=ordered, x=inputs):
                return ordered.launch(x.q, x.k, x.v, x.out, x.lse, x.grad_out, None,
                                      scale=x.scale)  # fmt: skip

            grads[inner] = run()
            for _ in range(2):
                run()
            times[inner] = median(timer(run, reps=reps))
        same_kv = all(
            torch.equal(a, b) for a, b in zip(grads[False][1:], grads[True][1:], strict=True)
        )
        dq_a, dq_b = (g[0].float() for g in (grads[False], grads[True]))
        dq_diff = ((dq_a - dq_b).norm() / dq_a.norm()).item()
        pairs = batch * config.heads * group_splits(plan.n_k_tiles * batch * config.heads, 1,
                                                    plan.n_sms)  # fmt: skip
        record = {"case": inputs.name, "batch": batch, "seq": seq, "build": plan.config.dq,
                  "rule_key_tiles_inner": key_tiles_inner(pairs, plan.n_sms),
                  "heads_inner_ms": times[False], "key_tiles_inner_ms": times[True],
                  "heads_inner_tflops": tflops(int(useful), times[False]),
                  "key_tiles_inner_tflops": tflops(int(useful), times[True]),
                  "speedup": times[False] / times[True], "dk_dv_bitwise_equal": same_kv,
                  "dq_rel_diff": dq_diff}  # fmt: skip
        print(f"{inputs.name:24s} B={batch} S={seq:6d} {record['build']:9s} heads inner "
              f"{times[False]:9.3f} ms ({record['heads_inner_tflops']:5.0f})  key tiles inner "
              f"{times[True]:9.3f} ms ({record['key_tiles_inner_tflops']:5.0f})  "
              f"x{record['speedup']:.3f}  dk/dv equal {same_kv}  dq diff {dq_diff:.1e}",
              flush=True)  # fmt: skip
        records.append(record)
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the records here")
    parser.add_argument("--reps", type=int, default=5, help="timed reps per order")
    args = parser.parse_args()
    started = time.time()
    timer = CudaEventTimer(torch.device("cuda"))
    records = [r for stem, batch, seq, dims in CASES for d in dims
               for r in time_orders(stem, batch, seq, d, timer, args.reps)]  # fmt: skip
    document = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "command": " ".join(sys.argv), "environment": environment(),
                "method": "CudaEventTimer median, L2 flushed, warm-up 2, fresh randn bf16 inputs",
                "records": records, "seconds": time.time() - started}  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(document, indent=1))
    print(f"{len(records)} records in {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
