"""Shared fixtures, and the rule that tests marked ``gpu`` skip without a CUDA GPU and CuPy."""

from __future__ import annotations

import functools

import numpy as np
import pytest


@functools.cache
def _gpu_missing_reason() -> str | None:
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
    except Exception as error:  # no CuPy, no driver, no device: all mean "skip"
        return f"no usable CUDA GPU with CuPy ({type(error).__name__}: {error})"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if gpu_items and (reason := _gpu_missing_reason()):
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def rng() -> np.random.Generator:
    """A fresh, seeded numpy generator per test."""
    return np.random.default_rng(1234)
