"""Loading the repository's scripts (``benchmarks/``, ``tools/``, ``examples/``) in tests: they are
files, not modules of a package."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).parents[1]


def load_script(path: str) -> ModuleType:
    """``<path>.py`` under the repository root (``"tools/sanitize"``) imported as a module named
    after its file (registered, so its dataclasses find their module)."""
    name = Path(path).name
    spec = importlib.util.spec_from_file_location(name, ROOT / f"{path}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
