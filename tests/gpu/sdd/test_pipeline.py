"""The SDD pipeline's source (``gpu/sdd/pipeline.cu``) compiles with nvcc for sm_90a in every
config the launcher uses, and its config checks itself.

NVRTC compiles the same sources on the GPU machine; this catches a broken kernel (front end and
inline PTX through ptxas) on machines without a GPU. ptxas runs at -O0 to keep the test quick.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from gpu.runtime import INCLUDE_DIR, PACKAGE_DIR, compile_options
from gpu.sdd.pipeline import SOURCE, KernelConfig
from gpu.support import DTYPES

NVCC = shutil.which("nvcc")
CONFIGS = [
    KernelConfig(dtype, block, dim)
    for dtype in DTYPES
    for block in (16, 32, 64, 128)
    for dim in (64, 128)
]


def _compile(source, config, out_dir) -> str | None:
    options = [o for o in compile_options("sm_90a", config.defines()) if not o.startswith("-arch")]
    target = out_dir / f"{source.stem}-{config.dtype}-{config.block_size}-{config.head_dim}.cubin"
    command = [NVCC, "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas", "-O0",
               *options, f"-I{INCLUDE_DIR}", str(source), "-o", str(target)]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        return f"{source.name} {config}:\n{result.stdout}{result.stderr}"
    return None


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_every_sdd_source_compiles_for_every_config(tmp_path):
    sources = [PACKAGE_DIR / SOURCE]
    assert all(source.is_file() for source in sources)
    jobs = [(source, config) for source in sources for config in CONFIGS]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        failures = [f for f in pool.map(lambda job: _compile(*job, tmp_path), jobs) if f]
    assert not failures, "\n".join(failures)


def test_kernel_config_checks_its_invariants():
    with pytest.raises(ValueError, match="dtype must be bf16 or fp16"):
        KernelConfig("fp32", 16, 64)
    with pytest.raises(ValueError, match="block_size must be one of"):
        KernelConfig("bf16", 8, 64)
    with pytest.raises(ValueError, match="head_dim must be 64 or 128"):
        KernelConfig("bf16", 16, 96)
    assert KernelConfig("fp16", 32, 128).defines() == {
        "DTYPE_BF16": 0,
        "BLOCK": 32,
        "HEAD_DIM": 128,
    }
