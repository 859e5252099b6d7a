"""Cubin hashes and register use of every kernel build a plan can choose, compiled by ``nvcc``.

``python3 tools/cubin_hashes.py [--json PATH] [--compare OLD.json] [--jobs N] [--only PREFIX]
[--nvdisasm PATH]``

Each build (a kernel source and the defines of a config from the build tables) is compiled with
the options the runtime gives NVRTC (``gpu.runtime.compile_options``: C++17, fast math, the
defines) into a cubin, whose sha256 is recorded: for sm_90a where the build needs Hopper, else
for sm_80 and sm_90a (what the H200 compiles it for). A second compile adds ``-Xptxas -v``
(which marks the cubin, so it is kept apart) for each kernel's registers, stack, spills and
parameter bytes (``cmem[0]``). ``--compare`` reads an earlier run and says per build whether
its cubins are byte-identical, and which kernels use more stack, spills or registers (in the
allocation units of 8 per thread; the exit status is 1 then): with threads and shared memory
unchanged, no more allocated registers and no more spills means no build loses occupancy.
With ``--nvdisasm`` (from the ``nvidia-cuda-nvdisasm`` wheel) each kernel's ``sass_registers``
is recorded too: one more than the highest register its SASS names. A warp-specialised kernel
that moves registers with ``setmaxnreg`` reports its entry cap to ptxas's ``-v``; what its
consumers really hold shows only there.

NVRTC on the GPU machine builds its own cubins; these are nvcc's, a CPU stand-in for the same
source, options and ptxas.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled

from gpu.backward.builds import BUILDS as BACKWARD_BUILDS
from gpu.backward.builds import backward_build_config, choose_backward_config, has_tall_schedule
from gpu.backward.fused import SOURCE as BACKWARD_SOURCE
from gpu.backward.sm90_dq import HopperDqConfig
from gpu.forward.builds import choose_config, hopper_builds
from gpu.runtime import INCLUDE_DIR, PACKAGE_DIR, compile_options
from gpu.sdd.pipeline import SOURCE as SDD_SOURCE
from gpu.sdd.pipeline import KernelConfig as SddConfig
from gpu.support import BLOCK_SIZES, DTYPE_NAMES, HEAD_DIMS

TARGETS = {"sm_80": "-gencode=arch=compute_80,code=sm_80",
           "sm_90a": "-gencode=arch=compute_90a,code=sm_90a"}  # fmt: skip
#: Registers per thread are allocated in units of this many (sm_80, sm_90).
REGISTER_UNIT = 8
#: Heads of the [B, S, H, D] memory whose strided K/V rows stand for the mma.sync builds of views.
BSHD_HEADS = 16
_ENTRY = re.compile(r"Compiling entry function '(\w+)' for")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGISTERS = re.compile(r"Used (\d+) registers")
_PARAMS = re.compile(r"(\d+) bytes cmem\[0\]")
#: What ``compare`` reports per kernel.
RESOURCES = ("registers", "sass_registers", "stack", "spill_stores", "spill_loads", "params")
_SASS_FUNCTION = re.compile(r"^\.text\.(\w+):")
_SASS_REGISTER = re.compile(r"\bR(\d+)\b")


@dataclass(frozen=True)
class Build:
    """One kernel source compiled with one set of defines."""

    name: str
    source: Path
    defines: tuple[tuple[str, int], ...]
    hopper_only: bool

    @property
    def targets(self) -> tuple[str, ...]:
        return ("sm_90a",) if self.hopper_only else ("sm_80", "sm_90a")


def builds() -> list[Build]:
    """Every build a plan can choose: the forward's (every Hopper build of the tables, without
    and with the token-tile path; mma.sync
    with contiguous K/V rows and, for the row strides a view compiles in, those of 16 heads of
    ``[B, S, H, D]`` memory), the backward's (both paths of ``fused.cu``, each sm90 build and
    the dQ kernel of ``sm90_separate``, without and with the token-tile path) and the SDD
    pipeline's."""
    found = []
    for dtype, head_dim in ((t, d) for t in DTYPE_NAMES for d in HEAD_DIMS):
        name = DTYPE_NAMES[dtype]
        for rows in (None, BSHD_HEADS * head_dim):  # contiguous K/V rows, and [B, S, H, D] memory
            c = choose_config(head_dim=head_dim, dtype=dtype, wgmma=False, k_row_stride=rows,
                              v_row_stride=rows)  # fmt: skip
            label = f"forward-sm80-{name}-d{head_dim}" + (f"-rows{rows}" if rows else "")
            found.append(_build(label, c.source, c, False))
        for tokens in (False, True):  # plans without and with partial blocks
            for c, _ in hopper_builds(name, head_dim, tokens=tokens):
                tiles = f"{c.block_m}x{c.block_n}-s{c.stages}-c{c.consumers}-b{c.min_blocks}"
                label = f"forward-sm90-{name}-d{head_dim}-{tiles}" + ("-pingpong" * c.pingpong)
                label += "-tokens" * tokens
                found.append(_build(label, c.source, c, True))
        for wgmma in (False, True):
            c = choose_backward_config(head_dim=head_dim, dtype=dtype, wgmma=wgmma)
            label = f"backward-sm{90 if wgmma else 80}-{name}-d{head_dim}"
            label += f"-w{c.n_warps}-b{c.min_blocks}"
            found.append(_build(label, BACKWARD_SOURCE, c, wgmma))
        for tokens in (False, True):  # plans without and with partial blocks
            tail = f"{name}-d{head_dim}" + ("-tokens" if tokens else "")
            for build in BACKWARD_BUILDS[1:]:
                for tall in (False, True)[: 1 + has_tall_schedule(build, head_dim)]:
                    c = backward_build_config(build, head_dim=head_dim, dtype=dtype, hopper=True,
                                              token_tiles=tokens, tall=tall)  # fmt: skip
                    label = f"backward-{build}-{name}-d{head_dim}" + "-rows128" * tall
                    label += "-tokens" * tokens
                    found.append(_build(label, c.source, c, True))
            c = HopperDqConfig(name, head_dim, tokens=tokens)
            found.append(_build(f"backward-sm90_dq-{tail}", c.source, c, True))
        for block in BLOCK_SIZES:
            c = SddConfig(name, block, head_dim)
            found.append(_build(f"sdd-{name}-b{block}-d{head_dim}", SDD_SOURCE, c, False))
    return found


