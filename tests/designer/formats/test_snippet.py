import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from designer.design import Design
from designer.formats import module_snippet, python_snippet, save_design
from designer.layout import Layout
from tests.factories import random_layout

ROOT = Path(__file__).resolve().parents[3]


def run_snippet(folder, filename: str) -> subprocess.CompletedProcess:
    """The Files tab's snippet for ``filename``, run as a script in ``folder``."""
    script = folder / "load.py"
    script.write_text(python_snippet(filename))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, str(script)], cwd=folder, env=env, capture_output=True, text=True
    )


def test_snippet_runs_and_loads_the_design_both_ways(tmp_path, rng):
    filename = 'it\'s "mine" (v2).pt'
    design = Design(random_layout(rng, n_heads=3, n_q_blocks=4, n_k_blocks=5), name="window")
    save_design(design, tmp_path / filename)
    result = run_snippet(tmp_path, filename)
    assert result.returncode == 0, result.stderr
    first, second, *module = result.stdout.splitlines()
    assert first == f"window (3, 4, 5) block 16 density {design.layout.density}"
    assert second == "window (3, 4, 5) block 16"
    if "cuda" not in module[0]:  # no GPU: the reference, at the design's size (under 1024)
        assert "impl='reference'" in module[0] and "window" in module[0]
        shapes = "torch.Size([1, 3, 64, 64]) torch.Size([1, 3, 64, 64])"
        assert module[-1].endswith(shapes)


def test_without_a_gpu_the_snippet_runs_the_reference_on_the_first_tokens(tmp_path):
    layout = Layout(torch.ones(2, 256, 256, dtype=torch.bool), 64)  # 16384 tokens a side
    save_design(Design(layout, name="long", causal=True), tmp_path / "long.pt")
    code = python_snippet("long.pt").replace("torch.cuda.is_available()", "False")
    (tmp_path / "load.py").write_text(code)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "load.py"], cwd=tmp_path, env=env,
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, result.stderr
    module = "\n".join(result.stdout.splitlines()[2:])
    assert "impl='reference'" in module and "causal=top_left" in module
    assert module.endswith("torch.Size([1, 2, 1024, 64]) torch.Size([1, 2, 1024, 64])")


@pytest.mark.gpu
def test_snippet_trains_through_the_module_on_a_gpu(tmp_path, rng):
    filename = "my design.pt"
    layout = random_layout(rng, n_heads=2, n_q_blocks=8, n_k_blocks=8, density=0.5)
    save_design(Design(layout, name="window", causal=True), tmp_path / filename)
    result = run_snippet(tmp_path, filename)
    assert result.returncode == 0, result.stderr
    module_part = "\n".join(result.stdout.splitlines()[2:])  # after the two loads
    assert "window" in module_part, "the module's repr names the design"
    shapes = "torch.Size([1, 2, 128, 64]) torch.Size([1, 2, 128, 64])"
    assert module_part.rstrip().endswith(shapes)


def from_design_calls(code: str) -> list[ast.Call]:
    return [
        node
        for node in ast.walk(ast.parse(code))
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "from_design"
    ]


@pytest.mark.parametrize("filename", ["mix.pt", 'it\'s "mine" (v2).pt'])
def test_module_use_compiles_and_names_the_downloaded_file(filename):
    for code in (module_snippet(filename), python_snippet(filename)):
        compile(code, "snippet.py", "exec")
        (call,) = from_design_calls(code)
        assert ast.unparse(call.func) == "gpu.BlockSparseAttention.from_design"
        assert [arg.value for arg in call.args] == [filename]
        assert {kw.arg: kw.value.value for kw in call.keywords} == {"device": "cuda"}
    assert len(module_snippet(filename).splitlines()) == 3


def test_file_names_stay_data():
    code = python_snippet("x'); import os; os.system('echo hi'); ('.pt")
    calls = [node for node in ast.walk(ast.parse(code)) if isinstance(node, ast.Import)]
    assert [alias.name for node in calls for alias in node.names] == [
        "numpy",
        "torch",
        "gpu",
        "gpu",
    ]


@pytest.mark.parametrize(
    ("filename", "error", "message"),
    [
        (Path("a.pt"), TypeError, r"filename must be a str, got \w*Path"),
        ("", ValueError, "filename must be 1 to 255 printable characters, got ''"),
        ("a\nb.pt", ValueError, r"printable characters, got 'a\\nb.pt'"),
        ("a" * 256, ValueError, "filename must be 1 to 255 printable characters"),
    ],
)
def test_bad_file_names_are_refused(filename, error, message):
    with pytest.raises(error, match=message):
        python_snippet(filename)
    with pytest.raises(error, match=message):
        module_snippet(filename)
