"""The Hopper backward builds, checked and timed in one run: every build against fp64, then
every build on the standard cases beside cuDNN's backward.

``python3 tools/probes/backward_sm90.py [--out PATH] [--skip-timing] [--reps N] [--builds A,B]
[--with stages=3 [--with stages=3,dq_first=1 ...]]``

``--builds`` keeps only these builds; each ``--with`` adds each sm90 build kept with those
fields of ``HopperBackwardConfig`` changed (``sm90_bulk+stages=3``), checked and timed as the
others.

1. *Check.* Every build of ``gpu.backward.builds.BUILDS`` (the ``fused.cu`` kernel and the
   sm90 builds by dQ variant) on small cases (partial blocks, both causal alignments, GQA
   walked in one CTA and split over CTAs, empty rows, blocks 16-128, D 64 and 128, bf16 and
   fp16) against fp64 autograd through dense masked attention, on fresh random inputs. Per
   gradient: the relative error ‖g − ref‖ / ‖ref‖, the largest absolute error, NaNs, and the
   first tile whose own relative error is past the tolerance (query tiles of 64 rows for dq,
   key tiles of 128 for dk and dv: where a layout or pipeline bug shows first), with how many
   tiles are bad. Also whether two runs give bitwise-equal gradients. A failure (or an
   exception) is printed and the run goes on.
2. *Time.* bf16, B=1, H=16, S=16384: dense, causal, band 24 % at block 128 and band 7 % at
   block 64, D=128 and D=64. Each build's backward alone (prep, kernels, dQ conversion and GQA
   sums included) with the harness's timer (CUDA events, L2 flushed before each rep, a spin
   kernel ahead so host time stays out, warm-up, median), fresh random inputs per case, and
   cuDNN's dense or causal backward through SDPA as the anchor. Effective TFLOP/s count the
   useful backward FLOPs, 2.5 x the forward's ``4 · B · H · Sq · Sk · D · density``; executed
   TFLOP/s count what the build computes; ratios are to the ``fused`` build and to cuDNN.

The JSON (``--out``, default ``benchmarks/results/checks/<date>-backward-sm90.json``) holds
both parts with the date, GPU and versions.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, uninstalled

import gpu
from gpu.backward import sm90
from gpu.backward.builds import BUILDS, backward_build_config
from gpu.bench.cases import family_blocks, find_case
from gpu.bench.metrics import active_pairs, attention_flops, median, tflops
from gpu.bench.report import environment
from gpu.bench.timing import CudaEventTimer
from gpu.reference import dense_masked_attention

TOLERANCE = {torch.bfloat16: 2e-2, torch.float16: 5e-3}
#: (name, layout heads, Hq, Hkv, Sq, Sk, block, D, dtype, causal alignment or None, density or
#: family, empty block row): small cases covering what the kernels mask, split and bound.
CHECKS = [
    ("dense b128 D128", 1, 4, 4, 512, 512, 128, 128, torch.bfloat16, None, "dense", None),
    ("causal tl partial b64 D64", 2, 2, 2, 333, 777, 64, 64, torch.bfloat16, "top_left", 0.6, 1),
    ("causal br partial b16 D128", 2, 2, 2, 640, 384, 16, 128, torch.bfloat16, "bottom_right",
     0.6, 1),
    ("causal br Sq>Sk b32 D64 fp16", 2, 2, 2, 1000, 700, 32, 64, torch.float16, "bottom_right",
     0.7, None),
    ("gqa 16/4 b64 D128", 1, 16, 4, 512, 512, 64, 128, torch.bfloat16, None, 0.5, None),
    ("gqa 16/1 b32 D64 fp16", 16, 16, 1, 384, 512, 32, 64, torch.float16, None, 0.5, 2),
    ("bigbird b16 D64", 4, 4, 4, 1024, 1024, 16, 64, torch.bfloat16, None, "bigbird_10pct", None),
    ("band b128 D64 empty rows", 1, 4, 2, 1024, 1024, 128, 64, torch.bfloat16, None,
     "banded_25pct", 3),
]  # fmt: skip
TIMED = ("dense-b128", "causal-b128", "banded_25pct-b128", "banded_7pct-b64")


def check_layout(spec) -> tuple[str, gpu.BlockSparsePlan, tuple, torch.dtype]:
    """The plan and shapes of one check case (a fresh random layout where a density is given)."""
    name, heads, q_heads, kv_heads, seq_q, seq_k, block, dim, dtype, alignment, kind, empty = spec
    n_q, n_k = -(-seq_q // block), -(-seq_k // block)
    gen = torch.Generator().manual_seed(len(name))
    if isinstance(kind, str):
        blocks = family_blocks(kind, n_q, block)[:heads]
    else:
        blocks = torch.rand(heads, n_q, n_k, generator=gen) < kind
    if empty is not None:
        blocks[:, min(empty, n_q - 1)] = False
    the_plan = gpu.plan(blocks, block, causal=alignment is not None,
                        causal_alignment=alignment or "top_left", seq_q=seq_q, seq_k=seq_k,
                        device="cuda")  # fmt: skip
    return name, the_plan, (2, q_heads, kv_heads, seq_q, seq_k, dim), dtype


def tile_report(got: torch.Tensor, ref: torch.Tensor, rows: int, tolerance: float) -> dict:
    """Errors of one gradient ``[B, H, S, D]``: overall, per tile of ``rows`` rows, and the first
    tile past ``tolerance`` (its own relative error; tiles whose reference is ~0 by absolute
    error against the mean tile norm)."""
    got, ref = got.double(), ref.double()
    diff = got - ref
    report = {"rel": float(diff.norm() / ref.norm().clamp_min(1e-30)),
              "max_abs": float(diff.abs().max()), "nan": int(torch.isnan(got).sum())}  # fmt: skip
    batch, heads, seq, _ = ref.shape
    n_tiles = -(-seq // rows)
    pad = n_tiles * rows - seq
    tiles_diff = torch.nn.functional.pad(diff, (0, 0, 0, pad)).view(batch, heads, n_tiles, -1)
    tiles_ref = torch.nn.functional.pad(ref, (0, 0, 0, pad)).view(batch, heads, n_tiles, -1)
    floor = tiles_ref.norm(dim=-1).mean().clamp_min(1e-30)
    tile_rel = tiles_diff.norm(dim=-1) / tiles_ref.norm(dim=-1).clamp_min(floor * 1e-2)
    bad = (tile_rel > tolerance) | torch.isnan(tile_rel)
    report["bad_tiles"] = int(bad.sum())
    report["tiles"] = int(bad.numel())
    if bad.any():
        b, h, t = (int(i) for i in bad.nonzero()[0])
        report["first_bad"] = {"b": b, "h": h, "rows": [t * rows, min(seq, t * rows + rows)],
                               "rel": float(tile_rel[b, h, t])}  # fmt: skip
    return report


def variants(builds: tuple[str, ...], settings: list[str]) -> tuple[str, ...]:
    """The builds to run: ``builds`` (those this GPU runs), then each sm90 one with each of
    ``settings`` (``"stages=3,dq_first=1"``)."""
    hopper = torch.cuda.get_device_capability() == (9, 0)
    kept = tuple(b for b in builds if hopper or not b.startswith("sm90"))
    sm90_builds = [b for b in kept if b.startswith("sm90")]
    return kept + tuple(f"{b}+{fields}" for b in sm90_builds for fields in settings)


def backward_of(the_plan: gpu.BlockSparsePlan, variant: str, dtype: torch.dtype, dim: int):
    """The backward plan of ``variant``: a build's name, or ``{build}+{field}={value},...``."""
    build, _, fields = variant.partition("+")
    if not fields:
        return the_plan.backward(dtype, dim, build=build)
    config = backward_build_config(build, head_dim=dim, dtype=dtype, hopper=True,
                                   token_tiles=the_plan.n_partials > 0)  # fmt: skip
    return sm90.plan_hopper_backward(the_plan, changed(config, fields))


