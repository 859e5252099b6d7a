"""What a warp issues per step of a kernel build's main loop, read from its SASS.

``python3 tools/sass_loop.py BUILD [BUILD ...] [--cuobjdump PATH] [--json PATH]``

BUILD is a build name of ``tools/cubin_hashes.py`` (``--list`` prints them), e.g.
``forward-sm90-bf16-d64-64x128-s3-c1-b2`` or ``backward-sm90_bulk-bf16-d128``. The tool compiles
it with nvcc as ``cubin_hashes.py`` does (sm_90a for Hopper builds, else sm_80), disassembles the
cubin with ``cuobjdump -sass`` (the ``nvidia-cuda-cuobjdump`` wheel has one) and, per kernel,
takes its main loop: the shortest backward branch whose body issues a tensor-core instruction
(HGMMA, or HMMA on ``mma.sync``). It prints the loop's instructions by opcode and each region a
forward branch inside the loop may skip (a mask, a partial tile, a dQ step that another
warpgroup computes) with its size, and the *fast path*: the loop with every such region skipped,
which is what a full tile costs where the skipped regions are the masking. Static counts, one
pass through the body: what ptxas emitted, not what ran (Nsight Compute counts that).

The numbers behind the instruction counts in ``gpu/NOTES.md`` come from here; a CPU with nvcc
(CUDA 13) is enough.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled

from tools.cubin_hashes import Build, builds, nvcc_command

_FUNCTION = re.compile(r"Function : (\w+)")
_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_TENSOR = ("HGMMA", "HMMA")


@dataclass(frozen=True)
class Instruction:
    pc: int
    text: str

    @property
    def opcode(self) -> str:
        """The opcode without its predicate and modifiers: ``@!P0 BRA 0x10`` gives ``BRA``."""
        words = self.text.split()
        word = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
        return word.split(".")[0]

    @property
    def branch_target(self) -> int | None:
        """Where a ``BRA`` with an immediate target goes, else None."""
        if self.opcode != "BRA":
            return None
        target = re.search(r"0x([0-9a-f]+)\s*$", self.text)
        return int(target.group(1), 16) if target else None


def parse_sass(listing: str) -> dict[str, list[Instruction]]:
    """Per kernel of a ``cuobjdump -sass`` listing, its instructions in address order.

    >>> parse_sass("Function : k\\n /*0000*/ MOV R1, c[0x0][0x28] ; /* 0x... */")
    {'k': [Instruction(pc=0, text='MOV R1, c[0x0][0x28]')]}
    """
    kernels: dict[str, list[Instruction]] = {}
    current = None
    for line in listing.splitlines():
        if function := _FUNCTION.search(line):
            current = kernels.setdefault(function.group(1), [])
        elif current is not None and (found := _INSTRUCTION.search(line)):
            current.append(Instruction(int(found.group(1), 16), found.group(2)))
    return kernels


def main_loop(instructions: list[Instruction]) -> tuple[int, int] | None:
    """``(first, last)`` addresses of the shortest loop (a backward branch to ``first`` at
    ``last``) whose body issues a tensor-core instruction; None without one."""
    tensor = [i.pc for i in instructions if i.opcode in _TENSOR]
    loops = [(i.branch_target, i.pc) for i in instructions
             if i.branch_target is not None and i.branch_target <= i.pc]  # fmt: skip
    loops = [(a, b) for a, b in loops if any(a <= pc <= b for pc in tensor)]
    return min(loops, key=lambda loop: loop[1] - loop[0], default=None)


def loop_report(instructions: list[Instruction]) -> dict | None:
    """The main loop's instruction mix, its skippable regions and its fast path."""
    bounds = main_loop(instructions)
    if bounds is None:
        return None
    first, last = bounds
    body = [i for i in instructions if first <= i.pc <= last]
    regions = [(i.pc, i.branch_target) for i in body
               if i.branch_target is not None and i.pc < i.branch_target <= last]  # fmt: skip
    skips = []
    for start, end in regions:
        skipped = [i for i in body if start < i.pc < end]
        skips.append({"branch": hex(start), "to": hex(end), "instructions": len(skipped),
                      "by_opcode": _mix(skipped)})  # fmt: skip
    fast = [i for i in body if not any(start < i.pc < end for start, end in regions)]
    return {
        "loop": [hex(first), hex(last)],
        "instructions": len(body),
        "by_opcode": _mix(body),
        "skippable": skips,
        "fast_path": {"instructions": len(fast), "by_opcode": _mix(fast)},
    }


def _mix(instructions: list[Instruction]) -> dict[str, int]:
    return dict(collections.Counter(i.opcode for i in instructions).most_common())


def disassemble(build: Build, nvcc: str, cuobjdump: str) -> str:
    """The SASS listing of ``build`` for its newest target."""
    target = build.targets[-1]
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / f"{build.name}.cubin"
        command = nvcc_command(nvcc, build, target, cubin, verbose=False)
        subprocess.run(command, capture_output=True, text=True, check=True)
        return subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True,
                              check=True).stdout  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("builds", nargs="*", help="build names of tools/cubin_hashes.py")
    parser.add_argument("--list", action="store_true", help="list the build names")
    parser.add_argument("--cuobjdump", default=shutil.which("cuobjdump"), help="its path")
    parser.add_argument("--json", help="write the reports here")
    args = parser.parse_args(argv)
    known = {build.name: build for build in builds()}
    if args.list:
        print("\n".join(known))
        return 0
    unknown = [name for name in args.builds if name not in known]
    if unknown or not args.builds:
        parser.error(f"give build names (--list): unknown {unknown}" if unknown else "no build")
    nvcc = shutil.which("nvcc")
    if nvcc is None or args.cuobjdump is None:
        parser.error("nvcc and cuobjdump must be on PATH (or give --cuobjdump)")
    reports = {}
    for name in args.builds:
        kernels = parse_sass(disassemble(known[name], nvcc, args.cuobjdump))
        reports[name] = {kernel: loop_report(code) for kernel, code in kernels.items()}
        for kernel, report in reports[name].items():
            if report is None:
                continue
            fast = report["fast_path"]
            print(
                f"{name} {kernel}: loop {report['loop'][0]}-{report['loop'][1]}, "
                f"{report['instructions']} instructions, fast path {fast['instructions']}"
            )
            print("  fast path:", ", ".join(f"{k} {v}" for k, v in fast["by_opcode"].items()))
            for skip in report["skippable"]:
                print(f"  {skip['branch']} may skip {skip['instructions']} to {skip['to']}")
    if args.json:
        Path(args.json).write_text(json.dumps(reports, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
