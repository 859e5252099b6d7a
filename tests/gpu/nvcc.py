"""Compile a kernel source with the local ``nvcc``: CPU checks of what NVRTC builds on a GPU."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

from gpu.runtime import INCLUDE_DIR, PACKAGE_DIR

HOPPER = "-gencode=arch=compute_90a,code=sm_90a"


def nvcc_or_skip() -> str:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH")
    return nvcc


def compile_source(
    nvcc: str,
    source: str,
    defines: Mapping[str, int],
    out: Path,
    *,
    target: str = HOPPER,
    verbose: bool = False,
) -> subprocess.CompletedProcess:
    """``nvcc -c`` of ``gpu/<source>`` with ``defines`` (``verbose``: with ptxas's resource
    report, ``-Xptxas -v``); the result, never raising."""
    command = [nvcc, target, "-std=c++17", "--use_fast_math", f"-I{INCLUDE_DIR}", "-c"]
    command += ["-Xptxas", "-v"] if verbose else []
    command += [f"-D{name}={value}" for name, value in defines.items()]
    command += [str(PACKAGE_DIR / source), "-o", str(out)]
    return subprocess.run(command, capture_output=True, text=True, check=False)