def changed(config: Any, fields: str) -> Any:
    """``config`` with ``fields`` (``"stages=3,dq_first=1"``: ints, 0/1 for a bool) replaced."""
    names = {field.name for field in dataclasses.fields(config)}
    changes = {}
    for field in fields.split(","):
        key, _, value = field.partition("=")
        if key not in names:  # a property or class constant is no field to replace
            raise ValueError(f"{type(config).__name__} has no field {key!r}")
        changes[key] = bool(int(value)) if isinstance(getattr(config, key), bool) else int(value)
    return dataclasses.replace(config, **changes)


def check_build(build: str, spec, min_ctas: int | None) -> dict:
    """One build on one check case: every gradient's report and whether two runs repeat;
    ``min_ctas`` (0: a CTA walks each GQA group's heads) overrides ``sm90.MIN_CTAS_PER_SM``."""
    name, the_plan, (batch, q_heads, kv_heads, seq_q, seq_k, dim), dtype = check_layout(spec)
    gen = torch.Generator(device="cuda").manual_seed(int(time.time_ns()) % (1 << 31))
    q = torch.randn(batch, q_heads, seq_q, dim, generator=gen, device="cuda", dtype=dtype)
    k, v = (torch.randn(batch, kv_heads, seq_k, dim, generator=gen, device="cuda", dtype=dtype)
            for _ in range(2))  # fmt: skip
    grad_out = torch.randn(q.shape, generator=gen, device="cuda", dtype=dtype)
    scale = dim**-0.5
    out, lse = gpu.block_sparse_attention(q, k, v, the_plan, scale=scale, return_lse=True)
    bwd = backward_of(the_plan, build, dtype, dim)
    saved = sm90.MIN_CTAS_PER_SM
    if min_ctas is not None:
        sm90.MIN_CTAS_PER_SM = min_ctas
    try:
        runs = [bwd.launch(q, k, v, out, lse, grad_out, None, scale=scale) for _ in range(2)]
    finally:
        sm90.MIN_CTAS_PER_SM = saved
    leaves = [x.double().requires_grad_() for x in (q, k, v)]
    ref_out = dense_masked_attention(
        *leaves, the_plan.blocks, the_plan.block_size, causal=the_plan.causal,
        causal_alignment=the_plan.causal_alignment, scale=scale,
    )  # fmt: skip
    expected = torch.autograd.grad(ref_out, leaves, grad_out.double())
    repeats = all(torch.equal(a, b) for a, b in zip(*runs, strict=True))
    record = {"case": name, "build": build, "gqa_walk": min_ctas == 0, "repeat_bitwise": repeats}
    tolerance = TOLERANCE[dtype]
    for label, got, ref, rows in zip(("dq", "dk", "dv"), runs[0], expected, (64, 128, 128),
                                     strict=True):  # fmt: skip
        record[label] = tile_report(got, ref, rows, tolerance)
    record["ok"] = all(record[g]["rel"] <= tolerance and record[g]["nan"] == 0
                       for g in ("dq", "dk", "dv"))  # fmt: skip
    return record


