"""Lazy CuPy access and run-time compilation of our CUDA kernels.

Nothing here imports CuPy at module import time: the designer must work on machines without a GPU,
and ``unavailable_reason()`` tells such a user why the GPU path is off and what to install.

Each kernel source lives beside its launcher under the same stem (``gpu/forward/sm80.cu`` beside
``gpu/forward/sm80.py``), named from the package folder (``"forward/sm80.cu"``); the headers it
includes are those of ``gpu/include/`` and of its own folder. ``compile_kernel`` builds one with
NVRTC for the exact architecture of the current device (``sm_90a`` on Hopper, so ``wgmma`` is
allowed) with the compile-time choices passed as ``-D`` defines. We drive NVRTC ourselves instead of
``cupy.RawModule(code=...)`` because CuPy appends its own ``-arch=sm_XX`` option, which would clash
with ``sm_90a``; the cubin is then loaded through ``cupy.RawModule(path=...)`` so callers get a
regular ``cupy.RawKernel``. Modules are cached in-process per (source hash, arch, options) and on
disk per the same key plus the NVRTC version, so a second process skips compilation too.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

#: The package folder: kernel sources are named from it (``"forward/sm80.cu"``).
PACKAGE_DIR = Path(__file__).resolve().parent
#: The headers every kernel source may include.
INCLUDE_DIR = PACKAGE_DIR / "include"

#: Our kernels use ``mma.sync`` m16n8k16 with bf16 operands: Ampere (8.0) or newer.
MIN_COMPUTE_CAPABILITY = (8, 0)
#: Hopper, whose ``wgmma`` and TMA builds need ``sm_90a`` (not the 9.x family after it).
HOPPER = (9, 0)

_INSTALL_HINT = (
    'install CuPy for your CUDA version with pip install -e ".[cuda13]" (CUDA 13) '
    'or pip install -e ".[cuda12]" (CUDA 12)'
)
_DEFINE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DEFINE_TEXT = re.compile(r"[A-Za-z0-9_.+\-]+")


class GpuUnavailableError(RuntimeError):
    """Raised when a GPU implementation is asked for on a machine that cannot run it."""


@functools.cache
def unavailable_reason() -> str | None:
    """Why our CUDA kernels cannot run here, as a sentence for a user; None when they can.

    Never raises. The answer is cached for the process (``unavailable_reason.cache_clear()``
    re-checks).
    """
    try:
        return _find_problem()
    except Exception as error:  # a broken driver or library must not break the designer
        return f"the GPU check failed ({type(error).__name__}: {error}); {_INSTALL_HINT}"


def require_cupy() -> Any:
    """Return the ``cupy`` module, or raise ``GpuUnavailableError`` saying why it cannot be used."""
    reason = unavailable_reason()
    if reason is not None:
        raise GpuUnavailableError(reason)
    import cupy

    return cupy


def arch_for(compute_capability: tuple[int, int]) -> str:
    """The NVRTC ``-arch`` value for a device: ``sm_90a`` on Hopper (for ``wgmma``), else ``sm_XY``.

    >>> arch_for((9, 0)), arch_for((8, 6))
    ('sm_90a', 'sm_86')
    """
    major, minor = compute_capability
    return "sm_90a" if (major, minor) == HOPPER else f"sm_{major}{minor}"


def is_hopper(device: torch.device) -> bool:
    """Whether ``device`` (a CUDA device) is a Hopper GPU: the ``wgmma`` builds run there."""
    return torch.cuda.get_device_capability(device) == HOPPER


def is_cupy(array: Any) -> bool:
    """Whether ``array`` is a CuPy array, told without importing CuPy."""
    return type(array).__module__.split(".")[0] == "cupy"


def define_options(defines: Mapping[str, int | str]) -> tuple[str, ...]:
    """``-DNAME=VALUE`` compiler options, sorted by name; anything but a plain token is refused.

    >>> define_options({"HEAD_DIM": 64, "DTYPE_BF16": 1})
    ('-DDTYPE_BF16=1', '-DHEAD_DIM=64')
    """
    options = []
    for name in sorted(defines):
        value = defines[name]
        if not isinstance(name, str) or not _DEFINE_NAME.fullmatch(name):
            raise ValueError(f"define names must be C identifiers, got {name!r}")
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise TypeError(f"define {name} must be an int or str, got {type(value).__name__}")
        if isinstance(value, str) and not _DEFINE_TEXT.fullmatch(value):
            raise ValueError(f"define {name} must be a plain token, got {value!r}")
        options.append(f"-D{name}={value}")
    return tuple(options)


def compile_options(arch: str, defines: Mapping[str, int | str]) -> tuple[str, ...]:
    """Every NVRTC option we compile a kernel with (also mirrored by the CPU ``nvcc`` check)."""
    return (f"-arch={arch}", "-std=c++17", "--use_fast_math", *define_options(defines))


def compile_kernel(
    source: str, function: str, defines: Mapping[str, int | str], *, device: int | None = None
) -> Any:
    """Compile ``gpu/<source>`` for ``device`` (default: current) and return ``function``.

    Returns a ``cupy.RawKernel``. Compile errors raise ``RuntimeError`` naming the source, the
    defines and the compiler log.
    """
    cupy = require_cupy()
    code = kernel_source(source)
    device_id = cupy.cuda.Device().id if device is None else int(device)
    arch = arch_for(torch.cuda.get_device_capability(device_id))
    options = compile_options(arch, defines)
    module = _load_module(code, source, options, device_id)
    return module.get_function(function)


def source_beside(launcher: str) -> str:
    """The name of the kernel source beside a launcher module (its ``__file__``): same stem,
    ``.cu``, named from the package folder.

    >>> source_beside(str(PACKAGE_DIR / "sdd" / "pipeline.py"))
    'sdd/pipeline.cu'
    """
    return Path(launcher).resolve().with_suffix(".cu").relative_to(PACKAGE_DIR).as_posix()


def kernel_sources() -> tuple[str, ...]:
    """The name of every kernel source of the package, sorted."""
    return tuple(sorted(p.relative_to(PACKAGE_DIR).as_posix() for p in PACKAGE_DIR.rglob("*.cu")))


def kernel_source(source: str) -> str:
    """The text of ``gpu/<source>``, refusing names of anything but a kernel source."""
    if source not in kernel_sources():
        raise ValueError(
            f"source must be a .cu file of the gpu package ({', '.join(kernel_sources())}), "
            f"got {source!r}"
        )
    return (PACKAGE_DIR / source).read_text()


def kernel_headers(source: str) -> tuple[tuple[str, str], ...]:
    """``(name, text)`` of every header ``source`` may include: ``gpu/include/*.cuh`` and those
    beside it (NVRTC takes them by name, as nvcc finds them in those folders)."""
    folders = dict.fromkeys([INCLUDE_DIR, (PACKAGE_DIR / source).parent])
    paths = sorted((p for folder in folders for p in folder.glob("*.cuh")), key=lambda p: p.name)
    names = [path.name for path in paths]
    if len(set(names)) != len(names):
        raise ValueError(f"headers of {source} must have distinct names, got {names}")
    return tuple((path.name, path.read_text()) for path in paths)


def cupy_stream_for(tensor: torch.Tensor) -> Any:
    """A CuPy stream wrapping ``tensor``'s current torch stream (use it as a context).

    Launching inside ``with cupy_stream_for(q):`` orders our kernels with the caller's torch work.
    Through the CUDA stream protocol where CuPy has it (``Stream.from_external``; CuPy 14
    deprecates ``ExternalStream``), else an ``ExternalStream`` on the raw handle.
    """
    cupy = require_cupy()
    stream = torch.cuda.current_stream(tensor.device)
    if hasattr(cupy.cuda.Stream, "from_external") and hasattr(stream, "__cuda_stream__"):
        with cupy.cuda.Device(tensor.device.index):
            return cupy.cuda.Stream.from_external(stream)
    return cupy.cuda.ExternalStream(stream.cuda_stream, tensor.device.index)


@contextlib.contextmanager
def launch_context(tensor: torch.Tensor) -> Iterator[None]:
    """Launch on ``tensor``'s device (whatever the current one is) and its current torch stream."""
    cupy = require_cupy()
    with cupy.cuda.Device(tensor.device.index), cupy_stream_for(tensor):
        yield


def current_raw_stream(device_index: int) -> int:
    """The handle of torch's current stream on a device (the call Inductor's generated code
    makes: a fraction of a microsecond, against a few for ``torch.cuda.current_stream``)."""
    return torch._C._cuda_getCurrentRawStream(device_index)


#: Dynamic shared memory one CTA may use on sm_80 / sm_90 (227 KB on Hopper; 163 KB on A100).
SHARED_MEMORY_LIMIT = 227 * 1024
#: Shared memory of one SM on sm_90, shared by its resident CTAs.
SM_SHARED_MEMORY = 228 * 1024
#: Shared memory the hardware keeps for itself per resident CTA.
RESERVED_SHARED_BYTES = 1024


def check_shared_memory(shared_bytes: int, settings: str, *, ctas_per_sm: int = 1) -> None:
    """Refuse a kernel build whose CTA needs more shared memory than ``SHARED_MEMORY_LIMIT``,
    or whose ``ctas_per_sm`` CTAs (a build that must share an SM) do not fit one SM together;
    ``settings`` names the choices that set it."""
    if shared_bytes > SHARED_MEMORY_LIMIT:
        raise ValueError(
            f"{settings} need {shared_bytes} bytes of shared memory, more than "
            f"{SHARED_MEMORY_LIMIT}"
        )
    if ctas_per_sm * (shared_bytes + RESERVED_SHARED_BYTES) > SM_SHARED_MEMORY:
        raise ValueError(
            f"{settings} need {shared_bytes} bytes of shared memory per CTA, too many for "
            f"{ctas_per_sm} CTAs per SM ({SM_SHARED_MEMORY} bytes, {RESERVED_SHARED_BYTES} "
            "reserved per CTA)"
        )


def allow_shared_memory(kernel: Any, shared_bytes: int, device_id: int) -> None:
    """Let ``kernel`` take ``shared_bytes`` of dynamic shared memory on ``device_id``.

    Above 48 KiB a kernel must opt in, per device: the attribute is set on that device's copy.
    """
    if shared_bytes > 48 * 1024:
        with require_cupy().cuda.Device(device_id):
            kernel.max_dynamic_shared_size_bytes = shared_bytes


def prefer_shared_memory(kernel: Any, device_id: int) -> None:
    """Ask for the SM's largest shared-memory carveout for ``kernel`` on ``device_id``, so that
    several of its large-shared-memory CTAs can be resident at once (L1 keeps the rest)."""
    with require_cupy().cuda.Device(device_id):
        kernel.preferred_shared_memory_carveout = 100


# --------------------------------------------------------------------------- internals
_MODULES: dict[tuple[str, str, tuple[str, ...], int], Any] = {}
_MODULES_LOCK = threading.Lock()


def _load_module(code: str, source: str, options: tuple[str, ...], device_id: int) -> Any:
    headers = kernel_headers(source)
    code_hash = hashlib.sha256(
        "\0".join([code, *(f"{name}\0{text}" for name, text in headers)]).encode()
    ).hexdigest()
    key = (code_hash, source, options, device_id)
    with _MODULES_LOCK:
        module = _MODULES.get(key)
        if module is None:
            import cupy

            path = _cached_cubin(code, headers, code_hash, source, options)
            with cupy.cuda.Device(device_id):
                module = cupy.RawModule(path=str(path))
            _MODULES[key] = module
    return module


def _cached_cubin(
    code: str,
    headers: tuple[tuple[str, str], ...],
    code_hash: str,
    source: str,
    options: tuple[str, ...],
) -> Path:
    from cupy_backends.cuda.libs import nvrtc

    version = ".".join(str(v) for v in nvrtc.getVersion())
    key = hashlib.sha256(f"{code_hash}|{options}|{version}".encode()).hexdigest()[:32]
    cache_dir = _cache_dir()
    path = cache_dir / f"{source.removesuffix('.cu').replace('/', '-')}-{key}.cubin"
    if path.is_file() and path.stat().st_size > 0:
        return path
    cubin = _nvrtc_compile(nvrtc, code, headers, source, options)
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=cache_dir, suffix=".part", delete=False) as handle:
        handle.write(cubin)
    os.replace(handle.name, path)  # atomic: a concurrent reader sees all or nothing
    return path


def _nvrtc_compile(
    nvrtc: Any,
    code: str,
    headers: tuple[tuple[str, str], ...],
    source: str,
    options: tuple[str, ...],
) -> bytes:
    program = nvrtc.createProgram(  # NVRTC takes the headers' texts and names as bytes
        code, source, [text.encode() for _, text in headers], [name.encode() for name, _ in headers]
    )
    try:
        try:
            nvrtc.compileProgram(program, list(options))
        except nvrtc.NVRTCError as error:
            log = nvrtc.getProgramLog(program)
            raise RuntimeError(
                f"compiling gpu/{source} with options {' '.join(options)} failed ({error}):\n{log}"
            ) from error
        return nvrtc.getCUBIN(program)
    finally:
        nvrtc.destroyProgram(program)


def _cache_dir() -> Path:
    root = os.environ.get("CUPY_CACHE_DIR") or Path.home() / ".cupy" / "kernel_cache"
    return Path(root) / "blocksparse"


def _find_problem() -> str | None:
    # The GPU first: on a machine without one, installing CuPy would not help.
    if not torch.cuda.is_available():
        return (
            f"no CUDA GPU: PyTorch {torch.__version__} sees no CUDA device (a CPU-only build, or "
            "no GPU and driver); our kernels need an NVIDIA GPU and a CUDA build of PyTorch."
        )
    try:
        import cupy
    except ImportError as error:
        return f"CuPy is not installed ({error}); {_INSTALL_HINT}."
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:
        return f"CuPy cannot reach a CUDA device ({error}); check the NVIDIA driver and CuPy build."
    if count < 1:
        return "no CUDA device was found; our kernels need an NVIDIA GPU."
    capability = torch.cuda.get_device_capability()
    if capability < MIN_COMPUTE_CAPABILITY:
        name = torch.cuda.get_device_name()
        return (
            f"{name} has compute capability {capability[0]}.{capability[1]}; our kernels need "
            f"{MIN_COMPUTE_CAPABILITY[0]}.{MIN_COMPUTE_CAPABILITY[1]} or newer "
            "(Ampere, Ada, Hopper)."
        )
    return None
