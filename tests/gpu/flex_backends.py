"""FlexAttention's backends as the GPU tests pick them: Triton always, FLASH (FA4) when
``flash_attn.cute`` imports, else those tests are skipped saying why."""

from __future__ import annotations

import functools

import pytest


@functools.cache
def flash_missing_reason() -> str | None:
    """Why FlexAttention's FLASH backend cannot run here, or None when it can."""
    try:
        import flash_attn.cute  # noqa: F401
    except Exception as error:  # not installed, or its CuTe-DSL libraries missing
        return (
            "FlexAttention's FLASH backend needs flash-attn-4: flash_attn.cute does not import "
            f"({type(error).__name__}: {error})"
        )
    return None


needs_flash = pytest.mark.skipif(
    flash_missing_reason() is not None, reason=flash_missing_reason() or ""
)

#: ``kernel_options`` for each backend: Triton (Flex's default) and FA4.
KERNEL_OPTIONS = {"TRITON": None, "FLASH": {"BACKEND": "FLASH"}}
#: The backends as test parameters, FLASH skipped without flash-attn-4.
BACKENDS = ["TRITON", pytest.param("FLASH", marks=needs_flash)]