def print_check(record: dict) -> None:
    parts = []
    for g in ("dq", "dk", "dv"):
        r = record[g]
        text = f"{g} {r['rel']:.1e} (max {r['max_abs']:.1e}"
        text += f", {r['nan']} NaN" if r["nan"] else ""
        if "first_bad" in r:
            f = r["first_bad"]
            text += (f", {r['bad_tiles']}/{r['tiles']} bad tiles, first b{f['b']} h{f['h']} rows "
                     f"{f['rows'][0]}-{f['rows'][1]} at {f['rel']:.1e}")  # fmt: skip
        parts.append(text + ")")
    walk = " walk" if record["gqa_walk"] else ""
    print(f"{'ok  ' if record['ok'] else 'FAIL'} {record['build']:28s}{walk:5s} "
          f"{record['case']:30s} {' '.join(parts)} repeat={record['repeat_bitwise']}",
          flush=True)  # fmt: skip


def run_checks(builds: tuple[str, ...]) -> list[dict]:
    records = []
    for build in builds:
        for spec in CHECKS:
            walks = (None, 0) if build != "fused" and spec[2] != spec[3] else (None,)
            for walk in walks:
                try:
                    record = check_build(build, spec, walk)
                except Exception as error:  # report and go on: one run says everything
                    record = {"case": spec[0], "build": build, "ok": False,
                              "error": f"{type(error).__name__}: {error}"}  # fmt: skip
                    print(f"FAIL {build:28s} {spec[0]:30s} raised {record['error']}", flush=True)
                    traceback.print_exc(limit=3)
                else:
                    print_check(record)
                records.append(record)
    return records


