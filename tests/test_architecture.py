"""The import rule between the top-level packages, read from the source (parsed, never imported).

Arrows run one way: ``designer`` (the model) ← ``gpu`` (kernels and bench) ← ``ui`` (views) ←
``app.py``, with the scripts (``benchmarks/``, ``tools/``, ``examples/``) on top:

- ``designer`` imports none of ``gpu``, ``ui``, streamlit, plotly, cupy;
- ``gpu`` imports none of ``ui``, streamlit, plotly;
- only ``gpu`` imports cupy, and lazily: never at a module's top level, so that importing it on
  a machine without CUDA works;
- only ``ui`` and ``app.py`` import streamlit and plotly;
- no package imports a script (``app``, ``benchmarks``, ``examples``, ``scripts``, ``tests``,
  ``tools``): the wheel carries the packages alone.

Every ``import`` counts, at the top of a module or inside a function, and so does
``importlib.import_module`` / ``__import__`` of a literal name; text that only looks like an
import (a code snippet the app exports, a docstring) is a string, not an import.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CUPY = frozenset({"cupy", "cupyx", "cupy_backends"})
VIEWS = frozenset({"streamlit", "plotly"})
SCRIPTS = frozenset({"app", "benchmarks", "examples", "scripts", "tests", "tools"})
#: What each part of the tree may not import (top-level module names).
MAY_NOT_IMPORT = {
    "designer": frozenset({"gpu", "ui"}) | VIEWS | CUPY | SCRIPTS,
    "gpu": frozenset({"ui"}) | VIEWS | SCRIPTS,
    "ui": CUPY | SCRIPTS,
    "app.py": CUPY,
}
#: Parts that may import these modules inside functions only.
LAZY_ONLY = {"gpu": CUPY}
IMPORT_CALLS = frozenset({"import_module", "__import__"})


@dataclass(frozen=True)
class Import:
    """One import in a source file: the module's full name, its line, and whether it runs only
    when a function is called."""

    module: str
    line: int
    lazy: bool

    @property
    def top(self) -> str:
        return self.module.split(".")[0]


def module_name(path: Path, root: Path) -> str:
    """``designer/formats/csr.py`` -> ``designer.formats.csr``; a package's ``__init__`` is the
    package itself."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_in(path: Path, root: Path) -> list[Import]:
    """Every import in ``path``, relative ones resolved against its package."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    name = module_name(path, root)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: list[Import] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        if isinstance(node, ast.Import):
            found.extend(Import(alias.name, node.lineno, lazy) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            if module:
                found.append(Import(module, node.lineno, lazy))
            else:  # ``from ... import x`` reaching the root names the modules themselves
                found.extend(Import(alias.name, node.lineno, lazy) for alias in node.names)
        elif isinstance(node, ast.Call) and _literal_import(node):
            found.append(Import(node.args[0].value, node.lineno, lazy))
        inside = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(tree, False)
    return found


def _literal_import(call: ast.Call) -> bool:
    func = call.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return (
        called in IMPORT_CALLS
        and bool(call.args)
        and isinstance(call.args[0], ast.Constant)
        and isinstance(call.args[0].value, str)
    )


def sources(root: Path) -> dict[str, list[Path]]:
    """The Python files of each part of the tree under ``root``."""
    parts = {
        part: sorted((root / part).rglob("*.py")) for part in MAY_NOT_IMPORT if part != "app.py"
    }
    parts["app.py"] = [root / "app.py"] if (root / "app.py").exists() else []
    return parts


def violations(root: Path) -> list[str]:
    """Each import under ``root`` that breaks the rule, as ``path:line: what``."""
    found = []
    for part, paths in sources(root).items():
        for path in paths:
            where = path.relative_to(root).as_posix()
            for imported in imports_in(path, root):
                if imported.top in MAY_NOT_IMPORT[part]:
                    found.append(f"{where}:{imported.line}: {part} imports {imported.module}")
                elif imported.top in LAZY_ONLY.get(part, ()) and not imported.lazy:
                    found.append(
                        f"{where}:{imported.line}: {part} imports {imported.module} at the top "
                        "of a module (import it inside the function that needs it)"
                    )
    return found


def test_the_tree_keeps_the_import_rule():
    assert violations(ROOT) == []


def test_the_scan_sees_every_part():
    parts = sources(ROOT)
    assert all(parts.values()), {part: len(paths) for part, paths in parts.items()}
    lazy_cupy = [
        imported
        for path in parts["gpu"]
        for imported in imports_in(path, ROOT)
        if imported.top in CUPY
    ]
    assert lazy_cupy and all(imported.lazy for imported in lazy_cupy)
    snippet = ROOT / "designer" / "formats" / "snippet.py"
    assert "import gpu" in snippet.read_text()  # in the code it writes for the user: a string
    assert all(imported.top != "gpu" for imported in imports_in(snippet, ROOT))


def test_the_checker_catches_each_kind_of_violation(tmp_path):
    files = {
        "designer/__init__.py": "",
        "designer/eager.py": "import gpu.plans\nfrom streamlit import session_state\n",
        "designer/lazy.py": "def f():\n    from ui.keys import DESIGN\n",
        "designer/formats/__init__.py": "",
        "designer/formats/relative.py": "from ..layout import Layout\nfrom ... import ui\n",
        "designer/formats/snippet.py": 'CODE = """import gpu\nimport cupy\n"""\n',
        "designer/dynamic.py": "import importlib\nimportlib.import_module('plotly.express')\n",
        "gpu/__init__.py": "",
        "gpu/runtime.py": "import cupy\n\ndef load():\n    import cupy\n    import cupyx\n",
        "gpu/probe.py": "try:\n    from cupy_backends.cuda import x\nexcept ImportError:\n    ...",
        "gpu/bench/__init__.py": "",
        "gpu/bench/panel.py": "def draw():\n    import plotly.graph_objects\nimport ui\n",
        "gpu/bench/script.py": "from tools.sanitize import main\n",
        "ui/__init__.py": "import streamlit\nimport plotly\nimport gpu\nimport designer\n",
        "ui/gpu_info.py": "def info():\n    return __import__('cupy')\n",
        "app.py": "import streamlit\nimport ui\nimport cupy\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    eager = "at the top of a module (import it inside the function that needs it)"
    assert sorted(violations(tmp_path)) == sorted(
        [
            "designer/eager.py:1: designer imports gpu.plans",
            "designer/eager.py:2: designer imports streamlit",
            "designer/lazy.py:2: designer imports ui.keys",
            "designer/formats/relative.py:2: designer imports ui",
            "designer/dynamic.py:2: designer imports plotly.express",
            f"gpu/runtime.py:1: gpu imports cupy {eager}",
            f"gpu/probe.py:2: gpu imports cupy_backends.cuda {eager}",
            "gpu/bench/panel.py:2: gpu imports plotly.graph_objects",
            "gpu/bench/panel.py:3: gpu imports ui",
            "gpu/bench/script.py:1: gpu imports tools.sanitize",
            "ui/gpu_info.py:2: ui imports cupy",
            "app.py:3: app.py imports cupy",
        ]
    )