def _build(name: str, source: str, config, hopper_only: bool) -> Build:
    return Build(name, PACKAGE_DIR / source, tuple(sorted(config.defines().items())), hopper_only)


def nvcc_command(nvcc: str, build: Build, target: str, out: Path, *, verbose: bool) -> list[str]:
    """nvcc with the runtime's NVRTC options (its ``-arch`` as a ``-gencode``) for ``target``."""
    options = [o for o in compile_options(target, dict(build.defines)) if not o.startswith("-arch")]
    return [nvcc, "-cubin", TARGETS[target], *options, f"-I{INCLUDE_DIR}",
            *(["-Xptxas", "-v"] if verbose else []), str(build.source), "-o", str(out)]  # fmt: skip


def parse_ptxas(log: str) -> dict[str, dict[str, int]]:
    """Per kernel of a ``-Xptxas -v`` log: registers, stack, spill stores and loads, and the
    parameter bytes (``cmem[0]``, where ptxas reports it).

    >>> parse_ptxas('''ptxas info    : Compiling entry function 'k' for 'sm_80'
    ... ptxas info    : Function properties for k
    ...     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
    ... ptxas info    : Used 255 registers, used 1 barriers, 384 bytes cmem[0]''')
    {'k': {'stack': 8, 'spill_stores': 4, 'spill_loads': 4, 'registers': 255, 'params': 384}}
    """
    kernels: dict[str, dict[str, int]] = {}
    current = None
    for line in log.splitlines():
        if entry := _ENTRY.search(line):
            current = kernels.setdefault(entry.group(1), {})
        elif current is not None and (frame := _FRAME.search(line)):
            current.update(zip(("stack", "spill_stores", "spill_loads"),
                               map(int, frame.groups()), strict=True))  # fmt: skip
        elif current is not None and (registers := _REGISTERS.search(line)):
            current["registers"] = int(registers.group(1))
            if params := _PARAMS.search(line):
                current["params"] = int(params.group(1))
    return kernels


def sass_registers(listing: str) -> dict[str, int]:
    """Per kernel of an ``nvdisasm -c`` listing: one more than the highest register it names.

    >>> sass_registers(".text.k:\\n /*0000*/ MOV R7, R2 ;\\n /*0010*/ IADD3 R12, R7, 0x1 ;")
    {'k': 13}
    """
    found: dict[str, int] = {}
    current = None
    for line in listing.splitlines():
        if function := _SASS_FUNCTION.match(line.strip()):
            current = function.group(1)
            found[current] = 0
        elif current is not None and "/*" in line:
            numbers = [int(n) + 1 for n in _SASS_REGISTER.findall(line.split("*/", 1)[1])]
            found[current] = max([found[current], *numbers])
    return found