def cudnn_backward(q, k, v, grad_out, causal: bool):
    """A callable running cuDNN's SDPA backward on a forward kept for it (None if unusable)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    leaves = [x.detach().requires_grad_() for x in (q, k, v)]
    try:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            out = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal)
        torch.autograd.grad(out, leaves, grad_out, retain_graph=True)
    except Exception as error:
        print(f"cudnn unavailable: {type(error).__name__}: {error}", flush=True)
        return None
    return lambda: torch.autograd.grad(out, leaves, grad_out, retain_graph=True)


@dataclass
class BackwardInputs:
    """What timing a standard case's backward alone starts from: its plan, fresh random bf16
    q, k, v and dO, the forward's out and lse, and the backward's useful FLOPs."""

    name: str
    config: Any
    plan: Any
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    grad_out: torch.Tensor
    out: torch.Tensor
    lse: torch.Tensor
    scale: float
    useful: float


def backward_inputs(stem: str, head_dim: int, batch: int = 1, seq: int | None = None):
    """``BackwardInputs`` of case ``{stem}-d{head_dim}`` at ``batch`` and ``seq`` tokens."""
    case = find_case(f"{stem}-d{head_dim}")
    config, layout = case.config(seq_len=seq), case.layout(seq_len=seq)
    gen = torch.Generator(device="cuda").manual_seed(int(time.time_ns()) % (1 << 31))
    shape = (batch, config.heads, config.seq_q, head_dim)
    q, k, v, grad_out = (torch.randn(shape, generator=gen, device="cuda", dtype=torch.bfloat16)
                         for _ in range(4))  # fmt: skip
    the_plan = gpu.plan(layout, causal=config.causal, device="cuda")
    scale = head_dim**-0.5
    out, lse = gpu.block_sparse_attention(q, k, v, the_plan, scale=scale, return_lse=True)
    pairs = active_pairs(layout.blocks, layout.block_size, causal=config.causal)
    pairs *= config.heads if layout.blocks.shape[0] == 1 else 1  # one layout head for all
    useful = 2.5 * attention_flops(batch, head_dim, pairs)
    return BackwardInputs(case.name, config, the_plan, q, k, v, grad_out, out, lse, scale, useful)


def time_case(
    stem: str, head_dim: int, timer: CudaEventTimer, reps: int, builds: tuple[str, ...]
) -> list[dict]:
    x = backward_inputs(stem, head_dim)
    runs = {}
    for build in builds:
        try:
            bwd = backward_of(x.plan, build, torch.bfloat16, head_dim)
        except Exception as error:
            print(f"{x.name:24s} {build:28s} failed to build: {error}", flush=True)
            continue
        runs[build] = (bwd, lambda bwd=bwd: bwd.launch(x.q, x.k, x.v, x.out, x.lse, x.grad_out,
                                                       None, scale=x.scale))  # fmt: skip
    if stem in ("dense-b128", "causal-b128"):
        anchor = cudnn_backward(x.q, x.k, x.v, x.grad_out, x.config.causal)
        if anchor is not None:
            runs["cudnn_sdpa"] = (None, anchor)
    records = []
    for name, (bwd, run) in runs.items():
        try:
            for _ in range(3):
                run()
            ms = median(timer(run, reps=reps))
        except Exception as error:
            print(f"{x.name:24s} {name:28s} raised {type(error).__name__}: {error}", flush=True)
            continue
        executed = None if bwd is None else tflops(bwd.flops(1, x.config.heads), ms)
        records.append({"case": x.name, "build": name, "ms": ms,
                        "tflops": tflops(int(x.useful), ms),
                        "executed_tflops": executed})  # fmt: skip
    base = {r["build"]: r["ms"] for r in records}
    for r in records:
        r["vs_fused"] = base["fused"] / r["ms"] if "fused" in base else None
        r["vs_cudnn"] = base["cudnn_sdpa"] / r["ms"] if "cudnn_sdpa" in base else None
        print(f"{r['case']:24s} {r['build']:28s} {r['ms']:8.3f} ms {r['tflops']:6.1f} eff"
              + (f" {r['executed_tflops']:6.1f} exec" if r["executed_tflops"] else " " * 12)
              + f" TFLOP/s  x{r['vs_fused'] or 0:.2f} fused"
              + (f"  x{r['vs_cudnn']:.2f} cudnn" if r["vs_cudnn"] else ""), flush=True)  # fmt: skip
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="the JSON (default benchmarks/results/checks/<date>-...)")
    parser.add_argument("--skip-timing", action="store_true", help="only the checks")
    parser.add_argument("--reps", type=int, default=10, help="timed reps per build and case")
    parser.add_argument("--builds", default=",".join(BUILDS), help="builds to keep, by name")
    parser.add_argument(
        "--with",
        dest="settings",
        action="append",
        default=[],
        help="config fields to add each sm90 build with: stages=3,dq_first=1",
    )
    args = parser.parse_args()
    builds = variants(tuple(args.builds.split(",")), args.settings)
    started = time.time()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    print("== check: every build against fp64 ==", flush=True)
    checks = run_checks(builds)
    print(f"checks: {sum(r['ok'] for r in checks)}/{len(checks)} ok, "
          f"{time.time() - started:.0f} s", flush=True)  # fmt: skip
    timings = []
    if not args.skip_timing:
        print("== time: bf16 B=1 H=16 S=16384, backward alone ==", flush=True)
        timer = CudaEventTimer(torch.device("cuda"))
        timings = [r for d in (128, 64) for stem in TIMED
                   for r in time_case(stem, d, timer, args.reps, builds)]  # fmt: skip
    date = datetime.date.today().isoformat()
    out = Path(args.out or f"benchmarks/results/checks/{date}-backward-sm90.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    document = {"date": date, "environment": environment(), "command": " ".join(sys.argv),
                "method": "fp64 autograd check; CudaEventTimer median, L2 flushed, warm-up 3",
                "checks": checks, "timings": timings, "seconds": time.time() - started}  # fmt: skip
    out.write_text(json.dumps(document, indent=1))
    failed = [f"{r['build']} {r['case']}" for r in checks if not r["ok"]]
    print(f"wrote {out}; {len(failed)} failed checks" + (f": {failed}" if failed else ""),
          f"; {time.time() - started:.0f} s", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
