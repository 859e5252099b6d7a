"""The backward build a GPU test runs (``tests/gpu/backward``, the partial-block tests): every
build a plan can choose (``BUILDS``), named through ``BLOCKSPARSE_BACKWARD_BUILD``; the sm90
builds skip off Hopper."""

from __future__ import annotations

import pytest
import torch

from gpu.backward.builds import BUILD_ENV, BUILDS


@pytest.fixture(params=BUILDS)
def backward_build(request, monkeypatch) -> str:
    """Every plan of the test takes this build."""
    name = request.param
    if name.startswith("sm90") and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip(f"{name} needs a Hopper GPU (compute capability 9.0)")
    monkeypatch.setenv(BUILD_ENV, name)
    return name
