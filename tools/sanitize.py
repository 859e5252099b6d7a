"""Run NVIDIA compute-sanitizer over small calls of our kernels, one case per process; record it.

Each case is one small call through the public API, checked against the fp64 reference on the
CPU (so a call that runs clean but computes wrong fails too): the fused forward
(``gpu.block_sparse_attention(q, k, v, plan)``, with the logsumexp), the fused backward (autograd
through the same call) and the SDD pipeline (``impl="sdd"``). Together they cover both dtypes and
head dims, layout blocks 16 and 64, causal in both alignments, partial last blocks, Sq != Sk,
GQA and MQA, one layout head shared by every query head, ``[B, S, H, D]`` memory read in place,
a query row with no key, an empty layout, more work units than a persistent grid's CTAs, every
forward build a plan chooses from on Hopper (``gpu.forward.builds.hopper_builds``, without and
with partial blocks) and every backward build (``gpu.backward.builds.BUILDS``), token-level
masks (partial tiles) forward and backward, and on Hopper the ``mma.sync`` path beside the
Hopper kernels (the plan is told the GPU is not Hopper).

The script first runs every case once without a sanitizer (which fills the NVRTC cubin cache of
``gpu/runtime.py``, so nothing compiles under the sanitizer, and checks that the cases pass),
then re-invokes itself once per tool and case::

    compute-sanitizer --tool TOOL --error-exitcode 1 [--kernel-name kns=...] \\
        python3 tools/sanitize.py --child --cases CASE

with PyTorch's caching allocator off (``PYTORCH_NO_CUDA_MEMORY_CACHING=1``: each tensor is its
own allocation, so memcheck sees a read past its end). memcheck, racecheck and synccheck check
only our kernels (``--kernel-name``); initcheck checks every kernel, since it must see the
writes that initialise our inputs. A run passes when the sanitizer's summary (``ERROR SUMMARY:
0 errors``; racecheck: ``RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)``) counts
nothing, the process exits 0 and the case's result is right. The JSON (default
``benchmarks/results/checks/<date>-<gpu>-sanitizer.json``) holds the environment, the
compute-sanitizer version, and per tool and case the counts, the verdict, the seconds and, on
failure, the output's tail. From the repository root::

    export PYTHONPATH=.
    python3 tools/sanitize.py                      # memcheck and racecheck, every case
    python3 tools/sanitize.py --quick --tools all  # 3 cases, all four tools
    python3 tools/sanitize.py --tools memcheck --cases bwd-bf16-d128-b64-s512-causal-gqa4:2

Exit status 0 when every run passed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import traceback
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import torch

import gpu
from gpu.backward.builds import BUILD_ENV
from gpu.bench.metrics import errors
from gpu.bench.report import environment
from gpu.partials import split_token_mask
from gpu.reference import dense_masked_attention, dense_masked_attention_backward
from gpu.support import DTYPES

SCRIPT = Path(__file__).resolve()
ROOT = SCRIPT.parents[1]
TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
DEFAULT_TOOLS = ("memcheck", "racecheck")
#: Our kernels' names (extern "C", so unmangled): what the sanitizer instruments.
KERNEL_NAMES = ("fused_attention_fwd", "attention_bwd", "sdd_")
#: Tools that must see every kernel: initcheck tracks the writes of the kernels that fill inputs.
UNFILTERED_TOOLS = ("initcheck",)
#: Largest ‖got − ref‖ / ‖ref‖ accepted (as tests/gpu/test_backward_gpu.py).
TOLERANCE = {torch.bfloat16: 2e-2, torch.float16: 5e-3}
TAIL_LINES = 40
RESULTS = ROOT / "benchmarks" / "results" / "checks"


@dataclasses.dataclass(frozen=True)
class Case:
    """One small call: which path, dtype, head dim, layout block and lengths, and the options."""

    kind: str  # "forward", "backward" (autograd through impl="fused") or "sdd"
    dtype: str
    head_dim: int
    block: int
    seq_q: int
    seq_k: int
    q_heads: int = 2
    kv_heads: int = 2
    causal: bool = False
    alignment: str = "top_left"
    bshd: bool = False  # q, k, v as [B, S, H, D] memory viewed as [B, H, S, D]
    shared_layout: bool = False  # one layout head for every query head
    mma_sync: bool = False  # the mma.sync path even on Hopper
    empty: bool = False  # no active block: every output row zero
    dense: bool = False  # every block active (but the first query row's): the widest tiles
    token_window: int = 0  # > 0: a token-level band |q - k| < token_window, with partial tiles
    backward_build: str | None = None  # the backward build (default: the one the plan picks)

    @property
    def name(self) -> str:
        kind = {"forward": "fwd", "backward": "bwd", "sdd": "sdd"}[self.kind]
        seq = f"s{self.seq_q}" if self.seq_q == self.seq_k else f"s{self.seq_q}x{self.seq_k}"
        parts = [kind, self.dtype, f"d{self.head_dim}", f"b{self.block}", seq]
        if self.causal:
            parts.append("causal" if self.alignment == "top_left" else "causal_br")
        if self.kv_heads != self.q_heads:
            parts.append(f"gqa{self.q_heads}:{self.kv_heads}")
        flags = (("bshd", self.bshd), ("shared", self.shared_layout), ("mma", self.mma_sync),
                 ("empty", self.empty), ("dense", self.dense))  # fmt: skip
        parts += [flag for flag, on in flags if on]
        if self.token_window:
            parts.append(f"tokens{self.token_window}")
        if self.backward_build:
            parts.append(self.backward_build)
        return "-".join(parts)


CASES = (
    Case("forward", "bf16", 128, 64, 512, 512, q_heads=4, causal=True),
    Case("forward", "fp16", 64, 16, 200, 300, causal=True, alignment="bottom_right"),
    Case("forward", "fp16", 128, 64, 256, 200, bshd=True, shared_layout=True),
    Case("forward", "bf16", 64, 16, 256, 256, mma_sync=True),
    Case("forward", "bf16", 64, 64, 1000, 1500),
    Case("forward", "fp16", 128, 16, 100, 37, causal=True, alignment="bottom_right"),
    Case("forward", "bf16", 64, 64, 2048, 2048, q_heads=16, causal=True),  # CTAs run 2+ units
    Case("forward", "fp16", 64, 64, 128, 192, empty=True),
    Case("forward", "bf16", 128, 128, 640, 640, q_heads=4, causal=True),  # layout block 128
    Case("forward", "bf16", 64, 64, 1000, 1000, dense=True),  # Hopper: 64 x 128 tiles, 3 stages
    Case("forward", "fp16", 128, 64, 1000, 1000, dense=True),  # Hopper: two consumers, 128 x 128
    Case("backward", "bf16", 128, 64, 512, 512, q_heads=4, causal=True),
    Case("backward", "fp16", 64, 16, 200, 200),
    Case("backward", "bf16", 64, 64, 256, 384, causal=True, alignment="bottom_right", bshd=True),
    Case("backward", "fp16", 128, 16, 256, 256, q_heads=4, kv_heads=1, shared_layout=True,
         mma_sync=True),
    Case("backward", "bf16", 128, 64, 512, 512, q_heads=4, causal=True,
         backward_build="sm90_atomic"),
    Case("backward", "fp16", 64, 64, 256, 384, q_heads=4, backward_build="sm90_separate"),
    Case("backward", "fp16", 64, 64, 256, 384, q_heads=4, backward_build="sm90_atomic"),
    Case("forward", "bf16", 128, 64, 1000, 1000, q_heads=4, token_window=301),
    Case("forward", "fp16", 64, 16, 300, 300, token_window=37, causal=True),
    Case("forward", "bf16", 64, 64, 2048, 2048, q_heads=4, token_window=1201),  # D=64 token build
    Case("forward", "bf16", 128, 128, 1024, 1024, token_window=700),  # D=128 token build, 128 x 128
    Case("backward", "bf16", 128, 64, 1000, 1000, q_heads=4, token_window=301),
    Case("backward", "fp16", 64, 32, 300, 300, token_window=37, causal=True),
    Case("sdd", "bf16", 64, 64, 256, 256, causal=True),
)  # fmt: skip
#: --quick: both dtypes and head dims, forward and backward, GQA, a partial block at block 16.
QUICK = (CASES[0].name, CASES[11].name, CASES[12].name)


# --------------------------------------------------------------------------- one case (child)
def case_layout(case: Case, gen: torch.Generator) -> tuple[torch.Tensor, Any]:
    """The case's ``[H, M, N]`` layout and partial blocks: half the blocks at random, the partial
    corner visited; or the token band's blocks and partials."""
    if case.token_window:
        rows, cols = torch.arange(case.seq_q)[:, None], torch.arange(case.seq_k)[None, :]
        band = (rows - cols).abs() < case.token_window
        heads = 1 if case.shared_layout else case.q_heads
        return split_token_mask(band.expand(heads, -1, -1), case.block)
    n_q, n_k = -(-case.seq_q // case.block), -(-case.seq_k // case.block)
    blocks = torch.rand(1 if case.shared_layout else case.q_heads, n_q, n_k, generator=gen) < 0.5
    blocks[:, -1, -1] = True  # the partial corner is visited
    if case.dense:
        blocks[:] = True
    blocks[0, 0] = False  # query rows with no key: zeros and a logsumexp of -inf
    if case.empty:
        blocks[:] = False
    return blocks, None


def run_case(case: Case, *, device: str = "cuda", impl: str | None = None) -> tuple[bool, str]:
    """Run ``case`` once and compare it with the fp64 reference: ``(right, what was measured)``.

    ``impl`` defaults to the case's (``"fused"``, or ``"sdd"``); the tests pass ``"reference"``
    with ``device="cpu"``.
    """
    dtype = DTYPES[case.dtype]
    gen = torch.Generator().manual_seed(zlib.crc32(case.name.encode()))
    blocks, partials = case_layout(case, gen)

    def operand(heads: int, seq: int) -> torch.Tensor:
        shape = (1, seq, heads, case.head_dim) if case.bshd else (1, heads, seq, case.head_dim)
        x = torch.randn(shape, generator=gen, dtype=dtype).to(device)
        x.requires_grad_(case.kind == "backward")
        return x.transpose(1, 2) if case.bshd else x

    q = operand(case.q_heads, case.seq_q)
    k, v = operand(case.kv_heads, case.seq_k), operand(case.kv_heads, case.seq_k)
    grad_out = torch.randn(q.shape, generator=gen, dtype=dtype).to(device)
    impl = impl or ("sdd" if case.kind == "sdd" else "fused")
    not_hopper = mock.patch("gpu.plans.is_hopper", return_value=False)  # read when planning
    build = {BUILD_ENV: case.backward_build} if case.backward_build else {}
    with (not_hopper if case.mma_sync else contextlib.nullcontext()),\
            mock.patch.dict(os.environ, build):  # fmt: skip
        plan = gpu.plan(blocks, case.block, causal=case.causal, causal_alignment=case.alignment,
                        seq_q=case.seq_q, seq_k=case.seq_k, partials=partials,
                        device=device)  # fmt: skip
        if case.kind == "backward":
            out = gpu.block_sparse_attention(q, k, v, plan, impl=impl)
            got = dict(zip("qkv", torch.autograd.grad(out, (q, k, v), grad_out), strict=True))
        elif case.kind == "forward":
            out, lse = gpu.block_sparse_attention(q, k, v, plan, impl=impl, return_lse=True)
            got = {"out": out, "lse": lse}
        else:
            got = {"out": gpu.block_sparse_attention(q, k, v, plan, impl=impl)}
    if device == "cuda":
        torch.cuda.synchronize()

    q64, k64, v64 = (x.detach().cpu().double() for x in (q, k, v))
    options = {"causal": case.causal, "causal_alignment": case.alignment, "partials": partials}
    if case.kind == "backward":
        ref = dense_masked_attention_backward(q64, k64, v64, grad_out.cpu(), blocks, case.block,
                                              **options)  # fmt: skip
        expected = dict(zip("qkv", ref, strict=True))
    else:
        out64, lse64 = dense_masked_attention(q64, k64, v64, blocks, case.block, **options,
                                              return_lse=True)  # fmt: skip
        expected = {"out": out64, "lse": lse64}
    return _compare(got, expected, TOLERANCE[dtype])


def _compare(got: dict, expected: dict, tolerance: float) -> tuple[bool, str]:
    """Relative errors of every result; the logsumexp's where finite, with the same -inf rows."""
    right, parts = True, []
    for name, value in got.items():
        value, ref = value.detach().cpu(), expected[name]
        if name == "lse":
            empty = torch.isinf(ref)
            right &= bool((torch.isinf(value) == empty).all())
            value, ref = value[~empty], ref[~empty]
        error = errors(value, ref)[1]
        right &= bool(torch.isfinite(value).all()) and error <= tolerance
        parts.append(f"{name} {error:.1e}")
    return right, "rel err " + ", ".join(parts)


def child(names: Sequence[str]) -> int:
    """Run the named cases, one result line each (``case NAME: ok|WRONG|ERROR ...``)."""
    by_name = {case.name: case for case in CASES}
    failed = 0
    for name in names:
        start = time.perf_counter()
        try:
            right, details = run_case(by_name[name])
            status = "ok" if right else "WRONG"
        except Exception as error:
            traceback.print_exc()
            status, details = "ERROR", f"{type(error).__name__}: {error}"
        failed += status != "ok"
        seconds = time.perf_counter() - start
        print(f"case {name}: {status} {details} ({seconds:.1f} s)", flush=True)
    return 1 if failed else 0


# --------------------------------------------------------------------------- reading the output
_ERROR_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) errors?")
_RACECHECK_SUMMARY = re.compile(
    r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)"
)
_CASE_LINE = re.compile(r"^case (\S+): (ok|WRONG|ERROR)\b", re.MULTILINE)