def measure(nvcc: str, build: Build, target: str, work: Path, nvdisasm: str | None) -> dict:
    """The cubin's sha256 and the kernels' resources of one build for one target (with
    ``nvdisasm``, the registers their SASS names)."""
    out = work / f"{build.name}-{target}.cubin"
    listing = ""
    for verbose in (False, True):
        command = nvcc_command(nvcc, build, target, out, verbose=verbose)
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"{build.name} ({target}) failed:\n{result.stderr}")
        if not verbose:
            digest = hashlib.sha256(out.read_bytes()).hexdigest()
            if nvdisasm:
                listing = subprocess.run([nvdisasm, "-c", str(out)], capture_output=True,
                                         text=True, check=True).stdout  # fmt: skip
    kernels = parse_ptxas(result.stdout + result.stderr)
    for kernel, count in sass_registers(listing).items():
        kernels.setdefault(kernel, {})["sass_registers"] = count
    return {"sha256": digest, "kernels": kernels}


def run_all(nvcc: str, jobs: int, only: str = "", nvdisasm: str | None = None) -> dict[str, dict]:
    """Every build (whose name starts with ``only``) and target, measured in ``jobs`` parallel
    compiles."""
    tasks = [(b, t) for b in builds() if b.name.startswith(only) for t in b.targets]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(jobs) as pool:
        results = list(pool.map(lambda task: measure(nvcc, *task, Path(tmp), nvdisasm), tasks))
    measured: dict[str, dict] = {}
    for (build, target), result in zip(tasks, results, strict=True):
        measured.setdefault(build.name, {})[target] = result
    return measured


def compare(old: dict[str, dict], new: dict[str, dict]) -> tuple[list[str], bool]:
    """Lines saying per build and target whether the cubin is identical and what changed in its
    kernels; and whether any kernel got worse (more registers, stack or spills) or a build
    came or went."""
    lines, worse = [], False
    for name in sorted(old.keys() | new.keys()):
        if name not in old or name not in new:
            lines.append(f"{name}: only in the {'new' if name in new else 'old'} run")
            worse = True
            continue
        for target in sorted(new[name]):
            before, after = old[name][target], new[name][target]
            verdict = "identical" if before["sha256"] == after["sha256"] else "differs"
            changes = []
            for kernel, now in sorted(after["kernels"].items()):
                was = before["kernels"].get(kernel, {})
                for key in RESOURCES:
                    if was.get(key) != now.get(key):
                        changes.append(f"{kernel} {key} {was.get(key)} -> {now.get(key)}")
                        worse |= _cost(key, now.get(key)) > _cost(key, was.get(key))
            details = f" ({'; '.join(changes)})" if changes else ""
            lines.append(f"{name} {target}: {verdict}{details}")
    return lines, worse


def _cost(key: str, value: int | None) -> int:
    """What a resource costs a build: spills and stack as they are; registers as allocated, in
    units of 8 per thread (sm_80 and sm_90), since only a whole unit more can cost occupancy;
    the parameter bytes and the SASS's registers (within the allocation) nothing."""
    if key in ("params", "sass_registers") or value is None:
        return 0
    return -(-value // REGISTER_UNIT) * REGISTER_UNIT if key == "registers" else value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the run here")
    parser.add_argument("--compare", help="an earlier run's JSON to compare with")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel compiles")
    parser.add_argument("--only", default="", help="the builds whose names start with this")
    parser.add_argument("--nvdisasm", help="an nvdisasm to read each kernel's SASS registers")
    args = parser.parse_args(argv)
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        parser.error("nvcc is not on PATH")
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True)
    measured = run_all(nvcc, max(1, args.jobs), args.only, args.nvdisasm)
    for name, targets in measured.items():
        for target, result in targets.items():
            print(f"{result['sha256']}  {name} {target}")
    if args.json:
        document = {
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "nvcc": version.stdout.strip().splitlines()[-1],
            "loadavg": os.getloadavg(),
            "command": "python3 tools/cubin_hashes.py --json PATH"
            + (f" --only {args.only}" if args.only else "")
            + (" --nvdisasm NVDISASM" if args.nvdisasm else ""),
            "builds": measured,
        }
        Path(args.json).write_text(json.dumps(document, indent=1) + "\n")
    if args.compare:
        old = json.loads(Path(args.compare).read_text())["builds"]
        old = {name: run for name, run in old.items() if name.startswith(args.only)}
        lines, worse = compare(old, measured)
        print("\n".join(lines))
        return int(worse)
    return 0


if __name__ == "__main__":
    sys.exit(main())
