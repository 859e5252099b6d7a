"""The strongest Hopper peers of our kernels, and whether their Python packages are here.

- ``flex_flash``: FlexAttention on its FLASH backend, FlashAttention-4 written in NVIDIA's CuTe
  DSL (``flash-attn-4``, ``nvidia-cutlass-dsl``; torch 2.11 or newer has the backend);
- ``cudnn_bsa``: cuDNN frontend's block-sparse attention (``nvidia-cudnn-frontend`` >= 1.32,
  also on the CuTe DSL);
- ``fa4``: FlashAttention-4's own call, ``flash_attn.cute.flash_attn_func``.

``pip install -e ".[peers]"`` installs them (``pyproject.toml``: the versions seen working on
the H200 with torch 2.11 and CUDA 13; the CuTe DSL packages have ``cu12`` builds too). Without
them each peer is "unavailable" with the ``pip install`` line that brings it, and nothing else
changes. The checks only look for the packages' files: nothing is imported until a peer runs.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch

#: What brings every peer at once.
PEERS_EXTRA = 'pip install -e ".[peers]"'
#: The oldest cuDNN frontend with block-sparse attention on Hopper.
CUDNN_FRONTEND_MIN = (1, 32)
#: The requirements of the ``peers`` extra, as ``pyproject.toml`` spells them.
FA4_REQUIREMENT = "flash-attn-4[cu13]==4.0.0b36"
CUTE_DSL_REQUIREMENT = "nvidia-cutlass-dsl[cu13]>=4.8.1,<4.9"
CUDNN_REQUIREMENT = "nvidia-cudnn-frontend>=1.32,<1.33"


@dataclass(frozen=True)
class Peer:
    """A peer contender: the packages it needs (module, submodule path, pip name)."""

    name: str
    needs: tuple[tuple[str, str, str], ...]  # (module, a file it holds, requirement)
    torch_flash_backend: bool = False


CUTE_DSL = ("cutlass", "", CUTE_DSL_REQUIREMENT)
FA4 = ("flash_attn", "cute/interface.py", FA4_REQUIREMENT)
CUDNN = ("cudnn", "block_sparse_attention/api.py", CUDNN_REQUIREMENT)
PEERS = {
    "flex_flash": Peer("flex_flash", (FA4, CUTE_DSL), torch_flash_backend=True),
    "cudnn_bsa": Peer("cudnn_bsa", (CUDNN, CUTE_DSL)),
    "fa4": Peer("fa4", (FA4, CUTE_DSL)),
}


def missing(name: str) -> str | None:
    """Why peer ``name`` cannot run here for want of a package ("not installed: pip install
    ..."), or None when it has what it needs (or ``name`` is not a peer).

    >>> missing("fused") is None
    True
    """
    peer = PEERS.get(name)
    if peer is None:
        return None
    absent = [pip for module, part, pip in peer.needs if not _has(module, part)]
    old_cudnn = CUDNN_REQUIREMENT not in absent and _cudnn_frontend_version() < CUDNN_FRONTEND_MIN
    if CUDNN in peer.needs and old_cudnn:
        absent.append(CUDNN_REQUIREMENT)
    if absent:
        quoted = " ".join(f'"{requirement}"' for requirement in absent)
        return f"not installed: pip install {quoted} (or {PEERS_EXTRA})"
    if peer.torch_flash_backend and not _torch_has_flash_backend():
        return (
            f"torch {torch.__version__} has no FlexAttention FLASH backend: it needs torch 2.11 "
            "or newer"
        )
    return None


def installed(name: str) -> bool:
    """Whether peer ``name`` has its packages (``missing`` says what is absent)."""
    return missing(name) is None


def _has(module: str, part: str) -> bool:
    """Whether top-level ``module`` is importable and holds the file ``part`` (not imported)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    if not part:
        return True
    return any((Path(root) / part).is_file() for root in spec.submodule_search_locations or ())


def _cudnn_frontend_version() -> tuple[int, ...]:
    """The installed frontend's ``(major, minor)``; a copy without metadata counts as new enough
    (its block-sparse module is there)."""
    try:
        text = version("nvidia-cudnn-frontend")
    except PackageNotFoundError:
        return CUDNN_FRONTEND_MIN
    numbers = []
    for part in text.split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit())
        numbers.append(int(digits or 0))
    return tuple(numbers)


def _torch_has_flash_backend() -> bool:
    flex = Path(torch.__file__).parent / "_inductor" / "kernel" / "flex"
    return (flex / "flex_flash_attention.py").is_file()