def parse_summary(output: str) -> dict | None:
    """The sanitizer's last summary: ``{"line", "errors"}`` (racecheck: also ``"hazards"`` and
    ``"warnings"``), or None when it printed none (it did not finish)."""
    found = list(_RACECHECK_SUMMARY.finditer(output)) or list(_ERROR_SUMMARY.finditer(output))
    if not found:
        return None
    match = found[-1]
    line = output[output.rfind("\n", 0, match.start()) + 1 : match.end()].strip()
    if match.re is _RACECHECK_SUMMARY:
        hazards, errors_, warnings = (int(x) for x in match.groups())
        return {"line": line, "errors": errors_, "warnings": warnings, "hazards": hazards}
    return {"line": line, "errors": int(match.group(1))}


def case_results(output: str) -> dict[str, str]:
    """``{case name: "ok" | "WRONG" | "ERROR"}`` from a child's result lines."""
    return dict(_CASE_LINE.findall(output))


@dataclasses.dataclass(frozen=True)
class Finished:
    """A finished (or timed-out: ``returncode`` None) child process."""

    returncode: int | None
    output: str
    seconds: float


def judge(tool: str | None, names: Sequence[str], finished: Finished) -> dict:
    """The record of one run of ``names`` under ``tool`` (None: no sanitizer), with its verdict."""
    problems = []
    if finished.returncode is None:
        problems.append(f"timed out after {finished.seconds:.0f} s")
    elif finished.returncode != 0:
        problems.append(f"exit status {finished.returncode}")
    record: dict = {"tool": tool, "cases": list(names)}
    if tool is not None:
        summary = parse_summary(finished.output)
        if summary is None:
            problems.append("no sanitizer summary")
        else:
            record.update(summary)
            if summary["errors"] or summary.get("warnings"):
                problems.append(summary["line"].lstrip("= "))
    results = case_results(finished.output)
    record["results"] = {name: results.get(name, "did not finish") for name in names}
    problems += [f"{name}: {status}" for name, status in record["results"].items()
                 if status != "ok"]  # fmt: skip
    record.update(passed=not problems, seconds=round(finished.seconds, 2),
                  returncode=finished.returncode)  # fmt: skip
    if problems:
        record["problems"] = problems
        record["tail"] = finished.output.splitlines()[-TAIL_LINES:]
    return record


