"""Launching a compiled kernel with its one parameter struct, through the CUDA driver.

Each of our attention kernels takes one struct (``gpu/include/params.cuh``, mirrored in
``gpu.params``). ``KernelLauncher`` packs a call's values into a per-thread buffer of the
struct's layout and hands the driver's ``cuLaunchKernel`` that one parameter: a few
microseconds of host time, where CuPy's generic call converts every argument on each call
(``benchmarks/api_overhead.py`` measures both).
"""

from __future__ import annotations

import ctypes
import functools
import threading
from typing import Any

from gpu.params import KernelParams, packer
from gpu.runtime import allow_shared_memory, require_cupy


class KernelLauncher:
    """Launches one compiled kernel whose parameter is a ``params`` struct.

    A call takes the struct's values in field order (pointers as ints, tensor maps as the
    128 bytes of ``gpu.forward.tensor_maps``). The launch runs in the context the kernel was
    loaded in, whatever context (or none) the calling thread has, so it goes to the kernel's
    device on the given stream.
    """

    def __init__(
        self, kernel: Any, params: type[KernelParams], device_id: int, shared_bytes: int
    ) -> None:
        cupy = require_cupy()
        self._packer = packer(params)
        self._local = threading.local()
        allow_shared_memory(kernel, shared_bytes, device_id)
        with cupy.cuda.Device(device_id):  # this device's copy of the kernel, and its context
            self._function = ctypes.c_void_p(kernel.kernel.ptr)
            context = ctypes.c_void_p()
            check_driver_result(
                cuda_driver().cuCtxGetCurrent(ctypes.byref(context)), "cuCtxGetCurrent"
            )
        self._context = context.value

    def __call__(self, grid: int, threads: int, shared_bytes: int, stream: int, *values) -> None:
        local = self._local
        buffer = getattr(local, "buffer", None)
        if buffer is None:  # one parameter buffer per thread, reused (the launch copies it)
            buffer = local.buffer = ctypes.create_string_buffer(self._packer.size)
            local.pointers = (ctypes.c_void_p * 1)(ctypes.addressof(buffer))
            local.current = ctypes.c_void_p()
        self._packer.pack_into(buffer, 0, *values)
        driver = cuda_driver()
        current = local.current
        driver.cuCtxGetCurrent(ctypes.byref(current))
        switch = current.value != self._context
        if switch:
            check_driver_result(driver.cuCtxPushCurrent_v2(self._context), "cuCtxPushCurrent")
        try:
            result = driver.cuLaunchKernel(
                self._function, grid, 1, 1, threads, 1, 1, shared_bytes, stream, local.pointers,
                None,
            )  # fmt: skip
        finally:
            if switch:
                driver.cuCtxPopCurrent_v2(ctypes.byref(current))
        check_driver_result(result, "cuLaunchKernel")


@functools.cache
def cuda_driver() -> ctypes.CDLL:
    """The CUDA driver library, with the signatures of the few calls the launcher makes."""
    driver = ctypes.CDLL("libcuda.so.1")
    pointer = ctypes.c_void_p
    uint = ctypes.c_uint
    driver.cuLaunchKernel.argtypes = [pointer, uint, uint, uint, uint, uint, uint, uint, pointer,
                                      ctypes.POINTER(pointer), pointer]  # fmt: skip
    driver.cuCtxGetCurrent.argtypes = [ctypes.POINTER(pointer)]
    driver.cuCtxPushCurrent_v2.argtypes = [pointer]
    driver.cuCtxPopCurrent_v2.argtypes = [ctypes.POINTER(pointer)]
    driver.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    return driver


def check_driver_result(result: int, call: str) -> None:
    """Raise ``RuntimeError`` naming the driver call and its error when ``result`` is not 0."""
    if result != 0:
        name = ctypes.c_char_p()
        cuda_driver().cuGetErrorName(result, ctypes.byref(name))
        raise RuntimeError(f"{call} failed: {(name.value or b'?').decode()} ({result})")