# --------------------------------------------------------------------------- running (parent)
def run_command(command: Sequence[str], env: dict[str, str], timeout: float) -> Finished:
    """Run ``command`` in its own process group, output and errors together; on timeout the
    whole group (the sanitizer and the Python under it) is killed."""
    start = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, errors="replace", start_new_session=True)  # fmt: skip
    try:
        output, _ = process.communicate(timeout=timeout)
        returncode = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        returncode = None
    return Finished(returncode, output, time.perf_counter() - start)


def child_command(names: Sequence[str]) -> list[str]:
    return [sys.executable, str(SCRIPT), "--child", "--cases", ",".join(names)]


def sanitizer_command(sanitizer: str, tool: str) -> list[str]:
    """``compute-sanitizer`` with ``tool``, failing on errors, limited to our kernels where the
    tool allows it."""
    command = [sanitizer, "--tool", tool, "--error-exitcode", "1"]
    if tool not in UNFILTERED_TOOLS:
        for name in KERNEL_NAMES:
            command += ["--kernel-name", f"kns={name}"]
    return command


def run_checks(
    names: Sequence[str],
    tools: Sequence[str],
    sanitizer: str,
    *,
    timeout: float,
    run: Callable[[Sequence[str], dict[str, str], float], Finished] = run_command,
) -> dict:
    """The plain run of every case, then one run per tool and case: their records."""
    paths = (str(ROOT), os.environ.get("PYTHONPATH", ""))  # this checkout's kernels first
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in paths if path)}
    plain = judge(None, names, run(child_command(names), env, timeout))
    _print_run("no sanitizer", ", ".join(names), plain)
    sanitized_env = {**env, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    runs = []
    for tool in tools:
        for name in names:
            command = sanitizer_command(sanitizer, tool) + child_command([name])
            runs.append(judge(tool, [name], run(command, sanitized_env, timeout)))
            _print_run(tool, name, runs[-1])
    return {
        "plain": plain,
        "runs": runs,
        "passed": plain["passed"] and all(r["passed"] for r in runs),
    }


def find_sanitizer(explicit: str | None = None) -> str | None:
    """``explicit``, else ``compute-sanitizer`` on PATH, in the CUDA toolkit or in the pip
    wheel ``nvidia-cuda-sanitizer-api`` (``nvidia/*/compute-sanitizer/``)."""
    if explicit is not None:
        return explicit if shutil.which(explicit) else None
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    homes = [os.environ.get(key) for key in ("CUDA_HOME", "CUDA_PATH")] + ["/usr/local/cuda"]
    candidates = [Path(h) / sub / "compute-sanitizer" for h in homes if h
                  for sub in ("bin", "compute-sanitizer")]  # fmt: skip
    with contextlib.suppress(ImportError):
        import nvidia

        wheel = "*/compute-sanitizer/compute-sanitizer"  # nvidia/cu13/compute-sanitizer/...
        candidates += [p for root in nvidia.__path__ for p in Path(root).glob(wheel)]
    return next((str(p) for p in candidates if p.is_file() and os.access(p, os.X_OK)), None)


def sanitizer_version(sanitizer: str) -> str:
    """The ``Version ...`` line of ``compute-sanitizer --version``."""
    result = subprocess.run([sanitizer, "--version"], capture_output=True, text=True,
                            timeout=60, check=False)  # fmt: skip
    lines = [line.strip() for line in result.stdout.splitlines() if "Version" in line]
    return lines[-1] if lines else "n/a"


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    if args.child:
        return child(args.cases)
    if not torch.cuda.is_available():
        raise SystemExit("sanitize.py needs a CUDA GPU")
    sanitizer = find_sanitizer(args.sanitizer)
    if sanitizer is None:
        raise SystemExit(
            "compute-sanitizer not found (PATH, $CUDA_HOME, /usr/local/cuda, the pip wheel "
            "nvidia-cuda-sanitizer-api); give it with --sanitizer PATH"
        )
    start = time.perf_counter()
    checks = run_checks(args.cases, args.tools, sanitizer, timeout=args.timeout)
    cases = {case.name: case for case in CASES}
    document = {
        "format": "blocksparse-sanitizer",
        "version": 2,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "environment": {**environment(), "compute_sanitizer": sanitizer_version(sanitizer)},
        "command": " ".join(["python3", "tools/sanitize.py", *args.argv]),
        "sanitizer_options": {
            tool: sanitizer_command("compute-sanitizer", tool)[1:] for tool in args.tools
        },
        "tools": list(args.tools),
        "cases": [{"name": n, **dataclasses.asdict(cases[n])} for n in args.cases],
        **checks,
        "seconds": round(time.perf_counter() - start, 1),
    }
    out = Path(args.out) if args.out else _default_out(document)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=1) + "\n")
    failed = [r for r in [checks["plain"], *checks["runs"]] if not r["passed"]]
    print(f"{'all passed' if not failed else f'{len(failed)} runs FAILED'} in "
          f"{document['seconds']:.0f} s; wrote {out}")  # fmt: skip
    return 0 if checks["passed"] else 1


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tools", default=",".join(DEFAULT_TOOLS),
                        help=f"comma-separated, of {', '.join(TOOLS)}, or all "
                             f"(default {','.join(DEFAULT_TOOLS)})")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help=f"only {len(QUICK)} cases")
    parser.add_argument("--cases", help="comma-separated case names (default: all)")
    parser.add_argument("--list", action="store_true", help="print the case names and exit")
    parser.add_argument("--out", help="result JSON (default benchmarks/results/checks/...)")
    parser.add_argument("--sanitizer", help="the compute-sanitizer executable")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per run (600)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.list:
        print("\n".join(case.name for case in CASES))
        parser.exit()
    args.tools = TOOLS if args.tools == "all" else tuple(args.tools.split(","))
    if unknown := [tool for tool in args.tools if tool not in TOOLS]:
        parser.error(f"--tools must be among {', '.join(TOOLS)} or all, got {', '.join(unknown)}")
    names = [case.name for case in CASES]
    if args.cases and args.quick:
        parser.error("give --cases or --quick, not both")
    args.cases = args.cases.split(",") if args.cases else list(QUICK if args.quick else names)
    if unknown := [name for name in args.cases if name not in names]:
        parser.error(f"unknown case {', '.join(unknown)}; --list shows them")
    if args.timeout <= 0:
        parser.error(f"--timeout must be > 0, got {args.timeout}")
    return args


def _default_out(document: dict) -> Path:
    gpu_name = document["environment"]["gpu"].lower().removeprefix("nvidia ")
    slug = re.sub(r"[^a-z0-9]+", "-", gpu_name).strip("-") or "gpu"
    return RESULTS / f"{document['date'][:10]}-{slug}-sanitizer.json"


def _print_run(tool: str, what: str, record: dict) -> None:
    verdict = "ok" if record["passed"] else "FAILED: " + "; ".join(record["problems"])
    count = f"{record['errors']} errors, " if "errors" in record else ""
    print(f"{tool:12s} {what:48s} {count}{record['seconds']:6.1f} s {verdict}", flush=True)
    if not record["passed"]:
        print("\n".join("    " + line for line in record["tail"]), flush=True)


if __name__ == "__main__":
    sys.exit(main())
